"""One output schema for event partitions whose files disagree on column types.

CSV and JSON types are inferred per file, and Parquet files written by
different producers drift (int32 here, int64 there; a column that became a
string). Every shard of an output has the same schema, so the job decides one
type per column from all partitions' schemas, after sampling and before any
shard is written:

- each column's type is the one that the most records can take without loss
  (ties: more partitions, then the narrower type, then the name);
- a type converts without loss to a wider integer of the same signedness, an
  unsigned integer to a signed one of more bits, a float to a wider float,
  an integer of at most 32 bits to float64, string to large_string, a
  dictionary to its value type, the null type to anything; nothing else;
- a partition with a column that can't take the chosen type is left out
  whole: one dead letter naming the column and both types;
- a column a partition lacks is null in its rows.

Plain pyarrow: pure functions of the partitions' (name, path, records, schema).
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from shardmill.transforms.common.dead_letter import DeadLetter


@dataclasses.dataclass(frozen=True)
class PartitionSchema:
    name: str
    path: str
    records: int
    schema: pa.Schema


@dataclasses.dataclass(frozen=True)
class EventSchema:
    schema: pa.Schema  # the output's input columns, in order of first appearance
    rejected: dict[str, str]  # partition name -> why its rows are left out
    dead_letters: tuple[DeadLetter, ...] = ()  # one per partition left out, naming its file


def _decoded(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _widen(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The narrowest type both a and b convert to without loss, or None."""
    a, b = _decoded(a), _decoded(b)
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    ints = pa.types.is_integer
    if ints(a) and ints(b):
        signed_a, signed_b = pa.types.is_signed_integer(a), pa.types.is_signed_integer(b)
        if signed_a == signed_b:
            return a if a.bit_width >= b.bit_width else b
        signed, unsigned = (a, b) if signed_a else (b, a)
        if signed.bit_width > unsigned.bit_width:
            return signed
        bits = 2 * unsigned.bit_width
        return {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}.get(bits)
    floats = pa.types.is_floating
    if floats(a) and floats(b):
        return a if a.bit_width >= b.bit_width else b
    if (ints(a) and floats(b)) or (floats(a) and ints(b)):
        integer = a if ints(a) else b
        return pa.float64() if integer.bit_width <= 32 else None
    strings = (pa.string(), pa.large_string())
    if a in strings and b in strings:
        return pa.large_string()
    binaries = (pa.binary(), pa.large_binary())
    if a in binaries and b in binaries:
        return pa.large_binary()
    return None


def _converts(t: pa.DataType, target: pa.DataType) -> bool:
    return _widen(t, target) == target


def _choose(types: dict[pa.DataType, tuple[int, int]]) -> pa.DataType:
    """The type most records can take: types maps each type seen to (records, partitions)."""
    candidates = set(types)
    grown = True
    while grown:
        widened = {_widen(a, b) for a in candidates for b in candidates} - {None} - candidates
        grown = bool(widened)
        candidates |= widened

    def score(candidate):
        covered = [types[t] for t in types if _converts(t, candidate)]
        try:
            width = candidate.bit_width
        except ValueError:  # not a fixed-width type
            width = 0
        return (-sum(c[0] for c in covered), -sum(c[1] for c in covered), width, str(candidate))

    return min(candidates, key=score)


def unify_schemas(partitions: list[PartitionSchema]) -> EventSchema:
    """The output schema and the partitions left out (see the module doc)."""
    ordered = sorted(partitions, key=lambda p: p.name)
    seen: dict[str, dict[pa.DataType, tuple[int, int]]] = {}
    for p in ordered:
        for field in p.schema:
            t = _decoded(field.type)
            records, count = seen.setdefault(field.name, {}).get(t, (0, 0))
            seen[field.name][t] = (records + p.records, count + 1)
    chosen = {name: _choose(types) for name, types in seen.items()}
    rejected, dead = {}, []
    for p in ordered:
        conflicts = [f"column {f.name!r} is {f.type} here but {chosen[f.name]} in the output"
                     for f in p.schema if not _converts(f.type, chosen[f.name])]
        if conflicts:
            rejected[p.name] = "; ".join(conflicts) + " (no lossless conversion): its rows are left out"
            dead.append(DeadLetter(p.path, "schema", "schema_conflict", rejected[p.name], member=p.name,
                                   records=p.records))
    return EventSchema(pa.schema([pa.field(name, chosen[name]) for name in chosen]), rejected, tuple(dead))


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """table's input columns cast to schema (missing ones null), then its other columns as they are."""
    columns, fields = [], []
    # Name lookups through dicts and sets made once: wide logs have tens of thousands of columns.
    index = {name: i for i, name in enumerate(table.column_names)}
    for field in schema:
        i = index.get(field.name)
        columns.append(table.column(i).cast(field.type) if i is not None else pa.nulls(table.num_rows, field.type))
        fields.append(field)
    wanted = set(schema.names)
    for i, field in enumerate(table.schema):
        if field.name not in wanted:
            columns.append(table.column(i))
            fields.append(field)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
