"""A real S3 protocol server on loopback for tests: moto's standalone server in a subprocess.

The job and the reader reach it as they reach AWS: through the standard
environment (AWS_ENDPOINT_URL, keys, region), which Arrow (C++ and Python)
and boto3 read. `requests()` counts the server's requests (moto's own log),
and a CountingProxy in front of it counts the bytes each object sent, so a
test can tell whether bytes came from the store or a cache.
"""

from __future__ import annotations

import collections
import contextlib
import http
import http.client
import http.server
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import pyarrow.fs as pafs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    def __init__(self, log_path: str):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log_path = log_path
        self._log = open(log_path, "wb")
        self._process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                         stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                break
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto's S3 server did not start: {open(log_path, 'rb').read()[-2000:]!r}")
            time.sleep(0.1)

    @property
    def env(self) -> dict:
        """The environment that points AWS clients (Arrow, boto3) at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}

    def filesystem(self) -> pafs.S3FileSystem:
        return pafs.S3FileSystem(endpoint_override=self.endpoint, access_key="testing", secret_key="testing",
                                 region="us-east-1", allow_bucket_creation=True, allow_bucket_deletion=True)

    def create_bucket(self, name: str) -> str:
        self.filesystem().create_dir(name)
        return f"s3://{name}"

    def upload(self, local_dir: str, bucket_path: str) -> None:
        pafs.copy_files(local_dir, bucket_path, source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=self.filesystem())

    def requests(self, method: str = "GET", path_part: str = "") -> int:
        """Requests the server logged so far with this method whose path contains path_part."""
        self._log.flush()
        with open(self._log_path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
        return sum(1 for line in lines if f'"{method} ' in line and path_part in line)

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._log.close()


@contextlib.contextmanager
def silent_server(drop_connections: bool = False):
    """A TCP server on loopback that never answers: a store that hangs. Its connections are accepted (the
    kernel completes them, nothing reads), or with drop_connections never made: the one place of its accept
    queue is taken at once, so the kernel drops every further connection's SYN and connecting times out."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0 if drop_connections else 64)
    address = listener.getsockname()
    filler = socket.create_connection(address, timeout=5) if drop_connections else None
    try:
        yield f"127.0.0.1:{address[1]}"
    finally:
        if filler is not None:
            filler.close()
        listener.close()


@contextlib.contextmanager
def status_server(status: int):
    """An HTTP server on loopback answering every request with `status` and an S3 error body: a store that is
    up but will not serve (503 while it restarts, 403 for the credentials given)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{http.HTTPStatus(status).phrase.replace(" ", "")}'
                    f"</Code><Message>stub</Message></Error>").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _answer

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class CountingProxy:
    """An HTTP proxy on loopback in front of the S3 server that counts the body bytes it served per object
    path. Readers reach it through the location's query (`?endpoint_override=127.0.0.1:PORT&scheme=http`),
    from this process or from others."""

    _HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}

    def __init__(self, server: S3Server):
        self._lock = threading.Lock()
        self._sent: collections.Counter[str] = collections.Counter()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in proxy._HOP_BY_HOP}
                upstream = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    payload = response.read()
                    self.send_response(response.status, response.reason)
                    head = self.command == "HEAD"  # no body: the object's own Content-Length
                    for key, value in response.getheaders():
                        if key.lower() not in proxy._HOP_BY_HOP and (head or key.lower() != "content-length"):
                            self.send_header(key, value)
                    if not head:
                        self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                        with proxy._lock:
                            proxy._sent[urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)] += len(payload)
                finally:
                    upstream.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def located(self, uri: str) -> str:
        """`uri` read through this proxy."""
        return f"{uri}?endpoint_override=127.0.0.1:{self.port}&scheme=http"

    def sent(self, path_part: str = "") -> int:
        """Body bytes served so far for object paths containing path_part."""
        with self._lock:
            return sum(n for path, n in self._sent.items() if path_part in path)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
