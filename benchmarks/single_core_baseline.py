"""The practical single-core limit: read → sample → shuffle → write in one plain script.

Hand-written numpy + pyarrow + zlib, no Beam, no accounting, no dead letters:
the same work as `shardmill run` (threshold-gamma acceptance over passes,
position_count records per use, a global shuffle into shards, zstd Parquet).

    python -m benchmarks.single_core_baseline DATA_DIR OUT_DIR --passes 2 --threshold 150 \
        --gamma 1 --position-count 16 --target-shard-bytes 67108864
    python -m benchmarks.single_core_baseline DATA_DIR OUT_DIR --all-positions   # every record once

Not a benchmark itself (so it uses no harness): the program bench_job times against `shardmill run`.
"""

import argparse
import gzip
import os
import tarfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

RECORD = 8356


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--threshold", type=float, default=150)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--position-count", type=int, default=16)
    parser.add_argument("--target-shard-bytes", type=int, default=64 << 20)
    parser.add_argument("--row-group-rows", type=int, default=501)
    parser.add_argument("--all-positions", action="store_true", help="every record once, no chunk sampling")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    frames, sources, chunks, uses_col, positions = [], [], [], [], []
    for name in sorted(os.listdir(args.data_dir)):
        with tarfile.open(os.path.join(args.data_dir, name)) as tar:
            for index, info in enumerate(m for m in tar if m.isfile() and m.name.endswith(".gz")):
                data = tar.extractfile(info).read()
                # Decide from the trailer, read only accepted chunks' payload.
                n = int.from_bytes(data[-4:], "little") // RECORD
                p = min(1.0, n / args.threshold) ** args.gamma
                k = 1 if args.all_positions else int((rng.random(args.passes) < p).sum())
                if not k:
                    continue
                payload = gzip.decompress(data)  # all members
                if payload[:4] != b"\x06\x00\x00\x00":
                    continue  # only V6 records, like shardmill's window
                records = np.frombuffer(payload, np.uint8).reshape(-1, RECORD)
                n = len(records)
                if args.all_positions:
                    pos = np.arange(n)  # the global permutation below shuffles them
                else:
                    order = np.concatenate([rng.permutation(n) for _ in range(-(-k * args.position_count // n))])
                    pos = order[: k * args.position_count]
                frames.append(records[pos])
                sources.append(np.full(len(pos), len(sources)))
                chunks.append(np.full(len(pos), index, np.int32))
                uses_col.append(np.zeros(len(pos), np.int32) if args.all_positions
                                else np.repeat(np.arange(k, dtype=np.int32), args.position_count))
                positions.append(pos.astype(np.int32))
    frame = np.concatenate(frames)
    num_shards = max(1, -(-frame.nbytes // args.target_shard_bytes))
    perm = rng.permutation(len(frame))
    shard_of = np.arange(len(frame)) % num_shards
    os.makedirs(args.out_dir, exist_ok=True)
    for s in range(num_shards):
        rows = perm[shard_of == s]
        block = np.ascontiguousarray(frame[rows])
        table = pa.table({
            "frame": pa.FixedSizeBinaryArray.from_buffers(pa.binary(RECORD), len(rows), [None, pa.py_buffer(block)]),
            "source": pa.array(np.concatenate(sources)[rows]).cast(pa.string()),
            "chunk": np.concatenate(chunks)[rows],
            "use_count": np.concatenate(uses_col)[rows],
            "position": np.concatenate(positions)[rows],
        })
        pq.write_table(table, os.path.join(args.out_dir, f"shard-{s:05d}.parquet"), compression="zstd",
                       row_group_size=args.row_group_rows)
    print(len(frame))


if __name__ == "__main__":
    main()
