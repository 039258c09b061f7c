"""The index cache: entries round-trip and are checked before use; a rerun reads unchanged sources from it and
writes the bytes of a run without it, whatever was added, changed or deleted; damaged entries are rebuilt;
runs sharing a cache at once; old entries pruned."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from shardmill.transforms.common.dead_letter import DeadLetter
from shardmill.transforms.lc0.index import index_source
from shardmill.transforms.lc0.index_cache import (ENTRY_SUFFIX, IndexCache, RejectedEntry, decode_entry, encode_entry,
                                                  max_rows_bytes)
from tests.datagen.lc0 import gzip_bytes, make_game_records, write_tar
from tests.pipelines.test_run_job import file_digests, job_config, run
from tests.support.cli import run_shardmill, shardmill_command


def sampled(cache: str) -> str:
    return ("lc0 { chunk_pool { passes: 2 position_count: 4 hanse_sampling_threshold: 100 } "
            f'index {{ cache: "{cache}" }} }}\noutput {{ num_shards: 2 }}')


def entries(location):
    return sorted(os.path.join(root, name) for root, _, names in os.walk(location) for name in names
                  if name.endswith(ENTRY_SUFFIX))


@pytest.fixture()
def corpus(lc0_dataset, tmp_path):
    """A copy of the mixed lc0 dataset this test may change."""
    directory = str(tmp_path / "corpus")
    shutil.copytree(lc0_dataset[0], directory)
    return directory


def archives(corpus):
    return sorted(n for n in os.listdir(corpus) if n.endswith(".tar"))


def new_archive(path, seed, games=3):
    write_tar(path, [(f"games/training.{seed}{i}.gz", gzip_bytes(make_game_records(seed * 100 + i, 20 + i).tobytes()))
                     for i in range(games)])


def cache_for(location, **kwargs):
    return IndexCache(str(location), "scan", 0, 64 << 20, **kwargs)


def test_an_entry_round_trips_the_index_of_its_source(corpus, tmp_path):
    cache = cache_for(tmp_path / "cache")
    for name in sorted(os.listdir(corpus)):
        path = os.path.join(corpus, name)
        index = index_source(path, os.path.getsize(path), "scan")
        key = cache.key(path, cache.source_stamp(path, os.path.getsize(path)))
        assert cache.lookup(key) is None
        cache.store(key, index)
        cached = cache.lookup(key)
        assert cached.table.equals(index.table)
        assert cached.dead_letters == index.dead_letters and cached.skipped_members == index.skipped_members


def test_a_damaged_foreign_or_misplaced_entry_is_rejected_saying_why(corpus, tmp_path):
    cache = cache_for(tmp_path / "cache")
    tar, loose = sorted(os.path.join(corpus, n) for n in os.listdir(corpus) if n.endswith((".tar", "1.gz")))[:2]
    keys = {p: cache.key(p, cache.source_stamp(p, os.path.getsize(p))) for p in (tar, loose)}
    data = encode_entry(keys[tar], index_source(tar, os.path.getsize(tar), "scan"))
    flipped = bytearray(data)
    flipped[-40] ^= 1
    cases = {
        "rows are damaged": bytes(flipped),
        "not an index cache entry": b"PAR1" + data[4:],
        "no header": data[:len(data.split(b"\n")[0]) + 1] + b"{",
        "another source": data,  # asked for under the other source's key
    }
    for why, bad in cases.items():
        with pytest.raises(RejectedEntry, match=why):
            decode_entry(bad, keys[loose] if why == "another source" else keys[tar])
    # Rows of one source under a header claiming another: refused by the rows themselves.
    header_end = data.index(b"\n", data.index(b"\n") + 1)
    header = json.loads(data[data.index(b"\n") + 1:header_end])
    header["key"] = keys[loose]
    forged = data[:data.index(b"\n") + 1] + json.dumps(header, sort_keys=True).encode() + data[header_end:]
    with pytest.raises(RejectedEntry, match="name another source"):
        decode_entry(forged, keys[loose])


def test_storing_a_changed_source_removes_its_old_entry_and_age_prunes_the_rest(corpus, tmp_path):
    cache = cache_for(tmp_path / "cache", max_age_days=30)
    paths = sorted(os.path.join(corpus, n) for n in os.listdir(corpus))
    for path in paths:
        cache.store(cache.key(path, cache.source_stamp(path, 0)), index_source(path, os.path.getsize(path), "scan"))
    assert len(entries(tmp_path / "cache")) == len(paths)
    changed = paths[-1]
    with open(changed, "ab") as f:
        f.write(b"\0")
    cache.store(cache.key(changed, cache.source_stamp(changed, 0)),
                index_source(changed, os.path.getsize(changed), "scan"))
    assert len(entries(tmp_path / "cache")) == len(paths)  # the old entry went
    old = entries(tmp_path / "cache")[:3]
    for entry in old:
        os.utime(entry, (time.time() - 31 * 86400,) * 2)
    assert cache.prune() == 3
    assert len(entries(tmp_path / "cache")) == len(paths) - 3


def output_bytes(out):
    """Every file's digest, the manifest's without its config (which names the cache) and timings."""
    digests = file_digests(out)
    for name in [n for n in digests if n.endswith("manifest.json")]:  # the output's, and its generation's copy
        with open(os.path.join(out, name)) as f:
            manifest = json.load(f)
        del manifest["config"], manifest["stats"]["timings"]
        digests[name] = json.dumps(manifest, sort_keys=True)
    return digests


def index_cache_timings(out):
    with open(os.path.join(out, ".manifest.json")) as f:
        return json.load(f)["stats"]["timings"]["index_cache"]


def cached_run(corpus, out, cache):
    return run(job_config(corpus, sampled(cache)), out)


@pytest.mark.slow
def test_reruns_through_the_cache_write_the_bytes_of_runs_without_it(corpus, tmp_path):
    cache = tmp_path / "cache"
    cached_run(corpus, tmp_path / "first", cache)
    tars = len(archives(corpus))
    assert index_cache_timings(tmp_path / "first")["sources_read"] == 0
    cached_run(corpus, tmp_path / "again", cache)
    # Archives come from the cache; loose games are indexed (as cheap as reading an entry back).
    assert index_cache_timings(tmp_path / "again") == {"location": str(cache), "sources_read": tars,
                                                       "rejected": 0, "pruned": 0}
    run(job_config(corpus, sampled("none")), tmp_path / "uncached")
    assert output_bytes(tmp_path / "again") == output_bytes(tmp_path / "first") == output_bytes(
        tmp_path / "uncached")

    # The corpus grows by an archive, one archive is rewritten, one goes: only new or changed ones are indexed.
    kept, rewritten, deleted = archives(corpus)
    new_archive(os.path.join(corpus, "training-run1-20261102-0000.tar"), seed=5)
    new_archive(os.path.join(corpus, rewritten), seed=6)
    os.remove(os.path.join(corpus, deleted))
    with open(os.path.join(corpus, "training.99999.gz"), "wb") as f:
        f.write(gzip_bytes(make_game_records(99999, 40).tobytes()))
    cached_run(corpus, tmp_path / "grown", cache)
    assert index_cache_timings(tmp_path / "grown")["sources_read"] == 1  # the one archive neither new nor changed
    run(job_config(corpus, sampled("none")), tmp_path / "grown-uncached")
    assert output_bytes(tmp_path / "grown") == output_bytes(tmp_path / "grown-uncached")
    # One entry per archive indexed, the rewritten one's old entry gone (the deleted archive's ages out).
    assert len(entries(cache)) == tars + 1


@pytest.mark.slow
def test_a_damaged_entry_is_ignored_with_a_warning_and_rebuilt(corpus, tmp_path, caplog):
    cache = tmp_path / "cache"
    cached_run(corpus, tmp_path / "first", cache)
    damaged = entries(cache)[0]
    data = bytearray(open(damaged, "rb").read())
    data[-30] ^= 0xFF
    open(damaged, "wb").write(bytes(data))
    cached_run(corpus, tmp_path / "second", cache)
    timings = index_cache_timings(tmp_path / "second")
    assert timings["rejected"] == 1 and timings["sources_read"] == len(archives(corpus)) - 1
    assert any("SHA-256 differs" in r.getMessage() and damaged in r.getMessage() for r in caplog.records)
    assert output_bytes(tmp_path / "second") == output_bytes(tmp_path / "first")
    cached_run(corpus, tmp_path / "third", cache)
    assert index_cache_timings(tmp_path / "third")["rejected"] == 0  # rewritten


@pytest.mark.slow
def test_runs_sharing_one_cache_at_once_agree_and_leave_it_whole(corpus, tmp_path):
    cache = str(tmp_path / "cache")
    count = shardmill_command("count", corpus, "--index-cache", cache, "--json")
    runs = [subprocess.Popen(count, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    summaries = []
    for process in runs:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        summary = json.loads(out)["summary"]
        summaries.append({k: v for k, v in summary.items() if k not in ("sources_cached", "cache_pruned")})
    assert summaries[0] == summaries[1] == summaries[2]
    final = subprocess.run(count, capture_output=True, text=True, timeout=300, check=True)
    summary = json.loads(final.stdout)["summary"]
    assert summary["sources_cached"] == len(archives(corpus)) and summary["cache_rejected"] == 0
    assert len(entries(cache)) == len(archives(corpus))


@pytest.mark.slow
def test_the_count_cli_reads_what_run_indexed(corpus, tmp_path, capsys):
    from shardmill.pipelines import cli

    cache = str(tmp_path / "cache")
    assert cli.main(["count", corpus, "--index-cache", cache]) == 0
    assert f"index cache {cache}: 0 of" in capsys.readouterr().out
    assert cli.main(["count", corpus, "--index-cache", cache]) == 0
    sources = len(os.listdir(corpus))
    assert f"index cache {cache}: {len(archives(corpus))} of {sources} sources read from it" in capsys.readouterr().out
    assert cli.main(["count", corpus, "--index-cache", "none"]) == 0
    assert "index cache" not in capsys.readouterr().out


@pytest.mark.slow
def test_a_cache_that_cannot_be_written_costs_a_warning_not_the_run(corpus, tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a directory")
    cached_run(corpus, tmp_path / "blocked", blocker / "cache")
    run(job_config(corpus, sampled("none")), tmp_path / "uncached")
    assert output_bytes(tmp_path / "blocked") == output_bytes(tmp_path / "uncached")
    assert index_cache_timings(tmp_path / "blocked")["sources_read"] == 0
    assert any("cannot store the entry" in r.getMessage() for r in caplog.records)


def limited(max_bytes=3 << 30):
    """preexec_fn: the child's address space bounded, so reading without bound fails fast instead of taking the
    machine."""
    import resource

    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    return apply


def count_through(corpus, cache, timeout=120):
    """`shardmill count` over the corpus with the cache, in a bounded subprocess: (summary, stderr)."""
    done = run_shardmill("count", corpus, "--index-cache", cache, "--json", timeout=timeout,
                         memory_limit_bytes=3 << 30)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["summary"], done.stderr


def claim_rows(entry, rows_bytes):
    """Rewrites the entry's header to claim rows_bytes of rows, then extends the file (sparse) to match: an entry
    consistent in every way but its rows' SHA-256."""
    data = open(entry, "rb").read()
    start = data.index(b"\n") + 1
    end = data.index(b"\n", start)
    header = json.loads(data[start:end])
    header["rows_bytes"] = rows_bytes
    head = data[:start] + json.dumps(header).encode() + b"\n"
    with open(entry, "wb") as f:
        f.write(head + data[end + 1:])
    os.truncate(entry, len(head) + rows_bytes)


