"""Event sources for label sampling: three formats, every malformed row dead-lettered with its line."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardmill.transforms.events.formats import EventReadOptions
from shardmill.transforms.events.readers import read_events
from tests.support.local_files import local_open


def read(path, label="clicked", targets=("1",)):
    return read_events(str(path), EventReadOptions(label, tuple(targets)), opener=local_open)


def test_csv_keeps_columns_and_types_and_names_malformed_lines(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("id,user,clicked\n1,a,0\n2,b,1\n3,c,0,extra\n4,d,0\n5,e\n6,f,1\n")
    part = read(path)
    assert part.table.column_names == ["id", "user", "clicked"]
    assert part.table["id"].to_pylist() == [1, 2, 4, 6] and part.table.schema.field("id").type == pa.int64()
    assert part.is_target.to_pylist() == [False, True, False, True]
    assert [(d.reason, d.member) for d in part.dead_letters] == [("malformed_row", "line 4"), ("malformed_row", "line 6")]
    assert all(d.path == str(path) for d in part.dead_letters)


def test_csv_with_a_late_unconvertible_value_is_read_as_strings_not_dropped(tmp_path):
    path = tmp_path / "late.csv"
    rows = "".join(f"{i},{i % 2}\n" for i in range(5000)) + "oops,1\n"
    path.write_text("id,clicked\n" + rows)
    part = read(path)
    assert part.table.num_rows == 5001 and part.table.schema.field("id").type == pa.string()
    assert sum(part.is_target.to_pylist()) == 2501


def test_tsv_and_string_labels(tmp_path):
    path = tmp_path / "events.tsv"
    path.write_text("id\tevent\n1\timpression\n2\tclick\n3\tpurchase\n")
    part = read(path, label="event", targets=["click", "purchase"])
    assert part.is_target.to_pylist() == [False, True, True] and not part.dead_letters


def test_json_lines_name_each_bad_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"id": 1, "clicked": 1}\n{"id": 2, "clicked": 0\n{"id": 3, "clicked": 0}\n[1, 2]\n')
    part = read(path)
    assert part.table["id"].to_pylist() == [1, 3] and part.is_target.to_pylist() == [True, False]
    assert [d.member for d in part.dead_letters] == ["line 2", "line 4"]


def test_parquet_and_null_labels(tmp_path):
    path = tmp_path / "events.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "clicked": [1, None, 0]}), path)
    part = read(path)
    assert part.table["id"].to_pylist() == [1, 3] and part.is_target.to_pylist() == [True, False]
    assert [(d.reason, d.member) for d in part.dead_letters] == [("malformed_row", "row 1")]


def test_missing_label_column_and_unreadable_files_are_one_dead_letter(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("id,label\n1,0\n")
    part = read(path)
    assert [d.reason for d in part.dead_letters] == ["missing_label_column"] and part.table.num_rows == 0
    assert "columns: id, label" in part.dead_letters[0].detail
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"not parquet")
    assert [d.reason for d in read(bad).dead_letters] == ["unreadable"]
    assert [d.reason for d in read(tmp_path / "x.xml").dead_letters] == ["unreadable"]


# ---- ranges of large files ----------------------------------------------------

from shardmill.transforms.events.partitions import split_file  # noqa: E402


def read_range(part, label="clicked"):
    return read_events(part, EventReadOptions(label), opener=local_open)


def test_large_csv_splits_on_line_boundaries_and_keeps_file_line_numbers(tmp_path):
    lines = ["id,clicked"] + [f"{i},{int(i % 9 == 0)}" for i in range(2000)]
    lines[1500] = "bad,row,here"  # file line 1501
    path = tmp_path / "big.csv"
    path.write_text("\n".join(lines) + "\n")
    ranges = split_file(str(path), path.stat().st_size, 4000, opener=local_open)
    assert len(ranges) > 3 and [r.name for r in ranges][:2] == ["big.csv#0", "big.csv#1"]
    parts = [read_range(r) for r in ranges]
    ids = [i for p in parts for i in p.table["id"].to_pylist()]
    assert ids == [i for i in range(2000) if i != 1499]
    dead = [d for p in parts for d in p.dead_letters]
    assert [(d.reason, d.member) for d in dead] == [("malformed_row", "line 1501")]
    assert sum(sum(p.is_target.to_pylist()) for p in parts) == sum(1 for i in range(2000) if i % 9 == 0 and i != 1499)


def test_large_json_lines_split_and_name_global_lines(tmp_path):
    path = tmp_path / "big.jsonl"
    rows = [f'{{"id": {i}, "clicked": {int(i % 5 == 0)}}}' for i in range(1000)]
    rows[700] = "{broken"
    path.write_text("\n".join(rows) + "\n")
    ranges = split_file(str(path), path.stat().st_size, 3000, opener=local_open)
    parts = [read_range(r) for r in ranges]
    assert len(ranges) > 3
    assert [i for p in parts for i in p.table["id"].to_pylist()] == [i for i in range(1000) if i != 700]
    assert [d.member for p in parts for d in p.dead_letters] == ["line 701"]


def test_large_parquet_splits_by_row_groups(tmp_path):
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"id": list(range(10_000)), "clicked": [i % 7 == 0 for i in range(10_000)]}),
                   path, row_group_size=1000)
    ranges = split_file(str(path), path.stat().st_size, 20_000, opener=local_open)
    assert len(ranges) > 1 and ranges[0].first_group == 0 and ranges[-1].end_group == 10
    parts = [read_events(r, EventReadOptions("clicked", ("True",)), opener=local_open) for r in ranges]
    assert [i for p in parts for i in p.table["id"].to_pylist()] == list(range(10_000))


def test_small_files_are_one_partition_named_after_the_file(tmp_path):
    path = tmp_path / "small.csv"
    path.write_text("id,clicked\n1,1\n")
    (only,) = split_file(str(path), path.stat().st_size, 1 << 20, opener=local_open)
    assert only.name == "small.csv" and read_range(only).table.num_rows == 1


# ---- logs as they really arrive --------------------------------------------------

import csv  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402

import numpy as np  # noqa: E402

from shardmill.transforms.events.partitions import common_root  # noqa: E402
from shardmill.transforms.events.record_ends import RecordEndScanner


def _quoted_csv(rows: int) -> str:
    """Comments with quoted newlines, commas and doubled quotes, several per ~600 bytes."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "comment", "clicked"])
    for i in range(rows):
        comment = f'line one of {i}\n"quoted", second line\n,third' if i % 3 == 0 else f"plain {i}"
        writer.writerow([i, comment, int(i % 4 == 0)])
    return out.getvalue()


