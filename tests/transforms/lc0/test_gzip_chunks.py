"""Counting and inflating gzip chunks: exact counts, every failure mode named."""

import gzip
import io
import zlib

import pytest

from shardmill.transforms.lc0 import gzip_chunks
from shardmill.transforms.lc0.gzip_chunks import ChunkError, ChunkSpan, count_records, inflate_chunk
from tests.datagen.lc0 import gzip_bytes, make_game_records, raw_records

V6 = 8356
METHODS = ["trailer", "scan", "decompress"]


def span_of(data: bytes) -> ChunkSpan:
    return ChunkSpan(io.BytesIO(data), 0, len(data))


def game(n=37, seed=3) -> bytes:
    return make_game_records(seed, n).tobytes()


@pytest.mark.parametrize("method", METHODS)
def test_single_member_chunk_counts_exactly(method):
    count = count_records(span_of(gzip_bytes(game(37))), method)
    assert (count.num_records, count.version, count.record_size) == (37, 6, V6)
    assert count.verified == (method == "decompress")


@pytest.mark.parametrize("version", [3, 4, 5, 6, 7])
def test_every_known_version_fixes_the_record_size(version):
    count = count_records(span_of(gzip_bytes(raw_records(version, 5, seed=1))), "scan")
    assert (count.version, count.num_records) == (version, 5)
    assert count.record_size == {3: 8276, 4: 8292, 5: 8308, 6: 8356, 7: 8396}[version]


def test_chunk_embedded_at_an_offset_of_a_larger_file_is_read_from_its_span():
    chunk = gzip_bytes(game(11))
    blob = b"x" * 1000 + chunk + b"y" * 500
    assert count_records(ChunkSpan(io.BytesIO(blob), 1000, len(chunk)), "trailer").num_records == 11


def test_gzip_header_with_file_name_and_comment_is_parsed():
    buf = io.BytesIO()
    with gzip.GzipFile(filename="game.bin", mode="wb", fileobj=buf, mtime=0) as f:
        f.write(game(9))
    assert count_records(span_of(buf.getvalue()), "scan").num_records == 9


@pytest.mark.parametrize("method,expected", [("scan", 40), ("decompress", 40), ("trailer", 20)])
def test_multi_member_chunk_cut_between_records(method, expected):
    # Two members of 20 records each: ISIZE only covers the second. SCAN finds
    # the second member's header and inflates; TRAILER can't know (documented)
    # and reports the last member's count, which loading later rejects.
    data = gzip_bytes(game(40), members=2, record_size=V6)
    assert count_records(span_of(data), method).num_records == expected


@pytest.mark.parametrize("method", METHODS)
def test_multi_member_chunk_cut_inside_records_is_counted_exactly_by_every_method(method):
    data = gzip_bytes(game(41), members=3)
    count = count_records(span_of(data), method)
    assert count.num_records == 41 and count.verified


def test_member_scan_finds_a_header_split_across_read_blocks(monkeypatch):
    data = gzip_bytes(game(30), members=2, record_size=V6)
    second = data.index(b"\x1f\x8b\x08", 20)
    # Make a block boundary fall inside the second member's magic bytes.
    monkeypatch.setattr(gzip_chunks, "FIRST_BLOCK_BYTES", second + 1)
    monkeypatch.setattr(gzip_chunks, "BLOCK_BYTES", 7)
    assert gzip_chunks._may_hold_several_members(span_of(data))
    assert count_records(span_of(data), "scan").num_records == 30


def test_member_scan_on_a_single_member_finds_nothing(monkeypatch):
    monkeypatch.setattr(gzip_chunks, "BLOCK_BYTES", 4096)
    assert not gzip_chunks._may_hold_several_members(span_of(gzip_bytes(game(50))))


def test_inflate_across_tiny_blocks_and_piece_limit_yields_the_whole_payload(monkeypatch):
    payload = game(25)
    data = gzip_bytes(payload, members=3)
    monkeypatch.setattr(gzip_chunks, "FIRST_BLOCK_BYTES", 1)
    monkeypatch.setattr(gzip_chunks, "BLOCK_BYTES", 5)
    monkeypatch.setattr(gzip_chunks, "INFLATE_PIECE_BYTES", 1000)
    assert inflate_chunk(span_of(data)) == payload


