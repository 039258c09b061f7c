"""Columns the native core does not arrange — strings, binary, lists, dictionaries, and any column with nulls —
served for the rows of each native batch.

The native core orders every epoch (shuffle, rank slices, resume) and says
which rows a batch holds (`record_index`: the row's position in the
dataset, shards in manifest order). This module decodes the row groups
those rows live in through pyarrow (only the Arrow-served columns, each row
group once while it stays in a small cache: a batch's rows come from the
row groups of one window), keeps the cached ones laid out as one table, and
takes the batch's rows from it in one `take`: Arrow arrays (validity kept; strings and lists zero-copy from the
decoded row group's buffers, after one `take`), numpy arrays, or
flat buffers on request: strings, binary and lists as offsets + values (what
a tokenizer or a nested tensor takes, without a Python object per row).

In numpy every value is exact: numbers and booleans are masked arrays of
their own dtype (the mask is True at nulls), never floats with NaN for nulls,
which would round integers above 2^53 and turn booleans into objects.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from shardmill.native_ext.row_groups import RowGroups

ARROW_FORMATS = ("arrow", "numpy", "offsets")


class OffsetsValues(NamedTuple):
    """A variable-length column as flat arrays: row i is values[offsets[i]:offsets[i + 1]], or null if not valid[i]."""

    offsets: np.ndarray  # int64, rows + 1, from 0
    values: np.ndarray | OffsetsValues  # uint8 bytes (strings: UTF-8); a list's items, themselves flat
    valid: np.ndarray  # bool, rows


def _offsets(column: pa.Array, width: int) -> np.ndarray:
    """The column's rows + 1 offsets (32- or 64-bit in its buffer), as int64 from the buffer's own origin."""
    raw = np.frombuffer(column.buffers()[1], np.int32 if width == 4 else np.int64, len(column) + 1, column.offset * width)
    return raw.astype(np.int64)


def _numeric_or_boolean(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def _nulls(column: pa.Array) -> np.ndarray:
    """True at each null row, from the validity bitmap (pyarrow's is_null costs ~10x more)."""
    if not column.null_count:
        return np.zeros(len(column), dtype=bool)
    bits = np.frombuffer(column.buffers()[0], np.uint8)
    return np.unpackbits(bits, count=column.offset + len(column), bitorder="little")[column.offset:] == 0


def as_numpy(column: pa.Array) -> np.ndarray:
    """A column as numpy, every value exact: numbers and booleans as a masked array of their own dtype (mask True
    at nulls, the values under it 0, False or NaN), lists as an object array of their rows' arrays (None for a
    null row; items converted the same way, a row's array masked only where it holds a null item: a masked
    array per row costs ~50x more than a slice), anything else as pyarrow converts it (strings: objects, None
    for nulls)."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_list_view(column.type) or pa.types.is_large_list_view(column.type):
        column = column.cast(pa.large_list(column.type.value_type))
    kind = column.type
    if _numeric_or_boolean(kind):
        nulls = _nulls(column)
        if column.null_count and not pa.types.is_floating(kind):  # pyarrow would make them float64 or objects
            column = column.fill_null(pa.scalar(False if pa.types.is_boolean(kind) else 0, kind))
        return np.ma.MaskedArray(column.to_numpy(zero_copy_only=False), mask=nulls, copy=False)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        if pa.types.is_fixed_size_list(kind):
            offsets = np.arange(len(column) + 1, dtype=np.int64) * kind.list_size
            items = column.values.slice(column.offset * kind.list_size, len(column) * kind.list_size)
        else:
            offsets = _offsets(column, 4 if pa.types.is_list(kind) else 8)
            items = column.values.slice(offsets[0], offsets[-1] - offsets[0])
            offsets = offsets - offsets[0]
        values = as_numpy(items)
        plain, item_nulls = np.ma.getdata(values), np.ma.getmaskarray(values)
        nulls_before = np.concatenate([[0], np.cumsum(item_nulls)]).tolist()  # null items before each item
        bounds = offsets.tolist()
        rows = np.empty(len(column), dtype=object)
        for i in np.flatnonzero(~_nulls(column)).tolist():
            begin, end = bounds[i], bounds[i + 1]
            rows[i] = (np.ma.MaskedArray(plain[begin:end], mask=item_nulls[begin:end], copy=False)
                       if nulls_before[end] > nulls_before[begin] else plain[begin:end])
        return rows
    return column.to_numpy(zero_copy_only=False)


def as_offsets_values(column: pa.Array) -> OffsetsValues | np.ndarray:
    """Strings, binary and lists as OffsetsValues (a list of strings: offsets into OffsetsValues); any other
    column as as_numpy makes it."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_string_view(column.type) or pa.types.is_binary_view(column.type):
        column = column.cast(pa.large_binary())
    if pa.types.is_list_view(column.type) or pa.types.is_large_list_view(column.type):
        column = column.cast(pa.large_list(column.type.value_type))
    kind = column.type
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind) \
            or pa.types.is_large_binary(kind):
        offsets = _offsets(column, 4 if pa.types.is_string(kind) or pa.types.is_binary(kind) else 8)
        data = column.buffers()[2]
        values = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        return OffsetsValues(offsets - offsets[0], values[offsets[0]:offsets[-1]], valid)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = _offsets(column, 4 if pa.types.is_list(kind) else 8)
        items = column.values.slice(offsets[0], offsets[-1] - offsets[0])
        return OffsetsValues(offsets - offsets[0], as_offsets_values(items), valid)
    return as_numpy(column)


