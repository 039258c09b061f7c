"""Stage 3, sampling: which chunks are used and how often, decided from the chunk index alone (no element holds
the index), and the read tasks that load them.

Global decisions come from per-source summaries (a few numbers per source):
which sources are duplicates, the dominant record version and the window
cut. Every per-chunk decision (in window, use counts, planned records, read
tasks) is then made where the chunk's index rows already are, one index
table (one batch of sources) at a time; only sums travel further (the
planned record total, which fixes the shard count, and the statistics).

  summarize_sources(table)            per source: chunks/records per version
  decide(summaries, params)           GlobalDecisions (O(sources))
  plan_table(table, decisions, ...)   PlannedTable: dead letters, used rows, partial stats
  read_tasks(planned, ...)            ReadTasks of at most max_task_bytes of output each

A task carries a copy of only its own rows (never a slice: a slice pickles its
parent's buffers), and a chunk whose planned output exceeds max_task_bytes is
split across tasks by ranges of its emissions, so every work item is bounded
whatever `passes` and `position_count` are.

The kernels are plain numpy; every decision comes from keyed_hash, so it depends only on the
seed and chunk identities, never on order, bundles or workers.

Semantics:
- Window (decide): the newest `pool_size` chunks in (sort_key,
  chunk) order, i.e. whole sources newest first until the pool is covered,
  then the newest chunks of the last source.
- Passes: in each of P passes every chunk in the window is proposed once and
  accepted with p = min(1, n / threshold) ^ gamma. Each acceptance is one use;
  a use carries the chunk's use_count before the increment. So a chunk's uses
  are 0..k-1 with k ~ Binomial(P, p).
- Positions: a chunk's positions are visited in rounds; round r is a
  permutation of 0..n-1 keyed by (seed, chunk, r). Use u with position_count
  k takes the sequence's items u*k .. u*k+k-1, so uses never repeat a
  position before the chunk is exhausted. position_count 0 means all
  positions 0..n-1 for every use.
"""

from __future__ import annotations

import dataclasses
import posixpath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardmill.transforms.common.dead_letter import DeadLetter
from shardmill.transforms.common.keyed_hash import (STREAM_ACCEPT, STREAM_POSITION_ORDER, chunk_keys, hash_words,
                                                    unit_float)
from shardmill.transforms.common.sampling import acceptance_probability
from shardmill.transforms.lc0.gzip_chunks import DEFAULT_MAX_CHUNK_BYTES


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    seed: int = 0
    passes: int = 1
    position_count: int = 0  # 0: every position of the chunk per use
    threshold: int = 0  # 0: every proposal accepted
    gamma: float = 1.0
    pool_size: int = 0  # 0: every chunk


