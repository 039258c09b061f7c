"""Where the records of a CSV/TSV or JSON-lines file end, found block by block without parsing.

JSON lines end at every newline (a JSON value holds no raw newline). A
CSV/TSV newline ends a record when an even number of quotes precede it,
which is Arrow's parse only if every quote opens or closes a field; a file
with any other quote can't be cut and is read whole.
"""

from __future__ import annotations

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
