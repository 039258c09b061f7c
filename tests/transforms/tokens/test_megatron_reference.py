"""Splits, blends and samples against arrays Megatron-LM's own code built (tests/data/megatron).

Each reference file holds what BlendedMegatronDatasetBuilder, BlendedDataset
and GPTDataset built for one configuration on ../shared/fixtures/megatron
(make_reference.py there says how): every GPTDataset index, the blend's
indices and a digest of every sample's tokens. The same configuration, in
shardmill's terms, must give the same arrays and the same tokens.
"""

import glob
import hashlib
import io
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardmill.native_ext.dataset import load_manifest
from shardmill.pipelines import cli
from shardmill.pipelines.config import ConfigError, parse_config, validate
from shardmill.transforms.tokens.graph import sample_batch
from shardmill.transforms.tokens.plan import plan_tokens
from tests.support.paths import REPO, SHARED_FIXTURES

REFERENCE = os.path.join(REPO, "tests", "data", "megatron")
FIXTURES = os.path.join(SHARED_FIXTURES, "megatron")
CORPORA = {"A": "meg-gpt2-openwebtext_text_document", "B": "owt_b_rev599to0_int32",
           "C": "owt_c_600to999_5empty_uint16"}
SPLITS = ("train", "valid", "test")
needs_fixture = pytest.mark.skipif(not os.path.exists(os.path.join(FIXTURES, CORPORA["A"] + ".idx")),
                                   reason="../shared/fixtures/megatron absent")
pytestmark = needs_fixture


def reference(name):
    return np.load(os.path.join(REFERENCE, name + ".npz"))


def built_cases():
    """(configuration, split) for every split Megatron built in every reference file."""
    cases = []
    for path in sorted(glob.glob(os.path.join(REFERENCE, "*.npz"))):
        name = os.path.basename(path)[:-4]
        if name == "samples":
            continue
        with np.load(path) as ref:
            cases += [(name, s) for s in SPLITS if f"{s}/sample_digest" in ref.files]
    return cases


def config_text(spec: dict, split: str, output: str = "/unused", output_fields: str = "") -> str:
    """The reference's Megatron configuration, for one split, in shardmill's config."""
    index = SPLITS.index(split)
    names, weights = spec["blend"] if "blend" in spec else spec["blend_per_split"][index]
    prefix = lambda name: os.path.join(FIXTURES, CORPORA[name])  # noqa: E731
    lines = []
    if len(names) == 1 and weights is None:
        lines.append(f'path_prefix: "{prefix(names[0])}"')
    else:
        for k, name in enumerate(names):
            weight = "" if weights is None else f" weight: {weights[k]!r}"
            lines.append(f'blend {{ path_prefix: "{prefix(name)}"{weight} }}')
    if "split" in spec:
        lines.append(f'split: "{spec["split"]}"')
    size = spec["sizes"][index]
    if size is not None:
        lines.append(f"num_samples: {size}")
    lines += [f"use_split: {split.upper()}", f"seq_length: {spec['seq']}",
              f"random_seed: {spec.get('seed', 1234)}",
              f"add_extra_token: {str(spec.get('extra', True)).lower()}",
              f"drop_last_partial_validation_sequence: {str(spec.get('drop_last', True)).lower()}"]
    if "surplus" in spec:
        lines.append(f"mid_level_dataset_surplus: {spec['surplus']!r}")
    return f'token_dataset {{ {" ".join(lines)} }} output {{ path: "{output}" {output_fields}}}'


def planned(spec, split):
    config = parse_config(config_text(spec, split))
    validate(config)
    return config, plan_tokens(config)


def digests(tokens: np.ndarray) -> np.ndarray:
    """The reference's digest: BLAKE2b-64 of each sample's tokens as little-endian int64."""
    rows = tokens.astype("<i8")
    return np.array([np.frombuffer(hashlib.blake2b(r.tobytes(), digest_size=8).digest(), "<u8")[0] for r in rows],
                    dtype=np.uint64)


