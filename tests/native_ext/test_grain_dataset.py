"""Grain adapters: the reader's stream as an IterDataset with exact get_state/set_state, and a
RandomAccessDataSource for Grain's own samplers; JAX-style multi-host sharding simulated in one process."""

import concurrent.futures
import json
import os
import pickle
import warnings

import numpy as np
import pytest

grain = pytest.importorskip("grain")

from shardmill.native_ext import ShardReader  # noqa: E402
from shardmill.native_ext import CacheOptions, OrderOptions, ReadOptions, RemoteOptions, ShardOptions, load_manifest
from shardmill.native_ext.grain_dataset import ShardDataSource, ShardIterDataset  # noqa: E402
from tests.datagen.shards import write_output  # noqa: E402
from tests.support.reader_args import reader_args


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("grain_out"))
    write_output(directory, [500, 420, 333], row_group_rows=47, width=12)
    return directory


def ids(batches):
    return np.concatenate([b["id"] for b in batches]).tolist()


def test_the_iter_dataset_is_the_readers_stream(output):
    kwargs = dict(seed=4, num_epochs=2)
    with ShardReader(output, 32, ["id"], **reader_args(**kwargs)) as reader:
        expected = ids(list(reader))
    assert ids(list(ShardIterDataset(output, 32, ["id"], **reader_args(**kwargs)))) == expected
    doubled = ShardIterDataset(output, 32, ["id"], **reader_args(**kwargs)).map(lambda b: {"id": b["id"] * 2})
    assert ids(list(doubled)) == [2 * i for i in expected]


def test_get_state_and_set_state_resume_exactly_even_through_json(output):
    dataset = ShardIterDataset(output, 32, ["id"], order_options=OrderOptions(seed=4), num_epochs=2)
    full = ids(list(dataset))
    iterator = iter(dataset)
    head = [next(iterator) for _ in range(23)]
    state = json.loads(json.dumps(iterator.get_state()))
    fresh = iter(dataset)
    fresh.set_state(state)
    assert ids(head) + ids(list(fresh)) == full
    with pytest.raises(ValueError):
        iter(dataset).set_state({"reader_state": "{}"})


def test_the_data_source_serves_every_record_by_its_index(output):
    source = ShardDataSource(output, ["id", "frame"], cached_row_groups=2)
    assert len(source) == 1253
    with ShardReader(output, 2000, ["id", "frame"], order_options=OrderOptions(shuffle=False)) as reader:
        rows = next(reader)
    for i in (0, 46, 47, 499, 500, 919, 920, 1252):
        record = source[i]
        assert record["id"] == rows["id"][i] and (record["frame"] == rows["frame"][i]).all()
    with pytest.raises(IndexError):
        source[1253]


@pytest.mark.slow
def test_the_data_source_is_picklable_and_thread_safe(output):
    source = pickle.loads(pickle.dumps(ShardDataSource(output, ["id"], cached_row_groups=3)))
    keys = np.random.default_rng(0).integers(0, len(source), 4000)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda k: int(source[k]["id"]), keys))
    with ShardReader(output, 2000, ["id"], order_options=OrderOptions(shuffle=False)) as reader:
        all_ids = next(reader)["id"]
    assert got == all_ids[keys].tolist()


@pytest.mark.slow
def test_grains_map_dataset_and_index_sampler_run_over_the_source(output):
    source = ShardDataSource(output, ["id"])
    shuffled = grain.MapDataset.source(source).shuffle(seed=7).map(lambda r: int(r["id"]))
    served = [shuffled[i] for i in range(len(shuffled))]
    assert sorted(served) == list(range(1253)) and served != sorted(served)
    sampler = grain.samplers.IndexSampler(len(source), shuffle=True, seed=3, num_epochs=1)
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=0)
    assert sorted(int(r["id"]) for r in loader) == list(range(1253))


