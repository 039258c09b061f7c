"""lc0 training tensors from the native reader: both conventions, every plane encoding, errors by shard and row.

Hand-built records with known boards pin the semantics element by element;
tests/support/reference_lc0_tensors.py (numpy, written from lczero-training's
sources) is checked against the C++ on thousands of random records and on
the real records in ../shared/fixtures/lc0/.
"""

import glob
import gzip
import os

import numpy as np
import pytest

from shardmill.native_ext import Lc0Tensors, OrderOptions, OutputError, ShardReader
from shardmill.core.kernels import lc0_tensors
from shardmill.transforms.lc0.record_format import RECORD_SIZES, V6_DTYPE
from tests.datagen.shards import write_output
from tests.support import reference_lc0_tensors as ref
from tests.support.paths import SHARED_FIXTURES

FIXTURES = os.path.join(SHARED_FIXTURES, "lc0")
needs_fixtures = pytest.mark.skipif(not glob.glob(os.path.join(FIXTURES, "*.bin.gz")),
                                    reason="../shared/fixtures/lc0 absent")
ENCODINGS = ("float32", "float16", "bfloat16", "uint8", "packed")


def bitboard(*squares: str) -> np.uint64:
    """A stored lc0 bitboard: square (rank r, file f) is bit 8r + 7 - f (each byte's bits reversed)."""
    bits = 0
    for square in squares:
        file, rank = "abcdefgh".index(square[0]), int(square[1]) - 1
        bits |= 1 << (8 * rank + 7 - file)
    return np.uint64(bits)


def board(*squares: str) -> np.ndarray:
    """The (8, 8) plane the network sees: row = rank, column = file."""
    plane = np.zeros((8, 8), np.float32)
    for square in squares:
        plane[int(square[1]) - 1, "abcdefgh".index(square[0])] = 1
    return plane


FILES = "abcdefgh"
START = {  # our pieces (white to move), then theirs, as lc0's planes 0-11 order them
    0: [f"{f}2" for f in FILES], 1: ["b1", "g1"], 2: ["c1", "f1"], 3: ["a1", "h1"], 4: ["d1"], 5: ["e1"],
    6: [f"{f}7" for f in FILES], 7: ["b8", "g8"], 8: ["c8", "f8"], 9: ["a8", "h8"], 10: ["d8"], 11: ["e8"],
}


def v6_record(input_format=1, castling=(1, 1, 1, 1), stm_or_ep=0, rule50=0, invariance=0, **floats) -> np.ndarray:
    r = np.zeros(1, V6_DTYPE)
    r["version"], r["input_format"] = 6, input_format
    for plane, squares in START.items():
        r["planes"][0, plane] = bitboard(*squares)
    (r["castling_us_ooo"], r["castling_us_oo"], r["castling_them_ooo"], r["castling_them_oo"]) = castling
    r["side_to_move_or_enpassant"], r["rule50_count"], r["invariance_info"] = stm_or_ep, rule50, invariance
    r["probabilities"][0, :] = np.arange(1858, dtype=np.float32) / 1858
    r["probabilities"][0, 5] = -1  # an illegal move, as lc0 marks them
    for name, value in floats.items():
        r[name] = value
    return r.view(np.uint8).reshape(1, -1)


def convert(records, convention, planes="float32"):
    tensors, bad, error = lc0_tensors(np.ascontiguousarray(records), convention, planes, 1)
    assert bad == -1, error
    return tensors


@pytest.mark.parametrize("convention", ["loader", "chunkparser"])
def test_start_position_planes_for_both_conventions(convention):
    t = convert(v6_record(rule50=0), convention)
    planes = t["planes"][0]
    assert planes.shape == (112, 8, 8) and t["policy"].shape == (1, 1858)
    for plane, squares in START.items():
        np.testing.assert_array_equal(planes[plane], board(*squares), err_msg=f"plane {plane}")
    assert not planes[12:104].any()  # repetition and the (empty) history
    for plane in range(104, 108):
        np.testing.assert_array_equal(planes[plane], np.ones((8, 8)))  # format 1: castling rights as 0/1 planes
    assert not planes[108].any() and not planes[109].any() and not planes[110].any()
    np.testing.assert_array_equal(planes[111], np.ones((8, 8)))
    assert t["policy"][0, 5] == -1 and t["policy"][0, 929] == np.float32(929 / 1858)