class ArrowColumns:
    """Adds the Arrow-served columns to native batches.

    row_groups: the dataset's row groups of these columns (RowGroups; its cache holds the row groups of about
      two windows).
    as_format: one of ARROW_FORMATS (the reader checks it): "arrow" arrays, "numpy" arrays (as_numpy: masked
      arrays for numbers and booleans, objects for strings and lists), "offsets" (strings, binary and lists as
      OffsetsValues, the rest as with "numpy").
    """

    def __init__(self, row_groups: RowGroups, as_format: str):
        self._row_groups = row_groups
        self.columns = row_groups.columns
        self._format = as_format
        self._offset = np.full(len(row_groups.starts) - 1, -1, dtype=np.int64)  # row group -> its first row in _table
        self._table: pa.Table | None = None
        self._lock = threading.Lock()

    def _arrange(self, needed: np.ndarray) -> None:
        """Decodes the needed row groups not cached and lays the cached ones out as one table, so a batch is one
        `take` from it."""
        self._row_groups.fetch(needed.tolist())
        cached = self._row_groups.cached()
        self._offset[:] = -1
        offset = 0
        for group, table in cached:
            self._offset[group] = offset
            offset += table.num_rows
        self._table = pa.concat_tables([table for _, table in cached]).combine_chunks()

    def add(self, batch: dict) -> None:
        """Adds each Arrow-served column to the batch, rows in the batch's order."""
        rows = np.asarray(batch["record_index"], dtype=np.int64)
        groups = self._row_groups.group_of(rows)
        starts = self._row_groups.starts
        with self._lock:
            if self._table is None or (len(groups) and (self._offset[groups] < 0).any()):
                self._arrange(np.unique(groups) if len(groups) else np.zeros(1, dtype=np.int64))
            taken = self._table.take(pa.array(self._offset[groups] + rows - starts[groups]))
        for name in self.columns:
            column = taken.column(name).combine_chunks()
            if self._format == "numpy":
                batch[name] = as_numpy(column)
            elif self._format == "offsets":
                batch[name] = as_offsets_values(column)
            else:
                batch[name] = column

    def close(self) -> None:
        with self._lock:
            self._row_groups.close()
            self._table = None
