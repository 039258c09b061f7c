"""Charts of a token run for `shardmill inspect --plot` (needs matplotlib)."""

from __future__ import annotations

from shardmill.transforms.common.plotting import pyplot


def plot(manifest: dict, path: str) -> None:
    """Per corpus: its share of the samples against its blend weight, and the epochs its samples span."""
    plt = pyplot()
    stats = manifest["stats"]["token_dataset"]
    corpora = stats.get("corpora") or [stats]
    names = [c["path_prefix"].rsplit("/", 1)[-1] for c in corpora]
    samples = stats.get("samples_per_corpus") or [stats["num_samples"]]
    weights = stats.get("weights") or [1.0]
    total = sum(samples) or 1
    x = range(len(corpora))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.bar([i - 0.2 for i in x], weights, width=0.4, color="#888888", label="weight")
    left.bar([i + 0.2 for i in x], [s / total for s in samples], width=0.4, color="#4878a8", label="share of samples")
    left.set_xticks(list(x), names, rotation=30, ha="right", fontsize=8)
    left.set_title(f"{stats['num_samples']:,} samples of {stats['seq_length']} tokens")
    left.legend(fontsize=8)
    right.bar(x, [c["num_epochs"] for c in corpora], color="#c44e52")
    right.set_xticks(list(x), names, rotation=30, ha="right", fontsize=8)
    right.set_ylabel("epochs over the split's tokens")
    right.set_title(f"{stats['use_split']} split: epochs per corpus")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