def test_splitting_a_csv_never_cuts_inside_a_quoted_field(tmp_path):
    path = tmp_path / "quoted.csv"
    path.write_text(_quoted_csv(600))
    data = path.read_bytes()
    # Without quote awareness some cuts would land inside a field: the test can fail.
    inside = [n for n in range(500, len(data), 500) if data.count(b'"', 0, data.find(b"\n", n)) % 2]
    assert inside
    ranges = split_file(str(path), len(data), 500, opener=local_open)
    assert len(ranges) > 20
    parts = [read_range(r) for r in ranges]
    whole = read(path)
    assert not [d for p in parts for d in p.dead_letters] and not whole.dead_letters
    assert pa.concat_tables([p.table for p in parts]).equals(whole.table)
    assert whole.table["id"].to_pylist() == list(range(600))


def test_a_csv_with_a_stray_quote_is_read_whole_and_says_why(tmp_path):
    path = tmp_path / "stray.csv"
    path.write_text("id,comment,clicked\n" + "".join(f'{i},say "hi" {i},{i % 2}\n' for i in range(400)))
    (only,) = split_file(str(path), path.stat().st_size, 500, opener=local_open)
    assert only.count == 1 and only.not_split.startswith("line 2: a quote inside an unquoted field")
    assert read_range(only).table.num_rows == 400


def test_record_ends_count_only_newlines_outside_quotes():
    csv_scanner, json_scanner = RecordEndScanner("csv"), RecordEndScanner("jsonl")
    ends, _ = csv_scanner.feed(b'a,b\n1,"x\ny"\n2,"p""q\nr"\n3,z\n')
    assert csv_scanner.why == "" and ends.tolist() == [4, 12, 23, 27]
    assert json_scanner.feed(b'{"a": "x\\ny"}\n{"a": 1}\n')[0].tolist() == [14, 23]