@pytest.mark.parametrize("convention", ["loader", "chunkparser"])
def test_castling_gone_black_to_move_and_rule50_in_format_1(convention):
    planes = convert(v6_record(castling=(0, 1, 0, 0), stm_or_ep=1, rule50=99), convention)["planes"][0]
    assert not planes[104].any() and not planes[106].any() and not planes[107].any()
    np.testing.assert_array_equal(planes[105], np.ones((8, 8)))
    np.testing.assert_array_equal(planes[108], np.ones((8, 8)))  # black to move
    assert (planes[109] == np.float32(1.0)).all()  # 99 / 99 in both
    assert (convert(v6_record(rule50=50), convention)["planes"][0, 109] == np.float32(50 / 99)).all()


def test_en_passant_and_castling_masks_differ_between_the_conventions():
    # Input format 3: castling bytes are rook-file masks, the side-to-move byte an en-passant file mask.
    record = v6_record(input_format=3, castling=(0x01, 0x80, 0x01, 0x00), stm_or_ep=1 << 4, rule50=99)
    loader = convert(record, "loader")["planes"][0]
    assert (loader[104] == 1).all() and (loader[105] == 128).all() and (loader[108] == 16).all()  # raw bytes
    assert (loader[109] == np.float32(1.0)).all()
    chunk = convert(record, "chunkparser")["planes"][0]
    np.testing.assert_array_equal(chunk[104], board("a1", "a8"))  # ours on rank 1, theirs on rank 8
    np.testing.assert_array_equal(chunk[105], board("h1"))
    assert not chunk[106].any() and not chunk[107].any()
    np.testing.assert_array_equal(chunk[108], board("e8"))  # the en-passant file, on the last rank
    assert (chunk[109] == np.float32(99 / 99)).all()  # format 3: still / 99


def test_chunkparser_rule50_divisor_and_the_format_132_133_plane():
    four = convert(v6_record(input_format=4, castling=(0, 0, 0, 0), rule50=99), "chunkparser")["planes"][0]
    assert (four[109] == np.float32(99 / 100)).all()
    two = convert(v6_record(input_format=2, castling=(0x80, 0, 0, 0x01), stm_or_ep=1), "chunkparser")["planes"][0]
    np.testing.assert_array_equal(two[104], board("h1"))
    np.testing.assert_array_equal(two[105], board("a8"))
    np.testing.assert_array_equal(two[108], np.ones((8, 8)))  # format 2: side to move, not en passant
    for fmt, invariance, expected in [(132, 128, 1), (133, 200, 1), (133, 127, 0), (5, 255, 0)]:
        plane = convert(v6_record(input_format=fmt, castling=(0, 0, 0, 0), invariance=invariance),
                        "chunkparser")["planes"][0, 110]
        assert (plane == expected).all(), (fmt, invariance)


def test_loader_value_rows():
    fields = dict(result_q=-1.0, result_d=0.0, plies_left=41.0, best_q=0.25, best_d=0.5, best_m=12.0,
                  played_q=0.125, played_d=0.375, played_m=11.0, orig_q=np.nan, orig_d=0.0625, orig_m=9.0,
                  root_q=0.75, root_d=0.125, root_m=10.0, q_st=0.0078125)
    values = convert(v6_record(**fields), "loader")["values"][0]
    nan = np.nan
    expected = [[-1, 0, 41, nan], [0.25, 0.5, 12, nan], [0.125, 0.375, 11, nan], [nan, 0.0625, 9, nan],
                [0.75, 0.125, 10, nan], [0.0078125, 0, nan, nan]]  # V6: d_st is the widened frame's zero
    np.testing.assert_array_equal(values, np.array(expected, np.float32))


def test_chunkparser_targets():
    t = convert(v6_record(result_q=-0.5, result_d=0.25, best_q=0.5, best_d=0.25, plies_left=0, invariance=37),
                "chunkparser")
    np.testing.assert_array_equal(t["wdl"][0], np.float32([0.125, 0.25, 0.625]))
    np.testing.assert_array_equal(t["best_wdl"][0], np.float32([0.625, 0.25, 0.125]))
    assert t["plies_left"][0] == 37  # 0 plies left: the invariance byte, as for old records
    assert convert(v6_record(plies_left=17.0), "chunkparser")["plies_left"][0] == 17
    v5 = v6_record(best_q=0, best_d=0)[:, : RECORD_SIZES[5]].copy()
    v5[0, :4] = np.frombuffer(np.uint32(5).tobytes(), np.uint8)
    for result, wdl in [(1, [1, 0, 0]), (0, [0, 1, 0]), (255, [0, 0, 1])]:  # the result byte is an int8
        v5[0, 8279] = result
        np.testing.assert_array_equal(convert(v5, "chunkparser")["wdl"][0], np.float32(wdl))


