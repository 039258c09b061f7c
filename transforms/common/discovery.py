"""Discovery: the files an input names, and what it names but is not read, with why.

An input is a file, a glob pattern (`**` crosses directories) or a directory,
which stands for its whole tree. Local inputs are listed here with lstat, so
nothing is opened to be classified:

- hidden and temporary files (a name starting with `.` or `_`, or ending
  with `.tmp`, `.part`, `.partial` or `~`) and hidden directories are skipped
  and counted (`hidden`) — unless the input names the file itself;
- FIFOs, sockets, devices and links to directories are skipped and counted
  (`not_regular`): opening a FIFO would block forever, links can make cycles;
- suffixes match whatever their case (`B.CSV.GZ` is a `.csv.gz` log), as the
  readers do;
- a file without one of the job's suffixes that is nonetheless input data is a
  dead letter `unsupported_suffix` standing for its bytes, so it counts
  against the error budget: a compressed or archived file (`.xz`, `.lz4`,
  `.gzip`, `.zip`, ...; in an input tree that is data, never a README) or a
  data name with one more suffix (`events.csv.1`, `games.tar.bak`);
- other files without one of the job's suffixes (README, checksums) are
  skipped and counted (`other_suffix`) — unless named themselves, which
  indexing reports;
- a dangling symbolic link, an unreadable file or directory is a dead letter
  `unreadable`; a name that is not valid UTF-8 is a dead letter `bad_name`
  that shows the name's bytes escaped.

Every skipped file is counted by kind with the first few paths as examples
(`skipped_files_accounting`), which every run summary prints
(`skipped_files_line`). Paths are made absolute and normalised (`a/../b.tar` is `b.tar`), so one file
reached by two spellings is one source. Object-store inputs (gs://, s3://)
are listed through Beam's FileSystems; there every object is a regular file.
"""

from __future__ import annotations

import glob
import os
import posixpath
import socket
import stat
import typing
from typing import Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from shardmill.core.errors import InputError
from shardmill.transforms.common.dead_letter import DeadLetter
from shardmill.transforms.common.filesystem import check_stores_reachable, is_local, normalize

SKIP_KINDS = ("hidden", "not_regular", "other_suffix")
TEMPORARY_SUFFIXES = (".tmp", ".part", ".partial", "~")
GLOB_CHARS = "*?["
# Compressed and archived files: in an input tree these are data, so one the job cannot read is lost input.
COMPRESSED_SUFFIXES = (".gz", ".gzip", ".z", ".bz2", ".xz", ".lzma", ".lz", ".lz4", ".zst", ".zstd", ".sz",
                       ".snappy", ".br", ".lzo", ".zip", ".7z", ".rar", ".tar", ".tgz", ".tbz", ".tbz2", ".txz")
# Compressed tar archives: no job reads one (a member is reached only by inflating everything before it), and a
# job lists them only to refuse each with its own reason; a message saying what a job reads never names them.
COMPRESSED_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tbz2", ".tar.xz", ".txz", ".tar.zst")
# Checksums and signatures beside a data file (`x.csv.md5`): not data themselves.
SIDECAR_SUFFIXES = (".crc", ".md5", ".sha1", ".sha256", ".sha512", ".sig", ".asc")
UNSUPPORTED_SUFFIX = "unsupported_suffix"  # the dead letter of a data file the job cannot read
EXAMPLES_PER_KIND = 3  # skipped paths kept per kind: the summary's examples


def skipped_files(parts: list[dict]) -> dict:
    """Files skipped by kind, summed over stats dicts that may hold a `skipped_files` entry."""
    return {kind: sum(part.get("skipped_files", {}).get(kind, 0) for part in parts) for kind in SKIP_KINDS}


def skipped_files_accounting(parts: list[dict]) -> dict:
    """The manifest's accounting of skipped files: `files_skipped` (kind -> files) and, when any was skipped,
    `files_skipped_examples` (kind -> the first paths in sorted order, the same on every run)."""
    examples: dict[str, list[str]] = {}
    for part in parts:
        for kind, paths in part.get("skipped_file_examples", {}).items():
            examples[kind] = sorted({*examples.get(kind, []), *paths})[:EXAMPLES_PER_KIND]
    accounting = {"files_skipped": skipped_files(parts)}
    if examples:
        accounting["files_skipped_examples"] = dict(sorted(examples.items()))
    return accounting


