"""SHA-256 of every shard each job kind writes on the test corpora: a restructure must leave them unchanged.

    python -m tests.support.output_digests DIGESTS.json [--fixtures ../shared/fixtures]

runs `shardmill run` on an lc0 dataset (the generator's, with bad chunks), event logs in CSV and Parquet
(both label modes, hive partitions) and the Megatron fixture corpora (one corpus, a blend with splits),
then writes {case: {shard file: sha256}} to DIGESTS.json; compare two such files with `diff`.
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile

from tests.support.cli import run_shardmill

CASES = {
    "lc0": ('input: "{data}/lc0"\nseed: 42\nlc0 {{ index {{ count_method: SCAN lc0_version: 6 }}\n'
            '  chunk_pool {{ chunk_pool_size: 20 passes: 3 position_count: 8 hanse_sampling_threshold: 150 }} }}\n'
            'output {{ path: "{out}" num_shards: 3 }}\nmax_error_fraction: 0.5\n'),
    "labels_csv_adaptive": ('input: "{data}/logs_csv"\nseed: 7\n'
                            'label_sampling {{ label_column: "clicked" ratio: 3 }}\noutput {{ path: "{out}" }}\n'),
    "labels_parquet_exact_hive": ('input: "{data}/logs_hive"\nseed: 9\nlabel_sampling {{ label_column: "clicked" '
                                  'ratio: 2 mode: EXACT hive_partitioning: true }}\noutput {{ path: "{out}" num_shards: 2 }}\n'),
    "tokens_one_corpus": ('seed: 3\ntoken_dataset {{ path_prefix: "{fixtures}/megatron/meg-gpt2-openwebtext_text_document" '
                          'seq_length: 64 num_samples: 500 random_seed: 1234 }}\noutput {{ path: "{out}" num_shards: 2 }}\n'),
    "tokens_blend_split": ('seed: 3\ntoken_dataset {{ blend {{ path_prefix: "{fixtures}/megatron/owt_b_rev599to0_int32" weight: 0.3 }}\n'
                           '  blend {{ path_prefix: "{fixtures}/megatron/owt_c_600to999_5empty_uint16" weight: 0.7 }}\n'
                           '  split: "90,8,2" seq_length: 32 num_samples: 700 random_seed: 5 }}\n'
                           'output {{ path: "{out}" num_shards: 2 }}\n'),
}


def write_inputs(data: str) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.datagen.lc0 import write_dataset

    write_dataset(os.path.join(data, "lc0"), num_archives=3, games_per_archive=12, loose_games=6, bad=True, seed=7)
    rng = np.random.default_rng(11)
    os.makedirs(os.path.join(data, "logs_csv"))
    for part in range(3):
        with open(os.path.join(data, "logs_csv", f"day{part}.csv"), "w") as f:
            f.write("id,user,clicked\n")
            for i in range(4000):
                f.write(f"{part * 4000 + i},u{rng.integers(500)},{int(rng.random() < 0.1)}\n")
    for day in ("2026-01-01", "2026-01-02"):
        folder = os.path.join(data, "logs_hive", f"day={day}")
        os.makedirs(folder)
        n = 3000
        pq.write_table(pa.table({"id": np.arange(n), "score": rng.random(n),
                                 "clicked": (rng.random(n) < 0.2).astype(np.int64)}), os.path.join(folder, "p.parquet"))


def shard_digests(out: str) -> dict:
    digests = {}
    for root, _, files in os.walk(out):
        for name in files:
            if name.endswith(".parquet"):
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    digests[os.path.relpath(path, out)] = hashlib.sha256(f.read()).hexdigest()
    return dict(sorted(digests.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("digests")
    parser.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "fixtures"))
    args = parser.parse_args()
    fixtures = os.path.abspath(args.fixtures)
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        write_inputs(data)
        for case, template in CASES.items():
            out = os.path.join(tmp, "out", case)
            config = os.path.join(tmp, f"{case}.textproto")
            with open(config, "w") as f:
                f.write(template.format(data=data, out=out, fixtures=fixtures))
            run = run_shardmill("run", "--config", config, timeout=1800)
            if run.returncode != 0:
                sys.exit(f"{case}: shardmill run exited {run.returncode}:\n{run.stderr[-3000:]}")
            result[case] = shard_digests(out)
            print(f"{case}: {len(result[case])} shard(s)", file=sys.stderr)
    with open(args.digests, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