def test_records_a_convention_does_not_read_are_named_by_row():
    good = v6_record()
    bad_format = v6_record(input_format=7)
    records = np.concatenate([good, good, bad_format, good])
    _, bad, error = lc0_tensors(records, "chunkparser", "float32", 1)
    assert bad == 2 and "input format 7" in error
    assert lc0_tensors(records, "loader", "float32", 1)[1] == -1  # the loader reads any format's bytes as they are
    v7 = np.zeros((3, RECORD_SIZES[7]), np.uint8)
    v7[:, 0] = 7
    assert lc0_tensors(v7, "chunkparser", "float32", 1)[1:] == (0, "a version 7 record: the chunkparser "
                                                                   "convention reads V3 to V6")
    v5 = np.zeros((2, RECORD_SIZES[5]), np.uint8)
    v5[:, 0] = 5
    assert lc0_tensors(v5, "loader", "float32", 1)[1:] == (0, "a version 5 record: the loader convention reads "
                                                             "V6 and V7")
    wrong_size = np.zeros((2, 100), np.uint8)
    wrong_size[:, 0] = 6
    assert "column holds 100-byte records" in lc0_tensors(wrong_size, "loader", "float32", 1)[2]
    out_of_range = v6_record(best_q=1.5)
    assert lc0_tensors(out_of_range, "chunkparser", "float32", 1)[1] == 0


# ---- the numpy reference against the C++ ------------------------------------------


def random_records(rng, version: int, n: int, formats=(1, 2, 3, 4, 5, 132, 133)) -> np.ndarray:
    """Random records a chunkparser accepts: random bitboards, policies and floats in its ranges."""
    size = RECORD_SIZES[version]
    records = rng.integers(0, 256, (n, size), dtype=np.uint8)
    v6 = np.zeros(n, ref.V7_DTYPE)
    raw = v6.view(np.uint8).reshape(n, -1)
    raw[:] = rng.integers(0, 256, raw.shape, dtype=np.uint8)
    v6["version"] = version
    v6["input_format"] = rng.choice(formats, n)
    v6["probabilities"] = rng.random((n, 1858), dtype=np.float32)
    small = v6["input_format"] <= 2
    for field in ("castling_us_ooo", "castling_us_oo", "castling_them_ooo", "castling_them_oo",
                  "side_to_move_or_enpassant"):
        v6[field] = np.where(small, rng.integers(0, 2, n), v6[field])
    v6["rule50_count"] = rng.integers(0, 101, n)
    for field in v6.dtype.names:
        if v6.dtype[field] == np.dtype("<f4") and field != "probabilities":
            v6[field] = rng.uniform(-1, 1, n).astype(np.float32)
    v6["best_d"] = rng.random(n, dtype=np.float32)
    v6["plies_left"] = np.where(rng.random(n) < 0.3, 0, rng.integers(1, 300, n)).astype(np.float32)
    v6["dummy"] = rng.integers(-1, 2, n).astype(np.int8).view(np.uint8)
    if version >= 5:
        records[:] = raw[:, :size]
    else:  # V3/V4: no input format field, fewer floats
        records[:, :4] = raw[:, :4]
        records[:, 4:] = raw[:, 8 : size + 4]
    return records


def assert_same(native: dict, expected: dict, encoding: str, rows: np.ndarray):
    np.testing.assert_array_equal(native["planes"][rows], ref.encoded_planes(expected["planes"][rows], encoding))
    if encoding in ("uint8", "packed"):
        np.testing.assert_array_equal(ref.decoded_planes({k: v[rows] for k, v in native.items()}, encoding),
                                      expected["planes"][rows])
    for key in ("policy", "values", "wdl", "best_wdl", "plies_left"):
        if key in expected:
            np.testing.assert_array_equal(native[key][rows], expected[key][rows], err_msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("version", [3, 4, 5, 6, 7])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_native_matches_the_numpy_reference_on_random_records(version, encoding):
    rng = np.random.default_rng(version * 10 + ENCODINGS.index(encoding))
    records = random_records(rng, version, 1500)
    for convention, reference in (("loader", ref.loader), ("chunkparser", ref.chunkparser)):
        expected = reference(records)
        tensors, bad, error = lc0_tensors(records, convention, encoding, 2)
        first_bad = int(np.argmin(expected["valid"])) if not expected["valid"].all() else -1
        assert bad == first_bad, (convention, bad, first_bad, error)
        rows = np.arange(len(records) if bad < 0 else bad)
        assert_same(tensors, expected, encoding, rows)


@needs_fixtures
@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(FIXTURES, "*.bin.gz"))), ids=os.path.basename)
def test_native_matches_the_numpy_reference_on_the_real_records(path):
    records = ref.records_of(gzip.open(path).read())
    for convention, reference in (("loader", ref.loader), ("chunkparser", ref.chunkparser)):
        expected = reference(records)
        for encoding in ("float32", "float16", "packed"):
            tensors, bad, _ = lc0_tensors(records, convention, encoding, 2)
            first_bad = int(np.argmin(expected["valid"])) if not expected["valid"].all() else -1
            assert bad == first_bad, (convention, encoding)
            assert_same(tensors, expected, encoding, np.arange(len(records) if bad < 0 else bad))


