"""Inflating lc0 chunks: the load kernel (libdeflate) side by side with zlib through Arrow and Python's zlib.

Real lc0 V6 chunks (the shared fixtures' frames_v6_*.bin.gz: self-play games, 1.6 MB inflated each),
each inflated whole in one process, variants rotated each round:

- kernel: kernels.pack_chunk_records, the job's load kernel (libdeflate into a per-thread buffer,
  CRC-32 checked, every record's version checked), packing no record (positions empty);
- kernel + pack all: the same, packing every record into an output array (all positions);
- arrow zlib: pa.decompress(codec="gzip") into a buffer of the known size (the kernel's inflater before);
- python zlib: zlib.decompress (what a plain script does).

Prints one JSON object: median MB/s of inflated output per variant and its ratio to arrow zlib (per round),
each with its spread.

    python -m benchmarks.bench_inflate [--repeat 20 --rounds 5]
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import zlib

import numpy as np
import pyarrow as pa

from benchmarks.harness import emit, interleaved_rounds, versus
from shardmill.core import kernels
from tests.support.paths import SHARED_FIXTURES

RECORD = 8356
VERSION = 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="passes over the chunks per timing")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pattern = os.path.join(SHARED_FIXTURES, "lc0", "frames_v6_[0-9]*")
    if not glob.glob(pattern):
        sys.exit(f"bench_inflate needs the shared fixtures' lc0 chunks ({pattern}): a checkout with ../shared beside it")
    chunks = [open(p, "rb").read() for p in sorted(glob.glob(pattern))]
    sizes = [int.from_bytes(c[-4:], "little") for c in chunks]
    counts = [s // RECORD for s in sizes]
    outs = [np.empty(kernels.max_packed_bytes(RECORD, n), np.uint8) for n in counts]
    offsets = [np.empty(n + 1, np.int64) for n in counts]
    everything = [np.arange(n, dtype=np.int64) for n in counts]
    nothing, no_room, one_offset = np.empty(0, np.int64), np.empty(0, np.uint8), np.zeros(1, np.int64)

    def kernel():
        for c, n in zip(chunks, counts):
            assert kernels.pack_chunk_records(c, n, RECORD, VERSION, nothing, no_room, one_offset) == -1

    def kernel_pack_all():
        for c, n, out, at, rows in zip(chunks, counts, outs, offsets, everything):
            assert kernels.pack_chunk_records(c, n, RECORD, VERSION, rows, out, at) == -1

    def arrow_zlib():
        for c, s in zip(chunks, sizes):
            pa.decompress(c, decompressed_size=s, codec="gzip", asbytes=False)

    def python_zlib():
        for c in chunks:
            zlib.decompress(c, 31)

    variants = {"kernel": kernel, "kernel + pack all": kernel_pack_all, "arrow zlib": arrow_zlib,
                "python zlib": python_zlib}
    runs = interleaved_rounds({name: (lambda fn=fn: [fn() for _ in range(args.repeat)])
                               for name, fn in variants.items()}, args.rounds)
    rates = {name: [sum(sizes) * args.repeat / r.seconds / 1e6 for r in results] for name, results in runs.items()}
    figures = versus(rates, "arrow zlib", "mb_per_s", "vs_arrow_zlib")
    emit({
        "chunks": len(chunks), "inflated_mb": round(sum(sizes) / 1e6, 1),
        "compressed_mb": round(sum(len(c) for c in chunks) / 1e6, 2),
        **{key: {name: figures[name][key] for name in variants}
           for key in ("mb_per_s", "mb_per_s_spread", "vs_arrow_zlib", "vs_arrow_zlib_spread")},
    })


if __name__ == "__main__":
    main()
