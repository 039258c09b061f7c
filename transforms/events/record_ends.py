"""Where the records of a CSV/TSV or JSON-lines file end, found block by block without parsing.

JSON lines end at every newline (a JSON value holds no raw newline). A
CSV/TSV newline ends a record when an even number of quotes precede it,
which is Arrow's parse only if every quote opens or closes a field; a file
with any other quote can't be cut and is read whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import numpy as np

from shardmill.transforms.events.formats import delimiter

_NEWLINE, _CR, _QUOTE = 10, 13, 34


SCAN_BLOCK_BYTES = 64 << 20  # a large text file is scanned for record ends this much at a time


class RecordEndScanner:
    """Finds the newlines that end records, block by block (memory: one block, not the file).

    JSON lines: every newline (a JSON value holds no raw newline). CSV/TSV: a
    newline ends a record when an even number of quotes precede it, which is
    Arrow's parse only if every quote opens a field (after a delimiter, a
    line end, the file's start, or a closing quote: a doubled quote) or
    closes one (before a delimiter, a line end, the file's end, or a quote);
    a file with a quote anywhere else can't be split (`why` says where).
    """

    def __init__(self, fmt: str):
        self._quoted = fmt in ("csv", "tsv")
        self._fences = np.array([ord(delimiter(fmt)), _NEWLINE, _CR, _QUOTE], np.uint8)
        self.offset = 0  # bytes scanned
        self.lines = 0  # newlines scanned
        self.why = ""
        self._parity = 0  # quotes scanned, mod 2
        self._last_byte = _NEWLINE  # the byte before the block (the file's start counts as a line end)
        self._close_at_end = -1  # a closing quote ending the last block, whose next byte is still to see

    def feed(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        """(absolute offsets just past the record-ending newlines of this block, all its newlines' offsets)."""
        buf = np.frombuffer(data, np.uint8)
        newlines = np.flatnonzero(buf == _NEWLINE)
        ends = newlines
        if self._quoted and not self.why:
            if self._close_at_end >= 0 and len(buf) and buf[0] not in self._fences:
                self._fail(self._close_at_end, 1 + self.lines)  # the quote ended the previous block
            self._close_at_end = -1
            quotes = np.flatnonzero(buf == _QUOTE)
            if len(quotes) and not self.why:
                opening = quotes[self._parity :: 2]
                closing = quotes[1 - self._parity :: 2]
                before = np.where(opening > 0, buf[np.maximum(opening - 1, 0)], self._last_byte)
                after_last = closing + 1 == len(buf)
                after = buf[np.minimum(closing + 1, len(buf) - 1)]
                bad = np.concatenate([opening[~np.isin(before, self._fences)],
                                      closing[~after_last & ~np.isin(after, self._fences)]])
                if len(bad):
                    at = int(bad.min())
                    self._fail(self.offset + at, 1 + self.lines + int(np.searchsorted(newlines, at)))
                elif len(closing) and after_last[-1]:
                    self._close_at_end = self.offset + int(closing[-1])
            if not self.why:
                outside = (self._parity + np.searchsorted(quotes, newlines)) % 2 == 0
                ends = newlines[outside]
                self._parity = (self._parity + len(quotes)) % 2
        if len(buf):
            self._last_byte = int(buf[-1])
        absolute_newlines = newlines + self.offset
        result = (ends + 1 + self.offset) if not self.why else np.zeros(0, np.int64)
        self.offset += len(buf)
        self.lines += len(newlines)
        return result, absolute_newlines

    def _fail(self, at: int, line: int) -> None:
        self.why = f"line {line}: a quote inside an unquoted field (byte {at})"


# A compressed log is parsed this much inflated text at a time, cut at a record end (memory: a block and its
# table, whatever the file's size).
STREAM_BLOCK_BYTES = 16 << 20
# One record longer than this (no record end within it) is a dead letter and skipped to its end; the only
# part of a compressed log that is bounded.
MAX_RECORD_BYTES = 128 << 20


@dataclasses.dataclass(frozen=True)
class TextBlock:
    """Whole records of a text file: bytes start.. of the file, whose first line is first_line.

    header_end: where the file's first record ends (-1 if it has none yet).
    """

    text: bytes
    start: int
    first_line: int
    header_end: int


@dataclasses.dataclass(frozen=True)
class OverLongRecord:
    """A record longer than MAX_RECORD_BYTES, skipped: its first line and length (at least, at the file's end)."""

    first_line: int
    length: int


def record_blocks(chunks: Iterable[bytes], fmt: str, block_bytes: int | None = None,
                  max_record_bytes: int | None = None) -> Iterator[TextBlock | OverLongRecord]:
    """A text stream as blocks of about block_bytes cut at record ends (RecordEndScanner), in order.

    A record with no end within max_record_bytes is an OverLongRecord. Past
    a quote the scanner can't follow (a CSV quote inside an unquoted field),
    blocks grow to max_record_bytes and are cut at their last newline (a
    quoted field spanning that newline shows as malformed rows, not lost).
    When `chunks` raises, the complete records before it are yielded first.
    """
    block_bytes = block_bytes or STREAM_BLOCK_BYTES
    max_record_bytes = max_record_bytes or MAX_RECORD_BYTES
    scanner = RecordEndScanner(fmt)
    pieces: list[bytes] = []
    size = start = 0  # pending bytes, and the file offset of the first
    start_line = 1
    cut, cut_line = 0, 1  # the last offset a block may end at, and the line after it
    header_end = -1
    skipping = None  # (first line, file offset) of the over-long record being skipped

    def take(end: int, line: int) -> TextBlock:
        """The pending bytes up to end as a block (one copy of them; the rest stays in pieces)."""
        nonlocal pieces, size, start, start_line
        head, length = [], end - start
        while length and length >= len(pieces[0]):
            length -= len(pieces[0])
            head.append(pieces.pop(0))
        if length:
            head.append(pieces[0][:length])
            pieces[0] = pieces[0][length:]
        block = TextBlock(b"".join(head), start, start_line, header_end)
        size, start, start_line = size - (end - start), end, line
        return block

    chunks = iter(chunks)
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            break
        except Exception:  # the stream broke: its complete records first
            if skipping is None and cut > start:
                yield take(cut, cut_line)
            raise
        lines_before = scanner.lines
        ends, newlines = scanner.feed(chunk)
        if header_end < 0 and len(ends):
            header_end = int(ends[0])
        cuts = newlines + 1 if scanner.why else ends  # past a quote the scanner can't follow: any newline
        if len(cuts):
            cut = int(cuts[-1])
            cut_line = lines_before + int(np.searchsorted(newlines, cut - 1)) + 2
        pieces.append(chunk)
        size += len(chunk)
        if skipping is not None:
            if not len(cuts):
                pieces, start, size = [], start + size, 0
                continue
            first_end = int(cuts[0])  # the over-long record ends in this chunk
            yield OverLongRecord(skipping[0], first_end - skipping[1])
            skipping = None
            take(first_end, lines_before + int(np.searchsorted(newlines, first_end - 1)) + 2)
        limit = max_record_bytes if scanner.why else block_bytes
        while size >= limit and cut > start:
            ahead = cuts[cuts > start]
            if len(ahead) and ahead[0] - start > max_record_bytes:  # a whole record in the chunk, over-long
                end = int(ahead[0])
                yield OverLongRecord(start_line, end - start)
                take(end, lines_before + int(np.searchsorted(newlines, end - 1)) + 2)
                continue
            # The first record end a block's length past the block's start, else the last one there is;
            # never past the start of an over-long record.
            long = np.flatnonzero(np.diff(ahead) > max_record_bytes)
            if len(long):
                ahead = ahead[: long[0] + 1]
            at = min(int(np.searchsorted(ahead, start + limit)), len(ahead) - 1)
            end = int(ahead[at]) if len(ahead) else cut
            yield take(end, lines_before + int(np.searchsorted(newlines, end - 1)) + 2 if len(ahead)
                       else cut_line)
        if size > max_record_bytes and cut <= start:
            skipping = (start_line, start)
            pieces, start, size = [], start + size, 0
    if skipping is not None:
        yield OverLongRecord(skipping[0], start + size - skipping[1])
    elif size:
        yield take(start + size, -1)
