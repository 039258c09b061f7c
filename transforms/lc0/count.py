"""`shardmill count` for lc0: stages 1-2 (discover, index) and a summary of what the input holds.

The kind turns the config and the command line into CountSettings (Lc0Kind.count_settings); CountIndex is the
graph the command (pipelines/commands/count.py) runs; render_count is what it prints.
"""

from __future__ import annotations

import dataclasses
import json

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from shardmill.transforms.common.dead_letter import write_dead_letters
from shardmill.transforms.common.discovery import ERRORS, SOURCE_STATS
from shardmill.transforms.common.filesystem import write_bytes_atomically, write_parquet_atomically
from shardmill.transforms.lc0.graph import index_inputs
from shardmill.transforms.lc0.index import INDEX_SCHEMA
from shardmill.transforms.lc0.index_cache import IndexCache
from shardmill.transforms.lc0.index_summary import IndexSummary, MergeIndexSummaries

MAX_ERRORS_SHOWN = 20


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


@dataclasses.dataclass(frozen=True)
class CountSettings:
    """What a count indexes and how, as plain values."""

    patterns: tuple[str, ...]
    count_method: str
    expected_version: int
    max_chunk_bytes: int
    cache: IndexCache | None = None


@dataclasses.dataclass(frozen=True)
class CountPaths:
    """Where a count writes the index (Parquet), the dead letters (JSON lines) and the summary (JSON)."""

    index: str
    errors: str
    summary: str


class CountIndex(beam.PTransform):
    """Discover + index (through the index cache, if any), then write the index, dead letters and summary."""

    def __init__(self, settings: CountSettings, paths: CountPaths, progress_dir: str | None = None):
        super().__init__()
        self._settings = settings
        self._paths = paths
        self._progress_dir = progress_dir

    def expand(self, pbegin):
        s, paths = self._settings, self._paths
        outputs = index_inputs(pbegin, list(s.patterns), s.count_method, s.expected_version, s.max_chunk_bytes,
                               self._progress_dir, s.cache)
        tables, dead, stats = outputs["index"], outputs[ERRORS], outputs[SOURCE_STATS]
        _ = tables | "AllTables" >> beam.combiners.ToList() | "WriteIndex" >> beam.Map(write_index, paths.index)
        _ = dead | "AllErrors" >> beam.combiners.ToList() | "WriteErrors" >> beam.Map(
            lambda dead_letters, path: write_dead_letters(path, dead_letters), paths.errors
        )
        return (
            (
                tables | "SummarizeTables" >> beam.Map(IndexSummary.of_table),
                dead | "SummarizeErrors" >> beam.Map(IndexSummary.of_dead_letter),
                stats | "SummarizeSources" >> beam.Map(IndexSummary.of_source_stats),
            )
            | "AllSummaries" >> beam.Flatten()
            | "Merge" >> beam.CombineGlobally(MergeIndexSummaries())
            | "WriteSummary" >> beam.Map(write_summary, paths.summary)
        )


def read_count_result(paths: CountPaths, seconds: float) -> CountResult:
    """The result of a count that ran, from the files CountIndex wrote."""
    with FileSystems.open(paths.summary) as f:
        summary = IndexSummary.from_dict(json.loads(f.read()))
    with FileSystems.open(paths.errors) as f:
        dead_letters = [json.loads(line) for line in f.read().decode().splitlines() if line]
    return CountResult(summary, dead_letters, paths.index, paths.errors, seconds)


def render_count(settings: CountSettings, result: CountResult, as_json: bool, index_out: str | None,
                 errors_out: str | None) -> str:
    """What `shardmill count` prints: the summary (or it as JSON) and the first errors."""
    if as_json:
        return json.dumps({"summary": result.summary.to_dict(), "errors": result.dead_letters,
                           "seconds": result.seconds}, indent=1)
    lines = [f"shardmill count: {len(settings.patterns)} pattern(s), count method {settings.count_method}, "
             f"{result.seconds:.1f} s", result.summary.render()]
    for dead in result.dead_letters[:MAX_ERRORS_SHOWN]:
        where = dead["path"] + (f" :: {dead['member']}" if dead["member"] else "")
        lines.append(f"  error: {where}: {dead['reason']}: {dead['detail']}")
    if len(result.dead_letters) > MAX_ERRORS_SHOWN:
        lines.append(f"  ... {len(result.dead_letters) - MAX_ERRORS_SHOWN} more in {result.errors_path}")
    if index_out:
        lines.append(f"index written to {result.index_path}")
    if errors_out:
        lines.append(f"errors written to {result.errors_path}")
    return "\n".join(lines)
