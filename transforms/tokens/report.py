"""The token job's report: the summary text (one corpus, or a blend of corpora) and the charts of
`shardmill inspect --plot` (plot, needs matplotlib)."""

from __future__ import annotations

from shardmill.transforms.common.plotting import pyplot


def _corpus_line(stats: dict) -> str:
    return (f"{stats['num_samples']:,} samples, {stats['num_epochs']} epoch(s) (separate final epoch: "
            f"{stats['separate_final_epoch']}), sequences {stats['sequences']:,} ({stats['sequences_kept']:,} "
            f"kept), {stats['dtype']}, {stats['tokens_per_epoch']:,} tokens per epoch")


def rows_reason(stats: dict) -> str:
    """Why the output has the rows it has: Megatron's length rules, which are not always num_samples."""
    rows, requested = stats["num_samples"], stats["num_samples_requested"]
    if "corpora" not in stats:
        if requested is None:
            why = "one epoch of the split (num_samples unset)"
        elif rows == requested:
            why = f"{requested:,} requested"
        else:
            why = (f"{requested:,} requested; Megatron's GPTDataset serves whole epochs "
                   f"({stats['num_epochs']} epoch(s))")
    elif not stats.get("weighted", True):
        samples = sum(c["num_samples"] for c in stats["corpora"])
        why = (f"every sample of one epoch of each corpus ({samples:,}; no weights, num_samples unset)"
               if requested is None else f"min({requested:,} requested, {samples:,} in one epoch of each corpus)")
    elif rows == requested:
        why = f"{requested:,} requested"
    else:
        why = f"{requested:,} requested; the blend holds the sum of ceil(requested x weight) over its corpora"
    if stats.get("pad_token") is not None:
        why += f"; the last sample is partial, padded with {stats['pad_token']}"
    return f"rows written {rows:,}: {why}"


def render_summary(manifest: dict) -> str:
    stats = manifest["stats"]["token_dataset"]
    timings = manifest["stats"]["timings"]
    head = (f"megatron samples {stats['num_samples']:,} of {stats['seq_length']} tokens "
            f"(+1: {stats['add_extra_token']}), {stats['use_split']} split")
    if "corpora" in stats:  # a blend: the BlendedDataset's samples, drawn from each corpus's GPTDataset
        lines = [f"{head}, a blend of {len(stats['corpora'])} corpora"]
        for corpus, weight, taken in zip(stats["corpora"], stats["weights"], stats["samples_per_corpus"]):
            lines.append(f"  {corpus['path_prefix']}: weight {weight:.4g}, {taken:,} samples taken of "
                         + _corpus_line(corpus))
    else:
        lines = [f"{head}: " + _corpus_line(stats)]
    cache = stats.get("megatron_cache")
    if cache:
        only = "; cache only: no samples written" if cache["cache_only"] else ""
        lines.append(f"megatron cache: {cache['directory']} ({len(cache['files'])} files; copy them to the "
                     f"training job's --data-cache-path{only})")
    lines += [
        rows_reason(stats),
        f"index built in {timings['index_build_seconds']:.2f} s",
        f"records out {manifest['stats']['accounting']['records_written']:,} in {manifest['num_shards']} shard(s), "
        f"time {timings['seconds']:.1f} s",
    ]
    return "\n".join(lines)


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
