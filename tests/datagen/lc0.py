"""Writes realistic Leela Chess Zero training data, good and bad, with its ground truth.

- Records are V6 structs (shardmill.transforms.lc0.record_format.V6_DTYPE): version 6,
  policy probabilities over ~20-40 legal moves with -1 for illegal ones,
  sparse bitboard planes, search statistics and a game result seen from the
  side to move.
- A game (chunk) has 20-400 plies from a log-normal length distribution
  (median ~110), like self-play games; it is one gzip file.
- Hourly archives are uncompressed `.tar` files named by hour, holding game
  chunks plus what real archives contain: a directory entry, a LICENSE, a
  non-`.gz` member, a member with a long (GNU/pax) name.
- `bad=True` adds one member of every kind the indexer must dead-letter.

Every file's content is a pure function of the seed. Run as a script to write
the built-in default dataset: `python -m tests.datagen.lc0 OUT_DIR`.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import io
import json
import os
import tarfile

import numpy as np

from shardmill.transforms.lc0.record_format import NUM_PLANES, NUM_POLICY_MOVES, RECORD_SIZES, V6_DTYPE

MIN_PLIES, MAX_PLIES = 20, 400


@dataclasses.dataclass(frozen=True)
class GoodChunk:
    sort_key: str
    chunk: int
    member: str
    num_records: int
    version: int
    game_seed: int  # make_game_records(game_seed, num_records) rebuilds its records
    gzip_members: int = 1
    # What TRAILER counting reports: the last member's records when the members
    # are split at record boundaries (undetectable from the trailer alone).
    trailer_records: int = 0


@dataclasses.dataclass(frozen=True)
class BadChunk:
    sort_key: str
    chunk: int  # -1 for a source-level error
    member: str
    reason: str
    # True if only a full inflation finds it (CRC errors): SCAN/TRAILER index it as good.
    needs_inflation: bool = False
    num_records_if_undetected: int = 0


@dataclasses.dataclass
class DatasetTruth:
    good: list[GoodChunk] = dataclasses.field(default_factory=list)
    bad: list[BadChunk] = dataclasses.field(default_factory=list)
    sources: list[str] = dataclasses.field(default_factory=list)
    skipped_members: int = 0

    def expected_counts(self, method: str) -> dict[tuple[str, int], int]:
        """(sort_key, chunk) -> num_records of every chunk indexing with `method` accepts."""
        counts = {
            (c.sort_key, c.chunk): c.trailer_records if method == "trailer" else c.num_records
            for c in self.good
        }
        if method != "decompress":
            for b in self.bad:
                if b.needs_inflation:
                    counts[(b.sort_key, b.chunk)] = b.num_records_if_undetected
        return counts

    def expected_errors(self, method: str) -> set[tuple[str, int, str]]:
        """(sort_key, chunk, reason) of every dead letter indexing with `method` reports."""
        return {
            (b.sort_key, b.chunk, b.reason)
            for b in self.bad
            if method == "decompress" or not b.needs_inflation
        }

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


def game_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    """Plies per game: log-normal around 110, clipped to [20, 400]."""
    return np.clip(rng.lognormal(mean=np.log(110), sigma=0.55, size=n), MIN_PLIES, MAX_PLIES).astype(int)


def make_game_records(game_seed: int, num_records: int) -> np.ndarray:
    """The V6 records of one self-play game, as a V6_DTYPE array."""
    rng = np.random.default_rng(game_seed)
    n = num_records
    rec = np.zeros(n, dtype=V6_DTYPE)
    rec["version"] = 6
    rec["input_format"] = 1
    probs = np.full((n, NUM_POLICY_MOVES), -1.0, dtype=np.float32)
    played = np.zeros(n, dtype=np.uint16)
    for i in range(n):
        legal = rng.choice(NUM_POLICY_MOVES, size=int(rng.integers(20, 41)), replace=False)
        p = rng.dirichlet(np.full(len(legal), 0.3)).astype(np.float32)
        probs[i, legal] = p
        played[i] = legal[int(np.argmax(p))]
    rec["probabilities"] = probs
    # Sparse bitboards: each plane has a few bits set, history planes repeat.
    bits = rng.integers(0, 64, size=(n, NUM_PLANES, 2), dtype=np.uint64)
    planes = (np.uint64(1) << bits[..., 0]) | (np.uint64(1) << bits[..., 1])
    planes[:, 13 * 8 :] = 0  # aux planes are zero in input_format 1
    rec["planes"] = planes
    ply = np.arange(n)
    rec["castling_us_ooo"] = (ply < n // 3).astype(np.uint8)
    rec["castling_us_oo"] = (ply < n // 2).astype(np.uint8)
    rec["castling_them_ooo"] = (ply < n // 3).astype(np.uint8)
    rec["castling_them_oo"] = (ply < n // 2).astype(np.uint8)
    rec["side_to_move_or_enpassant"] = (ply % 2).astype(np.uint8)
    rec["rule50_count"] = (ply % 50).astype(np.uint8)
    result = float(rng.choice([-1.0, 0.0, 1.0], p=[0.3, 0.4, 0.3]))
    sign = np.where(ply % 2 == 0, 1.0, -1.0).astype(np.float32)
    q = np.tanh(np.linspace(0, 2 * result, n)).astype(np.float32) * sign
    for name in ("root_q", "best_q", "played_q", "orig_q"):
        rec[name] = np.clip(q + rng.normal(0, 0.02, n).astype(np.float32), -1, 1)  # lc0's q is in [-1, 1]
    draw = np.float32(0.4 if result == 0 else 0.2)
    for name in ("root_d", "best_d", "played_d", "orig_d"):
        rec[name] = draw
    rec["plies_left"] = (n - ply).astype(np.float32)
    for name in ("root_m", "best_m", "played_m", "orig_m"):
        rec[name] = rec["plies_left"]
    rec["result_q"] = result * sign
    rec["result_d"] = np.float32(1.0 if result == 0 else 0.0)
    rec["visits"] = rng.integers(400, 1200, n, dtype=np.uint32)
    rec["played_idx"] = played
    rec["best_idx"] = played
    rec["policy_kld"] = rng.gamma(2.0, 0.05, n).astype(np.float32)
    rec["q_st"] = q
    return rec


def shuffled_v6_frames(pool_records: int = 16384, seed: int = 0):
    """A `frames(ids, width)` function for datagen.shards.write_output: V6
    records of self-play games, as the sampling job's shuffled output holds
    them (neighbouring rows from different games). Rows cycle through a pool
    of `pool_records` records (137 MB at the default, far beyond zstd's window,
    so the repetition does not help compression)."""
    rng = np.random.default_rng(seed)
    games, count = [], 0
    while count < pool_records:
        games.append(make_game_records(int(rng.integers(2**32)), int(game_lengths(rng, 1)[0])))
        count += len(games[-1])
    pool = np.concatenate(games)[:pool_records].view(np.uint8).reshape(pool_records, V6_DTYPE.itemsize)

    def frames(ids: np.ndarray, width: int) -> np.ndarray:
        if width != V6_DTYPE.itemsize:
            raise ValueError(f"V6 frames are {V6_DTYPE.itemsize} bytes, not {width}")
        # An odd multiplier coprime to the pool size scatters consecutive ids over games.
        return pool[(np.asarray(ids, dtype=np.int64) * 7919) % pool_records]

    return frames


def member_cuts(payload_len: int, members: int, record_size: int = 1) -> np.ndarray:
    """Byte offsets splitting a payload into `members` parts, on multiples of record_size."""
    cuts = np.linspace(0, payload_len // record_size, members + 1).astype(int) * record_size
    cuts[-1] = payload_len
    return cuts


def gzip_bytes(payload: bytes, members: int = 1, level: int = 6, record_size: int = 1) -> bytes:
    """gzip-compresses payload as `members` concatenated gzip members cut at record_size multiples."""
    cuts = member_cuts(len(payload), members, record_size)
    return b"".join(
        gzip.compress(payload[a:b], compresslevel=level, mtime=0) for a, b in zip(cuts[:-1], cuts[1:])
    )


def raw_records(version: int, num_records: int, seed: int) -> bytes:
    """Records of any version: the version field, then seeded filler bytes."""
    size = RECORD_SIZES.get(version, RECORD_SIZES[6])
    rng = np.random.default_rng(seed)
    body = np.zeros((num_records, size), dtype=np.uint8)
    body[:, :4] = np.frombuffer(int(version).to_bytes(4, "little"), dtype=np.uint8)
    body[:, 4:64] = rng.integers(0, 4, size=(num_records, 60), dtype=np.uint8)
    return body.tobytes()


class _SourceWriter:
    """Collects chunks for one source and records their ground truth."""

    def __init__(self, truth: DatasetTruth, sort_key: str):
        self.truth = truth
        self.sort_key = sort_key
        self.members: list[tuple[str, bytes]] = []  # (member name, bytes); chunks and others
        self.chunk = 0

    def good(self, name, game_seed, plies, gzip_members=1, version=6, record_aligned=True):
        """A good chunk; with several members cut at record boundaries unless record_aligned=False."""
        if version == 6:
            payload = make_game_records(game_seed, plies).tobytes()
        else:
            payload = raw_records(version, plies, game_seed)
        size = RECORD_SIZES[version]
        cut_unit = size if record_aligned else 1
        self.members.append((name, gzip_bytes(payload, gzip_members, record_size=cut_unit)))
        cuts = member_cuts(len(payload), gzip_members, cut_unit)
        last_member = int(cuts[-1] - cuts[-2])
        trailer_records = last_member // size if last_member % size == 0 else plies
        self.truth.good.append(
            GoodChunk(self.sort_key, self.chunk, name, plies, version, game_seed, gzip_members, trailer_records)
        )
        self.chunk += 1

    def bad(self, name: str, data: bytes, reason: str, needs_inflation=False, records_if_undetected=0):
        self.members.append((name, data))
        self.truth.bad.append(
            BadChunk(self.sort_key, self.chunk, name, reason, needs_inflation, records_if_undetected)
        )
        self.chunk += 1

    def other(self, name: str, data: bytes):
        """A member the indexer must skip (not a chunk)."""
        self.members.append((name, data))
        self.truth.skipped_members += 1


def _bad_members(src: _SourceWriter, seed: int) -> None:
    """One member of every kind the indexer must dead-letter."""
    rng = np.random.default_rng(seed)
    good = gzip_bytes(make_game_records(seed, 30).tobytes())
    src.bad("bad.notgzip.gz", rng.integers(0, 256, 5000, dtype=np.uint8).tobytes(), "not_gzip")
    src.bad("bad.truncated.gz", good[: len(good) * 2 // 3], "truncated")
    crc_broken = bytearray(good)
    crc_broken[-8] ^= 0xFF  # first CRC32 byte of the trailer
    src.bad("bad.crc.gz", bytes(crc_broken), "corrupt", needs_inflation=True, records_if_undetected=30)
    src.bad("bad.empty-payload.gz", gzip.compress(b"", mtime=0), "empty")
    src.bad("bad.zero-bytes.gz", b"", "empty")
    src.bad("bad.partial-record.gz", gzip_bytes(raw_records(6, 3, seed)[: -RECORD_SIZES[6] // 2]), "bad_size")
    src.bad("bad.version99.gz", gzip_bytes(raw_records(99, 4, seed)), "unknown_version")


def write_tar(path: str, members: list[tuple[str, bytes]], fmt=tarfile.GNU_FORMAT, with_dir=True) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        if with_dir:
            info = tarfile.TarInfo("games")
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def write_dataset(
    out_dir: str,
    num_archives: int = 3,
    games_per_archive: int = 8,
    loose_games: int = 4,
    bad: bool = True,
    seed: int = 1,
    lengths: list[int] | None = None,
) -> DatasetTruth:
    """Writes hourly tar archives and loose `.gz` games into out_dir; returns the truth.

    lengths, if given, fixes the plies of every good game in writing order
    (archives first, then loose games) instead of drawing them.
    """
    os.makedirs(out_dir, exist_ok=True)
    truth = DatasetTruth()
    rng = np.random.default_rng(seed)
    total = num_archives * games_per_archive + loose_games
    plies = list(lengths) if lengths is not None else list(game_lengths(rng, total))
    if len(plies) != total:
        raise ValueError(f"lengths has {len(plies)} entries, need {total}")
    game_id = seed * 1_000_000
    for a in range(num_archives):
        sort_key = f"training-run1-20261101-{a:02d}00.tar"
        src = _SourceWriter(truth, sort_key)
        for g in range(games_per_archive):
            game_id += 1
            name = f"games/training.{game_id}.gz"
            if g == 1:  # a long name: needs a GNU longname (or pax) header
                name = "games/" + "selfplay-" * 12 + f"training.{game_id}.gz"
            if g == 2:  # several gzip members, cut between records: ISIZE is the last one's
                src.good(name, game_id, int(plies.pop(0)), gzip_members=2)
            elif g == 3:  # several members cut inside records
                src.good(name, game_id, int(plies.pop(0)), gzip_members=3, record_aligned=False)
            elif g == 4 and a == 0:  # another record version
                src.good(name, game_id, int(plies.pop(0)), version=5)
            else:
                src.good(name, game_id, int(plies.pop(0)))
        src.other("LICENSE", b"GPL-3.0\n")
        src.other("games/README.txt", b"not a chunk\n")
        if bad and a == 0:
            _bad_members(src, seed)
        fmt = tarfile.PAX_FORMAT if a % 2 else tarfile.GNU_FORMAT
        write_tar(os.path.join(out_dir, sort_key), src.members, fmt, with_dir=True)
        truth.skipped_members += 1  # the directory entry
        truth.sources.append(sort_key)
    for _ in range(loose_games):
        game_id += 1
        name = f"training.{game_id}.gz"
        src = _SourceWriter(truth, name)
        src.good(name, game_id, int(plies.pop(0)))
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(src.members[0][1])
        truth.sources.append(name)
    if bad:
        name = "training.loose-bad.gz"
        src = _SourceWriter(truth, name)
        src.bad(name, b"this is not gzip data", "not_gzip")
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(src.members[0][1])
        truth.sources.append(name)
    return truth


# Corpora of many sources for benchmarks at scale: a few distinct games reused (a chunk's identity is its
# source and ordinal, not its bytes), so that writing 10^6 chunks costs little.
DISTINCT_GAMES = 64


def small_games(seed: int) -> list[bytes]:
    """DISTINCT_GAMES gzip games of 4-15 records."""
    rng = np.random.default_rng(seed)
    return [gzip_bytes(make_game_records(seed * 1000 + i, int(n)).tobytes())
            for i, n in enumerate(rng.integers(4, 16, DISTINCT_GAMES))]


def write_loose_games(directory: str, count: int) -> None:
    """count loose `.gz` game files."""
    os.makedirs(directory, exist_ok=True)
    games = small_games(1)
    for i in range(count):
        with open(os.path.join(directory, f"training.{i:08d}.gz"), "wb") as f:
            f.write(games[i % len(games)])


def write_archives(directory: str, archives: int, members: int) -> None:
    """archives hourly-style `.tar` files of members one-record games each."""
    os.makedirs(directory, exist_ok=True)
    games = [gzip_bytes(make_game_records(7000 + i, 1).tobytes()) for i in range(DISTINCT_GAMES)]
    for a in range(archives):
        write_tar(os.path.join(directory, f"training-2026{a:06d}.tar"),
                  [(f"games/training.{a}.{m}.gz", games[(a + m) % len(games)]) for m in range(members)],
                  with_dir=False)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--archives", type=int, default=6)
    parser.add_argument("--games-per-archive", type=int, default=40)
    parser.add_argument("--loose-games", type=int, default=10)
    parser.add_argument("--no-bad", action="store_true", help="write no bad members")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    truth = write_dataset(
        args.out_dir, args.archives, args.games_per_archive, args.loose_games, not args.no_bad, args.seed
    )
    print(
        f"wrote {len(truth.sources)} sources, {len(truth.good)} good chunks "
        f"({sum(c.num_records for c in truth.good)} records), {len(truth.bad)} bad chunks to {args.out_dir}"
    )


if __name__ == "__main__":
    main()