@pytest.mark.parametrize("name,split", built_cases())
def test_every_index_is_the_one_megatron_built(name, split):
    ref = reference(name)
    spec = json.loads(str(ref["config"]))
    _, plan = planned(spec, split)
    ours = np.load(io.BytesIO(plan.indices_npz))
    mids = sorted({k.split("/")[1] for k in ref.files if k.startswith(f"{split}/mid")})
    blended = f"{split}/dataset_index" in ref.files
    assert plan.blended == blended
    for k, mid in enumerate(mids):
        prefix = f"corpus{k}_" if blended else ""
        for array in ("document_index", "sample_index", "shuffle_index"):
            expected = ref[f"{split}/{mid}/{array}"]
            np.testing.assert_array_equal(ours[prefix + array], expected, err_msg=f"{name} {split} {mid} {array}")
            assert ours[prefix + array].dtype == expected.dtype, (name, split, array)
    if blended:
        np.testing.assert_array_equal(ours["blend_dataset_index"], ref[f"{split}/dataset_index"])
        np.testing.assert_array_equal(ours["blend_dataset_sample_index"], ref[f"{split}/dataset_sample_index"])


@pytest.mark.parametrize("name,split", built_cases())
def test_every_sample_holds_the_tokens_megatron_serves(name, split, tmp_path):
    ref = reference(name)
    spec = json.loads(str(ref["config"]))
    _, plan = planned(spec, split)
    indices_path = str(tmp_path / "indices.npz")
    with open(indices_path, "wb") as f:
        f.write(plan.indices_npz)
    total = plan.tasks[-1][2] if plan.tasks else 0
    batch = sample_batch(0, total, indices_path, list(plan.prefixes), plan.blended, plan.seq_length,
                         plan.add_extra_token, list(plan.tokens_per_epoch), plan.dtype, plan.pad_token)
    width = plan.seq_length + int(plan.add_extra_token)
    tokens = np.frombuffer(batch.column("tokens").buffers()[1], dtype=plan.dtype).reshape(-1, width)[:batch.num_rows]
    expected = ref[f"{split}/sample_digest"]
    assert len(tokens) == len(expected)
    mismatched = np.flatnonzero(digests(tokens) != expected)
    assert not len(mismatched), f"{name} {split}: samples {mismatched[:10].tolist()} differ"


def test_megatrons_refusals_are_config_errors():
    ref = reference("refused_weights_without_size")
    assert "size_is_none => weights_are_none" in str(ref["refused"])
    spec = json.loads(str(ref["config"]))
    with pytest.raises(ConfigError, match="num_samples: required with blend weights"):
        validate(parse_config(config_text(spec, "train")))


def test_weights_on_some_corpora_only_are_refused():
    text = (f'token_dataset {{ blend {{ path_prefix: "{os.path.join(FIXTURES, CORPORA["A"])}" weight: 1 }} '
            f'blend {{ path_prefix: "{os.path.join(FIXTURES, CORPORA["B"])}" }} seq_length: 64 num_samples: 10 }}')
    with pytest.raises(ConfigError, match=r"blend\[1\].weight: set a weight on every corpus"):
        validate(parse_config(text))


def test_a_blended_run_writes_megatrons_stream_and_exits_0(tmp_path):
    """The whole job, through Beam, on the configuration of the issue (weights 0.6/0.3/0.1)."""
    ref = reference("blend_60_30_10")
    spec = json.loads(str(ref["config"]))
    out = tmp_path / "out"
    config = tmp_path / "blend.pbtxt"
    config.write_text(config_text(spec, "valid", str(out), "num_shards: 3"))
    assert cli.main(["run", "--config", str(config)]) == 0
    manifest = load_manifest(str(out))
    table = pa.concat_tables([pq.read_table(out / s["path"]) for s in manifest["shards"]])
    width = spec["seq"] + 1
    dtype = manifest["record"]["dtype"]
    tokens = np.frombuffer(b"".join(table.column("tokens").to_pylist()), dtype=dtype).reshape(-1, width)
    np.testing.assert_array_equal(digests(tokens), ref["valid/sample_digest"])
    np.testing.assert_array_equal(table.column("corpus").to_numpy(), ref["valid/dataset_index"])
    assert cli.main(["inspect", str(out)]) == 0
