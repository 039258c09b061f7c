"""Charts of a label run's statistics for `shardmill inspect --plot` (needs matplotlib)."""

from __future__ import annotations

from shardmill.transforms.common.plotting import pyplot

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
