"""Token datasets: index and blend build time vs size, sample reading, and the job's end-to-end tokens/s.

    python -m benchmarks.bench_tokens [--max-sequences 100000000] [--max-blend-samples 100000000] [--rounds 3]

Index build: build_gpt_indices (Megatron's document, sample and shuffle
indices) for 10^5 ... 10^8 sequences of 1-512 tokens, sequence length 2048,
two epochs' worth of samples; seconds and sequences/s. Blend build:
plan_weighted_blend (Megatron's sizes and blending index) over 3 and 30 corpora for
10^6 ... 10^8 samples. Sample reading, paired in one process on the same
samples: sample by sample (a Python range read per document piece, the way
object stores are still read) against the runs of the mapped `.bin`
copied natively in bulk. End to end, `shardmill run` on the in-process runner, each round
both ways (the per-sample path forced): a uint16 corpus of 200k sequences
(~26M tokens), sequence length 1024; and a blend of it with an int32 corpus
(weights 0.7/0.3), 50,000 samples; tokens/s of samples written. Bulk over
per-sample: of the best rounds, and per round with its spread.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from benchmarks.harness import emit, interleaved_rounds, paired_ab, paired_ratio, timed
from shardmill.core.kernels import copy_runs
from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.tokens import graph as token_job
from shardmill.transforms.tokens.megatron_blend import plan_weighted_blend
from shardmill.transforms.tokens.megatron_index import build_gpt_indices, sample_byte_runs, sample_tokens
from shardmill.transforms.tokens.plan import read_dataset
from tests.datagen.megatron import write_indexed_dataset


def index_build(max_sequences: int) -> list[dict]:
    rows = []
    n = 100_000
    while n <= max_sequences:
        sizes = np.random.default_rng(0).integers(1, 513, n).astype(np.int32)
        samples = int(sizes.astype(np.int64).sum() * 2 // 2048) - 1  # two epochs' worth
        build = timed(lambda: build_gpt_indices(sizes, 2048, samples, seed=1234))
        indices, seconds = build.value, build.seconds
        rows.append({"sequences": n, "samples": len(indices.shuffle_index), "epochs": indices.num_epochs,
                     "seconds": round(seconds, 3), "sequences_per_s": round(n / seconds)})
        del indices, sizes
        n *= 10
    return rows


def blend_build(max_samples: int) -> list[dict]:
    rows = []
    for corpora in (3, 30):
        weights = np.random.default_rng(corpora).uniform(0.1, 1.0, corpora).tolist()
        n = 1_000_000
        while n <= max_samples:
            build = timed(lambda: plan_weighted_blend(weights, n))
            plan, seconds = build.value, build.seconds
            rows.append({"corpora": corpora, "samples": plan.size, "seconds": round(seconds, 3),
                         "samples_per_s": round(plan.size / seconds)})
            del plan
            n *= 10
    return rows


def write_corpus(path: str, sequences: int, dtype, seed: int) -> None:
    rng = np.random.default_rng(seed)
    write_indexed_dataset(path, [rng.integers(0, 50_000, int(k)).astype(dtype)
                                 for k in rng.integers(1, 256, sequences)], dtype)


def sample_reading(work: str, rounds: int) -> dict:
    """Tokens/s reading the same 20,000 shuffled samples both ways, alternating."""
    prefix = os.path.join(work, "corpus")
    dataset = read_dataset(prefix + ".idx", prefix + ".bin")
    indices = build_gpt_indices(dataset.sequence_lengths, 1024, None, seed=1)
    samples = indices.shuffle_index[:20_000].astype(np.int64)
    tokens = len(samples) * 1025

    def read_per_sample():
        with open(prefix + ".bin", "rb") as f:
            return [sample_tokens(f, dataset, indices, int(s)) for s in samples]

    def read_bulk():
        many = np.empty((len(samples), 1025), dtype=dataset.dtype)
        copy_runs(np.memmap(prefix + ".bin", dtype=np.uint8, mode="r"), *sample_byte_runs(dataset, indices, samples, 1024),
                  many.reshape(-1).view(np.uint8))
        return many

    read = {"per_sample": [], "bulk": []}  # each round's samples, compared after the clock

    def tokens_per_s(way, reader):
        run = timed(reader)
        read[way].append(run.value)
        return tokens / run.seconds

    ab = paired_ab(lambda: tokens_per_s("per_sample", read_per_sample), lambda: tokens_per_s("bulk", read_bulk),
                   rounds)
    assert all((bulk == np.stack(one)).all() for one, bulk in zip(read["per_sample"], read["bulk"]))
    return {"samples": len(samples), "per_sample_tokens_per_s": round(max(ab["a"])),
            "bulk_tokens_per_s": round(max(ab["b"])), "bulk_vs_per_sample": round(max(ab["b"]) / max(ab["a"]), 2),
            "bulk_vs_per_sample_median_of_rounds": ab["b_over_a"]["median"],
            "bulk_vs_per_sample_spread": ab["b_over_a"]["spread"]}


def run_once(work: str, name: str, token_config: str, per_sample: bool) -> dict:
    config = validate(parse_config(f"output {{ num_shards: 4 overwrite: true }}\ntoken_dataset {{ {token_config} }}"))
    original = token_job.is_local
    if per_sample:  # the path remote .bin files take: a range read per document piece
        token_job.is_local = lambda path: False
    try:
        run = timed(lambda: run_job(config, [], os.path.join(work, f"out-{name}-{per_sample}"), PipelineOptions([])))
        manifest, seconds = run.value.manifest, run.seconds
    finally:
        token_job.is_local = original
    samples = manifest["stats"]["token_dataset"]["num_samples"]
    return {"samples": samples, "seconds": round(seconds, 2), "tokens_per_s": round(samples * 1025 / seconds)}


def end_to_end(work: str, rounds: int) -> dict:
    jobs = {
        "one_corpus": f'path_prefix: "{work}/corpus" seq_length: 1024',
        "blend_uint16_int32": (f'blend {{ path_prefix: "{work}/corpus" weight: 0.7 }} '
                               f'blend {{ path_prefix: "{work}/corpus32" weight: 0.3 }} '
                               'seq_length: 1024 num_samples: 50000'),
    }
    report = {}
    for name, token_config in jobs.items():
        ways = {mode: (lambda per_sample=(mode == "per_sample"), job=token_config, name=name:
                       run_once(work, name, job, per_sample)) for mode in ("per_sample", "bulk")}
        timed_runs = interleaved_rounds(ways, rounds)
        runs = {mode: [r.value for r in results] for mode, results in timed_runs.items()}
        rates = {mode: [r["tokens_per_s"] for r in results] for mode, results in runs.items()}
        best = {mode: max(values) for mode, values in rates.items()}
        ratio = paired_ratio(rates["bulk"], rates["per_sample"])
        report[name] = {"samples": runs["bulk"][0]["samples"], "per_sample_tokens_per_s": best["per_sample"],
                        "bulk_tokens_per_s": best["bulk"], "bulk_vs_per_sample": round(best["bulk"] / best["per_sample"], 2),
                        "bulk_vs_per_sample_median_of_rounds": ratio["median"],
                        "bulk_vs_per_sample_spread": ratio["spread"], "runs": runs}
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-sequences", type=int, default=100_000_000)
    parser.add_argument("--max-blend-samples", type=int, default=100_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-tokens-")
    write_corpus(os.path.join(work, "corpus"), 200_000, np.uint16, 1)
    write_corpus(os.path.join(work, "corpus32"), 100_000, np.int32, 2)
    emit({"index_build": index_build(args.max_sequences), "blend_build": blend_build(args.max_blend_samples),
          "sample_reading": sample_reading(work, args.rounds), "end_to_end": end_to_end(work, args.rounds)})


if __name__ == "__main__":
    main()