def test_headerless_tsv_in_the_article_layout_reads_every_line(tmp_path):
    rng = np.random.default_rng(3)
    clicks = (rng.random(2000) < 0.03).astype(int)
    path = tmp_path / "day.tsv"
    path.write_text("".join(f"{c}\t{i}\t{i * 7 % 13}\tad{i % 5}\n" for i, c in enumerate(clicks)))
    options = EventReadOptions("is_click", ("1",), ("is_click", "i1", "i2", "c1"), (("i2", "string"),))
    part = read_events(str(path), options, opener=local_open)
    assert part.table.num_rows == 2000 and part.table.column_names == ["is_click", "i1", "i2", "c1"]
    assert part.table.schema.field("i2").type == pa.string() and part.table.schema.field("i1").type == pa.int64()
    assert part.target_mask().sum() == clicks.sum() and not part.dead_letters
    ranges = split_file(str(path), path.stat().st_size, 3000, opener=local_open)
    split = [read_events(r, options, opener=local_open) for r in ranges]
    assert len(ranges) > 3 and sum(p.table.num_rows for p in split) == 2000
    assert pa.concat_tables([p.table for p in split])["i1"].to_pylist() == list(range(2000))


def test_null_labels_and_bad_rows_are_named_by_file_line_in_csv(tmp_path):
    path = tmp_path / "nulls.csv"
    # Line 1 header; 2-3 one record with a quoted newline; 4 blank; 5 bad; 6 null label; 7 ok; 8 null label.
    path.write_text('id,note,clicked\n1,"two\nlines",1\n\n2,x\n3,y,\n4,z,0\n5,w,\n')
    part = read(path)
    assert part.table["id"].to_pylist() == [1, 4]
    assert [(d.reason, d.member) for d in part.dead_letters] == [
        ("malformed_row", "line 5"), ("malformed_row", "line 6"), ("malformed_row", "line 8")]
    assert "clicked is null" in part.dead_letters[1].detail


def test_null_labels_are_named_by_file_line_in_csv_ranges(tmp_path):
    lines = ["id,clicked"] + [f"{i},{i % 3 == 0:d}" for i in range(3000)]
    lines[2500] = "2499,"  # file line 2501
    path = tmp_path / "big.csv"
    path.write_text("\n".join(lines) + "\n")
    ranges = split_file(str(path), path.stat().st_size, 4000, opener=local_open)
    dead = [d.member for r in ranges for d in read_range(r).dead_letters]
    assert len(ranges) > 3 and dead == ["line 2501"]


def test_null_labels_are_named_by_file_line_in_json_lines(tmp_path):
    path = tmp_path / "nulls.jsonl"
    path.write_text('{"id": 1, "clicked": 1}\n\n{"id": 2, "clicked": null}\n{"id": 3}\n{"id": 4, "clicked": 0}\n')
    assert [d.member for d in read(path).dead_letters] == ["line 3", "line 4"]
    path.write_text('{"id": 1, "clicked": 1}\n\n{"id": 2, "clicked": null}\n{broken\n{"id": 4}\n')
    assert [d.member for d in read(path).dead_letters] == ["line 4", "line 3", "line 5"]


def test_boolean_labels_match_true_and_one(tmp_path):
    path = tmp_path / "bools.jsonl"
    path.write_text("".join(json.dumps({"id": i, "clicked": i % 3 == 0}) + "\n" for i in range(9)))
    expected = [i % 3 == 0 for i in range(9)]
    for targets in (("1",), ("true",), ("True",)):
        assert read(path, targets=targets).is_target.to_pylist() == expected
    assert read(path, targets=("0",)).is_target.to_pylist() == [not e for e in expected]
    assert read(path, targets=("yes",)).is_target.to_pylist() == [False] * 9
    floats = tmp_path / "floats.parquet"
    pq.write_table(pa.table({"clicked": [1.0, 0.0, 2.5]}), floats)
    assert read(floats, targets=("1",)).is_target.to_pylist() == [True, False, False]


def test_a_nested_label_column_dead_letters_the_file(tmp_path):
    path = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"id": [1, 2], "clicked": [{"v": 1}, {"v": 0}]}), path)
    part = read(path)
    assert part.table.num_rows == 0 and [d.reason for d in part.dead_letters] == ["unsupported_label_type"]
    assert "'clicked' is struct<v: int64>" in part.dead_letters[0].detail
    lists = tmp_path / "lists.jsonl"
    lists.write_text('{"clicked": [1]}\n')
    assert [d.reason for d in read(lists).dead_letters] == ["unsupported_label_type"]


