"""The lifecycle of an output directory: stage, commit, reject, clean up.

A run stages everything it writes under `.staging-<run id>/`: spill files,
shards already named for the next generation, the generation's metadata
files and, last, the prepared manifest. Committing (by the launcher, holding
the claim) is:

  1. move the generation's metadata files and shards into place — new names,
     so the committed output is untouched;
  2. replace `.manifest.json` in one atomic write: the commit point (a local
     rename; on object stores a single object write, which is atomic);
  3. delete the previous generation's files (an older format's manifest
     among them) unless `output.keep_generations` keeps it readable, those of
     generations older than that, the staging directory and any stale
     rejection report.

A crash before 2 leaves the old manifest with all its files; after 2, the new
one with all its files. Either way unreferenced files are left over, and the
next run (holding the claim) deletes them, saying what it found. A reader
that opened the old manifest before 3 loses its files at 3 unless the
generation is kept (keep_generations >= 2: each kept generation has its
manifest in `.gNNNNNN/manifest.json`, listed by the newest manifest's
`retained_generations`; a following reader finishes its epoch on it).

Directory-listing tools (pandas, DuckDB) see new shards from step 1 until the
old ones are deleted in 3 (milliseconds locally); the manifest-driven reader
never sees a mix.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import logging
import os
import shutil

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from shardmill.core.errors import EXIT_BAD_INVOCATION, EXIT_COMMITTED_WITH_ERROR, EXIT_FAILED, ShardmillError
from shardmill.transforms.common.filesystem import is_local, normalize, write_bytes_atomically
from shardmill.transforms.common.spill import ShuffleMemory
from shardmill.core.output_contract import (CLAIM_NAME, CLAIMS_DIR_NAME, ERRORS_NAME, FORMAT1_ERRORS_NAME,
                                            FORMAT1_MANIFEST_NAME, FORMAT2_CLAIM_NAME, FORMAT2_REJECTED_DIR_NAME,
                                            FORMAT2_STAGING_PREFIX, GENERATION_DIR_RE, MANIFEST_NAME,
                                            MANIFEST_NAMES, REJECTED_DIR_NAME, REPORT_MANIFEST_NAME,
                                            SHARD_NAME_RE, STAGING_PREFIX, generation_dir_name,
                                            generation_manifest_path, shard_name)

_LOG = logging.getLogger(__name__)
LEGACY_SPILL_DIR_NAME = ".shardmill-tmp"


class OutputPathError(ShardmillError, ValueError):
    """An output path that cannot hold an output (a file, inside an input, ...)."""

    exit_code = EXIT_BAD_INVOCATION


class RunCancelled(ShardmillError, RuntimeError):
    """The run this work belongs to was discarded."""

    exit_code = EXIT_FAILED


class OutputExistsError(ShardmillError, ValueError):
    """The output directory already holds a committed output and overwrite was not asked for."""

    exit_code = EXIT_BAD_INVOCATION


@dataclasses.dataclass(frozen=True)
class RunPaths:
    """Where one run writes: plain strings, so workers can be handed it."""

    output_dir: str
    run_id: str
    generation: int
    report_progress: bool = False  # local runs: workers append progress counts for the launcher
    # local runs: where load tasks may keep their batches in memory (common/spill.py); by default they spill
    shuffle_memory: ShuffleMemory = ShuffleMemory()

    @property
    def base(self) -> str:
        return self.output_dir.rstrip("/")

    @property
    def staging(self) -> str:
        return f"{self.base}/{STAGING_PREFIX}{self.run_id}"

    @property
    def marker(self) -> str:
        """Written first and deleted first: while it exists the run is live (see check_live)."""
        return f"{self.staging}/_run.json"

    def check_live(self) -> None:
        """Raises RunCancelled once the run's staging was discarded, so a late worker writes nothing.

        Without it, a write still in flight when a run is interrupted would
        recreate the staging directory after the launcher removed it.
        """
        if not FileSystems.exists(self.marker):
            # Named: on a runner's workers a local output's staging is on the launcher's disk, never seen here.
            raise RunCancelled(f"run {self.run_id}: its staging directory {self.staging} is gone here (the run was "
                               f"discarded, or the directory is on another host's disk)")

    @property
    def progress_dir(self) -> str | None:
        """Where workers append progress counts (transforms/common/progress.py), or None."""
        return f"{self.staging}/progress" if self.report_progress else None

    @property
    def spill_dir(self) -> str:
        return f"{self.staging}/spill"

    @property
    def metadata_dir(self) -> str:
        """The staged generation metadata directory (errors, job-specific files)."""
        return f"{self.staging}/{generation_dir_name(self.generation)}"

    @property
    def errors_path(self) -> str:
        return f"{self.metadata_dir}/{ERRORS_NAME}"

    @property
    def prepared_manifest(self) -> str:
        return f"{self.staging}/{MANIFEST_NAME}"

    def shard_name(self, shard: int, num_shards: int) -> str:
        return shard_name(self.generation, shard, num_shards)

    def staged_shard(self, shard: int, num_shards: int) -> str:
        return f"{self.staging}/{self.shard_name(shard, num_shards)}"


def _metadata_dir(manifest: dict) -> str | None:
    """A generation's metadata directory (`.gNNNNNN`, or in format 2 `_gNNNNNN`), from its errors' path; None
    for format 1, which had none."""
    errors = manifest.get("errors")
    top = str(errors.get("path", "")).split("/", 1)[0] if isinstance(errors, dict) else ""
    return top if GENERATION_DIR_RE.match(top) else None


def _files_of(manifest: dict) -> set[str]:
    """The shards and metadata directory of one generation (relative paths)."""
    metadata = _metadata_dir(manifest)
    return {s["path"] for s in manifest["shards"]} | ({metadata} if metadata else set())


@dataclasses.dataclass(frozen=True)
class Committed:
    """The output a directory holds now, and the older generations it keeps readable (newest first)."""

    manifest: dict
    manifest_name: str
    generation: int
    retained: tuple[dict, ...] = ()

    @property
    def files(self) -> set[str]:
        """Every path (relative to the directory) that belongs to this output or a retained generation."""
        names = {self.manifest_name} | _files_of(self.manifest)
        if self.manifest_name == FORMAT1_MANIFEST_NAME:
            names.add(FORMAT1_ERRORS_NAME)
        for older in self.retained:
            names |= _files_of(older)
        return names


def _read(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def read_committed(output_dir: str) -> Committed | None:
    """The committed output of a directory, or None. An unreadable manifest counts as an output."""
    base = output_dir.rstrip("/")
    for name in MANIFEST_NAMES:
        path = f"{base}/{name}"
        if not FileSystems.exists(path):
            continue
        try:
            manifest = json.loads(_read(path))
            generation = int(manifest.get("generation", 0))
            [s["path"] for s in manifest["shards"]]
        except (ValueError, KeyError, TypeError, AttributeError):
            manifest, generation = {"shards": []}, 0
        return Committed(manifest, name, generation, _retained(base, manifest))
    return None


def _retained(base: str, manifest: dict) -> tuple[dict, ...]:
    """The manifests of the older generations a manifest keeps (those whose copy can be read)."""
    kept = []
    generations = manifest.get("retained_generations", [])
    for generation in generations if isinstance(generations, list) else []:
        try:
            older = json.loads(_read(f"{base}/{generation_manifest_path(int(generation))}"))
            [s["path"] for s in older["shards"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # gone or damaged: its files are leftovers
        kept.append(older)
    return tuple(kept)


def check_output_path(output_dir: str, inputs: list[str]) -> None:
    """Raises OutputPathError for an output that can't work, before any other work is done."""
    if not output_dir.strip():
        raise OutputPathError("output.path: an output directory is required (config or --output)")
    if not is_local(output_dir):
        return
    path = normalize(output_dir)
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        what = "is a file" if probe == path else f"is inside {probe}, which is a file"
        raise OutputPathError(f"output {output_dir}: {what}, not a directory")
    for item in inputs:
        if not is_local(item):
            continue
        pattern = normalize(item)
        if os.path.isdir(pattern) or item.endswith("/"):
            inside = path == pattern.rstrip("/") or path.startswith(pattern.rstrip("/") + "/")
        else:
            inside = fnmatch.fnmatch(f"{path}/{shard_name(1, 0, 1)}", pattern)
        if inside:
            raise OutputPathError(f"output {output_dir}: inside input {item!r}, so the next run would read "
                                  "its own shards; choose an output outside the inputs")


