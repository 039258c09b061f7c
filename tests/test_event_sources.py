"""Event sources for label sampling: three formats, every malformed row dead-lettered with its line."""

import pyarrow as pa
import pyarrow.parquet as pq

from shardmill.transforms.event_sources import read_events
from tests.conftest import local_open


def read(path, label="clicked", targets=("1",)):
    return read_events(str(path), label, list(targets), opener=local_open)


def test_csv_keeps_columns_and_types_and_names_malformed_lines(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("id,user,clicked\n1,a,0\n2,b,1\n3,c,0,extra\n4,d,0\n5,e\n6,f,1\n")
    part = read(path)
    assert part.table.column_names == ["id", "user", "clicked"]
    assert part.table["id"].to_pylist() == [1, 2, 4, 6] and part.table.schema.field("id").type == pa.int64()
    assert part.is_target.to_pylist() == [False, True, False, True]
    assert [(d.reason, d.member) for d in part.dead_letters] == [("malformed_row", "line 4"), ("malformed_row", "line 6")]
    assert all(d.path == str(path) for d in part.dead_letters)


def test_csv_with_a_late_unconvertible_value_is_read_as_strings_not_dropped(tmp_path):
    path = tmp_path / "late.csv"
    rows = "".join(f"{i},{i % 2}\n" for i in range(5000)) + "oops,1\n"
    path.write_text("id,clicked\n" + rows)
    part = read(path)
    assert part.table.num_rows == 5001 and part.table.schema.field("id").type == pa.string()
    assert sum(part.is_target.to_pylist()) == 2501


def test_tsv_and_string_labels(tmp_path):
    path = tmp_path / "events.tsv"
    path.write_text("id\tevent\n1\timpression\n2\tclick\n3\tpurchase\n")
    part = read(path, label="event", targets=["click", "purchase"])
    assert part.is_target.to_pylist() == [False, True, True] and not part.dead_letters


def test_json_lines_name_each_bad_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"id": 1, "clicked": 1}\n{"id": 2, "clicked": 0\n{"id": 3, "clicked": 0}\n[1, 2]\n')
    part = read(path)
    assert part.table["id"].to_pylist() == [1, 3] and part.is_target.to_pylist() == [True, False]
    assert [d.member for d in part.dead_letters] == ["line 2", "line 4"]


def test_parquet_and_null_labels(tmp_path):
    path = tmp_path / "events.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "clicked": [1, None, 0]}), path)
    part = read(path)
    assert part.table["id"].to_pylist() == [1, 3] and part.is_target.to_pylist() == [True, False]
    assert [(d.reason, d.member) for d in part.dead_letters] == [("malformed_row", "row 1")]


def test_missing_label_column_and_unreadable_files_are_one_dead_letter(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("id,label\n1,0\n")
    part = read(path)
    assert [d.reason for d in part.dead_letters] == ["missing_label_column"] and part.table.num_rows == 0
    assert "columns: id, label" in part.dead_letters[0].detail
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"not parquet")
    assert [d.reason for d in read(bad).dead_letters] == ["unreadable"]
    assert [d.reason for d in read(tmp_path / "x.xml").dead_letters] == ["unreadable"]


# ---- ranges of large files ----------------------------------------------------

from shardmill.transforms.event_sources import split_file  # noqa: E402


def read_range(part, label="clicked"):
    return read_events(part, label, ["1"], opener=local_open)


def test_large_csv_splits_on_line_boundaries_and_keeps_file_line_numbers(tmp_path):
    lines = ["id,clicked"] + [f"{i},{int(i % 9 == 0)}" for i in range(2000)]
    lines[1500] = "bad,row,here"  # file line 1501
    path = tmp_path / "big.csv"
    path.write_text("\n".join(lines) + "\n")
    ranges = split_file(str(path), path.stat().st_size, 4000, opener=local_open)
    assert len(ranges) > 3 and [r.name for r in ranges][:2] == ["big.csv#0", "big.csv#1"]
    parts = [read_range(r) for r in ranges]
    ids = [i for p in parts for i in p.table["id"].to_pylist()]
    assert ids == [i for i in range(2000) if i != 1499]
    dead = [d for p in parts for d in p.dead_letters]
    assert [(d.reason, d.member) for d in dead] == [("malformed_row", "line 1501")]
    assert sum(sum(p.is_target.to_pylist()) for p in parts) == sum(1 for i in range(2000) if i % 9 == 0 and i != 1499)


def test_large_json_lines_split_and_name_global_lines(tmp_path):
    path = tmp_path / "big.jsonl"
    rows = [f'{{"id": {i}, "clicked": {int(i % 5 == 0)}}}' for i in range(1000)]
    rows[700] = "{broken"
    path.write_text("\n".join(rows) + "\n")
    ranges = split_file(str(path), path.stat().st_size, 3000, opener=local_open)
    parts = [read_range(r) for r in ranges]
    assert len(ranges) > 3
    assert [i for p in parts for i in p.table["id"].to_pylist()] == [i for i in range(1000) if i != 700]
    assert [d.member for p in parts for d in p.dead_letters] == ["line 701"]


def test_large_parquet_splits_by_row_groups(tmp_path):
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"id": list(range(10_000)), "clicked": [i % 7 == 0 for i in range(10_000)]}),
                   path, row_group_size=1000)
    ranges = split_file(str(path), path.stat().st_size, 20_000, opener=local_open)
    assert len(ranges) > 1 and ranges[0].first_group == 0 and ranges[-1].end_group == 10
    parts = [read_events(r, "clicked", ["True"], opener=local_open) for r in ranges]
    assert [i for p in parts for i in p.table["id"].to_pylist()] == list(range(10_000))


def test_small_files_are_one_partition_named_after_the_file(tmp_path):
    path = tmp_path / "small.csv"
    path.write_text("id,clicked\n1,1\n")
    (only,) = split_file(str(path), path.stat().st_size, 1 << 20, opener=local_open)
    assert only.name == "small.csv" and read_range(only).table.num_rows == 1
