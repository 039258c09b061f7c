"""The reader's local shard cache against a real S3 server, bytes counted by a proxy in front of it: a second
epoch fetches nothing, processes sharing a cache download each shard once, a damaged copy is fetched again,
the cache stays within its bound, and a full disk serves from the store instead."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from shardmill.native_ext import CacheOptions, OrderOptions, ReadOptions, ShardReader, load_manifest
from tests.datagen.shards import write_output
from tests.support.s3_server import CountingProxy

SHARD_ROWS = [600, 500, 400, 300]


@pytest.fixture(scope="module")
def cached_output(s3_server, tmp_path_factory):
    """(local copy, s3 URI, its manifest) of an output with frames wide enough that a shard's body dwarfs the
    footer reads every reader makes when it opens a dataset."""
    local = str(tmp_path_factory.mktemp("cache") / "out")
    write_output(local, SHARD_ROWS, row_group_rows=100, width=2048,
                 frames=lambda ids, width: np.random.default_rng(ids[0]).integers(0, 256, (len(ids), width),
                                                                                 dtype=np.uint8))
    s3_server.create_bucket("cache-tests")
    s3_server.upload(local, "cache-tests/out")
    return local, "s3://cache-tests/out", load_manifest(local)


@pytest.fixture()
def proxy(s3_server):
    counting = CountingProxy(s3_server)
    yield counting
    counting.close()


def shard_bytes(proxy, manifest):
    return {s["path"]: proxy.sent(s["path"]) for s in manifest["shards"]}


def read_epochs(path, epochs=2, cache=None, window_row_groups=2, prefetch_windows=2):
    """[(epoch, ids, sources)] per batch, and the reader's cache counts."""
    options = ReadOptions(prefetch_windows=prefetch_windows, cache=cache)
    with ShardReader(path, batch_size=128, columns=["id", "frame", "source"], num_epochs=epochs,
                     order_options=OrderOptions(seed=3, window_row_groups=window_row_groups),
                     read_options=options) as reader:
        batches = [(int(b["epoch"]), b["id"].copy(), b["source"].to_pylist()) for b in reader]
        return batches, reader.cache_stats()


def same(a, b):
    return len(a) == len(b) and all(x[0] == y[0] and np.array_equal(x[1], y[1]) and x[2] == y[2]
                                    for x, y in zip(a, b))


def test_a_second_epoch_is_served_from_the_cache_without_a_byte_from_the_store(cached_output, proxy, tmp_path):
    local, remote, manifest = cached_output
    cache = CacheOptions(str(tmp_path / "cache"), max_bytes=1 << 30)
    options = ReadOptions(cache=cache)
    with ShardReader(proxy.located(remote), batch_size=128, columns=["id", "frame", "source"], num_epochs=2,
                     order_options=OrderOptions(seed=3, window_row_groups=2), read_options=options) as reader:
        served = []
        for batch in reader:
            if int(batch["epoch"]) == 1 and not any(e == 1 for e, *_ in served):
                after_first_epoch = shard_bytes(proxy, manifest)
            served.append((int(batch["epoch"]), batch["id"].copy(), batch["source"].to_pylist()))
        stats = reader.cache_stats()
    assert same(served, read_epochs(local)[0])
    assert shard_bytes(proxy, manifest) == after_first_epoch  # epoch 1: nothing from the store
    for shard in manifest["shards"]:  # each body once, plus the footer reads of opening the dataset
        assert shard["bytes"] <= after_first_epoch[shard["path"]] < shard["bytes"] + 200_000
    assert stats["downloads"] == len(SHARD_ROWS) and stats["downloaded_bytes"] == sum(
        s["bytes"] for s in manifest["shards"])
    assert sorted(os.listdir(tmp_path / "cache")) == sorted(
        [s["sha256"] + ".parquet" for s in manifest["shards"]] + [s["sha256"] + ".lock" for s in manifest["shards"]])


READ_SHARED = """
import json, sys
from shardmill.native_ext import CacheOptions, OrderOptions, ReadOptions, ShardOptions, ShardReader
path, directory, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
with ShardReader(path, batch_size=64, columns=["id"], num_epochs=1, shard_options=ShardOptions(rank, 2),
                 order_options=OrderOptions(seed=5, window_row_groups=1),
                 read_options=ReadOptions(cache=CacheOptions(directory, max_bytes=1 << 30))) as reader:
    ids = [int(i) for b in reader for i in b["id"]]
    print(json.dumps({"ids": ids, "stats": reader.cache_stats()}))
"""


