"""Indexing whole sources: exact per-chunk counts against the generator's truth."""

import io
import os
import tarfile

import pytest

from shardmill.transforms.lc0.index import INDEX_SCHEMA, index_source
from tests.datagen.lc0 import gzip_bytes, make_game_records, write_tar
from tests.support.local_files import local_open, sources_of


def index_dir(directory, method):
    counts, errors, rows, skipped = {}, set(), [], 0
    for path in sources_of(directory):
        result = index_source(path, os.path.getsize(path), method, opener=local_open)
        assert result.table.schema == INDEX_SCHEMA
        rows.extend(result.table.to_pylist())
        skipped += result.skipped_members
        errors |= {(os.path.basename(d.path), d.chunk, d.reason) for d in result.dead_letters}
    for r in rows:
        counts[(r["sort_key"], r["chunk"])] = r["num_records"]
    return counts, errors, rows, skipped


@pytest.mark.parametrize("method", ["trailer", "scan", "decompress"])
def test_mixed_directory_counts_match_the_generator_truth(lc0_dataset, method):
    directory, truth = lc0_dataset
    counts, errors, _, skipped = index_dir(directory, method)
    assert counts == truth.expected_counts(method)
    assert errors == truth.expected_errors(method)
    assert skipped == truth.skipped_members


def test_rows_locate_each_chunk_in_its_source(lc0_dataset):
    directory, truth = lc0_dataset
    _, _, rows, _ = index_dir(directory, "decompress")
    by_key = {(c.sort_key, c.chunk): c for c in truth.good}
    assert len(rows) == len(by_key)
    for row in rows:
        good = by_key[(row["sort_key"], row["chunk"])]
        assert row["member"] == ("" if row["sort_key"] == good.member else good.member)
        with open(row["source"], "rb") as f:
            f.seek(row["offset"])
            data = f.read(row["length"])
        assert data[:2] == b"\x1f\x8b" and len(data) == row["length"]
        assert row["version"] == good.version and row["format"] == "lc0"


def test_long_member_names_in_gnu_and_pax_archives_are_indexed(lc0_dataset):
    directory, truth = lc0_dataset
    _, _, rows, _ = index_dir(directory, "scan")
    long_names = {r["member"] for r in rows if len(r["member"]) > 100}
    assert len(long_names) == 3  # one per archive; archives alternate GNU and pax format
    assert long_names == {c.member for c in truth.good if len(c.member) > 100}


def _tar_bytes(members, fmt=tarfile.GNU_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _index_bytes(tmp_path, name, data, method="scan"):
    path = tmp_path / name
    path.write_bytes(data)
    return index_source(str(path), len(data), method, opener=local_open)


def _games(n):
    return [(f"g{i}.gz", gzip_bytes(make_game_records(i, 20 + i).tobytes())) for i in range(n)]


def _last_member_span(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        last = tar.getmembers()[-1]
    return last.offset_data, last.size


def test_archive_truncated_inside_a_member_reports_the_member_and_the_archive(tmp_path):
    data = _tar_bytes(_games(3))
    offset, size = _last_member_span(data)
    result = _index_bytes(tmp_path, "cut.tar", data[: offset + size // 2])
    assert result.table["chunk"].to_pylist() == [0, 1]
    reasons = {(d.chunk, d.reason) for d in result.dead_letters}
    assert (2, "truncated") in reasons
    assert (-1, "bad_archive") in reasons


def test_garbage_after_a_member_is_reported_not_silently_ignored(tmp_path):
    data = bytearray(_tar_bytes(_games(2)))
    offset, size = _last_member_span(bytes(data))
    end = offset + (size + 511) // 512 * 512  # where the end-of-archive zero blocks start
    data[end : end + 512] = b"Z" * 512
    result = _index_bytes(tmp_path, "garbage.tar", bytes(data))
    assert result.table.num_rows == 2
    assert [d.reason for d in result.dead_letters] == ["bad_archive"]
    assert "invalid tar header" in result.dead_letters[0].detail


def test_archive_that_is_not_a_tar_is_a_bad_archive(tmp_path):
    result = _index_bytes(tmp_path, "junk.tar", b"\x01" * 3000)
    assert [d.reason for d in result.dead_letters] == ["bad_archive"]
    assert result.table.num_rows == 0


def test_a_file_that_is_neither_gz_nor_tar_is_reported(tmp_path):
    result = _index_bytes(tmp_path, "notes.txt", b"hello")
    assert [d.reason for d in result.dead_letters] == ["unsupported_file"]


def test_unopenable_file_is_unreadable_not_a_crash(tmp_path):
    result = index_source(str(tmp_path / "missing.gz"), 10, "scan", opener=local_open)
    assert [d.reason for d in result.dead_letters] == ["unreadable"]


def test_members_are_numbered_among_gz_members_including_bad_ones(tmp_path):
    games = _games(2)
    members = [("LICENSE", b"x"), games[0], ("bad.gz", b"nope"), ("readme.md", b"y"), games[1]]
    path = tmp_path / "a.tar"
    write_tar(str(path), members)
    result = index_source(str(path), path.stat().st_size, "scan", opener=local_open)
    assert result.table["chunk"].to_pylist() == [0, 2]
    assert [(d.chunk, d.member) for d in result.dead_letters] == [(1, "bad.gz")]
    assert result.skipped_members == 3  # directory entry, LICENSE, readme.md
