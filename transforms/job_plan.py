"""Stage 3: the global plan, decided from the chunk index alone.

`make_plan` takes the whole index (one row per chunk; small) and returns
which chunks are used how many times, the shard count, the read tasks for
stage 4 (used chunks grouped per source, in file order, split into bounded
batches) and the accounting of every chunk it does not pass on. Rejected
chunks are never read.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardmill.transforms.chunk_index import DeadLetter
from shardmill.transforms.chunk_sampling import (
    SamplingParams,
    acceptance_probability,
    use_counts,
    window_mask,
)
from shardmill.transforms.keyed_hash import chunk_keys

LENGTH_BIN = 20  # acceptance statistics by game length, in bins of this many records

PLAN_REASONS = {
    "duplicate_source": "another source file has the same basename (sort key); chunk identities would clash",
    "wrong_version": "the chunk's record version differs from the window's dominant version",
}


@dataclasses.dataclass(frozen=True)
class OutputParams:
    num_shards: int = 0  # 0: derived from target_shard_bytes
    target_shard_bytes: int = 256 << 20
    max_task_bytes: int = 64 << 20  # planned output bytes per read task


@dataclasses.dataclass
class ReadTask:
    """Stage-4 work item: chunks of one source to read, in file order."""

    source: str
    chunks: pa.Table  # index columns + chunk_key (uint64) + num_uses (int64)
    params: SamplingParams
    num_shards: int


@dataclasses.dataclass
class Plan:
    tasks: list[ReadTask]
    dead_letters: list[DeadLetter]
    num_shards: int
    record_size: int
    record_version: int
    stats: dict  # accounting and sampling statistics, JSON-ready


def _drop_duplicate_sources(index: pa.Table, dead: list[DeadLetter]) -> pa.Table:
    """Keeps, per sort key, the source with the smallest path; dead-letters the others."""
    first_source: dict[str, str] = {}
    for source in sorted(set(index["source"].to_pylist())):
        first_source.setdefault(posixpath.basename(source), source)
    keep = np.array([first_source[posixpath.basename(s)] == s for s in index["source"].to_pylist()], dtype=bool)
    for row in index.filter(pa.array(~keep)).to_pylist():
        dead.append(DeadLetter(row["source"], "plan", "duplicate_source",
                               f"sort key {row['sort_key']!r} is also {first_source[row['sort_key']]!r}",
                               row["member"], row["chunk"]))
    return index.filter(pa.array(keep))


def _keep_dominant_version(index: pa.Table, dead: list[DeadLetter]) -> tuple[pa.Table, int, int]:
    versions = index["version"].to_numpy()
    if len(versions) == 0:
        return index, 6, 8356
    values, counts = np.unique(versions, return_counts=True)
    dominant = int(values[np.lexsort((values, counts))[-1]])  # most chunks; ties: newest version
    keep = versions == dominant
    for row in index.filter(pa.array(~keep)).to_pylist():
        dead.append(DeadLetter(row["source"], "plan", "wrong_version",
                               f"V{row['version']} chunk in a V{dominant} window (set index.lc0_version)",
                               row["member"], row["chunk"]))
    kept = index.filter(pa.array(keep))
    return kept, dominant, int(kept["record_size"][0].as_py())


def _sampling_by_length(num_records, probability, uses, passes) -> list[dict]:
    bins = num_records // LENGTH_BIN
    out = []
    for b in np.unique(bins):
        sel = bins == b
        out.append({
            "min_records": int(b * LENGTH_BIN),
            "max_records": int(b * LENGTH_BIN + LENGTH_BIN - 1),
            "chunks": int(sel.sum()),
            "proposals": int(sel.sum()) * passes,
            "accepted": int(uses[sel].sum()),
            "expected_acceptance": float(probability[sel].mean()),
        })
    return out


def _split_tasks(used: pa.Table, params: SamplingParams, num_shards: int, max_task_bytes: int):
    tasks = []
    used = used.sort_by([("source", "ascending"), ("offset", "ascending")])
    sources = used["source"].to_numpy(zero_copy_only=False)
    out_bytes = used["planned_records"].to_numpy() * used["record_size"].to_numpy()
    start = 0
    for end in range(1, len(sources) + 1):
        task_bytes = out_bytes[start:end].sum()
        if end == len(sources) or sources[end] != sources[start] or task_bytes >= max_task_bytes:
            tasks.append(ReadTask(str(sources[start]), used.slice(start, end - start), params, num_shards))
            start = end
    return tasks


def make_plan(index: pa.Table, params: SamplingParams, output: OutputParams) -> Plan:
    """The whole stage-3 plan from the concatenated chunk index (any row order)."""
    dead: list[DeadLetter] = []
    chunks_indexed = index.num_rows
    records_indexed = int(pc.sum(index["num_records"]).as_py() or 0)
    index = index.sort_by([("sort_key", "ascending"), ("chunk", "ascending"), ("source", "ascending")])
    index = _drop_duplicate_sources(index, dead)
    index, version, record_size = _keep_dominant_version(index, dead)

    in_window = window_mask(index["sort_key"].to_numpy(zero_copy_only=False), index["chunk"].to_numpy(),
                            params.pool_size)
    window = index.filter(pa.array(in_window))
    num_records = window["num_records"].to_numpy()
    keys = chunk_keys(window["sort_key"].to_pylist(), window["chunk"].to_numpy())
    probability = acceptance_probability(num_records, params.threshold, params.gamma)
    uses = use_counts(keys, probability, params.passes, params.seed)
    per_use = num_records if params.position_count <= 0 else np.full_like(num_records, params.position_count)
    planned = uses * per_use

    window = window.append_column("chunk_key", pa.array(keys, pa.uint64()))
    window = window.append_column("num_uses", pa.array(uses, pa.int64()))
    window = window.append_column("planned_records", pa.array(planned, pa.int64()))
    used = window.filter(pa.array(uses > 0))

    records_out = int(planned.sum())
    num_shards = output.num_shards or max(1, math.ceil(records_out * record_size / output.target_shard_bytes))
    tasks = _split_tasks(used, params, num_shards, output.max_task_bytes)
    stats = {
        "accounting": {
            "chunks_indexed": chunks_indexed,
            "records_indexed": records_indexed,
            "chunks_rejected_by_plan": len(dead),
            "chunks_outside_window": int((~in_window).sum()),
            "chunks_never_accepted": int((uses == 0).sum()),
            "chunks_used": used.num_rows,
            "uses_planned": int(uses.sum()),
            "records_planned": records_out,
        },
        "sampling": {
            "passes": params.passes,
            "position_count": params.position_count,
            "hanse_sampling_threshold": params.threshold,
            "hanse_sampling_gamma": params.gamma,
            "chunk_pool_size": params.pool_size,
            "proposals": int(len(uses)) * params.passes,
            "accepted": int(uses.sum()),
            "use_count_histogram": np.bincount(uses, minlength=params.passes + 1).tolist(),
            "by_length": _sampling_by_length(num_records, probability, uses, params.passes),
        },
    }
    return Plan(tasks, dead, num_shards, record_size, version, stats)
