"""Training cycles as users run them: the job reruns into one output as the corpus grows (a new generation each
time, the previous one kept readable), while a reader following the output serves the generation it began each
epoch on and moves to the newest only at an epoch boundary, resuming exactly from a state on either side."""

import hashlib
import os
import shutil

import pytest

from shardmill.native_ext import OrderOptions, OutputError, ShardReader
from tests.datagen.lc0 import gzip_bytes, make_game_records
from tests.pipelines.test_run_job import job_config, run

CYCLE = "lc0 { chunk_pool { passes: 1 } }\noutput { num_shards: 2 keep_generations: 2 overwrite: true }"


def batches(reader, limit=None):
    """(epoch, generation, record indices, digest of the frames) per batch."""
    out = []
    for batch in reader:
        out.append((int(batch["epoch"]), reader.generation, batch["record_index"].tolist(),
                    hashlib.sha256(batch["frame"].tobytes()).hexdigest()))
        if limit is not None and len(out) == limit:
            break
    return out


def open_reader(out, **kwargs):
    return ShardReader(str(out), batch_size=64, columns=["frame"], num_epochs=3,
                       order_options=OrderOptions(seed=9, window_row_groups=2), **kwargs)


def grow(corpus, games, seed):
    for i in range(games):
        with open(os.path.join(corpus, f"training.{seed}{i:04d}.gz"), "wb") as f:
            f.write(gzip_bytes(make_game_records(seed * 1000 + i, 30 + i).tobytes()))


@pytest.mark.slow
def test_a_following_reader_moves_to_each_new_generation_at_an_epoch_boundary_only(lc0_dataset, tmp_path):
    corpus, out = str(tmp_path / "corpus"), tmp_path / "out"
    shutil.copytree(lc0_dataset[0], corpus)
    config = job_config(corpus, CYCLE)
    run(config, out)
    with open_reader(out) as first:  # generation 1 alone, for reference
        reference_1 = batches(first)
    with open_reader(out, follow_generations=True) as reader:
        served = batches(reader, limit=5)  # inside epoch 0
        mid_epoch_0 = reader.state()
        assert served[-1][0] == 0

        grow(corpus, 6, seed=1)
        run(config, out)  # generation 2, committed while the reader is in the middle of epoch 0
        assert os.path.exists(out / ".g000001" / "manifest.json")
        rest = batches(reader)
    served += rest
    with open_reader(out, start_epoch=1) as second:  # generation 2 from epoch 1, as a reader started there
        reference_2 = batches(second)

    epoch_0 = [b for b in served if b[0] == 0]
    assert epoch_0 == [b for b in reference_1 if b[0] == 0]  # the epoch it began on generation 1 ends there
    assert {b[1] for b in epoch_0} == {1} and {b[1] for b in served if b[0] > 0} == {2}
    assert [b for b in served if b[0] > 0] == reference_2
    assert sum(len(b[2]) for b in served if b[0] == 1) > sum(len(b[2]) for b in epoch_0)  # the grown corpus

    # Resumed from the state taken on generation 1: the same batches, through the same switch.
    with open_reader(out, follow_generations=True, state=mid_epoch_0) as resumed:
        assert batches(resumed) == rest
    # And from one taken after the switch.
    with open_reader(out, follow_generations=True) as again:
        head = batches(again, limit=3)
        after = again.state()
        tail = batches(again)
    with open_reader(out, follow_generations=True, state=after) as resumed:
        assert batches(resumed) == tail
    assert {b[1] for b in head + tail} == {2}  # a new reader starts on the newest generation

    # A third generation: the first is no longer kept, its state says so in one line.
    grow(corpus, 2, seed=2)
    run(config, out)
    assert not os.path.exists(out / ".g000001") and os.path.exists(out / ".g000002" / "manifest.json")
    assert not any(name.startswith("g000001-") for name in os.listdir(out))
    with pytest.raises(OutputError, match="generation 1 is no longer kept"):
        open_reader(out, follow_generations=True, state=mid_epoch_0)


@pytest.mark.slow
def test_without_kept_generations_an_overwrite_deletes_the_previous_one(lc0_dataset, tmp_path):
    corpus, out = str(tmp_path / "corpus"), tmp_path / "out"
    shutil.copytree(lc0_dataset[0], corpus)
    config = job_config(corpus, CYCLE.replace("keep_generations: 2", "keep_generations: 1"))
    run(config, out)
    run(config, out)
    names = os.listdir(out)
    assert not any(n.startswith(("g000001-", ".g000001")) for n in names)
    assert ".g000002" in names
