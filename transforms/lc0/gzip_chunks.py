"""Reading, counting and validating gzip-compressed record chunks.

A chunk is a byte range of a source file (a whole loose `.gz` file, or one
member of a `.tar` archive) holding one or more gzip members whose
concatenated payload is a whole number of fixed-size records.

Counting records without inflating them rests on two facts of RFC 1952:
- the trailer's ISIZE is the uncompressed size mod 2^32 of the LAST member;
- every member starts with the bytes 1f 8b 08 (magic + deflate method).
So a chunk's ISIZE gives its size when the chunk is a single member under
4 GiB. A member can't expand more than 1032:1 (a 258-byte match costs at
least 2 bits), so a chunk of fewer than 2^32/1032 compressed bytes is under
4 GiB; and a chunk with no `1f 8b 08` after its first header holds only one
member. Whatever these checks can't settle is inflated and counted exactly.

Everything here is plain Python over bytes and file objects (no Beam).
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import BinaryIO, Iterator

from shardmill.transforms.lc0 import record_format

GZIP_MAGIC = b"\x1f\x8b"
GZIP_MEMBER_START = b"\x1f\x8b\x08"  # magic + CM=8 (deflate), the only method
GZIP_HEADER_MIN = 10
GZIP_TRAILER = 8
# Smallest possible member: header, an empty fixed-Huffman final block, trailer.
GZIP_MEMBER_MIN = GZIP_HEADER_MIN + 2 + GZIP_TRAILER
# Upper bound on deflate's expansion ratio (see module docstring).
MAX_DEFLATE_RATIO = 1032

FIRST_BLOCK_BYTES = 16 * 1024  # enough for a gzip header and a Huffman table
BLOCK_BYTES = 1024 * 1024
INFLATE_PIECE_BYTES = 4 * 1024 * 1024  # bounds memory when inflating huge chunks
# Largest inflated chunk accepted (IndexConfig.max_chunk_bytes): a game is at most a few MB, while
# a few MB of deflate can inflate to gigabytes (a gzip bomb, or a corrupt trailer).
DEFAULT_MAX_CHUNK_BYTES = 64 << 20


class ChunkError(Exception):
    """A chunk that can't be used. `reason` is a short stable code for accounting."""

    # The reason codes, with what each means.
    REASONS = {
        "not_gzip": "the bytes do not start with a gzip header",
        "truncated": "the data ends before the gzip stream or the archive member does",
        "corrupt": "the deflate data or the CRC32/ISIZE check is wrong",
        "trailing_garbage": "bytes after the last gzip member are not another member",
        "empty": "the chunk holds no records",
        "bad_size": "the payload size is not a multiple of the record size",
        "unknown_version": "the record version is not one of the known lc0 versions",
        "wrong_version": "the record version differs from the configured one",
        "count_mismatch": "decompressing gave another record count than the index",
        "too_large": "the chunk inflates to more than index.max_chunk_bytes",
    }

    def __init__(self, reason: str, detail: str):
        if reason not in self.REASONS:
            raise ValueError(f"unknown ChunkError reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class ChunkCount:
    """What indexing learned about one chunk."""

    version: int
    record_size: int
    num_records: int
    # True when the count came from inflating the whole chunk (CRC checked).
    verified: bool


class ChunkSpan:
    """The byte range [offset, offset + length) of an open, seekable source file."""

    def __init__(self, fileobj: BinaryIO, offset: int, length: int):
        self._file = fileobj
        self.offset = offset
        self.length = length

    def read(self, pos: int, size: int) -> bytes:
        """Up to `size` bytes from position `pos` of the chunk (fewer if the file is short)."""
        size = max(0, min(size, self.length - pos))
        self._file.seek(self.offset + pos)
        return self._file.read(size)

    def iter_blocks(self) -> Iterator[bytes]:
        """The chunk's bytes in order; raises ChunkError('truncated') if the file ends early."""
        pos = 0
        block = FIRST_BLOCK_BYTES
        while pos < self.length:
            data = self.read(pos, block)
            if not data:
                raise ChunkError(
                    "truncated", f"source ends after {pos} of the chunk's {self.length} bytes"
                )
            pos += len(data)
            yield data
            block = BLOCK_BYTES


def _raise_for_zlib_error(err: zlib.error, member_index: int) -> None:
    text = str(err)
    if "incorrect header check" in text or "unknown compression method" in text:
        if member_index == 0:
            raise ChunkError("not_gzip", f"invalid gzip header ({text})") from None
        raise ChunkError(
            "trailing_garbage", f"invalid gzip header after member {member_index - 1} ({text})"
        ) from None
    if "incorrect data check" in text:
        raise ChunkError("corrupt", f"CRC32 mismatch in member {member_index}") from None
    if "incorrect length check" in text:
        raise ChunkError("corrupt", f"ISIZE mismatch in member {member_index}") from None
    raise ChunkError("corrupt", f"bad deflate data in member {member_index} ({text})") from None


def inflate_members(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """Inflates a stream of one or more concatenated gzip members.

    Yields the payload in pieces of at most INFLATE_PIECE_BYTES, verifying
    every member's CRC32 and ISIZE (zlib does so at each member's end). Raises
    ChunkError on anything that is not a clean sequence of whole members.
    """
    member_index = 0
    inflater = None  # None between members
    buf = b""  # input not yet handed to zlib
    saw_input = False
    for block in blocks:
        saw_input = saw_input or bool(block)
        buf += block
        while True:
            if inflater is None:
                if len(buf) < len(GZIP_MAGIC):
                    break  # a next member's magic may continue in the next block
                if not buf.startswith(GZIP_MAGIC):
                    if member_index == 0:
                        raise ChunkError("not_gzip", f"starts with {buf[:4].hex()}, not 1f8b")
                    raise ChunkError(
                        "trailing_garbage", f"bytes after member {member_index - 1} are not a gzip member"
                    )
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                out = inflater.decompress(buf, INFLATE_PIECE_BYTES)
            except zlib.error as err:
                _raise_for_zlib_error(err, member_index)
            if out:
                yield out
            if inflater.eof:
                buf = inflater.unused_data
                inflater = None
                member_index += 1
                continue
            buf = inflater.unconsumed_tail
            # With input left, or output held back by the piece limit, go on.
            if not buf and len(out) < INFLATE_PIECE_BYTES:
                break
    if not saw_input:
        raise ChunkError("empty", "0 bytes")
    if inflater is not None:
        raise ChunkError("truncated", f"gzip member {member_index} ends before its trailer")
    if buf:
        raise ChunkError("trailing_garbage", f"{len(buf)} stray bytes after the last member")


def _read_version(span: ChunkSpan) -> int:
    """The version of the chunk's first record: inflates only its first 4 bytes.

    Asking zlib for 4 bytes stops it long before the trailer, so no CRC is
    checked here whatever the chunk's size (only inflating all of it does).
    """
    head = span.read(0, FIRST_BLOCK_BYTES)
    try:
        first = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 4)
    except zlib.error as err:
        _raise_for_zlib_error(err, 0)
    if len(first) == 4:
        return record_format.parse_version(first)
    # Rare: an empty or tiny first member, or a huge gzip header. Walk the members.
    first = b""
    for piece in inflate_members(span.iter_blocks()):
        first += piece
        if len(first) >= 4:
            return record_format.parse_version(first)
    if not first:
        raise ChunkError("empty", "the gzip payload is 0 bytes")
    raise ChunkError("bad_size", f"payload is {len(first)} bytes, less than one record")


def _check_version(version: int, expected_version: int) -> int:
    record_size = record_format.record_size_for_version(version)
    if record_size is None:
        known = sorted(record_format.RECORD_SIZES)
        raise ChunkError("unknown_version", f"record version {version} is not one of {known}")
    if expected_version and version != expected_version:
        raise ChunkError("wrong_version", f"record version {version}, config wants {expected_version}")
    return record_size


def _records_from_size(payload_bytes: int, record_size: int) -> int:
    if payload_bytes == 0:
        raise ChunkError("empty", "the gzip payload is 0 bytes")
    if payload_bytes % record_size:
        raise ChunkError(
            "bad_size",
            f"payload of {payload_bytes} bytes is not a multiple of the {record_size}-byte record",
        )
    return payload_bytes // record_size


def _may_hold_several_members(span: ChunkSpan) -> bool:
    """True if a second gzip member might start somewhere in the chunk.

    Reads the compressed bytes (no inflation) and looks for 1f 8b 08 followed
    by a flag byte with its reserved bits clear, at any position where a
    second member could start. A hit in the middle of deflate data is a false
    alarm that only costs an inflation (about 1 in 2^27 per byte).
    """
    first_possible = GZIP_MEMBER_MIN
    last_possible = span.length - GZIP_MEMBER_MIN
    if last_possible < first_possible:
        return False
    carry = b""
    base = 0  # chunk position of carry[0]
    for block in span.iter_blocks():
        data = carry + block
        start = 0
        while True:
            hit = data.find(GZIP_MEMBER_START, start)
            if hit < 0 or hit + 3 >= len(data):
                break
            pos = base + hit
            if pos > last_possible:
                return False
            if pos >= first_possible and data[hit + 3] & 0xE0 == 0:
                return True
            start = hit + 1
        keep = min(len(data), 3)
        carry = data[len(data) - keep :]
        base += len(data) - keep
    return False


def _too_large(size: int, max_bytes: int) -> ChunkError:
    return ChunkError("too_large", f"inflates to {size:,}+ bytes, more than the {max_bytes:,} of index.max_chunk_bytes")


def _bounded_pieces(span: ChunkSpan, max_bytes: int) -> Iterator[bytes]:
    """The chunk's payload pieces; ChunkError too_large as soon as they pass max_bytes."""
    total = 0
    for piece in inflate_members(span.iter_blocks()):
        total += len(piece)
        if total > max_bytes:
            raise _too_large(total, max_bytes)
        yield piece


def count_by_inflating(span: ChunkSpan, record_size: int, max_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> int:
    """Exact record count of a chunk, inflating all of it (CRC verified) in pieces of bounded size."""
    total = sum(len(piece) for piece in _bounded_pieces(span, max_bytes))
    return _records_from_size(total, record_size)


def count_records(span: ChunkSpan, method: str = "scan", expected_version: int = 0,
                  max_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> ChunkCount:
    """Record count, version and record size of one chunk.

    method: "trailer", "scan" or "decompress" (see CountMethod in the config
    schema). Raises ChunkError for any chunk that can't be used, too_large
    for one that inflates beyond max_bytes (from the trailer when it proves
    the size, else while inflating, never holding more than a piece).
    """
    if method not in ("trailer", "scan", "decompress"):
        raise ValueError(f"unknown count method {method!r}")
    if span.length == 0:
        raise ChunkError("empty", "0 bytes")
    magic = span.read(0, 3)
    if len(magic) < min(3, span.length):
        raise ChunkError("truncated", "source ends inside the chunk's first bytes")
    if not GZIP_MEMBER_START.startswith(magic[:2]):
        raise ChunkError("not_gzip", f"starts with {magic.hex()}, not 1f8b")
    if span.length < GZIP_MEMBER_MIN:
        raise ChunkError("truncated", f"{span.length} bytes is shorter than any gzip member")
    if magic[2] != 8:
        raise ChunkError("not_gzip", f"compression method {magic[2]} is not deflate (8)")

    version = _read_version(span)
    record_size = _check_version(version, expected_version)
    inflated = ChunkCount(version, record_size, 0, verified=True)
    if method == "decompress":
        return dataclasses.replace(inflated, num_records=count_by_inflating(span, record_size, max_bytes))

    trailer = span.read(span.length - GZIP_TRAILER, GZIP_TRAILER)
    if len(trailer) < GZIP_TRAILER:
        raise ChunkError("truncated", "source ends before the chunk's trailer")
    isize = int.from_bytes(trailer[4:], "little")
    trailer_is_the_size = (
        span.length * MAX_DEFLATE_RATIO < 2**32  # so the true size is < 4 GiB
        and 0 < isize <= span.length * MAX_DEFLATE_RATIO
        and isize % record_size == 0
        and not (method == "scan" and _may_hold_several_members(span))
    )
    if trailer_is_the_size:
        if isize > max_bytes:
            raise _too_large(isize, max_bytes)
        return ChunkCount(version, record_size, isize // record_size, verified=False)
    return dataclasses.replace(inflated, num_records=count_by_inflating(span, record_size, max_bytes))


def inflate_chunk(span: ChunkSpan, max_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> bytes:
    """The whole payload of a chunk (all members), CRC verified; too_large beyond max_bytes."""
    return b"".join(_bounded_pieces(span, max_bytes))
