"""The label job's report: its sampling statistics, the summary text and the charts of
`shardmill inspect --plot` (plot, needs matplotlib)."""

from __future__ import annotations

from shardmill.transforms.common.discovery import skipped_files_line
from shardmill.transforms.common.plotting import pyplot
from shardmill.transforms.events.sampling import exact_keep_count


def no_targets(manifest: dict, target_values: tuple[str, ...] | None = None) -> str | None:
    """What a run without a target did, for its summary and its log; None when it had targets."""
    stats = manifest["stats"]["label_sampling"]
    if stats["targets"]:
        return None
    values = "" if target_values is None else f" {list(target_values)}"
    problem = (f"no targets: none of the {manifest['stats']['accounting']['records_read']:,} records read has a "
               f"{manifest['label_column']!r} value in target_values{values}")
    if stats["mode"] == "EXACT":
        return problem
    return problem + f"; the output holds {stats['non_targets_out']:,} non-targets and no target"


def render_summary(manifest: dict) -> str:
    stats = manifest["stats"]["label_sampling"]
    acc = manifest["stats"]["accounting"]
    achieved = "n/a" if stats["achieved_ratio"] is None else f"{stats['achieved_ratio']:.4f}"
    lines = [
        f"label sampling {stats['mode']}: ratio requested {stats['requested_ratio']:g}, achieved {achieved}",
        f"records in  {acc['records_read']:>14,}   ({acc['partitions']} partition(s))",
        f"targets     {stats['targets']:>14,}   all kept",
        f"non-targets {stats['non_targets_in']:>14,}   kept {stats['non_targets_out']:,} "
        f"(exact count would be {stats['exact_target_count']:,})",
        *[f"  {name}: {g['targets']:,} targets, kept {g['non_targets_out']:,} of {g['non_targets_in']:,} "
          f"non-targets (exact count {g['exact_target_count']:,})" for name, g in stats.get("groups", {}).items()][:20],
        f"records out {acc['records_written']:>14,}   in {manifest['num_shards']} shard(s)",
        f"errors {sum(acc['errors_by_reason'].values()):,}" + ("" if not acc["errors_by_reason"] else ": " + ", ".join(
            f"{k} {v}" for k, v in acc["errors_by_reason"].items())),
        f"time {manifest['stats']['timings']['seconds']:.1f} s",
    ]
    skipped = skipped_files_line(acc)
    if skipped:
        lines.insert(-1, skipped)
    warning = no_targets(manifest)
    if warning:
        lines.insert(1, f"warning: {warning}")
    if acc.get("partitions_left_out"):
        # Outputs before the reasons were kept left partitions out for one reason: their schema.
        why = acc.get("partitions_left_out_by_reason") or {"schema_conflict": acc["partitions_left_out"]}
        reasons = ", ".join(f"{reason} {n}" + (" (column types that can't be unified)" if reason == "schema_conflict"
                                                else "") for reason, n in why.items())
        lines.insert(-1, f"partitions left out {acc['partitions_left_out']}, read but not written: {reasons}; "
                         "see the errors")
    if acc.get("files_not_split"):
        # Outputs before the reasons were kept had one reason: a quote inside an unquoted field.
        why = acc.get("files_not_split_why") or {name: "a quote inside an unquoted field"
                                                 for name in acc["files_not_split"]}
        by_reason: dict[str, list[str]] = {}
        for name in acc["files_not_split"]:
            reason = why.get(name, "a quote inside an unquoted field")
            # A stray quote's reason names its line and byte (in the manifest); the summary groups them.
            reason = "a quote inside an unquoted field" if "a quote inside an unquoted field" in reason else reason
            by_reason.setdefault(reason, []).append(name)
        for reason, names in sorted(by_reason.items()):
            lines.insert(-1, f"files read whole, not split ({reason}): {', '.join(names[:5])}"
                             + (f" ... ({len(names)} files)" if len(names) > 5 else ""))
    return "\n".join(lines)


def _counts(stats: list[dict], ratio: float) -> dict:
    targets = sum(s["targets"] for s in stats)
    non_in = sum(s["non_targets_in"] for s in stats)
    non_out = sum(s["non_targets_out"] for s in stats)
    return {"targets": targets, "non_targets_in": non_in, "non_targets_out": non_out,
            "achieved_ratio": non_out / targets if targets else None,
            "exact_target_count": exact_keep_count(targets, non_in, ratio)}


def label_sampling_stats(stats: list[dict], ratio: float, mode: str) -> dict:
    """The run's counts; with partition_by, also each group's (`groups`: the ratio is held per group)."""
    totals = _counts(stats, ratio)
    achieved = totals["achieved_ratio"]
    by_group: dict[str, list[dict]] = {}
    for s in stats:
        if "group" in s:
            by_group.setdefault(s["group"], []).append(s)
    extra = {"groups": {g: _counts(members, ratio) for g, members in sorted(by_group.items())}} if by_group else {}
    return {
        "mode": mode,
        "requested_ratio": ratio,
        **totals,
        "ratio_error": None if achieved is None else achieved - ratio,
        "partitions": sorted(stats, key=lambda s: s["partition"]),
        **extra,
    }


MAX_PARTITIONS_DRAWN = 40


def plot(manifest: dict, path: str) -> None:
    """Per partition: targets and non-targets read and kept, and the achieved ratio against the requested one."""
    plt = pyplot()
    stats = manifest["stats"]["label_sampling"]
    parts = stats["partitions"][:MAX_PARTITIONS_DRAWN]
    names = [p["partition"] for p in parts]
    x = range(len(parts))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    left.bar(x, [p["non_targets_in"] for p in parts], color="#c8d4e3", label="non-targets read")
    left.bar(x, [p["non_targets_out"] for p in parts], color="#4878a8", label="non-targets kept")
    left.bar(x, [p["targets"] for p in parts], bottom=[p["non_targets_out"] for p in parts], color="#c44e52",
             label="targets (all kept)")
    left.set_xticks(list(x), names, rotation=70, ha="right", fontsize=7)
    left.set_ylabel("records")
    shown = "" if len(stats["partitions"]) <= MAX_PARTITIONS_DRAWN else f" (first {MAX_PARTITIONS_DRAWN})"
    left.set_title(f"records per partition{shown}")
    left.legend(fontsize=8)

    ratios = [p["non_targets_out"] / p["targets"] if p["targets"] else 0.0 for p in parts]
    right.bar(x, ratios, color="#4878a8", label="kept non-targets per target")
    right.axhline(stats["requested_ratio"], color="#888888", linestyle="--", label="requested ratio")
    if stats["achieved_ratio"] is not None:
        right.axhline(stats["achieved_ratio"], color="#c44e52", label="achieved, whole run")
    right.set_xticks(list(x), names, rotation=70, ha="right", fontsize=7)
    right.set_title(f"{stats['mode']}: ratio per partition")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
