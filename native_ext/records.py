"""Record i of an output by random access, for the map-style datasets (Grain's ShardDataSource, MegatronDataset).

Records are numbered across the shards in manifest order, rows in file
order (the native reader's `record_index`; for a token output, Megatron's
sample i of the split the run wrote). The output is checked as untrusted
input first (dataset.py); row groups are decoded whole, only the columns
asked for, and kept in a small cache (row_groups.py), so random access
costs a row group per miss. Imports no training framework.
"""

from __future__ import annotations

import bisect
import functools
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from shardmill.native_ext.arrow_columns import as_numpy
from shardmill.native_ext.dataset import DEFAULT_COLUMNS, open_dataset
from shardmill.native_ext.options import ReadOptions, checked_reader_options
from shardmill.native_ext.row_groups import LocalCopies, RowGroups


def decode_columns(table: pa.Table, columns: Sequence[str], typed: dict[str, np.dtype]) -> dict:
    """A row group's columns as name -> (values, nulls: bool per row or None): fixed-size binary as uint8 rows
    (arrays of their dtype for the typed columns), the others as arrow_columns.as_numpy serves them."""
    decoded = {}
    for name in columns:
        column = table.column(name).combine_chunks()
        nulls = None
        if pa.types.is_fixed_size_binary(column.type):
            width = column.type.byte_width
            values = np.frombuffer(column.buffers()[1], np.uint8)
            values = values[column.offset * width:(column.offset + len(column)) * width].reshape(-1, width)
            if name in typed:
                values = values.view(typed[name])
        else:
            values = as_numpy(column)
            if isinstance(values, np.ma.MaskedArray):
                # Numbers and booleans: a record's value is read from the plain arrays (indexing a masked array
                # costs ~20x more).
                values, nulls = values.data, (values.mask if column.null_count else None)
        decoded[name] = (values, nulls)
    return decoded


class RecordSource:
    """Records of a shardmill output by index: `source[i]` one record as a dict of numpy values (None for a
    null), `source.take(indices)` several as one array per column.

    columns: None: the output's own (ShardReader's defaults); a function of the checked manifest: the columns it
      returns (it may refuse an output of another kind: OutputError).
    cached_row_groups: decoded row groups kept (least recently used goes first).
    read_options: ShardReader's ReadOptions: verify_checksums, remote and cache (a local copy of each shard read,
      shared with every reader of the host) apply; num_threads and prefetch_windows do not (records are read in
      the caller's threads, on demand).
    Thread-safe; picklable (the cache and open files are not pickled).
    """

    def __init__(self, path: str, columns: Sequence[str] | Callable[[dict], Sequence[str]] | None = None,
                 cached_row_groups: int = 8, *, read_options: ReadOptions = ReadOptions()):
        if cached_row_groups < 1:
            raise ValueError(f"cached_row_groups must be >= 1, got {cached_row_groups}")
        read = checked_reader_options(read_options=read_options)["read_options"]
        # The untrusted-output checks; columns None: the output's own (ShardReader's defaults).
        dataset = open_dataset(path, read.verify_checksums,
                               columns=DEFAULT_COLUMNS if columns is None else columns if callable(columns) else list(columns),
                               remote=read.remote)
        self.path = path
        self.manifest = dataset.manifest
        self.columns = dataset.columns
        shards = dataset.manifest["shards"]
        self._copies = None
        if read.cache is not None:  # checked paths: inside the output, absolute or URIs
            self._copies = LocalCopies([(location, list(s["row_groups"]), s["sha256"], s["bytes"])
                                        for location, s in zip(dataset.shard_paths, shards)],
                                       read.cache, read.remote, held=cached_row_groups)
        decode = functools.partial(decode_columns, columns=self.columns, typed=dataset.typed)
        self._row_groups = RowGroups(dataset.shard_paths, [s["row_groups"] for s in shards], self.columns,
                                     cached_row_groups, read.remote, decode=decode, cached_path=self._copies)
        self._cached_row_groups = cached_row_groups
        self._starts = self._row_groups.starts.tolist()

    def __len__(self) -> int:
        return self._starts[-1]

    def _check(self, key: int) -> int:
        key = int(key)
        if not 0 <= key < len(self):
            raise IndexError(f"record {key} is outside 0..{len(self) - 1} of {self.path}")
        return key

    def __getitem__(self, record_key: int) -> dict:
        key = self._check(record_key)
        group = bisect.bisect_right(self._starts, key) - 1
        [decoded] = self._row_groups.fetch([group])
        row = key - self._starts[group]
        return {name: None if nulls is not None and nulls[row] else values[row]
                for name, (values, nulls) in decoded.items()}

    def take(self, indices: Sequence[int]) -> dict:
        """The records `indices` (each in 0..len-1), in that order, as name -> one array of their values per
        column (rows of a fixed-size binary column; a column with nulls as a masked array). Row groups are
        fetched at most `cached_row_groups` at a time, so a batch spread over many holds no more than that."""
        keys = np.array([self._check(i) for i in indices], dtype=np.int64)
        if not len(keys):
            return {name: np.empty(0) for name in self.columns}
        groups = self._row_groups.group_of(keys)
        first = int(groups[0])
        if (groups == first).all():  # one row group (a single record; most of a sequential batch): no regrouping
            [decoded] = self._row_groups.fetch([first])
            return self._rows(decoded, keys - self._starts[first])
        unique = np.unique(groups)
        parts = {name: [] for name in self.columns}
        where = []  # the positions in `indices` each part's rows go to
        for start in range(0, len(unique), self._cached_row_groups):
            fetched = unique[start:start + self._cached_row_groups].tolist()
            for group, decoded in zip(fetched, self._row_groups.fetch(fetched)):
                positions = np.flatnonzero(groups == group)
                where.append(positions)
                for name, values in self._rows(decoded, keys[positions] - self._starts[group]).items():
                    parts[name].append(values)
        order = np.argsort(np.concatenate(where), kind="stable")
        out = {}
        for name, pieces in parts.items():
            masked = any(np.ma.isMaskedArray(p) for p in pieces)
            out[name] = (np.ma.concatenate(pieces) if masked else np.concatenate(pieces))[order]
        return out

    @staticmethod
    def _rows(decoded: dict, rows: np.ndarray) -> dict:
        """A decoded row group's rows `rows`, per column (masked where a column has nulls)."""
        return {name: values[rows] if nulls is None else np.ma.MaskedArray(values[rows], nulls[rows])
                for name, (values, nulls) in decoded.items()}

    def cache_stats(self) -> dict | None:
        """With read_options.cache: this process's shard cache counts (as ShardReader.cache_stats()); None
        without a cache."""
        if self._copies is None:
            return None
        return self._copies.stats()

    def close(self) -> None:
        """Closes the open shards and drops the cached row groups (the source reopens them if used again)."""
        self._row_groups.close()
        if self._copies is not None:
            self._copies.close()

    def __repr__(self) -> str:
        return f"RecordSource({self.path!r}, columns={self.columns})"
