"""The lc0 job on a real distributed engine: Beam's DaskRunner over a dask LocalCluster of worker processes.

Beam 2.77's DaskRunner cannot run the job yet; the first test probes the
two Beam features the job needs, the second runs the job and compares bytes
with the in-process run, and skips (naming what the probe found) until the
runner has them. In apache_beam/runners/dask/transform_evaluator.py:
- outputs of finish_bundle: apply_dofn_to_bundle collects a bundle's results
  before it calls invoke_finish_bundle, so what a DoFn emits there (the
  job's batches: discovery's file batches, the shard writer's entries) is
  dropped; a ParDo emitting only from finish_bundle gives an empty output;
- multiple outputs: every receiver's values are unwrapped into one list, so
  a ParDo's TaggedOutput values also land in its main output (dead letters
  and statistics reach the stage after discovery, whose Distinct fails on
  a dict: "unhashable type: 'dict'").
The fix belongs in Beam: collect the results after finish_bundle, keep each
value's tag, and give every output PCollection its own bag filtered by tag.
"""

import hashlib
import json
import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindows

from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.common.discovery import expand_inputs
from shardmill.transforms.lc0.kind import LC0_INPUT_SUFFIXES

pytestmark = pytest.mark.slow  # every test here runs a job, a cluster or a subprocess

distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed")

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as local_cluster:
        yield local_cluster


def dask_options(cluster) -> PipelineOptions:
    return PipelineOptions([f"--runner={DASK_RUNNER}", f"--dask_client_address={cluster.scheduler_address}"])


class _TagAndBatch(beam.DoFn):
    """A tagged output per element, and the bundle's elements as one batch from finish_bundle."""

    def start_bundle(self):
        self._batch = []

    def process(self, x):
        self._batch.append(x)
        yield beam.pvalue.TaggedOutput("stats", {"seen": x})

    def finish_bundle(self):
        yield GlobalWindows.windowed_value(sorted(self._batch))


def missing_features(cluster, tmp_path) -> list[str]:
    """The Beam features the job needs that this DaskRunner gets wrong."""
    main_path, stats_path = tmp_path / "main.json", tmp_path / "stats.json"

    def dump(values, path):
        with open(path, "w") as f:
            json.dump(values, f)

    with beam.Pipeline(options=dask_options(cluster)) as p:
        out = p | beam.Create([1, 2, 3]) | beam.ParDo(_TagAndBatch()).with_outputs("stats", main="batches")
        _ = out["batches"] | "AllMain" >> beam.combiners.ToList() | "DumpMain" >> beam.Map(dump, str(main_path))
        _ = out["stats"] | "AllStats" >> beam.combiners.ToList() | "DumpStats" >> beam.Map(dump, str(stats_path))
    main = json.loads(main_path.read_text()) if main_path.exists() else "never produced"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else "never produced"
    missing = []
    if main != [[1, 2, 3]]:
        missing.append(f"outputs of finish_bundle beside tagged outputs (main output: {main}, expected [[1, 2, 3]])")
    if not isinstance(stats, list) or sorted(json.dumps(s) for s in stats) != [
            json.dumps({"seen": x}) for x in (1, 2, 3)]:
        missing.append(f"multiple outputs (tagged output: {stats})")
    return missing


def test_the_dask_runner_features_the_job_needs_are_probed(cluster, tmp_path):
    # Fails only if the probe itself breaks; what it finds decides whether the job test runs.
    assert isinstance(missing_features(cluster, tmp_path), list)


def digests(out_dir) -> dict:
    found = {}
    for name in sorted(os.listdir(out_dir)):
        if name.endswith(".parquet"):
            with open(os.path.join(out_dir, name), "rb") as f:
                found[name] = hashlib.sha256(f.read()).hexdigest()
    return found


def test_the_lc0_job_on_dask_writes_the_bytes_of_the_in_process_run(cluster, lc0_dataset, tmp_path):
    missing = missing_features(cluster, tmp_path)
    if missing:
        pytest.skip("Beam's DaskRunner lacks " + "; ".join(missing))
    directory, _ = lc0_dataset
    config = validate(parse_config(f'input: "{directory}"\nseed: 5\nmax_error_fraction: 0.5\n'
                                   "lc0 { chunk_pool { passes: 3 position_count: 5 } }\noutput { num_shards: 3 }"))
    patterns = expand_inputs(list(config.input), LC0_INPUT_SUFFIXES)
    run_job(config, patterns, str(tmp_path / "local"), PipelineOptions([]))
    run_job(config, patterns, str(tmp_path / "dask"), dask_options(cluster))
    assert digests(tmp_path / "dask") == digests(tmp_path / "local")