# ---- through the reader and the adapters ---------------------------------------


def fixture_output(directory, name: str) -> np.ndarray:
    records = ref.records_of(gzip.open(os.path.join(FIXTURES, name)).read())
    write_output(str(directory), [len(records) // 2, len(records) - len(records) // 2], 16, records.shape[1],
                 frames=lambda ids, width: records[ids])
    return records


@needs_fixtures
@pytest.mark.parametrize("convention", ["loader", "chunkparser"])
@pytest.mark.parametrize("batch_size", [32, 24])  # 24: batches that span two windows are copies
def test_the_reader_serves_tensors_of_each_batch_in_its_order(tmp_path, convention, batch_size):
    records = fixture_output(tmp_path, "frames_v6_3.bin.gz")
    expected = (ref.loader if convention == "loader" else ref.chunkparser)(records)
    with ShardReader(str(tmp_path), batch_size=batch_size, order_options=OrderOptions(seed=4, window_row_groups=2), converter=Lc0Tensors(convention, planes="float16")) as reader:
        batches = list(reader)
    assert sum(len(b["record_index"]) for b in batches) == len(records)
    for batch in batches:
        rows = batch["record_index"]
        np.testing.assert_array_equal(batch["planes"], expected["planes"][rows].astype(np.float16))
        np.testing.assert_array_equal(batch["policy"], expected["policy"][rows])
        np.testing.assert_array_equal(batch["frame"], records[rows])


@needs_fixtures
def test_a_record_the_convention_cannot_read_names_its_shard_and_row(tmp_path):
    records = fixture_output(tmp_path, "frames_v5_3.bin.gz")
    with ShardReader(str(tmp_path), batch_size=8, order_options=OrderOptions(shuffle=False), converter=Lc0Tensors("chunkparser")) as reader:
        assert sum(len(b["planes"]) for b in reader) == len(records)
    with ShardReader(str(tmp_path), batch_size=8, order_options=OrderOptions(shuffle=False), converter=Lc0Tensors("loader")) as reader:
        with pytest.raises(OutputError, match=r"shard-00000\S*: row 0: a version 5 record: the loader convention"):
            next(reader)
    with pytest.raises(ValueError, match="Lc0Tensors.convention must be one of"):
        ShardReader(str(tmp_path), converter=Lc0Tensors("tf"))
    with pytest.raises(ValueError, match="planes must be one of"):
        ShardReader(str(tmp_path), converter=Lc0Tensors("loader", planes="int4"))


@needs_fixtures
def test_only_batches_holding_a_bad_record_fail_and_the_stream_goes_on(tmp_path):
    records = ref.records_of(gzip.open(os.path.join(FIXTURES, "frames_v6_1.bin.gz")).read()).copy()
    bad = {5, 77, 150}
    for i in bad:
        records[i, 4:8] = np.frombuffer(np.uint32(9).tobytes(), np.uint8)  # an input format the chunkparser lacks
    manifest = write_output(str(tmp_path), [100, len(records) - 100], 16, records.shape[1],
                            frames=lambda ids, width: records[ids])
    served, named = [], set()
    with ShardReader(str(tmp_path), batch_size=8, order_options=OrderOptions(seed=3, window_row_groups=2), converter=Lc0Tensors("chunkparser")) as reader:
        while True:
            try:
                batch = next(reader)
            except StopIteration:
                break
            except OutputError as err:
                shard, row = str(err).split(": row ")[0], int(str(err).split(": row ")[1].split(":")[0])
                first = 0 if shard.endswith(manifest["shards"][0]["path"]) else 100
                named.add(first + row)
                assert "input format 9 is not one the chunkparser converts" in str(err)
                continue
            served.extend(batch["record_index"].tolist())
    assert named == bad and not bad & set(served)
    assert len(served) + 8 * len(named) >= len(records) and len(set(served)) == len(served)


@needs_fixtures
def test_the_torch_adapter_passes_the_tensors_through(tmp_path):
    torch = pytest.importorskip("torch")
    from shardmill.native_ext.torch_dataset import ShardIterableDataset

    records = fixture_output(tmp_path, "frames_v6_1.bin.gz")
    expected = ref.loader(records)
    dataset = ShardIterableDataset(str(tmp_path), batch_size=64, order_options=OrderOptions(seed=2), converter=Lc0Tensors("loader", planes="bfloat16"))
    batches = list(torch.utils.data.DataLoader(dataset, batch_size=None))
    assert sum(len(b["planes"]) for b in batches) == len(records)
    batch = batches[0]
    assert batch["planes"].dtype == torch.bfloat16 and tuple(batch["planes"].shape[1:]) == (112, 8, 8)
    rows = batch["record_index"].numpy()
    bits = batch["planes"].view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bits, ref.encoded_planes(expected["planes"][rows], "bfloat16"))
    np.testing.assert_array_equal(batch["planes"][:, :104].float().numpy(), expected["planes"][rows, :104])
    np.testing.assert_array_equal(batch["values"].numpy(), expected["values"][rows])