def use_counts(keys: np.ndarray, probability: np.ndarray, passes: int, seed: int) -> np.ndarray:
    """Number of accepted proposals of each chunk over `passes` passes.

    Draw p of a chunk is keyed by (seed, chunk, p); blocks of passes are drawn
    at once over at most ~2^20 (chunk, pass) pairs, so memory stays bounded
    and a million passes cost seconds, not a Python loop per pass.
    """
    counts = np.zeros(len(keys), dtype=np.int64)
    always = probability >= 1.0
    counts[always] = passes
    sampled = np.flatnonzero(~always & (probability > 0))
    if len(sampled) == 0:
        return counts
    sampled_keys = keys[sampled][:, None]
    sampled_p = probability[sampled][:, None]
    block = max(1, (1 << 20) // len(sampled))
    for start in range(0, passes, block):
        passes_block = np.arange(start, min(passes, start + block), dtype=np.uint64)[None, :]
        u = unit_float(hash_words(seed, STREAM_ACCEPT, sampled_keys, passes_block))
        counts[sampled] += (u < sampled_p).sum(axis=1)
    return counts


def round_permutation(key: int, num_records: int, round_index: int, seed: int) -> np.ndarray:
    """The order of positions 0..n-1 in round r of a chunk (a keyed shuffle)."""
    h = hash_words(seed, STREAM_POSITION_ORDER, np.uint64(key), round_index, np.arange(num_records))
    return np.argsort(h, kind="stable")


def emissions(key: int, num_records: int, position_count: int, seed: int, start: int, stop: int):
    """(use_count, position) of a chunk's emissions start..stop-1.

    A chunk's emissions are the records its uses emit, use by use: with
    position_count 0 each use emits positions 0..n-1 (emission e is use
    e // n, position e % n); otherwise use u emits items u*k .. u*k+k-1 of
    the round-by-round position sequence (emission e is use e // k, item e).
    Memory is O(stop - start + n) whatever the number of uses, so a plan may
    cut a chunk's emissions into bounded ranges.
    """
    n = num_records
    items = np.arange(start, stop, dtype=np.int64)
    if position_count <= 0:
        return items // n, items % n
    positions = np.empty_like(items)
    if len(items):
        rounds = items // n
        for r in range(int(rounds[0]), int(rounds[-1]) + 1):
            lo, hi = np.searchsorted(rounds, [r, r + 1])
            positions[lo:hi] = round_permutation(key, n, r, seed)[items[lo:hi] - r * n]
    return items // position_count, positions


LENGTH_BIN = 20  # acceptance statistics by game length, in bins of this many records
# Probabilities are summed as integers of this scale, so statistics merged in any order are identical.
PROBABILITY_SCALE = 1 << 40



MAX_TASK_BYTES = 64 << 20  # planned output bytes per read task
# What makes an lc0 output smaller, for a plan refused for its size.
WRITE_LESS = "sample less (chunk_pool.passes, position_count)"


@dataclasses.dataclass
class ReadTask:
    """Stage-4 work item: chunks to read, by source and in file order (source: the first one's).

    chunks: index columns + chunk_key, num_uses, emit_start, emit_stop: the
    task writes emissions [emit_start, emit_stop) of each chunk (a chunk's
    emissions are its uses' records in order; see chunk_sampling.emissions).
    """

    source: str
    chunks: pa.Table
    params: SamplingParams
    num_shards: int
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES


@dataclasses.dataclass(frozen=True)
class GlobalDecisions:
    """What every index table needs to know to plan its own chunks."""

    dropped_sources: dict  # source path -> the path that keeps its sort key
    record_version: int
    record_size: int
    cut_sort_key: str | None  # None: every chunk is in the window
    cut_take: int  # chunks of the cut source in the window (its newest)


@dataclasses.dataclass
class PlannedTable:
    """One index table planned: its dead letters, used chunks and statistics."""

    dead_letters: list[DeadLetter]
    used: pa.Table  # index columns + chunk_key, num_uses, planned_records
    stats: dict  # partial statistics; merge_stats adds them up

    @property
    def records_planned(self) -> int:
        return self.stats["records_planned"]


def summarize_sources(table: pa.Table) -> list[dict]:
    """Per source of an index table: its sort key and (chunks, records, record_size) per version."""
    if table.num_rows == 0:
        return []
    grouped = table.group_by(["source", "sort_key", "version", "record_size"]).aggregate(
        [("num_records", "sum"), ("num_records", "count")])
    out: dict[str, dict] = {}
    for row in grouped.to_pylist():
        summary = out.setdefault(row["source"], {"source": row["source"], "sort_key": row["sort_key"], "versions": {}})
        summary["versions"][int(row["version"])] = [int(row["num_records_count"]), int(row["num_records_sum"]),
                                                    int(row["record_size"])]
    return list(out.values())


def decide(summaries: list[dict], pool_size: int) -> GlobalDecisions:
    """Duplicates, dominant version and window cut from the per-source summaries (any order)."""
    first: dict[str, str] = {}
    for source in sorted(s["source"] for s in summaries):
        first.setdefault(posixpath.basename(source), source)
    dropped = {s["source"]: first[posixpath.basename(s["source"])] for s in summaries
               if first[posixpath.basename(s["source"])] != s["source"]}
    kept = [s for s in summaries if s["source"] not in dropped]
    chunks_by_version: dict[int, int] = {}
    sizes: dict[int, int] = {}
    for s in kept:
        for version, (chunks, _, size) in s["versions"].items():
            chunks_by_version[version] = chunks_by_version.get(version, 0) + chunks
            sizes[version] = size
    if not chunks_by_version:
        return GlobalDecisions(dropped, 6, 8356, None, 0)
    version = max(chunks_by_version, key=lambda v: (chunks_by_version[v], v))  # most chunks; ties: newest
    cut_key, take = None, 0
    if pool_size > 0:
        remaining = pool_size
        for s in sorted(kept, key=lambda s: s["sort_key"], reverse=True):
            chunks = s["versions"].get(version, [0])[0]
            if chunks >= remaining:
                cut_key, take = s["sort_key"], remaining
                break
            remaining -= chunks
    return GlobalDecisions(dropped, version, sizes[version], cut_key, take)


def window_mask(sort_keys: np.ndarray, chunks: np.ndarray, decisions: GlobalDecisions) -> np.ndarray:
    """Chunks (of kept sources and version) inside the window: sources newer than the cut, and the cut's newest."""
    if decisions.cut_sort_key is None:
        return np.ones(len(chunks), dtype=bool)
    mask = sort_keys > decisions.cut_sort_key
    at_cut = np.flatnonzero(sort_keys == decisions.cut_sort_key)
    if len(at_cut):
        newest = at_cut[np.argsort(chunks[at_cut], kind="stable")[::-1][:decisions.cut_take]]
        mask[newest] = True
    return mask


def _length_bins(num_records, probability, uses, passes) -> dict:
    bins = num_records // LENGTH_BIN
    out = {}
    for b in np.unique(bins):
        sel = bins == b
        out[int(b)] = [int(sel.sum()), int(sel.sum()) * passes, int(uses[sel].sum()),
                       int(np.rint(probability[sel] * PROBABILITY_SCALE).astype(np.int64).sum())]
    return out


def plan_table(table: pa.Table, decisions: GlobalDecisions, params: SamplingParams) -> PlannedTable:
    """Plans the chunks of one index table under the global decisions."""
    dead: list[DeadLetter] = []
    sources = table["source"].to_numpy(zero_copy_only=False).astype(object)
    versions = table["version"].to_numpy()
    duplicate = np.array([s in decisions.dropped_sources for s in sources], dtype=bool)
    other_version = ~duplicate & (versions != decisions.record_version)
    for row in table.filter(pa.array(duplicate)).to_pylist():
        dead.append(DeadLetter(row["source"], "plan", "duplicate_source",
                               f"sort key {row['sort_key']!r} is also {decisions.dropped_sources[row['source']]!r}",
                               row["member"], row["chunk"]))
    for row in table.filter(pa.array(other_version)).to_pylist():
        dead.append(DeadLetter(row["source"], "plan", "wrong_version",
                               f"V{row['version']} chunk in a V{decisions.record_version} window "
                               "(set index.lc0_version)", row["member"], row["chunk"]))
    kept = table.filter(pa.array(~duplicate & ~other_version))
    sort_keys = kept["sort_key"].to_numpy(zero_copy_only=False).astype(object)
    chunks = kept["chunk"].to_numpy()
    in_window = window_mask(sort_keys, chunks, decisions)
    window = kept.filter(pa.array(in_window))
    num_records = window["num_records"].to_numpy()
    keys = chunk_keys(window["sort_key"].to_numpy(zero_copy_only=False), window["chunk"].to_numpy())
    probability = acceptance_probability(num_records, params.threshold, params.gamma)
    uses = use_counts(keys, probability, params.passes, params.seed)
    per_use = num_records if params.position_count <= 0 else np.full_like(num_records, params.position_count)
    planned = uses * per_use
    window = window.append_column("chunk_key", pa.array(keys, pa.uint64()))
    window = window.append_column("num_uses", pa.array(uses, pa.int64()))
    window = window.append_column("planned_records", pa.array(planned, pa.int64()))
    used_mask = uses > 0
    histogram = np.unique(uses, return_counts=True)
    stats = {
        "chunks_indexed": table.num_rows,
        "records_indexed": int(pc.sum(table["num_records"]).as_py() or 0),
        "chunks_rejected_by_plan": len(dead),
        "chunks_outside_window": int((~in_window).sum()),
        "chunks_never_accepted": int((~used_mask).sum()),
        "chunks_used": int(used_mask.sum()),
        "uses_planned": int(uses.sum()),
        "records_planned": int(planned.sum()),
        "proposals": len(uses) * params.passes,
        "use_counts": {int(u): int(c) for u, c in zip(*histogram)},
        "by_length": _length_bins(num_records, probability, uses, params.passes),
    }
    return PlannedTable(dead, window.filter(pa.array(used_mask)), stats)


def merge_stats(parts: list[dict]) -> dict:
    """Adds up partial statistics of plan_table (order-independent)."""
    total: dict = {"use_counts": {}, "by_length": {}}
    for part in parts:
        for key, value in part.items():
            if key == "use_counts":
                for u, c in value.items():
                    total["use_counts"][int(u)] = total["use_counts"].get(int(u), 0) + c
            elif key == "by_length":
                for b, values in value.items():
                    old = total["by_length"].get(int(b), [0, 0, 0, 0])
                    total["by_length"][int(b)] = [x + y for x, y in zip(old, values)]
            else:
                total[key] = total.get(key, 0) + value
    return total


def final_stats(merged: dict, params: SamplingParams) -> dict:
    """The manifest's plan statistics (accounting and sampling) from the merged partial ones."""
    accounting = {key: merged.get(key, 0) for key in (
        "chunks_indexed", "records_indexed", "chunks_rejected_by_plan", "chunks_outside_window",
        "chunks_never_accepted", "chunks_used", "uses_planned", "records_planned")}
    return {
        "accounting": accounting,
        "sampling": {
            "passes": params.passes,
            "position_count": params.position_count,
            "hanse_sampling_threshold": params.threshold,
            "hanse_sampling_gamma": params.gamma,
            "chunk_pool_size": params.pool_size,
            "proposals": merged.get("proposals", 0),
            "accepted": merged.get("uses_planned", 0),
            # [use count, chunks] for every use count that occurred (sparse: passes may be 10^6).
            "use_count_histogram": [[uses, chunks] for uses, chunks in sorted(merged.get("use_counts", {}).items())],
            "by_length": [{
                "min_records": b * LENGTH_BIN, "max_records": b * LENGTH_BIN + LENGTH_BIN - 1,
                "chunks": chunks, "proposals": proposals, "accepted": accepted,
                "expected_acceptance": probability_sum / PROBABILITY_SCALE / chunks,
            } for b, (chunks, proposals, accepted, probability_sum) in sorted(merged.get("by_length", {}).items())],
        },
    }


def read_tasks(used: pa.Table, params: SamplingParams, num_shards: int, max_task_bytes: int,
               max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> list[ReadTask]:
    """Used chunks in (source, file offset) order, cut into tasks of at most max_task_bytes of output.

    Small sources share a task (a task per loose game would cost a Beam
    element and a spill file each); a chunk with more output than a task is
    split by ranges of its emissions. Every task's table is a copy holding
    only its rows.
    """
    if used.num_rows == 0:
        return []
    used = used.sort_by([("source", "ascending"), ("offset", "ascending")])
    planned = used["planned_records"].to_numpy()
    record_size = int(used["record_size"][0].as_py())
    per_task = max(1, max_task_bytes // record_size)  # emissions per task
    tasks = []
    rows: list[int] = []
    starts: list[int] = []
    stops: list[int] = []
    budget = per_task

    def flush():
        nonlocal rows, starts, stops, budget
        if rows:
            chunk_rows = used.take(pa.array(rows, pa.int64()))  # take copies: no parent buffers
            chunk_rows = chunk_rows.append_column("emit_start", pa.array(starts, pa.int64()))
            chunk_rows = chunk_rows.append_column("emit_stop", pa.array(stops, pa.int64()))
            tasks.append(ReadTask(str(chunk_rows["source"][0]), chunk_rows, params, num_shards, max_chunk_bytes))
        rows, starts, stops, budget = [], [], [], per_task

    for i in range(used.num_rows):
        start, total = 0, int(planned[i])
        while start < total:
            take = min(budget, total - start)
            rows.append(i)
            starts.append(start)
            stops.append(start + take)
            start += take
            budget -= take
            if budget == 0:
                flush()
    flush()
    return tasks
