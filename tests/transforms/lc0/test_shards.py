"""A shard's rows: sorted by order key, ties broken by identity, independent of arrival order."""

import numpy as np
import pyarrow as pa
import pytest

from shardmill.core import kernels
from shardmill.transforms.lc0.loading import SHUFFLE_SCHEMA
from shardmill.transforms.lc0.shards import shard_table

RECORD = 8


def batch(order_keys, chunks, positions):
    n = len(order_keys)
    frames = np.array([[c, p, 0, 0, 0, 0, 0, 0] for c, p in zip(chunks, positions)], dtype=np.uint8).reshape(n, RECORD)
    offsets, packed = kernels.pack_records(frames, np.arange(n))
    return pa.RecordBatch.from_arrays([
        pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(packed)]),
        pa.array(["src"] * n),
        pa.array(chunks, pa.int32()),
        pa.array([0] * n, pa.int32()),
        pa.array(positions, pa.int32()),
        pa.array(order_keys, pa.uint64()),
    ], schema=SHUFFLE_SCHEMA)


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


def test_sliced_and_ipc_round_tripped_batches_unpack_to_the_same_shard():
    whole = batch([4, 3, 2, 1], [1, 2, 3, 4], [5, 6, 7, 8])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, SHUFFLE_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_batch(whole.slice(1, 3))
    read_back = pa.ipc.open_file(sink.getvalue()).get_batch(0)
    expected = shard_table([whole.slice(0, 1), whole.slice(1, 3)], RECORD)
    assert shard_table([whole.slice(0, 1), read_back], RECORD).equals(expected)
    assert frames_of(expected)[:, 0].tolist() == [4, 3, 2, 1]


def test_a_packed_record_that_disagrees_with_its_bitmap_fails_naming_it():
    good = batch([1, 2], [1, 2], [0, 0])
    column = good.column("packed_frame")
    data = bytearray(column.buffers()[2].to_pybytes())
    data[0] ^= 1  # record 0's first bit: its size no longer agrees with its bitmap
    bad = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 2, [None, column.buffers()[1], pa.py_buffer(bytes(data))])
    with pytest.raises(kernels.NativeError, match="packed record 0 has"):
        shard_table([good.set_column(0, "packed_frame", bad)], RECORD)
