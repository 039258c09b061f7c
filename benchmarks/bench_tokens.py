"""Token datasets: index build time vs sequence count, and the job's end-to-end tokens/s.

    python benchmarks/bench_tokens.py [--max-sequences 100000000]

Index build: build_gpt_indices (Megatron's document, sample and shuffle
indices) for 10^5 ... 10^8 sequences of 1-512 tokens, sequence length 2048,
two epochs' worth of samples; seconds and sequences/s. End to end: a
uint16 corpus of 200k sequences (~26M tokens) through `shardmill run` on the
in-process runner, sequence length 1024, 4 shards; tokens/s of samples written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from shardmill.pipelines.config import parse_config, validate  # noqa: E402
from shardmill.pipelines.run_job import run_job  # noqa: E402
from shardmill.transforms.megatron_index import build_gpt_indices  # noqa: E402
from tests.datagen.megatron import write_indexed_dataset  # noqa: E402


def index_build(max_sequences: int) -> list[dict]:
    rows = []
    n = 100_000
    while n <= max_sequences:
        sizes = np.random.default_rng(0).integers(1, 513, n).astype(np.int32)
        samples = int(sizes.astype(np.int64).sum() * 2 // 2048) - 1  # two epochs' worth
        start = time.perf_counter()
        indices = build_gpt_indices(sizes, 2048, samples, seed=1234)
        seconds = time.perf_counter() - start
        rows.append({"sequences": n, "samples": len(indices.shuffle_index), "epochs": indices.num_epochs,
                     "seconds": round(seconds, 3), "sequences_per_s": round(n / seconds)})
        del indices, sizes
        n *= 10
    return rows


def end_to_end() -> dict:
    work = tempfile.mkdtemp(prefix="bench-tokens-")
    rng = np.random.default_rng(1)
    sequences = [rng.integers(0, 50_000, int(k)).astype(np.uint16) for k in rng.integers(1, 256, 200_000)]
    write_indexed_dataset(os.path.join(work, "corpus"), sequences, np.uint16)
    config = validate(parse_config(
        f'output {{ num_shards: 4 }}\ntoken_dataset {{ path_prefix: "{work}/corpus" seq_length: 1024 }}'))
    start = time.perf_counter()
    manifest = run_job(config, [], os.path.join(work, "out"), PipelineOptions([]))
    seconds = time.perf_counter() - start
    samples = manifest["stats"]["token_dataset"]["num_samples"]
    tokens = samples * 1025
    return {"sequences": len(sequences), "samples": samples, "tokens_written": tokens, "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds), "samples_per_s": round(samples / seconds)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-sequences", type=int, default=100_000_000)
    args = parser.parse_args()
    print(json.dumps({"index_build": index_build(args.max_sequences), "end_to_end": end_to_end()}, indent=1))


if __name__ == "__main__":
    main()