@pytest.mark.slow
def test_two_processes_sharing_a_cache_download_each_shard_once(cached_output, proxy, tmp_path):
    _, remote, manifest = cached_output
    directory = str(tmp_path / "shared")
    ranks = [subprocess.Popen([sys.executable, "-c", READ_SHARED, proxy.located(remote), directory, str(rank)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(2)]
    results = []
    for process in ranks:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        results.append(json.loads(out))
    ids = sorted(results[0]["ids"] + results[1]["ids"])
    assert ids == list(range(sum(SHARD_ROWS)))  # two ranks, disjoint, together the epoch
    # Each rank reads every shard (a rank's slice crosses them all with one-group windows), yet one
    # download each on the host: the other rank found it cached (or waited for it) and verified it.
    assert sum(r["stats"]["downloads"] for r in results) == len(SHARD_ROWS)
    assert sum(r["stats"]["verified"] for r in results) >= 1
    for shard in manifest["shards"]:
        assert shard["bytes"] <= proxy.sent(shard["path"]) < shard["bytes"] + 400_000


def test_a_damaged_cached_copy_is_detected_and_fetched_again(cached_output, proxy, tmp_path):
    local, remote, manifest = cached_output
    cache = CacheOptions(str(tmp_path / "cache"), max_bytes=1 << 30)
    expected = read_epochs(local, epochs=1)[0]
    assert same(read_epochs(proxy.located(remote), epochs=1, cache=cache)[0], expected)
    damaged = manifest["shards"][2]
    copy = tmp_path / "cache" / (damaged["sha256"] + ".parquet")
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0x01
    copy.write_bytes(bytes(data))
    before = shard_bytes(proxy, manifest)
    served, stats = read_epochs(proxy.located(remote), epochs=1, cache=cache)
    assert same(served, expected)
    assert stats["corrupt"] == 1 and stats["downloads"] == 1 and stats["verified"] == len(SHARD_ROWS) - 1
    after = shard_bytes(proxy, manifest)
    for shard in manifest["shards"]:
        fetched = after[shard["path"]] - before[shard["path"]]
        if shard is damaged:
            assert fetched >= shard["bytes"]
        else:
            assert fetched < 200_000  # footers only


def test_the_cache_stays_within_its_bound_evicting_the_least_recently_used(tmp_path):
    local = str(tmp_path / "out")
    write_output(local, [100] * 12, row_group_rows=100, width=512)
    manifest = load_manifest(local)
    # One-group windows, none decoded ahead, one fetched ahead: two shards held at a time; room for three.
    bound = 3 * max(s["bytes"] for s in manifest["shards"])
    cache = CacheOptions(str(tmp_path / "cache"), max_bytes=bound, ahead_windows=1)
    served, stats = read_epochs(local, epochs=2, cache=cache, window_row_groups=1, prefetch_windows=0)
    assert same(served, read_epochs(local, epochs=2, window_row_groups=1, prefetch_windows=0)[0])
    # Every shard fetched in each epoch but the (at most three) kept across the epoch boundary.
    # A copy kept over the epoch boundary may or may not be evicted before it is read again: timing decides.
    assert stats["evicted"] >= 12 - 3 and 2 * 12 - 3 <= stats["downloads"] <= 2 * 12 and stats["uncached"] == 0
    on_disk = sum(os.path.getsize(tmp_path / "cache" / n) for n in os.listdir(tmp_path / "cache")
                  if n.endswith(".parquet"))
    assert on_disk <= bound


@pytest.mark.slow
def test_a_full_cache_disk_serves_from_the_store_instead(cached_output, tmp_path):
    local, _, manifest = cached_output
    directory = tmp_path / "small"
    directory.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(directory)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        served, stats = read_epochs(local, epochs=1, cache=CacheOptions(str(directory), max_bytes=1 << 30))
        assert same(served, read_epochs(local, epochs=1)[0])
        assert stats["uncached"] >= 1 and not any(n.endswith(".part") for n in os.listdir(directory))
    finally:
        subprocess.run(["umount", str(directory)], check=True)  # busy if a reader still held a file there


def test_cache_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match="max_bytes must be an integer"):
        CacheOptions(str(tmp_path), max_bytes=0)
    with pytest.raises(ValueError, match="must be on local disk"):
        CacheOptions("s3://bucket/cache", max_bytes=1 << 20)
    with pytest.raises(TypeError, match="ReadOptions.cache must be a CacheOptions"):
        ReadOptions(cache=str(tmp_path))


READ_FOREVER = """
import sys
from shardmill.native_ext import CacheOptions, OrderOptions, ReadOptions, ShardReader
with ShardReader(sys.argv[1], batch_size=16, columns=["id"], num_epochs=None,
                 order_options=OrderOptions(seed=int(sys.argv[3]), window_row_groups=1),
                 read_options=ReadOptions(cache=CacheOptions(sys.argv[2], max_bytes=1 << 30))) as reader:
    for batch in reader:
        pass
"""


@pytest.mark.slow
def test_readers_killed_at_random_moments_leave_a_cache_the_next_reader_uses(cached_output, proxy, tmp_path):
    local, remote, manifest = cached_output
    directory = str(tmp_path / "cache")
    rng = np.random.default_rng(11)
    for seed in range(6):
        reader = subprocess.Popen([sys.executable, "-c", READ_FOREVER, proxy.located(remote), directory, str(seed)],
                                  stderr=subprocess.PIPE)
        try:
            reader.wait(timeout=float(rng.uniform(0.5, 3.0)))  # opening, downloading or reading from the cache
            pytest.fail(f"the reader ended by itself: {reader.stderr.read().decode()[-2000:]}")
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.wait()
    served, stats = read_epochs(proxy.located(remote), epochs=1, cache=CacheOptions(directory, max_bytes=1 << 30))
    assert same(served, read_epochs(local, epochs=1)[0])
    assert stats["downloads"] + stats["verified"] == len(SHARD_ROWS) and stats["corrupt"] == 0
    assert sorted(n for n in os.listdir(directory) if not n.endswith(".lock")) == sorted(
        s["sha256"] + ".parquet" for s in manifest["shards"])
