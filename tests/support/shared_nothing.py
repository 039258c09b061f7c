"""A cluster on one machine whose workers share nothing with the launcher but the object store.

Beam's Python job service is single-host (it hands external workers a `localhost` control endpoint), so a
multi-host run is out of reach on a test machine. What it can do is give the two sides nothing to share but the
network: each in a mount namespace of its own (`unshare --mount`, root only), with private tmpfs on /tmp,
/var/tmp and /dev/shm and a HOME of its own, and an S3 server (moto) as the only storage both reach.

- the store: moto's S3 server, in this process's namespace (the one place both sides reach).
- the launcher: Beam's job service holds its namespace; `shardmill` commands run in it through nsenter
  (`launcher_command`), so whatever the launcher writes to local disk (its /tmp, its HOME) no worker sees.
- the workers: Beam's SDK worker pool (worker_pool_main) in another namespace, its workers its children
  there; the installed package and the checkout are bound read-only, its working directory is outside the
  checkout, its environment has the store's endpoint and credentials unless a test starts it without them.

Every process is started in its own session and killed by process group at the end (also after a failure);
the namespaces, and their tmpfs mounts, end with their last process. Logs stay in this process's namespace.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import shardmill
from tests.support.cli import SHARDMILL, interruptible
from tests.support.s3_server import S3Server, free_port

PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
HOME = "/tmp/home"  # inside a side's private /tmp
WORK_DIR = "/tmp/work"
STORE_ENV_NAMES = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                   "AWS_REGION", "AWS_EC2_METADATA_DISABLED")


def isolation_unavailable() -> str | None:
    """Why a private mount namespace with a tmpfs /tmp cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "private mount namespaces need root (unshare --mount, mount -t tmpfs); running as uid " \
               f"{os.geteuid()}"
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return "unshare or nsenter (util-linux) is not installed"
    if not os.path.isdir(STASH):
        return f"{STASH} (where a private directory's original tree is reached while it is replaced) is missing"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs tmpfs /tmp && test ! -e /tmp/.probe"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"unshare --mount with a tmpfs /tmp failed: {probe.stderr.strip() or probe.returncode}"
    return None


def read_only_paths() -> list[str]:
    """What the workers run from, bound read-only in their namespace: the installed package and every directory
    its symlinks lead to (a development install links the checkout's folders), and the interpreter's prefix
    (a venv holds site-packages)."""
    paths = {os.path.realpath(sys.prefix)}
    for package in shardmill.__path__:  # a namespace package: each of its directories
        paths.add(os.path.realpath(package))
        for name in os.listdir(package):
            entry = os.path.join(package, name)
            if os.path.islink(entry):
                paths.add(os.path.dirname(os.path.realpath(entry)))  # the checkout holding the linked folder
    # A path under another bound path is covered by it; binding it again would stack mounts to no end.
    ordered = sorted(paths, key=len)
    return [p for i, p in enumerate(ordered) if not any(p.startswith(q.rstrip("/") + "/") for q in ordered[:i])]


# Where a private directory's original tree is reached for a moment while its tmpfs is mounted (an existing
# directory outside the private ones, covered in the side's namespace only).
STASH = "/mnt"


def _private_side_script(read_only: list[str], command: list[str], keep: list[str] = ()) -> str:
    """The shell that sets up one side's namespace, then execs its command there.

    Paths in read_only or keep that lie under a private directory (a checkout or venv under /tmp, as a CI
    clone may be) are bound back into the side's tmpfs from the original tree: the side runs from them."""
    lines = ["set -e"]
    needed = sorted({*read_only, *keep}, key=len)
    for d in PRIVATE_DIRS:
        under = [p for p in needed if p.startswith(d.rstrip("/") + "/")]
        if under:
            lines.append(f"mount --bind {d} {STASH}")
        lines.append(f"mount -t tmpfs -o size=1g,mode=1777 tmpfs {d}")
        for path in under:
            lines += [f"mkdir -p {_quote(path)}", f"mount --bind {_quote(STASH + path[len(d):])} {_quote(path)}"]
        if under:
            lines.append(f"umount {STASH}")
    for path in read_only:
        lines.append(f"mount --bind {_quote(path)} {_quote(path)}")
        lines.append(f"mount -o remount,bind,ro {_quote(path)}")
    lines += [f"mkdir -p {HOME}/.cache {WORK_DIR}", f"cd {WORK_DIR}",
              "exec " + " ".join(_quote(c) for c in command)]
    return "\n".join(lines)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _wait_for_port(port: int, process: subprocess.Popen, log_path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with code {process.returncode} before listening on {port}: "
                               f"{_tail(log_path)}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s: {_tail(log_path)}")


def _tail(path: str, size: int = 3000) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - size))
        return f.read().decode(errors="replace")


def _kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)


