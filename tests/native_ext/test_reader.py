"""The native shard reader: complete, disjoint, reshuffled, exactly resumable, clean errors."""

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardmill import native_ext
from shardmill.native_ext import Lc0Tensors, OrderOptions, OutputError, ReadOptions, ShardOptions, ShardReader
from shardmill.transforms.common import keyed_hash
from shardmill.transforms.lc0.record_format import V6_DTYPE
from tests.datagen.shards import extra_values, frame_bytes, write_output
from tests.support.reader_args import frames_as, reader_args

N_ROWS = [1000, 777, 1301]  # 3078 rows; row groups of 64 -> 50 row groups, ragged ends


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("reader_out"))
    write_output(directory, N_ROWS, row_group_rows=64, width=16)
    return directory


def read_all(reader):
    batches = list(reader)
    return batches, np.concatenate([b["id"] for b in batches]) if batches else np.zeros(0, np.int64)


def epoch_ids(output, **kwargs):
    kwargs.setdefault("columns", ["frame", "id"])
    with ShardReader(output, **reader_args(**kwargs)) as reader:
        return read_all(reader)


# ---- shared generator and permutation ----------------------------------------

def test_native_hash_matches_the_python_generator(native_testing):
    rng = np.random.default_rng(0)
    for _ in range(200):
        seed, stream = (int(x) for x in rng.integers(0, 2**63, 2))
        words = [int(x) for x in rng.integers(0, 2**63, int(rng.integers(0, 4)))]
        assert native_testing.hash_words(seed, stream, words) == int(keyed_hash.hash_words(seed, stream, *words))
    assert native_testing.hash_words(0, 0, []) == 0xE220A8397B1DCDAF  # SplitMix64's first output for seed 0


@pytest.mark.parametrize("k", list(range(1, 18)))
def test_feistel_permutation_is_a_bijection_at_the_edge_sizes(native_testing, k):
    for n in {2**k - 1, 2**k, 2**k + 1}:
        image = native_testing.feistel_permutation(n, 977 + k)
        assert len(np.unique(image)) == n and image.max() == n - 1, n


@pytest.mark.parametrize("n", [1, 2, 3, 255, 256, 257, 1000, 2**16 + 1, 335_544])
def test_feistel_blocked_evaluation_matches_one_position_at_a_time(native_testing, n):
    # The reader evaluates runs of positions in blocks (ApplyRange); the scalar Apply is the reference.
    for key in (1, 2**63 + 12345):
        reference = native_testing.feistel_permutation(n, key, one_at_a_time=True)
        assert (native_testing.feistel_permutation(n, key) == reference).all()
        first = n // 3
        count = n - first - n // 5
        assert (native_testing.feistel_permutation(n, key, first, count) == reference[first:first + count]).all()


@pytest.mark.parametrize("n", [1, 2, 3, 255, 256, 257, 1000, 2**16 + 1, 335_544])
def test_feistel_inverse_gives_back_each_position(native_testing, n):
    # Wide rows are scattered by where they go: the inverse permutation.
    for key in (7, 2**64 - 1):
        image = native_testing.feistel_permutation(n, key)
        preimage = native_testing.feistel_permutation(n, key, inverse=True)
        assert (preimage[image] == np.arange(n)).all()
        first, count = n // 4, n - n // 4 - n // 7
        assert (native_testing.feistel_permutation(n, key, first, count, inverse=True) == preimage[first:first + count]).all()


def test_feistel_permutation_depends_on_the_key_and_is_not_identity(native_testing):
    a, b = native_testing.feistel_permutation(1000, 1), native_testing.feistel_permutation(1000, 2)
    assert (a != b).any() and (a != np.arange(1000)).sum() > 900


# ---- epochs and ranks ----------------------------------------------------------

def test_one_epoch_serves_every_row_once_with_its_bytes_and_index(output):
    batches, ids = epoch_ids(output, batch_size=100, seed=1)
    assert sorted(ids.tolist()) == list(range(sum(N_ROWS)))
    for b in batches:
        assert (b["record_index"] == b["id"]).all()
        assert (b["frame"] == frame_bytes(b["id"], 16)).all()
        assert b["frame"].shape == (len(b["id"]), 16) and b["frame"].dtype == np.uint8
        assert (b["record_seed"] == keyed_hash.hash_words(1, keyed_hash.STREAM_RECORD_SEED, b["id"])).all()
    assert [len(b["id"]) for b in batches] == [100] * 30 + [78]


