"""Real-scale inputs: work items independent of the index size, bounded memory per chunk, odd files.

Cases that could hang or exhaust memory run in a subprocess with a timeout
or an address-space limit, so a regression fails the test instead of the run.
"""

import json
import os
import pickle
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pyarrow as pa
import pytest

from shardmill.pipelines import cli
from shardmill.pipelines.config import ConfigError, parse_config, validate
from shardmill.transforms.common.discovery import list_input
from shardmill.transforms.lc0 import sampling as job_plan
from shardmill.transforms.lc0.index import INDEX_SCHEMA, index_source
from shardmill.transforms.lc0.sampling import MAX_TASK_BYTES, WRITE_LESS, SamplingParams, emissions
from shardmill.transforms.output.shard_count import PlanError, ShardSizing, shard_count
from tests.datagen.lc0 import gzip_bytes, make_game_records, write_dataset
from tests.support.cli import run_shardmill
from tests.support.lc0_plan import make_plan, positions_of_uses

V6 = 8356


def synthetic_index(num_sources: int, chunks_per_source: int, seed: int = 0) -> pa.Table:
    """An index of games of 20-400 records, as an indexer would produce it (no files behind it)."""
    rng = np.random.default_rng(seed)
    n = num_sources * chunks_per_source
    source_ids = np.repeat(np.arange(num_sources), chunks_per_source)
    sort_keys = np.array([f"training-{i:08d}.tar" for i in range(num_sources)], dtype=object)[source_ids]
    lengths = rng.integers(20, 400, n)
    return pa.table({
        "source": pa.array(["/data/" + k for k in sort_keys]),
        "sort_key": pa.array(sort_keys.tolist()),
        "chunk": pa.array(np.tile(np.arange(chunks_per_source), num_sources), pa.int32()),
        "member": pa.array(["games/x.gz"] * n),
        "offset": pa.array(np.tile(np.arange(chunks_per_source) * 40_000, num_sources), pa.int64()),
        "length": pa.array(np.full(n, 30_000), pa.int64()),
        "num_records": pa.array(lengths, pa.int64()),
        "record_size": pa.array(np.full(n, V6), pa.int32()),
        "version": pa.array(np.full(n, 6), pa.int32()),
        "verified": pa.array(np.zeros(n, bool)),
        "format": pa.array(["lc0"] * n),
    }, schema=INDEX_SCHEMA)


@pytest.mark.slow
def test_a_read_tasks_pickled_size_does_not_grow_with_the_index():
    params = SamplingParams(seed=1, passes=2, position_count=4, threshold=150, gamma=1.0)
    sizes = {}
    for sources in (10, 1000):
        plan = make_plan(synthetic_index(sources, 100), params, max_task_bytes=4 << 20)
        sizes[sources] = max(len(pickle.dumps(task)) for task in plan.tasks)
    # 100x the index: the largest work item stays the size of its own rows (~a few KB), never the index's.
    assert sizes[1000] < 1.5 * sizes[10] and sizes[1000] < 64 << 10, sizes


def plan_distributed(index: pa.Table, params: SamplingParams, max_task_bytes: int, tables: int, seed: int):
    """The plan as the Beam job makes it: sources spread over `tables` index tables at random."""
    rng = np.random.default_rng(seed)
    sources = sorted(set(index["source"].to_pylist()))
    table_of = dict(zip(sources, rng.integers(0, tables, len(sources))))
    parts = [index.filter(pa.array([table_of[s] == t for s in index["source"].to_pylist()])) for t in range(tables)]
    summaries = [s for part in parts for s in job_plan.summarize_sources(part)]
    decisions = job_plan.decide(list(reversed(summaries)), params.pool_size)
    planned = [job_plan.plan_table(part, decisions, params) for part in parts]
    num_shards = shard_count(sum(p.records_planned for p in planned) * decisions.record_size, ShardSizing(), WRITE_LESS)
    tasks = [t for p in planned for t in job_plan.read_tasks(p.used, params, num_shards, max_task_bytes)]
    stats = job_plan.final_stats(job_plan.merge_stats([p.stats for p in reversed(planned)]), params)
    return tasks, stats, num_shards, sorted(d.to_dict()["path"] for p in planned for d in p.dead_letters)


def emitted(tasks):
    out = set()
    for task in tasks:
        for row in task.chunks.to_pylist():
            use, pos = emissions(row["chunk_key"], row["num_records"], task.params.position_count, task.params.seed,
                                 row["emit_start"], row["emit_stop"])
            out |= {(row["sort_key"], row["chunk"], int(u), int(p)) for u, p in zip(use, pos)}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("pool_size", [0, 1234])