def _rank(files: int, rank: int) -> np.ndarray:
    """An (8, 8) plane with bit j of `files` set on file j of `rank`."""
    plane = np.zeros((8, 8), np.float32)
    plane[rank] = [(files >> j) & 1 for j in range(8)]
    return plane


@pytest.mark.parametrize("input_format", [1, 2, 3, 4, 5, 132, 133])
@pytest.mark.parametrize("rule50", [0, 99])
def test_the_eight_extra_planes_of_every_input_format(input_format, rule50):
    small = input_format <= 2
    castling = (1, 0, 1, 0) if small else (0x01, 0x80, 0x00, 0x01)
    stm_or_ep = 1 if small else 1 << 2  # black to move / en passant on file c
    record = v6_record(input_format=input_format, castling=castling, stm_or_ep=stm_or_ep, rule50=rule50,
                       invariance=128)
    ones, zeros = np.ones((8, 8), np.float32), np.zeros((8, 8), np.float32)
    loader = convert(record, "loader")["planes"][0]
    expected_loader = [c * ones for c in castling] + [stm_or_ep * ones, np.float32(rule50) / np.float32(99) * ones,
                                                      zeros, ones]
    np.testing.assert_array_equal(loader[104:], np.stack(expected_loader))
    chunk = convert(record, "chunkparser")["planes"][0]
    us_ooo, us_oo, them_ooo, them_oo = castling
    if input_format == 1:
        middle = [us_ooo * ones, us_oo * ones, them_ooo * ones, them_oo * ones, stm_or_ep * ones]
    else:
        middle = [_rank(us_ooo, 0) + _rank(them_ooo, 7), _rank(us_oo, 0) + _rank(them_oo, 7), zeros, zeros,
                  stm_or_ep * ones if input_format == 2 else _rank(stm_or_ep, 7)]
    divisor = 100.0 if input_format > 3 else 99.0
    aux = ones if input_format in (132, 133) else zeros  # invariance_info 128 sets it in 132/133 only
    expected_chunk = middle + [np.float32(rule50 / divisor) * ones, aux, ones]
    np.testing.assert_array_equal(chunk[104:], np.stack(expected_chunk))
    np.testing.assert_array_equal(chunk[:104], loader[:104])  # the bitboards are the same in both


@needs_fixtures
def test_the_grain_adapter_passes_the_tensors_through(tmp_path):
    pytest.importorskip("grain")
    from shardmill.native_ext.grain_dataset import ShardIterDataset

    records = fixture_output(tmp_path, "frames_v6_2.bin.gz")
    expected = ref.chunkparser(records)
    iterator = iter(ShardIterDataset(str(tmp_path), batch_size=50, order_options=OrderOptions(seed=1), converter=Lc0Tensors("chunkparser", planes="uint8")))
    batch = next(iterator)
    rows = batch["record_index"]
    np.testing.assert_array_equal(ref.decoded_planes(batch, "uint8"), expected["planes"][rows])
    np.testing.assert_array_equal(batch["wdl"], expected["wdl"][rows])
