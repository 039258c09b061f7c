"""Names and versions of the output directory contract, shared by the job and the reader.

Deliberately import-free: the native reader imports it without pulling in Beam.

An output directory holds one committed *generation* at a time:

  .manifest.json                          the commit point: names every file of the generation
  g000002-shard-00000-of-00004.parquet    the shards: the only names a dataset loader reads
  .g000002/errors.jsonl                   the generation's dead letters (and job-specific files)
  .claim.json                             present while a run holds the directory
  .staging-<run id>/                      a running job's shards, spills and prepared manifest
  .rejected/                              the last run that exceeded max_error_fraction: its report

Everything but the shards starts with `.`: the one prefix that every dataset
discovery skips (Arrow, pandas, DuckDB and Spark skip `.` and `_`; Hugging
Face `datasets` skips only `.`, and read `_manifest.json` as a Parquet file).
Polars reads a directory only when every file below it ends in `.parquet`,
hidden or not, so it reads an output through a glob (`OUT/*.parquet`).
Generations make a new run's shards distinct from the committed ones, so the
old output stays whole until the manifest is replaced.

Older formats are still read, and overwritten in place: format 2 named the
metadata with `_` (`_manifest.json`, `_g000002/`, `_claim.json`,
`_staging-…`, `_rejected/`); format 1 (before generations) had
`manifest.json`, `errors.jsonl` and `shard-SSSSS-of-NNNNN.parquet`.
"""

import re

FORMAT_VERSION = 3  # manifest format; bump on any incompatible change
READABLE_FORMAT_VERSIONS = (1, 2, 3)

MANIFEST_NAME = ".manifest.json"
FORMAT1_MANIFEST_NAME = "manifest.json"
FORMAT1_ERRORS_NAME = "errors.jsonl"
# Where a directory's manifest may be, newest format first: a reader takes the first that exists, so a
# crash between writing a new-format manifest and deleting the old one still shows the new output.
MANIFEST_NAMES = (MANIFEST_NAME, "_manifest.json", FORMAT1_MANIFEST_NAME)
ERRORS_NAME = "errors.jsonl"  # inside the generation's metadata directory
GENERATION_MANIFEST_NAME = "manifest.json"  # inside it too: the generation's manifest, kept while it is retained
CLAIM_NAME = ".claim.json"
FORMAT2_CLAIM_NAME = "_claim.json"  # honoured: an older shardmill may be writing the directory
CLAIMS_DIR_NAME = ".claims"  # object stores: one claim object per run (see output_claim)
STAGING_PREFIX = ".staging-"
FORMAT2_STAGING_PREFIX = "_staging-"
REJECTED_DIR_NAME = ".rejected"
FORMAT2_REJECTED_DIR_NAME = "_rejected"
REPORT_MANIFEST_NAME = "manifest.json"  # the rejected run's prepared manifest, inside REJECTED_DIR_NAME

# Parquet key-value metadata of every shard: the shardmill version that wrote it.
SHARD_VERSION_KEY = "shardmill.version"

SHARD_NAME_RE = re.compile(r"^(?:g(\d{6})-)?shard-(\d{5})-of-(\d{5})\.parquet$")
GENERATION_DIR_RE = re.compile(r"^[._]g(\d{6})$")  # `_`: format 2


def shard_name(generation: int, shard: int, num_shards: int) -> str:
    return f"g{generation:06d}-shard-{shard:05d}-of-{num_shards:05d}.parquet"


def generation_dir_name(generation: int) -> str:
    """The directory of a generation's metadata files (errors, job-specific files)."""
    return f".g{generation:06d}"


def generation_manifest_path(generation: int) -> str:
    """Where a generation's own copy of its manifest is, relative to the output directory."""
    return f"{generation_dir_name(generation)}/{GENERATION_MANIFEST_NAME}"


def shardmill_version() -> str:
    """The installed shardmill's version (written into every manifest)."""
    from importlib import metadata

    try:
        return metadata.version("shardmill")
    except metadata.PackageNotFoundError:
        return "unknown"
