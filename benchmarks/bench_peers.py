"""Peer loaders on shardmill shards, run inside a separate virtualenv that has them.

Never imported by shardmill; bench_reader runs it from the repository root as
`PEER_PYTHON -m benchmarks.bench_peers DATASET_DIR WIDTH ROUNDS MAX_ROWS` and
reads one JSON object: per peer the median seconds (and their spread) and rows/s to read the
whole dataset (Grain and Mosaic: their first MAX_ROWS rows, as they read
only ~7k-300k rows/s here), with shuffling on where the peer offers it.

  grain      grain.experimental.ParquetIterDataset per shard, batched
             (Grain reads Parquet sequentially; it has no global shuffle)
  mosaic     streaming.StreamingDataset(shuffle=True) over the same rows
             converted to MDS (conversion not timed)
  petastorm  petastorm.make_batch_reader(shuffle_row_groups=True) on the Parquet files,
             as it comes: whole row groups per batch, frames left as Python bytes
  petastorm_parity  the same reader doing what shardmill's reader does:
             shuffle_rows=True, rank 0 of 2 (cur_shard/shard_count), and
             batches of 256 frames as (256, width) uint8 arrays

Every peer hands out frames in the form a training step can use, except
`petastorm` (kept to show the raw ceiling of whole-row-group reads).
Peers missing from this virtualenv are reported as errors, not fatal, so
one venv can hold Grain + Petastorm and another Mosaic (its torchvision
import needs a torch it can load).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import tempfile

import numpy as np
import pyarrow.parquet as pq

from benchmarks.harness import interleaved_rounds, seconds_of, summary

BATCH = 256


def shard_files(directory):
    return sorted(glob.glob(os.path.join(directory, "*shard-*.parquet")))


def grain_rows(directory, width, max_rows):
    import grain

    rows = 0
    for f in shard_files(directory):  # Grain's Parquet source is sequential per file
        for batch in grain.experimental.ParquetIterDataset(f).batch(BATCH):
            rows += len(batch["frame"])
            if rows >= max_rows:
                return rows
    return rows


def mosaic_prepare(directory, width, max_rows):
    """The first 2 * max_rows rows (all of lc0 frames) as MDS: Mosaic reads max_rows of them.

    Converting goes through Python per sample (~15k rows/s here), so the 4M
    small rows are not all converted; Mosaic's read cost is per sample.
    """
    from streaming import MDSWriter

    out = tempfile.mkdtemp(prefix="mds-")
    written = 0
    with MDSWriter(out=out, columns={"frame": "bytes"}, compression=None) as writer:
        for f in shard_files(directory):
            for batch in pq.ParquetFile(f).iter_batches(4096, columns=["frame"]):
                for value in batch.column(0).to_pylist():
                    writer.write({"frame": value})
                written += batch.num_rows
                if written >= 2 * max_rows:
                    return out
    return out


def mosaic_rows(mds_dir, width, max_rows):
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()  # one dataset per round over the same directory

    dataset = StreamingDataset(local=mds_dir, shuffle=True, batch_size=BATCH, shuffle_seed=1)
    rows, pending = 0, []
    for sample in dataset:  # collate like a DataLoader would: 256 samples -> one (256, width) array
        pending.append(sample["frame"])
        if len(pending) == BATCH:
            rows += len(np.frombuffer(b"".join(pending), np.uint8).reshape(BATCH, width))
            pending = []
            if rows >= max_rows:
                return rows
    return rows + len(pending)


def petastorm_rows(directory, width, max_rows):
    from petastorm import make_batch_reader

    rows = 0
    urls = ["file://" + os.path.abspath(f) for f in shard_files(directory)]  # not _manifest.json
    with make_batch_reader(urls, schema_fields=["frame"], num_epochs=1, shuffle_row_groups=True,
                           workers_count=2) as reader:
        for batch in reader:
            rows += len(batch.frame)
    return rows


def petastorm_parity_rows(directory, width, max_rows):
    from petastorm import make_batch_reader

    rows = 0
    urls = ["file://" + os.path.abspath(f) for f in shard_files(directory)]
    with make_batch_reader(urls, schema_fields=["frame"], num_epochs=1, shuffle_row_groups=True, shuffle_rows=True,
                           seed=1, cur_shard=0, shard_count=2, workers_count=2) as reader:
        for batch in reader:
            frames = np.frombuffer(b"".join(batch.frame), np.uint8).reshape(-1, width)
            for start in range(0, len(frames), BATCH):  # views, no copy
                rows += len(frames[start:start + BATCH])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", help="a shardmill output of `frame` rows")
    parser.add_argument("width", type=int, help="the frames' bytes")
    parser.add_argument("rounds", type=int)
    parser.add_argument("max_rows", type=int, help="rows Grain and Mosaic read at most")
    args = parser.parse_args()
    directory, width, rounds, max_rows = args.directory, args.width, args.rounds, args.max_rows
    report = {}
    mds = None
    peers = [("grain", grain_rows), ("mosaic", mosaic_rows), ("petastorm", petastorm_rows),
             ("petastorm_parity", petastorm_parity_rows)]
    for name, fn in peers:
        try:
            source = directory
            if name == "mosaic":
                mds = mds or mosaic_prepare(directory, width, max_rows)
                source = mds
            runs = interleaved_rounds({name: lambda fn=fn, source=source: fn(source, width, max_rows)}, rounds)[name]
            rows, seconds = runs[-1].value, summary(seconds_of(runs), digits=6)
            t = seconds["median"]
            report[name] = {"rows_read": rows, "seconds": round(t, 3), "seconds_spread": seconds["spread"],
                            "rows_per_s": round(rows / t), "mb_per_s": round(rows * width / t / 1e6, 1)}
        except Exception as err:  # a peer that can't run here is reported, not fatal
            report[name] = {"error": f"{type(err).__name__}: {err}"[:300]}
    if mds:
        shutil.rmtree(mds, ignore_errors=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
