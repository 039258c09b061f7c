"""A shard's rows: sorted by order key, ties broken by identity, independent of arrival order."""

import numpy as np
import pyarrow as pa

from shardmill.transforms.lc0.loading import shuffle_schema
from shardmill.transforms.lc0.shards import shard_table

RECORD = 8


def batch(order_keys, chunks, positions):
    n = len(order_keys)
    frames = np.array([[c, p, 0, 0, 0, 0, 0, 0] for c, p in zip(chunks, positions)], dtype=np.uint8).reshape(n, RECORD)
    schema = shuffle_schema(RECORD)
    return pa.RecordBatch.from_arrays([
        pa.FixedSizeBinaryArray.from_buffers(schema.field("frame").type, n, [None, pa.py_buffer(frames)]),
        pa.array(["src"] * n),
        pa.array(chunks, pa.int32()),
        pa.array([0] * n, pa.int32()),
        pa.array(positions, pa.int32()),
        pa.array(order_keys, pa.uint64()),
    ], schema=schema)


def frames_of(table):
    return np.frombuffer(table["frame"].chunk(0).buffers()[1], np.uint8).reshape(-1, RECORD)


def test_rows_follow_the_order_key_and_frames_travel_with_their_row():
    table = shard_table([batch([30, 10], [3, 1], [0, 0]), batch([20, 5], [2, 9], [0, 0])], RECORD)
    assert table.column_names == ["frame", "source", "chunk", "use_count", "position"]
    assert table["chunk"].to_pylist() == [9, 1, 2, 3]
    assert frames_of(table)[:, 0].tolist() == [9, 1, 2, 3]


def test_equal_order_keys_are_ordered_by_identity_whatever_the_arrival_order():
    a = batch([7, 7, 1], [2, 1, 5], [4, 9, 0])
    b = batch([7], [1], [3])
    forward, backward = shard_table([a, b], RECORD), shard_table([b, a], RECORD)
    assert forward["chunk"].to_pylist() == [5, 1, 1, 2]
    assert forward["position"].to_pylist() == [0, 3, 9, 4]
    assert forward.equals(backward)
    assert frames_of(forward)[:, 1].tolist() == [0, 3, 9, 4]


def test_an_empty_shard_has_the_output_schema():
    assert shard_table([], RECORD).num_rows == 0
