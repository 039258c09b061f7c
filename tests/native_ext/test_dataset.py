"""The reader on hostile datasets: every case in a subprocess, where death by a signal fails the test.

A case opens a dataset with ShardReader and reads it through; the subprocess
prints what came of it (rows read, or the exception's type and message).
Only OutputError is an acceptable failure; nothing may abort, hang or read
outside the dataset.
"""

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from shardmill.native_ext import OrderOptions, OutputError, ReadOptions, ShardReader
from tests.datagen.shards import write_output

RUNNER = textwrap.dedent("""
    import json, sys
    from shardmill.native_ext import OutputError, ReadOptions, ShardReader
    for case in json.loads(sys.argv[1]):
        print(json.dumps({"case": case["name"], "started": True}), flush=True)
        try:
            with ShardReader(case["path"], batch_size=64, columns=case.get("columns", ["frame", "id"]),
                             read_options=ReadOptions(verify_checksums=case.get("verify", False))) as reader:
                rows = sum(len(b["id"]) for b in reader)
            outcome = {"rows": rows}
        except OutputError as err:
            outcome = {"error": "OutputError", "message": str(err)}
        except Exception as err:  # a wrong exception type is a finding too
            outcome = {"error": type(err).__name__, "message": str(err)[:500]}
        print(json.dumps({"case": case["name"], **outcome}), flush=True)
""")


def run_cases(cases, timeout=120):
    """{case name: outcome}; fails the test if the subprocess dies by a signal or hangs."""
    done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(cases)], capture_output=True, text=True,
                          timeout=timeout)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    last = lines[-1]["case"] if lines else None
    assert done.returncode == 0, f"reader process died ({done.returncode}) in case {last}: {done.stderr[-2000:]}"
    return {line["case"]: line for line in lines if "started" not in line}


@pytest.fixture
def dataset(tmp_path):
    directory = tmp_path / "data"
    write_output(str(directory), [100, 120, 90], row_group_rows=16, width=8)
    return directory


def edit_manifest(directory, change):
    path = directory / ".manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def shard1(key, value):
    return lambda m: m["shards"][1].__setitem__(key, value)


MANIFEST_TAMPERING = {
    "negative row-group count": shard1("row_groups", [16] * 7 + [-4]),
    "huge row-group count": lambda m: (m["shards"][1].__setitem__("row_groups", [2**31, 0]),
                                       m["shards"][1].__setitem__("rows", 2**31)),
    "ten million row groups": lambda m: (m["shards"][1].__setitem__("row_groups", [0] * 10_000_000)),
    "no row groups for a shard with rows": lambda m: (m["shards"][1].__setitem__("row_groups", []),
                                                      m["shards"][1].__setitem__("rows", 0)),
    "rows as a string": shard1("rows", "120"),
    "rows as a bool": lambda m: m["shards"][1].update(rows=True, row_groups=[True]),
    "row groups not a list": shard1("row_groups", {"a": 1}),
    "missing bytes": lambda m: m["shards"][1].pop("bytes"),
    "shard entry a string": lambda m: m["shards"].__setitem__(1, "shard.parquet"),
    "shards not a list": lambda m: m.__setitem__("shards", {"0": 1}),
    "no shards": lambda m: m.__setitem__("shards", []),
    "num_shards disagrees": lambda m: m.__setitem__("num_shards", 7),
    "format version from the future": lambda m: m.__setitem__("format_version", 99),
    "bad sha256": shard1("sha256", "xyz"),
    "same path twice": lambda m: m["shards"][2].update(m["shards"][1]),
    "absolute path": lambda m: m["shards"][1].__setitem__("path", "/etc/passwd"),
    "dot-dot path": lambda m: m["shards"][1].__setitem__("path", "../private/x.parquet"),
    "dot-dot to a system file": lambda m: m["shards"][1].__setitem__("path", "../../../../../../etc/passwd"),
    "URI path": lambda m: m["shards"][1].__setitem__("path", "file:///etc/passwd"),
    "dot path": lambda m: m["shards"][1].__setitem__("path", "./" + m["shards"][1]["path"]),
    "empty path": lambda m: m["shards"][1].__setitem__("path", ""),
}


