"""MegatronDataset: a token output as Megatron-LM's own data loader takes it. Item i is what Megatron's
GPTDataset/BlendedDataset.__getitem__(i) returned for the same configuration (the digests of every item in
tests/data/megatron/cache_reference, made by Megatron-LM's code), by index, through Megatron's sampler order and
a DataLoader with workers, from a remote output through the shard cache; the flags against samples.npz."""

import hashlib
import itertools
import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from shardmill.core.errors import OutputError
from shardmill.native_ext import CacheOptions, MegatronDataset, ReadOptions, load_manifest
from shardmill.pipelines import cli
from tests.datagen.shards import write_output
from tests.native_ext.test_megatron_samples import FLAGS, run_reference_config
from tests.support.paths import REPO
from tests.transforms.tokens.test_megatron_reference import CORPORA, config_text, needs_fixture

torch = pytest.importorskip("torch")

CACHE_REFERENCE = os.path.join(REPO, "tests", "data", "megatron", "cache_reference")
SAMPLES = os.path.join(REPO, "tests", "data", "megatron", "samples.npz")
EOD = 50256  # the reference's GPT-2 tokenizer (cache_reference/*/config.json)


def reference_spec(config: dict) -> dict:
    """A cache_reference config.json (Megatron's inputs, /data/megatron/<fixture> prefixes) in the terms of
    test_megatron_reference.config_text (corpus letters)."""
    letters = {fixture: letter for letter, fixture in CORPORA.items()}
    prefixes, weights = config["blend"]
    return {"blend": [[letters[config["fixtures"][p]] for p in prefixes], weights], "split": config["split"],
            "sizes": config["sizes"], "seq": config["seq_length"], "seed": config["seed"],
            "extra": config["add_extra_token_to_sequence"],
            "drop_last": config["drop_last_partial_validation_sequence"],
            "surplus": config["mid_level_dataset_surplus"]}


def reference_config(name: str) -> dict:
    with open(os.path.join(CACHE_REFERENCE, name, "config.json")) as f:
        return json.load(f)


def megatron_digests(name: str, split: str) -> np.ndarray:
    with np.load(os.path.join(CACHE_REFERENCE, name, "getitem_digest.npz")) as digests:
        return digests[split]


def getitem_digest(item: dict) -> np.uint64:
    """The reference's digest of one item (cache_reference/README.md; make_cache_reference.getitem_digest)."""
    digest = hashlib.blake2b(digest_size=8)
    for field in ("tokens", "labels", "loss_mask", "position_ids"):
        digest.update(np.ascontiguousarray(np.asarray(item[field])).tobytes())
    return np.frombuffer(digest.digest(), "<u8")[0]


def digests_of(items) -> np.ndarray:
    return np.array([getitem_digest(item) for item in items], dtype=np.uint64)


@pytest.fixture(scope="module")
def train_outputs(tmp_path_factory):
    """The train split of the single corpus and of the weighted blend, written by the job (several shards of
    several row groups, so reads cross both)."""
    base = tmp_path_factory.mktemp("megatron_dataset")
    outputs = {}
    for name in ("single_corpus", "weighted_blend"):
        out = base / name
        config = base / f"{name}.pbtxt"
        config.write_text(config_text(reference_spec(reference_config(name)), "train", str(out),
                                      "num_shards: 3 row_group_bytes: 65536"))
        assert cli.main(["run", "--config", str(config)]) == 0
        outputs[name] = str(out)
    return outputs


def megatron_pretraining_sampler(total_samples: int, consumed_samples: int, micro_batch_size: int,
                                 data_parallel_rank: int, data_parallel_size: int, drop_last: bool = True):
    """Megatron's MegatronPretrainingSampler (megatron/training/datasets/data_samplers.py), same iteration:
    consecutive global batches of micro_batch_size x data_parallel_size indices, each rank its slice."""
    start, end = data_parallel_rank * micro_batch_size, (data_parallel_rank + 1) * micro_batch_size
    batch = []
    for index in range(consumed_samples, total_samples):
        batch.append(index)
        if len(batch) == micro_batch_size * data_parallel_size:
            yield batch[start:end]
            batch = []
    if batch and not drop_last:
        yield batch[start:end]


