"""The lc0 job kind: its config section, plan, shards, summary, plots and `count`."""

from __future__ import annotations

import json
import math

from shardmill.transforms.job import ConfigError, JobKind

SOURCE_SUFFIXES = (".gz", ".tar")
COMPRESSED_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")  # refused with their own reason
# What discovery hands to indexing: the sources, and the archives that get their own dead letter.
LC0_INPUT_SUFFIXES = SOURCE_SUFFIXES + COMPRESSED_ARCHIVE_SUFFIXES

MAX_ERRORS_SHOWN = 20


def count_method(lc0_config) -> str:
    """The index count method as the kernel's name for it (unset: scan)."""
    from shardmill.proto import shardmill_config_pb2 as config_pb2

    method = lc0_config.index.count_method
    return "scan" if method == config_pb2.COUNT_METHOD_UNSPECIFIED else config_pb2.CountMethod.Name(method).lower()


def sampling_params(config):
    """The chunk-sampling kernel's parameters from a validated config."""
    from shardmill.transforms.lc0.sampling import SamplingParams

    pool = config.lc0.chunk_pool
    return SamplingParams(
        seed=config.seed,
        passes=pool.passes,
        position_count=pool.position_count,
        threshold=pool.hanse_sampling_threshold,
        gamma=pool.hanse_sampling_gamma if pool.HasField("hanse_sampling_threshold") else 1.0,
        pool_size=pool.chunk_pool_size,
    )


def index_cache(index_config, method: str, local_run: bool):
    """The IndexCache of a validated IndexConfig for this way of indexing, or None (index_cache.py)."""
    from shardmill.transforms.lc0.index_cache import IndexCache, cache_location

    location = cache_location(index_config, local_run)
    if location is None:
        return None
    return IndexCache(location, method, index_config.lc0_version, index_config.max_chunk_bytes,
                      index_config.cache_max_age_days)


class Lc0Kind(JobKind):
    name = "lc0"
    package = "shardmill.transforms.lc0"
    config_field = "lc0"
    record_format = "lc0"
    description = "sample lc0 chunk files (.gz games, .tar archives) into shuffled training records"
    input_suffixes = LC0_INPUT_SUFFIXES

    def validate(self, config) -> None:
        index = config.lc0.index
        if not 1 << 20 <= index.max_chunk_bytes <= 1 << 32:
            raise ConfigError(f"lc0.index.max_chunk_bytes: must be in 1 MiB..4 GiB, got {index.max_chunk_bytes}")
        if not 1 <= index.cache_max_age_days <= 3650:
            raise ConfigError(f"lc0.index.cache_max_age_days: must be in 1..3650, got {index.cache_max_age_days}")
        if index.cache and index.cache != "none" and "://" in index.cache and index.cache.split("://")[0] not in (
                "gs", "s3", "file"):
            raise ConfigError(f"lc0.index.cache: {index.cache!r} is neither a local directory nor a gs:// or s3:// "
                              "prefix (\"none\": no cache)")
        if index.lc0_version and index.lc0_version not in (3, 4, 5, 6, 7):
            raise ConfigError(f"lc0.index.lc0_version: {index.lc0_version} is not an lc0 version (3..7, or 0 for any)")
        pool = config.lc0.chunk_pool
        if pool.HasField("chunk_pool_size") and pool.chunk_pool_size < 1:
            raise ConfigError("lc0.chunk_pool.chunk_pool_size: must be >= 1 when set")
        if pool.HasField("hanse_sampling_threshold") and pool.hanse_sampling_threshold < 1:
            raise ConfigError("lc0.chunk_pool.hanse_sampling_threshold: must be >= 1 when set")
        gamma = pool.hanse_sampling_gamma
        if not math.isfinite(gamma) or gamma < 0:
            raise ConfigError(f"lc0.chunk_pool.hanse_sampling_gamma: must be finite and >= 0, got {gamma}")
        if not 1 <= pool.passes <= 1_000_000:
            raise ConfigError(f"lc0.chunk_pool.passes: must be in 1..1000000, got {pool.passes}")
        if pool.HasField("position_count") and not 1 <= pool.position_count <= 1_000_000:
            raise ConfigError(f"lc0.chunk_pool.position_count: must be in 1..1000000 when set, "
                              f"got {pool.position_count}")

    def plan(self, config, inputs, local_run=True):
        from shardmill.transforms.common.ordered_pool import elements_at_once
        from shardmill.transforms.lc0.job import Lc0Plan
        from shardmill.transforms.output.shard_count import ShardSizing

        return Lc0Plan(inputs=tuple(inputs), count_method=count_method(config.lc0),
                       expected_version=config.lc0.index.lc0_version,
                       max_chunk_bytes=config.lc0.index.max_chunk_bytes, params=sampling_params(config),
                       sizing=ShardSizing.of(config.output),
                       index_cache=index_cache(config.lc0.index, count_method(config.lc0), local_run),
                       load_tasks_at_once=elements_at_once(local_run))

    def transform(self, config, plan, paths):
        from shardmill.transforms.lc0.job import Lc0Job

        return Lc0Job(plan, paths)

    def shard_format(self, config, plan):
        from shardmill.transforms.lc0.shards import Lc0ShardFormat

        return Lc0ShardFormat()

    def describe(self, manifest):
        return f"lc0 V{manifest['record_version']}"

    def count(self, config, args, options):
        from shardmill.pipelines.runner import is_local_run
        from shardmill.transforms.lc0.count import run_count

        if args.lc0_version is not None:
            config.lc0.index.lc0_version = args.lc0_version
        if args.index_cache is not None:
            config.lc0.index.cache = args.index_cache
        self.validate(config)
        method = "decompress" if args.verify else args.count_method or count_method(config.lc0)
        patterns = self.inputs(config)
        result = run_count(patterns, method, config.lc0.index.lc0_version, options,
                           args.index_out, args.errors_out, config.lc0.index.max_chunk_bytes,
                           index_cache(config.lc0.index, method, is_local_run(options)))
        if args.json:
            print(json.dumps({"summary": result.summary.to_dict(), "errors": result.dead_letters,
                              "seconds": result.seconds}, indent=1))
            return 0
        print(f"shardmill count: {len(patterns)} pattern(s), count method {method}, {result.seconds:.1f} s")
        print(result.summary.render())
        for dead in result.dead_letters[:MAX_ERRORS_SHOWN]:
            where = dead["path"] + (f" :: {dead['member']}" if dead["member"] else "")
            print(f"  error: {where}: {dead['reason']}: {dead['detail']}")
        if len(result.dead_letters) > MAX_ERRORS_SHOWN:
            print(f"  ... {len(result.dead_letters) - MAX_ERRORS_SHOWN} more in {result.errors_path}")
        if args.index_out:
            print(f"index written to {result.index_path}")
        if args.errors_out:
            print(f"errors written to {result.errors_path}")
        return 0


KIND = Lc0Kind()