@pytest.fixture(scope="module")
def counted_corpus(lc0_dataset, tmp_path_factory):
    """A corpus no test here changes, its index cache filled by one count, and that count's summary: each odd
    entry case starts from a copy of the cache rather than counting again."""
    directory = tmp_path_factory.mktemp("counted")
    corpus = str(directory / "corpus")
    shutil.copytree(lc0_dataset[0], corpus)
    summary, _ = count_through(corpus, directory / "cache")
    return corpus, directory / "cache", summary


@pytest.mark.slow
@pytest.mark.parametrize("odd_entry, why", [
    ("fifo", "not a regular file (a FIFO)"),
    ("directory", "not a regular file (a directory)"),
    ("link to /dev/zero", "a symbolic link, which the cache never writes"),
    ("larger than recorded", "bytes where its header records"),
    ("claiming 2 GiB of rows", "bytes of rows, more than the"),
    ("claiming 6 GiB of rows", "bytes of rows, more than the"),
])
def test_an_odd_entry_neither_hangs_nor_is_read_without_bound_but_is_rebuilt(counted_corpus, tmp_path, odd_entry,
                                                                              why):
    corpus, filled_cache, first = counted_corpus
    cache = tmp_path / "cache"
    shutil.copytree(filled_cache, cache)
    entry = entries(cache)[0]
    if odd_entry == "fifo":
        os.remove(entry)
        os.mkfifo(entry)  # opening it to read would wait for a writer forever
    elif odd_entry == "directory":
        os.remove(entry)
        os.mkdir(entry)  # cannot be read, and an entry cannot be renamed over it
    elif odd_entry.startswith("claiming"):
        claim_rows(entry, int(odd_entry.split()[1]) << 30)  # read whole, 6 GiB ran out of memory unseen
    elif odd_entry == "link to /dev/zero":
        os.remove(entry)
        os.symlink("/dev/zero", entry)  # reading it whole would never end
    else:
        os.truncate(entry, 8 << 30)  # its header and rows, then 8 GiB (sparse) more than the header records
    summary, stderr = count_through(corpus, cache)
    assert summary["cache_rejected"] == 1 and summary["sources_cached"] == len(archives(corpus)) - 1
    assert why in stderr and entry in stderr
    assert {k: v for k, v in summary.items() if not k.startswith(("cache", "sources_cached", "index_cache"))} == {
        k: v for k, v in first.items() if not k.startswith(("cache", "sources_cached", "index_cache"))}
    # Rebuilt: a regular file of the size its header records, read from the cache next time.
    assert os.path.isfile(entry) and not os.path.islink(entry) and os.path.getsize(entry) < 1 << 20
    again, _ = count_through(corpus, cache)
    assert again["cache_rejected"] == 0 and again["sources_cached"] == len(archives(corpus))


