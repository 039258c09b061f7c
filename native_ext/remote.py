"""The filesystem of a dataset location — a local path or an Arrow filesystem URI — with every remote call bounded.

An object store that does not answer must become one clear error within
seconds, never a silent hang (with Arrow's defaults a silent S3 store took
99 s to fail, and GCS retries for up to 15 minutes). S3 gets a connect
timeout, a request timeout and a number of attempts; GCS a retry time
limit. The native reader opens shards with the same bounds
(src/remote_filesystem.h). Query parameters of a URI (`s3://bucket/out?
endpoint_override=host:port&scheme=http`) apply to the dataset's every file.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import urllib.parse

import pyarrow.fs as pafs

_S3_QUERY = ("region", "endpoint_override", "scheme")
_GCS_QUERY = ("endpoint_override", "scheme")


@dataclasses.dataclass(frozen=True)
class RemoteOptions:
    """Bounds on the calls that reach a remote (s3://, gs://) dataset.

    connect_timeout_seconds: establishing a connection.
    request_timeout_seconds: a request that transfers nothing for this long
      fails (a stall, not a total: a large read that keeps moving is not cut).
    max_attempts: tries of a failing request, backing off between them.
    A store that accepts connections and never answers fails after about
    max_attempts x request_timeout_seconds (30 s by default); one that
    refuses them at once.
    """

    connect_timeout_seconds: float = 5.0
    request_timeout_seconds: float = 10.0
    max_attempts: int = 3

    def __post_init__(self):
        for name in ("connect_timeout_seconds", "request_timeout_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and 0 < value <= 3600):
                raise ValueError(f"RemoteOptions.{name} must be a number of seconds in (0, 3600], got {value!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or not (
                1 <= self.max_attempts <= 100):
            raise ValueError(f"RemoteOptions.max_attempts must be an integer in 1..100, got {self.max_attempts!r}")

    def as_native(self) -> tuple[float, float, int]:
        return float(self.connect_timeout_seconds), float(self.request_timeout_seconds), self.max_attempts


def _query(parts: urllib.parse.SplitResult, allowed: tuple[str, ...], uri: str) -> dict:
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        raise ValueError(f"{uri}: unknown query parameter {unknown[0]!r} (known: {', '.join(allowed)})")
    return query


def filesystem_of(uri: str, remote: RemoteOptions = RemoteOptions()) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path on it) of a URI or local path; ValueError / OSError / ArrowException when unusable."""
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme == "s3":
        parts = urllib.parse.urlsplit(uri)
        query = _query(parts, _S3_QUERY, uri)
        bucket = parts.hostname or ""
        options = {key: query[key] for key in _S3_QUERY if key in query}
        if parts.username:
            options.update(access_key=urllib.parse.unquote(parts.username),
                           secret_key=urllib.parse.unquote(parts.password or ""))
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint and "endpoint_override" not in options:
            # The standard variable, as Arrow's from_uri and boto3 read it (S3FileSystem itself does not).
            scheme_of, _, host = endpoint.rpartition("://")
            options["endpoint_override"] = host.rstrip("/")
            options.setdefault("scheme", scheme_of or "https")
        if "region" not in options and "endpoint_override" not in options and bucket:
            # As Arrow's own from_uri: a bucket's region, asked of S3 once.
            options["region"] = pafs.resolve_s3_region(bucket)
        filesystem = pafs.S3FileSystem(
            connect_timeout=remote.connect_timeout_seconds, request_timeout=remote.request_timeout_seconds,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=remote.max_attempts), **options)
        return filesystem, (bucket + parts.path).rstrip("/")
    if scheme in ("gs", "gcs"):
        parts = urllib.parse.urlsplit(uri)
        query = _query(parts, _GCS_QUERY, uri)
        limit = remote.max_attempts * (remote.connect_timeout_seconds + remote.request_timeout_seconds)
        filesystem = pafs.GcsFileSystem(retry_time_limit=datetime.timedelta(seconds=limit),
                                        **{key: query[key] for key in _GCS_QUERY if key in query})
        return filesystem, ((parts.hostname or "") + parts.path).rstrip("/")
    return pafs.FileSystem.from_uri(uri)


def child_uri(location: str, relative: str) -> str:
    """The URI (or path) of `relative` below a directory location, keeping the location's query parameters."""
    if "://" not in location:
        return location.rstrip("/") + "/" + relative
    parts = urllib.parse.urlsplit(location)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + relative))
