"""The lc0 job kind: its config section's checks and its hooks (plan.py, graph.py, shards.py, report.py and
`count`: count.py)."""

from __future__ import annotations

import math

from shardmill.core.errors import ConfigError
from shardmill.transforms.job import JobKind
from shardmill.transforms.lc0.record_format import LC0_INPUT_SUFFIXES


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
        from shardmill.transforms.lc0.plan import plan_lc0

        return plan_lc0(config, inputs, local_run)

    def transform(self, config, plan, paths):
        from shardmill.transforms.lc0.graph import Lc0Job

        return Lc0Job(plan, paths)

    def shard_format(self, config, plan):
        from shardmill.transforms.lc0.shards import Lc0ShardFormat

        return Lc0ShardFormat()

    def describe(self, manifest):
        return f"lc0 V{manifest['record_version']}"

    def count_settings(self, config, args, local_run):
        from shardmill.transforms.lc0.count import CountSettings
        from shardmill.transforms.lc0.plan import count_method, index_cache

        if args.lc0_version is not None:
            config.lc0.index.lc0_version = args.lc0_version
        if args.index_cache is not None:
            config.lc0.index.cache = args.index_cache
        self.validate(config)
        method = "decompress" if args.verify else args.count_method or count_method(config.lc0)
        index = config.lc0.index
        return CountSettings(tuple(self.inputs(config)), method, index.lc0_version, index.max_chunk_bytes,
                             index_cache(index, method, local_run))

    def render_count(self, settings, result, args):
        from shardmill.transforms.lc0.count import render_count

        return render_count(settings, result, args.json, args.index_out, args.errors_out)


KIND = Lc0Kind()
