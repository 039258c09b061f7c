"""Writes shardmill-format output directories directly with pyarrow, for reader tests.

Columns: `frame` (fixed_size_binary[width], bytes derived from the id),
`id` (int64, the row's global index in manifest order), `source` (string)
and any `extra_columns` (numeric, `extra_values(ids, dtype)`). The manifest has
the fields the reader uses, computed from the files.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardmill.core.output_contract import FORMAT_VERSION, MANIFEST_NAMES


def frame_bytes(ids: np.ndarray, width: int) -> np.ndarray:
    """(len(ids), width) uint8: each row's bytes are a function of its id."""
    ids = np.asarray(ids, dtype=np.uint64)
    cols = np.arange(width, dtype=np.uint64)
    return ((ids[:, None] * np.uint64(2654435761) + cols[None, :] * np.uint64(97)) >> np.uint64(3)).astype(np.uint8)


def extra_values(ids: np.ndarray, dtype) -> np.ndarray:
    """The values of an extra numeric column for rows `ids`."""
    return (np.asarray(ids, dtype=np.int64) * 7 + 3).astype(dtype)


def write_output(directory: str, shard_rows: list[int], row_group_rows: int, width: int = 16, *,
                 extra_columns: dict[str, str] | None = None, nullable: bool = True, null_ids=(),
                 frames=frame_bytes, format_version: int = FORMAT_VERSION, **parquet_options) -> dict:
    """Writes the shards and manifest; returns the manifest.

    frames(ids, width): the (len(ids), width) uint8 frames of rows `ids`
    (default frame_bytes, which tests can check; they compress ~600x).
    extra_columns: name -> numpy dtype of further numeric columns.
    nullable: whether the schema's fields are nullable (pyarrow's default; the
    sampling job writes them non-nullable). null_ids: rows whose frame is null.
    parquet_options: override the job's `pq.write_table` options (e.g.
    data_page_version, data_page_size, use_dictionary, compression).
    format_version: 3 (generation 1: `.manifest.json`, `g000001-shard-…`), 2 (the
    same with `_manifest.json`) or 1 (`manifest.json`, `shard-…`), as older
    shardmill versions wrote.
    """
    os.makedirs(directory, exist_ok=True)
    null_ids = set(null_ids)
    shards, next_id = [], 0
    for s, rows in enumerate(shard_rows):
        ids = np.arange(next_id, next_id + rows, dtype=np.int64)
        next_id += rows
        frame_array = np.ascontiguousarray(frames(ids, width), dtype=np.uint8)
        validity = None
        if null_ids:
            validity = pa.array([int(i) not in null_ids for i in ids]).buffers()[1]
        columns = {
            "frame": pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), rows, [validity, pa.py_buffer(frame_array)]),
            "id": pa.array(ids),
            "source": pa.array([f"src{s}"] * rows),
        }
        for name, dtype in (extra_columns or {}).items():
            columns[name] = pa.array(extra_values(ids, dtype))
        schema = pa.schema([pa.field(name, array.type, nullable=nullable) for name, array in columns.items()])
        table = pa.table(columns, schema=schema)
        name = f"shard-{s:05d}-of-{len(shard_rows):05d}.parquet"
        if format_version >= 2:
            name = "g000001-" + name
        path = os.path.join(directory, name)
        # The sampling job's Parquet options (transforms/shard_writer.LC0_PARQUET_OPTIONS:
        # zstd level 1, dictionary encoding for `source` only), so readers and
        # benchmarks decode what real output holds; that module imports Beam.
        options = dict(compression="zstd", compression_level=1, use_dictionary=["source"])
        options.update(parquet_options)
        pq.write_table(table, path, row_group_size=row_group_rows, **options)
        metadata = pq.ParquetFile(path).metadata
        with open(path, "rb") as f:
            data = f.read()
        shards.append({
            "path": name, "rows": rows,
            "row_groups": [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)],
            "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
        })
    manifest = {"format_version": format_version, "record_format": "lc0", "record_size": width, "seed": 0,
                "num_shards": len(shards), "shards": shards, "stats": {}}
    if format_version >= 2:
        manifest["generation"] = 1
    with open(os.path.join(directory, MANIFEST_NAMES[FORMAT_VERSION - format_version]), "w") as f:  # newest first
        json.dump(manifest, f)
    return manifest