def test_the_distributed_plan_equals_the_plan_of_the_whole_index(pool_size):
    index = synthetic_index(60, 50, seed=3)
    # A duplicate source (same basename elsewhere) and a few chunks of another version.
    dup = index.slice(0, 50).set_column(0, INDEX_SCHEMA.field("source"),
                                        pa.array(["/other/training-00000000.tar"] * 50))
    index = pa.concat_tables([index, dup])
    versions = index["version"].to_numpy().copy()
    versions[[7, 300, 1900]] = 5
    index = index.set_column(index.schema.get_field_index("version"), INDEX_SCHEMA.field("version"),
                             pa.array(versions, pa.int32()))
    params = SamplingParams(seed=9, passes=3, position_count=3, threshold=200, gamma=1.3, pool_size=pool_size)
    whole = make_plan(index, params, max_task_bytes=1 << 20)
    for tables in (1, 7, 60):
        tasks, stats, num_shards, dead = plan_distributed(index, params, 1 << 20, tables, seed=tables)
        assert num_shards == whole.num_shards and stats == whole.stats
        assert dead == sorted(d.path for d in whole.dead_letters)
        assert emitted(tasks) == emitted(whole.tasks)
    assert whole.stats["accounting"]["chunks_rejected_by_plan"] == 50 + 3


def test_a_chunk_with_more_output_than_a_task_is_split_into_emission_ranges():
    index = synthetic_index(1, 3, seed=4)
    params = SamplingParams(seed=2, passes=500)  # every record 500 times: ~1.6 GB of output per game
    plan = make_plan(index, params, max_task_bytes=MAX_TASK_BYTES)
    per_task = (64 << 20) // V6
    for task in plan.tasks:
        rows = task.chunks.to_pylist()
        assert sum(r["emit_stop"] - r["emit_start"] for r in rows) <= per_task
    planned = index["num_records"].to_numpy() * 500
    covered = {}
    for task in plan.tasks:
        for r in task.chunks.to_pylist():
            covered.setdefault(r["chunk"], []).append((r["emit_start"], r["emit_stop"]))
    for chunk, ranges in covered.items():
        ranges.sort()
        assert ranges[0][0] == 0 and ranges[-1][1] == planned[chunk]
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, no overlap


def test_emission_ranges_concatenate_to_all_positions_of_all_uses():
    key, n, uses, k = 12345, 37, 9, 11
    use, pos = positions_of_uses(key, n, uses, k, seed=5)
    cuts = [0, 1, 36, 37, 50, 98, 99]
    parts = [emissions(key, n, k, 5, a, b) for a, b in zip(cuts, cuts[1:])]
    assert np.array_equal(np.concatenate([p[0] for p in parts]), use[:99])
    assert np.array_equal(np.concatenate([p[1] for p in parts]), pos[:99])


def test_plans_too_large_for_bounded_memory_are_refused_naming_what_to_change():
    index = synthetic_index(2, 10)
    with pytest.raises(PlanError, match="output.num_shards"):
        make_plan(index, SamplingParams(passes=100_000), ShardSizing(num_shards=1))
    with pytest.raises(PlanError, match="at most 100,000 shards"):
        make_plan(index, SamplingParams(passes=1_000_000, position_count=1_000_000))


@pytest.mark.parametrize("text,field", [
    ("lc0 { chunk_pool { position_count: 4294967295 } }", "chunk_pool.position_count"),
    ("lc0 { chunk_pool { passes: 1000001 } }", "chunk_pool.passes"),
    ("lc0 { index { max_chunk_bytes: 1000 } }", "index.max_chunk_bytes"),
    ("lc0 { index { max_chunk_bytes: 5000000000 } }", "index.max_chunk_bytes"),
])
def test_absurd_configs_are_rejected_before_any_work(text, field):
    with pytest.raises(ConfigError, match=field):
        validate(parse_config(f'input: "x"\n{text}'))


@pytest.mark.slow
def test_a_million_passes_into_ten_shards_is_refused_before_loading(tmp_path, lc0_dataset):
    directory, _ = lc0_dataset
    config = tmp_path / "job.textproto"
    config.write_text(f'input: "{directory}"\nlc0 {{ chunk_pool {{ passes: 1000000 hanse_sampling_threshold: 300 }} }}\n'
                      'output { num_shards: 10 }\nmax_error_fraction: 0.5\n')
    done = run_shardmill("run", "--config", config, "--output", tmp_path / "o")
    assert done.returncode == 3, done.stderr
    assert "PlanError: the plan writes" in done.stderr and "set more output.num_shards" in done.stderr
    assert "Traceback" not in done.stderr
    assert not os.path.exists(tmp_path / "o" / ".manifest.json")


