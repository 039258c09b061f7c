"""The lc0 job's graph: its load step (read tasks loaded and spilled side by side, emitted in the order they
came), its size in transforms, a run in which no index table reaches the plan."""

import os
import threading
import time

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.utils.windowed_value import WindowedValue

from shardmill.pipelines.config import parse_config
from shardmill.pipelines.jobs import job_kind
from shardmill.transforms.common.dead_letter import DeadLetter
from shardmill.transforms.common.discovery import ERRORS
from shardmill.transforms.lc0 import graph
from shardmill.transforms.lc0.loading import LoadedTask


class _Paths:
    progress_dir = None
    spill_dir = "/spill"
    shuffle_memory = None

    def check_live(self):
        pass


class _Task:
    def __init__(self, number: int):
        self.number = number
        self.source = f"archive-{number}.tar"
        self.chunks = pa.table({"chunk": [number], "emit_start": [0]})


def _unwrapped(output):
    """(tag or None, value) of a DoFn output, from process (bare) or finish_bundle (windowed)."""
    tag = output.tag if isinstance(output, beam.pvalue.TaggedOutput) else None
    value = output.value if tag else output
    return tag, value.value if isinstance(value, WindowedValue) else value


def test_tasks_loaded_at_once_are_emitted_in_arrival_order_with_their_dead_letters_and_stats(monkeypatch):
    delays = [0.2, 0.0, 0.1, 0.0, 0.05]  # later tasks finish first
    running, peak, lock = [0], [0], threading.Lock()

    def load(task):
        number = task.number
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(delays[number])
        with lock:
            running[0] -= 1
        dead = [DeadLetter(task.source, "load", "corrupt", "bad", "m", 1)] if number % 2 else []
        return LoadedTask({0: object()}, dead, chunks_loaded=1, uses_written=1, records_written=number)

    monkeypatch.setattr(graph, "load_task", load)
    monkeypatch.setattr(graph, "write_spill", lambda path, batches, memory: [(0, (os.path.basename(path), 0))])
    load_fn = graph._LoadTasksFn(_Paths(), 2)
    load_fn.setup()
    load_fn.start_bundle()
    outputs = [o for number in range(5) for o in load_fn.process((number, [_Task(number)]))]
    outputs += list(load_fn.finish_bundle())
    load_fn.teardown()

    outputs = [_unwrapped(o) for o in outputs]
    refs = [value[1][0] for tag, value in outputs if tag is None]
    assert [name.split("-")[2] for name in refs] == [f"{n:08d}" for n in range(5)]  # arrival order
    stats = [value["load"]["records_written"] for tag, value in outputs if tag == graph.LOAD_STATS]
    assert stats == [0, 1, 2, 3, 4]
    dead = [value["path"] for tag, value in outputs if tag == ERRORS]
    assert dead == ["archive-1.tar", "archive-3.tar"]
    assert peak[0] == 2


def test_a_local_run_loads_two_tasks_at_once_a_cluster_one():
    kind = job_kind(parse_config(""))
    config = parse_config('input: "/data"')
    assert kind.plan(config, ["/data"], local_run=True).load_tasks_at_once == min(2, os.cpu_count())
    assert kind.plan(config, ["/data"], local_run=False).load_tasks_at_once == 1


def leaf_transforms(config_text: str, inputs: list[str]) -> int:
    """How many leaf transforms (the steps a runner runs) the job of the config builds, with the shared ending."""
    from apache_beam.pipeline import PipelineVisitor

    from shardmill.pipelines.config import validate
    from shardmill.pipelines.run_job import build_graph
    from shardmill.transforms.output.lifecycle import RunPaths

    config = validate(parse_config(config_text))
    pipeline = beam.Pipeline()
    build_graph(pipeline, config, job_kind(config).plan(config, inputs, True), RunPaths("/nonexistent/out", "g", 1),
                True)
    leaves = []

    class _Leaves(PipelineVisitor):
        def visit_transform(self, node):
            leaves.append(node.full_label)

    pipeline.visit(_Leaves())
    return len(leaves)


def test_the_lc0_graph_stays_within_its_transform_count():
    # Beam spends ~20 ms of CPU per transform whatever its work (construction, serialisation, the runner's
    # stages): most of a small run's start-up. 79 before the graph was condensed; raise this only knowingly.
    assert leaf_transforms('input: "/data"', ["/data"]) <= 41


@pytest.mark.slow
def test_a_run_whose_every_file_is_a_dead_letter_commits_one_empty_shard_with_its_plan_stats(tmp_path):
    # No index table reaches the plan's combines: the decisions, shard count, record and plan stats come from
    # the side inputs' defaults (the combines have none of their own).
    from apache_beam.options.pipeline_options import PipelineOptions

    from shardmill.pipelines.config import validate
    from shardmill.pipelines.run_job import run_job

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.gz").write_bytes(b"not gzip at all")
    config = validate(parse_config(f'input: "{tmp_path / "in"}"\nmax_error_fraction: 1\n'
                                      'lc0 { index { cache: "none" } }'))
    manifest = run_job(config, [str(tmp_path / "in")], str(tmp_path / "out"), PipelineOptions([])).manifest

    assert [shard["rows"] for shard in manifest["shards"]] == [0]
    assert manifest["stats"]["accounting"]["errors_by_reason"] == {"not_gzip": 1}
    assert manifest["stats"]["accounting"]["records_planned"] == 0
    assert manifest["stats"]["sampling"]["accepted"] == 0
