"""Stages 1-2 as PTransforms: discover chunk files, index them.

Elements are batches, never single chunks (ARCHITECTURE.md, rule "batches,
not records"): discovery emits lists of (path, size) holding up to a
file-count or byte budget, and indexing emits one pyarrow Table (INDEX_SCHEMA) per such batch, plus one dead-letter
dict per bad file or chunk on the ERRORS output.
"""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from shardmill.transforms.chunk_index import INDEX_SCHEMA, LC0_INPUT_SUFFIXES, index_source
from shardmill.transforms.discovery import SKIP_KINDS, list_input
from shardmill.transforms.gzip_chunks import DEFAULT_MAX_CHUNK_BYTES
from shardmill.transforms.progress import ProgressLog

ERRORS = "errors"
SOURCE_STATS = "source_stats"


class _BatchFilesFn(beam.DoFn):
    """Groups (path, size) pairs of one bundle into batches by count and bytes.

    A whole archive is a batch by itself once it passes the byte budget; many
    small loose `.gz` files share one batch, so no element stands for one chunk.
    """

    def __init__(self, max_files: int, max_bytes: int):
        self._max_files = max_files
        self._max_bytes = max_bytes

    def start_bundle(self):
        self._batch, self._bytes = [], 0

    def process(self, path_and_size):
        self._batch.append(path_and_size)
        self._bytes += path_and_size[1]
        if len(self._batch) >= self._max_files or self._bytes >= self._max_bytes:
            yield self._batch
            self._batch, self._bytes = [], 0

    def finish_bundle(self):
        if self._batch:
            yield GlobalWindows.windowed_value(self._batch)
            self._batch, self._bytes = [], 0


class _ListInputFn(beam.DoFn):
    """One input → (path, size) of each file to read; dead letters and skip counts on the side."""

    def __init__(self, suffixes: tuple[str, ...]):
        self._suffixes = suffixes

    def process(self, item):
        skipped = {kind: 0 for kind in SKIP_KINDS}
        for event in list_input(item, self._suffixes):
            if event[0] == "file":
                yield event[1], event[2]
            elif event[0] == "skip":
                skipped[event[1]] += 1
            else:
                yield beam.pvalue.TaggedOutput(ERRORS, event[1].to_dict())
        yield beam.pvalue.TaggedOutput(SOURCE_STATS, {"skipped_files": skipped})


class DiscoverFiles(beam.PTransform):
    """Stage 1: inputs (files, globs, directory trees) → batches (lists) of (path, size_in_bytes).

    Returns a dict: "batches", ERRORS (dead-letter dicts of files that can't
    be read) and SOURCE_STATS ({"skipped_files": {kind: n}} per input; see
    transforms/discovery.py). Each file is listed once even if several inputs
    name it. Inputs that name nothing are allowed here; the CLI rejects them
    before the pipeline.
    """

    def __init__(self, inputs: list[str], suffixes: tuple[str, ...] = LC0_INPUT_SUFFIXES,
                 max_files_per_batch: int = 256, max_bytes_per_batch: int = 64 << 20):
        super().__init__()
        self._inputs = list(inputs)
        self._suffixes = tuple(suffixes)
        self._max_files = max_files_per_batch
        self._max_bytes = max_bytes_per_batch

    def expand(self, pbegin):
        listed = (
            pbegin
            | "Inputs" >> beam.Create(self._inputs)
            | "List" >> beam.ParDo(_ListInputFn(self._suffixes)).with_outputs(ERRORS, SOURCE_STATS, main="files")
        )
        batches = (
            listed["files"]
            | "OncePerFile" >> beam.Distinct()  # also spreads files over workers
            | "Batch" >> beam.ParDo(_BatchFilesFn(self._max_files, self._max_bytes))
        )
        return {"batches": batches, ERRORS: listed[ERRORS], SOURCE_STATS: listed[SOURCE_STATS]}


class _IndexFilesFn(beam.DoFn):
    def __init__(self, count_method: str, expected_version: int, max_chunk_bytes: int, progress: ProgressLog):
        self._progress = progress
        self._method = count_method
        self._expected_version = expected_version
        self._max_chunk_bytes = max_chunk_bytes
        self._chunks = Metrics.counter("shardmill.index", "chunks")
        self._records = Metrics.counter("shardmill.index", "records")
        self._errors = Metrics.counter("shardmill.index", "errors")
        self._sources = Metrics.counter("shardmill.index", "sources")

    def process(self, files):
        tables = []
        skipped = 0
        for path, size in files:
            result = index_source(path, size, self._method, self._expected_version,
                                  max_chunk_bytes=self._max_chunk_bytes)
            tables.append(result.table)
            skipped += result.skipped_members
            for dead in result.dead_letters:
                self._errors.inc()
                yield beam.pvalue.TaggedOutput(ERRORS, dead.to_dict())
        table = pa.concat_tables(tables) if tables else INDEX_SCHEMA.empty_table()
        self._sources.inc(len(files))
        self._chunks.inc(table.num_rows)
        self._records.inc(pc.sum(table["num_records"]).as_py() or 0)
        yield beam.pvalue.TaggedOutput(SOURCE_STATS, {"sources": len(files), "skipped_members": skipped})
        if table.num_rows:
            yield table
        self._progress.record("index", files=len(files), chunks=table.num_rows)


class IndexChunkFiles(beam.PTransform):
    """Stage 2: batches of (path, size) -> index tables.

    Returns a DoOutputsTuple: the main output (pyarrow Tables of INDEX_SCHEMA),
    ERRORS (DeadLetter dicts) and SOURCE_STATS (per-batch dicts with the number
    of sources and of skipped non-chunk archive members).
    """

    def __init__(self, count_method: str = "scan", expected_version: int = 0,
                 max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, progress_dir: str | None = None):
        super().__init__()
        self._progress_dir = progress_dir
        self._method = count_method
        self._expected_version = expected_version
        self._max_chunk_bytes = max_chunk_bytes

    def expand(self, file_batches):
        return file_batches | "Index" >> beam.ParDo(
            _IndexFilesFn(self._method, self._expected_version, self._max_chunk_bytes,
                          ProgressLog(self._progress_dir))
        ).with_outputs(ERRORS, SOURCE_STATS, main="index")