def test_partitions_are_named_by_their_path_below_the_inputs_root(tmp_path):
    for day in ("2026-11-01", "2026-11-02"):
        (tmp_path / "logs" / day).mkdir(parents=True)
        (tmp_path / "logs" / day / "part-0.csv").write_text("id,clicked\n1,1\n")
    logs = str(tmp_path / "logs")
    assert common_root([logs]) == logs + "/"
    assert common_root([f"{logs}/2026-11-01", f"{logs}/2026-11-02/part-0.csv"]) == logs + "/"
    assert common_root([f"{logs}/*/part-*.csv"]) == logs + "/"
    names = [split_file(f"{logs}/{day}/part-0.csv", 10, 1 << 20, root=logs + "/")[0].name
             for day in ("2026-11-01", "2026-11-02")]
    assert names == ["2026-11-01/part-0.csv", "2026-11-02/part-0.csv"]


@pytest.mark.slow
def test_an_object_store_prefix_is_its_own_root_as_a_local_directory_is(s3_server, tmp_path):
    (tmp_path / "logs" / "2026-11-01").mkdir(parents=True)
    (tmp_path / "logs" / "2026-11-01" / "part-0.csv").write_text("id,clicked\n1,1\n")
    s3_server.create_bucket("roots")
    s3_server.upload(str(tmp_path / "logs"), "roots/logs")
    assert common_root(["s3://roots/logs"]) == "s3://roots/logs/"  # a prefix, not an object
    assert common_root(["s3://roots/logs/2026-11-01/part-0.csv"]) == "s3://roots/logs/2026-11-01/"  # an object
    assert common_root(["s3://roots/logs/*/part-*.csv"]) == "s3://roots/logs/"
    assert common_root(["s3://roots/x", "s3://other/y"]) == ""


@pytest.mark.parametrize("block", [1, 7, 64, 1000])
def test_splitting_scans_in_blocks_with_the_same_cuts_as_one_pass(tmp_path, monkeypatch, block):
    from shardmill.transforms.events import partitions

    path = tmp_path / "quoted.csv"
    path.write_text(_quoted_csv(300))
    size = path.stat().st_size
    whole = split_file(str(path), size, 700, opener=local_open)
    monkeypatch.setattr(partitions, "SCAN_BLOCK_BYTES", block)
    assert split_file(str(path), size, 700, opener=local_open) == whole and len(whole) > 5
    stray = tmp_path / "stray.csv"
    stray.write_text("id,note,clicked\n" + "".join(f'{i},"a"b,{i % 2}\n' for i in range(200)))  # b after a close
    (only,) = split_file(str(stray), stray.stat().st_size, 500, opener=local_open)
    assert only.not_split.startswith("line 2: a quote inside an unquoted field (byte 20)")


def test_splitting_never_holds_more_than_a_block_of_the_file(tmp_path, monkeypatch):
    from shardmill.transforms.events import partitions

    path = tmp_path / "big.csv"
    path.write_text(_quoted_csv(2000))
    reads = []

    class Recording(io.FileIO):
        def read(self, size=-1):
            reads.append(size)
            return super().read(size)

    monkeypatch.setattr(partitions, "SCAN_BLOCK_BYTES", 4096)
    ranges = split_file(str(path), path.stat().st_size, 10_000, opener=lambda p: Recording(p, "rb"))
    assert len(ranges) > 4 and reads and all(0 < size <= 4096 for size in reads)


def test_json_lines_end_only_at_newlines_not_at_unicode_line_separators(tmp_path):
    path = tmp_path / "separators.jsonl"
    rows = ['{"id": 1, "note": "a\u2028b\u0085c", "clicked": 1}', '{"id": 2, "clicked": null}', "{broken",
            '{"id": 3, "note": "\u2029", "clicked": 0}']
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    part = read(path)
    assert part.table["id"].to_pylist() == [1, 3] and part.table["note"].to_pylist()[0] == "a\u2028b\u0085c"
    assert sorted(d.member for d in part.dead_letters) == ["line 2", "line 3"]


# ---- compressed logs ------------------------------------------------------------------

