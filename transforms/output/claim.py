"""One run at a time per output directory: an exclusive, heartbeated claim.

A run claims its output before any other work and releases it when it ends;
a second run fails at once naming the holder (host, pid, start time, run id).

Local paths: `.claim.json` is created with O_CREAT|O_EXCL, which the kernel
makes atomic, and its mtime is the heartbeat.

Object stores (gs://, s3://) have atomic single-object writes but no
exclusive create through Beam's FileSystems, so claims use a listing
protocol: each run writes `.claims/<run id>.json` once and rewrites
`.claims/<run id>.alive` as its heartbeat, then lists `.claims/`. The live
claim written first (by the store's own timestamp, ties by name) holds the
directory; the others withdraw. This is safe as long as listings are strongly
consistent and the store stamps an object when it becomes visible (GCS and
S3 both do): if A was stamped before B, B's listing (after B's write) sees A.
Stamps tie within the store's granularity (S3: a second), so a run lists only
once the store has stamped its heartbeat a second past its claim: every claim
stamped no later than its own is then visible to it.

A claim is stale when its holder provably died (same host, pid gone or
reused) — then the next run breaks it by itself and says so — or when its
heartbeat is older than `stale_after_seconds` (another host may have died or
be partitioned); such a claim is broken only when asked (`--break-claim`).

A local claim also respects `_claim.json`, the name shardmill used before
output format 3, so an older version still writing the directory keeps it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import socket
import threading
import time

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from shardmill.core.errors import EXIT_BAD_INVOCATION, EXIT_FAILED, ShardmillError
from shardmill.transforms.common.filesystem import is_local
from shardmill.core.output_contract import CLAIM_NAME, CLAIMS_DIR_NAME, FORMAT2_CLAIM_NAME

_LOG = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 30.0
STALE_AFTER_SECONDS = 300.0
# Object stores' timestamps: S3 stamps to the second (GCS to the millisecond). A claim lists the others only once
# the store's clock is this far past its own stamp, waiting at most STAMP_WAIT_SECONDS.
STAMP_GRANULARITY_SECONDS = 1.0
STAMP_WAIT_SECONDS = 15.0


class ClaimHeldError(ShardmillError, RuntimeError):
    """Another run holds the output directory (refused before any work)."""

    exit_code = EXIT_BAD_INVOCATION


class ClaimLostError(ShardmillError, RuntimeError):
    """This run's claim was broken or replaced while it ran."""

    exit_code = EXIT_FAILED