class SharedNothingCluster:
    """The store, the launcher's namespace (with Beam's job service) and the worker pool's namespace. Use as a
    context manager; `runner_args` are what `shardmill run` takes to run there."""

    def __init__(self):
        self._logs = tempfile.mkdtemp(prefix="shardmill-cluster-logs-")
        self._processes: dict[str, subprocess.Popen] = {}
        self._commands: list[subprocess.Popen] = []  # shardmill commands started on the launcher's side
        self.store: S3Server | None = None
        self.job_port = free_port()
        self.worker_port = None

    # -- set-up and tear-down --

    def __enter__(self) -> "SharedNothingCluster":
        try:
            self.store = S3Server(os.path.join(self._logs, "store.log"))
            self._start_launcher()
            self.start_workers(wait=False)  # both start up (import Beam) at once
            self._wait_until_listening("launcher", self.job_port)
            self._wait_until_listening("workers", self.worker_port)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for process in self._commands:
            if process.poll() is None:
                _kill_group(process)
        for name in list(self._processes):
            _kill_group(self._processes.pop(name))
        if self.store is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.store._process.pid, signal.SIGCONT)  # a test may have paused it
            self.store.stop()
            self.store = None
        shutil.rmtree(self._logs, ignore_errors=True)

    def _start(self, name: str, command: list[str], env: dict) -> subprocess.Popen:
        log_path = os.path.join(self._logs, f"{name}.log")
        with open(log_path, "ab") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        self._processes[name] = process
        return process

    def _wait_until_listening(self, name: str, port: int) -> None:
        _wait_for_port(port, self._processes[name], os.path.join(self._logs, f"{name}.log"))

    def _side_env(self, with_store: bool = True) -> dict:
        env = {key: value for key, value in os.environ.items()
               if not key.startswith("AWS_") and key not in ("HOME", "XDG_CACHE_HOME", "TMPDIR", "PWD")}
        # Workers are started with a bare `python` from PATH: make it this interpreter's.
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env.update(HOME=HOME, XDG_CACHE_HOME=f"{HOME}/.cache", PYTHONDONTWRITEBYTECODE="1")
        if with_store:
            env.update(self.store.env)
        return env

    def _start_launcher(self) -> None:
        # Beam's job service, failing a job whose worker died as a cluster's runner does (tests/support/job_service.py)
        checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        command = ["env", f"PYTHONPATH={checkout}", sys.executable, "-m", "tests.support.job_service",
                   "--port", str(self.job_port)]
        script = _private_side_script([], command, keep=[checkout, *read_only_paths()])
        self._start("launcher", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                    self._side_env())

    def start_workers(self, with_store: bool = True, wait: bool = True) -> None:
        """(Re)starts the worker pool in a new namespace of its own; with_store False: without the store's
        endpoint and credentials in its environment. wait: until it listens."""
        if "workers" in self._processes:
            _kill_group(self._processes.pop("workers"))
        self.worker_port = free_port()
        command = [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                   "--service_port", str(self.worker_port)]
        script = _private_side_script(read_only_paths(), command)
        self._start("workers", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                    self._side_env(with_store))
        if wait:
            self._wait_until_listening("workers", self.worker_port)

    def kill_workers(self) -> None:
        """kill -9 of the worker pool and every worker it started (its process group)."""
        _kill_group(self._processes.pop("workers"))

    @contextlib.contextmanager
    def store_paused(self):
        """The store SIGSTOPped while inside, continued after."""
        os.kill(self.store._process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.store._process.pid, signal.SIGCONT)

    # -- what runs where --

    @property
    def runner_args(self) -> list[str]:
        return ["--runner=PortableRunner", f"--job_endpoint=localhost:{self.job_port}",
                "--environment_type=EXTERNAL", f"--environment_config=localhost:{self.worker_port}"]

    def _in(self, side: str, command: list[str]) -> list[str]:
        return ["nsenter", "--target", str(self._processes[side].pid), "--mount", "--wd", "--", *command]

    def launcher_command(self, *args: object) -> list[str]:
        """`shardmill args...` on the launcher's side (its namespace; its environment is the caller's to give:
        `launcher_env`)."""
        return self._in("launcher", [SHARDMILL, *map(str, args)])

    def launcher_env(self) -> dict:
        return self._side_env()

    def start_launcher(self, *args: object, input_text: str = "") -> subprocess.Popen:
        """`shardmill args...` on the launcher's side, started (stdin: input_text); killed at the end if still
        running."""
        process = subprocess.Popen(self.launcher_command(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=self.launcher_env(),
                                   start_new_session=True, preexec_fn=interruptible)
        self._commands.append(process)
        process.stdin.write(input_text)
        process.stdin.close()
        process.stdin = None  # communicate() must not flush it again
        return process

    def run_launcher(self, *args: object, input_text: str | None = None, timeout: float = 300
                     ) -> subprocess.CompletedProcess:
        """`shardmill args...` on the launcher's side to its end; input_text: its stdin (a config as
        `--config /dev/stdin`)."""
        return subprocess.run(self.launcher_command(*args), input=input_text, capture_output=True, text=True,
                              timeout=timeout, env=self.launcher_env())

    def run_on(self, side: str, command: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        """A command in a side's namespace ("launcher" or "workers")."""
        return subprocess.run(self._in(side, command), capture_output=True, text=True, timeout=timeout,
                              env=self._side_env())

    def worker_pids(self) -> list[int]:
        """The worker pool's process and the SDK workers it started (its process group)."""
        pool = self._processes["workers"].pid
        out = subprocess.run(["pgrep", "-g", str(os.getpgid(pool))], capture_output=True, text=True).stdout
        return [int(pid) for pid in out.split()]

    def log(self, name: str) -> str:
        return _tail(os.path.join(self._logs, f"{name}.log"), 20000)