COMPRESSED_TEXTS = {
    "csv": 'id,note,clicked\n1,"two\nlines",1\n\n2,x\n3,y,\n4,z,0\n5,w,\n',
    "tsv": 'id\tnote\tclicked\n1\t"two\nlines"\t1\n\n2\tx\n3\ty\t\n4\tz\t0\n5\tw\t\n',
    "jsonl": '{"id": 1, "note": "a", "clicked": 1}\n\n{"id": 2, "clicked": null}\n{broken\n{"id": 4, "clicked": 0}\n',
}


def compress(data: bytes, codec: str) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, codec) as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("codec, suffix", [("gzip", ".gz"), ("zstd", ".zst"), ("bz2", ".bz2")])
@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_compressed_logs_read_like_the_plain_file_with_the_same_line_numbers(tmp_path, codec, suffix, fmt):
    plain = tmp_path / f"events.{fmt}"
    plain.write_text(COMPRESSED_TEXTS[fmt])
    packed = tmp_path / f"events.{fmt}{suffix}"
    packed.write_bytes(compress(COMPRESSED_TEXTS[fmt].encode(), codec))
    expected, got = read(plain), read(packed)
    assert got.table.equals(expected.table) and got.table.num_rows >= 2
    assert got.is_target.equals(expected.is_target)
    assert [(d.reason, d.member) for d in got.dead_letters] == [(d.reason, d.member) for d in expected.dead_letters]
    assert got.dead_letters and all(d.path == str(packed) for d in got.dead_letters)


def test_a_compressed_log_is_one_partition_and_says_why(tmp_path):
    packed = tmp_path / "big.csv.gz"
    packed.write_bytes(compress(("id,clicked\n" + "".join(f"{i},1\n" for i in range(20000))).encode(), "gzip"))
    ranges = split_file(str(packed), packed.stat().st_size, 100, opener=local_open)
    assert len(ranges) == 1 and ranges[0].not_split == "gzip-compressed: a compressed stream is read whole"


def test_a_compressed_log_of_short_records_is_read_whole_however_far_it_inflates(tmp_path, monkeypatch):
    from shardmill.transforms.events import record_ends

    monkeypatch.setattr(record_ends, "STREAM_BLOCK_BYTES", 1 << 16)
    monkeypatch.setattr(record_ends, "MAX_RECORD_BYTES", 1 << 20)
    packed = tmp_path / "bomb.csv.gz"
    packed.write_bytes(compress(b"id,clicked\n" + b"1,1\n" * (1 << 20), "gzip"))  # 4 MiB from ~4 kB
    part = read(packed)
    assert part.table.num_rows == 1 << 20 and not part.dead_letters


def test_an_over_long_record_is_one_dead_letter_at_its_line_and_the_rest_is_read(tmp_path, monkeypatch):
    from shardmill.transforms.events import record_ends

    monkeypatch.setattr(record_ends, "STREAM_BLOCK_BYTES", 1 << 16)
    monkeypatch.setattr(record_ends, "MAX_RECORD_BYTES", 1 << 20)
    rows = "".join(f"{i},{i % 2}\n" for i in range(30_000)).encode()
    packed = tmp_path / "long.csv.gz"
    packed.write_bytes(compress(b"id,clicked\n" + rows + b'7,"' + b"x" * (3 << 20) + b'\n",1\n' + rows, "gzip"))
    part = read(packed)
    assert part.table.num_rows == 60_000 and part.table["id"].to_pylist()[30_000] == 0
    assert [(d.reason, d.member, d.records) for d in part.dead_letters] == [("over_long_record", "line 30002", 1)]
    assert "a record of 3,145,736 bytes or more, longer than the 1 MiB a record may hold" in \
        part.dead_letters[0].detail


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_compressed_log_read_in_blocks_gives_the_plain_files_rows_types_and_dead_letters(tmp_path, monkeypatch,
                                                                                          fmt):
    from shardmill.transforms.events import record_ends
    from shardmill.transforms.events.readers import scan_events

    lines = []
    for i in range(3000):  # types drift between blocks: ints then floats, empty then text, keys appearing late
        if fmt == "csv":
            note = f'"two\nlines {i}"' if i % 97 == 0 else ("" if i < 1500 else f"n{i}")
            lines.append(f"{i},{i if i < 2000 else i / 4},{note},{int(i % 7 == 0)}" if i % 500 != 3 else "bad,row")
        else:
            row = {"id": i, "clicked": int(i % 7 == 0)} if i % 500 != 3 else {"id": i, "clicked": None}
            row.update({"w": i if i < 2000 else i / 4} if i > 1000 else {})
            row.update({"ctx": {"a": i}} if 1500 < i < 2500 else {"ctx": {"a": i, "b": "x"}} if i >= 2500 else {})
            lines.append(json.dumps(row))
    text = ("id,w,note,clicked\n" if fmt == "csv" else "") + "\n".join(lines) + "\n"
    plain = tmp_path / f"events.{fmt}"
    plain.write_text(text)
    packed = tmp_path / f"events.{fmt}.gz"
    packed.write_bytes(compress(text.encode(), "gzip"))
    monkeypatch.setattr(record_ends, "STREAM_BLOCK_BYTES", 4096)
    assert len(scan_events(str(packed), EventReadOptions("clicked"), opener=local_open).block_rows) > 10
    expected, got = read(plain), read(packed)
    assert got.table.schema == expected.table.schema and got.table.equals(expected.table)
    assert got.is_target.equals(expected.is_target) and got.table.num_rows > 2900
    assert [(d.reason, d.member) for d in got.dead_letters] == [(d.reason, d.member) for d in expected.dead_letters]
    assert len(got.dead_letters) == 6


