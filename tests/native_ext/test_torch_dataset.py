"""The PyTorch adapter: DataLoader workers and ranks split every epoch; checkpoints resume exactly."""

import os
import time

import numpy as np
import pytest
import torch  # in the test extra

from shardmill.native_ext import OrderOptions, ShardOptions
from shardmill.native_ext.torch_dataset import ShardIterableDataset
from tests.datagen.shards import write_output


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("torch_out"))
    write_output(directory, [500, 500, 333], row_group_rows=50, width=12)
    return directory


def ids_of(batches):
    return np.concatenate([b["id"].numpy() for b in batches])


def test_dataloader_workers_of_every_rank_split_the_epoch(output):
    per_rank = []
    for rank in range(2):
        dataset = ShardIterableDataset(output, 40, ["frame", "id"], rank=rank, world_size=2, order_options=OrderOptions(seed=3))
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
        batches = list(loader)
        assert all(isinstance(b["frame"], torch.Tensor) and b["frame"].dtype == torch.uint8 for b in batches)
        per_rank.append(ids_of(batches))
    union = np.concatenate(per_rank)
    assert len(np.unique(union)) == len(union) and 1333 - len(union) < 4
    assert len(per_rank[0]) == len(per_rank[1])


def test_state_dict_resumes_the_stream_exactly(output):
    dataset = ShardIterableDataset(output, 64, ["id"], order_options=OrderOptions(seed=1), num_epochs=2)
    full = ids_of(list(dataset))
    dataset = ShardIterableDataset(output, 64, ["id"], order_options=OrderOptions(seed=1), num_epochs=2)
    iterator = iter(dataset)
    head = [next(iterator) for _ in range(13)]
    state = dataset.state_dict()
    resumed = ShardIterableDataset(output, 64, ["id"], order_options=OrderOptions(seed=1), num_epochs=2)
    resumed.load_state_dict(state)
    assert (np.concatenate([ids_of(head), ids_of(list(resumed))]) == full).all()


@pytest.mark.parametrize("num_workers, rank, world_size, drop_remainder, num_epochs", [
    (0, 0, 1, False, 2), (0, 1, 3, True, 1), pytest.param(2, 1, 2, False, 1, marks=pytest.mark.slow)])
def test_len_is_the_number_of_batches_a_pass_serves(output, num_workers, rank, world_size, drop_remainder,
                                                    num_epochs):
    dataset = ShardIterableDataset(output, 40, ["id"], rank=rank, world_size=world_size, num_epochs=num_epochs,
                                   drop_remainder=drop_remainder, loader_workers=num_workers)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=num_workers)
    assert len(loader) == len(dataset) == len(list(loader))


def test_len_needs_the_loaders_worker_count_and_a_bounded_pass(output):
    with pytest.raises(TypeError, match="loader_workers"):
        len(ShardIterableDataset(output, 40, ["id"]))
    with pytest.raises(TypeError, match="num_epochs=None"):
        len(ShardIterableDataset(output, 40, ["id"], num_epochs=None, loader_workers=0))
    declared = ShardIterableDataset(output, 40, ["id"], loader_workers=2)
    with pytest.raises(ValueError, match="num_workers=0, the dataset was given loader_workers=2"):
        next(iter(declared))


def reader_epoch(output, epoch, shard_index=0, shard_count=1, **kwargs):
    """Epoch `epoch` of the order for this shard, as ShardReader serves it."""
    from shardmill.native_ext import ShardReader

    with ShardReader(output, 40, ["id"], shard_options=ShardOptions(shard_index=shard_index, shard_count=shard_count), order_options=OrderOptions(seed=3),
                     start_epoch=epoch, num_epochs=epoch + 1, **kwargs) as reader:
        return np.concatenate([b["id"] for b in reader])


def by_worker(batches, workers):
    """A DataLoader interleaves its workers' batches round-robin; split them back per worker."""
    return [ids_of(batches[w::workers]) for w in range(workers)]