@pytest.mark.parametrize("ranks", [2, 3, 7])
def test_ranks_are_disjoint_equal_and_cover_the_epoch(output, ranks):
    per_rank = [epoch_ids(output, batch_size=64, shard_index=r, shard_count=ranks, seed=5)[1] for r in range(ranks)]
    sizes = {len(ids) for ids in per_rank}
    assert sizes == {sum(N_ROWS) // ranks}
    union = np.concatenate(per_rank)
    assert len(np.unique(union)) == len(union)
    assert sum(N_ROWS) - len(union) < ranks


def test_each_epoch_is_a_different_order_and_the_same_seed_repeats_it(output):
    _, two = epoch_ids(output, batch_size=128, num_epochs=2, seed=9)
    first, second = two[: sum(N_ROWS)], two[sum(N_ROWS):]
    assert sorted(first.tolist()) == sorted(second.tolist())
    assert (first != second).mean() > 0.9
    _, again = epoch_ids(output, batch_size=128, num_epochs=2, seed=9)
    assert (again == two).all()
    _, other = epoch_ids(output, batch_size=128, seed=10)
    assert (other != first).mean() > 0.9


def test_shuffle_off_serves_manifest_order(output):
    _, ids = epoch_ids(output, batch_size=500, shuffle=False)
    assert ids.tolist() == list(range(sum(N_ROWS)))


def test_drop_remainder_drops_the_short_last_batch_of_each_epoch(output):
    batches, ids = epoch_ids(output, batch_size=100, drop_remainder=True, num_epochs=2)
    assert all(len(b["id"]) == 100 for b in batches) and len(batches) == 60
    assert [b["epoch"] for b in batches] == [0] * 30 + [1] * 30


def test_thread_count_does_not_change_the_stream(output):
    _, one = epoch_ids(output, batch_size=50, num_threads=1, prefetch_windows=0, num_epochs=2, seed=4)
    _, four = epoch_ids(output, batch_size=50, num_threads=4, prefetch_windows=3, num_epochs=2, seed=4)
    assert (one == four).all()


@pytest.mark.parametrize("width", [255, 256, 2000, 5000])
def test_wide_rows_copied_another_way_follow_the_same_order(output, tmp_path, width):
    # Rows of >= 256 B are scattered to their places through the inverse
    # permutation as each page is decompressed, with streaming stores, instead
    # of gathered per part: the stream must not differ.
    wide = str(tmp_path / "wide")
    write_output(wide, N_ROWS, row_group_rows=64, width=width)
    settings = dict(batch_size=70, num_epochs=2, seed=8, shard_index=1, shard_count=2)
    narrow_batches, narrow_ids = epoch_ids(output, **settings)
    wide_batches, wide_ids = epoch_ids(wide, **settings)
    assert (narrow_ids == wide_ids).all()
    for b in wide_batches:
        assert (b["frame"] == frame_bytes(b["id"], width)).all() and (b["record_index"] == b["id"]).all()
    with ShardReader(wide, columns=["frame", "id"], **reader_args(**settings)) as reader:
        head = [next(reader) for _ in range(13)]
        state = reader.state()
    with ShardReader(wide, columns=["frame", "id"], state=state, **reader_args(**settings)) as resumed:
        tail = np.concatenate([b["id"] for b in resumed])
    assert (np.concatenate([b["id"] for b in head] + [tail]) == wide_ids).all()


@pytest.mark.parametrize("width", [600, 1500])
def test_megabyte_row_groups_decoded_into_recycled_buffers_keep_their_bytes(tmp_path, width):
    # Row groups of 2000 rows x 600-1500 B: decode buffers of >= 1 MiB go
    # through the reader's recycling pool and are reused window after window.
    directory = str(tmp_path / "big")
    write_output(directory, [6000, 5000], row_group_rows=2000, width=width)
    with ShardReader(directory, batch_size=500, columns=["frame", "id"], num_epochs=4, order_options=OrderOptions(seed=2, window_row_groups=2), read_options=ReadOptions(prefetch_windows=1)) as reader:
        batches = list(reader)
    ids = np.concatenate([b["id"] for b in batches])
    assert len(ids) == 4 * 11000
    for epoch in range(4):
        assert sorted(ids[epoch * 11000:(epoch + 1) * 11000].tolist()) == list(range(11000))
    for b in batches:
        assert (b["frame"] == frame_bytes(b["id"], width)).all()


def test_window_buffers_a_closed_reader_gave_back_are_cached_reused_and_released(tmp_path):
    # Freed window buffers stay mapped in a bounded process-wide cache (the
    # next reader, e.g. a PyTorch iterator per epoch, faults no fresh pages)
    # and serve it the same rows; release_cached_memory() unmaps them.
    directory = str(tmp_path / "big")
    write_output(directory, [6000, 5000], row_group_rows=2000, width=600)
    native_ext.release_cached_memory()
    settings = dict(batch_size=500, columns=["frame", "id"], seed=2, window_row_groups=2, prefetch_windows=1)
    with ShardReader(directory, **reader_args(**settings)) as reader:
        first = [b["id"] for b in reader]
    cached = native_ext.cached_memory_bytes()
    assert 0 < cached <= 512 << 20
    with ShardReader(directory, **reader_args(**settings)) as reader:
        second = [b["id"] for b in reader]
    assert (np.concatenate(first) == np.concatenate(second)).all()
    cached = native_ext.cached_memory_bytes()
    assert native_ext.release_cached_memory() == cached and native_ext.cached_memory_bytes() == 0


@pytest.mark.parametrize("given_back,take,picked", [
    ([2 << 20, 2 << 20, 2 << 20], 1 << 20, 2),  # of equal fits, the one given back last (warmest)
    ([4 << 20, 2 << 20, 6 << 20], 1 << 20, 1),  # the smallest that fits
    ([4 << 20, 2 << 20, 4 << 20], 3 << 20, 2),
    ([2 << 20], 3 << 20, -1),                   # none fits: a new mapping
])
def test_the_buffer_cache_gives_the_smallest_fit_given_back_last(native_testing, given_back, take, picked):
    assert native_testing.buffer_cache_pick(given_back, take) == picked


def test_batches_viewing_window_buffers_outlive_the_reader_and_later_readers(tmp_path):
    # In-window batches are views into the window's arranged rows (no copy);
    # they keep that window alive, so neither closing the reader nor later
    # readers reusing cached buffers may change them, and writing into one
    # batch touches no other.
    directory = str(tmp_path / "views")
    write_output(directory, [3000, 2500], row_group_rows=500, width=600)
    settings = dict(batch_size=128, columns=["frame", "id"], seed=4, window_row_groups=2, prefetch_windows=1)
    with ShardReader(directory, **reader_args(**settings)) as reader:
        held = list(reader)
    for b in held[::3]:
        b["frame"][:] = 0
    for _ in range(2):
        with ShardReader(directory, **reader_args(**dict(settings, seed=5))) as other:
            for b in other:
                assert (b["frame"] == frame_bytes(b["id"], 600)).all()
    for i, b in enumerate(held):
        expected = 0 if i % 3 == 0 else frame_bytes(b["id"], 600)
        assert (b["frame"] == expected).all() and (b["record_index"] == b["id"]).all()
    assert sorted(np.concatenate([b["id"] for b in held]).tolist()) == list(range(5500))


# ---- checkpoints ----------------------------------------------------------------

@pytest.mark.parametrize("batch_size,stop_after", [(50, 1), (50, 29), (64, 20), (77, 30), (100, 16), (100, 25)])
def test_resume_from_state_reproduces_the_remaining_stream(output, batch_size, stop_after):
    # A rank serves 1539 rows per epoch: (100, 16) resumes exactly at the epoch
    # boundary; the others mid-epoch, mid-window and mid-row-group (row groups
    # have 64 rows, windows 8 row groups).
    settings = dict(batch_size=batch_size, num_epochs=2, seed=3, shard_index=1, shard_count=2,
                    columns=["frame", "id"])
    with ShardReader(output, **reader_args(**settings)) as reader:
        full = list(reader)
    with ShardReader(output, **reader_args(**settings)) as reader:
        head = [next(reader) for _ in range(stop_after)]
        state = reader.state()
    assert len(state) < 1024
    with ShardReader(output, state=state, read_options=ReadOptions(num_threads=1), **reader_args(**settings)) as resumed:
        tail = list(resumed)
    assert len(head) + len(tail) == len(full)
    for got, want in zip(head + tail, full):
        assert (got["id"] == want["id"]).all() and got["epoch"] == want["epoch"]
        assert (got["frame"] == want["frame"]).all()


def test_state_from_other_settings_is_refused(output):
    with ShardReader(output, batch_size=10, order_options=OrderOptions(seed=1)) as reader:
        next(reader)
        state = reader.state()
    with pytest.raises(ValueError, match="seed"):
        ShardReader(output, batch_size=10, order_options=OrderOptions(seed=2), state=state)
    with pytest.raises(ValueError, match="not a ShardReader state"):
        ShardReader(output, batch_size=10, order_options=OrderOptions(seed=1), state=b"garbage")


# ---- real job output ------------------------------------------------------------

@pytest.mark.slow
def test_reads_a_shardmill_run_output(lc0_dataset, tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions

    from shardmill.pipelines.config import parse_config, validate
    from shardmill.pipelines.run_job import run_job
    from shardmill.transforms.common.discovery import expand_inputs
    from shardmill.transforms.lc0.kind import LC0_INPUT_SUFFIXES

    directory, _ = lc0_dataset
    config = validate(parse_config(
        f'input: "{directory}"\nlc0 {{ index {{ lc0_version: 6 }} chunk_pool {{ position_count: 3 }} }}\nmax_error_fraction: 0.5\n'
        'output { num_shards: 3 row_group_bytes: 200000 }'))
    out = str(tmp_path / "out")
    manifest = run_job(config, expand_inputs([directory], LC0_INPUT_SUFFIXES), out, PipelineOptions([])).manifest
    expected = pa.concat_tables([pq.read_table(os.path.join(out, s["path"])) for s in manifest["shards"]])
    with ShardReader(out, batch_size=32, columns=["frame", "chunk", "position"], order_options=OrderOptions(seed=8)) as reader:
        batches = list(reader)
    index = np.concatenate([b["record_index"] for b in batches])
    assert sorted(index.tolist()) == list(range(expected.num_rows))
    frames = np.concatenate([b["frame"] for b in batches])
    want = np.frombuffer(expected["frame"].combine_chunks().buffers()[1], np.uint8).reshape(-1, 8356)
    assert (frames == want[index]).all()
    assert (np.concatenate([b["chunk"] for b in batches]) == expected["chunk"].to_numpy()[index]).all()
    records = frames_as(batches[0], V6_DTYPE)  # the frames viewed as lc0 V6 structs
    assert (records["version"] == 6).all() and records.shape == (len(batches[0]["frame"]),)


# ---- Parquet layouts -------------------------------------------------------------
# PLAIN fixed-width columns without nulls (what the job writes) are read
# straight from their decompressed pages; dictionary pages, physical widths
# other than the Arrow type's (int8 is stored as INT32) and nulls go through
# Arrow. Every layout must serve the same stream with the same bytes.

EXTRA_COLUMNS = {"tiny": "int8", "short": "int16", "word": "uint32", "single": "float32", "double": "float64"}
LAYOUTS = {
    "job-options-nullable": {},
    "job-options-required": dict(nullable=False),
    "page-v2-nullable": dict(data_page_version="2.0"),
    "page-v2-required": dict(data_page_version="2.0", nullable=False),
    "many-pages-per-group": dict(data_page_size=100, write_batch_size=10),
    "many-v2-pages-snappy": dict(data_page_version="2.0", data_page_size=100, write_batch_size=10,
                                 compression="snappy", compression_level=None),
    "uncompressed": dict(compression="none", compression_level=None, nullable=False),
    "lz4-raw": dict(compression="lz4", compression_level=None),  # pyarrow's "lz4" is Parquet's LZ4_RAW
    "dictionary-encoded": dict(use_dictionary=True),
}


@pytest.mark.parametrize("width", [16, 5000])  # gathered per part / scattered as decoded
@pytest.mark.parametrize("layout", list(LAYOUTS), ids=list(LAYOUTS))
def test_every_parquet_layout_serves_the_same_stream_with_the_same_bytes(output, tmp_path, width, layout):
    directory = str(tmp_path / "layout")
    write_output(directory, N_ROWS, row_group_rows=64, width=width, extra_columns=EXTRA_COLUMNS, **LAYOUTS[layout])
    settings = dict(batch_size=70, num_epochs=2, seed=8, shard_index=1, shard_count=2)
    _, reference = epoch_ids(output, **settings)
    batches, ids = epoch_ids(directory, columns=["frame", "id", *EXTRA_COLUMNS], **settings)
    assert (ids == reference).all()
    for b in batches:
        assert (b["frame"] == frame_bytes(b["id"], width)).all()
        for name, dtype in EXTRA_COLUMNS.items():
            assert b[name].dtype == np.dtype(dtype) and (b[name] == extra_values(b["id"], dtype)).all()


@pytest.mark.parametrize("width", [16, 5000])
@pytest.mark.parametrize("page_version", ["1.0", "2.0"])
@pytest.mark.parametrize("null_id,shard", [(0, 0), (63, 0), (1000, 1), (1500, 1), (3077, 2)])
def test_a_null_frame_raises_naming_the_shard_and_column(tmp_path, width, page_version, null_id, shard):
    directory = str(tmp_path / "nulls")
    write_output(directory, N_ROWS, row_group_rows=64, width=width, null_ids=[null_id],
                 data_page_version=page_version)
    with pytest.raises(OutputError, match=f"shard-0000{shard}-of-00003.parquet.*column 'frame' has nulls"):
        list(ShardReader(directory, columns=["frame"], batch_size=100))


@pytest.mark.parametrize("levels,values,defined", [
    (bytes([200, 1, 1]), 100, True),             # one RLE run of 100 ones (ULEB128 header 200)
    (bytes([200, 1, 1]), 101, False),            # ... too short for 101 values
    (bytes([200, 1, 0]), 100, False),            # a run of zeros: nulls
    (bytes([5, 0xFF, 0xFF]), 16, True),          # bit-packed: 2 groups of 8 ones
    (bytes([5, 0xFF, 0x7F]), 15, True),          # ... the 16th level is past the page's values
    (bytes([5, 0xFF, 0x7F]), 16, False),         # ... and is a null
    (bytes([3, 0xFF, 4, 1]), 10, True),          # 8 bit-packed ones, then an RLE run of 2 ones
    (bytes([3, 0xFF, 4, 0]), 10, False),
    (bytes([5, 0xFF]), 16, False),               # bit-packed groups cut short
    (bytes([0, 1]), 1, False),                   # a run of no values
    (bytes([0x80]), 1, False),                   # header cut short
    (b"", 0, True),
])
def test_definition_levels_are_all_defined_only_when_every_value_is(native_testing, levels, values, defined):
    assert native_testing.all_levels_defined(levels, values) is defined


# ---- errors ---------------------------------------------------------------------

@pytest.fixture
def broken(output, tmp_path):
    directory = str(tmp_path / "copy")
    shutil.copytree(output, directory)
    return directory


def _manifest(directory):
    with open(os.path.join(directory, ".manifest.json")) as f:
        return json.load(f)


def _save(directory, manifest):
    with open(os.path.join(directory, ".manifest.json"), "w") as f:
        json.dump(manifest, f)


@pytest.mark.parametrize("columns", [["frame"], ["frame", "source"]])  # native only; and one through Arrow
def test_a_generation_deleted_under_a_following_reader_is_an_output_error_saying_so(tmp_path, columns):
    directory = str(tmp_path / "out")
    write_output(directory, [500, 500, 333], row_group_rows=50, width=12)
    with ShardReader(directory, 40, columns, num_epochs=2, follow_generations=True,
                     order_options=OrderOptions(seed=1, window_row_groups=2)) as reader:
        next(reader)
        for name in os.listdir(directory):
            if name.startswith("g000001-"):
                os.remove(os.path.join(directory, name))
        with pytest.raises(OutputError, match=r"out: generation 1 was deleted while this reader was serving it "
                                              r"\(g000001-shard-0000\d-of-00003.parquet is gone\).*"
                                              r"output.keep_generations >= 2"):
            for _ in reader:
                pass


def test_directory_without_manifest_is_refused(tmp_path):
    with pytest.raises(OutputError, match="no .manifest.json"):
        ShardReader(str(tmp_path))


def test_missing_shard_is_refused(broken):
    os.remove(os.path.join(broken, "g000001-shard-00001-of-00003.parquet"))
    with pytest.raises(OutputError, match="g000001-shard-00001-of-00003.parquet is missing"):
        ShardReader(broken)


def test_shard_size_disagreeing_with_the_manifest_is_refused(broken):
    with open(os.path.join(broken, "g000001-shard-00002-of-00003.parquet"), "ab") as f:
        f.write(b"x")
    with pytest.raises(OutputError, match="g000001-shard-00002-of-00003.parquet has .* bytes"):
        ShardReader(broken)


def test_row_groups_disagreeing_with_the_manifest_raise_naming_the_shard(broken):
    manifest = _manifest(broken)
    groups = manifest["shards"][1]["row_groups"]
    manifest["shards"][1]["row_groups"] = groups[:-2] + [groups[-2] + groups[-1]]
    _save(broken, manifest)
    with pytest.raises(OutputError, match="g000001-shard-00001-of-00003.parquet.*row groups, the manifest says"):
        list(ShardReader(broken, columns=["id"]))


def test_corrupt_shard_raises_naming_the_file_instead_of_aborting(broken):
    path = os.path.join(broken, "g000001-shard-00000-of-00003.parquet")
    data = bytearray(open(path, "rb").read())
    for i in range(100, 2000):  # scramble column data, keep the footer and the size
        data[i] ^= 0xA5
    open(path, "wb").write(bytes(data))
    with pytest.raises(OutputError, match="g000001-shard-00000-of-00003.parquet"):
        list(ShardReader(broken, columns=["frame", "id"], order_options=OrderOptions(shuffle=False)))


@pytest.mark.parametrize("nullable", [True, False])
def test_corrupt_pages_of_wide_rows_raise_naming_the_file(tmp_path, nullable):
    # Wide rows go from each decompressed page straight to their places: a
    # page that fails to decompress midway through a row group must still
    # surface as an error naming the shard, with the stream stopped there.
    directory = str(tmp_path / "wide")
    write_output(directory, N_ROWS, row_group_rows=64, width=5000, nullable=nullable,
                 data_page_size=20000, write_batch_size=4)
    path = os.path.join(directory, "g000001-shard-00001-of-00003.parquet")
    data = bytearray(open(path, "rb").read())
    # Every page is a zstd frame; break the magic number of one in the middle
    # of the file. (Scrambled compressed bytes can decode to wrong bytes
    # silently: the manifest's checksums, verify_checksums=True, catch those.)
    frames = [i for i in range(len(data) - 3) if data[i:i + 4] == b"\x28\xb5\x2f\xfd"]
    assert len(frames) > 20
    data[frames[len(frames) // 2]] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(OutputError, match="g000001-shard-00001-of-00003.parquet"):
        list(ShardReader(directory, columns=["frame", "id"], batch_size=64, order_options=OrderOptions(seed=3)))


def test_truncated_shard_with_a_matching_manifest_raises(broken):
    path = os.path.join(broken, "g000001-shard-00002-of-00003.parquet")
    data = open(path, "rb").read()[:-100]
    open(path, "wb").write(data)
    manifest = _manifest(broken)
    manifest["shards"][2]["bytes"] = len(data)
    _save(broken, manifest)
    with pytest.raises(OutputError, match="g000001-shard-00002-of-00003.parquet"):
        list(ShardReader(broken, columns=["id"]))


def test_checksum_mismatch_is_refused_when_verifying(broken):
    manifest = _manifest(broken)
    manifest["shards"][0]["sha256"] = "0" * 64
    _save(broken, manifest)
    ShardReader(broken).close()  # sizes match: accepted without verification
    with pytest.raises(OutputError, match="SHA-256"):
        ShardReader(broken, read_options=ReadOptions(verify_checksums=True))


def test_schema_mismatch_between_shards_raises(broken):
    write_output(os.path.join(broken, "other"), [100], row_group_rows=64, width=8)
    shutil.copy(os.path.join(broken, "other", "g000001-shard-00000-of-00001.parquet"),
                os.path.join(broken, "g000001-shard-00001-of-00003.parquet"))
    manifest = _manifest(broken)
    other = _manifest(os.path.join(broken, "other"))["shards"][0]
    manifest["shards"][1].update({k: other[k] for k in ("rows", "row_groups", "bytes", "sha256")})
    _save(broken, manifest)
    with pytest.raises(OutputError, match="g000001-shard-00001-of-00003.parquet: column 'frame' is fixed_size_binary"):
        list(ShardReader(broken, columns=["frame"]))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(columns=["nope"]), "no column 'nope'"),
        (dict(batch_size=0), "batch_size must be >= 1"),
    ],
)
def test_bad_arguments_raise_clear_errors(output, kwargs, message):
    with pytest.raises(OutputError, match=message):
        ShardReader(output, **reader_args(**kwargs))


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: OrderOptions(seed=-1), r"OrderOptions.seed must be an integer in 0..18446744073709551615, got -1"),
        (lambda: OrderOptions(seed=1 << 64), r"OrderOptions.seed must be an integer"),
        (lambda: OrderOptions(shuffle=1), r"OrderOptions.shuffle must be True or False, got 1"),
        (lambda: OrderOptions(window_row_groups=0), r"OrderOptions.window_row_groups must be an integer in 1\.\."),
        (lambda: OrderOptions(window_row_groups=2.0), r"OrderOptions.window_row_groups must be an integer"),
        (lambda: ShardOptions(shard_index=2, shard_count=2), r"ShardOptions.shard_index must be an integer in 0..1, got 2"),
        (lambda: ShardOptions(shard_count=0), r"ShardOptions.shard_count must be an integer in 1\.\."),
        (lambda: ShardOptions(shard_index=True), r"ShardOptions.shard_index must be an integer"),
        (lambda: ReadOptions(num_threads=0), r"ReadOptions.num_threads must be an integer in 1\.\.1024, got 0"),
        (lambda: ReadOptions(prefetch_windows=-1), r"ReadOptions.prefetch_windows must be an integer in 0\.\.64"),
        (lambda: ReadOptions(verify_checksums="yes"), r"ReadOptions.verify_checksums must be True or False"),
        (lambda: Lc0Tensors("tf"), r"Lc0Tensors.convention must be one of loader, chunkparser, got 'tf'"),
        (lambda: Lc0Tensors(planes="int4"), r"Lc0Tensors.planes must be one of float32"),
    ],
)
def test_reader_option_objects_validate_themselves(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_reader_options_are_frozen_and_checked_by_type(output):
    options = OrderOptions(seed=3)
    with pytest.raises(AttributeError):
        options.seed = 4
    with pytest.raises(TypeError, match="order_options must be a OrderOptions, got dict"):
        ShardReader(output, order_options={"seed": 3})
    with pytest.raises(TypeError, match="shard_options must be a ShardOptions, got tuple"):
        ShardReader(output, shard_options=(0, 2))
    with pytest.raises(ValueError, match="the converter reads column"):
        ShardReader(output, columns=["id"], converter=Lc0Tensors())
    with ShardReader(output, 100, ["id"], order_options=OrderOptions(seed=3),
                     shard_options=ShardOptions(1, 2)) as a, \
            ShardReader(output, 100, ["id"], order_options=options, shard_options=ShardOptions(1, 2)) as b:
        assert [x["id"].tolist() for x in a] == [y["id"].tolist() for y in b]