def test_a_compressed_log_read_in_blocks_keeps_its_hive_columns_in_its_schema(tmp_path, monkeypatch):
    from shardmill.transforms.events import record_ends
    from shardmill.transforms.events.partitions import EventRange
    from shardmill.transforms.events.readers import scan_events

    monkeypatch.setattr(record_ends, "STREAM_BLOCK_BYTES", 4096)
    packed = tmp_path / "events.csv.gz"
    packed.write_bytes(compress(("id,clicked\n" + "".join(f"{i},{i % 3}\n" for i in range(5000))).encode(), "gzip"))
    part = EventRange(str(packed), relative="dt=2026-11-01/events.csv.gz", size=packed.stat().st_size)
    options = EventReadOptions("clicked", hive_partitioning=True)
    scan = scan_events(part, options, opener=local_open)
    assert len(scan.block_rows) > 3 and scan.schema.names == ["id", "clicked", "dt"]
    whole = read_events(part, options, opener=local_open)
    assert whole.table.schema == scan.schema and set(whole.table["dt"].to_pylist()) == {"2026-11-01"}


def test_gzip_with_trailing_garbage_keeps_its_members_records_and_says_what_follows(tmp_path):
    packed = tmp_path / "tail.csv.gz"
    first, second = b"id,clicked\n1,1\n2,0\n", b"3,1\n"
    packed.write_bytes(compress(first, "gzip") + compress(second, "gzip") + b"\x00garbage")
    part = read(packed)
    assert part.table["id"].to_pylist() == [1, 2, 3]
    assert [(d.reason, d.records) for d in part.dead_letters] == [("trailing_data", 1)]
    assert part.dead_letters[0].detail.startswith("8 bytes of trailing data that are not gzip after the last member")


def test_a_zstd_stream_named_gz_is_named_for_what_it_is(tmp_path):
    packed = tmp_path / "mislabelled.csv.gz"
    packed.write_bytes(compress(b"id,clicked\n1,1\n", "zstd"))
    part = read(packed)
    assert [(d.reason, d.detail, d.records) for d in part.dead_letters] == [
        ("unreadable", "a zstd stream named .gz (rename it .zst)", -1)]


CODEC_STREAMS = {"gzip": ("a gzip stream", ".gz"), "zstd": ("a zstd stream", ".zst"),
                 "bz2": ("a bzip2 stream", ".bz2"), "xz": ("an xz stream", ".xz")}


@pytest.mark.parametrize("codec, named", [(codec, named) for codec in CODEC_STREAMS for named in (".gz", ".zst", ".bz2")
                                          if CODEC_STREAMS[codec][1] != named])
