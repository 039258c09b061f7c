"""One contract for every job kind: the config's one section picks it, and run, --dry-run, count, inspect,
--plot and help all go through it."""

import importlib
import inspect as pyinspect
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardmill.native_ext import load_manifest
from shardmill.pipelines import cli
from shardmill.pipelines.config import ConfigError, parse_config, validate
from shardmill.pipelines.jobs import REGISTRY, job_kind, kinds
from shardmill.transforms.job import JobKind
from shardmill.transforms.output.shard_count import MAX_SHARD_BYTES, PlanError, ShardSizing, shard_count
from tests.datagen.megatron import write_indexed_dataset


def write_inputs(directory, lc0_directory) -> dict:
    """An input of each kind in directory; returns a config text for each (without output)."""
    events = directory / "events"
    events.mkdir()
    (events / "day.csv").write_text("id,clicked,url\n" + "".join(f"{i},{int(i % 7 == 0)},https://x/{i}\n"
                                                                  for i in range(300)))
    write_indexed_dataset(str(directory / "corpus"), [np.arange(40 + i, dtype=np.uint16) for i in range(30)],
                          np.uint16)
    return {
        "lc0": f'input: "{lc0_directory}"\nlc0 {{ chunk_pool {{ position_count: 2 }} }}\nmax_error_fraction: 0.5',
        "labels": f'input: "{events}"\nlabel_sampling {{ label_column: "clicked" ratio: 2 }}',
        "tokens": f'token_dataset {{ path_prefix: "{directory / "corpus"}" seq_length: 16 num_samples: 50 }}',
    }


@pytest.fixture()
def inputs(lc0_dataset, tmp_path):
    return write_inputs(tmp_path, lc0_dataset[0])


@pytest.fixture(scope="module")
def outputs(lc0_dataset, tmp_path_factory):
    """A committed output of each kind (two shards each)."""
    directory = tmp_path_factory.mktemp("kinds")
    outs = {}
    for name, text in write_inputs(directory, lc0_dataset[0]).items():
        outs[name] = directory / f"out-{name}"
        assert cli.main(["run", "--config", write_config(directory, name, text, outs[name])]) == 0
    return outs


def write_config(tmp_path, name, text, output, num_shards=2):
    path = tmp_path / f"{name}.textproto"
    path.write_text(text + f'\noutput {{ path: "{output}" num_shards: {num_shards} }}\n')
    return str(path)


def test_every_registered_kind_keeps_the_contract():
    assert [k.name for k in kinds()] == list(REGISTRY) == ["lc0", "labels", "tokens"]
    fields = {k.config_field for k in kinds()}
    assert fields == {"lc0", "label_sampling", "token_dataset"}
    oneof = parse_config("").DESCRIPTOR.oneofs_by_name["job"]
    assert {f.name for f in oneof.fields} == fields  # one section per kind, no section without a kind
    for kind in kinds():
        assert isinstance(kind, JobKind) and kind.description and kind.record_format
        for method in ("validate", "transform", "shard_format"):
            assert getattr(type(kind), method) is not getattr(JobKind, method), (kind.name, method)
        # The folder's conventional modules: every kind has the same roles in the same file names.
        for module, function in (("kind", "KIND"), ("plan", None), ("graph", None), ("shards", None),
                                 ("report", "render_summary"), ("report", "plot")):
            loaded = importlib.import_module(f"{kind.package}.{module}")
            assert function is None or getattr(loaded, function) is not None, (kind.name, module, function)
    assert job_kind(parse_config("")).name == "lc0"  # no section: the lc0 job with its defaults


@pytest.mark.parametrize("text, message", [
    ('input: "x" label_sampling { label_column: "c" } token_dataset { path_prefix: "p" }',
     'Field "token_dataset" is specified along with field "label_sampling", another member of oneof "job"'),
    ('input: "x" lc0 { } label_sampling { label_column: "c" }',
     'Field "label_sampling" is specified along with field "lc0", another member of oneof "job"'),
    ('input: "x" chunk_pool { passes: 2 }', "lc0 settings go inside lc0 { chunk_pool { ... } }"),
    ('input: "x" index { lc0_version: 6 }', "lc0 settings go inside lc0 { index { ... } }"),
    ('input: "x" record_format: LC0', "the job section (lc0, label_sampling or token_dataset) says"),
])
def test_conflicting_or_outdated_job_sections_are_refused_when_read(text, message):
    with pytest.raises(ConfigError, match=pyinspect.cleandoc(message).replace("(", r"\(").replace(")", r"\)")
                       .replace("{", r"\{").replace("}", r"\}").replace(".", r"\.")):
        parse_config(text)


@pytest.mark.parametrize("text, message", [
    ('input: "x" token_dataset { path_prefix: "p" seq_length: 8 }', "input: a token_dataset job reads the corpora"),
    ('input: "x" lc0 { chunk_pool { passes: 0 } }', "lc0.chunk_pool.passes: must be in 1..1000000"),
    ('input: "x" label_sampling { ratio: 2 }', "label_sampling.label_column: required"),
    ('label_sampling { label_column: "c" }', "input: at least one input pattern is required"),
])
def test_each_kind_validates_its_own_section(text, message):
    with pytest.raises(ConfigError, match=message):
        validate(parse_config(text))


