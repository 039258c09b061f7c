"""Columns the native core does not arrange — strings, binary, lists, dictionaries, and any column with nulls —
served for the rows of each native batch.

The native core orders every epoch (shuffle, rank slices, resume) and says
which rows a batch holds (`record_index`: the row's position in the
dataset, shards in manifest order). This module decodes the row groups
those rows live in through pyarrow (only the Arrow-served columns, each row
group once while it stays in a small cache: a batch's rows come from the
row groups of one window), takes the rows, and puts them in the batch's
order: Arrow arrays (validity kept; strings and lists zero-copy from the
decoded row group's buffers, after one `take`), or numpy object arrays on
request.
"""

from __future__ import annotations

import collections
import threading

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

ARROW_FORMATS = ("arrow", "numpy")


class ArrowColumns:
    """Adds the Arrow-served columns to native batches.

    shard_paths: as the native reader opens them (local paths or URIs).
    row_groups: rows per row group, per shard (the manifest's).
    cached_row_groups: decoded row groups kept (least recently used goes first).
    """

    def __init__(self, shard_paths: list[str], row_groups: list[list[int]], columns: list[str], as_format: str,
                 cached_row_groups: int):
        if as_format not in ARROW_FORMATS:
            raise ValueError(f"arrow_columns_as must be one of {', '.join(ARROW_FORMATS)}, got {as_format!r}")
        self._paths = list(shard_paths)
        self._groups = [(s, g) for s, counts in enumerate(row_groups) for g in range(len(counts))]
        sizes = [n for counts in row_groups for n in counts]
        self._starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self.columns = list(columns)
        self._numpy = as_format == "numpy"
        self._capacity = max(1, cached_row_groups)
        self._cache: collections.OrderedDict[int, pa.Table] = collections.OrderedDict()
        self._files: collections.OrderedDict[int, pq.ParquetFile] = collections.OrderedDict()
        self._lock = threading.Lock()

    def _file(self, shard: int) -> pq.ParquetFile:
        if shard in self._files:
            self._files.move_to_end(shard)
            return self._files[shard]
        location = self._paths[shard]
        if "://" in location:
            filesystem, path = pafs.FileSystem.from_uri(location)
        else:
            filesystem, path = pafs.LocalFileSystem(), location
        parquet = pq.ParquetFile(filesystem.open_input_file(path))
        self._files[shard] = parquet
        while len(self._files) > 64:  # open shards kept
            self._files.popitem(last=False)[1].close()
        return parquet

    def _row_group(self, group: int) -> pa.Table:
        if group in self._cache:
            self._cache.move_to_end(group)
            return self._cache[group]
        shard, index = self._groups[group]
        table = self._file(shard).read_row_group(index, columns=self.columns)
        self._cache[group] = table
        while len(self._cache) > self._capacity:
            self._cache.popitem(last=False)
        return table

    def add(self, batch: dict) -> None:
        """Adds each Arrow-served column to the batch, rows in the batch's order."""
        rows = np.asarray(batch["record_index"], dtype=np.int64)
        groups = np.searchsorted(self._starts, rows, side="right") - 1
        order = np.argsort(groups, kind="stable")
        present, first = np.unique(groups[order], return_index=True)
        bounds = list(first) + [len(order)]
        with self._lock:
            pieces = [self._row_group(int(g)).take(pa.array(rows[order[bounds[i]:bounds[i + 1]]] - self._starts[g]))
                      for i, g in enumerate(present)]
        table = pa.concat_tables(pieces) if pieces else self._empty()
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.arange(len(order))
        table = table.take(pa.array(inverse))
        for name in self.columns:
            column = table.column(name).combine_chunks()
            batch[name] = column.to_numpy(zero_copy_only=False) if self._numpy else column

    def _empty(self) -> pa.Table:
        with self._lock:
            return self._row_group(0).slice(0, 0)

    def close(self) -> None:
        with self._lock:
            for parquet in self._files.values():
                parquet.close()
            self._files.clear()
            self._cache.clear()