def blend_dataset_index(name: str, split: str) -> np.ndarray:
    """Megatron's BlendedDataset dataset_index of the split, as its cache holds it."""
    [built] = [b for b in reference_config(name)["built"] if b["class"] == "BlendedDataset" and b["split"] == split]
    [path] = [f for f in built["files"] if f.endswith("-dataset_index.npy")]
    return np.load(os.path.join(CACHE_REFERENCE, name, "cache", path))


@needs_fixture
@pytest.mark.slow
@pytest.mark.parametrize("name", ["single_corpus", "weighted_blend"])
def test_every_item_is_what_megatrons_getitem_returns(train_outputs, name):
    dataset = MegatronDataset(train_outputs[name], EOD, cached_row_groups=2)
    expected = megatron_digests(name, "train")
    assert len(dataset) == len(expected)
    item = dataset[0]
    seq = reference_config(name)["seq_length"]
    assert {field: (value.dtype, tuple(value.shape)) for field, value in item.items() if field != "dataset_id"} == {
        "tokens": (torch.int64, (seq,)), "labels": (torch.int64, (seq,)), "loss_mask": (torch.float32, (seq,)),
        "position_ids": (torch.int64, (seq,))}
    mismatched = np.flatnonzero(digests_of(dataset[i] for i in range(len(dataset))) != expected)
    assert not len(mismatched), f"{name}: items {mismatched[:10].tolist()} differ from Megatron's"


@needs_fixture
@pytest.mark.slow
def test_a_blends_items_carry_megatrons_dataset_id(train_outputs):
    dataset = MegatronDataset(train_outputs["weighted_blend"], EOD)
    dataset_index = blend_dataset_index("weighted_blend", "train")
    ids = [dataset[i]["dataset_id"] for i in range(0, len(dataset), 97)]
    assert all(i.dtype == torch.int16 and i.shape == () for i in ids)
    assert [int(i) for i in ids] == dataset_index[::97].tolist()
    assert "dataset_id" not in MegatronDataset(train_outputs["single_corpus"], EOD)[0]


@needs_fixture
@pytest.mark.slow
@pytest.mark.parametrize("name", ["single_corpus", "weighted_blend"])
def test_megatrons_sampler_order_through_a_dataloader_with_two_workers_serves_megatrons_batches(train_outputs,
                                                                                                   name):
    dataset = MegatronDataset(train_outputs[name], EOD, cached_row_groups=2)
    expected = megatron_digests(name, "train")
    micro_batch, ranks, consumed = 4, 2, 40
    served = {}
    for rank in range(ranks):
        sampler = list(megatron_pretraining_sampler(len(dataset), consumed, micro_batch, rank, ranks))
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=2)
        for indices, batch in zip(sampler, loader, strict=True):
            assert batch["tokens"].shape == (micro_batch, reference_config(name)["seq_length"])
            assert batch["tokens"].dtype == torch.int64 and batch["loss_mask"].dtype == torch.float32
            rows = [{field: batch[field][k].numpy() for field in batch} for k in range(micro_batch)]
            served.update(zip(indices, digests_of(rows)))
    # Every index of every whole global batch after the consumed samples, once, as Megatron served it.
    whole = (len(dataset) - consumed) // (micro_batch * ranks) * micro_batch * ranks
    assert sorted(served) == list(range(consumed, consumed + whole))
    indices = np.array(sorted(served))
    np.testing.assert_array_equal(np.array([served[i] for i in indices], dtype=np.uint64), expected[indices])


