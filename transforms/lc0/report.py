"""The lc0 job's report: its accounting (every chunk ends in exactly one bucket), the summary text and the
charts of `shardmill inspect --plot` (plot, needs matplotlib)."""

from __future__ import annotations

import collections

from shardmill.transforms.common.dead_letter import count_reasons
from shardmill.transforms.common.discovery import skipped_files_line
from shardmill.transforms.common.plotting import pyplot
from shardmill.transforms.lc0.index_summary import cache_notes


def accounting(plan_stats: dict, load_stats: list[dict], dead_letters: list[dict], shards: list[dict]) -> dict:
    """The plan's accounting completed with what loading and writing did, plus the balance checks."""
    acc = dict(plan_stats["accounting"])
    by_stage = collections.Counter(d["stage"] for d in dead_letters)
    chunk_errors = collections.Counter(d["stage"] for d in dead_letters if d["chunk"] >= 0)
    acc["chunks_loaded"] = sum(s["chunks_loaded"] for s in load_stats)
    acc["chunks_failed_at_load"] = chunk_errors["load"]
    acc["uses_written"] = sum(s["uses_written"] for s in load_stats)
    acc["records_written"] = sum(s["rows"] for s in shards)
    acc["index_chunk_errors"] = chunk_errors["index"]
    acc["source_errors"] = sum(1 for d in dead_letters if d["chunk"] < 0)
    acc["errors_by_stage"] = dict(sorted(by_stage.items()))
    acc["errors_by_reason"] = count_reasons(dead_letters)
    acc["balanced"] = (
        acc["chunks_indexed"]
        == acc["chunks_rejected_by_plan"] + acc["chunks_outside_window"] + acc["chunks_never_accepted"]
        + acc["chunks_used"]
        and acc["chunks_used"] == acc["chunks_loaded"] + acc["chunks_failed_at_load"]
        and acc["records_written"] == sum(s["records_written"] for s in load_stats)
    )
    met = acc["chunks_indexed"] + acc["index_chunk_errors"] + acc["source_errors"]
    errors = acc["index_chunk_errors"] + acc["source_errors"] + acc["chunks_rejected_by_plan"] + acc[
        "chunks_failed_at_load"]
    acc["error_fraction"] = errors / met if met else 0.0
    return acc


def render_summary(manifest: dict) -> str:
    acc = manifest["stats"]["accounting"]
    sampling = manifest["stats"]["sampling"]
    timings = manifest["stats"].get("timings", {})
    rate = sampling["accepted"] / sampling["proposals"] if sampling["proposals"] else 0.0
    lines = [
        f"records in  {acc['records_indexed']:>14,}   ({acc['chunks_indexed']:,} chunks indexed)",
        f"records out {acc['records_written']:>14,}   in {manifest['num_shards']} shard(s), "
        f"{sum(s['bytes'] for s in manifest['shards']) / 1e6:,.1f} MB",
        f"proposals   {sampling['proposals']:>14,}   accepted {sampling['accepted']:,} ({rate:.1%}), "
        f"rejected {sampling['proposals'] - sampling['accepted']:,}",
        f"chunks: used {acc['chunks_used']:,}, never accepted {acc['chunks_never_accepted']:,}, "
        f"outside window {acc['chunks_outside_window']:,}, rejected by plan {acc['chunks_rejected_by_plan']:,}, "
        f"failed at load {acc['chunks_failed_at_load']:,}",
        f"errors {sum(acc['errors_by_reason'].values()):,} ({acc['error_fraction']:.2%} of chunks met)"
        + ("" if not acc["errors_by_reason"] else ": " + ", ".join(
            f"{k} {v}" for k, v in acc["errors_by_reason"].items())),
        f"accounting {'balances' if acc['balanced'] else 'DOES NOT BALANCE'}",
    ]
    skipped = skipped_files_line(acc)
    if skipped:
        lines.insert(-1, skipped)
    cache = timings.get("index_cache")
    if cache is not None:
        lines.insert(1, f"sources     {acc['sources_indexed']:>14,}   ({cache['sources_read']:,} read from the index "
                        f"cache {cache['location']})" + cache_notes(cache["rejected"], cache["pruned"]))
    if "seconds" in timings:
        lines.append(f"time {timings['seconds']:.1f} s")
    return "\n".join(lines)


def plot(manifest: dict, path: str) -> None:
    """Draws the use-count histogram and acceptance vs game length to a PNG file."""
    plt = pyplot()
    sampling = manifest["stats"]["sampling"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    hist = sampling["use_count_histogram"]
    left.bar([uses for uses, _ in hist], [chunks for _, chunks in hist], color="#4878a8")
    left.set_xlabel("uses per chunk (accepted proposals)")
    left.set_ylabel("chunks")
    left.set_title(f"use_count over {sampling['passes']} pass(es)")

    bins = sampling["by_length"]
    centers = [(b["min_records"] + b["max_records"]) / 2 for b in bins]
    observed = [b["accepted"] / b["proposals"] if b["proposals"] else 0 for b in bins]
    expected = [b["expected_acceptance"] for b in bins]
    right.plot(centers, expected, "-", color="#888888", label="configured p(n)")
    right.plot(centers, observed, "o", color="#c44e52", label="observed")
    right.set_xlabel("records per chunk (game length)")
    right.set_ylabel("acceptance rate")
    right.set_ylim(0, 1.05)
    right.set_title("acceptance vs game length")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
