"""ShardReader keyword arguments from flat settings, for tests that vary many settings at once."""

from __future__ import annotations

from shardmill.native_ext import Lc0Tensors, OrderOptions, ReadOptions, ShardOptions

_GROUPS = {
    "order_options": (OrderOptions, ("seed", "shuffle", "window_row_groups")),
    "shard_options": (ShardOptions, ("shard_index", "shard_count")),
    "read_options": (ReadOptions, ("num_threads", "prefetch_windows", "verify_checksums")),
}


def reader_args(**flat) -> dict:
    """seed=1, shard_index=0, num_threads=2, lc0_tensors="loader", ... as the option objects they belong to;
    other arguments (batch_size, columns, num_epochs, state, ...) as they are."""
    out = dict(flat)
    for argument, (cls, fields) in _GROUPS.items():
        values = {name: out.pop(name) for name in fields if name in out}
        if values:
            out[argument] = cls(**values)
    if "lc0_tensors" in out or "planes" in out:
        convention, planes = out.pop("lc0_tensors", "loader"), out.pop("planes", "float32")
        if convention is not None:
            out["converter"] = Lc0Tensors(convention, planes)
    return out


def frames_as(batch: dict, dtype, column: str = "frame"):
    """Views a fixed_size_binary column's (batch, width) bytes as records of a structured dtype."""
    return batch[column].view(dtype).reshape(len(batch[column]))
