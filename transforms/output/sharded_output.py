"""The shared ending of every job: spilled per-shard batches in, staged shards and prepared manifest out.

Every job ends with WriteShardedOutput. It takes the job's JobOutputs
(transforms/job.py):

  shard_refs   (shard, spill ref) pairs: the job's rows, spilled (transforms/common/spill.py)
  num_shards   one int
  record       one dict: record_format and what describes a row of this kind
  errors       dead-letter dicts (optional)
  stats        dicts, any number (optional): the job's parts of the stats, which its
               ShardFormat.finish_stats combines with the written shards

and writes, under the run's staging directory, one Parquet file per shard,
the dead letters, and last the prepared manifest, which the launcher then
commits (transforms/output/lifecycle.py).
"""

from __future__ import annotations

import logging
import time
import typing

import apache_beam as beam

from shardmill.transforms.common.dead_letter import write_dead_letters
from shardmill.transforms.common.ordered_pool import OrderedPool, in_global_window
from shardmill.transforms.common.progress import ProgressLog
from shardmill.transforms.common.spill import read_spilled
from shardmill.core.output_contract import ERRORS_NAME, generation_dir_name
from shardmill.transforms.output.lifecycle import RunPaths, write_prepared_manifest
from shardmill.transforms.output.manifest import build_manifest
from shardmill.transforms.output.shard_format import ShardCompression, ShardFormat, write_shard_file

_LOG = logging.getLogger(__name__)


class _WriteShardFn(beam.DoFn):
    """Writes shards, up to `shards_at_once` at a time within a bundle.

    pyarrow's Parquet encoding and zstd release the GIL, so a worker with
    several shards in its bundle keeps more than one core busy; entries are
    emitted in the order their shards came, the last ones by the end of the
    bundle.
    """

    def __init__(self, paths: RunPaths, shard_format: ShardFormat, row_group_bytes: int,
                 compression: ShardCompression, shards_at_once: int):
        self._paths = paths
        self._progress = ProgressLog(paths.progress_dir)
        self._format = shard_format
        self._row_group_bytes = row_group_bytes
        self._compression = compression
        self._pool = OrderedPool(shards_at_once)

    def setup(self):
        self._pool.start()

    def start_bundle(self):
        self._pool.reset()

    def _write(self, shard: int, refs: list, num_shards: int, record: dict) -> dict:
        self._paths.check_live()
        table = self._format.table(read_spilled(refs), record)
        rows = max(1, self._row_group_bytes // self._format.row_bytes(table, record))
        entry = write_shard_file(self._paths.staged_shard(shard, num_shards), self._paths.shard_name(shard, num_shards),
                                 table, rows, self._compression, **self._format.parquet_options)
        _LOG.debug("wrote shard %d of %d: %d rows", shard + 1, num_shards, entry["rows"])
        self._progress.record("write", shards=1, rows=entry["rows"])
        return {"shard": shard, **entry}

    def process(self, shard_and_refs, num_shards, record):
        shard, refs = shard_and_refs
        refs = [r for r in refs if r is not None]
        yield from self._pool.submit(self._write, shard, refs, num_shards, record)

    def finish_bundle(self):
        for entry in self._pool.drain():
            yield in_global_window(entry)

    def teardown(self):
        self._pool.stop()


def _finalize(keyed_shards, record, dead_letters, parts, paths: RunPaths, shard_format: ShardFormat,
              compression: ShardCompression, config_text: str, seed: int, started_at: float) -> None:
    shards = sorted(keyed_shards[1], key=lambda s: s["shard"])
    paths.check_live()
    write_dead_letters(paths.errors_path, dead_letters)
    stats = shard_format.finish_stats(parts, shards, dead_letters)
    manifest = build_manifest(
        job_kind=shard_format.job_kind, record=shard_format.manifest_record(record), config_text=config_text, seed=seed,
        generation=paths.generation, schema=shards[0]["schema"] if shards else [], shards=shards,
        compression=compression.manifest_entry(),
        errors={"path": f"{generation_dir_name(paths.generation)}/{ERRORS_NAME}", "count": len(dead_letters)},
        stats=stats,
        timings={"seconds": round(time.time() - started_at, 3), **stats.pop("timings", {})},
    )
    write_prepared_manifest(paths, manifest)


def _every_shard(num_shards: int, progress: ProgressLog) -> list:
    progress.record("write", total_shards=num_shards)
    return [(shard, None) for shard in range(num_shards)]


def _as_list(pcoll):
    """A side input of the PCollection's elements; [] for an output the job does not have."""
    return [] if pcoll is None else beam.pvalue.AsList(pcoll)


class WriteShardedOutput(beam.PTransform):
    """Shuffle (group spill refs by shard) → write each shard → prepare the manifest."""

    def __init__(self, paths: RunPaths, shard_format: ShardFormat, *, row_group_bytes: int,
                 compression: ShardCompression, config_text: str, seed: int, started_at: float,
                 shards_at_once: int = 1):
        super().__init__()
        self._paths = paths
        self._format = shard_format
        self._row_group_bytes = row_group_bytes
        self._compression = compression
        self._config_text = config_text
        self._seed = seed
        self._started_at = started_at
        self._shards_at_once = shards_at_once

    def expand(self, job):
        num_shards = beam.pvalue.AsSingleton(job["num_shards"])
        record = beam.pvalue.AsSingleton(job["record"])
        # Every shard gets an element, so a shard that received no rows is still written (empty).
        every_shard = job["num_shards"] | "EveryShard" >> beam.FlatMap(_every_shard,
                                                                       ProgressLog(self._paths.progress_dir))
        shards = (
            (job["shard_refs"], every_shard)
            # Inference can't see through tagged outputs; state the pair type.
            | "ShardRefs" >> beam.Flatten().with_output_types(typing.Tuple[int, typing.Any])
            | "Shuffle" >> beam.GroupByKey()
            | "Write" >> beam.ParDo(_WriteShardFn(self._paths, self._format, self._row_group_bytes,
                                                  self._compression, self._shards_at_once), num_shards, record)
        )
        # One key, so Finalize gets every entry at once: a plain GroupByKey is 2 transforms where a ToList is 9
        # (its default for an empty input is not needed: every job writes at least one shard).
        return (
            shards
            | "KeyAll" >> beam.Map(lambda entry: (None, entry))
            | "AllShards" >> beam.GroupByKey()
            | "Finalize" >> beam.Map(_finalize, record, _as_list(job.get("errors")), _as_list(job.get("stats")),
                                     self._paths, self._format, self._compression,
                                     self._config_text, self._seed, self._started_at)
        )
