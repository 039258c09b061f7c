"""Turning the user's input arguments into file patterns, checked before a pipeline starts."""

from __future__ import annotations

import os

from apache_beam.io.filesystems import FileSystems

from shardmill.transforms.chunk_index import SOURCE_SUFFIXES


class InputError(ValueError):
    """An input argument that names nothing usable."""


def _is_directory(path: str) -> bool:
    return path.endswith("/") or (FileSystems.get_scheme(path) is None and os.path.isdir(path))


EVENT_SUFFIXES = (".parquet", ".csv", ".tsv", ".jsonl", ".json", ".ndjson")


def expand_inputs(inputs: list[str], suffixes: tuple[str, ...] = SOURCE_SUFFIXES) -> list[str]:
    """File patterns for the inputs: a directory stands for its files with these suffixes
    (lc0 `.gz` and `.tar` by default; EVENT_SUFFIXES for label sampling).

    Raises InputError naming every input that matches no file.
    """
    patterns: list[str] = []
    for item in inputs:
        if _is_directory(item):
            base = item.rstrip("/")
            mine = [f"{base}/*{suffix}" for suffix in suffixes]
        else:
            mine = [item]
        matched = sum(len(m.metadata_list) for m in FileSystems.match(mine))
        if not matched:
            what = (f"directory has no {' or '.join(suffixes)} files" if len(mine) > 1
                    else "pattern matches no file")
            raise InputError(f"input {item!r}: {what}")
        patterns.extend(mine)
    return patterns
