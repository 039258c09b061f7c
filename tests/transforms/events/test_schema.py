"""One output schema from drifting event files: lossless widening, majority by records, the rest left out."""

import pyarrow as pa

from shardmill.transforms.events.schema import PartitionSchema, conform, unify_schemas


def part(name, records, **types):
    return PartitionSchema(name, f"/logs/{name}", records, pa.schema([(k, v) for k, v in types.items()]))


def test_lossless_widenings_unify_without_leaving_anything_out():
    cases = [
        ([pa.int32(), pa.int64()], pa.int64()),
        ([pa.uint32(), pa.int32()], pa.int64()),
        ([pa.uint8(), pa.int16()], pa.int16()),
        ([pa.int32(), pa.float32()], pa.float64()),
        ([pa.float32(), pa.float64()], pa.float64()),
        ([pa.null(), pa.string()], pa.string()),
        ([pa.string(), pa.large_string()], pa.large_string()),
        ([pa.dictionary(pa.int32(), pa.string()), pa.string()], pa.string()),
    ]
    for types, expected in cases:
        result = unify_schemas([part(f"p{i}", 10, x=t) for i, t in enumerate(types)])
        assert result.schema.field("x").type == expected and not result.rejected, (types, result)


def test_lossy_pairs_keep_the_type_most_records_have_and_name_both_types():
    result = unify_schemas([part("a.csv", 100, id=pa.int64()), part("b.csv", 30, id=pa.string()),
                            part("c.csv", 50, id=pa.int64())])
    assert result.schema.field("id").type == pa.int64() and list(result.rejected) == ["b.csv"]
    (dead,) = result.dead_letters
    assert (dead.path, dead.reason, dead.member) == ("/logs/b.csv", "schema_conflict", "b.csv")
    assert "column 'id' is string here but int64 in the output" in dead.detail
    # Records, not files, decide: one big string file outweighs two small integer files.
    flipped = unify_schemas([part("a.csv", 10, id=pa.int64()), part("b.csv", 300, id=pa.string()),
                             part("c.csv", 10, id=pa.int64())])
    assert flipped.schema.field("id").type == pa.string() and sorted(flipped.rejected) == ["a.csv", "c.csv"]
    # int64 and float64 have no lossless common type (integers above 2^53).
    mixed = unify_schemas([part("a", 5, v=pa.int64()), part("b", 6, v=pa.float64())])
    assert mixed.schema.field("v").type == pa.float64() and list(mixed.rejected) == ["a"]


def test_the_decision_does_not_depend_on_the_order_partitions_arrive_in():
    parts = [part("a", 10, x=pa.int32(), y=pa.string()), part("b", 10, x=pa.int64()),
             part("c", 10, x=pa.string(), z=pa.bool_())]
    first = unify_schemas(parts)
    assert unify_schemas(parts[::-1]) == first
    assert first.schema.names == ["x", "y", "z"] and first.schema.field("x").type == pa.int64()


def test_nested_types_unify_only_with_themselves():
    nested = pa.struct([("v", pa.int64())])
    same = unify_schemas([part("a", 1, s=nested), part("b", 1, s=nested)])
    assert same.schema.field("s").type == nested and not same.rejected
    assert list(unify_schemas([part("a", 2, s=nested), part("b", 1, s=pa.string())]).rejected) == ["b"]


def test_conform_casts_fills_missing_columns_with_nulls_and_keeps_identity_columns():
    schema = pa.schema([("id", pa.int64()), ("note", pa.string())])
    table = pa.table({"id": pa.array([1, 2], pa.int32()), "_row": pa.array([0, 1], pa.int64())})
    out = conform(table, schema)
    assert out.column_names == ["id", "note", "_row"] and out.schema.field("id").type == pa.int64()
    assert out["note"].to_pylist() == [None, None] and out["_row"].to_pylist() == [0, 1]
