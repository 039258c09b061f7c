"""A shard as a Parquet file: the per-kind ShardFormat contract and the one shard writer.

Every job kind hands WriteShardedOutput a ShardFormat, which turns a shard's
spilled batches into its final table and the job's stats into the
manifest's; write_shard_file encodes the table (the run's ShardCompression,
row groups sized by bytes) and returns the shard's manifest entry.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pyarrow as pa
import pyarrow.parquet as pq

from shardmill.transforms.common.filesystem import write_bytes_atomically
from shardmill.core.output_contract import SHARD_VERSION_KEY, shardmill_version
from shardmill.proto import shardmill_config_pb2 as config_pb2


# The Parquet codecs a shard may have (the config's ShardCodec, lowercase; the manifest's `compression.codec`),
# as pyarrow names them. pyarrow's "lz4" writes Parquet's LZ4_RAW (plain LZ4 blocks); the deprecated
# Hadoop-framed LZ4 that Parquet calls LZ4 is never written, as readers disagree on its framing.
PYARROW_CODECS = {"zstd": "zstd", "lz4_raw": "lz4", "snappy": "snappy", "uncompressed": "none"}


@dataclasses.dataclass(frozen=True)
class ShardCompression:
    """How a shard's Parquet pages are compressed: the codec and, for zstd only, its level.

    The one place a config's codec becomes pyarrow's write options and the manifest's entry.
    """

    codec: str = "zstd"
    level: int | None = 1

    def __post_init__(self):
        if self.codec not in PYARROW_CODECS:
            raise ValueError(f"codec {self.codec!r}: one of {', '.join(PYARROW_CODECS)}")
        if (self.level is not None) != (self.codec == "zstd"):
            raise ValueError(f"codec {self.codec!r}: a level goes with zstd, and zstd needs one (got {self.level!r})")

    @classmethod
    def of(cls, output_config) -> "ShardCompression":
        """From the config's OutputConfig (its codec, and zstd_level for ZSTD)."""
        codec = config_pb2.ShardCodec.Name(output_config.codec).lower()
        return cls(codec, output_config.zstd_level if codec == "zstd" else None)

    def write_options(self) -> dict:
        """pq.write_table's compression options."""
        options = {"compression": PYARROW_CODECS[self.codec]}
        if self.level is not None:
            options["compression_level"] = self.level
        return options

    def manifest_entry(self) -> dict:
        """The manifest's `compression`: {"codec": "zstd", "level": 1}, {"codec": "lz4_raw"}, ..."""
        return {"codec": self.codec} if self.level is None else {"codec": self.codec, "level": self.level}


class ShardFormat:
    """How one job kind turns a shard's batches into its Parquet file, and its stats into the manifest's.

    Subclasses are plain picklable objects (they travel to workers).
    """

    job_kind = ""
    parquet_options: dict = {}

    def table(self, batches: list[pa.RecordBatch], record: dict) -> pa.Table:
        """The shard's rows in their final order."""
        raise NotImplementedError

    def manifest_record(self, record: dict) -> dict:
        """The record description as the manifest states it (default: as the job made it)."""
        return record

    def row_bytes(self, table: pa.Table, record: dict) -> int:
        """Bytes of one row, for sizing row groups (default: the table's average)."""
        return max(1, table.nbytes // table.num_rows) if table.num_rows else 1

    def finish_stats(self, parts: list[dict], shards: list[dict], dead_letters: list[dict]) -> dict:
        """The manifest's stats; must hold accounting.error_fraction. A `timings` entry joins the run's."""
        raise NotImplementedError


def encode_shard(table: pa.Table, row_group_rows: int, compression: ShardCompression,
                 **parquet_options) -> pa.Buffer:
    # The writer's version in the file itself: a shard copied out of its output still says what wrote it.
    metadata = dict(table.schema.metadata or {})
    metadata[SHARD_VERSION_KEY.encode()] = shardmill_version().encode()
    table = table.replace_schema_metadata(metadata)
    # An Arrow stream, not a Python file: the encoder writes pages without taking the GIL, and the
    # finished file is one buffer, not a copy.
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=max(1, row_group_rows), **compression.write_options(),
                   **parquet_options)
    return sink.getvalue()


def write_shard_file(path: str, name: str, table: pa.Table, row_group_rows: int,
                     compression: ShardCompression = ShardCompression(), **parquet_options) -> dict:
    """Writes a finished shard table as Parquet atomically; returns its manifest entry (path = name)."""
    data = encode_shard(table, row_group_rows, compression, **parquet_options)
    write_bytes_atomically(path, data)
    metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    return {
        "path": name,
        "rows": table.num_rows,
        "row_groups": [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)],
        "bytes": data.size,
        "sha256": hashlib.sha256(data).hexdigest(),
        "schema": [{"name": f.name, "type": str(f.type)} for f in table.schema],
    }
