"""Progress counts: appended by workers, summed by the launcher, one line per stage with rate and ETA."""

import json
import os
import pickle
import threading

from shardmill.transforms.common.progress import ProgressLog, ProgressPrinter, format_stage, read_progress


def test_counts_from_several_workers_are_summed_and_totals_taken_once(tmp_path):
    logs = [pickle.loads(pickle.dumps(ProgressLog(str(tmp_path)))) for _ in range(3)]  # as Beam ships them
    for log in logs:
        log.record("load", total_records=900)
        log.record("load", tasks=1, records=100)
        log.record("load", tasks=2, records=200)
    logs[0].record("write", total_shards=4)
    logs[1].record("write", shards=1, rows=250)
    stages = read_progress(str(tmp_path))
    assert len(os.listdir(tmp_path)) == 3
    assert {k: v for k, v in stages["load"].items() if not k.endswith("_t")} == {
        "total_records": 900, "tasks": 9, "records": 900}
    assert stages["write"]["shards"] == 1 and stages["write"]["total_shards"] == 4


def test_a_line_being_written_is_skipped_not_fatal(tmp_path):
    (tmp_path / "w.jsonl").write_text(json.dumps({"stage": "index", "t": 1.0, "files": 2, "chunks": 7}) + '\n{"sta')
    assert read_progress(str(tmp_path))["index"]["chunks"] == 7


def test_without_a_directory_or_after_it_is_gone_nothing_is_written(tmp_path):
    ProgressLog(None).record("load", records=1)
    gone = tmp_path / "discarded"
    log = ProgressLog(str(gone))
    log.record("load", records=1)  # the run's staging was discarded: dropped, never recreated
    log.record("load", records=1)
    assert not gone.exists()


def test_stage_lines_give_done_of_total_rate_and_eta():
    load = {"first_t": 100.0, "last_t": 110.0, "total_records": 4000, "tasks": 3, "records": 1000}
    assert format_stage("load", load) == "load: 3 tasks, 1,000 of 4,000 records (25%), 100 records/s, ETA 0:30"
    write = {"first_t": 0.0, "last_t": 20.0, "total_shards": 10, "shards": 4, "rows": 4000}
    assert format_stage("write", write) == "write: 4 of 10 shards, 4,000 rows, ETA 0:30"
    done = {"first_t": 0.0, "last_t": 5.0, "total_records": 10, "tasks": 1, "records": 10}
    assert "ETA" not in format_stage("load", done)
    assert format_stage("index", {"first_t": 0, "last_t": 0, "files": 1200, "chunks": 50000}) == \
        "index: 1,200 files, 50,000 chunks"


def test_the_printer_logs_a_stage_only_when_its_counts_change(tmp_path, caplog):
    caplog.set_level("INFO", logger="shardmill.transforms.common.progress")
    log = ProgressLog(str(tmp_path))
    printer = ProgressPrinter(str(tmp_path), interval=3600)
    log.record("index", files=1, chunks=10)
    printer.report()
    printer.report()
    log.record("index", files=1, chunks=5)
    printer.start()
    printer.stop()
    printer.stop()  # idempotent
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["progress: index: 1 files, 10 chunks", "progress: index: 2 files, 15 chunks"]


def test_label_and_token_jobs_report_their_sampling_stages():
    sample = {"first_t": 0, "last_t": 10, "partitions": 3, "records": 50_000, "bytes": 25 << 20,
              "total_bytes": 100 << 20}
    assert format_stage("sample", sample) == \
        "sample: 3 partitions, 50,000 records, 25 of 100 MiB (25%), 5,000 records/s, ETA 0:30"
    samples = {"first_t": 0, "last_t": 4, "ranges": 2, "samples": 1000, "total_samples": 2000}
    assert format_stage("samples", samples) == "samples: 2 ranges, 1,000 of 2,000 samples (50%), 250 samples/s, ETA 0:04"


def test_threads_recording_at_once_share_one_file_and_every_count_arrives(tmp_path):
    for attempt in range(10):  # the first record() of each log is where threads race
        directory = tmp_path / str(attempt)
        directory.mkdir()
        log = ProgressLog(str(directory))
        start = threading.Barrier(8)

        def record():
            start.wait()
            for _ in range(10):
                log.record("load", tasks=1)

        threads = [threading.Thread(target=record) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(os.listdir(directory)) == 1
        assert read_progress(str(directory))["load"]["tasks"] == 80
