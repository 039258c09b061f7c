"""Stage 7: the manifest and its summaries.

The manifest describes one committed generation of an output directory, the
same fields for every job kind: format and shardmill version, job kind,
record description, schema, seed, the full config, every shard (path, rows,
row-group row counts, bytes, SHA-256), where the dead letters are, and the
stats: accounting that balances, sampling statistics, timings.
"""

from __future__ import annotations

import collections
import json

from shardmill.transforms.atomic_io import write_bytes_atomically

from shardmill.transforms.output_contract import FORMAT_VERSION, shardmill_version


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
    job_kind: str,
    record: dict,
    config_text: str,
    seed: int,
    generation: int,
    schema: list[dict],
    shards: list[dict],
    errors: dict,
    stats: dict,
    timings: dict,
) -> dict:
    """The manifest of one generation, with the same fields for every job kind.

    record: `record_format` plus what describes one row of this kind (lc0:
    record_version, record_size); its keys are also top-level fields.
    errors: where the generation's dead letters are and how many.
    """
    shards = sorted(shards, key=lambda s: s["shard"])
    return {
        **record,
        "format_version": FORMAT_VERSION,
        "shardmill_version": shardmill_version(),
        "job_kind": job_kind,
        "generation": generation,
        "record": record,
        "seed": seed,
        "config": config_text,
        "schema": schema,
        "num_shards": len(shards),
        "shards": [{k: shard[k] for k in ("path", "rows", "row_groups", "bytes", "sha256")} for shard in shards],
        "errors": errors,
        # Timings are the only part of a manifest that differs between identical runs.
        "stats": {**stats, "timings": timings},
    }


def dead_letters_jsonl(dead_letters: list[dict]) -> bytes:
    """Dead letters as JSON lines in a fixed order (arrival order varies by runner)."""
    ordered = sorted(dead_letters, key=lambda d: (d["path"], d["chunk"], d["member"], d["stage"], d["reason"]))
    return "".join(json.dumps(d, sort_keys=True) + "\n" for d in ordered).encode()


def write_dead_letters(path: str, dead_letters: list[dict]) -> None:
    write_bytes_atomically(path, dead_letters_jsonl(dead_letters))


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
    if acc.get("partitions_left_out"):
        lines.insert(-1, f"partitions left out {acc['partitions_left_out']} (column types that can't be unified; "
                         "see the schema_conflict errors)")
    if acc.get("files_not_split"):
        lines.insert(-1, f"files read whole, not split (a quote inside an unquoted field): "
                         f"{', '.join(acc['files_not_split'][:5])}" + (" ..." if len(acc["files_not_split"]) > 5 else ""))
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


def render_lc0_summary(manifest: dict) -> str:
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