@needs_fixture
@pytest.mark.slow
def test_a_batch_of_random_indices_is_the_items_one_by_one(train_outputs):
    dataset = MegatronDataset(train_outputs["weighted_blend"], EOD, cached_row_groups=3)
    expected = megatron_digests("weighted_blend", "train")
    indices = np.random.default_rng(7).permutation(len(dataset))[:300].tolist()
    items = dataset.__getitems__(indices)
    np.testing.assert_array_equal(digests_of(items), expected[indices])
    assert [int(item["dataset_id"]) for item in items] == blend_dataset_index("weighted_blend", "train")[indices].tolist()
    assert dataset.__getitems__([]) == []


@needs_fixture
@pytest.mark.slow
def test_indices_count_from_the_end_as_a_python_sequence_and_others_are_refused(train_outputs):
    dataset = MegatronDataset(train_outputs["weighted_blend"], EOD)
    n = len(dataset)
    expected = megatron_digests("weighted_blend", "train")
    # Megatron's GPTDataset and BlendedDataset take -1 as the last sample too (their numpy index arrays).
    assert getitem_digest(dataset[-1]) == expected[-1] == getitem_digest(dataset[n - 1])
    assert getitem_digest(dataset[-n]) == expected[0]
    assert getitem_digest(dataset[np.int64(5)]) == getitem_digest(dataset[torch.tensor(5)]) == expected[5]
    for index in (n, -n - 1, 1 << 40):
        with pytest.raises(IndexError, match=rf"sample {index} is outside 0\.\.{n - 1} \(or -{n}\.\.-1\)"):
            dataset[index]
    with pytest.raises(IndexError):
        dataset.__getitems__([0, n])
    with pytest.raises(TypeError, match="MegatronDataset indices must be integers, not float"):
        dataset[1.0]


@needs_fixture
@pytest.mark.slow
def test_a_pickled_dataset_carries_no_cache_and_serves_the_same_items(train_outputs):
    dataset = MegatronDataset(train_outputs["weighted_blend"], EOD, cached_row_groups=8)
    first = digests_of(dataset.__getitems__(list(range(0, len(dataset), 5))))
    data = pickle.dumps(dataset)
    assert len(data) < 64 << 10  # the manifest and options, not the decoded row groups (~4 MiB cached here)
    copy = pickle.loads(data)
    np.testing.assert_array_equal(digests_of(copy.__getitems__(list(range(0, len(copy), 5)))), first)


@needs_fixture
@pytest.mark.slow
def test_a_remote_output_is_read_through_the_shard_cache_fetching_each_shard_once(train_outputs, s3_server,
                                                                                    tmp_path):
    from tests.support.s3_server import CountingProxy

    local = train_outputs["weighted_blend"]
    s3_server.create_bucket("megatron-dataset")
    s3_server.upload(local, "megatron-dataset/out")
    proxy = CountingProxy(s3_server)
    try:
        cache = CacheOptions(str(tmp_path / "cache"), max_bytes=1 << 30)
        dataset = MegatronDataset(proxy.located("s3://megatron-dataset/out"), EOD, cached_row_groups=2,
                                  read_options=ReadOptions(cache=cache))
        expected = megatron_digests("weighted_blend", "train")
        indices = np.random.default_rng(3).permutation(len(dataset))[:500].tolist()
        np.testing.assert_array_equal(digests_of(dataset.__getitems__(indices)), expected[indices])
        np.testing.assert_array_equal(digests_of(dataset[i] for i in range(0, len(dataset), 7)), expected[::7])
        shards = load_manifest(local)["shards"]
        assert dataset.cache_stats()["downloaded_bytes"] == sum(s["bytes"] for s in shards)
        assert dataset.cache_stats()["downloads"] == len(shards)
    finally:
        proxy.close()