def _relative_tree(output_dir: str) -> list[str]:
    """Every file below the directory, as paths relative to it."""
    base = output_dir.rstrip("/")
    if is_local(base):
        found = []
        for root, dirs, files in os.walk(base):
            rel = os.path.relpath(root, base)
            found += [name if rel == "." else f"{rel}/{name}" for name in files]
            found += [f"{name}/" if rel == "." else f"{rel}/{name}/" for name in dirs
                      if not os.listdir(os.path.join(root, name))]
        return sorted(found)
    return sorted(m.path[len(base) + 1:] for m in FileSystems.match([f"{base}/**"])[0].metadata_list)


def _delete(base: str, relative: list[str]) -> None:
    if not relative:
        return
    if is_local(base):
        for rel in relative:
            path = os.path.join(base, rel)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.remove(path)
                except FileNotFoundError:
                    pass
        return
    # Object stores have no directories: delete every object at or below each path.
    patterns = [p for rel in relative for p in (f"{base}/{rel.rstrip('/')}", f"{base}/{rel.rstrip('/')}/**")]
    found = [m.path for result in FileSystems.match(patterns) for m in result.metadata_list]
    if found:
        FileSystems.delete(sorted(set(found)))


def _is_leftover(rel: str, committed: Committed | None, run_dirs: set[str]) -> bool:
    top = rel.split("/", 1)[0]
    if top in (CLAIM_NAME, FORMAT2_CLAIM_NAME, CLAIMS_DIR_NAME, REJECTED_DIR_NAME, FORMAT2_REJECTED_DIR_NAME):
        return False
    if top in run_dirs:
        return False
    keep = committed.files if committed else set()
    if top.startswith((STAGING_PREFIX, FORMAT2_STAGING_PREFIX)) or top == LEGACY_SPILL_DIR_NAME:
        return True
    if top.startswith(".") and ".tmp-" in top:
        return True
    if top in MANIFEST_NAMES or top == FORMAT1_ERRORS_NAME or SHARD_NAME_RE.match(top) or GENERATION_DIR_RE.match(top):
        return top not in keep  # an older format's manifest beside a newer one is a commit cut short
    return False  # not ours: the user's files stay


