"""The token job's summary text."""

from __future__ import annotations


def render_summary(manifest: dict) -> str:
    stats = manifest["stats"]["token_dataset"]
    return "\n".join([
        f"megatron samples {stats['num_samples']:,} of {stats['seq_length']} tokens "
        f"(+1: {stats['add_extra_token']}), {stats['num_epochs']} epoch(s), "
        f"separate final epoch: {stats['separate_final_epoch']}",
        f"sequences {stats['sequences']:,} ({stats['sequences_kept']:,} kept), {stats['dtype']}, "
        f"{stats['tokens_per_epoch']:,} tokens per epoch, "
        f"index built in {manifest['stats']['timings']['index_build_seconds']:.2f} s",
        f"records out {manifest['stats']['accounting']['records_written']:,} in {manifest['num_shards']} shard(s), "
        f"time {manifest['stats']['timings']['seconds']:.1f} s",
    ])