@pytest.mark.slow
def test_every_kind_of_manifest_tampering_is_an_output_error(dataset, tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    os.mkfifo(private / "x.parquet")  # opening it would block: the path must be refused before any open
    cases = []
    for i, (name, change) in enumerate(MANIFEST_TAMPERING.items()):
        copy = tmp_path / f"case{i}"
        shutil.copytree(dataset, copy)
        edit_manifest(copy, change)
        cases.append({"name": name, "path": str(copy)})
    outcomes = run_cases(cases)
    for name in MANIFEST_TAMPERING:
        outcome = outcomes[name]
        assert outcome.get("error") == "OutputError", (name, outcome)
        assert ".manifest.json" in outcome["message"] or "shard" in outcome["message"], (name, outcome)
    assert "passwd" not in outcomes["dot-dot to a system file"]["message"].split("path")[0]
    assert "bytes" not in outcomes["dot-dot to a system file"]["message"]  # its size is not revealed


def test_malformed_manifest_files_are_output_errors(dataset, tmp_path):
    bodies = {
        "not json": "{not json",
        "a list": "[1, 2]",
        "deeply nested": "[" * 100_000 + "]" * 100_000,
        "a string": '"manifest"',
        "empty": "",
    }
    cases = []
    for i, (name, body) in enumerate(bodies.items()):
        copy = tmp_path / f"m{i}"
        shutil.copytree(dataset, copy)
        (copy / ".manifest.json").write_text(body)
        cases.append({"name": name, "path": str(copy)})
    outcomes = run_cases(cases)
    for name in bodies:
        assert outcomes[name].get("error") == "OutputError", (name, outcomes[name])


def test_a_link_leaving_the_dataset_is_refused(dataset, tmp_path):
    outside = tmp_path / "outside"
    write_output(str(outside), [50], row_group_rows=16, width=8)
    shard = json.loads((dataset / ".manifest.json").read_text())["shards"][1]["path"]
    os.remove(dataset / shard)
    os.symlink(outside / "g000001-shard-00000-of-00001.parquet", dataset / shard)
    fifo_link = tmp_path / "fifo-data"
    shutil.copytree(dataset, fifo_link, symlinks=True)
    os.remove(fifo_link / shard)
    os.mkfifo(tmp_path / "fifo.parquet")
    os.symlink(tmp_path / "fifo.parquet", fifo_link / shard)
    outcomes = run_cases([{"name": "link out", "path": str(dataset)}, {"name": "link to a fifo", "path": str(fifo_link)}])
    for name in ("link out", "link to a fifo"):
        assert outcomes[name].get("error") == "OutputError" and "outside the dataset" in outcomes[name]["message"]


def test_a_checksum_cannot_be_bypassed_by_another_spelling_of_the_path(dataset, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    manifest = json.loads((copy / ".manifest.json").read_text())
    # The checksummed path and the read path are one: tampered bytes under any spelling are caught.
    path = copy / manifest["shards"][0]["path"]
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    path.write_bytes(bytes(data))
    outcomes = run_cases([{"name": "tampered", "path": str(copy) + "/", "verify": True},
                          {"name": "tampered dotted", "path": str(copy) + "/./", "verify": True}])
    for name in ("tampered", "tampered dotted"):
        assert outcomes[name].get("error") == "OutputError" and "SHA-256" in outcomes[name]["message"]


def test_relative_paths_serve_the_same_stream_as_absolute(dataset, tmp_path, monkeypatch):
    def stream(path):
        with ShardReader(path, batch_size=50, columns=["id"], order_options=OrderOptions(seed=4)) as reader:
            return [int(i) for b in reader for i in b["id"]]

    expected = stream(str(dataset))
    monkeypatch.chdir(tmp_path)
    for spelling in ("data", "./data", "data/", "./data/../data", f"file://{dataset}"):
        assert stream(spelling) == expected, spelling
    monkeypatch.setenv("HOME", str(tmp_path))
    assert stream("~/data") == expected


def test_bounded_random_fuzz_of_manifests_and_shard_bytes(dataset, tmp_path):
    """Seeded mutations: a JSON value replaced, a key dropped, shard bytes flipped (manifest size kept)."""
    rng = random.Random(14)
    manifest = json.loads((dataset / ".manifest.json").read_text())
    weird = [None, -1, 0, 2**63, -2**63, 1.5, "x", "", [], {}, True, [2**40], ["a"], "../x", "/x", "a/../../b"]
    cases = []
    for i in range(120):
        copy = tmp_path / f"f{i}"
        shutil.copytree(dataset, copy)
        mutated = json.loads(json.dumps(manifest))
        shard = rng.randrange(3)
        kind = rng.choice(["value", "drop", "bytes", "value"])
        if kind == "bytes":
            path = copy / manifest["shards"][shard]["path"]
            data = bytearray(path.read_bytes())
            for _ in range(rng.randint(1, 20)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            path.write_bytes(bytes(data))
        else:
            key = rng.choice(["path", "rows", "row_groups", "bytes", "sha256"])
            if kind == "drop":
                del mutated["shards"][shard][key]
            else:
                mutated["shards"][shard][key] = rng.choice(weird)
        (copy / ".manifest.json").write_text(json.dumps(mutated))
        cases.append({"name": f"{i}:{kind}", "path": str(copy), "verify": rng.random() < 0.3})
    outcomes = run_cases(cases, timeout=110)
    for name, outcome in outcomes.items():
        # Byte damage may decode silently (no page checksums) or fail; either way only OutputError.
        assert outcome.get("error") in (None, "OutputError"), (name, outcome)
        if name.endswith(("value", "drop")):
            assert "rows" in outcome or outcome.get("error") == "OutputError"


def test_a_column_the_native_core_does_not_arrange_is_served_through_arrow(tmp_path):
    directory = tmp_path / "half"
    write_output(str(directory), [40, 30], row_group_rows=16, width=8, extra_columns={"score": "float16"})
    with ShardReader(str(directory), columns=["frame", "score"], batch_size=16) as reader:
        batches = list(reader)
    assert all(b["score"].type == pa.float16() and len(b["score"]) == len(b["frame"]) for b in batches)
    with pytest.raises(OutputError, match="has no column 'nope'"):
        ShardReader(str(directory), columns=["nope"])


def test_threads_sharing_a_reader_get_every_row_exactly_once(dataset):
    import threading

    reader = ShardReader(str(dataset), batch_size=7, columns=["id"], order_options=OrderOptions(seed=2), read_options=ReadOptions(num_threads=2))
    seen, errors = [], []

    def consume():
        try:
            for batch in reader:
                seen.extend(int(i) for i in batch["id"])
        except Exception as err:  # noqa: BLE001 - any failure is the finding
            errors.append(err)

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reader.close()
    assert not errors and sorted(seen) == list(range(310))


@pytest.mark.parametrize("field,value", [("epoch", 2**63 - 1), ("epoch", -1), ("position", 10**9),
                                         ("position", "3"), ("epoch", True)])
def test_a_tampered_state_is_refused(dataset, field, value):
    with ShardReader(str(dataset), batch_size=16, columns=["id"], num_epochs=None) as reader:
        next(reader)
        state = json.loads(reader.state())
    state[field] = value
    with pytest.raises(ValueError, match=f"state field {field}"):
        ShardReader(str(dataset), batch_size=16, columns=["id"], num_epochs=None, state=json.dumps(state).encode())


NATIVE_RUNNER = textwrap.dedent("""
    import json, sys
    from shardmill.native_ext._native import NativeError, NativeReader, ReaderOptions
    paths, groups = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    options = ReaderOptions()
    for path, rows in zip(paths, groups):
        options.add_shard(path, rows)
    options.columns = ["frame"]
    try:
        reader = NativeReader(options)
        reader.start()
        while reader.next_batch() is not None:
            pass
        print("read")
    except NativeError as err:
        print("NativeError", err)
""")


@pytest.mark.parametrize("damage", ["negative", "huge", "more groups"])
def test_the_native_layer_alone_refuses_hostile_row_group_counts_without_aborting(dataset, damage):
    manifest = json.loads((dataset / ".manifest.json").read_text())
    paths = [str(dataset / s["path"]) for s in manifest["shards"]]
    groups = [s["row_groups"] for s in manifest["shards"]]
    groups[1] = {"negative": groups[1][:-1] + [-4], "huge": [2**31],
                 "more groups": groups[1] + [2**47] * 3}[damage]
    done = subprocess.run([sys.executable, "-c", NATIVE_RUNNER, json.dumps(paths), json.dumps(groups)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("NativeError") and "g000001-shard-00001" in done.stdout
