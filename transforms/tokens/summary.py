"""The token job's summary text: one corpus, or a blend of corpora."""

from __future__ import annotations


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
    lines += [
        rows_reason(stats),
        f"index built in {timings['index_build_seconds']:.2f} s",
        f"records out {manifest['stats']['accounting']['records_written']:,} in {manifest['num_shards']} shard(s), "
        f"time {timings['seconds']:.1f} s",
    ]
    return "\n".join(lines)
