"""Label-sampling outputs (strings, lists, nulls, dictionaries) through the reader and its adapters, row for row
equal to pyarrow across ranks, epochs, resume and elastic resume."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardmill.native_ext import OrderOptions, ShardOptions, ShardReader, load_manifest
from shardmill.native_ext.arrow_columns import OffsetsValues
from shardmill.pipelines import cli

COLUMNS = ["id", "user", "tags", "category", "score", "clicked", "account", "flag", "visits", "_partition"]
BEYOND_FLOAT = 2**53 + 1  # the first integer float64 cannot hold


@pytest.fixture(scope="module")
def label_output(tmp_path_factory):
    base = tmp_path_factory.mktemp("label_output")
    logs = base / "logs"
    logs.mkdir()
    rng = np.random.default_rng(4)
    for part in range(3):
        n = 700
        ids = np.arange(part * 1000, part * 1000 + n)
        table = pa.table({
            "id": ids,
            "user": [None if i % 11 == 0 else f"user-{i}" * (1 + i % 4) for i in ids],
            "tags": [[f"t{j}" for j in range(i % 4)] if i % 7 else None for i in ids],
            "category": pa.array([["web", "app", "tv"][i % 3] for i in ids]).dictionary_encode(),
            "score": [None if i % 5 == 0 else float(i) / 3 for i in ids],
            "clicked": (rng.random(n) < 0.3).astype(np.int64),
            "account": [None if i % 6 == 0 else BEYOND_FLOAT + 2 * i for i in ids],
            "flag": [None if i % 4 == 0 else bool(i % 3) for i in ids],
            "visits": [None if i % 9 == 0 else [BEYOND_FLOAT + 2 * i, None, i][:1 + i % 3] for i in ids],
        })
        pq.write_table(table, logs / f"part-{part}.parquet", row_group_size=100)
    out = base / "out"
    config = base / "c.textproto"
    config.write_text(f'input: "{logs}"\nseed: 2\noutput {{ path: "{out}" num_shards: 3 row_group_bytes: 4096 }}\n'
                      'label_sampling { label_column: "clicked" ratio: 100 }\n')
    assert cli.main(["run", "--config", str(config)]) == 0
    manifest = load_manifest(str(out))
    expected = pa.concat_tables([pq.read_table(out / s["path"]) for s in manifest["shards"]]).combine_chunks()
    return str(out), expected


def check_rows(batch, expected, columns=COLUMNS):
    rows = pa.array(batch["record_index"])
    for name in columns:
        got = batch[name]
        want = expected.column(name).take(rows).combine_chunks()
        if isinstance(got, np.ma.MaskedArray):  # numbers and booleans through Arrow: exact, masked at nulls
            assert got.dtype == want.type.to_pandas_dtype() and got.mask.tolist() == want.is_null().to_pylist(), name
            assert got.tolist() == want.to_pylist(), name
        elif isinstance(got, np.ndarray) and got.dtype != object:  # native
            assert np.array_equal(got, want.to_numpy(zero_copy_only=False)), name
        elif isinstance(got, np.ndarray):
            plain = [v.tolist() if isinstance(v, np.ndarray) else v for v in got]
            assert plain == want.to_pylist(), name
        else:
            assert got.equals(want), name


def test_every_column_is_served_as_pyarrow_reads_it_across_ranks_and_epochs(label_output):
    out, expected = label_output
    assert {"user", "tags", "category", "score"} <= set(expected.column_names)
    assert expected.column("user").null_count > 0 and expected.column("score").null_count > 0
    for rank in range(2):
        seen = {}
        with ShardReader(out, batch_size=64, num_epochs=2, order_options=OrderOptions(seed=9, window_row_groups=3),
                         shard_options=ShardOptions(rank, 2)) as reader:
            for batch in reader:
                assert set(COLUMNS) <= set(batch)
                check_rows(batch, expected)
                seen.setdefault(batch["epoch"], []).append(batch["record_index"])
        orders = [np.concatenate(seen[e]) for e in (0, 1)]
        assert len(orders[0]) == expected.num_rows // 2 and not np.array_equal(orders[0], orders[1])


def test_arrow_columns_as_numpy_are_objects_with_none_for_nulls_and_masked_numbers(label_output):
    out, expected = label_output
    with ShardReader(out, batch_size=100, arrow_columns_as="numpy") as reader:
        for batch in reader:
            check_rows(batch, expected, ["user", "tags", "score", "category"])
            assert batch["id"].dtype == np.int64  # fixed-width without nulls: native


def as_python(flat):
    """Rows of an OffsetsValues as Python values (strings decoded, lists of strings nested)."""
    rows = []
    for i, valid in enumerate(flat.valid):
        a, b = flat.offsets[i], flat.offsets[i + 1]
        if not valid:
            rows.append(None)
        elif isinstance(flat.values, OffsetsValues):
            inner = flat.values
            rows.append(as_python(OffsetsValues(inner.offsets[a:b + 1] - inner.offsets[a], inner.values[
                inner.offsets[a]:inner.offsets[b]], inner.valid[a:b])))
        else:
            rows.append(flat.values[a:b].tobytes().decode())
    return rows


def test_arrow_columns_as_offsets_are_flat_buffers_of_the_same_rows(label_output):
    out, expected = label_output
    with ShardReader(out, batch_size=100, num_epochs=2, arrow_columns_as="offsets",
                     order_options=OrderOptions(seed=5)) as reader:
        for batch in reader:
            rows = pa.array(batch["record_index"])
            for name in ("user", "tags", "category"):
                got, want = batch[name], expected.column(name).take(rows).to_pylist()
                assert isinstance(got, OffsetsValues) and got.offsets[0] == 0 and len(got.offsets) == len(want) + 1
                items = len(got.values.valid) if isinstance(got.values, OffsetsValues) else len(got.values)
                assert got.offsets[-1] == items and got.valid.tolist() == [w is not None for w in want]
                assert as_python(got) == want, name
            check_rows(batch, expected, ["score"])  # not variable-length: a masked array


@pytest.mark.parametrize("as_format", ["numpy", "offsets"])
def test_nullable_integers_and_booleans_are_served_exactly_as_masked_arrays(label_output, as_format):
    out, expected = label_output
    assert expected.column("account").type == pa.int64() and expected.column("account").null_count > 0
    assert expected.column("flag").type == pa.bool_() and expected.column("flag").null_count > 0
    with ShardReader(out, batch_size=100, arrow_columns_as=as_format, order_options=OrderOptions(seed=5)) as reader:
        for batch in reader:
            account, flag = batch["account"], batch["flag"]
            assert isinstance(account, np.ma.MaskedArray) and account.dtype == np.int64
            assert isinstance(flag, np.ma.MaskedArray) and flag.dtype == np.bool_
            assert min(v for v in account.tolist() if v is not None) >= BEYOND_FLOAT  # odd, so not float64-exact
            check_rows(batch, expected, ["account", "flag", "score"])
            want = expected.column("visits").take(pa.array(batch["record_index"])).to_pylist()
            if as_format == "numpy":
                check_rows(batch, expected, ["visits"])
                assert all(v.dtype == np.int64 for v in batch["visits"] if v is not None)
            else:
                visits = batch["visits"]
                assert isinstance(visits.values, np.ma.MaskedArray) and visits.values.dtype == np.int64
                assert [visits.values[a:b].tolist() if valid else None for a, b, valid in
                        zip(visits.offsets[:-1], visits.offsets[1:], visits.valid)] == want


def test_resume_and_elastic_resume_serve_the_same_rows_with_their_columns(label_output):
    out, expected = label_output
    settings = dict(batch_size=50, num_epochs=1, order_options=OrderOptions(seed=5))
    with ShardReader(out, **settings) as reader:
        whole = np.concatenate([b["record_index"] for b in reader])
    with ShardReader(out, **settings) as reader:
        first = [next(reader)["record_index"] for _ in range(7)]
        state = reader.state()
    with ShardReader(out, state=state, **settings) as reader:
        rest = []
        for batch in reader:
            check_rows(batch, expected)
            rest.append(batch["record_index"])
    assert np.array_equal(np.concatenate(first + rest), whole)
    states = []
    for rank in range(2):
        with ShardReader(out, shard_options=ShardOptions(rank, 2), **settings) as reader:
            next(reader)
            states.append(reader.state())
    served = []
    for rank, elastic in enumerate(ShardReader.elastic_states(states, 3)):
        with ShardReader(out, shard_options=ShardOptions(rank, 3), state=elastic, **settings) as reader:
            for batch in reader:
                check_rows(batch, expected)
                served.append(batch["record_index"])
    left = expected.num_rows - 2 * 50
    assert left - 3 < len(np.unique(np.concatenate(served))) == len(np.concatenate(served)) <= left  # 3 ranks


def test_the_torch_adapter_yields_lists_for_strings(label_output):
    torch = pytest.importorskip("torch")
    from shardmill.native_ext.torch_dataset import ShardIterableDataset

    out, expected = label_output
    batch = next(iter(torch.utils.data.DataLoader(ShardIterableDataset(out, batch_size=32), batch_size=None)))
    assert batch["id"].dtype == torch.int64
    rows = pa.array(batch["record_index"].numpy())
    assert batch["user"] == expected.column("user").take(rows).to_pylist()
    assert batch["tags"] == expected.column("tags").take(rows).to_pylist()


def test_the_grain_adapters_yield_numpy(label_output):
    pytest.importorskip("grain")
    from shardmill.native_ext.grain_dataset import ShardDataSource, ShardIterDataset

    out, expected = label_output
    batch = next(iter(ShardIterDataset(out, batch_size=16)))
    check_rows(batch, expected, ["user", "tags", "score"])
    check_rows(batch, expected, ["account", "flag"])
    assert batch["account"].dtype == np.int64
    source = ShardDataSource(out)
    assert source[3]["user"] == expected.column("user")[3].as_py()
    for record in range(20):  # nulls as None, numbers exact in their own dtype
        for name in ("account", "flag"):
            value, want = source[record][name], expected.column(name)[record].as_py()
            assert (value is None) if want is None else (value == want and isinstance(value, np.generic)), name