def bomb_member(inflated_bytes: int, version: int = 6) -> bytes:
    """A gzip member of `inflated_bytes` (version header + zeros), cheap to build: one flushed block repeated."""
    block_payload = version.to_bytes(4, "little") + bytes(V6 - 4)
    block_payload *= 64
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(block_payload) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeats = inflated_bytes // len(block_payload)
    crc = 0
    for _ in range(repeats):
        crc = zlib.crc32(block_payload, crc)
    size = len(block_payload) * repeats
    end = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"
    return header + block * repeats + end + crc.to_bytes(4, "little") + (size % 2**32).to_bytes(4, "little")


BOMB_SCRIPT = textwrap.dedent("""
    import json, os, resource, sys
    from shardmill.transforms.lc0.index import index_source
    from shardmill.transforms.lc0.loading import load_task
    from shardmill.transforms.lc0.sampling import SamplingParams, read_tasks
    import pyarrow as pa, pyarrow.compute as pc

    def vm_bytes():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize"))

    # The imports reserve address space; allow 768 MiB more. Inflating a bomb whole needs 2 GiB or more.
    limit = vm_bytes() + (768 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = {}
    for path in sys.argv[1:]:
        for method in ("trailer", "scan", "decompress"):
            result = index_source(path, os.path.getsize(path), method, opener=lambda p: open(p, "rb"))
            out[f"{os.path.basename(path)} {method}"] = [d.reason for d in result.dead_letters] + \\
                [f"indexed {n}" for n in result.table["num_records"].to_pylist()]
            if result.table.num_rows:  # the trailer said a small size: loading must find out, bounded
                used = result.table.append_column("chunk_key", pa.array([1], pa.uint64()))
                used = used.append_column("num_uses", pa.array([1], pa.int64()))
                used = used.append_column("planned_records", used["num_records"])
                task, = read_tasks(used, SamplingParams(), 1, 64 << 20)
                loaded = load_task(task, opener=lambda p: open(p, "rb"))
                out[f"{os.path.basename(path)} {method} load"] = [d.reason for d in loaded.dead_letters]
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_gzip_bombs_are_dead_lettered_too_large_under_a_memory_cap(tmp_path):
    single = tmp_path / "single.gz"
    single.write_bytes(bomb_member(2 << 30))  # one member inflating to 2 GiB
    multi = tmp_path / "multi.gz"
    # Two members of 1 GiB, then a small last member: its trailer says 3 records.
    multi.write_bytes(bomb_member(1 << 30) + bomb_member(1 << 30) + gzip_bytes(make_game_records(7, 3).tobytes()))
    script = tmp_path / "bomb.py"
    script.write_text(BOMB_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(single), str(multi)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    for method in ("trailer", "scan", "decompress"):
        assert result[f"single.gz {method}"] == ["too_large"]
    assert result["multi.gz scan"] == ["too_large"] and result["multi.gz decompress"] == ["too_large"]
    # TRAILER trusts the last member's size; the load finds the rest without holding it.
    assert result["multi.gz trailer"] == ["indexed 3"] and result["multi.gz trailer load"] == ["too_large"]


def listing(directory, suffixes=(".gz", ".tar")):
    events = list(list_input(str(directory), suffixes))
    files = sorted(os.path.relpath(e[1], directory) for e in events if e[0] == "file")
    skipped = sorted(e[1] for e in events if e[0] == "skip")
    dead = sorted((e[1].reason, os.path.basename(e[1].path)) for e in events if e[0] == "dead")
    return files, skipped, dead


def odd_tree(root):
    """A tree with every odd kind of file next to real games."""
    game = gzip_bytes(make_game_records(3, 5).tobytes())
    (root / "day1" / "hour2").mkdir(parents=True)
    (root / "day1" / "hour2" / "deep.gz").write_bytes(game)
    (root / "top.gz").write_bytes(game)
    (root / ".partial.gz").write_bytes(game[:10])
    (root / "game.gz.tmp").write_bytes(game)
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.gz").write_bytes(game)
    (root / "notes.txt").write_text("hi")
    (root / "bundle.tar.gz").write_bytes(game)
    os.mkfifo(root / "fifo.gz")
    os.symlink(root / "missing.gz", root / "dangling.gz")
    os.symlink(root / "day1", root / "linked-dir")
    bad_name = os.fsdecode(b"caf\xe9.gz")
    with open(os.path.join(os.fsencode(str(root)), b"caf\xe9.gz"), "wb") as f:
        f.write(game)
    return bad_name


def test_discovery_walks_the_tree_and_classifies_every_odd_file(tmp_path):
    odd_tree(tmp_path)
    files, skipped, dead = listing(tmp_path, (".gz", ".tar", ".tgz"))
    assert files == ["bundle.tar.gz", "day1/hour2/deep.gz", "top.gz"]
    assert skipped == ["hidden", "hidden", "hidden", "not_regular", "not_regular", "other_suffix"]
    assert dead == [("bad_name", "caf\\xe9.gz"), ("unreadable", "dangling.gz")]


@pytest.mark.slow
def test_a_fifo_in_an_input_or_named_as_one_does_not_hang_count_or_run(tmp_path):
    os.mkfifo(tmp_path / "x.gz")
    (tmp_path / "game.gz").write_bytes(gzip_bytes(make_game_records(3, 5).tobytes()))
    done = run_shardmill("count", tmp_path, "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert summary["chunks"] == 1 and summary["skipped_files"] == {"not_regular": 1}
    config = tmp_path / "job.textproto"
    config.write_text(f'input: "{tmp_path / "x.gz"}"\n')
    for args in (["count", str(tmp_path / "x.gz")], ["run", "--config", str(config), "--output", str(tmp_path / "o")]):
        done = run_shardmill(*args, timeout=120)
        assert done.returncode == 2 and "x.gz': not a regular file" in done.stderr, done.stderr


@pytest.mark.slow
def test_a_run_over_odd_files_dead_letters_them_and_reads_the_rest(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    odd_tree(data)
    out = tmp_path / "out"
    config = tmp_path / "job.textproto"
    config.write_text(f'input: "{data}"\ninput: "{data}/day1/../top.gz"\nmax_error_fraction: 1\n')
    done = run_shardmill("run", "--config", config, "--output", out)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / ".manifest.json").read_text())
    acc = manifest["stats"]["accounting"]
    assert acc["files_skipped"] == {"hidden": 3, "not_regular": 2, "other_suffix": 1}
    # top.gz named twice (once as a/../b) is one source, not a duplicate_source.
    assert acc["errors_by_reason"] == {"bad_name": 1, "compressed_archive": 1, "unreadable": 1}
    assert acc["chunks_indexed"] == 2 and acc["records_written"] == 10
    errors = [json.loads(line) for line in (out / manifest["errors"]["path"]).read_text().splitlines()]
    assert {e["path"].rsplit("/", 1)[-1] for e in errors} == {"caf\\xe9.gz", "bundle.tar.gz", "dangling.gz"}


@pytest.mark.slow
def test_relative_and_dotted_inputs_are_one_source(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    write_dataset(str(data), num_archives=1, games_per_archive=3, loose_games=1, bad=False, seed=5)
    monkeypatch.chdir(tmp_path)
    name = sorted(os.listdir(data))[0]
    assert cli.main(["count", "data", f"./data/../data/{name}", f"{tmp_path}/data/", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["sources"] == len(os.listdir(data))


@pytest.mark.slow
def test_small_sources_share_a_task_and_a_missing_one_fails_alone(tmp_path):
    from shardmill.transforms.lc0.loading import load_task, unpack_frames
    from shardmill.transforms.lc0.record_format import RECORD_SIZES

    truth = write_dataset(str(tmp_path), num_archives=0, games_per_archive=0, loose_games=30, bad=False, seed=8)
    tables = [index_source(str(tmp_path / name), os.path.getsize(tmp_path / name), "scan",
                           opener=lambda p: open(p, "rb")).table for name in sorted(os.listdir(tmp_path))]
    plan = make_plan(pa.concat_tables(tables), SamplingParams(seed=1, position_count=2), ShardSizing(num_shards=2))
    assert len(plan.tasks) == 1 and len(set(plan.tasks[0].chunks["source"].to_pylist())) == 30
    gone = sorted(os.listdir(tmp_path))[5]
    os.remove(tmp_path / gone)
    loaded = load_task(plan.tasks[0], opener=lambda p: open(p, "rb"))
    assert [(os.path.basename(d.path), d.reason) for d in loaded.dead_letters] == [(gone, "unreadable")]
    assert loaded.chunks_loaded == 29 and loaded.records_written == 29 * 2
    games = {c.sort_key: c for c in truth.good}
    for batch in loaded.batches.values():
        frames = np.empty((batch.num_rows, RECORD_SIZES[6]), np.uint8)
        unpack_frames(batch.column("packed_frame"), np.arange(batch.num_rows), frames)
        for frame, row in zip(frames, batch.drop_columns(["packed_frame"]).to_pylist()):
            game = games[row["source"]]
            assert frame.tobytes() == make_game_records(game.game_seed, game.num_records)[row["position"]].tobytes()
