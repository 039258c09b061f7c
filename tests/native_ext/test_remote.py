"""The reader on object storage, against a real S3 protocol server: reads, checksums, resume, the
untrusted-dataset checks, and every remote call bounded (an unreachable store is one error within seconds)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from shardmill.native_ext import OrderOptions, OutputError, ReadOptions, RemoteOptions, ShardReader, load_manifest
from shardmill.native_ext.remote import child_uri, filesystem_of
from tests.datagen.shards import write_output
from tests.support.s3_server import free_port, silent_server


@pytest.fixture(scope="module")
def remote_output(s3_server, tmp_path_factory):
    """The same output on local disk and in a bucket."""
    local = str(tmp_path_factory.mktemp("remote") / "out")
    write_output(local, [300, 200, 150], row_group_rows=50)
    bucket = s3_server.create_bucket("reader-tests")
    s3_server.upload(local, "reader-tests/out")
    return local, f"{bucket}/out"


def served(path, **kwargs):
    with ShardReader(path, batch_size=64, columns=["id", "source"], num_epochs=2,
                     order_options=OrderOptions(seed=4), **kwargs) as reader:
        return [(b["id"].copy(), b["source"].to_pylist(), int(b["epoch"])) for b in reader]


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x[0], y[0]) and x[1:] == y[1:] for x, y in zip(a, b))


def test_the_reader_serves_a_remote_output_as_the_same_output_on_disk(remote_output):
    local, remote = remote_output
    assert load_manifest(remote, verify_checksums=True) == load_manifest(local)
    assert same(served(remote, read_options=ReadOptions(verify_checksums=True)), served(local))


def test_a_reader_resumes_from_its_state_on_a_remote_output(remote_output):
    _, remote = remote_output
    whole = served(remote)
    with ShardReader(remote, batch_size=64, columns=["id", "source"], num_epochs=2,
                     order_options=OrderOptions(seed=4)) as reader:
        head = [(b["id"].copy(), b["source"].to_pylist(), int(b["epoch"])) for _, b in zip(range(7), reader)]
        state = reader.state()
    assert same(head + served(remote, state=state), whole)


def test_query_parameters_of_the_location_reach_every_file(remote_output, s3_server, monkeypatch):
    _, remote = remote_output
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    located = f"{remote}?endpoint_override=127.0.0.1:{s3_server.port}&scheme=http"
    assert child_uri(located, "a.parquet") == f"{remote}/a.parquet?endpoint_override=127.0.0.1:{s3_server.port}&scheme=http"
    assert same(served(located), served(remote_output[0]))
    with pytest.raises(OutputError, match="unknown query parameter 'colour'"):
        load_manifest(f"{remote}?colour=red")


def test_remote_damage_is_refused_naming_the_object(remote_output, s3_server, tmp_path):
    local, _ = remote_output
    fs = s3_server.filesystem()
    s3_server.upload(local, "reader-tests/damaged")
    manifest = json.loads(open(os.path.join(local, ".manifest.json")).read())
    shard = manifest["shards"][1]["path"]
    data = bytearray(open(os.path.join(local, shard), "rb").read())
    data[len(data) // 2] ^= 0xFF
    with fs.open_output_stream(f"reader-tests/damaged/{shard}") as f:
        f.write(bytes(data))
    with pytest.raises(OutputError, match=f"shard reader-tests/damaged/{shard}: SHA-256 differs"):
        load_manifest("s3://reader-tests/damaged", verify_checksums=True)
    fs.delete_file(f"reader-tests/damaged/{shard}")
    with pytest.raises(OutputError, match=f"shard reader-tests/damaged/{shard} is missing"):
        load_manifest("s3://reader-tests/damaged")
    with pytest.raises(OutputError, match="has no .manifest.json"):
        load_manifest("s3://reader-tests/nothing-here")


UNREACHABLE = """
import sys, time
from shardmill.native_ext import OutputError, ReadOptions, RemoteOptions, ShardReader, load_manifest
remote = RemoteOptions(connect_timeout_seconds=1, request_timeout_seconds=1, max_attempts=2)
start = time.monotonic()
try:
    ShardReader(sys.argv[1], columns=["id"], read_options=ReadOptions(remote=remote))
except OutputError as err:
    print(f"{time.monotonic() - start:.1f}")
    print(err)
"""


def open_unreachable(uri, env=None):
    """(seconds until the reader failed, its message) in a subprocess: a hang must not hang the tests."""
    done = subprocess.run([sys.executable, "-c", UNREACHABLE, uri], env=env, capture_output=True, text=True,
                          timeout=120)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and len(lines) == 2, done.stdout + done.stderr
    return float(lines[0]), lines[1]


@pytest.mark.slow
@pytest.mark.parametrize("store", ["silent", "refusing"])
def test_an_unreachable_s3_store_is_one_error_within_the_bounds(store, s3_server):
    with silent_server() as address:
        if store == "refusing":
            address = f"127.0.0.1:{free_port()}"  # nothing listens there
        seconds, message = open_unreachable("s3://reader-tests/out",
                                            {**os.environ, "AWS_ENDPOINT_URL": f"http://{address}"})
    # Two attempts stalled for 1 s each, plus the backoff; with Arrow's defaults a silent store took 99 s.
    assert seconds < 20 and "cannot be read" in message and ".manifest.json" in message


@pytest.mark.slow
def test_an_unreachable_gcs_store_is_one_error_within_the_bounds():
    with silent_server() as address:
        seconds, message = open_unreachable(f"gs://bucket/out?endpoint_override={address}&scheme=http")
    assert seconds < 20 and "cannot be read" in message  # the retry limit 2 x (1 + 1) s; GCS's default: 15 min


def test_remote_options_are_checked():
    with pytest.raises(ValueError, match="max_attempts must be an integer in 1..100"):
        RemoteOptions(max_attempts=0)
    with pytest.raises(ValueError, match="connect_timeout_seconds must be a number of seconds"):
        RemoteOptions(connect_timeout_seconds=float("nan"))
    with pytest.raises(TypeError, match="ReadOptions.remote must be a RemoteOptions"):
        ReadOptions(remote={"max_attempts": 1})
    fs, path = filesystem_of("s3://bucket/a/b/?region=eu-west-1")
    assert path == "bucket/a/b" and fs.region == "eu-west-1"
