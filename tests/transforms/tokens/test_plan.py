"""The token job's plan: the samples' dtype, and what it refuses before any index is built."""

import itertools

import numpy as np
import pytest

from shardmill.native_ext.dataset import _TOKEN_DTYPES as READER_TOKEN_DTYPES
from shardmill.pipelines import cli
from shardmill.transforms.tokens.plan import TOKEN_DTYPES, sample_dtype
from tests.datagen.megatron import write_indexed_dataset

PADS = [None, -1, 0, 255, 70_000, 2**32, 2**63 - 1, -2**63]


@pytest.mark.parametrize("pad", PADS)
def test_the_samples_dtype_is_one_the_reader_serves_and_holds_every_corpus_and_the_pad(pad):
    for corpus_dtypes in itertools.chain(((t,) for t in TOKEN_DTYPES), itertools.combinations(TOKEN_DTYPES, 2)):
        dtype = sample_dtype(list(corpus_dtypes), pad)
        assert str(dtype) in READER_TOKEN_DTYPES, (corpus_dtypes, pad, dtype)
        assert all(np.can_cast(t, dtype, "safe") for t in corpus_dtypes), (corpus_dtypes, pad, dtype)
        if pad is not None:
            assert np.iinfo(dtype).min <= pad <= np.iinfo(dtype).max, (corpus_dtypes, pad, dtype)


def test_pads_the_corpus_dtype_holds_keep_it_and_others_widen_as_before():
    assert sample_dtype([np.uint16], -1) == np.int32  # Megatron's pad without a tokenizer pad
    assert sample_dtype([np.uint16], 70_000) == np.uint32
    assert sample_dtype([np.int32], 7) == np.int32
    assert sample_dtype([np.int32], 2**32) == np.int64  # numpy would promote to float64
    assert sample_dtype([np.uint16], 2**63 - 1) == np.int64  # numpy would promote to uint64


@pytest.mark.parametrize("dtype, code", [(np.float32, 7), (np.float64, 6)])
def test_a_float_corpus_is_refused_in_one_line_naming_its_idx_and_dtype(tmp_path, capsys, dtype, code):
    write_indexed_dataset(str(tmp_path / "c"), [np.arange(40, dtype=dtype)] * 10, dtype)
    config = tmp_path / "job.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{tmp_path / "c"}" seq_length: 8 }}\n'
                      f'output {{ path: "{tmp_path / "out"}" }}\n')
    assert cli.main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert (f"c.idx: dtype code {code} ({np.dtype(dtype)}) is not a token dtype: the token job reads integer "
            "corpora (uint8, int8, int16, int32, int64, uint16)") in err
    assert not (tmp_path / "out").exists()
