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

from shardmill.transforms.common.discovery import ERRORS, SOURCE_STATS
from shardmill.transforms.common.progress import ProgressLog
from shardmill.transforms.lc0.chunk_index import INDEX_SCHEMA, index_source
from shardmill.transforms.lc0.gzip_chunks import DEFAULT_MAX_CHUNK_BYTES


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