def clean_leftovers(output_dir: str, committed: Committed | None, keep_dirs: tuple[str, ...] = ()) -> list[str]:
    """Deletes what crashed runs left (call only while holding the claim); returns notes for the user."""
    base = output_dir.rstrip("/")
    leftovers = [rel for rel in _relative_tree(base) if _is_leftover(rel, committed, set(keep_dirs))]
    if not leftovers:
        return []
    runs = sorted({rel.split("/", 1)[0][len(STAGING_PREFIX):] for rel in leftovers
                   if rel.startswith((STAGING_PREFIX, FORMAT2_STAGING_PREFIX))})
    tops = sorted({rel.split("/", 1)[0] for rel in leftovers})
    _delete(base, tops)
    notes = [f"found an unfinished run {r} in {base}: removed its temporary files" for r in runs]
    others = len(leftovers) - sum(1 for rel in leftovers if rel.startswith((STAGING_PREFIX, FORMAT2_STAGING_PREFIX)))
    if others:
        notes.append(f"removed {others} file(s) an interrupted run left in {base}")
    return notes


def start_staging(paths: RunPaths, run_info: bytes) -> None:
    """Creates the run's staging directory with its marker (also a first check that the disk takes bytes)."""
    write_bytes_atomically(paths.marker, run_info)
    if paths.progress_dir:
        os.makedirs(paths.progress_dir, exist_ok=True)


def write_prepared_manifest(paths: RunPaths, manifest: dict) -> None:
    """The last file a run's pipeline writes: its presence means every staged file is final."""
    write_bytes_atomically(paths.prepared_manifest, json.dumps(manifest, indent=1, sort_keys=True).encode())


def read_prepared_manifest(paths: RunPaths) -> dict:
    if not FileSystems.exists(paths.prepared_manifest):
        raise RuntimeError(f"the pipeline finished without preparing {paths.prepared_manifest}")
    return json.loads(_read(paths.prepared_manifest))


