"""Leela Chess Zero's formats (ARCHITECTURE.md, "Formats"): the training records, and the files they come in.

A record is a little-endian struct whose first 4 bytes hold its version; the
version fixes the record size. Only V6 has its full layout spelled out here
(the test data generator writes it); for the other versions only the size is
needed to count and cut records.
"""

from __future__ import annotations

import numpy as np

# The files lc0 data comes in: games as `.gz` chunks, loose or as members of uncompressed `.tar` archives.
SOURCE_SUFFIXES = (".gz", ".tar")
COMPRESSED_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")  # refused with their own reason
# What discovery hands to indexing: the sources, and the archives that get their own dead letter.
LC0_INPUT_SUFFIXES = SOURCE_SUFFIXES + COMPRESSED_ARCHIVE_SUFFIXES

# Record size in bytes for each known version.
RECORD_SIZES: dict[int, int] = {3: 8276, 4: 8292, 5: 8308, 6: 8356, 7: 8396}

NUM_POLICY_MOVES = 1858
NUM_PLANES = 104

# The V6 record as a numpy structured dtype (little-endian, packed).
V6_DTYPE = np.dtype(
    [
        ("version", "<u4"),
        ("input_format", "<u4"),
        ("probabilities", "<f4", (NUM_POLICY_MOVES,)),
        ("planes", "<u8", (NUM_PLANES,)),
        ("castling_us_ooo", "u1"),
        ("castling_us_oo", "u1"),
        ("castling_them_ooo", "u1"),
        ("castling_them_oo", "u1"),
        ("side_to_move_or_enpassant", "u1"),
        ("rule50_count", "u1"),
        ("invariance_info", "u1"),
        ("dummy", "u1"),
        ("root_q", "<f4"),
        ("best_q", "<f4"),
        ("root_d", "<f4"),
        ("best_d", "<f4"),
        ("root_m", "<f4"),
        ("best_m", "<f4"),
        ("plies_left", "<f4"),
        ("result_q", "<f4"),
        ("result_d", "<f4"),
        ("played_q", "<f4"),
        ("played_d", "<f4"),
        ("played_m", "<f4"),
        ("orig_q", "<f4"),
        ("orig_d", "<f4"),
        ("orig_m", "<f4"),
        ("visits", "<u4"),
        ("played_idx", "<u2"),
        ("best_idx", "<u2"),
        ("policy_kld", "<f4"),
        ("q_st", "<f4"),
    ]
)
assert V6_DTYPE.itemsize == RECORD_SIZES[6]


def record_size_for_version(version: int) -> int | None:
    """Record size of an lc0 version, or None if the version is unknown."""
    return RECORD_SIZES.get(version)


def parse_version(first_bytes: bytes) -> int:
    """The version field of a record from its first 4 bytes (little-endian u32)."""
    if len(first_bytes) < 4:
        raise ValueError(f"need 4 bytes for the version field, got {len(first_bytes)}")
    return int.from_bytes(first_bytes[:4], "little")
