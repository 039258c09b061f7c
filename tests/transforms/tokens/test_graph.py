"""The token-dataset job: shards in order are exactly Megatron's shuffled sample stream."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from shardmill.pipelines import cli
from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.tokens.megatron_index import build_gpt_indices
from shardmill.transforms.tokens.plan import kept_sequences
from tests.datagen.megatron import write_indexed_dataset
from tests.pipelines.test_run_job import MULTI_PROCESSING, file_digests


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    directory = tmp_path_factory.mktemp("megatron")
    rng = np.random.default_rng(21)
    sequences = [rng.integers(0, 60_000, int(n)).astype(np.uint16) for n in rng.integers(1, 120, 80)]
    write_indexed_dataset(str(directory / "corpus"), sequences, np.uint16)
    return str(directory / "corpus"), sequences


def config_for(prefix, extra=""):
    return validate(parse_config(
        f'seed: 4\noutput {{ num_shards: 3 }}\n'
        f'token_dataset {{ path_prefix: "{prefix}" seq_length: 24 num_samples: 500 {extra} }}'))


def read_in_order(out, manifest):
    return pa.concat_tables([pq.read_table(os.path.join(out, s["path"])) for s in manifest["shards"]])


@pytest.mark.slow
def test_shards_in_order_are_megatrons_sample_stream(corpus, tmp_path):
    prefix, sequences = corpus
    manifest = run_job(config_for(prefix), [], str(tmp_path), PipelineOptions([])).manifest
    indices = build_gpt_indices([len(s) for s in sequences], 24, 500, seed=4)
    table = read_in_order(tmp_path, manifest)
    assert table["sample"].to_pylist() == indices.shuffle_index.astype(np.int64).tolist()
    stream = np.concatenate([sequences[d] for d in indices.document_index])
    tokens = np.frombuffer(table["tokens"].combine_chunks().buffers()[1], np.uint16).reshape(-1, 25)
    for row, sample in enumerate(table["sample"].to_pylist()):
        assert tokens[row].tolist() == stream[sample * 24 : sample * 24 + 25].tolist()
    stats = manifest["stats"]["token_dataset"]
    assert stats["num_epochs"] == indices.num_epochs > 1 and stats["num_samples"] == len(indices.shuffle_index)
    assert table["epoch"].to_pylist() == [s * 24 // stats["tokens_per_epoch"] for s in table["sample"].to_pylist()]


@pytest.mark.slow
def test_without_the_extra_token_samples_have_seq_length_tokens(corpus, tmp_path):
    prefix, _ = corpus
    manifest = run_job(config_for(prefix, "add_extra_token: false"), [], str(tmp_path), PipelineOptions([])).manifest
    assert read_in_order(tmp_path, manifest).schema.field("tokens").type == pa.binary(48)


@pytest.mark.slow
def test_document_level_threshold_gamma_keeps_sequences_deterministically(corpus, tmp_path):
    prefix, sequences = corpus
    lengths = np.array([len(s) for s in sequences], dtype=np.int32)
    kept = kept_sequences(lengths, 60, 1.0, seed=4)
    assert 0 < len(kept) < len(sequences) and (kept_sequences(lengths, 60, 1.0, seed=4) == kept).all()
    assert lengths[kept].mean() > lengths.mean()  # longer sequences are kept more often
    manifest = run_job(config_for(prefix, "hanse_sampling_threshold: 60"), [], str(tmp_path),
                       PipelineOptions([])).manifest
    assert manifest["stats"]["token_dataset"]["sequences_kept"] == len(kept)
    indices = build_gpt_indices(lengths, 24, 500, seed=4, documents=kept)
    assert read_in_order(tmp_path, manifest)["sample"].to_pylist() == indices.shuffle_index.astype(np.int64).tolist()


@pytest.mark.slow
def test_identical_bytes_with_two_worker_processes(corpus, tmp_path):
    prefix, _ = corpus
    run_job(config_for(prefix), [], str(tmp_path / "a"), PipelineOptions([]))
    run_job(config_for(prefix), [], str(tmp_path / "b"), PipelineOptions(MULTI_PROCESSING))
    assert file_digests(tmp_path / "a") == file_digests(tmp_path / "b")


@pytest.mark.slow
def test_cli_runs_a_token_dataset_job(corpus, tmp_path, capsys):
    prefix, _ = corpus
    config = tmp_path / "tokens.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{prefix}" seq_length: 16 }}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 0
    assert "megatron samples" in capsys.readouterr().out


def test_corrupt_index_fails_the_job_with_a_clear_error(tmp_path, capsys):
    (tmp_path / "bad.idx").write_bytes(b"NOTMEGATRON" + bytes(40))
    (tmp_path / "bad.bin").write_bytes(b"")
    config = tmp_path / "tokens.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{tmp_path / "bad"}" seq_length: 16 }}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 2
    assert "bad.idx: bad magic" in capsys.readouterr().err


@pytest.mark.slow
def test_a_blended_run_exits_0_and_inspect_reads_it(corpus, tmp_path, capsys):
    prefix, _ = corpus
    config = tmp_path / "blend.textproto"
    config.write_text(f'token_dataset {{ blend {{ path_prefix: "{prefix}" weight: 0.5 }} '
                      f'blend {{ path_prefix: "{prefix}" weight: 0.5 }} seq_length: 128 num_samples: 100 }}\n')
    out = str(tmp_path / "o")
    assert cli.main(["run", "--config", str(config), "--output", out]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "a blend of 2 corpora" in printed and "committed generation 1" in printed
    assert cli.main(["inspect", out]) == 0, capsys.readouterr().err
    assert "weight 0.5" in capsys.readouterr().out


ACCEPTED_DTYPES = [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64]


@pytest.mark.slow
@pytest.mark.parametrize("dtype, pad", [(dtype, pad) for dtype in ACCEPTED_DTYPES for pad in (None, 2**63 - 1)]
                         + [(np.uint16, -1), (np.int32, 2**32), (np.int8, -2**63)])
def test_every_token_output_the_job_commits_is_served_by_the_reader_and_inspect(tmp_path, capsys, dtype, pad):
    """Every corpus dtype the job accepts, with and without a padded last sample: what is committed is read."""
    from shardmill.native_ext.reader import ShardReader

    rng = np.random.default_rng(5)
    write_indexed_dataset(str(tmp_path / "c"), [rng.integers(0, 100, int(n)).astype(dtype)
                                                 for n in rng.integers(1, 40, 30)], dtype)
    padded = "" if pad is None else (f'split: "50,50,0" use_split: VALID drop_last_partial_validation_sequence: false '
                                     f"pad_token: {pad}")
    config = tmp_path / "job.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{tmp_path / "c"}" seq_length: 16 {padded} }}\n'
                      f'output {{ path: "{tmp_path / "out"}" num_shards: 2 }}\n')
    assert cli.main(["run", "--config", str(config)]) == 0, capsys.readouterr().err
    out = str(tmp_path / "out")
    with ShardReader(out, batch_size=4) as reader:
        tokens = np.concatenate([batch["tokens"] for batch in reader])
    assert tokens.shape[1] == 17 and len(tokens) > 0
    if pad is None:
        assert tokens.dtype == dtype
    else:
        assert (tokens == pad).any(), "the padded last sample is served"
        assert np.iinfo(tokens.dtype).min <= pad <= np.iinfo(tokens.dtype).max
    assert set(np.unique(tokens)) - {pad} <= set(range(100))
    assert cli.main(["inspect", out]) == 0, capsys.readouterr().err
    assert f"({tokens.dtype}," in capsys.readouterr().out


def test_the_serialised_graph_does_not_grow_with_the_launchers_indices(corpus):
    """The indices travel as a staged file: a run of 200x the samples serialises to a graph of the same size
    (inside the graph Beam pickled and compressed the npz again and again: GBs for a large split)."""
    import apache_beam as beam

    from shardmill.pipelines.jobs import job_kind
    from shardmill.pipelines.run_job import build_graph
    from shardmill.transforms.output.lifecycle import RunPaths

    prefix, _ = corpus

    def graph_bytes(num_samples):
        config = validate(parse_config(f'seed: 4\noutput {{ num_shards: 3 }}\ntoken_dataset {{ path_prefix: '
                                       f'"{prefix}" seq_length: 24 num_samples: {num_samples} }}'))
        plan = job_kind(config).plan(config, [], True)
        p = beam.Pipeline()
        build_graph(p, config, plan, RunPaths("/nonexistent/out", "graph", 1), True)
        return len(plan.indices_npz), len(p.to_runner_api().SerializeToString())

    small_npz, small = graph_bytes(500)
    large_npz, large = graph_bytes(100_000)
    assert large_npz - small_npz > 500_000
    assert abs(large - small) < 20_000, (small, large)


def test_the_tokens_graph_stays_within_its_transform_count(corpus):
    from tests.transforms.lc0.test_graph import leaf_transforms

    prefix, _ = corpus
    # 38 before the graph was condensed (Beam's cost is per transform; see the lc0 kind's test).
    assert leaf_transforms(f'output {{ num_shards: 3 }}\ntoken_dataset {{ path_prefix: "{prefix}" seq_length: 24 '
                           'num_samples: 500 }', []) <= 19