@pytest.mark.slow
@pytest.mark.parametrize("num_workers, persistent", [(0, False), (2, False), (2, True)])
def test_every_pass_over_the_loader_is_the_next_epoch(output, num_workers, persistent):
    dataset = ShardIterableDataset(output, 40, ["id"], order_options=OrderOptions(seed=3))
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=num_workers,
                                         persistent_workers=persistent)
    for epoch in range(3):
        batches = list(loader)
        assert {int(b["epoch"]) for b in batches} == {epoch}
        workers = max(num_workers, 1)
        for worker, ids in enumerate(by_worker(batches, workers)):
            assert (ids == reader_epoch(output, epoch, worker, workers)).all()


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_set_epoch_selects_that_epoch_exactly(output, num_workers):
    dataset = ShardIterableDataset(output, 40, ["id"], order_options=OrderOptions(seed=3))
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=num_workers)
    for epoch in (5, 2, 2):
        dataset.set_epoch(epoch)
        batches = list(loader)
        workers = max(num_workers, 1)
        for worker, ids in enumerate(by_worker(batches, workers)):
            assert (ids == reader_epoch(output, epoch, worker, workers)).all()


def test_a_main_process_state_dict_while_workers_hold_the_readers_raises(output):
    dataset = ShardIterableDataset(output, 40, ["id"], order_options=OrderOptions(seed=3))
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    iterator = iter(loader)
    next(iterator)
    with pytest.raises(RuntimeError, match="StatefulDataLoader"):
        dataset.state_dict()
    del iterator
    assert dataset.state_dict() == {"reader_state": None, "pass_epoch": 0}  # between passes: a clean state


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_exactly_and_then_serves_the_next_epoch(output, num_workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader():
        dataset = ShardIterableDataset(output, 40, ["id"], order_options=OrderOptions(seed=3), num_epochs=1)
        return StatefulDataLoader(dataset, batch_size=None, num_workers=num_workers)

    reference = loader()
    uninterrupted = [ids_of(list(reference)), ids_of(list(reference))]  # epochs 0 and 1

    first = loader()
    iterator = iter(first)
    head = [next(iterator) for _ in range(7)]
    state = first.state_dict()
    del iterator, first

    resumed = loader()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert (np.concatenate([ids_of(head), ids_of(rest)]) == uninterrupted[0]).all()
    assert {int(b["epoch"]) for b in rest} == {0}
    next_pass = list(resumed)
    assert (ids_of(next_pass) == uninterrupted[1]).all() and {int(b["epoch"]) for b in next_pass} == {1}


class WorkerOneWaitsForWorkerZero(ShardIterableDataset):
    """Worker 1 starts its pass only once worker 0 has served a batch (a file in `gate` says so), in every loader
    made from it: the interleaving in which a state is taken, or a pass resumed, while worker 1 has produced
    nothing."""

    def __init__(self, *args, gate: str, **kwargs):
        super().__init__(*args, **kwargs)
        self._gate = gate

    def __iter__(self):
        worker = torch.utils.data.get_worker_info().id
        if worker == 1:
            deadline = time.monotonic() + 60
            while not os.path.exists(self._gate):
                assert time.monotonic() < deadline, "worker 0 served nothing for 60 s"
                time.sleep(0.01)
        for batch in super().__iter__():
            if worker == 0 and not os.path.exists(self._gate):
                with open(self._gate, "w"):
                    pass
            yield batch


@pytest.mark.slow
def test_a_state_taken_before_worker_1_served_anything_resumes_worker_1_in_the_same_epoch(output, tmp_path):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader(gate):
        dataset = WorkerOneWaitsForWorkerZero(output, 40, ["id"], order_options=OrderOptions(seed=3), num_epochs=1,
                                              gate=str(tmp_path / gate))
        return StatefulDataLoader(dataset, batch_size=None, num_workers=2)

    first = loader("first")
    iterator = iter(first)
    head = next(iterator)
    state = first.state_dict()  # worker 1 has served nothing: its state is the one it started the pass with
    del iterator, first

    resumed = loader("resumed")  # worker 0 resumes mid-pass and starts before worker 1 does
    resumed.load_state_dict(state)
    rest = list(resumed)
    workers = [reader_epoch(output, 0, worker, 2) for worker in range(2)]
    assert {int(b["epoch"]) for b in rest} == {0}
    served = by_worker([head] + rest, 2)  # round robin from worker 0, as the uninterrupted pass
    assert all((served[w] == workers[w]).all() for w in range(2))
    next_pass = list(resumed)
    assert {int(b["epoch"]) for b in next_pass} == {1}
    assert all((ids == reader_epoch(output, 1, w, 2)).all() for w, ids in enumerate(by_worker(next_pass, 2)))
