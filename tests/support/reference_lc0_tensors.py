"""An independent numpy statement of the two lc0 tensor conventions, for the tests.

Written from lczero-training's public sources, vectorised over records, and
sharing nothing with the C++ (which works plane by plane on bit masks):

- loader: csrc/loader/stages/tensor_generator.cc (ProcessPlanes and the value
  rows of ConvertFramesToTensors), over V7 frames; V6 records are copied into
  a zeroed V7 frame, as its chunk sources do.
- chunkparser: tf/chunkparser.py, sample_record's padding of V3/V4/V5 records
  to the V6 size, then convert_v6_to_tuple.

Each function returns float32 planes (rows, 112, 8, 8) and the targets, plus
`valid` (rows,): False where the reference itself refuses the record (a
version it does not read, an input format it has no planes for, a value its
asserts or its flat-plane indexing reject).
"""

from __future__ import annotations

import numpy as np

from shardmill.transforms.lc0.record_format import RECORD_SIZES, V6_DTYPE

V7_DTYPE = np.dtype(V6_DTYPE.descr + [("d_st", "<f4"), ("opp_played_idx", "<u2"), ("next_played_idx", "<u2"),
                                      ("reserved_v7", "<f4", (8,))])
assert V7_DTYPE.itemsize == RECORD_SIZES[7]


