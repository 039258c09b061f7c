"""checkpoint.py: a reader's state names its fields as states always have (a state of an earlier release
resumes), and a state of other settings is refused naming them."""

import json

import pytest

from shardmill.native_ext import OrderOptions, ShardReader
from shardmill.native_ext.checkpoint import STATE_VERSION, ReaderSettings, encode_state, resume_point
from tests.datagen.shards import write_output

# The fields of a state, in their order: the format checkpoints were written in (and are read in).
STATE_FIELDS = ["v", "dataset", "batch_size", "columns", "shard_index", "shard_count", "num_epochs", "seed",
                "shuffle", "window_row_groups", "drop_remainder", "rows", "generation", "epoch", "position"]


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("checkpoint"))
    write_output(directory, [100, 90], row_group_rows=20, width=4)
    return directory


def test_a_state_names_its_fields_as_states_always_have(output):
    with ShardReader(output, 16, ["id"], num_epochs=2, order_options=OrderOptions(seed=3)) as reader:
        next(reader)
        state = json.loads(reader.state())
    assert list(state) == STATE_FIELDS
    assert state["v"] == STATE_VERSION and state["rows"] == 190 and (state["epoch"], state["position"]) == (0, 16)
    assert [f for f in ReaderSettings.__dataclass_fields__] == STATE_FIELDS[1:11]


def test_a_hand_written_state_of_the_same_settings_resumes_there(output):
    with ShardReader(output, 16, ["id"], num_epochs=2, order_options=OrderOptions(seed=3, shuffle=False)) as reader:
        taken = json.loads(reader.state())
    written = {"v": 2, "dataset": taken["dataset"], "batch_size": 16, "columns": ["id"], "shard_index": 0,
               "shard_count": 1, "num_epochs": 2, "seed": 3, "shuffle": False, "window_row_groups": 8,
               "drop_remainder": False, "rows": 190, "generation": taken["generation"], "epoch": 1, "position": 32}
    with ShardReader(output, 16, ["id"], num_epochs=2, order_options=OrderOptions(seed=3, shuffle=False),
                     state=json.dumps(written).encode()) as reader:
        batch = next(reader)
    assert int(batch["epoch"]) == 1 and batch["record_index"].tolist() == list(range(32, 48))


def test_a_state_of_other_settings_is_refused_naming_them():
    settings = ReaderSettings(dataset="d", batch_size=16, columns=["id"], shard_index=0, shard_count=1,
                              num_epochs=2, seed=3, shuffle=True, window_row_groups=8, drop_remainder=False)
    other = ReaderSettings(**{**settings.fields(), "seed": 4, "batch_size": 8})
    with pytest.raises(ValueError, match="other settings: batch_size, seed"):
        resume_point(encode_state(other, 190, 0, 0, 0), settings, 190)
    assert resume_point(encode_state(settings, 190, 0, 1, 5), settings, 190) == (1, 5, None)
