"""Names and versions of the output directory contract, shared by the job and the reader.

Deliberately import-free: the native reader imports it without pulling in Beam.

An output directory holds one committed *generation* at a time:

  _manifest.json                          the commit point: names every file of the generation
  g000002-shard-00000-of-00004.parquet    the shards (the only names Arrow/pandas/DuckDB discovery reads)
  _g000002/errors.jsonl                   the generation's dead letters (and job-specific files)
  _claim.json                             present while a run holds the directory
  _staging-<run id>/                      a running job's shards, spills and prepared manifest
  _rejected/                              the last run that exceeded max_error_fraction: its report

Everything but the shards starts with `_`, so dataset discovery of Arrow,
pandas, polars and DuckDB skips it. Generations make a new run's shards
distinct from the committed ones, so the old output stays whole until the
manifest is replaced.

Format 1 (before generations) had `manifest.json`, `errors.jsonl` and
`shard-SSSSS-of-NNNNN.parquet`; readers still read it.
"""

import re

FORMAT_VERSION = 2  # manifest format; bump on any incompatible change
READABLE_FORMAT_VERSIONS = (1, 2)

MANIFEST_NAME = "_manifest.json"
LEGACY_MANIFEST_NAME = "manifest.json"  # format 1
LEGACY_ERRORS_NAME = "errors.jsonl"  # format 1
ERRORS_NAME = "errors.jsonl"  # inside the generation's metadata directory
CLAIM_NAME = "_claim.json"
CLAIMS_DIR_NAME = "_claims"  # object stores: one claim object per run (see output_claim)
STAGING_PREFIX = "_staging-"
REJECTED_DIR_NAME = "_rejected"

# Parquet key-value metadata of every shard: the shardmill version that wrote it.
SHARD_VERSION_KEY = "shardmill.version"

SHARD_NAME_RE = re.compile(r"^(?:g(\d{6})-)?shard-(\d{5})-of-(\d{5})\.parquet$")
GENERATION_DIR_RE = re.compile(r"^_g(\d{6})$")


def shard_name(generation: int, shard: int, num_shards: int) -> str:
    return f"g{generation:06d}-shard-{shard:05d}-of-{num_shards:05d}.parquet"


def generation_dir_name(generation: int) -> str:
    """The directory of a generation's metadata files (errors, job-specific files)."""
    return f"_g{generation:06d}"


def shardmill_version() -> str:
    """The installed shardmill's version (written into every manifest)."""
    from importlib import metadata

    try:
        return metadata.version("shardmill")
    except metadata.PackageNotFoundError:
        return "unknown"
