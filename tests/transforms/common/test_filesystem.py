"""Files through Beam's FileSystems: what a worker process gets without a launcher's help."""

import subprocess
import sys
import time

import pytest
from apache_beam.io.filesystems import FileSystems

from shardmill.transforms.common import filesystem


@pytest.mark.slow  # a fresh interpreter: the state a worker of Beam's external worker pool starts in
def test_a_process_that_only_imports_the_job_code_has_filesystem_options():
    probe = ("import shardmill.transforms.common.filesystem\n"
             "from apache_beam.io.filesystems import FileSystems\n"
             "print(FileSystems._pipeline_options is not None)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "True"  # without them Beam's S3 filesystem refuses every call


def test_an_s3_call_without_credentials_fails_at_once_naming_the_endpoint(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    filesystem.share_s3_clients()
    started = time.monotonic()
    with pytest.raises(Exception) as failed:  # Beam wraps it in its BeamIOError, naming the path
        FileSystems.exists("s3://bucket/key")
    assert time.monotonic() - started < 10  # Beam's own retries of it took minutes
    assert "s3://bucket/key" in str(failed.value)
    assert "no credentials for the object store at http://127.0.0.1:9 on host" in str(failed.value)