def _move(base: str, sources: list[str], destinations: list[str]) -> None:
    if not sources:
        return
    if is_local(base):
        for d in {os.path.dirname(f"{base}/{d}") for d in destinations}:
            os.makedirs(d, exist_ok=True)
    FileSystems.rename([f"{base}/{s}" for s in sources], [f"{base}/{d}" for d in destinations])


class CommittedWithError(ShardmillError, RuntimeError):
    """The new generation is the output (its manifest is in place); a step after the commit point failed."""

    exit_code = EXIT_COMMITTED_WITH_ERROR

    def __init__(self, output_dir: str, generation: int, cause: BaseException):
        super().__init__(f"generation {generation} was committed to {output_dir}; after the commit point: "
                         f"{type(cause).__name__}: {cause}")
        self.generation = generation


def commit(paths: RunPaths, previous: Committed | None, keep_generations: int = 1) -> dict:
    """Makes the staged generation the directory's output; returns its manifest (see module doc).

    keep_generations: the new generation and up to keep_generations - 1 before it stay readable (each with
    its manifest in its metadata directory); the files of older ones are deleted.
    A failure before the manifest is replaced leaves the previous output; one after it (deleting the
    previous generation's files) is a CommittedWithError: the new output stands, a leftover goes with
    the next run.
    """
    base = paths.base
    manifest = read_prepared_manifest(paths)
    older = [] if previous is None or previous.generation < 1 else [previous.manifest, *previous.retained]
    retained = older[:keep_generations - 1]
    manifest["retained_generations"] = [int(m["generation"]) for m in retained]
    staging = paths.staging[len(base) + 1:]
    marker = paths.marker[len(paths.staging) + 1:]
    staged = [rel for rel in _relative_tree(paths.staging)
              if rel not in (MANIFEST_NAME, marker) and not rel.startswith(("spill/", "progress/"))
              and not rel.endswith("/")]
    _move(base, [f"{staging}/{rel}" for rel in staged], staged)
    text = json.dumps(manifest, indent=1, sort_keys=True).encode()
    if _metadata_dir(manifest):
        write_bytes_atomically(f"{base}/{generation_manifest_path(paths.generation)}", text)
    for kept in retained:  # generations committed before their copy was written get it now
        copy = f"{base}/{generation_manifest_path(int(kept['generation']))}"
        if not FileSystems.exists(copy):
            write_bytes_atomically(copy, json.dumps(kept, indent=1, sort_keys=True).encode())
    write_bytes_atomically(f"{base}/{MANIFEST_NAME}", text)
    try:
        if previous is not None:
            keep = {MANIFEST_NAME} | {rel.split("/", 1)[0] for rel in staged}
            for kept in retained:
                keep |= _files_of(kept)
            _delete(base, sorted(previous.files - keep))
        _delete(base, [staging, REJECTED_DIR_NAME, FORMAT2_REJECTED_DIR_NAME])
    except Exception as err:
        raise CommittedWithError(base, paths.generation, err) from err
    return manifest


def reject(paths: RunPaths) -> str:
    """Keeps a run's report (prepared manifest, errors) in `.rejected/`, drops its shards; returns where."""
    base = paths.base
    target = f"{base}/{REJECTED_DIR_NAME}"
    _delete(base, [REJECTED_DIR_NAME, FORMAT2_REJECTED_DIR_NAME])
    staging = paths.staging[len(base) + 1:]
    errors = paths.errors_path[len(base) + 1:]
    sources = [f"{staging}/{MANIFEST_NAME}"] + ([errors] if FileSystems.exists(paths.errors_path) else [])
    _move(base, sources, [f"{REJECTED_DIR_NAME}/{REPORT_MANIFEST_NAME}",
                          f"{REJECTED_DIR_NAME}/{ERRORS_NAME}"][:len(sources)])
    discard(paths)
    return target


def discard(paths: RunPaths) -> None:
    """Deletes everything a run staged, the marker first (late writers then stop: RunPaths.check_live)."""
    _delete(paths.base, [paths.marker[len(paths.base) + 1:]])
    _delete(paths.base, [paths.staging[len(paths.base) + 1:]])
