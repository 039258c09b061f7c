"""Megatron splits and blends: config errors, the kept indices, copied runs, absurd sizes.

Exactness against Megatron-LM's own arrays is test_megatron_reference.py's.

On the real Megatron fixture in ../shared/fixtures/megatron/ (GPT-2 tokens of
OpenWebText, uint16, 1000 documents; an int32 corpus of the first 600
documents reversed; a uint16 corpus of documents 600..999 with 5 empty ones),
skipped when it is absent.
"""

import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from shardmill.core.kernels import build_blending_indices, copy_runs
from shardmill.pipelines import cli
from shardmill.pipelines.config import ConfigError, parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.tokens.megatron_blend import SplitError, parse_split, plan_weighted_blend
from shardmill.transforms.tokens.megatron_index import (IndexedDatasetError, build_gpt_indices, parse_index,
                                                        sample_byte_runs, sample_tokens)
from shardmill.transforms.tokens.plan import INDICES_NAME, read_dataset
from tests.datagen.megatron import write_indexed_dataset
from tests.support.paths import SHARED_FIXTURES

FIXTURES = os.path.join(SHARED_FIXTURES, "megatron")
OWT = os.path.join(FIXTURES, "meg-gpt2-openwebtext_text_document")
OWT_B = os.path.join(FIXTURES, "owt_b_rev599to0_int32")
OWT_C = os.path.join(FIXTURES, "owt_c_600to999_5empty_uint16")
needs_fixture = pytest.mark.skipif(not os.path.exists(OWT + ".idx"), reason="../shared/fixtures/megatron absent")


def read_stream(out, manifest):
    return pa.concat_tables([pq.read_table(os.path.join(out, s["path"])) for s in manifest["shards"]])


def job(extra, seed=7, shards=3):
    return validate(parse_config(f"seed: {seed}\noutput {{ num_shards: {shards} }}\ntoken_dataset {{ {extra} }}"))


# ---- blends and config errors -----------------------------------------------------------

def test_weights_that_do_not_sum_to_one_blend_like_their_normalised_form():
    a, b = plan_weighted_blend([3, 7], 500), plan_weighted_blend([0.3, 0.7], 500)
    assert a.corpus_samples == b.corpus_samples and (a.dataset_index == b.dataset_index).all()


def test_a_blend_whose_weights_sum_to_inf_is_refused_before_normalising():
    with pytest.raises(SplitError, match="must sum to a finite number"):
        plan_weighted_blend([1e308, 1e308], 10)


def test_blending_index_ties_go_to_the_first_dataset():
    index, sample = build_blending_indices(np.array([0.5, 0.5]), 6)
    assert index.tolist() == [0, 1, 0, 1, 0, 1] and sample.tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("split, use_split, message", [
    ("1,0,0", "VALID", "the VALID split of '1,0,0' is empty"),
    ("a,b", "TRAIN", "one to three non-negative numbers"),
    ("0,0,0", "TRAIN", "sum to 0"),
    ("1,2,3,4", "TRAIN", "one to three"),
])
def test_bad_or_empty_splits_are_config_errors(split, use_split, message):
    with pytest.raises(ConfigError, match=message):
        job(f'path_prefix: "x" seq_length: 8 split: "{split}" use_split: {use_split}')


@pytest.mark.parametrize("fields, message", [
    ('seq_length: 8 blend { path_prefix: "a" weight: 1 }', "num_samples: required with blend weights"),
    ('seq_length: 8 num_samples: 5 blend { path_prefix: "a" weight: 0 }', r"blend\[0\].weight"),
    ('seq_length: 8 num_samples: 5 path_prefix: "a" blend { path_prefix: "b" weight: 1 }', "exactly one of"),
    ('seq_length: 8 num_samples: 5 blend { path_prefix: "a" weight: 1e308 } blend { path_prefix: "b" weight: 1e308 }',
     r"^token_dataset.blend\[\].weight: the weights sum past the largest double \(inf\); scale them down"),
    ('seq_length: 8 num_samples: 5 blend { path_prefix: "a" weight: inf }', r"blend\[0\].weight: must be finite"),
])
def test_bad_blends_are_config_errors(fields, message):
    with pytest.raises(ConfigError, match=message):
        job(fields)


@pytest.mark.slow
@needs_fixture
def test_the_indices_are_kept_in_the_output_and_load_with_numpy(tmp_path):
    blend = f'blend {{ path_prefix: "{OWT}" weight: 1 }} blend {{ path_prefix: "{OWT_C}" weight: 1 }}'
    manifest = run_job(job(f'{blend} seq_length: 16 num_samples: 100'), [], str(tmp_path), PipelineOptions([])).manifest
    path = os.path.join(tmp_path, os.path.dirname(manifest["errors"]["path"]), INDICES_NAME)
    arrays = np.load(path)
    assert sorted(arrays.files) == sorted(
        [f"corpus{k}_{name}" for k in (0, 1) for name in ("document_index", "sample_index", "shuffle_index")]
        + ["blend_dataset_index", "blend_dataset_sample_index"])
    table = read_stream(tmp_path, manifest)
    assert (arrays["blend_dataset_index"] == table["corpus"].to_numpy()).all()
    # A second run (overwrite) keeps its own generation's indices, not the first's.
    config = job(f'{blend} seq_length: 16 num_samples: 100', seed=8)
    config.output.overwrite = True
    second = run_job(config, [], str(tmp_path), PipelineOptions([])).manifest
    second_path = os.path.join(tmp_path, os.path.dirname(second["errors"]["path"]), INDICES_NAME)
    assert os.path.exists(second_path) and not os.path.exists(path)


