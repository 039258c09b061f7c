"""A compressed text log as a stream of inflated bytes, a bounded chunk at a time.

gzip is inflated here (zlib, member after member) so that what is wrong with
a file can be said: a stream that is not gzip at all, data after the last
member that is not gzip (kept: the members before it are whole and checked),
a truncated or corrupt member (the file is lost). zstd and bz2 go through
Arrow's decompressing streams. Whatever the codec, a stream of another kind
(gzip, zstd, bzip2, xz, zip) is named for what it is and the suffix it needs.
Either way no call inflates more than CHUNK_BYTES, so a bomb costs time, not
memory.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator

import pyarrow as pa

from shardmill.core.errors import EXIT_BAD_INVOCATION, ShardmillError

CHUNK_BYTES = 8 << 20  # inflated bytes per step
_READ_BYTES = 1 << 20  # compressed bytes read per step

_GZIP_MAGIC = b"\x1f\x8b"
# What each kind of stream starts with, to name a stream for what it is whatever its file is named:
# (magic, its codec here (None: one the job can't read), what it is, its suffix).
_MAGICS = ((_GZIP_MAGIC, "gzip", "a gzip stream", ".gz"), (b"\x28\xb5\x2f\xfd", "zstd", "a zstd stream", ".zst"),
           (b"BZh", "bz2", "a bzip2 stream", ".bz2"), (b"\xfd7zXZ\x00", None, "an xz stream", ".xz"),
           (b"PK\x03\x04", None, "a zip archive", ".zip"))
_HEAD_BYTES = max(len(magic) for magic, *_ in _MAGICS)
# zstd's skippable frames (magic 0x184D2A50 to 0x184D2A5F, little-endian) may open a zstd stream too.
_ZSTD_SKIPPABLE = re.compile(rb"[\x50-\x5f]\x2a\x4d\x18")


class InflateError(ShardmillError, ValueError):
    """The stream can't be inflated past `consumed` compressed bytes (0: not from its first byte)."""

    exit_code = EXIT_BAD_INVOCATION

    def __init__(self, message: str, consumed: int):
        super().__init__(message)
        self.consumed = consumed


def _another_codec(head: bytes, codec: str, suffix: str) -> str | None:
    """What a stream read as `codec` is instead, named with its proper suffix; None when it is not another
    known stream."""
    for magic, other, name, proper in _MAGICS:
        if other != codec and head.startswith(magic):
            return f"{name} named {suffix} (rename it {proper})"
    return None


def _own_magic(head: bytes, codec: str) -> bool:
    magic = next(magic for magic, other, *_ in _MAGICS if other == codec)
    return head.startswith(magic) or (codec == "zstd" and _ZSTD_SKIPPABLE.match(head) is not None)


def _what_it_is(head: bytes, codec: str, suffix: str) -> str:
    """Why a stream that does not open as `codec` does not: another stream misnamed, or its first bytes."""
    other = _another_codec(head, codec, suffix)
    if other:
        return other
    magic = next(magic for magic, known, *_ in _MAGICS if known == codec)
    shown = " ".join(f"{b:02x}" for b in head[:4])
    expected = " ".join(f"{b:02x}" for b in magic)
    return f"not {codec}: starts with bytes {shown}, not {expected}" if head else f"empty: no {codec} member"


