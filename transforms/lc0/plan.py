"""The lc0 job's plan, made on the launcher: its settings as plain values for the workers.

Which chunks are used is decided in the pipeline, from the index (sampling.py): no launcher holds the index
(rule: scale is designed in), so the launcher's plan is the settings that decision and the loading need.
"""

from __future__ import annotations

import dataclasses

from shardmill.transforms.common.ordered_pool import elements_at_once
from shardmill.transforms.lc0.index_cache import IndexCache, cache_location
from shardmill.transforms.lc0.sampling import SamplingParams
from shardmill.transforms.output.shard_count import ShardSizing


@dataclasses.dataclass(frozen=True)
class Lc0Plan:
    """The lc0 job's settings as plain values (protos don't pickle to workers)."""

    inputs: tuple[str, ...]
    count_method: str
    expected_version: int
    max_chunk_bytes: int
    params: SamplingParams
    sizing: ShardSizing
    index_cache: IndexCache | None = None
    load_tasks_at_once: int = 1  # read tasks one worker loads and spills at once


def count_method(lc0_config) -> str:
    """The index count method as the kernel's name for it (unset: scan)."""
    from shardmill.proto import shardmill_config_pb2 as config_pb2

    method = lc0_config.index.count_method
    return "scan" if method == config_pb2.COUNT_METHOD_UNSPECIFIED else config_pb2.CountMethod.Name(method).lower()


def sampling_params(config) -> SamplingParams:
    """The chunk-sampling kernel's parameters from a validated config."""
    pool = config.lc0.chunk_pool
    return SamplingParams(
        seed=config.seed,
        passes=pool.passes,
        position_count=pool.position_count,
        threshold=pool.hanse_sampling_threshold,
        gamma=pool.hanse_sampling_gamma if pool.HasField("hanse_sampling_threshold") else 1.0,
        pool_size=pool.chunk_pool_size,
    )


def index_cache(index_config, method: str, local_run: bool) -> IndexCache | None:
    """The IndexCache of a validated IndexConfig for this way of indexing, or None (index_cache.py)."""
    location = cache_location(index_config, local_run)
    if location is None:
        return None
    return IndexCache(location, method, index_config.lc0_version, index_config.max_chunk_bytes,
                      index_config.cache_max_age_days)


def plan_lc0(config, inputs: list[str], local_run: bool = True) -> Lc0Plan:
    """The plan of a validated config: inputs, how to index them (and the cache), how to sample and size shards."""
    method = count_method(config.lc0)
    return Lc0Plan(inputs=tuple(inputs), count_method=method, expected_version=config.lc0.index.lc0_version,
                   max_chunk_bytes=config.lc0.index.max_chunk_bytes, params=sampling_params(config),
                   sizing=ShardSizing.of(config.output), index_cache=index_cache(config.lc0.index, method, local_run),
                   load_tasks_at_once=elements_at_once(local_run))
