"""Following an output's generations: a job rerun into the same output commits a new generation, which a
following reader serves from the next epoch on; a generation deleted under a reader is named as such.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.fs as pafs

from shardmill.core.errors import OutputError
from shardmill.native_ext.dataset import newest_generation
from shardmill.native_ext.remote import RemoteOptions, filesystem_of

_LOG = logging.getLogger(__name__)


def newer_generation(path: str, remote: RemoteOptions, serving: int) -> int | None:
    """The generation the output has committed since `serving`, or None (the same one, or its manifest cannot
    be read now: the reader stays on what it serves, with a warning)."""
    try:
        newest = newest_generation(path, remote)
    except OutputError as err:
        _LOG.warning("following %s: cannot read its manifest (%s); staying on generation %d", path, err, serving)
        return None
    return None if newest == serving else newest


def deleted_generation(path: str, shard_paths: list[str], manifest: dict, remote: RemoteOptions) -> OutputError | None:
    """After a failed read: the error to raise if shards of the generation being served are gone (a rerun into
    the output deleted it, or a hand did), else None. Only on that path, so reads pay nothing for it."""
    generation = int(manifest.get("generation", 0))
    try:
        for location, shard in zip(shard_paths, manifest["shards"]):
            filesystem, on_fs = filesystem_of(location, remote)
            if filesystem.get_file_info(on_fs).type == pafs.FileType.NotFound:
                return OutputError(
                    f"{path}: generation {generation} was deleted while this reader was serving it "
                    f"({shard['path']} is gone): a rerun into the output deletes the generation before it "
                    f"unless the job keeps it with output.keep_generations >= 2, so readers end their epoch "
                    f"on it")
    except (OSError, ValueError, pa.ArrowException):
        pass  # the store cannot say: the read's own error stands
    return None
