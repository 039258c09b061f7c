"""Files through Beam's FileSystems (local, gs://, s3://): paths, opening, atomic writes.

A file is written under a temporary name beside its final path and renamed
into place, so a reader never sees a half-written file (ARCHITECTURE.md,
rule "writes are atomic"). Local paths are made absolute and normalised, so
one file reached by two spellings is one file.
"""

from __future__ import annotations

import os
import posixpath
import socket
import threading
import time
import uuid
from typing import BinaryIO, Callable

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from shardmill.core.errors import EXIT_FAILED, ShardmillError


def _temp_name(path: str) -> str:
    directory, name = path.rsplit("/", 1) if "/" in path else ("", path)
    temp = f".{name}.tmp-{uuid.uuid4().hex[:12]}"
    return f"{directory}/{temp}" if directory else temp


def write_atomically(path: str, write) -> None:
    """Calls write(file) on a temporary file beside path, then renames it to path, replacing it.

    The rename replaces an existing file in one step (POSIX rename; on object
    stores a copy, which replaces the object atomically): deleting first would
    leave a moment, and after a crash a state, with no file at all.
    """
    temp = _temp_name(path)
    with FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        write(f)
    FileSystems.rename([temp], [path])


def write_bytes_atomically(path: str, data) -> None:
    """Writes data (bytes or any buffer: a pa.Buffer is not copied) to path: temporary name first, then a
    rename (replacing path)."""
    if not len(data) and FileSystems.get_scheme(path) == "s3":
        _put_empty_s3_object(path)
        return
    write_atomically(path, lambda f: f.write(data))


def _put_empty_s3_object(path: str) -> None:
    """An empty object in one put (atomic as any put): Beam's S3 writer always completes a multipart upload,
    which S3 refuses without a part, so it cannot write an empty file."""
    from apache_beam.io.aws.clients.s3 import boto3_client
    from apache_beam.io.aws.s3io import parse_s3_path
    from apache_beam.options.pipeline_options import PipelineOptions

    bucket, key = parse_s3_path(path)
    options = FileSystems._pipeline_options or PipelineOptions([])  # what Beam's own S3 filesystem is given
    boto3_client.Client(options).client.put_object(Bucket=bucket, Key=key, Body=b"")


def write_parquet_atomically(path: str, table: pa.Table, **write_options) -> int:
    """Writes table as a Parquet file at path atomically; returns the file's size in bytes."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **write_options)
    data = sink.getvalue()
    write_bytes_atomically(path, data)
    return data.size


Opener = Callable[[str], BinaryIO]


def default_opener(path: str) -> BinaryIO:
    """Opens a path with Beam's FileSystems, raw bytes (no transparent gunzip)."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(
        path, mime_type="application/octet-stream", compression_type=CompressionTypes.UNCOMPRESSED
    )


def is_local(path: str) -> bool:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.get_scheme(path) in (None, "file")


def normalize(path: str) -> str:
    """Absolute and normalised for a local path; normalised below the bucket for a URI."""
    if is_local(path):
        if path.startswith("file://"):
            path = path[len("file://"):]
        return os.path.abspath(os.path.expanduser(path))
    scheme, rest = path.split("://", 1)
    bucket, _, key = rest.partition("/")
    key = posixpath.normpath(key) if key else ""
    return f"{scheme}://{bucket}/{'' if key == '.' else key}"


def read_all(path: str) -> bytes:
    """A whole file's bytes (raw: no transparent decompression)."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def file_size(path: str) -> int:
    """A file's size in bytes; FileNotFoundError when there is none."""
    matches = FileSystems.match([path])[0].metadata_list if FileSystems.exists(path) else []
    if not matches:
        raise FileNotFoundError(f"{path}: no such file")
    return matches[0].size_in_bytes