@needs_fixture
def test_copied_runs_equal_reading_sample_by_sample():
    dataset = read_dataset(OWT_C + ".idx", OWT_C + ".bin")  # with empty documents
    indices = build_gpt_indices(dataset.sequence_lengths, 48, 700, seed=3)
    samples = indices.shuffle_index.astype(np.int64)
    starts, lengths = sample_byte_runs(dataset, indices, samples, 48)
    out = np.empty((len(samples), 49), dtype=dataset.dtype)
    copy_runs(np.memmap(OWT_C + ".bin", dtype=np.uint8, mode="r"), starts, lengths, out.reshape(-1).view(np.uint8))
    with open(OWT_C + ".bin", "rb") as f:
        for row, sample in enumerate(samples):
            assert (out[row] == sample_tokens(f, dataset, indices, int(sample))).all()


def test_copy_runs_refuses_runs_outside_the_source():
    src, dest = np.arange(10, dtype=np.uint8), np.zeros(8, dtype=np.uint8)
    copy_runs(src, np.array([2, 7]), np.array([5, 3]), dest)
    assert dest.tolist() == [2, 3, 4, 5, 6, 7, 8, 9]
    for starts, lengths in (([8], [3]), ([-1], [2]), ([2**62], [2**62]), ([0], [-1])):
        with pytest.raises(ValueError, match="outside the 10-byte source"):
            copy_runs(src, np.array(starts), np.array(lengths), dest)
    with pytest.raises(ValueError, match="more bytes than the destination"):
        copy_runs(src, np.array([0]), np.array([9]), dest)


# ---- bad inputs: one line, exit 2 --------------------------------------------------------

def test_a_missing_corpus_file_is_one_line_and_exit_2(tmp_path, capsys):
    config = tmp_path / "job.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{tmp_path}/nothing" seq_length: 8 }}\n'
                      f'output {{ path: "{tmp_path}/out" }}')
    assert cli.main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path}/nothing.bin: no such file" in err


def test_a_pointer_that_overflows_is_refused_naming_the_sequence(tmp_path):
    from tests.datagen.megatron import write_indexed_dataset

    write_indexed_dataset(str(tmp_path / "c"), [np.arange(5, dtype=np.uint16)] * 3, np.uint16)
    data = bytearray((tmp_path / "c.idx").read_bytes())
    pointers_at = 9 + 8 + 1 + 8 + 8 + 3 * 4
    data[pointers_at + 8: pointers_at + 16] = (2**63 - 1).to_bytes(8, "little")
    with pytest.raises(IndexedDatasetError, match="sequence 1 ends at byte 9223372036854775817"):
        parse_index(bytes(data), "c.idx", (tmp_path / "c.bin").stat().st_size)


@needs_fixture
def test_a_split_that_rounds_to_no_sequences_is_one_line_and_exit_2(tmp_path, capsys):
    config = tmp_path / "job.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{OWT}" seq_length: 8 split: "9999,1,0" use_split: VALID }}\n'
                      f'output {{ path: "{tmp_path}/out" }}')
    assert cli.main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the VALID split of '9999,1,0' is empty here: its share of the corpus's 1,000 " \
        "sequences rounds to none" in err


@pytest.mark.parametrize("split", ["-1,2", "nan,1", "1,,2", "1;2", "a", "1,2,3,4", "", "1e3,1"])
def test_a_malformed_split_string_is_refused_not_read_as_its_digits(split):
    with pytest.raises(SplitError, match="one to three non-negative numbers"):
        parse_split(split)


@pytest.mark.parametrize("split, shares", [("969,30,1", [0.969, 0.03, 0.001]), (" 98 / 2 ", [0.98, 0.02, 0.0]),
                                           ("1", [1.0, 0.0, 0.0]), (".5,0.5", [0.5, 0.5, 0.0])])
def test_well_formed_split_strings_read_as_megatron_reads_them(split, shares):
    assert parse_split(split) == pytest.approx(shares)


@pytest.mark.parametrize("extra, message", [
    ("seq_length: 1000000000", "needs more tokens than the TRAIN split holds"),
    ("seq_length: 16 num_samples: 1000000000000", "indices built in .* GiB of memory on the launcher \\(at most 16 GiB\\): ask for fewer"),
])
def test_absurd_sizes_are_refused_before_any_index_is_built(tmp_path, capsys, extra, message):
    write_indexed_dataset(str(tmp_path / "corpus"), [np.arange(50, dtype=np.uint16)] * 20, np.uint16)
    config = tmp_path / "job.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{tmp_path / "corpus"}" {extra} }}\n'
                      f'output {{ path: "{tmp_path / "out"}" }}\n')
    assert cli.main(["run", "--config", str(config), "--dry-run"]) == 2
    assert re.search(message, capsys.readouterr().err)