def records_of(data: bytes) -> np.ndarray:
    """(rows, record_size) uint8 from concatenated records of one version."""
    version = int(np.frombuffer(data[:4], "<u4")[0])
    size = RECORD_SIZES[version]
    return np.frombuffer(data, np.uint8)[: len(data) // size * size].reshape(-1, size)


def _bit_planes(v6: np.ndarray) -> np.ndarray:
    """The 104 bitboard planes: np.unpackbits of the u64s' bytes (high bit first)."""
    raw = np.ascontiguousarray(v6["planes"]).view(np.uint8).reshape(len(v6), 104, 8)
    return np.unpackbits(raw, axis=-1).astype(np.float32).reshape(len(v6), 104, 8, 8)


def _constant(values, rows: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(values, np.float32).reshape(-1, 1, 1), (rows, 8, 8)).copy()


def loader(records: np.ndarray) -> dict:
    rows, size = records.shape
    version = int(np.frombuffer(records[0, :4].tobytes(), "<u4")[0]) if rows else 6
    frames = np.zeros(rows, V7_DTYPE)
    frames.view(np.uint8).reshape(rows, -1)[:, :size] = records[:, : min(size, V7_DTYPE.itemsize)]
    valid = np.full(rows, version in (6, 7) and size == RECORD_SIZES[version])
    planes = np.zeros((rows, 112, 8, 8), np.float32)
    planes[:, :104] = _bit_planes(frames)
    for plane, field in zip(range(104, 109), ("castling_us_ooo", "castling_us_oo", "castling_them_ooo",
                                               "castling_them_oo", "side_to_move_or_enpassant")):
        planes[:, plane] = _constant(frames[field], rows)
    planes[:, 109] = _constant(frames["rule50_count"].astype(np.float32) / np.float32(99), rows)
    planes[:, 111] = 1
    nan = np.full(rows, np.nan, np.float32)
    values = np.stack([
        np.stack([frames["result_q"], frames["result_d"], frames["plies_left"], nan], -1),
        np.stack([frames["best_q"], frames["best_d"], frames["best_m"], nan], -1),
        np.stack([frames["played_q"], frames["played_d"], frames["played_m"], nan], -1),
        np.stack([frames["orig_q"], frames["orig_d"], frames["orig_m"], nan], -1),
        np.stack([frames["root_q"], frames["root_d"], frames["root_m"], nan], -1),
        np.stack([frames["q_st"], frames["d_st"], nan, nan], -1),
    ], 1).astype(np.float32)
    policy = frames["probabilities"].astype(np.float32)
    return {"planes": planes, "policy": policy, "values": values, "valid": valid}


def pad_to_v6(records: np.ndarray) -> np.ndarray:
    """sample_record's padding: V3 +16 +12 zero bytes, V3/V4 input format 1 after the version, V3-V5 +48."""
    rows, size = records.shape
    version = int(np.frombuffer(records[0, :4].tobytes(), "<u4")[0]) if rows else 6
    if version == 3:
        records = np.concatenate([records, np.zeros((rows, 28), np.uint8)], 1)
    elif version == 4:
        records = np.concatenate([records, np.zeros((rows, 12), np.uint8)], 1)
    if version in (3, 4):
        classical = np.broadcast_to(np.frombuffer(np.uint32(1).tobytes(), np.uint8), (rows, 4))
        records = np.concatenate([records[:, :4], classical, records[:, 4:]], 1)
    if version in (3, 4, 5):
        records = np.concatenate([records, np.zeros((rows, 48), np.uint8)], 1)
    return np.ascontiguousarray(records)


def _row_bits(values) -> np.ndarray:
    """reverse_expand_bits of each byte: 8 floats, element j = bit j."""
    return ((np.asarray(values, np.uint8)[:, None] >> np.arange(8, dtype=np.uint8)) & 1).astype(np.float32)


def chunkparser(records: np.ndarray) -> dict:
    rows, size = records.shape
    version = int(np.frombuffer(records[0, :4].tobytes(), "<u4")[0]) if rows else 6
    read = version in (3, 4, 5, 6) and size == RECORD_SIZES.get(version)
    v6 = pad_to_v6(records).view(V6_DTYPE).reshape(rows) if read else np.zeros(rows, V6_DTYPE)
    fmt = v6["input_format"].astype(np.int64)
    stm = v6["side_to_move_or_enpassant"]
    us_ooo, us_oo = v6["castling_us_ooo"], v6["castling_us_oo"]
    them_ooo, them_oo = v6["castling_them_ooo"], v6["castling_them_oo"]
    planes = np.zeros((rows, 112, 8, 8), np.float32)
    planes[:, :104] = _bit_planes(v6)
    flat = np.stack([us_ooo, us_oo, them_ooo, them_oo, stm], -1)
    one = fmt == 1
    planes[one, 104:109] = flat[one].astype(np.float32)[:, :, None, None]
    rows_fmt = np.isin(fmt, (2, 3, 4, 5, 132, 133))
    planes[rows_fmt, 104, 0] = _row_bits(us_ooo[rows_fmt])
    planes[rows_fmt, 104, 7] = _row_bits(them_ooo[rows_fmt])
    planes[rows_fmt, 105, 0] = _row_bits(us_oo[rows_fmt])
    planes[rows_fmt, 105, 7] = _row_bits(them_oo[rows_fmt])
    two = fmt == 2
    planes[two, 108] = stm[two].astype(np.float32)[:, None, None]
    ep = rows_fmt & ~two
    planes[ep, 108, 7] = _row_bits(stm[ep])
    divisor = np.where(fmt > 3, 100.0, 99.0)
    planes[:, 109] = _constant((v6["rule50_count"] / divisor).astype(np.float32), rows)
    planes[:, 110] = _constant(np.isin(fmt, (132, 133)) & (v6["invariance_info"] >= 128), rows)
    planes[:, 111] = 1
    q, d = v6["result_q"].astype(np.float64), v6["result_d"].astype(np.float64)
    result = v6["dummy"].view(np.int8).astype(np.int64)
    if version == 6:
        wdl = np.stack([0.5 * (1 - d + q), d, 0.5 * (1 - d - q)], -1).astype(np.float32)
    else:
        wdl = np.stack([result == 1, result == 0, result == -1], -1).astype(np.float32)
    best_q, best_d = v6["best_q"].astype(np.float64), v6["best_d"].astype(np.float64)
    best_wdl = np.stack([0.5 * (1 - best_d + best_q), best_d, 0.5 * (1 - best_d - best_q)], -1).astype(np.float32)
    plies = v6["plies_left"]
    plies_left = np.where(plies == 0, v6["invariance_info"].astype(np.float32), plies).astype(np.float32)
    valid = np.full(rows, read)
    valid &= np.isin(fmt, (1, 2, 3, 4, 5, 132, 133))
    valid &= ~(one & (flat > 1).any(-1)) & ~(two & (stm > 1))
    if version != 6:
        valid &= np.isin(result, (-1, 0, 1))
    valid &= (best_q >= -1) & (best_q <= 1) & (best_d >= 0) & (best_d <= 1)
    return {"planes": planes, "policy": v6["probabilities"].astype(np.float32), "wdl": wdl, "best_wdl": best_wdl,
            "plies_left": plies_left, "valid": valid}


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounding to nearest even (NaN kept quiet)."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    return np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def encoded_planes(planes: np.ndarray, encoding: str) -> np.ndarray:
    """What the reader serves as `planes` in each encoding, from float32 planes."""
    if encoding == "float32":
        return planes
    if encoding == "float16":
        return planes.astype(np.float16)
    if encoding == "bfloat16":
        return bfloat16_bits(planes)
    bits = (planes != 0).astype(np.uint8)
    if encoding == "uint8":
        return bits
    return np.packbits(bits.reshape(len(planes), 112, 64), axis=-1)


def decoded_planes(batch: dict, encoding: str) -> np.ndarray:
    """float32 planes back from a bit encoding and planes_scale."""
    bits = batch["planes"]
    if encoding == "packed":
        bits = np.unpackbits(bits, axis=-1).reshape(len(bits), 112, 8, 8)
    return bits.astype(np.float32) * batch["planes_scale"][:, :, None, None]