def _process_start(pid: int) -> str | None:
    """The kernel's start time of a process (clock ticks since boot), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _process_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    current = _process_start(pid)
    return start is None or current is None or current == start


@dataclasses.dataclass(frozen=True)
class ClaimInfo:
    """Who holds a claim."""

    run_id: str
    host: str
    pid: int
    pid_start: str | None
    started: float  # unix time

    @classmethod
    def for_this_process(cls, run_id: str) -> "ClaimInfo":
        return cls(run_id, socket.gethostname(), os.getpid(), _process_start(os.getpid()), time.time())

    @classmethod
    def parse(cls, data: bytes) -> "ClaimInfo":
        raw = json.loads(data)
        return cls(str(raw["run_id"]), str(raw["host"]), int(raw["pid"]), raw.get("pid_start"), float(raw["started"]))

    def to_bytes(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started))
        return f"run {self.run_id} (host {self.host}, pid {self.pid}, started {started})"

    def provably_dead(self) -> bool:
        return self.host == socket.gethostname() and not _process_alive(self.pid, self.pid_start)


class OutputClaim:
    """An exclusive claim of one run on an output directory.

    Construction does nothing; acquire() takes the claim, start_heartbeat()
    keeps it fresh from a daemon thread, release() stops the heartbeat and
    removes the claim (idempotent).
    """

    def __init__(self, output_dir: str, run_id: str, *,
                 heartbeat_seconds: float = HEARTBEAT_SECONDS, stale_after_seconds: float = STALE_AFTER_SECONDS):
        self._dir = output_dir.rstrip("/")
        self._info = ClaimInfo.for_this_process(run_id)
        self._local = is_local(output_dir)
        self._heartbeat_seconds = heartbeat_seconds
        self._stale_after = stale_after_seconds
        self._held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def info(self) -> ClaimInfo:
        return self._info

    # -- acquiring ---------------------------------------------------------

    def acquire(self, break_stale: bool = False) -> list[str]:
        """Takes the claim; returns notes on claims it broke. Raises ClaimHeldError naming the holder.

        OSError (not writable, no space, a file in the way) propagates.
        """
        notes = self._acquire_local(break_stale) if self._local else self._acquire_listing(break_stale)
        self._held = True
        return notes

    def _refusal(self, holder: ClaimInfo, age: float) -> ClaimHeldError:
        if age > self._stale_after:
            return ClaimHeldError(
                f"output {self._dir} is claimed by {holder.describe()}, whose last heartbeat was {age:.0f} s ago: "
                "it probably crashed; pass --break-claim to take the output over")
        return ClaimHeldError(f"output {self._dir} is in use by {holder.describe()}; "
                              "one run at a time may write an output directory")

    def _breakable(self, holder: ClaimInfo | None, age: float, break_stale: bool) -> str | None:
        """Why the holder's claim may be broken now, or None."""
        if holder is None:
            return "unreadable claim" if age > self._heartbeat_seconds or break_stale else None
        if holder.provably_dead():
            return f"its process is gone ({holder.describe()})"
        if break_stale and age > self._stale_after:
            return f"--break-claim, last heartbeat {age:.0f} s ago ({holder.describe()})"
        return None

    def _acquire_local(self, break_stale: bool) -> list[str]:
        created = not os.path.exists(self._dir)
        os.makedirs(self._dir, exist_ok=True)
        try:
            return self._create_local_claim(break_stale)
        except OSError:
            if created:  # leave nothing behind for an output that could not be claimed
                shutil.rmtree(self._dir, ignore_errors=True)
            raise

    def _create_local_claim(self, break_stale: bool) -> list[str]:
        path = os.path.join(self._dir, CLAIM_NAME)
        notes = []
        for _ in range(100):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder, age = self._read_local(path)
                reason = self._breakable(holder, age, break_stale)
                if reason is None:
                    if holder is None:  # being written by a racing run this instant
                        time.sleep(0.05)
                        continue
                    raise self._refusal(holder, age)
                # A rename is atomic: of several runs breaking the same claim, one wins.
                broken = f"{path}.broken-{self._info.run_id}"
                try:
                    os.rename(path, broken)
                    os.remove(broken)
                    notes.append(f"broke the claim of a crashed run: {reason}")
                except FileNotFoundError:
                    pass
                continue
            try:
                os.write(fd, self._info.to_bytes())
                os.fsync(fd)
            except OSError:
                os.close(fd)
                os.remove(path)
                raise
            os.close(fd)
            try:
                return notes + self._check_format2_claim(break_stale)
            except ClaimHeldError:
                os.remove(path)
                raise
        raise ClaimHeldError(f"output {self._dir}: could not take {CLAIM_NAME} (contended)")

    def _check_format2_claim(self, break_stale: bool) -> list[str]:
        """Raises ClaimHeldError while an older shardmill holds the directory; removes its claim once breakable."""
        path = os.path.join(self._dir, FORMAT2_CLAIM_NAME)
        if not os.path.exists(path):
            return []
        holder, age = self._read_local(path)
        reason = self._breakable(holder, age, break_stale)
        if reason is None:
            if holder is None:
                raise ClaimHeldError(f"output {self._dir} is claimed by an unreadable {FORMAT2_CLAIM_NAME}")
            raise self._refusal(holder, age)
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        return [f"broke the claim of a crashed run: {reason}"]

    @staticmethod
    def _read_local(path: str) -> tuple[ClaimInfo | None, float]:
        try:
            age = time.time() - os.stat(path).st_mtime
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None, 0.0
        try:
            return ClaimInfo.parse(data), age
        except (ValueError, KeyError, TypeError):
            return None, age

    def _claims_dir(self) -> str:
        return f"{self._dir}/{CLAIMS_DIR_NAME}"

    @staticmethod
    def _heartbeat() -> bytes:
        # Not empty: Beam's S3 writer completes a multipart upload, which S3 refuses without a part.
        return json.dumps({"alive": time.time()}).encode()

    def _write(self, path: str, data: bytes) -> None:
        with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            f.write(data)

    def _acquire_listing(self, break_stale: bool) -> list[str]:
        base = self._claims_dir()
        mine = f"{base}/{self._info.run_id}.json"
        self._write(mine, self._info.to_bytes())
        self._wait_past_stamp(mine, f"{base}/{self._info.run_id}.alive")
        listed = {m.path: m for m in FileSystems.match([f"{base}/*"])[0].metadata_list}
        now = time.time()
        live, notes = [], []
        for path, meta in listed.items():
            if not path.endswith(".json"):
                continue
            alive = listed.get(path[:-len(".json")] + ".alive")
            age = now - (alive.last_updated_in_seconds if alive else meta.last_updated_in_seconds)
            try:
                with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                    holder = ClaimInfo.parse(f.read())
            except Exception:  # noqa: BLE001 - unreadable, or gone: Beam's filesystems raise their own errors
                if path != mine and not FileSystems.exists(path):
                    continue  # withdrawn since the listing (a run that lost deletes its claim)
                holder = None
            if path != mine:
                reason = self._breakable(holder, age, break_stale)
                if reason is not None:
                    stale = [p for p in (path, path[:-len(".json")] + ".alive") if p in listed]
                    FileSystems.delete(stale)
                    notes.append(f"broke the claim of a crashed run: {reason}")
                    continue
            live.append((meta.last_updated_in_seconds, path, holder, age))
        live.sort(key=lambda c: (c[0], c[1]))
        if live and live[0][1] != mine:
            self._delete_listing_claim()
            _, _, holder, age = live[0]
            if holder is None:
                raise ClaimHeldError(f"output {self._dir} is claimed by an unreadable claim {live[0][1]}")
            raise self._refusal(holder, age)
        return notes

    def _wait_past_stamp(self, mine: str, alive: str) -> None:
        """Writes the heartbeat until the store stamps it at least STAMP_GRANULARITY_SECONDS after this claim.

        S3 stamps objects to the second: two claims written within one second tie, and the one that listed
        before the other was visible would see itself alone and win, while the other, seeing both, breaks the
        tie by name and may win too (seen: two winners of three). Listing only once the store's own clock has
        passed this claim's second means every claim stamped no later than this one is visible to the listing,
        so both see both and agree."""
        stamp = FileSystems.match([mine])[0].metadata_list[0].last_updated_in_seconds
        deadline = time.monotonic() + STAMP_WAIT_SECONDS
        while True:
            self._write(alive, self._heartbeat())
            matched = FileSystems.match([alive])[0].metadata_list
            if matched and matched[0].last_updated_in_seconds >= stamp + STAMP_GRANULARITY_SECONDS:
                return
            if time.monotonic() > deadline:
                self._delete_listing_claim()
                raise ClaimLostError(f"output {self._dir}: the store's clock did not pass the claim's stamp within "
                                     f"{STAMP_WAIT_SECONDS:g} s; cannot tell which run claimed first")
            time.sleep(0.25)

    def _delete_listing_claim(self) -> None:
        base = self._claims_dir()
        paths = [f"{base}/{self._info.run_id}.json", f"{base}/{self._info.run_id}.alive"]
        existing = [p for p in paths if FileSystems.exists(p)]
        if existing:
            FileSystems.delete(existing)

    # -- holding -----------------------------------------------------------

    def check_held(self) -> None:
        """Raises ClaimLostError unless this run still holds the claim (checked before committing)."""
        if self._local:
            holder, _ = self._read_local(os.path.join(self._dir, CLAIM_NAME))
        else:
            path = f"{self._claims_dir()}/{self._info.run_id}.json"
            holder = self._info if FileSystems.exists(path) else None
        if holder is None or holder.run_id != self._info.run_id:
            raise ClaimLostError(f"output {self._dir}: this run's claim was broken by another run; not committing")

    def beat(self) -> None:
        """Marks the claim alive now."""
        if self._local:
            os.utime(os.path.join(self._dir, CLAIM_NAME))
        else:
            self._write(f"{self._claims_dir()}/{self._info.run_id}.alive", self._heartbeat())

    def start_heartbeat(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._heartbeat_loop, name="shardmill-claim-heartbeat", daemon=True)
        self._thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self._heartbeat_seconds):
            try:
                self.beat()
            except OSError as err:
                _LOG.warning("could not refresh the claim on %s: %s", self._dir, err)

    def release(self) -> None:
        """Stops the heartbeat and removes the claim if this run still holds it (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if not self._held:
            return
        self._held = False
        try:
            if self._local:
                path = os.path.join(self._dir, CLAIM_NAME)
                holder, _ = self._read_local(path)
                if holder is not None and holder.run_id == self._info.run_id:
                    os.remove(path)
            else:
                self._delete_listing_claim()
        except OSError as err:
            _LOG.warning("could not remove the claim on %s: %s", self._dir, err)