def test_a_stream_named_as_another_codec_is_named_for_what_it_is(tmp_path, codec, named):
    import lzma

    what, proper = CODEC_STREAMS[codec]
    data = b"id,clicked\n1,1\n"
    packed = tmp_path / f"mislabelled.csv{named}"
    packed.write_bytes(lzma.compress(data) if codec == "xz" else compress(data, codec))
    part = read(packed)
    assert [(d.reason, d.detail, d.records) for d in part.dead_letters] == [
        ("unreadable", f"{what} named {named} (rename it {proper})", -1)]


@pytest.mark.parametrize("named, codec, magic", [(".zst", "zstd", "28 b5 2f fd"), (".bz2", "bz2", "42 5a 68")])
def test_a_plain_file_named_zst_or_bz2_says_it_is_not_that_codec(tmp_path, named, codec, magic):
    packed = tmp_path / f"plain.csv{named}"
    packed.write_bytes(b"id,clicked\n1,1\n")
    assert [(d.reason, d.detail) for d in read(packed).dead_letters] == [
        ("unreadable", f"not {codec}: starts with bytes 69 64 2c 63, not {magic}")]


def test_a_truncated_compressed_log_is_one_dead_letter(tmp_path):
    import zlib

    packed = tmp_path / "cut.jsonl.gz"
    cut = compress(b'{"clicked": 1}\n' * 1000, "gzip")[:-20]
    packed.write_bytes(cut)
    part = read(packed)
    assert [d.reason for d in part.dead_letters] == ["unreadable"] and part.table.num_rows == 0
    # Lost part-way: the records read before the cut count, and the one it cut; nothing was left unread.
    before_cut = zlib.decompressobj(31).decompress(cut).count(b"\n")
    assert 500 < before_cut < 1000
    assert part.dead_letters[0].records == before_cut + 1 and part.dead_letters[0].bytes == 0
    assert "truncated: gzip member 1 ends at compressed byte" in part.dead_letters[0].detail


# ---- files Arrow can't take whole, rows it can't take beside the others ------------------------------

