"""Serving token outputs to training: the reader and adapters vs numpy indexing of the mapped `.bin`.

    python -m benchmarks.bench_token_reader [--sequences 100000] [--seq-length 1024] [--rounds 3]

One synthetic uint16 corpus (documents of 1-511 tokens), one `shardmill run`
of its training split (one epoch of samples of seq_length + 1 tokens), then,
in the same process and each round every way, one epoch of batches of 32:

- numpy: what Megatron's GPTDataset does, on its own indices (the ones the
  job built, kept in the output): sample i = shuffle_index[i], its pieces
  sliced out of the mapped `.bin` through sample_index and document_index,
  concatenated, stacked into a batch (int64, as GPTDataset returns text);
- numpy + masks: the same, then tokens/labels/loss_mask/position_ids as
  MegatronSamples makes them;
- reader: ShardReader over the shards (global shuffle, uint16 samples);
- reader + MegatronSamples: the reader with the converter;
- torch: ShardIterableDataset with MegatronSamples through a DataLoader
  (num_workers 0, batch_size None).

Prints one JSON object: samples/s and tokens/s per way and round, the best
round of each, and each way's ratio to numpy (of the best rounds, and per
round with its spread).
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile

import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from benchmarks.harness import emit, interleaved_rounds, versus
from shardmill.native_ext.converters import MegatronSamples, megatron_masks
from shardmill.native_ext.reader import ShardReader
from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.tokens.plan import INDICES_NAME, read_dataset
from tests.datagen.megatron import write_indexed_dataset

BATCH = 32
EOD = 13


def numpy_batches(prefix: str, indices: dict, seq_length: int, masks: bool):
    """Megatron's GPTDataset.__getitem__ gather over a mapped .bin, batched (the baseline)."""
    dataset = read_dataset(prefix + ".idx", prefix + ".bin")
    data = np.memmap(prefix + ".bin", dtype=dataset.dtype, mode="r")
    starts = dataset.sequence_pointers // dataset.dtype.itemsize
    lengths = dataset.sequence_lengths
    doc_index, sample_index, shuffle = indices["document_index"], indices["sample_index"], indices["shuffle_index"]
    for begin in range(0, len(shuffle), BATCH):
        rows = []
        for i in shuffle[begin:begin + BATCH]:
            (d0, o0), (d1, o1) = sample_index[i], sample_index[i + 1]
            if d0 == d1:
                s = starts[doc_index[d0]]
                rows.append(data[s + o0:s + o1 + 1])
            else:
                parts = [data[starts[doc_index[d0]] + o0:starts[doc_index[d0]] + lengths[doc_index[d0]]]]
                parts += [data[starts[doc_index[d]]:starts[doc_index[d]] + lengths[doc_index[d]]]
                          for d in range(d0 + 1, d1)]
                parts.append(data[starts[doc_index[d1]]:starts[doc_index[d1]] + o1 + 1])
                rows.append(np.concatenate(parts))
        text = np.stack(rows).astype(np.int64)
        batch = {"tokens": text}
        if masks:
            batch = {"tokens": text[:, :-1], "labels": text[:, 1:]}
            batch.update(megatron_masks(batch["tokens"], EOD, False, False, False, False))
        yield batch


def reader_batches(out: str, converter):
    with ShardReader(out, batch_size=BATCH, converter=converter) as reader:
        yield from reader


def torch_batches(out: str):
    import torch

    from shardmill.native_ext.torch_dataset import ShardIterableDataset

    dataset = ShardIterableDataset(out, batch_size=BATCH, converter=MegatronSamples(EOD))
    yield from torch.utils.data.DataLoader(dataset, batch_size=None)


def count(batches) -> tuple[int, int]:
    """Reads every batch: (samples, tokens) they held."""
    samples = tokens = 0
    for batch in batches:
        samples += len(batch["tokens"])
        tokens += batch["tokens"].numel() if hasattr(batch["tokens"], "numel") else batch["tokens"].size
    return samples, tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sequences", type=int, default=100_000)
    parser.add_argument("--seq-length", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench_token_reader_")
    rng = np.random.default_rng(0)
    sequences = [rng.integers(0, 50000, n).astype(np.uint16) for n in rng.integers(1, 512, args.sequences)]
    prefix = os.path.join(work, "corpus")
    write_indexed_dataset(prefix, sequences, np.uint16)
    out = os.path.join(work, "out")
    config = parse_config(f'seed: 1 output {{ num_shards: 4 }} token_dataset {{ path_prefix: "{prefix}" '
                          f'seq_length: {args.seq_length} }}')
    validate(config)
    manifest = run_job(config, [], out, PipelineOptions([])).manifest
    with open(os.path.join(out, os.path.dirname(manifest["errors"]["path"]), INDICES_NAME), "rb") as f:
        indices = dict(np.load(io.BytesIO(f.read())))
    ways = {
        "numpy": lambda: numpy_batches(prefix, indices, args.seq_length, False),
        "numpy + masks": lambda: numpy_batches(prefix, indices, args.seq_length, True),
        "reader": lambda: reader_batches(out, None),
        "reader + MegatronSamples": lambda: reader_batches(out, MegatronSamples(EOD)),
        "torch + MegatronSamples": lambda: torch_batches(out),
    }
    import torch  # noqa: F401  (imported before the clock starts: the torch way times batches, not the import)

    runs = interleaved_rounds({name: (lambda batches=batches: count(batches())) for name, batches in ways.items()},
                              args.rounds)
    rounds = {name: [{"samples": r.value[0], "samples_per_s": round(r.value[0] / r.seconds),
                      "tokens_per_s": round(r.value[1] / r.seconds)} for r in results]
              for name, results in runs.items()}
    best = {name: max(r, key=lambda x: x["samples_per_s"]) for name, r in rounds.items()}
    paired = versus({name: [r.value[0] / r.seconds for r in results] for name, results in runs.items()},
                    "numpy", "samples_per_s", "ratio_to_numpy")
    emit({
        "corpus_tokens": int(sum(len(s) for s in sequences)), "seq_length": args.seq_length, "batch": BATCH,
        "samples_per_epoch": int(len(indices["shuffle_index"])), "rounds": rounds, "best": best,
        "ratio_to_numpy": {name: round(b["samples_per_s"] / best["numpy"]["samples_per_s"], 2)
                           for name, b in best.items()},
        "ratio_to_numpy_median_of_rounds": {name: figures["ratio_to_numpy"] for name, figures in paired.items()},
        "ratio_to_numpy_spread": {name: figures["ratio_to_numpy_spread"] for name, figures in paired.items()},
    })


if __name__ == "__main__":
    main()
