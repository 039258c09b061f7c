"""How many shards an output gets: the same rule and the same limits for every job kind.

Shard count = output.num_shards, or ceil(output bytes / target_shard_bytes).
A shard is sorted in memory by the worker that writes it, so a plan whose
shards would exceed max_shard_bytes is refused before anything is loaded, as
is one of more than MAX_SHARDS shards (each is a file and a Beam element).
"""

from __future__ import annotations

import dataclasses
import math

from shardmill.core.errors import EXIT_BAD_INVOCATION, ShardmillError

MAX_SHARDS = 100_000
MAX_SHARD_BYTES = 8 << 30


class PlanError(ShardmillError, ValueError):
    """A plan that could not run in bounded memory (refused before anything is loaded)."""

    exit_code = EXIT_BAD_INVOCATION


@dataclasses.dataclass(frozen=True)
class ShardSizing:
    num_shards: int = 0  # 0: derived from target_shard_bytes
    target_shard_bytes: int = 256 << 20
    max_shard_bytes: int = MAX_SHARD_BYTES

    @classmethod
    def of(cls, output_config) -> "ShardSizing":
        """From the config's OutputConfig."""
        return cls(num_shards=output_config.num_shards, target_shard_bytes=output_config.target_shard_bytes)


def shard_count(output_bytes: int, sizing: ShardSizing, write_less: str) -> int:
    """The shard count for output_bytes of rows; PlanError past the limits.

    write_less: the kind's own settings that make the output smaller, for the message.
    """
    num_shards = sizing.num_shards or max(1, math.ceil(output_bytes / sizing.target_shard_bytes))
    if output_bytes / num_shards > sizing.max_shard_bytes:
        raise PlanError(
            f"the plan writes {output_bytes / 2**30:,.1f} GiB in {num_shards} shard(s), "
            f"{output_bytes / num_shards / 2**30:,.1f} GiB each; a shard is sorted in memory and may hold at "
            f"most {sizing.max_shard_bytes / 2**30:g} GiB: set more output.num_shards, or {write_less}")
    if num_shards > MAX_SHARDS:
        raise PlanError(f"the plan writes {output_bytes / 2**40:,.2f} TiB, {num_shards:,} shards of "
                        f"output.target_shard_bytes; at most {MAX_SHARDS:,} shards: raise target_shard_bytes "
                        f"or {write_less}")
    return num_shards