def test_duplicate_column_names_are_one_dead_letter_naming_them(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("id,clicked,id\n1,1,2\n2,0,3\n")
    part = read(path)
    assert part.table.num_rows == 0
    assert [(d.reason, d.detail) for d in part.dead_letters] == [
        ("duplicate_columns", "column name(s) 'id' appear more than once (columns: id, clicked, id)")]
    # Read, then left out for what it holds: its records count as read (a file that can't be read is not).
    assert (part.left_out, part.left_out_records) == ("duplicate_columns", 2)
    assert not read(tmp_path / "missing.csv").left_out


def test_a_json_row_nested_beyond_the_limits_is_a_dead_letter_at_its_line(tmp_path):
    path = tmp_path / "deep.jsonl"
    deep = '{"a":' * 1000 + "1" + "}" * 1000
    path.write_text(f'{{"clicked": 1, "n": 1}}\n{{"clicked": 1, "n": {deep}}}\n{{"clicked": 0, "n": 2}}\n')
    part = read(path)
    assert part.table["n"].to_pylist() == [1, 2]
    assert [(d.member, d.detail) for d in part.dead_letters] == [("line 2", "line 2: nested too deeply")]


def test_a_json_row_of_another_type_is_a_dead_letter_and_the_rest_is_kept(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"clicked": 1, "name": "a"}\n{"clicked": 0, "name": {"x": 1}}\n{"clicked": 0, "name": "c"}\n')
    part = read(path)
    assert part.table["name"].to_pylist() == ["a", "c"]
    assert [d.member for d in part.dead_letters] == ["line 2"]
    assert 'name = {"x": 1}: not string' in part.dead_letters[0].detail


def test_json_integers_beyond_int64_are_refused_at_their_line_not_rounded(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text('{"clicked": 1, "id": 9223372036854775807}\n{"clicked": 18446744073709551617, "id": 1}\n'
                    '{"clicked": 0, "id": 3}\n')
    part = read(path)
    assert part.table["id"].to_pylist() == [9223372036854775807, 3]
    assert part.table.schema.field("id").type == pa.int64()
    assert [d.member for d in part.dead_letters] == ["line 2"]
    assert "18446744073709551617: an integer beyond int64" in part.dead_letters[0].detail


@pytest.mark.parametrize("row, column", [(b"2,b\xffd,0", "name"), (b"2,bd,\xff", "clicked")])
def test_invalid_utf8_is_a_dead_letter_at_its_line_and_the_column_stays_text(tmp_path, row, column):
    path = tmp_path / "utf.csv"
    path.write_bytes(b"id,name,clicked\n1,ok,1\n" + row + b"\n3,fine,1\n")
    part = read(path)
    assert part.table["id"].to_pylist() == [1, 3]
    assert part.table.schema.field("name").type == pa.string()
    assert [d.member for d in part.dead_letters] == ["line 3"]
    assert f"{column}: invalid UTF-8" in part.dead_letters[0].detail


def test_invalid_utf8_in_json_lines_is_a_dead_letter_at_its_line(tmp_path):
    path = tmp_path / "utf.jsonl"
    path.write_bytes(b'{"clicked": 1, "name": "a"}\n{"clicked": 0, "name": "b\xff"}\n{"clicked": 0, "name": "c"}\n')
    part = read(path)
    assert part.table["name"].to_pylist() == ["a", "c"] and [d.member for d in part.dead_letters] == ["line 2"]


def test_a_field_of_megabytes_is_read_with_the_rest_of_its_range(tmp_path):
    path = tmp_path / "long.csv"
    rows = "".join(f"{i},n,1\n" for i in range(50))
    path.write_text("id,note,clicked\n" + rows + f'99,"{"x" * (5 << 20)}",0\n' + rows)
    part = read(path)
    assert part.table.num_rows == 101 and not part.dead_letters
    assert len(part.table["note"][50].as_py()) == 5 << 20


def test_hive_folders_give_typed_values_with_escapes_and_nulls():
    from shardmill.transforms.events.readers import hive_values

    assert hive_values("dt=2026-11-01/n=7/x=2.5/c=a%3Db/empty=/k=__HIVE_DEFAULT_PARTITION__/plain/part.csv") == [
        ("dt", "2026-11-01"), ("n", 7), ("x", 2.5), ("c", "a=b"), ("empty", None), ("k", None)]
    assert hive_values("n=99999999999999999999/inf=inf/part.csv") == [("n", "99999999999999999999"), ("inf", "inf")]
    assert hive_values("part.csv") == [] and hive_values("=v/part.csv") == []


def test_hive_values_are_numbers_only_when_they_are_plain_literals():
    from shardmill.transforms.events.readers import hive_values

    def hive_value(text):
        return hive_values(f"k={text}/part.csv")[0][1]

    typed = {"1000": 1000, "-7": -7, "+3": 3, "007": 7, "2.5": 2.5, ".5": 0.5, "1.": 1.0, "1e3": 1000.0,
             "-1.5E-2": -0.015}
    text = ["1_000", "1_0.5", " 1", "1 ", "0x10", "\u0663", "nan", "inf", "-Infinity", "1e999", "1e", "e3", ".", "+",
            "2026-11-01", "1,5"]
    assert {t: hive_value(t) for t in typed} == typed
    assert all(type(hive_value(t)) is type(v) for t, v in typed.items())
    assert {t: hive_value(t) for t in text} == {t: t for t in text}
    assert hive_value("") is None and hive_value("__HIVE_DEFAULT_PARTITION__") is None


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_an_empty_folder_value_is_null_in_whole_and_range_reads_alike(tmp_path, fmt):
    from shardmill.transforms.events.partitions import common_root as root_of

    folder = tmp_path / "logs" / "dt=1_000" / "hour="
    folder.mkdir(parents=True)
    path = folder / f"part.{fmt}"
    rows = [{"id": i, "clicked": i % 2} for i in range(300)]
    if fmt == "csv":
        path.write_text("id,clicked\n" + "".join(f"{r['id']},{r['clicked']}\n" for r in rows))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=30)
    options = EventReadOptions("clicked", hive_partitioning=True)
    root = root_of([str(tmp_path / "logs")])
    for max_bytes in (1 << 28, 200):
        ranges = split_file(str(path), path.stat().st_size, max_bytes, opener=local_open, root=root)
        assert (len(ranges) > 1) == (max_bytes == 200)
        parts = [read_events(r, options, opener=local_open) for r in ranges]
        assert all(p.table.schema.field("hour").type == pa.null() for p in parts)
        assert {(v, h) for p in parts for v, h in zip(p.table["dt"].to_pylist(), p.table["hour"].to_pylist())} == {
            ("1_000", None)}
        assert sum(p.table.num_rows for p in parts) == 300
