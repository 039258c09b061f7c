"""The shared shard writer: shards written side by side on a local run, one at a time on a cluster."""

import os
import threading
import time

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.pipeline import PipelineVisitor
from apache_beam.utils.windowed_value import WindowedValue

from shardmill.pipelines.config import parse_config
from shardmill.pipelines.jobs import job_kind
from shardmill.pipelines.run_job import build_graph
from shardmill.transforms.output import sharded_output
from shardmill.transforms.output.lifecycle import RunPaths


class _Writes:
    """Stands in for the Parquet write: records how many run at once.

    The first shard's write waits (up to 2 s) for another to start, so it
    finishes after later ones wherever more than one may run at once.
    """

    def __init__(self):
        self.running = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.another_started = threading.Event()

    def __call__(self, path, name, table, rows, compression, **options):
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        if name.endswith("00000-of-00004.parquet"):
            self.another_started.wait(2)
        else:
            self.another_started.set()
            time.sleep(0.01)
        with self.lock:
            self.running -= 1
        return {"path": name, "rows": table.num_rows}


@pytest.fixture
def live_paths(tmp_path):
    paths = RunPaths(str(tmp_path), "run", 1)
    os.makedirs(paths.staging)
    open(paths.marker, "w").close()
    return paths


def _writer_of(pipeline) -> sharded_output._WriteShardFn:
    found = []

    class _Finder(PipelineVisitor):
        def visit_transform(self, node):
            if isinstance(getattr(node.transform, "fn", None), sharded_output._WriteShardFn):
                found.append(node.transform.fn)

    pipeline.visit(_Finder())
    assert len(found) == 1
    return found[0]


def _write_four_shards(write_fn, writes, monkeypatch) -> list[dict]:
    monkeypatch.setattr(sharded_output, "read_spilled", lambda refs: refs)
    monkeypatch.setattr(sharded_output, "write_shard_file", writes)
    monkeypatch.setattr(type(write_fn._format), "table", lambda self, batches, record: pa.table({"x": batches}))
    monkeypatch.setattr(type(write_fn._format), "row_bytes", lambda self, table, record: 1)
    write_fn.setup()
    write_fn.start_bundle()
    entries = [e for shard in range(4) for e in write_fn.process((shard, [shard, None, shard]), 4, {})]
    entries += [e.value if isinstance(e, WindowedValue) else e for e in write_fn.finish_bundle()]
    write_fn.teardown()
    return entries


@pytest.mark.parametrize("local_run, at_once", [(True, min(2, os.cpu_count())), (False, 1)])
def test_a_local_run_writes_two_shards_at_once_a_cluster_one_and_every_entry_arrives(
        local_run, at_once, live_paths, monkeypatch):
    config = parse_config('input: "/data"')
    kind = job_kind(config)
    pipeline = beam.Pipeline()
    build_graph(pipeline, config, kind.plan(config, ["/data"], local_run=local_run), live_paths, local_run)
    writes = _Writes()

    entries = _write_four_shards(_writer_of(pipeline), writes, monkeypatch)

    assert writes.peak == at_once
    assert [e["shard"] for e in entries] == [0, 1, 2, 3]  # the order they came, whichever finished first
    assert [e["rows"] for e in entries] == [2, 2, 2, 2]  # a shard's None refs (shards without rows) dropped
