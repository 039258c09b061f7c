"""The PyTorch adapter: DataLoader workers and ranks split every epoch; checkpoints resume exactly."""

import numpy as np
import pytest
import torch  # in the test extra

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
        dataset = ShardIterableDataset(output, 40, ["frame", "id"], rank=rank, world_size=2, seed=3)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
        batches = list(loader)
        assert all(isinstance(b["frame"], torch.Tensor) and b["frame"].dtype == torch.uint8 for b in batches)
        per_rank.append(ids_of(batches))
    union = np.concatenate(per_rank)
    assert len(np.unique(union)) == len(union) and 1333 - len(union) < 4
    assert len(per_rank[0]) == len(per_rank[1])


def test_state_dict_resumes_the_stream_exactly(output):
    dataset = ShardIterableDataset(output, 64, ["id"], seed=1, num_epochs=2)
    full = ids_of(list(dataset))
    dataset = ShardIterableDataset(output, 64, ["id"], seed=1, num_epochs=2)
    iterator = iter(dataset)
    head = [next(iterator) for _ in range(13)]
    state = dataset.state_dict()
    resumed = ShardIterableDataset(output, 64, ["id"], seed=1, num_epochs=2)
    resumed.load_state_dict(state)
    assert (np.concatenate([ids_of(head), ids_of(list(resumed))]) == full).all()
