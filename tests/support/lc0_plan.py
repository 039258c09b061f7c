"""lc0 plans composed whole, for tests and benchmarks: what the distributed stages produce together.

The job never holds the index in one place (transforms/lc0/sampling.py); tests
and benchmarks compose the same steps over one table to compare with it.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from shardmill.transforms.common.dead_letter import DeadLetter
from shardmill.transforms.lc0.sampling import (MAX_TASK_BYTES, WRITE_LESS, ReadTask, decide, final_stats, merge_stats,
                                           plan_table, read_tasks, summarize_sources)
from shardmill.transforms.lc0.sampling import SamplingParams, emissions
from shardmill.transforms.output.shard_count import ShardSizing, shard_count


@dataclasses.dataclass
class Plan:
    tasks: list[ReadTask]
    dead_letters: list[DeadLetter]
    num_shards: int
    record_size: int
    record_version: int
    stats: dict


def make_plan(index: pa.Table, params: SamplingParams, sizing: ShardSizing = ShardSizing(),
              max_task_bytes: int = MAX_TASK_BYTES) -> Plan:
    decisions = decide(summarize_sources(index), params.pool_size)
    planned = plan_table(index, decisions, params)
    num_shards = shard_count(planned.records_planned * decisions.record_size, sizing, WRITE_LESS)
    tasks = read_tasks(planned.used, params, num_shards, max_task_bytes)
    return Plan(tasks, planned.dead_letters, num_shards, decisions.record_size, decisions.record_version,
                final_stats(merge_stats([planned.stats]), params))


def positions_of_uses(key: int, num_records: int, num_uses: int, position_count: int, seed: int):
    """(use_count, position) arrays of every record the chunk's uses emit (all its emissions)."""
    per_use = num_records if position_count <= 0 else position_count
    return emissions(key, num_records, position_count, seed, 0, max(0, num_uses) * per_use)