def _shown(path: str) -> str:
    """A path shortened for a summary line: its folder and name."""
    parts = path.rstrip("/").rsplit("/", 2)
    return path if len(parts) < 3 else ".../" + "/".join(parts[1:])


def skipped_files_line(accounting: dict) -> str | None:
    """The summary line of the files discovery skipped, with an example of each kind; None when none was."""
    counts = accounting.get("files_skipped") or {}
    examples = accounting.get("files_skipped_examples") or {}
    total = sum(counts.values())
    if not total:
        return None
    kinds = [f"{n:,} {kind.replace('_', ' ')}" + (f" (e.g. {_shown(examples[kind][0])})" if examples.get(kind) else "")
             for kind, n in counts.items() if n]
    return f"skipped {total:,} file(s): {', '.join(kinds)}"


def matches_suffix(path: str, suffixes: tuple[str, ...]) -> bool:
    """Whether the path ends with one of the suffixes, whatever its case (the readers ignore case too)."""
    return path.lower().endswith(suffixes)


def unsupported_data(path: str, suffixes: tuple[str, ...]) -> str | None:
    """Why a file without one of the job's suffixes is input data nonetheless (the dead letter's detail), or
    None for a file that is not data (README, notes, checksums)."""
    name = posixpath.basename(path.replace(os.sep, "/"))
    stem, dot, last = name.lower().rpartition(".")
    last = dot + last
    if not dot or not stem or last in SIDECAR_SUFFIXES:
        return None
    data = max((s for s in suffixes if stem.endswith(s)), key=len, default=None)
    if data is None and last not in COMPRESSED_SUFFIXES:
        return None
    read = [s for s in suffixes if s not in COMPRESSED_TAR_SUFFIXES]
    readable = [s for s in read if data and s.startswith(data)] or read
    what = f"{data} data" if data else "a compressed file"
    return (f"{name!r}: {what} ending in {last}, which this job does not read (it reads {', '.join(readable)}); "
            "convert or rename it, or move it out of the input")


def escaped(path: str) -> str:
    """A path printable as UTF-8: bytes of a non-UTF-8 name as \\xNN escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def is_hidden(name: str) -> bool:
    return name.startswith((".", "_")) or name.endswith(TEMPORARY_SUFFIXES)


# Events of a listing: a file to read, a skipped file (its kind), a dead letter.
Listed = tuple  # ("file", path, size) | ("skip", kind, path) | ("dead", DeadLetter)


def _classify(path: str, suffixes: tuple[str, ...], named: bool) -> Iterator[Listed]:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        yield "dead", DeadLetter(escaped(path), "discover", "bad_name",
                                 "the file name is not valid UTF-8 (its bytes are shown escaped); rename it")
        return
    if not named and is_hidden(os.path.basename(path)):
        yield "skip", "hidden", path
        return
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            yield "dead", DeadLetter(path, "discover", "unreadable",
                                     f"dangling symbolic link to {os.readlink(path)!r}")
        else:
            yield "dead", DeadLetter(path, "discover", "unreadable", "the file disappeared while listing")
        return
    except OSError as err:
        yield "dead", DeadLetter(path, "discover", "unreadable", f"cannot stat: {err.strerror or err}")
        return
    if stat.S_ISDIR(info.st_mode):
        yield from _walk(path, suffixes)
        return
    if not stat.S_ISREG(info.st_mode):
        yield "skip", "not_regular", path
        return
    if not named and not matches_suffix(path, suffixes):
        yield _not_matched(path, info.st_size, suffixes)
        return
    if not os.access(path, os.R_OK):
        yield "dead", DeadLetter(path, "discover", "unreadable", "permission denied")
        return
    yield "file", path, info.st_size


def _not_matched(path: str, size: int, suffixes: tuple[str, ...]) -> Listed:
    """The listing event of a file without one of the job's suffixes: lost data or a skipped other file."""
    why = unsupported_data(path, suffixes)
    if why is None:
        return "skip", "other_suffix", path
    return "dead", DeadLetter(path, "discover", UNSUPPORTED_SUFFIX, why, records=-1, bytes=size)


