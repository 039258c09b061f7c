"""Reader checkpoints: the state a ShardReader resumes from, its fields named once here.

A state is a small JSON document: the reader's settings (so a state is never
applied to another order or dataset), the dataset's row count, the output
generation it was taken on, and where the rank is (epoch, position). An
elastic state (elastic.py) also holds the ranges of epoch positions a rank
serves in the epoch it resumes; from the next epoch on it follows the new
layout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

STATE_VERSION = 2  # 2: Feistel halves fit odd bit widths (other orders than 1)
MAX_EPOCH = 1 << 40  # of an unbounded reader's state: far beyond any run, far from overflow
MAX_GENERATION = 999_999

# The state's fields besides the settings (ReaderSettings' fields keep their own names).
VERSION = "v"
ROWS = "rows"  # the dataset's row count
GENERATION = "generation"  # the output generation the state was taken on
EPOCH = "epoch"
POSITION = "position"  # rows of the epoch this rank has served
RANGES = "ranges"  # an elastic state's [begin, end) epoch positions of its resumed epoch
SHARD_INDEX = "shard_index"
SHARD_COUNT = "shard_count"
NUM_EPOCHS = "num_epochs"

# Fields that differ between the ranks of one run.
PER_RANK_FIELDS = (SHARD_INDEX, SHARD_COUNT, EPOCH, POSITION, RANGES)


@dataclasses.dataclass(frozen=True)
class ReaderSettings:
    """What fixes the stream a reader serves; a state applies only to a reader of equal settings."""

    dataset: str  # fingerprint of the shards (dataset_fingerprint)
    batch_size: int
    columns: list[str]
    shard_index: int
    shard_count: int
    num_epochs: int  # 0: unbounded
    seed: int
    shuffle: bool
    window_row_groups: int
    drop_remainder: bool

    def fields(self) -> dict:
        """The settings as state fields, in the state's order."""
        return dataclasses.asdict(self)


# The settings the native reader takes as they are (the dataset and columns it is given otherwise).
NATIVE_SETTINGS = tuple(f.name for f in dataclasses.fields(ReaderSettings) if f.name not in ("dataset", "columns"))


def dataset_fingerprint(manifest: dict) -> str:
    """A short digest of a manifest's shards (path, rows, SHA-256): states of another dataset are refused."""
    digest = hashlib.sha256()
    for shard in manifest["shards"]:
        digest.update(f"{shard['path']}:{shard['rows']}:{shard['sha256']};".encode())
    return digest.hexdigest()[:16]


def dump_state(fields: dict) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


def encode_state(settings: ReaderSettings, rows: int, generation: int, epoch: int, position: int,
                 ranges: list[tuple[int, int]] | None = None) -> bytes:
    """The state of a reader of `settings` over `rows` rows at (epoch, position); `ranges`: of an elastic epoch."""
    fields = {VERSION: STATE_VERSION, **settings.fields(), ROWS: rows, GENERATION: generation, EPOCH: epoch,
              POSITION: position}
    if ranges is not None:
        fields[RANGES] = [list(r) for r in ranges]
    return dump_state(fields)


def parse_state(state: bytes) -> dict:
    try:
        saved = json.loads(state)
    except (ValueError, TypeError):
        raise ValueError("state is not a ShardReader state") from None
    if not isinstance(saved, dict) or saved.get(VERSION) != STATE_VERSION:
        version = saved.get(VERSION) if isinstance(saved, dict) else None
        raise ValueError(f"state version {version!r}, expected {STATE_VERSION}")
    return saved


def state_generation(state: bytes) -> int | None:
    """The output generation a state was taken on; None for a state that does not say (older states)."""
    generation = parse_state(state).get(GENERATION)
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)
                                   or not 0 <= generation <= MAX_GENERATION):
        raise ValueError(f"state field {GENERATION} {generation!r} is outside 0..{MAX_GENERATION}")
    return generation


def parse_total(saved: dict) -> int:
    total = saved.get(ROWS)
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError("state has no row count")
    return total


def checked_ranges(ranges, total: int) -> list[tuple[int, int]]:
    """Sorted, disjoint [lo, hi) ranges of epoch positions within [0, total)."""
    if not isinstance(ranges, list) or len(ranges) > 1_000_000:
        raise ValueError(f"state field {RANGES} is not a list of [begin, end] pairs")
    out, last = [], 0
    for item in ranges:
        if (not isinstance(item, (list, tuple)) or len(item) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in item)):
            raise ValueError(f"state field {RANGES} holds {item!r}, not a [begin, end] pair of integers")
        lo, hi = item
        if not last <= lo <= hi <= total:
            raise ValueError(f"state field {RANGES}: [{lo}, {hi}) is out of order or outside 0..{total}")
        out.append((lo, hi))
        last = hi
    return out


def resume_point(state: bytes, settings: ReaderSettings,
                 total_rows: int) -> tuple[int, int, list[tuple[int, int]] | None]:
    """(epoch, position, ranges or None) a reader of `settings` over `total_rows` rows resumes `state` at;
    ValueError naming the field when the state does not fit it."""
    saved = parse_state(state)
    differing = [k for k, v in settings.fields().items() if saved.get(k) != v]
    if differing:
        raise ValueError(f"state was taken with other settings: {', '.join(differing)}")
    epoch, position = saved.get(EPOCH), saved.get(POSITION)
    last_epoch = settings.num_epochs or MAX_EPOCH
    ranges = checked_ranges(saved.get(RANGES), total_rows) if RANGES in saved else None
    last_position = total_rows if ranges is None else sum(hi - lo for lo, hi in ranges)
    for name, value, hi in ((EPOCH, epoch, last_epoch), (POSITION, position, last_position)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
            raise ValueError(f"state field {name} {value!r} is outside 0..{hi}")
    if ranges is not None and epoch >= last_epoch:
        raise ValueError(f"state field {EPOCH} {epoch} is not before {NUM_EPOCHS} {last_epoch}")
    return epoch, position, ranges