def test_temporary_files_of_failed_writes_are_pruned_by_age(corpus, tmp_path):
    cache = cache_for(tmp_path / "cache")
    path = os.path.join(corpus, archives(corpus)[0])
    key = cache.key(path, cache.source_stamp(path, 0))
    cache.store(key, index_source(path, os.path.getsize(path), "scan"))
    directory, name = os.path.split(cache.entry_path(key))
    stale = os.path.join(directory, f".{name}.tmp-4242-1")  # what a write cut short by a full disk left
    fresh = os.path.join(directory, f".{name}.tmp-4243-1")  # a write of a run going on now
    for leftover in (stale, fresh):
        with open(leftover, "wb") as f:
            f.write(b"partial entry")
    os.utime(stale, (time.time() - 2 * 3600,) * 2)
    assert cache.prune() == 0  # no entry was old: the leftover is not counted as one
    assert not os.path.exists(stale) and os.path.exists(fresh)
    assert entries(tmp_path / "cache") == [cache.entry_path(key)]


def test_a_write_that_fills_the_disk_leaves_no_temporary_file(corpus, tmp_path):
    """On a real full disk: a tmpfs of 256 KiB, mounted by the test (needs root in a mount namespace)."""
    disk = tmp_path / "small-disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        cache = cache_for(disk / "cache")
        path = os.path.join(corpus, archives(corpus)[0])
        key = cache.key(path, cache.source_stamp(path, 0))
        index = index_source(path, os.path.getsize(path), "scan")
        big = dataclasses.replace(index, dead_letters=[DeadLetter(path, "index", "corrupt", "x" * (512 << 10))])
        with pytest.raises(OSError):
            cache.store(key, big)  # more than the disk holds
        assert [n for _, _, names in os.walk(disk) for n in names] == []
        cache.store(key, index)  # the space the failed write took is free again
        assert cache.lookup(key).table.equals(index.table)
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_an_entry_name_taken_by_a_directory_holding_files_is_left_saying_so_and_the_other_sources_are_stored(
        corpus, tmp_path, caplog):
    cache = cache_for(tmp_path / "cache")
    first, second = (os.path.join(corpus, name) for name in archives(corpus)[:2])
    keys = [cache.key(p, cache.source_stamp(p, 0)) for p in (first, second)]
    taken = cache.entry_path(keys[0])
    os.makedirs(taken)
    with open(os.path.join(taken, "notes"), "w") as f:
        f.write("not the cache's")
    with pytest.raises(RejectedEntry, match=r"not a regular file \(a directory\)"):
        cache.lookup(keys[0])
    cache.store(keys[0], index_source(first, os.path.getsize(first), "scan"))  # a warning, not an error
    assert [r.getMessage() for r in caplog.records] == [
        f"index cache: cannot store an entry: {taken} is a directory holding files, which the cache never writes; "
        "remove it to cache this source again"]
    assert os.listdir(taken) == ["notes"]
    cache.store(keys[1], index_source(second, os.path.getsize(second), "scan"))
    assert cache.lookup(keys[1]) is not None


