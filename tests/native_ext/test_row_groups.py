"""row_groups.RowGroups, the one row-group cache of the Arrow-served columns and Grain's source: records found by
their index, the row groups asked for kept whatever the cache's size, least recently used dropped first."""

import gc
import pickle
import threading

import numpy as np
import pytest

from shardmill.native_ext import load_manifest
from shardmill.native_ext.dataset import open_dataset
from shardmill.native_ext.row_groups import RowGroups
from tests.datagen.shards import write_output


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("row_groups"))
    write_output(directory, [100, 70], row_group_rows=30, width=4)  # row groups: 30 30 30 10 | 30 30 10
    return directory


def row_groups(output, capacity, **kwargs):
    dataset = open_dataset(output, columns=["id"])
    return RowGroups(dataset.shard_paths, [s["row_groups"] for s in load_manifest(output)["shards"]], ["id"],
                     capacity, **kwargs)


def test_records_are_found_in_their_row_group_across_shards(output):
    groups = row_groups(output, 2)
    assert groups.num_rows == 170
    assert groups.group_of(np.array([0, 29, 30, 99, 100, 169])).tolist() == [0, 0, 1, 3, 4, 6]
    [table] = groups.fetch([4])
    assert table.column("id").to_pylist() == list(range(100, 130))


def test_the_row_groups_asked_for_stay_cached_beyond_its_size_the_least_recent_go_first(output):
    groups = row_groups(output, 2)
    assert [t.num_rows for t in groups.fetch([0, 3, 6])] == [30, 10, 10]
    assert [g for g, _ in groups.cached()] == [0, 3, 6]  # one batch's row groups are never dropped
    groups.fetch([1])
    assert [g for g, _ in groups.cached()] == [6, 1]
    groups.fetch([6])
    groups.fetch([2])
    assert [g for g, _ in groups.cached()] == [6, 2]


def ids_of(table):
    return table.column("id").to_pylist()


def test_a_decoded_row_group_is_what_decode_makes_of_it_and_the_groups_pickle_without_their_cache(output):
    groups = row_groups(output, 4, decode=ids_of)
    assert groups.fetch([5]) == [list(range(130, 160))]
    copy = pickle.loads(pickle.dumps(groups))
    assert copy.cached() == [] and copy.fetch([6]) == [list(range(160, 170))]
    groups.close()
    assert groups.cached() == []


def test_a_threads_open_shards_go_with_the_thread_and_close_closes_the_others(output):
    groups = row_groups(output, 1)
    worker = threading.Thread(target=groups.fetch, args=([4],))
    worker.start()
    worker.join()
    del worker
    gc.collect()
    groups.fetch([0])
    assert len(groups._open) == 1  # this thread's; the ended thread's files were released with it
    groups.close()
    assert [len(files) for files in groups._open.values()] == [0]


def test_a_forked_worker_reads_afresh_even_if_the_parent_held_the_cache_lock_at_the_fork(output):
    """A DataLoader worker forked while another thread of the parent held the cache's lock: it must neither
    wait for that thread (which does not exist in the child) nor read through the parent's open files."""
    import multiprocessing

    groups = row_groups(output, 2, decode=ids_of)
    groups.fetch([0])  # the parent has opened a shard and cached a row group
    context = multiprocessing.get_context("fork")
    results = context.Queue()

    def child():
        results.put(groups.fetch([4, 0]))

    with groups._lock:  # as a parent thread in the middle of a fetch when the worker is forked
        worker = context.Process(target=child)
        worker.start()
    worker.join(30)
    alive = worker.is_alive()
    if alive:
        worker.kill()
    assert not alive, "the forked worker waited for a lock held by a thread it does not have"
    assert results.get(timeout=5) == [list(range(100, 130)), list(range(0, 30))]
