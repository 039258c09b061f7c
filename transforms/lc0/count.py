"""`shardmill count`: stages 1-2 (discover, index) and a summary of what the input holds."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import time

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from shardmill.pipelines.runner import is_local_run, make_pipeline
from shardmill.transforms.common.dead_letter import write_dead_letters
from shardmill.transforms.common.discovery import ERRORS, SOURCE_STATS, DiscoverFiles
from shardmill.transforms.common.filesystem import write_bytes_atomically, write_parquet_atomically
from shardmill.transforms.common.progress import ProgressPrinter
from shardmill.transforms.lc0.chunk_index import INDEX_SCHEMA
from shardmill.transforms.lc0.gzip_chunks import DEFAULT_MAX_CHUNK_BYTES
from shardmill.transforms.lc0.index_cache import IndexCache, prune_stats
from shardmill.transforms.lc0.index_summary import IndexSummary, MergeIndexSummaries
from shardmill.transforms.lc0.index_transforms import IndexChunkFiles
from shardmill.transforms.lc0.kind import LC0_INPUT_SUFFIXES


def sort_index(tables: list[pa.Table]) -> pa.Table:
    """One index table in chunk-identity order (sort_key, chunk), whatever the arrival order."""
    table = pa.concat_tables(tables) if tables else INDEX_SCHEMA.empty_table()
    return table.sort_by([("sort_key", "ascending"), ("chunk", "ascending")])


def write_index(tables: list[pa.Table], path: str) -> None:
    write_parquet_atomically(path, sort_index(tables), compression="zstd")


def write_summary(summary: IndexSummary, path: str) -> None:
    write_bytes_atomically(path, json.dumps(summary.to_dict(), indent=1).encode())


@dataclasses.dataclass
class CountResult:
    summary: IndexSummary
    dead_letters: list[dict]
    index_path: str
    errors_path: str
    seconds: float


def index_inputs(pipeline, patterns: list[str], count_method: str, expected_version: int,
                 max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, progress_dir: str | None = None,
                 cache: IndexCache | None = None):
    """Stages 1-2 on a pipeline: a dict of "index" (tables), ERRORS and SOURCE_STATS of both stages. With an
    index cache, unchanged sources come from it, and its entries unused for its max age are removed."""
    found = pipeline | "Discover" >> DiscoverFiles(patterns, LC0_INPUT_SUFFIXES)
    indexed = found["batches"] | "IndexChunks" >> IndexChunkFiles(count_method, expected_version, max_chunk_bytes,
                                                                     progress_dir, cache)
    stats = [found[SOURCE_STATS], indexed[SOURCE_STATS]]
    if cache is not None:
        stats.append(pipeline | "IndexCache" >> beam.Create([cache]) | "PruneIndexCache" >> beam.Map(prune_stats))
    return {
        "index": indexed["index"],
        ERRORS: (found[ERRORS], indexed[ERRORS]) | "DiscoverAndIndexErrors" >> beam.Flatten(),
        SOURCE_STATS: tuple(stats) | "DiscoverAndIndexStats" >> beam.Flatten(),
    }


def run_count(
    patterns: list[str],
    count_method: str,
    expected_version: int,
    options: PipelineOptions,
    index_out: str | None = None,
    errors_out: str | None = None,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
    cache: IndexCache | None = None,
) -> CountResult:
    """Runs discover + index (through the index cache, if any) and writes the index (Parquet), dead letters
    (JSON lines) and summary."""
    work_dir = tempfile.mkdtemp(prefix="shardmill-count-")
    index_path = index_out or f"{work_dir}/index.parquet"
    errors_path = errors_out or f"{work_dir}/errors.jsonl"
    summary_path = f"{work_dir}/summary.json"
    started = time.monotonic()
    progress_dir = f"{work_dir}/progress" if is_local_run(options) else None
    with contextlib.ExitStack() as progress_running:
        if progress_dir:
            os.makedirs(progress_dir)
            progress = ProgressPrinter(progress_dir)
            progress.start()
            progress_running.callback(progress.stop)  # after the pipeline has run (it runs on leaving `with p`)
        with make_pipeline(options) as p:
            outputs = index_inputs(p, patterns, count_method, expected_version, max_chunk_bytes, progress_dir, cache)
            tables, dead, stats = outputs["index"], outputs[ERRORS], outputs[SOURCE_STATS]
            _ = tables | "AllTables" >> beam.combiners.ToList() | "WriteIndex" >> beam.Map(write_index, index_path)
            _ = dead | "AllErrors" >> beam.combiners.ToList() | "WriteErrors" >> beam.Map(
                lambda dead_letters, path: write_dead_letters(path, dead_letters), errors_path
            )
            _ = (
                (
                    tables | "SummarizeTables" >> beam.Map(IndexSummary.of_table),
                    dead | "SummarizeErrors" >> beam.Map(IndexSummary.of_dead_letter),
                    stats | "SummarizeSources" >> beam.Map(IndexSummary.of_source_stats),
                )
                | "AllSummaries" >> beam.Flatten()
                | "Merge" >> beam.CombineGlobally(MergeIndexSummaries())
                | "WriteSummary" >> beam.Map(write_summary, summary_path)
            )
    seconds = time.monotonic() - started
    with FileSystems.open(summary_path) as f:
        summary = IndexSummary.from_dict(json.loads(f.read()))
    with FileSystems.open(errors_path) as f:
        dead_letters = [json.loads(line) for line in f.read().decode().splitlines() if line]
    return CountResult(summary, dead_letters, index_path, errors_path, seconds)