def test_the_rows_bound_holds_for_an_archive_of_the_smallest_chunks_under_a_long_path(tmp_path):
    """The bound an entry's rows are checked against never refuses a real entry: an archive of 2,000 one-record
    chunks with long member names, at a path of 1,000 characters."""
    folder = tmp_path / ("d" * 200) / ("e" * 200) / ("f" * 200) / ("g" * 200)
    folder.mkdir(parents=True)
    path = str(folder / ("training-" + "h" * 150 + ".tar"))
    write_tar(path, [(f"games/{'m' * 120}.{i}.gz", gzip_bytes(make_game_records(i, 1).tobytes())) for i in range(2000)])
    index = index_source(path, os.path.getsize(path), "scan")
    assert index.table.num_rows == 2000
    cache = cache_for(tmp_path / "cache")
    key = cache.key(path, cache.source_stamp(path, 0))
    data = encode_entry(key, index)
    rows_bytes = json.loads(data.split(b"\n")[1])["rows_bytes"]
    assert rows_bytes * 10 < max_rows_bytes(key)  # tar members take 1,024 bytes or more; the bound assumes 20
    assert decode_entry(data, key).table.equals(index.table)


READ_CLAIMED_ROWS = """
import json, os, sys
from shardmill.transforms.lc0.index_cache import RejectedEntry, read_entry
entry, key = sys.argv[1], json.loads(sys.argv[2])
with open(entry, "rb") as f:
    try:
        read_entry(f, os.path.getsize(entry), key)
    except RejectedEntry as err:
        print(err)
"""


