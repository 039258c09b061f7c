"""Stages 1-2 as PTransforms: discover chunk files, index them.

Elements are batches, never single chunks (ARCHITECTURE.md, rule "batches,
not records"): discovery emits lists of (path, size) holding up to a
file-count or byte budget, and indexing emits one pyarrow Table (INDEX_SCHEMA) per such batch, plus one dead-letter
dict per bad file or chunk on the ERRORS output.
"""

from __future__ import annotations

import logging

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.metrics import Metrics

from shardmill.transforms.common.discovery import ERRORS, SOURCE_STATS
from shardmill.transforms.common.progress import ProgressLog
from shardmill.transforms.lc0.chunk_index import INDEX_SCHEMA, SourceIndex, index_source
from shardmill.transforms.lc0.gzip_chunks import DEFAULT_MAX_CHUNK_BYTES
from shardmill.transforms.lc0.index_cache import IndexCache, RejectedEntry

_LOG = logging.getLogger(__name__)


class _IndexFilesFn(beam.DoFn):
    def __init__(self, count_method: str, expected_version: int, max_chunk_bytes: int, progress: ProgressLog,
                 cache: IndexCache | None):
        self._progress = progress
        self._method = count_method
        self._expected_version = expected_version
        self._max_chunk_bytes = max_chunk_bytes
        self._cache = cache
        self._store_failed = False
        self._chunks = Metrics.counter("shardmill.index", "chunks")
        self._records = Metrics.counter("shardmill.index", "records")
        self._errors = Metrics.counter("shardmill.index", "errors")
        self._sources = Metrics.counter("shardmill.index", "sources")

    def _index(self, path: str, size: int) -> tuple[SourceIndex, str]:
        """The source's index and where it came from: "cached", "indexed", or "rejected" (its cache entry was
        unusable: indexed again)."""
        cache = self._cache
        stamp = cache.source_stamp(path, size) if cache and cache.worth_caching(path) else None
        if stamp is None:
            return index_source(path, size, self._method, self._expected_version,
                                max_chunk_bytes=self._max_chunk_bytes), "indexed"
        key = cache.key(path, stamp)
        how = "indexed"
        try:
            cached = cache.lookup(key)
            if cached is not None:
                return cached, "cached"
        except RejectedEntry as err:
            _LOG.warning("index cache: ignoring %s; indexing %s again", err, path)
            how = "rejected"
        except Exception as err:  # noqa: BLE001 - a cache that cannot be read never stops the run
            _LOG.warning("index cache: cannot read the entry of %s (%s); indexing it", path, err)
        result = index_source(path, size, self._method, self._expected_version, max_chunk_bytes=self._max_chunk_bytes)
        # Stored only when the source did not change while it was indexed, and read whole: a source that could
        # not be read may read next time.
        if (not self._store_failed and all(d.reason != "unreadable" for d in result.dead_letters)
                and cache.source_stamp(path, size) == stamp):
            try:
                cache.store(key, result)
            except Exception as err:  # noqa: BLE001 - nor one that cannot be written
                if not self._store_failed:  # once: a full or read-only cache would say it for every source
                    _LOG.warning("index cache: cannot store the entry of %s (%s); this step stores no more",
                                 path, err)
                self._store_failed = True
        return result, how

    def process(self, files):
        tables = []
        skipped = 0
        origins = {"cached": 0, "indexed": 0, "rejected": 0}
        for path, size in files:
            result, how = self._index(path, size)
            origins[how] += 1
            tables.append(result.table)
            skipped += result.skipped_members
            for dead in result.dead_letters:
                self._errors.inc()
                yield beam.pvalue.TaggedOutput(ERRORS, dead.to_dict())
        # One chunk per column: a table of 256 one-source chunks pickled 30x slower between stages.
        table = pa.concat_tables(tables).combine_chunks() if tables else INDEX_SCHEMA.empty_table()
        self._sources.inc(len(files))
        self._chunks.inc(table.num_rows)
        self._records.inc(pc.sum(table["num_records"]).as_py() or 0)
        yield beam.pvalue.TaggedOutput(SOURCE_STATS, {"sources": len(files), "skipped_members": skipped,
                                                      "sources_cached": origins["cached"],
                                                      "cache_rejected": origins["rejected"]})
        if table.num_rows:
            yield table
        self._progress.record("index", files=len(files), chunks=table.num_rows)


class IndexChunkFiles(beam.PTransform):
    """Stage 2: batches of (path, size) -> index tables.

    Returns a DoOutputsTuple: the main output (pyarrow Tables of INDEX_SCHEMA),
    ERRORS (DeadLetter dicts) and SOURCE_STATS (per-batch dicts with the number
    of sources, of those read from the index cache and of cache entries
    rejected, and of skipped non-chunk archive members). With an index cache
    (index_cache.py), sources whose entry proves them unchanged are not read.
    """

    def __init__(self, count_method: str = "scan", expected_version: int = 0,
                 max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, progress_dir: str | None = None,
                 cache: IndexCache | None = None):
        super().__init__()
        self._progress_dir = progress_dir
        self._method = count_method
        self._expected_version = expected_version
        self._max_chunk_bytes = max_chunk_bytes
        self._cache = cache

    def expand(self, file_batches):
        return file_batches | "Index" >> beam.ParDo(
            _IndexFilesFn(self._method, self._expected_version, self._max_chunk_bytes,
                          ProgressLog(self._progress_dir), self._cache)
        ).with_outputs(ERRORS, SOURCE_STATS, main="index")
