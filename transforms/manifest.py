"""Stage 7: the manifest, written last, and its checks.

The manifest describes a finished output directory: schema, record format,
seed, the full config, every shard (path, rows, row-group row counts, bytes,
SHA-256) and the stats: accounting that balances, sampling statistics,
timings. `errors.jsonl` holds every dead letter.
"""

from __future__ import annotations

import collections
import json

from shardmill.transforms.atomic_io import write_bytes_atomically

from shardmill.transforms.output_contract import ERRORS_NAME, FORMAT_VERSION, MANIFEST_NAME  # noqa: F401


def count_reasons(dead_letters: list[dict]) -> dict:
    return dict(sorted(collections.Counter(d["reason"] for d in dead_letters).items()))


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


def build_manifest(
    *,
    config_text: str,
    seed: int,
    record_version: int,
    record_size: int,
    schema: list[dict],
    plan_stats: dict,
    load_stats: list[dict],
    dead_letters: list[dict],
    shards: list[dict],
    timings: dict,
) -> dict:
    shards = sorted(shards, key=lambda s: s["shard"])
    return {
        "format_version": FORMAT_VERSION,
        "record_format": "lc0",
        "record_version": record_version,
        "record_size": record_size,
        "seed": seed,
        "config": config_text,
        "schema": schema,
        "num_shards": len(shards),
        "shards": [{k: v for k, v in s.items() if k != "shard"} for s in shards],
        "stats": {
            "accounting": accounting(plan_stats, load_stats, dead_letters, shards),
            "sampling": plan_stats["sampling"],
            "timings": timings,
        },
    }


def write_dead_letters(path: str, dead_letters: list[dict]) -> None:
    """Writes dead letters as JSON lines in a fixed order (arrival order varies by runner)."""
    ordered = sorted(dead_letters, key=lambda d: (d["path"], d["chunk"], d["member"], d["stage"], d["reason"]))
    write_bytes_atomically(path, "".join(json.dumps(d, sort_keys=True) + "\n" for d in ordered).encode())


def commit(output_dir: str, manifest: dict, dead_letters: list[dict]) -> None:
    """Writes errors.jsonl, then manifest.json (last: its presence means the output is complete)."""
    base = output_dir.rstrip("/")
    write_dead_letters(f"{base}/{ERRORS_NAME}", dead_letters)
    write_bytes_atomically(f"{base}/{MANIFEST_NAME}", json.dumps(manifest, indent=1, sort_keys=True).encode())


def render_label_summary(manifest: dict) -> str:
    stats = manifest["stats"]["label_sampling"]
    acc = manifest["stats"]["accounting"]
    achieved = "n/a" if stats["achieved_ratio"] is None else f"{stats['achieved_ratio']:.4f}"
    lines = [
        f"label sampling {stats['mode']}: ratio requested {stats['requested_ratio']:g}, achieved {achieved}",
        f"records in  {acc['records_read']:>14,}   ({acc['partitions']} partition(s))",
        f"targets     {stats['targets']:>14,}   all kept",
        f"non-targets {stats['non_targets_in']:>14,}   kept {stats['non_targets_out']:,} "
        f"(exact count would be {stats['exact_target_count']:,})",
        f"records out {acc['records_written']:>14,}   in {manifest['num_shards']} shard(s)",
        f"errors {sum(acc['errors_by_reason'].values()):,}" + ("" if not acc["errors_by_reason"] else ": " + ", ".join(
            f"{k} {v}" for k, v in acc["errors_by_reason"].items())),
        f"time {manifest['stats']['timings']['seconds']:.1f} s",
    ]
    return "\n".join(lines)


def render_token_summary(manifest: dict) -> str:
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


def render_summary(manifest: dict) -> str:
    """The short report printed after a run and by `shardmill inspect`."""
    if manifest.get("record_format") == "megatron_gpt_samples":
        return render_token_summary(manifest)
    if manifest.get("record_format") == "events":
        return render_label_summary(manifest)
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
    if "seconds" in timings:
        lines.append(f"time {timings['seconds']:.1f} s")
    return "\n".join(lines)