class _SharedS3Clients:
    """Stands in for the boto3 module inside Beam's S3 client wrapper, handing out one boto3 S3 client per
    settings instead of a new one for every call.

    Beam's S3 filesystem builds a new client for every exists/match/rename/open (~100 ms each: a session,
    the credential chain), which made a commit of N shards cost seconds per shard. boto3 clients are
    thread-safe; the wrapper's own per-download state stays per call.
    """

    def __init__(self, boto3):
        self._boto3 = boto3
        self._clients: dict = {}
        self._lock = threading.Lock()
        self.session = self

    def Session(self):  # noqa: N802 (boto3's name)
        return self

    def client(self, **settings):
        # The environment feeds the client too (AWS_ENDPOINT_URL, keys, region): part of the key.
        key = (tuple(sorted(settings.items())),
               tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
        with self._lock:
            if key not in self._clients:
                session = self._boto3.session.Session()
                if not settings.get("aws_access_key_id") and session.get_credentials() is None:
                    # Beam's S3 calls retry a missing credential with backoff for many minutes: a worker started
                    # without the store's settings would keep the run waiting instead of failing it.
                    raise StoreUnreachable(
                        f"no credentials for the object store at {_endpoint(settings)} on host "
                        f"{socket.gethostname()}: give this process the store's endpoint and credentials (AWS_* "
                        "variables, an instance role or --s3_* options); on a cluster, every worker's")
                self._clients[key] = session.client(**settings)
            return self._clients[key]


def _endpoint(settings: dict) -> str:
    return settings.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3 (no endpoint set)"


def use_pipeline_options(options) -> None:
    """Hands Beam's FileSystems the pipeline options and shares its S3 clients: what the launcher's own listing,
    claim and commit on an object store need (Beam's S3 filesystem refuses to work without options)."""
    FileSystems.set_options(options)
    share_s3_clients()


def share_s3_clients() -> None:
    """Makes Beam's S3 filesystem reuse its boto3 clients in this process (idempotent; a no-op without boto3)."""
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return
    if boto3_client.boto3 is not None and not isinstance(boto3_client.boto3, _SharedS3Clients):
        boto3_client.boto3 = _SharedS3Clients(boto3_client.boto3)


def default_worker_options() -> None:
    """Gives Beam's FileSystems options where nothing did: a worker of Beam's external worker pool
    (worker_pool_main) runs its SDK harness without sdk_worker_main, the one place Beam sets them, and there
    Beam's S3 filesystem refuses every call ('Must provide one of client or options'). With empty options its
    client takes the store's endpoint and credentials from the worker's environment (AWS_*), as Arrow's do."""
    if FileSystems._pipeline_options is None:
        from apache_beam.options.pipeline_options import PipelineOptions

        use_pipeline_options(PipelineOptions([]))


# Every worker-side module reaches its files through this one, so importing it is where a worker gets them.
default_worker_options()


# A store the launcher can't reach must fail the command in seconds, before anything is listed or written:
# Beam's S3 filesystem retries every call with exponential backoff for minutes (listing an input against a
# closed port was still waiting after 180 s), on top of botocore's 60 s timeouts and 5 attempts per call. So
# each bucket is asked once, with short timeouts and two attempts (a silent store: 2 x 4 s), and the wait
# for all of them together ends at PROBE_DEADLINE_SECONDS whatever stalls: name resolution, credentials,
# connecting, backoff. docs/operations.md (object storage) states the bound.
PROBE_CONNECT_SECONDS = 3
PROBE_READ_SECONDS = 4
PROBE_ATTEMPTS = 2
PROBE_DEADLINE_SECONDS = 12


class StoreUnreachable(ShardmillError, OSError):
    """An object store named by an input or the output does not answer, or answers that it will not serve."""

    exit_code = EXIT_FAILED


def check_stores_reachable(paths: list[str]) -> None:
    """Asks each S3 bucket the paths name for its head, all at once, waiting at most PROBE_DEADLINE_SECONDS;
    raises StoreUnreachable naming the bucket and the endpoint when one does not answer, or answers with what
    no later call would get past: a server error (5xx: Beam's S3 filesystem would retry every call on it for
    minutes), access denied or no such bucket. Any other answer lets the run's own calls report it."""
    buckets = sorted({p.split("://", 1)[1].split("/", 1)[0] for p in paths if p.startswith("s3://")})
    if not buckets:
        return
    try:
        import boto3
        import botocore.config
        import botocore.exceptions
        from apache_beam.options.pipeline_options import PipelineOptions, S3Options
    except ImportError:
        return  # no S3 client here: the run's first call says so
    options = (FileSystems._pipeline_options or PipelineOptions([])).view_as(S3Options)
    config = botocore.config.Config(connect_timeout=PROBE_CONNECT_SECONDS, read_timeout=PROBE_READ_SECONDS,
                                    retries={"total_max_attempts": PROBE_ATTEMPTS, "mode": "standard"})
    client = boto3.session.Session().client(
        "s3", endpoint_url=options.s3_endpoint_url, region_name=options.s3_region_name,
        use_ssl=not options.s3_disable_ssl, verify=options.s3_verify,
        aws_access_key_id=options.s3_access_key_id, aws_secret_access_key=options.s3_secret_access_key,
        aws_session_token=options.s3_session_token, config=config)
    unanswered = (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError)
    errors: dict[str, BaseException | None] = {}  # a bucket's entry once it answered (None) or failed

    def ask(bucket: str) -> None:
        try:
            client.head_bucket(Bucket=bucket)
            errors[bucket] = None
        except botocore.exceptions.ClientError as err:
            errors[bucket] = err if _refusal(err) else None
        except Exception as err:  # noqa: BLE001 (raised by the calling thread below)
            errors[bucket] = err

    # Daemon threads: one the deadline gave up on must not keep the failing command from exiting.
    askers = [threading.Thread(target=ask, args=(bucket,), name=f"shardmill-probe-{bucket}", daemon=True)
              for bucket in buckets]
    deadline = time.monotonic() + PROBE_DEADLINE_SECONDS
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(max(0.0, deadline - time.monotonic()))
    for bucket in buckets:
        store = f"s3://{bucket} (endpoint {client.meta.endpoint_url})"
        if bucket not in errors:
            raise StoreUnreachable(f"{store} does not answer: no answer within {PROBE_DEADLINE_SECONDS} s")
        err = errors[bucket]
        if isinstance(err, unanswered):
            raise StoreUnreachable(f"{store} does not answer: {_unanswered_reason(err)} ({PROBE_ATTEMPTS} attempts)")
        if isinstance(err, botocore.exceptions.ClientError):
            raise StoreUnreachable(f"{store} {_refusal(err)}")
        if err is not None:
            raise err


def _refusal(err) -> str | None:
    """What a bucket's answer to its head says no later call would get past, in a few words; None for others."""
    status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    if status >= 500:
        return (f"answers HTTP {status} (a server error) after {PROBE_ATTEMPTS} attempts: the store is not serving "
                "requests")
    if status == 403:
        return "refuses access (HTTP 403): check the credentials the run uses (AWS_* or --s3_access_key_id)"
    if status == 404:
        return "has no such bucket (HTTP 404)"
    return None


def _unanswered_reason(err: BaseException) -> str:
    """Why a request got no answer, in a few words: the socket's own error where there is one."""
    import botocore.exceptions

    if isinstance(err, botocore.exceptions.ConnectTimeoutError):
        return f"no connection within {PROBE_CONNECT_SECONDS} s"
    if isinstance(err, botocore.exceptions.ReadTimeoutError):
        return f"no response within {PROBE_READ_SECONDS} s"
    cause = err.kwargs.get("error") if hasattr(err, "kwargs") else None
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
        cause = cause.__cause__ or cause.__context__
    return str(err)
