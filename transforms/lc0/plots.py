"""Charts of a run's sampling statistics for `shardmill inspect --plot` (needs matplotlib)."""

from __future__ import annotations

from shardmill.transforms.common.plotting import pyplot


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
