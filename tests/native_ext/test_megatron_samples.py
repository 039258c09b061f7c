"""Token outputs served as Megatron trains on them: typed samples, default columns, and MegatronSamples
(tokens, labels, loss_mask, position_ids, attention_mask) against GPTDataset.__getitem__'s own output
(tests/data/megatron/samples.npz, made by Megatron-LM's code) for every flag combination."""

import itertools
import json
import os

import numpy as np
import pytest

from shardmill.native_ext.converters import Lc0Tensors, MegatronSamples, megatron_masks
from shardmill.native_ext.options import OrderOptions
from shardmill.native_ext.reader import ShardReader
from shardmill.pipelines import cli
from tests.support.paths import REPO, SHARED_FIXTURES
from tests.transforms.tokens.test_megatron_reference import config_text

REFERENCE = os.path.join(REPO, "tests", "data", "megatron")
FIXTURES = os.path.join(SHARED_FIXTURES, "megatron")
pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(FIXTURES, "meg-gpt2-openwebtext_text_document.idx")),
                                reason="../shared/fixtures/megatron absent")
FLAGS = ("reset_position_ids", "reset_attention_mask", "eod_mask_loss", "create_attention_mask")


def run_reference_config(name: str, split: str, out) -> str:
    spec = json.loads(str(np.load(os.path.join(REFERENCE, name + ".npz"))["config"]))
    config = out.parent / f"{out.name}.pbtxt"
    config.write_text(config_text(spec, split, str(out), "num_shards: 2 row_group_bytes: 8192"))
    assert cli.main(["run", "--config", str(config)]) == 0
    return str(out)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("megatron_outputs")
    return {name: run_reference_config(name, "valid", base / name)
            for name in ("single_valid_keeps_partial", "single_without_extra_token", "blend_60_30_10")}


def rows_in_stream_order(path: str, **kwargs) -> dict:
    """Every row of the output, ordered by record_index (the split's sample stream)."""
    with ShardReader(path, batch_size=64, order_options=OrderOptions(seed=3), **kwargs) as reader:
        batches = list(reader)
    order = np.argsort(np.concatenate([b["record_index"] for b in batches]))
    return {k: np.concatenate([b[k] for b in batches])[order] for k in batches[0] if isinstance(batches[0][k],
                                                                                              np.ndarray)}


@pytest.mark.slow
def test_token_samples_are_served_as_arrays_of_their_dtype_with_the_outputs_columns(outputs):
    with ShardReader(outputs["single_valid_keeps_partial"], batch_size=8) as reader:
        batch = next(reader)
    assert batch["tokens"].dtype == np.int32 and batch["tokens"].shape == (8, 129)  # uint16 widened for the pad -1
    assert {"tokens", "sample", "epoch"} <= set(batch)
    with ShardReader(outputs["blend_60_30_10"], batch_size=8) as reader:
        batch = next(reader)
    assert batch["tokens"].dtype == np.int32  # uint16 and int32 corpora
    assert {"tokens", "sample", "epoch", "corpus", "corpus_position"} <= set(batch)
    with ShardReader(outputs["single_without_extra_token"], batch_size=8) as reader:
        assert next(reader)["tokens"].dtype == np.uint16 and reader.rows_per_epoch > 0


@pytest.mark.parametrize("name", ["single_valid_keeps_partial", "single_without_extra_token"])
@pytest.mark.parametrize("flags", list(itertools.product((False, True), repeat=4)))
def test_megatron_samples_are_what_gpt_dataset_getitem_returns(outputs, name, flags):
    ref = np.load(os.path.join(REFERENCE, "samples.npz"))
    eod = json.loads(str(ref["config"]))["eod"]
    rows = rows_in_stream_order(outputs[name], converter=MegatronSamples(eod, **dict(zip(FLAGS, flags))))
    tag = f"{name}/" + "".join("1" if f else "0" for f in flags)
    for i in range(4):
        index = int(ref[f"{tag}/{i}/index"])
        for field in ("tokens", "labels", "loss_mask", "position_ids", "attention_mask"):
            key = f"{tag}/{i}/{field}"
            if key not in ref.files:
                assert field == "attention_mask" and not flags[3] and field not in rows
                continue
            expected = ref[key]
            got = rows[field][index]
            assert got.dtype == expected.dtype, (field, got.dtype, expected.dtype)
            np.testing.assert_array_equal(got, expected, err_msg=f"{tag} sample {index} {field}")


def test_the_masks_follow_each_end_of_document_in_a_batch():
    tokens = np.array([[5, 9, 1, 9, 9, 2], [9, 1, 2, 3, 4, 5]])
    out = megatron_masks(tokens, 9, True, True, True, True)
    assert out["position_ids"].tolist() == [[0, 1, 0, 1, 0, 0], [0, 0, 1, 2, 3, 4]]
    assert out["loss_mask"].tolist() == [[1, 0, 1, 0, 0, 1], [0, 1, 1, 1, 1, 1]]
    allowed = ~out["attention_mask"][0, 0]
    assert allowed[5].tolist() == [False] * 5 + [True]  # after the last EOD: only itself
    assert allowed[3].tolist() == [False, False, True, True, False, False]


def test_converters_refuse_outputs_of_another_kind(outputs):
    with pytest.raises(ValueError, match="Lc0Tensors converts lc0 records; this output holds megatron_gpt_samples"):
        ShardReader(outputs["blend_60_30_10"], converter=Lc0Tensors())
    with pytest.raises(ValueError, match="eod_token must be an integer"):
        MegatronSamples("50256")


def test_the_torch_adapter_yields_megatrons_batch(outputs):
    torch = pytest.importorskip("torch")
    from shardmill.native_ext.torch_dataset import ShardIterableDataset

    dataset = ShardIterableDataset(outputs["single_valid_keeps_partial"], batch_size=16,
                                   converter=MegatronSamples(13, eod_mask_loss=True, create_attention_mask=True))
    batch = next(iter(torch.utils.data.DataLoader(dataset, batch_size=None)))
    assert batch["tokens"].dtype == torch.int64 and batch["tokens"].shape == (16, 128)
    assert batch["labels"].shape == (16, 128) and batch["loss_mask"].dtype == torch.float32
    assert batch["attention_mask"].shape == (16, 1, 128, 128) and batch["attention_mask"].dtype == torch.bool
    assert batch["position_ids"].dtype == torch.int64


def test_the_grain_adapters_serve_typed_samples(outputs):
    pytest.importorskip("grain")
    from shardmill.native_ext.grain_dataset import ShardDataSource, ShardIterDataset

    source = ShardDataSource(outputs["blend_60_30_10"])
    record = source[5]
    assert record["tokens"].dtype == np.int32 and record["tokens"].shape == (129,)
    assert set(record) == {"tokens", "sample", "epoch", "corpus", "corpus_position"}
    batch = next(iter(ShardIterDataset(outputs["blend_60_30_10"], batch_size=4, converter=MegatronSamples(13))))
    assert batch["labels"].shape == (4, 128) and batch["tokens"].dtype == np.int64
