"""Dead letters: the bad inputs a run met, one record each, kept beside the output.

Every job kind reports a file, archive member, chunk, partition or row it
could not use as a DeadLetter; the run goes on, the manifest counts them by
reason, and they are written to the generation's `errors.jsonl` in a fixed
order (arrival order varies by runner).
"""

from __future__ import annotations

import collections
import dataclasses
import json

from shardmill.transforms.common.filesystem import write_bytes_atomically


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """One bad file, archive member or chunk, routed to errors.jsonl."""

    path: str
    stage: str  # pipeline stage that met it: "index", "load", ...
    reason: str  # short stable code (ChunkError.REASONS, or a source-level one)
    detail: str  # human-readable explanation
    member: str = ""  # tar member name, if any
    chunk: int = -1  # chunk ordinal within the source, -1 if not a single chunk
    records: int = 1  # input records it stands for (a lost file: its records); -1: unknown, estimated from bytes
    bytes: int = 0  # bytes of the input it stands for, when its records are unknown

    def to_dict(self) -> dict:
        # records and bytes only where they say more than "one record".
        return {k: v for k, v in dataclasses.asdict(self).items()
                if not ((k == "records" and v == 1) or (k == "bytes" and v == 0))}


def count_reasons(dead_letters: list[dict]) -> dict:
    return dict(sorted(collections.Counter(d["reason"] for d in dead_letters).items()))


def dead_letters_jsonl(dead_letters: list[dict]) -> bytes:
    """Dead letters as JSON lines in a fixed order (arrival order varies by runner)."""
    ordered = sorted(dead_letters, key=lambda d: (d["path"], d["chunk"], d["member"], d["stage"], d["reason"]))
    return "".join(json.dumps(d, sort_keys=True) + "\n" for d in ordered).encode()


def write_dead_letters(path: str, dead_letters: list[dict]) -> None:
    write_bytes_atomically(path, dead_letters_jsonl(dead_letters))
