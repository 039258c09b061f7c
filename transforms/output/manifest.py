"""The manifest: what one committed generation of an output holds.

The manifest describes one committed generation of an output directory, the
same fields for every job kind: format and shardmill version, job kind,
record description, schema, seed, the full config, the shards' compression
(codec and, for zstd, level), every shard (path, rows, row-group row counts,
bytes, SHA-256), where the dead letters are, and the
stats: accounting that balances, sampling statistics, and timings: how this
run went (seconds; what came from a cache), the only part a rerun of the same
config, seed and input may change.
"""

from __future__ import annotations

from shardmill.core.output_contract import FORMAT_VERSION, shardmill_version


def build_manifest(
    *,
    job_kind: str,
    record: dict,
    config_text: str,
    seed: int,
    generation: int,
    schema: list[dict],
    shards: list[dict],
    compression: dict,
    errors: dict,
    stats: dict,
    timings: dict,
) -> dict:
    """The manifest of one generation, with the same fields for every job kind.

    record: `record_format` plus what describes one row of this kind (lc0:
    record_version, record_size); its keys are also top-level fields.
    compression: ShardCompression.manifest_entry() (transforms/output/shard_format.py).
    errors: where the generation's dead letters are and how many.
    """
    shards = sorted(shards, key=lambda s: s["shard"])
    return {
        **record,
        "format_version": FORMAT_VERSION,
        "shardmill_version": shardmill_version(),
        "job_kind": job_kind,
        "generation": generation,
        "record": record,
        "seed": seed,
        "config": config_text,
        "schema": schema,
        "num_shards": len(shards),
        "compression": compression,
        "shards": [{k: shard[k] for k in ("path", "rows", "row_groups", "bytes", "sha256")} for shard in shards],
        "errors": errors,
        # Timings are the only part of a manifest that differs between identical runs.
        "stats": {**stats, "timings": timings},
    }


def describe_compression(manifest: dict) -> str:
    """The shards' compression as `inspect` prints it: "zstd level 1", "lz4_raw", "uncompressed".

    Outputs written before the manifest recorded it are zstd at their config's zstd_level, which Parquet
    files do not store: such a manifest is read, and said to be zstd of an unrecorded level.
    """
    compression = manifest.get("compression")
    if not isinstance(compression, dict) or not isinstance(compression.get("codec"), str):
        return "zstd (level not recorded)"
    if compression.get("level") is None:
        return compression["codec"]
    return f"{compression['codec']} level {compression['level']}"