def _bad(reason, data, method="scan", expected_version=0):
    with pytest.raises(ChunkError) as err:
        count_records(span_of(data), method, expected_version)
    assert err.value.reason == reason, str(err.value)
    return err.value


@pytest.mark.parametrize("method", METHODS)
def test_not_gzip(method):
    _bad("not_gzip", b"PK\x03\x04" + b"\0" * 100, method)


def test_gzip_with_non_deflate_method_is_not_gzip():
    data = bytearray(gzip_bytes(game(3)))
    data[2] = 7
    _bad("not_gzip", bytes(data))


@pytest.mark.parametrize("method", METHODS)
def test_truncated_member(method):
    data = gzip_bytes(game(30))
    _bad("truncated", data[: len(data) // 2], method)


@pytest.mark.parametrize("cut", [1, 5, 19])
def test_chunk_shorter_than_a_gzip_member_is_truncated(cut):
    _bad("truncated", gzip_bytes(game(2))[:cut])


def test_corrupt_crc_is_found_by_inflation_and_not_by_the_trailer():
    data = bytearray(gzip_bytes(game(30)))
    data[-8] ^= 0xFF
    assert count_records(span_of(bytes(data)), "scan").num_records == 30
    err = _bad("corrupt", bytes(data), "decompress")
    assert "CRC32" in err.detail
    with pytest.raises(ChunkError, match="CRC32"):
        inflate_chunk(span_of(bytes(data)))


def test_corrupt_deflate_data_is_corrupt():
    data = bytearray(gzip_bytes(game(30)))
    for i in range(200, 260):
        data[i] ^= 0x5A
    _bad("corrupt", bytes(data), "decompress")


@pytest.mark.parametrize("method", METHODS)
def test_empty_payload_and_empty_file(method):
    _bad("empty", gzip.compress(b"", mtime=0), method)
    _bad("empty", b"", method)


@pytest.mark.parametrize("method", METHODS)
def test_payload_not_a_multiple_of_the_record_size(method):
    err = _bad("bad_size", gzip_bytes(game(3)[:-100]), method)
    assert "8356" in err.detail


def test_payload_shorter_than_the_version_field():
    _bad("bad_size", gzip.compress(b"\x06\x00", mtime=0))


def test_unknown_version():
    err = _bad("unknown_version", gzip_bytes(raw_records(2, 3, seed=0)))
    assert "version 2" in err.detail


def test_configured_version_rejects_other_versions():
    _bad("wrong_version", gzip_bytes(raw_records(5, 3, seed=0)), expected_version=6)
    assert count_records(span_of(gzip_bytes(game(3))), "scan", expected_version=6).num_records == 3


@pytest.mark.parametrize("method", ["scan", "decompress"])
def test_trailing_garbage_after_the_last_member(method):
    data = gzip_bytes(game(4)) + b"garbage!" * 8
    _bad("trailing_garbage", data, method)


@pytest.mark.slow
def test_trailer_of_four_gib_or_more_is_not_trusted():
    # 514,048 records of 8356 bytes is 4,295,385,088 bytes: just over 2^32, so
    # ISIZE wraps to 417,792. The member is built from one
    # full-flushed deflate block repeated, so it costs little to write; the
    # count must still come from inflation (one stream of ~4.3 GB).
    record = b"\x06\x00\x00\x00" + bytes(V6 - 4)
    block_payload = record * 64
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(block_payload) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeats = 8032
    crc = 0
    for _ in range(repeats):
        crc = zlib.crc32(block_payload, crc)
    size = len(block_payload) * repeats
    assert size > 2**32
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"
    end = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    data = header + block * repeats + end + crc.to_bytes(4, "little") + (size % 2**32).to_bytes(4, "little")
    count = count_records(span_of(data), "trailer", max_bytes=2**33)
    assert count.num_records == size // V6 == 514_048
    assert count.verified
    # With the default limit the same chunk is refused after inflating only the limit's worth.
    with pytest.raises(ChunkError, match="too_large"):
        count_records(span_of(data), "trailer")