def _walk(top: str, suffixes: tuple[str, ...]) -> Iterator[Listed]:
    errors: list[OSError] = []
    for root, dirs, files in os.walk(top, onerror=errors.append, followlinks=False):
        descend = []
        for name in sorted(dirs):
            if is_hidden(name):
                yield "skip", "hidden", os.path.join(root, name)
            elif os.path.islink(os.path.join(root, name)):
                # A link to a directory: not followed (links can make cycles).
                yield "skip", "not_regular", os.path.join(root, name)
            else:
                descend.append(name)
        dirs[:] = descend
        for name in sorted(files):
            yield from _classify(os.path.join(root, name), suffixes, named=False)
    for err in errors:
        yield "dead", DeadLetter(err.filename or top, "discover", "unreadable",
                                 f"cannot list the directory: {err.strerror or err}")


def _list_remote(item: str, suffixes: tuple[str, ...]) -> Iterator[Listed]:
    from apache_beam.io.filesystems import FileSystems

    directory = item.endswith("/") or not any(c in item for c in GLOB_CHARS)
    pattern = item.rstrip("/") + "/**" if directory else item
    root = item.rstrip("/") if directory else item[:min(item.find(c) for c in GLOB_CHARS if c in item)]
    for result in FileSystems.match([pattern] + ([item] if directory else [])):
        for meta in result.metadata_list:
            relative = meta.path[len(root):].lstrip("/")
            named = meta.path == item
            if not named and any(is_hidden(part) for part in relative.split("/")):
                yield "skip", "hidden", meta.path
            elif not named and not matches_suffix(meta.path, suffixes):
                yield _not_matched(meta.path, meta.size_in_bytes, suffixes)
            else:
                yield "file", meta.path, meta.size_in_bytes


def list_input(item: str, suffixes: tuple[str, ...]) -> Iterator[Listed]:
    """Everything one input names, as listing events (see the module doc)."""
    if not is_local(item):
        yield from _list_remote(normalize(item), suffixes)
        return
    path = normalize(item)
    if any(c in item for c in GLOB_CHARS):
        for match in sorted(glob.glob(path, recursive=True)):
            yield from _classify(os.path.normpath(match), suffixes, named=False)
        return
    if not os.path.lexists(path):
        return
    yield from _classify(path, suffixes, named=not os.path.isdir(path))


ERRORS = "errors"


SOURCE_STATS = "source_stats"


class _BatchFilesFn(beam.DoFn):
    """Groups the files of one bundle's listed events into batches of (path, size) by count and bytes; skipped
    files go on the SKIPPED output as (kind, path).

    A whole archive is a batch by itself once it passes the byte budget; many
    small loose `.gz` files share one batch, so no element stands for one chunk.
    """

    def __init__(self, max_files: int, max_bytes: int):
        self._max_files = max_files
        self._max_bytes = max_bytes

    def start_bundle(self):
        self._batch, self._bytes = [], 0

    def process(self, listed_once):
        what, name_or_kind, size_or_path = listed_once[0]
        if what == "skip":
            yield beam.pvalue.TaggedOutput(SKIPPED, (name_or_kind, size_or_path))
            return
        self._batch.append((name_or_kind, size_or_path))
        self._bytes += size_or_path
        if len(self._batch) >= self._max_files or self._bytes >= self._max_bytes:
            yield self._batch
            self._batch, self._bytes = [], 0

    def finish_bundle(self):
        if self._batch:
            yield GlobalWindows.windowed_value(self._batch)
            self._batch, self._bytes = [], 0


SKIPPED = "skipped"


class _ListInputFn(beam.DoFn):
    """One input → its listing events keyed for one GroupByKey: (("file", path, size), None) of each file to read,
    (("skip", kind, path), None) of each skipped file; dead letters on the side."""

    def __init__(self, suffixes: tuple[str, ...]):
        self._suffixes = suffixes

    def process(self, item):
        named_anything = False
        for event in list_input(item, self._suffixes):
            named_anything = True
            if event[0] == "dead":
                yield beam.pvalue.TaggedOutput(ERRORS, event[1].to_dict())
            else:
                yield event, None
        if not named_anything:
            # The launcher found a file for every input before the run (expand_inputs): an input naming nothing
            # here is read on another disk than the launcher's (a runner's workers with a local path), or its
            # files went meanwhile. Either way, writing an output without them would lose them unseen.
            raise InputError(f"input {item!r}: names no file on the host running this step "
                             f"({socket.gethostname()}), though the launcher found one: a runner's workers read "
                             "local paths on their own disks (put inputs on gs:// or s3://, or a disk every host "
                             "mounts), or its files were removed since")