@pytest.mark.parametrize("hosts", [2, 3])
def test_simulated_jax_hosts_read_disjoint_equal_slices(output, hosts):
    """What each of `hosts` JAX processes runs (process_index, process_count), in one test."""
    per_host = []
    for process_index in range(hosts):
        dataset = ShardIterDataset(output, 64, ["id"], order_options=OrderOptions(seed=9), shard_options=ShardOptions(shard_index=process_index, shard_count=hosts))
        per_host.append(ids(list(dataset)))
    union = [i for host in per_host for i in host]
    assert len(union) == len(set(union)) and 1253 - len(union) < hosts
    assert len({len(host) for host in per_host}) == 1
    # And with Grain owning the order: its IndexSampler's sharding over the source.
    source = ShardDataSource(output, ["id"])
    served = []
    for process_index in range(hosts):
        sampler = grain.samplers.IndexSampler(
            len(source), shard_options=grain.sharding.ShardOptions(process_index, hosts, drop_remainder=True),
            shuffle=True, seed=2, num_epochs=1)
        served += [int(r["id"]) for r in grain.DataLoader(data_source=source, sampler=sampler, worker_count=0)]
    assert len(served) == len(set(served)) and 1253 - len(served) < hosts


def every_record(source):
    return [(int(r["id"]), bytes(r["frame"])) for r in (source[i] for i in range(len(source)))]


def test_the_data_source_reads_through_the_shard_cache_of_its_read_options(output, tmp_path):
    cache = CacheOptions(str(tmp_path / "cache"), max_bytes=1 << 30)
    source = ShardDataSource(output, ["id", "frame"], cached_row_groups=2, read_options=ReadOptions(cache=cache))
    assert every_record(source) == every_record(ShardDataSource(output, ["id", "frame"]))
    shards = load_manifest(output)["shards"]
    assert sorted(os.listdir(tmp_path / "cache")) == sorted(
        [s["sha256"] + ".parquet" for s in shards] + [s["sha256"] + ".lock" for s in shards])
    assert source.cache_stats()["downloads"] == len(shards)
    # Another process's source (a pickled copy, as Grain's workers get it) finds the copies cached.
    copy = pickle.loads(pickle.dumps(source))
    assert every_record(copy)[:3] == every_record(source)[:3]
    assert copy.cache_stats()["downloads"] == 0 and copy.cache_stats()["verified"] >= 1
    assert ShardDataSource(output, ["id"]).cache_stats() is None


def test_a_remote_data_source_fetches_each_shard_once_into_its_cache(output, s3_server, tmp_path):
    from tests.support.s3_server import CountingProxy

    s3_server.create_bucket("grain-cache")
    s3_server.upload(output, "grain-cache/out")
    proxy = CountingProxy(s3_server)
    try:
        cache = CacheOptions(str(tmp_path / "cache"), max_bytes=1 << 30)
        source = ShardDataSource(proxy.located("s3://grain-cache/out"), ["id", "frame"],
                                 read_options=ReadOptions(cache=cache))
        first = every_record(source)
        sent = {s["path"]: proxy.sent(s["path"]) for s in load_manifest(output)["shards"]}
        assert every_record(source) == first == every_record(ShardDataSource(output, ["id", "frame"]))
        assert {s["path"]: proxy.sent(s["path"]) for s in load_manifest(output)["shards"]} == sent
        assert source.cache_stats()["downloaded_bytes"] == sum(s["bytes"] for s in load_manifest(output)["shards"])
    finally:
        proxy.close()


def test_the_data_sources_remote_argument_still_works_with_a_deprecation_warning(output):
    with pytest.warns(DeprecationWarning, match="read_options=ReadOptions"):
        source = ShardDataSource(output, ["id"], remote=RemoteOptions(max_attempts=2))
    assert int(source[5]["id"]) == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ShardDataSource(output, ["id"], read_options=ReadOptions(remote=RemoteOptions(max_attempts=2)))
    with pytest.raises(ValueError, match="give remote bounds once"), pytest.warns(DeprecationWarning):
        ShardDataSource(output, ["id"], remote=RemoteOptions(max_attempts=2),
                        read_options=ReadOptions(remote=RemoteOptions(max_attempts=5)))
    with pytest.raises(TypeError, match="read_options must be a ReadOptions"):
        ShardDataSource(output, ["id"], read_options={"remote": None})