@needs_fixture
@pytest.mark.slow
@pytest.mark.parametrize("name", ["single_valid_keeps_partial", "single_without_extra_token"])
def test_the_flags_give_what_gpt_dataset_getitem_returns(tmp_path, name):
    """Every flag combination against the items Megatron's GPTDataset returned (samples.npz; a padded last
    validation sample among them), fields, dtypes and shapes."""
    output = run_reference_config(name, "valid", tmp_path / name)
    reference = np.load(SAMPLES)
    eod = json.loads(str(reference["config"]))["eod"]
    for flags in itertools.product((False, True), repeat=4):
        dataset = MegatronDataset(output, eod, **dict(zip(FLAGS, flags)))
        tag = f"{name}/" + "".join("1" if f else "0" for f in flags)
        for i in range(4):
            index = int(reference[f"{tag}/{i}/index"])
            item = dataset[index]
            fields = [f for f in ("tokens", "labels", "attention_mask", "loss_mask", "position_ids")
                      if f"{tag}/{i}/{f}" in reference.files]
            assert list(item) == fields, tag  # Megatron's fields, in its order
            for field in fields:
                expected = reference[f"{tag}/{i}/{field}"]
                got = item[field].numpy()
                assert got.dtype == expected.dtype and got.shape == expected.shape, (tag, field)
                np.testing.assert_array_equal(got, expected, err_msg=f"{tag} sample {index} {field}")


@needs_fixture
@pytest.mark.slow
def test_without_torch_items_are_numpy_arrays(train_outputs):
    script = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # torch is not importable
        from shardmill.native_ext import MegatronDataset
        item = MegatronDataset({train_outputs["weighted_blend"]!r}, {EOD})[3]
        print({{k: (type(v).__name__, str(v.dtype), v.shape) for k, v in item.items()}})
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            preexec_fn=lambda: __import__("resource").setrlimit(
                                __import__("resource").RLIMIT_AS, (3 << 30, 3 << 30)))
    assert result.returncode == 0, result.stderr
    seq = reference_config("weighted_blend")["seq_length"]
    assert result.stdout.strip() == str({
        "dataset_id": ("int16", "int16", ()), "tokens": ("ndarray", "int64", (seq,)),
        "labels": ("ndarray", "int64", (seq,)), "loss_mask": ("ndarray", "float32", (seq,)),
        "position_ids": ("ndarray", "int64", (seq,))})


def test_an_output_of_another_kind_is_refused_in_one_line(tmp_path):
    write_output(str(tmp_path), [50], row_group_rows=10)
    with pytest.raises(OutputError) as refused:
        MegatronDataset(str(tmp_path), EOD)
    assert str(refused.value) == (f"{tmp_path}: MegatronDataset reads token outputs (record_format "
                                  "megatron_gpt_samples, written by a token_dataset run); this output holds lc0 records")


@pytest.mark.slow
@needs_fixture
def test_a_cache_only_output_is_refused_saying_it_holds_no_samples(tmp_path):
    from tests.support.paths import SHARED_FIXTURES

    corpus = os.path.join(SHARED_FIXTURES, "megatron", "meg-gpt2-openwebtext_text_document")
    config = tmp_path / "cache_only.pbtxt"
    config.write_text(f'seed: 1 token_dataset {{ path_prefix: "{corpus}" seq_length: 64 megatron_cache {{ '
                      'data_path: "/data/megatron/meg-gpt2-openwebtext_text_document" '
                      'tokenizer: "{\\"class\\": \\"T\\"}" cache_only: true } } '
                      f'output {{ path: "{tmp_path / "out"}" }}')
    assert cli.main(["run", "--config", str(config)]) == 0
    with pytest.raises(OutputError) as refused:
        MegatronDataset(str(tmp_path / "out"), EOD)
    assert str(refused.value).startswith(f"{tmp_path / 'out'}: holds no samples: it was written with "
                                         "megatron_cache.cache_only, for Megatron to load its index cache")


@pytest.mark.slow
@pytest.mark.parametrize("eod", [2 ** 70, -1])
def test_an_end_of_document_token_no_token_of_the_output_can_be_is_refused(train_outputs, eod):
    dtype = load_manifest(train_outputs["single_corpus"])["record"]["dtype"]
    with pytest.raises(ValueError, match=f"MegatronSamples.eod_token {eod} is outside the output's {dtype} tokens"):
        MegatronDataset(train_outputs["single_corpus"], eod)