class InflatedStream:
    """Inflated chunks of one compressed file (`chunks()`), and what was met on the way.

    consumed: compressed bytes inflated so far. trailing: after a complete
    read, what followed the last gzip member that is not gzip ("" if nothing).
    """

    def __init__(self, f, codec: str, suffix: str = ".gz", chunk_bytes: int = CHUNK_BYTES):
        self._f = f
        self._codec = codec
        self._suffix = suffix
        self._chunk_bytes = chunk_bytes
        self.consumed = 0
        self.trailing = ""

    def chunks(self) -> Iterator[bytes]:
        """Raises InflateError where the stream stops making sense."""
        if self._codec == "gzip":
            yield from self._gzip_chunks()
        else:
            yield from self._arrow_chunks()

    def _read(self) -> bytes:
        return self._f.read(_READ_BYTES)

    def _gzip_chunks(self) -> Iterator[bytes]:
        pending, at_end, members = b"", False, 0
        inflater = None
        while True:
            if inflater is None:  # at a member boundary: is what follows gzip?
                while len(pending) < 2 and not at_end:
                    block = self._read()
                    at_end = not block
                    pending += block
                if not pending and members:
                    return
                if not pending.startswith(_GZIP_MAGIC):
                    if not members:
                        raise InflateError(_what_it_is(pending, "gzip", self._suffix), 0)
                    rest = len(pending)
                    while block := self._read():
                        rest += len(block)
                    self.trailing = (f"{rest:,} bytes of trailing data that are not gzip after the last member "
                                     f"(from byte {self.consumed:,}; {_what_it_is(pending, 'gzip', self._suffix)})")
                    return
                inflater = zlib.decompressobj(31)  # one gzip member; its CRC-32 and length are checked
                members += 1
            try:
                out = inflater.decompress(pending, self._chunk_bytes)
            except zlib.error as err:
                raise InflateError(f"corrupt gzip data in member {members} (compressed bytes {self.consumed:,} to "
                                   f"{self.consumed + len(pending):,}): {err}", self.consumed) from None
            rest = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
            self.consumed += len(pending) - len(rest)
            pending = rest
            if out:
                yield out
            if inflater.eof:
                inflater = None
            elif len(out) < self._chunk_bytes and not pending:  # everything given was inflated: more input is needed
                block = b"" if at_end else self._read()
                if not block:
                    raise InflateError(f"truncated: gzip member {members} ends at compressed byte "
                                       f"{self.consumed:,} without its trailer", self.consumed)
                pending = block

    def _arrow_chunks(self) -> Iterator[bytes]:
        head = b""
        while len(head) < _HEAD_BYTES and (block := self._f.read(_HEAD_BYTES - len(head))):
            head += block
        other = _another_codec(head, self._codec, self._suffix)
        if other:  # Arrow would only say the frame makes no sense
            raise InflateError(other, 0)
        counted = _CountingReader(self._f, head)
        try:
            with pa.CompressedInputStream(counted, self._codec) as stream:
                while block := stream.read(self._chunk_bytes):
                    self.consumed = counted.count
                    yield block
        except (pa.ArrowException, OSError) as err:
            if not self.consumed and not _own_magic(head, self._codec):  # not this codec from its first byte
                raise InflateError(_what_it_is(head, self._codec, self._suffix), 0) from None
            raise InflateError(f"{self._codec}: {err} (at or after compressed byte {counted.count:,})",
                               counted.count) from None
        self.consumed = counted.count


class _CountingReader:
    """A binary file that counts the bytes read from it (Arrow's stream reads ahead, so this is an upper bound)."""

    def __init__(self, f, head: bytes = b""):
        self._f = f
        self._head = head  # bytes already read from f, given first
        self.count = 0
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        if n >= 0 and n <= len(self._head):
            data, self._head = self._head[:n], self._head[n:]
        else:
            data, self._head = self._head + self._f.read(n - len(self._head) if n >= 0 else -1), b""
        self.count += len(data)
        return data

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True  # the caller owns the file


# The launcher sizes shards by a compressed log's inflated bytes, measured on its head: at most this much
# compressed input (one read), inflated to at most this much (discarded as it comes: memory stays bounded).
MEASURE_INPUT_BYTES = 1 << 20
MEASURE_OUTPUT_BYTES = 64 << 20
# Compressed bytes handed to the inflater per read while measuring: Arrow's streams read ahead of what they
# have inflated, and the bytes counted as consumed are off by at most this much.
_MEASURE_READ_BYTES = 1 << 10
# Inflated bytes asked for per step while measuring: Arrow's streams give nothing of a step the head's end
# cuts, so what a truncated head loses is at most this much.
_MEASURE_CHUNK_BYTES = 64 << 10


def inflation_of_head(head: bytes, codec: str, whole: bool) -> float | None:
    """Inflated bytes per compressed byte of a compressed stream's first bytes (whole: the file entire, so the
    ratio is exact unless MEASURE_OUTPUT_BYTES stopped it); None when nothing inflates (another format, or
    damaged from its first byte)."""
    stream = InflatedStream(_SmallReads(head), codec, chunk_bytes=_MEASURE_CHUNK_BYTES)
    inflated = 0
    try:
        for chunk in stream.chunks():
            inflated += len(chunk)
            if inflated >= MEASURE_OUTPUT_BYTES:
                break
    except InflateError:
        pass  # a head ends inside the stream: what inflated before its end measures it
    consumed = len(head) if whole and inflated < MEASURE_OUTPUT_BYTES else stream.consumed
    return inflated / consumed if inflated and consumed else None


class _SmallReads:
    """Bytes as a binary file that gives at most _MEASURE_READ_BYTES a read."""

    def __init__(self, data: bytes):
        self._data = memoryview(data)
        self._at = 0

    def read(self, n: int = -1) -> bytes:
        n = _MEASURE_READ_BYTES if n < 0 else min(n, _MEASURE_READ_BYTES)
        data = bytes(self._data[self._at : self._at + n])
        self._at += len(data)
        return data
