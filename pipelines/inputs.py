"""Turning the user's input arguments into the job's inputs, checked before a pipeline starts."""

from __future__ import annotations

from shardmill.transforms.chunk_index import LC0_INPUT_SUFFIXES
from shardmill.transforms.discovery import list_input, normalize


class InputError(ValueError):
    """An input argument that names nothing usable."""


EVENT_SUFFIXES = (".parquet", ".csv", ".tsv", ".jsonl", ".json", ".ndjson")


def expand_inputs(inputs: list[str], suffixes: tuple[str, ...] = LC0_INPUT_SUFFIXES) -> list[str]:
    """The inputs, normalised (absolute local paths), each checked to name at least one file.

    A directory stands for every file with one of the suffixes in its whole
    tree (lc0 `.gz` and `.tar` by default; EVENT_SUFFIXES for label sampling);
    listing stops at the first file found, the pipeline lists the rest.
    Raises InputError naming every input that names no such file.
    """
    checked: list[str] = []
    for item in inputs:
        events = list(_first_file(list_input(item, suffixes)))
        if not any(event[0] == "file" for event in events):
            if [e[:2] for e in events] == [("skip", "not_regular")]:
                raise InputError(f"input {item!r}: not a regular file (a FIFO, socket or device is never opened)")
            kinds = ", ".join(suffixes[:-1]) + " or " + suffixes[-1]
            raise InputError(f"input {item!r}: matches no {kinds} file "
                             "(directories are searched recursively; hidden files are skipped)")
        checked.append(normalize(item))
    return checked


def _first_file(events):
    for event in events:
        yield event
        if event[0] == "file":
            return