@pytest.mark.slow
def test_rows_a_large_source_could_have_are_hashed_in_pieces_not_read_whole(corpus, tmp_path):
    """4 GiB of rows claimed for a source of 64 GiB (within the bound) are refused for their SHA-256 with a
    process of 2 GiB of address space: no more than a piece of them is held."""
    cache = cache_for(tmp_path / "cache")
    path = os.path.join(corpus, archives(corpus)[0])
    real = cache.key(path, cache.source_stamp(path, 0))
    cache.store(real, index_source(path, os.path.getsize(path), "scan"))
    key = dict(real, stamp=[64 << 30, *real["stamp"][1:]])  # the key of a source of 64 GiB
    assert max_rows_bytes(key) > 4 << 30
    entry = str(tmp_path / "claimed.entry")
    with open(cache.entry_path(real), "rb") as f:
        data = f.read()
    start = data.index(b"\n") + 1
    header = json.loads(data[start:data.index(b"\n", start)])
    header["key"], header["rows_bytes"] = key, 4 << 30
    with open(entry, "wb") as f:
        f.write(data[:start] + json.dumps(header).encode() + b"\n")
    os.truncate(entry, os.path.getsize(entry) + (4 << 30))
    done = subprocess.run([sys.executable, "-c", READ_CLAIMED_ROWS, entry, json.dumps(key)], capture_output=True,
                          text=True, timeout=300, preexec_fn=limited(2 << 30))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "its rows are damaged (SHA-256 differs)"


@pytest.mark.slow
def test_an_object_store_entry_is_read_as_a_stream_and_checked_as_a_local_one(corpus, s3_server):
    """The entry is read no further than its header records: one with more bytes than that is refused, and one
    claiming more rows than its source can have is refused before its rows are read."""
    from apache_beam.io.filesystems import FileSystems

    from shardmill.transforms.common.filesystem import read_all, write_bytes_atomically

    cache = IndexCache(s3_server.create_bucket("index-cache-stream") + "/cache", "scan", 0, 64 << 20)
    path = os.path.join(corpus, archives(corpus)[0])
    key = cache.key(path, cache.source_stamp(path, 0))
    assert cache.lookup(key) is None
    index = index_source(path, os.path.getsize(path), "scan")
    cache.store(key, index)
    assert cache.lookup(key).table.equals(index.table)
    entry = cache.entry_path(key)
    data = read_all(entry)
    write_bytes_atomically(entry, data + b"\0" * 100)
    with pytest.raises(RejectedEntry, match=f"more bytes than the {len(data):,} its header records"):
        cache.lookup(key)
    start = data.index(b"\n") + 1
    header = json.loads(data[start:data.index(b"\n", start)])
    header["rows_bytes"] = max_rows_bytes(key) + 1
    write_bytes_atomically(entry, data[:start] + json.dumps(header).encode() + b"\n")
    with pytest.raises(RejectedEntry, match="bytes of rows, more than the"):
        cache.lookup(key)
    FileSystems.delete([entry])