class _CountWithExamples(beam.CombineFn):
    """Paths of one skip kind → (how many, the first EXAMPLES_PER_KIND in sorted order): the same whatever the
    order they arrive in."""

    def create_accumulator(self):
        return 0, []

    def add_input(self, accumulator, path):
        count, examples = accumulator
        return count + 1, sorted([*examples, path])[:EXAMPLES_PER_KIND]

    def merge_accumulators(self, accumulators):
        count, examples = 0, []
        for n, paths in accumulators:
            count, examples = count + n, sorted([*examples, *paths])[:EXAMPLES_PER_KIND]
        return count, examples

    def extract_output(self, accumulator):
        return accumulator


def _skip_stats(kind, count_and_examples) -> dict:
    count, examples = count_and_examples
    return {"skipped_files": {kind: count}, "skipped_file_examples": {kind: examples}}


class DiscoverFiles(beam.PTransform):
    """Inputs (files, globs, directory trees) → batches (lists) of (path, size_in_bytes).

    Returns a dict: "batches", ERRORS (dead-letter dicts of files that can't
    be read, or that are data of a suffix the job can't read) and
    SOURCE_STATS ({"skipped_files": {kind: n}, "skipped_file_examples":
    {kind: [path, ...]}}, one per kind skipped; skipped_files_accounting()
    sums them). Each file is listed, and each
    skipped file counted, once even if several inputs name it. An input
    naming nothing fails the step (InputError): the launcher checked every
    input names a file (expand_inputs), so here it means another disk.
    """

    def __init__(self, inputs: list[str], suffixes: tuple[str, ...],
                 max_files_per_batch: int = 256, max_bytes_per_batch: int = 64 << 20):
        super().__init__()
        self._inputs = list(inputs)
        self._suffixes = tuple(suffixes)
        self._max_files = max_files_per_batch
        self._max_bytes = max_bytes_per_batch

    def expand(self, pbegin):
        listed = (
            pbegin
            | "Inputs" >> beam.Create(self._inputs)
            # Inference can't see through tagged outputs; state the main output's pair type.
            | "List" >> beam.ParDo(_ListInputFn(self._suffixes)).with_output_types(
                typing.Tuple[typing.Any, None]).with_outputs(ERRORS, main="listed")
        )
        # One GroupByKey over files and skipped files alike (a Distinct of each was 8 transforms, each costing
        # Beam's fixed CPU): overlapping inputs list a file, or count a skipped one, once; it also spreads files
        # over workers.
        batched = (
            listed["listed"]
            | "OncePerFile" >> beam.GroupByKey()
            | "Batch" >> beam.ParDo(_BatchFilesFn(self._max_files, self._max_bytes)).with_outputs(
                SKIPPED, main="batches")
        )
        batches = batched["batches"]
        skipped = (
            batched[SKIPPED]
            | "CountPerKind" >> beam.CombinePerKey(_CountWithExamples())
            | "SkipStats" >> beam.MapTuple(_skip_stats)
        )
        return {"batches": batches, ERRORS: listed[ERRORS], SOURCE_STATS: skipped}


def expand_inputs(inputs: list[str], suffixes: tuple[str, ...]) -> list[str]:
    """The inputs, normalised (absolute local paths), each checked to name at least one file.

    A directory stands for every file with one of the suffixes in its whole
    tree (lc0 `.gz` and `.tar` by default; EVENT_SUFFIXES for label sampling);
    listing stops at the first file found, the pipeline lists the rest.
    Raises InputError naming every input that names no such file, StoreUnreachable for an object store that
    does not answer (asked before anything is listed: Beam's listing retries for minutes).
    """
    check_stores_reachable(inputs)
    checked: list[str] = []
    for item in inputs:
        events = list(_first_file(list_input(item, suffixes)))
        if not any(event[0] == "file" for event in events):
            if [e[:2] for e in events] == [("skip", "not_regular")]:
                raise InputError(f"input {item!r}: not a regular file (a FIFO, socket or device is never opened)")
            kinds = ", ".join(suffixes[:-1]) + " or " + suffixes[-1]
            unsupported = [e[1].path for e in events if e[0] == "dead" and e[1].reason == UNSUPPORTED_SUFFIX]
            found = (f"; it holds data of suffixes the job does not read, e.g. {unsupported[0]!r}"
                     if unsupported else "")
            raise InputError(f"input {item!r}: matches no {kinds} file "
                             f"(directories are searched recursively; hidden files are skipped){found}")
        checked.append(normalize(item))
    return checked


def _first_file(events):
    for event in events:
        yield event
        if event[0] == "file":
            return