def test_conflicting_sections_exit_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "both.textproto"
    path.write_text('input: "x"\nlabel_sampling { label_column: "c" }\ntoken_dataset { path_prefix: "p" }\n'
                    f'output {{ path: "{tmp_path / "out"}" }}\n')
    for argv in (["run", "--config", str(path)], ["run", "--config", str(path), "--dry-run"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "another member of oneof" in err
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.slow
def test_the_dry_run_refuses_what_the_run_refuses(inputs, tmp_path, capsys):
    for name, text in inputs.items():
        out = tmp_path / f"out-{name}"
        config = write_config(tmp_path, name, text, out)
        assert cli.main(["run", "--config", config, "--dry-run"]) == 0, capsys.readouterr().err
        printed = capsys.readouterr().out.splitlines()
        assert printed[0].startswith(f"dry run: {name} job") and not out.exists()
        assert "  Job" in printed and "  Output" in printed and len(printed) > 5  # the graph, two levels
        assert cli.main(["run", "--config", config]) == 0, capsys.readouterr().err
        capsys.readouterr()
        for argv in (["run", "--config", config], ["run", "--config", config, "--dry-run"]):
            assert cli.main(argv) == 2
            assert "already holds an output (generation 1); pass --overwrite" in capsys.readouterr().err
        assert cli.main(["run", "--config", config, "--dry-run", "--overwrite"]) == 0
        capsys.readouterr()


def test_a_plan_too_large_for_a_shard_is_refused_before_work_for_every_kind(tmp_path, capsys):
    assert shard_count(MAX_SHARD_BYTES, ShardSizing(num_shards=1), "x") == 1
    with pytest.raises(PlanError, match="may hold at most 8 GiB: set more output.num_shards, or lower it"):
        shard_count(MAX_SHARD_BYTES + 1, ShardSizing(num_shards=1), "lower it")
    with pytest.raises(PlanError, match="at most 100,000 shards: raise target_shard_bytes or lower it"):
        shard_count(100_001 << 20, ShardSizing(target_shard_bytes=1 << 20), "lower it")
    events = tmp_path / "events"
    events.mkdir()
    with open(events / "huge.csv", "wb") as f:  # sparse: 9 GiB that take no disk
        f.truncate(9 << 30)
    config = write_config(tmp_path, "labels", f'input: "{events}"\nlabel_sampling {{ label_column: "c" }}',
                          tmp_path / "out", num_shards=1)
    for argv in (["run", "--config", config, "--dry-run"], ["run", "--config", config]):
        assert cli.main(argv) == 2
        assert "GiB each; a shard is sorted in memory and may hold at most 8 GiB" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_help_names_every_kind(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    top = capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    run = " ".join(capsys.readouterr().out.split())
    for kind in kinds():
        assert kind.config_field in top and kind.description in top
        assert f"{kind.config_field} ({kind.description})" in run
    assert "sample lc0 chunks into" not in run


def test_count_on_another_kind_says_it_counts_lc0_chunks_only(inputs, tmp_path, capsys):
    for name in ("labels", "tokens"):
        config = write_config(tmp_path, name, inputs[name], tmp_path / "o")
        assert cli.main(["count", "--config", config]) == 2
        err = capsys.readouterr().err
        assert f"count indexes lc0 chunk files; a {name} job has no count step" in err


@pytest.mark.slow
def test_inspect_and_plot_speak_each_kind(outputs, tmp_path, capsys):
    for name, out in outputs.items():
        capsys.readouterr()
        chart = tmp_path / f"{name}.png"
        assert cli.main(["inspect", str(out), "--plot", str(chart)]) == 0, capsys.readouterr().err
        printed = capsys.readouterr().out
        assert f"2 shard(s), {name} job, " in printed.splitlines()[0]
        assert chart.stat().st_size > 10_000 and chart.read_bytes()[:4] == b"\x89PNG"
        words = {"lc0": "lc0 V6", "labels": "label column 'clicked'", "tokens": "GPT samples of 16 tokens"}
        assert words[name] in printed


@pytest.mark.slow
def test_every_parquet_tool_reads_every_kind_of_output(outputs, tmp_path):
    import datasets
    import duckdb
    import pandas as pd
    import polars

    datasets.disable_progress_bars()
    for name, out in outputs.items():
        manifest = load_manifest(str(out))
        expected = pa.concat_tables(pq.read_table(out / s["path"]) for s in manifest["shards"])
        assert expected.num_rows == sum(s["rows"] for s in manifest["shards"]) > 0
        hidden = [n for n in os.listdir(out) if not n.endswith(".parquet")]
        assert hidden and all(n.startswith(".") for n in hidden), hidden  # the metadata is there, and hidden
        loaded = datasets.load_dataset("parquet", data_dir=str(out), cache_dir=str(tmp_path / "hf"))["train"]
        assert loaded.column_names == expected.column_names, name
        assert loaded.data.table.cast(expected.schema).equals(expected), name
        assert polars.read_parquet(f"{out}/*.parquet").to_arrow().cast(expected.schema).equals(expected), name
        assert pd.read_parquet(out).shape == (expected.num_rows, expected.num_columns), name
        assert duckdb.sql(f"select count(*) from read_parquet('{out}/*.parquet')").fetchall() == [(expected.num_rows,)]
