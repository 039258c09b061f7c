"""Elastic resume (elastic.py): a checkpoint of k ranks restored on k' ranks serves the rest of the epoch exactly once."""

import json

import numpy as np
import pytest

from shardmill.native_ext import OrderOptions, ShardOptions, ShardReader
from tests.datagen.shards import write_output

SETTINGS = dict(batch_size=16, columns=["id"], num_epochs=3, order_options=OrderOptions(seed=5, window_row_groups=2))


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("elastic"))
    write_output(directory, [400, 300, 303], row_group_rows=37, width=8)  # 1003 rows: remainders everywhere
    return directory


def epochs_of(batches):
    """{epoch: ids in order} of a list of batches."""
    out = {}
    for batch in batches:
        out.setdefault(int(batch["epoch"]), []).extend(batch["id"].tolist())
    return out


def run_ranks(output, count, steps, states=None):
    """`count` ranks each taking `steps` batches (None: all); their served ids by epoch, and their states."""
    readers = [ShardReader(output, shard_options=ShardOptions(shard_index=r, shard_count=count), state=None if states is None else states[r],
                           **SETTINGS) for r in range(count)]
    served = []
    for reader in readers:
        batches = []
        for batch in (reader if steps != 0 else []):
            batches.append({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in batch.items()})
            if steps is not None and len(batches) == steps:
                break
        served.append(epochs_of(batches))
    states = [reader.state() for reader in readers]
    for reader in readers:
        reader.close()
    return served, states


@pytest.mark.parametrize("old, new, steps", [(2, 3, 7), (4, 2, 5), (3, 3, 4), (1, 4, 20), (4, 2, 0)])
def test_the_rest_of_the_epoch_is_served_once_and_the_next_epochs_follow_the_new_layout(output, old, new, steps):
    before, states = run_ranks(output, old, steps)
    after, _ = run_ranks(output, new, None, ShardReader.elastic_states(states, new))
    epoch0 = [i for rank in before for i in rank.get(0, [])] + [i for rank in after for i in rank.get(0, [])]
    assert len(epoch0) == len(set(epoch0))  # nothing twice, row by row
    # Nothing lost but the few rows every epoch leaves: the old layout's remainder and the new split's.
    assert 1003 - len(epoch0) < old + new
    assert len({len(rank.get(0, [])) for rank in after}) == 1  # equal shares
    fresh, _ = run_ranks(output, new, None)  # the new layout from the start
    for epoch in (1, 2):
        assert [rank[epoch] for rank in after] == [rank[epoch] for rank in fresh]


def test_a_finished_stream_stays_finished_on_other_ranks(output):
    _, states = run_ranks(output, 2, None)
    after, _ = run_ranks(output, 3, None, ShardReader.elastic_states(states, 3))
    assert after == [{}, {}, {}]


def test_an_elastic_epoch_can_itself_be_checkpointed_and_resized_again(output):
    _, states = run_ranks(output, 2, 9)
    first, states = run_ranks(output, 3, 4, ShardReader.elastic_states(states, 3))
    second, _ = run_ranks(output, 2, None, ShardReader.elastic_states(states, 2))
    head, _ = run_ranks(output, 2, 9)
    epoch0 = ([i for rank in head for i in rank[0]] + [i for rank in first for i in rank[0]]
              + [i for rank in second for i in rank.get(0, [])])
    assert len(epoch0) == len(set(epoch0)) and 1003 - len(epoch0) < 2 + 3 + 2


def test_a_checkpoint_inside_an_elastic_epoch_resumes_exactly(output):
    _, states = run_ranks(output, 2, 6)
    elastic = ShardReader.elastic_states(states, 3)
    with ShardReader(output, shard_options=ShardOptions(shard_index=1, shard_count=3), state=elastic[1], **SETTINGS) as reader:
        full = [b["id"].copy() for b in reader]
    with ShardReader(output, shard_options=ShardOptions(shard_index=1, shard_count=3), state=elastic[1], **SETTINGS) as reader:
        head = [next(reader)["id"].copy() for _ in range(5)]
        middle = reader.state()
    with ShardReader(output, shard_options=ShardOptions(shard_index=1, shard_count=3), state=middle, **SETTINGS) as reader:
        rest = [b["id"].copy() for b in reader]
    assert np.concatenate(head + rest).tolist() == np.concatenate(full).tolist()


@pytest.mark.parametrize("tamper, message", [
    (lambda states: states[:1], "one state per rank"),
    (lambda states: [states[0], states[0]], "one state per rank"),
    (lambda states: [states[0], json.dumps({**json.loads(states[1]), "seed": 9}).encode()], "different settings"),
    (lambda states: [states[0], json.dumps({**json.loads(states[1]), "epoch": 1}).encode()], "different epochs"),
    (lambda states: [states[0], b"nonsense"], "not a ShardReader state"),
])
def test_inconsistent_checkpoints_are_refused(output, tamper, message):
    _, states = run_ranks(output, 2, 3)
    with pytest.raises(ValueError, match=message):
        ShardReader.elastic_states(tamper(states), 3)


@pytest.mark.parametrize("ranges", [[[5, 3]], [[0, 2000]], [[10, 20], [15, 30]], "x", [[1, True]]])
def test_tampered_ranges_are_refused(output, ranges):
    _, states = run_ranks(output, 2, 3)
    state = json.loads(ShardReader.elastic_states(states, 2)[0])
    state["ranges"] = ranges
    with pytest.raises(ValueError, match="ranges"):
        ShardReader(output, shard_options=ShardOptions(shard_index=0, shard_count=2), state=json.dumps(state).encode(), **SETTINGS)
