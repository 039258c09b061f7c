"""The token job's summary text: one corpus, or a blend of corpora."""

from __future__ import annotations


def _corpus_line(stats: dict) -> str:
    return (f"{stats['num_samples']:,} samples, {stats['num_epochs']} epoch(s) (separate final epoch: "
            f"{stats['separate_final_epoch']}), sequences {stats['sequences']:,} ({stats['sequences_kept']:,} "
            f"kept), {stats['dtype']}, {stats['tokens_per_epoch']:,} tokens per epoch")


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
        f"index built in {timings['index_build_seconds']:.2f} s",
        f"records out {manifest['stats']['accounting']['records_written']:,} in {manifest['num_shards']} shard(s), "
        f"time {timings['seconds']:.1f} s",
    ]
    return "\n".join(lines)
