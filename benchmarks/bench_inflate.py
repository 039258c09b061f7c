"""Inflating lc0 chunks: the load kernel (libdeflate) side by side with zlib through Arrow and Python's zlib.

Real lc0 V6 chunks (the shared fixtures' frames_v6_*.bin.gz: self-play games, 1.6 MB inflated each),
each inflated whole in one process, variants rotated each round:

- kernel: kernels.scatter_chunk_records, the job's load kernel (libdeflate into a per-thread buffer,
  CRC-32 checked, every record's version checked), copying no record (positions empty);
- kernel + copy all: the same, copying every record to its row of an output array (all positions);
- arrow zlib: pa.decompress(codec="gzip") into a buffer of the known size (the kernel's inflater before);
- python zlib: zlib.decompress (what a plain script does).

Prints one JSON object: median MB/s of inflated output per variant and its ratio to arrow zlib.

    python benchmarks/bench_inflate.py [--repeat 20 --rounds 5]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time
import zlib

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from shardmill.native_ext import kernels  # noqa: E402
from tests.support.paths import SHARED_FIXTURES  # noqa: E402

RECORD = 8356
VERSION = 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="passes over the chunks per timing")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    chunks = [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(SHARED_FIXTURES, "lc0", "frames_v6_[0-9]*")))]
    sizes = [int.from_bytes(c[-4:], "little") for c in chunks]
    counts = [s // RECORD for s in sizes]
    outs = [np.empty((n, RECORD), np.uint8) for n in counts]
    everything = [np.arange(n, dtype=np.int64) for n in counts]
    nothing = np.empty(0, np.int64)

    def kernel():
        for c, n, out in zip(chunks, counts, outs):
            assert kernels.scatter_chunk_records(c, n, RECORD, VERSION, nothing, nothing, out) == -1

    def kernel_copy_all():
        for c, n, out, rows in zip(chunks, counts, outs, everything):
            assert kernels.scatter_chunk_records(c, n, RECORD, VERSION, rows, rows, out) == -1

    def arrow_zlib():
        for c, s in zip(chunks, sizes):
            pa.decompress(c, decompressed_size=s, codec="gzip", asbytes=False)

    def python_zlib():
        for c in chunks:
            zlib.decompress(c, 31)

    variants = {"kernel": kernel, "kernel + copy all": kernel_copy_all, "arrow zlib": arrow_zlib,
                "python zlib": python_zlib}
    rates = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            for _ in range(args.repeat):
                variants[name]()
            rates[name].append(sum(sizes) * args.repeat / (time.perf_counter() - start) / 1e6)
    base = statistics.median(rates["arrow zlib"])
    print(json.dumps({
        "chunks": len(chunks), "inflated_mb": round(sum(sizes) / 1e6, 1),
        "compressed_mb": round(sum(len(c) for c in chunks) / 1e6, 2),
        "mb_per_s": {k: round(statistics.median(v)) for k, v in rates.items()},
        "vs_arrow_zlib": {k: round(statistics.median(v) / base, 2) for k, v in rates.items()},
    }, indent=1))


if __name__ == "__main__":
    main()
