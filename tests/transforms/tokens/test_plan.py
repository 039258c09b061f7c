"""The token job's plan: the samples' dtype, and what it refuses before any index is built."""

import itertools
import os
import re

import numpy as np
import pytest

from shardmill.native_ext.dataset import _TOKEN_DTYPES as READER_TOKEN_DTYPES
from shardmill.pipelines import cli
from shardmill.transforms.tokens.plan import TOKEN_DTYPES, sample_dtype
from tests.datagen.megatron import write_indexed_dataset
from tests.support.cli import run_shardmill

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


def dry_run_refusal(tmp_path, capsys, sequences: list[np.ndarray], fields: str) -> str:
    """The one line `run --dry-run` prints when refusing a corpus of these sequences with these fields."""
    write_indexed_dataset(str(tmp_path / "c"), sequences, np.uint16)
    config = tmp_path / "job.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{tmp_path / "c"}" {fields} }}\n'
                      f'output {{ path: "{tmp_path / "out"}" }}\n')
    assert cli.main(["run", "--config", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_a_split_whose_share_rounds_to_no_sequences_is_called_empty_not_an_inverted_range(tmp_path, capsys):
    err = dry_run_refusal(tmp_path, capsys, [np.arange(5, dtype=np.uint16)] * 1000,
                          'seq_length: 4 split: "99999,1,0" use_split: VALID')
    assert ("c: the VALID split of '99999,1,0' is empty here: its share of the corpus's 1,000 sequences rounds to "
            "none") in err and "1000..999" not in err


def test_threshold_gamma_dropping_every_sequence_says_so(tmp_path, capsys):
    err = dry_run_refusal(tmp_path, capsys, [np.arange(2, dtype=np.uint16)] * 50,
                          "seq_length: 4 hanse_sampling_threshold: 1000000 hanse_sampling_gamma: 4")
    assert ("c: token_dataset.hanse_sampling_threshold 1000000 (gamma 4) kept none of the 50 sequences of the TRAIN "
            "split (sequences 0..49 of 50)") in err


def test_a_corpus_twice_in_a_blend_is_allowed_with_a_warning(tmp_path, caplog):
    from shardmill.pipelines.config import parse_config, validate
    from shardmill.transforms.tokens.plan import plan_tokens

    write_indexed_dataset(str(tmp_path / "c"), [np.arange(50, dtype=np.uint16)] * 20, np.uint16)
    same = f"{tmp_path}/./c"
    config = validate(parse_config(f'token_dataset {{ blend {{ path_prefix: "{tmp_path / "c"}" weight: 1 }} '
                                   f'blend {{ path_prefix: "{same}" weight: 1 }} seq_length: 8 num_samples: 20 }}'))
    with caplog.at_level("WARNING"):
        plan = plan_tokens(config)
    assert plan.stats["num_samples"] == 20
    assert (f"token_dataset.blend[1].path_prefix: {same} is also blend[0]: the blend samples this corpus twice "
            "(allowed, as in Megatron)") in caplog.text


# Writes a corpus and plans it in this process, printing the index build's estimate and its traced peak
# (numpy's allocations are traced), as JSON.
MEASURE = r"""
import json, sys, tracemalloc
import numpy as np
from shardmill.pipelines.config import parse_config, validate
from shardmill.transforms.tokens import plan as plan_module
from tests.datagen.megatron import write_indexed_dataset

directory, docs, mean_length, fields = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = np.random.default_rng(1)
sequences = [np.zeros(int(n), np.uint16) for n in rng.integers(1, 2 * mean_length, docs)]
write_indexed_dataset(directory + "/a", sequences, np.uint16)
write_indexed_dataset(directory + "/b", sequences[: docs // 2 + 1], np.uint16)
config = validate(parse_config("token_dataset { " + fields.replace("DIR", directory) + " }"))
estimates = []
check = plan_module.check_index_size
plan_module.check_index_size = lambda prefixes, needed, *rest: (estimates.append(needed), check(prefixes, needed, *rest))
tracemalloc.start()
plan_module.plan_tokens(config)
print(json.dumps({"estimate": estimates[0], "peak": tracemalloc.get_traced_memory()[1]}))
"""


def run_limited(args: list[str], memory_bytes: int, timeout: float):
    """A child python with its address space limited (these builds allocate up to gigabytes) and a timeout."""
    import resource
    import subprocess
    import sys

    from tests.support.paths import REPO

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})


@pytest.mark.slow
@pytest.mark.parametrize("docs, mean_length, fields", [
    (1000, 100, 'path_prefix: "DIR/a" seq_length: 64 num_samples: 5000000'),  # samples
    (300, 3, 'path_prefix: "DIR/a" seq_length: 16 num_samples: 1000000'),  # epochs x documents
    (200_000, 1000, 'path_prefix: "DIR/a" seq_length: 64 num_samples: 10'),  # the corpus itself
    (1000, 100, 'blend { path_prefix: "DIR/a" weight: 0.7 } blend { path_prefix: "DIR/b" weight: 0.3 } '
                'seq_length: 64 num_samples: 5000000'),
    # 10,000 documents: at 1,000 the build's arrays (~0.6 MB) are smaller than the estimate's fixed slack for
    # small arrays (2 MiB), and the ratio measured which modules the plan happened to import.
    (10_000, 100, 'blend { path_prefix: "DIR/a" } blend { path_prefix: "DIR/b" } seq_length: 8 split: "50,50,0" '
                'use_split: VALID drop_last_partial_validation_sequence: false'),
])
def test_the_index_build_estimate_bounds_its_measured_peak_within_3x(tmp_path, docs, mean_length, fields):
    import json

    done = run_limited(["-c", MEASURE, str(tmp_path), str(docs), str(mean_length), fields], 3 << 30, 300)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["peak"] <= measured["estimate"] <= 3 * measured["peak"], measured


@pytest.mark.slow
def test_a_size_whose_index_build_would_not_fit_is_refused_in_one_line_before_allocating(tmp_path):
    """10^9 samples of 64 tokens over 1,000 documents: refused by a run limited to 2 GiB, not killed."""
    rng = np.random.default_rng(1)
    write_indexed_dataset(str(tmp_path / "c"), [np.zeros(int(n), np.uint16) for n in rng.integers(1, 2000, 1000)],
                          np.uint16)
    config = tmp_path / "job.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{tmp_path / "c"}" seq_length: 64 num_samples: 1000000000 }}\n'
                      f'output {{ path: "{tmp_path / "out"}" }}\n')
    done = run_shardmill("run", "--config", config, timeout=120, memory_limit_bytes=2 << 30)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and re.search(r"c: 1,000,000,000 samples of 64 tokens need Megatron's indices built in "
                                          r"[0-9.]+ GiB of memory on the launcher \(at most 16 GiB\): ask for fewer "
                                          "token_dataset.num_samples", errors[0]), done.stderr[-2000:]
    assert not (tmp_path / "out").exists()
