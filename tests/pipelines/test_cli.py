"""The command line as users type it: --version, logs, -v/-q anywhere, typos refused, missing extras."""

import hashlib
import os
import re
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from shardmill.pipelines import cli
from shardmill.core.output_contract import SHARD_VERSION_KEY, shardmill_version
from tests.support.cli import run_shardmill
from tests.support.imported_modules import modules_loaded_by_command

SAMPLED = "lc0 { chunk_pool { passes: 2 position_count: 4 hanse_sampling_threshold: 100 } }\noutput { num_shards: 2 }"
TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (INFO|WARNING|ERROR) ", re.MULTILINE)


@pytest.fixture()
def job(lc0_dataset, tmp_path):
    directory, _ = lc0_dataset
    config = tmp_path / "job.textproto"
    config.write_text(f'input: "{directory}"\nseed: 3\nmax_error_fraction: 0.5\n{SAMPLED}\n')
    return str(config), str(tmp_path / "out")


def test_version_flag_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"shardmill {shardmill_version()}"
    assert shardmill_version() not in ("", "unknown")


@pytest.mark.parametrize("argv, flag, suggestion", [
    (["--outptu", "/tmp/elsewhere"], "--outptu", "--output"),
    (["--seeed", "5"], "--seeed", "--seed"),
    (["--direct_num_workes=2"], "--direct_num_workes", "--direct_num_workers"),
])
def test_an_unknown_option_is_refused_with_the_nearest_known_one(job, capsys, argv, flag, suggestion):
    config, out = job
    assert cli.main(["run", "--config", config, "--output", out, *argv]) == 2
    err = capsys.readouterr().err
    assert f"unrecognized option '{flag}'" in err and f"did you mean {suggestion}?" in err
    assert not os.path.exists(out)  # refused before anything started


def test_submit_takes_every_option_of_run():
    _, parsers = cli.build_parser()
    run_options = set(parsers["run"]._option_string_actions)
    missing = sorted(run_options - set(parsers["submit"]._option_string_actions))
    assert not missing, f"shardmill submit lacks run's {missing}"


def test_inspect_takes_no_beam_options(tmp_path, capsys):
    assert cli.main(["inspect", str(tmp_path), "--runner=DirectRunner"]) == 2
    assert "not an option of shardmill inspect" in capsys.readouterr().err


@pytest.mark.slow
def test_real_beam_options_pass_through(job, capsys):
    config, out = job
    assert cli.main(["run", "--config", config, "--output", out, "--dry-run",
                     "--direct_running_mode=multi_processing", "--direct_num_workers=2"]) == 0
    assert "unrecognized" not in capsys.readouterr().err


@pytest.mark.slow
def test_logs_are_timestamped_and_verbosity_works_before_or_after_the_subcommand(job):
    config, out = job
    default = run_shardmill("run", "--config", config, "--output", out)
    assert default.returncode == 0, default.stderr
    assert TIMESTAMPED.search(default.stderr) and "shardmill.transforms.lc0.graph: plan:" in default.stderr
    assert "apache_beam" not in default.stderr  # Beam's own logs only with -v

    verbose = run_shardmill("run", "--config", config, "--output", out, "--overwrite", "-v")
    assert verbose.returncode == 0, verbose.stderr
    assert re.search(r"^\S+ \S+ INFO apache_beam", verbose.stderr, re.MULTILINE)

    quiet = run_shardmill("-q", "run", "--config", config, "--output", out, "--overwrite")
    assert quiet.returncode == 0, quiet.stderr
    assert " INFO " not in quiet.stderr
    assert "committed generation 3" in quiet.stdout  # the summary still prints

    both = run_shardmill("-v", "run", "-q", "--config", config, "--output", out)
    assert both.returncode == 2 and "exclude each other" in both.stderr


def test_without_beam_the_job_says_which_extra_to_install(job):
    config, out = job
    code = ("import sys; sys.modules['apache_beam'] = None\n"  # as if apache-beam were not installed
            "from shardmill.pipelines.cli import main; sys.exit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", code, "run", "--config", config, "--output", out],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "pip install 'shardmill[job]'" in result.stderr


@pytest.mark.slow
def test_shards_carry_the_writing_version_in_their_parquet_metadata(job):
    config, out = job
    assert cli.main(["-q", "run", "--config", config, "--output", out]) == 0
    shards = [name for name in os.listdir(out) if name.endswith(".parquet")]
    assert len(shards) == 2
    for name in shards:
        metadata = pq.ParquetFile(os.path.join(out, name)).metadata.metadata
        assert metadata[SHARD_VERSION_KEY.encode()].decode() == shardmill_version()


@pytest.mark.slow
def test_a_local_run_reports_progress_per_stage_and_its_counters(job):
    config, out = job
    result = run_shardmill("run", "--config", config, "--output", out,
                           "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    progress = {stage: [line for line in lines if f"progress: {stage}:" in line] for stage in ("index", "load", "write")}
    assert all(progress.values()), result.stderr
    assert all(TIMESTAMPED.match(line) for stage in progress.values() for line in stage)
    assert re.search(r"load: \d+ tasks, ([\d,]+) of \1 records \(100%\)", progress["load"][-1])
    assert progress["write"][-1].split("write: ")[1].startswith("2 of 2 shards")
    # The workers' own start-up lines (import warnings, "Logging handler created", "Discarding unparseable
    # args") stay out of the terminal.
    assert not [line for line in lines if re.match(r"(DEBUG|INFO|WARNING):", line)], result.stderr
    counters = next(line for line in result.stdout.splitlines() if line.startswith("counters"))
    assert "shardmill.index/chunks" in counters and "shardmill.load/records" in counters


@pytest.mark.slow
def test_a_label_run_with_worker_processes_reports_its_sample_stage_and_no_worker_lines(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for day in range(3):
        (logs / f"day-{day}.csv").write_text("id,clicked\n" + "".join(f"{i},{i % 4 == 0:d}\n" for i in range(2000)))
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\nlabel_sampling {{ label_column: "clicked" }}\n')
    result = run_shardmill("run", "--config", str(config), "--output", str(tmp_path / "out"),
                           "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    sample = [line for line in lines if "progress: sample:" in line]
    assert sample and re.search(r"3 partitions, 6,000 records, 0 of 0 MiB \(100%\)", sample[-1]), result.stderr
    assert not [line for line in lines if re.match(r"(DEBUG|INFO|WARNING):", line)], result.stderr


@pytest.mark.parametrize("preset, expected", [(None, cli.MIMALLOC_PURGE_DELAY_MS), ("25", "25")])
def test_the_command_keeps_freed_arrow_pages_before_pyarrow_loads(preset, expected):
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    if preset is not None:
        env["MIMALLOC_PURGE_DELAY"] = preset
    probe = ("import sys, os; import shardmill.pipelines.cli; "
             "print('pyarrow' in sys.modules, os.environ['MIMALLOC_PURGE_DELAY'])")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", expected]


@pytest.mark.parametrize("preset, expected", [(None, "1"), ("4", "4")])
def test_the_command_runs_blas_on_one_thread_unless_told_and_a_program_importing_it_keeps_its_own(preset, expected):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    # The command: its environment as numpy loads (in a run, in the command's process and the workers it starts).
    probe = ("import os, sys; from shardmill.pipelines import cli; cli.main = lambda: "
             "print('numpy' in sys.modules, os.environ.get('OPENBLAS_NUM_THREADS')) or 0; cli.entry()")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout
    assert out.split() == ["False", expected]
    # A program that imports the module (to call main() itself) and the processes it starts: untouched.
    probe = ("import os, subprocess, sys; import shardmill.pipelines.cli; print(os.environ.get('OPENBLAS_NUM_THREADS'));"
             "subprocess.run([sys.executable, '-c', \"import os; print(os.environ.get('OPENBLAS_NUM_THREADS'))\"])")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(preset)] * 2


@pytest.mark.slow
def test_a_run_leaves_out_the_packages_no_command_uses(job):
    config, out = job
    modules, run = modules_loaded_by_command("run", "--config", config, "--output", out)
    assert "apache_beam" in modules and "pyarrow" in modules
    assert not [name for name in modules if name.split(".")[0] in ("pandas", "pymongo", "bson")]
    assert "bson" not in run.stderr  # Beam's notice that it found no MongoDB client


@pytest.mark.slow
def test_shards_from_pandas_written_parquet_are_the_same_without_pandas(tmp_path):
    pd = pytest.importorskip("pandas")
    logs = tmp_path / "logs"
    logs.mkdir()
    frame = pd.DataFrame({"id": range(300), "clicked": [int(i % 5 == 0) for i in range(300)],
                          "kind": pd.Categorical(["a", "b", "c"] * 100)}, index=pd.RangeIndex(1000, 1300, name="ix"))
    frame.to_parquet(logs / "day0.parquet")  # with pandas' schema metadata, its index and a dictionary column
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\nlabel_sampling {{ label_column: "clicked" ratio: 2 }}\n')
    digests = []
    for out, run in ((tmp_path / "command", lambda argv: run_shardmill(*argv).returncode),  # pandas left out
                     (tmp_path / "in-process", cli.main)):  # pandas loadable
        assert run(["run", "-q", "--config", str(config), "--output", str(out)]) == 0
        digests.append({name: hashlib.sha256((out / name).read_bytes()).hexdigest()
                        for name in os.listdir(out) if name.endswith(".parquet")})
    assert digests[0] and digests[0] == digests[1]


def test_beam_loads_without_the_cyclic_collector_and_out_of_its_sight():
    probe = ("import gc\n"
             "from shardmill.pipelines.beam_options import import_beam\n"
             "passes = []\n"
             "gc.callbacks.append(lambda phase, info: passes.append(info) if phase == 'start' else None)\n"
             "import_beam()\n"
             "print(len(passes), gc.isenabled(), gc.get_freeze_count())\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    passes, enabled, frozen = out.split()
    assert (passes, enabled) == ("0", "True")
    assert int(frozen) > 50_000  # Beam's modules' objects, which the collector's passes no longer walk


def test_inspect_of_a_missing_path_says_it_does_not_exist(tmp_path, capsys):
    missing = str(tmp_path / "no-such-output")
    assert cli.main(["inspect", missing]) == 2
    assert capsys.readouterr().err.strip() == (
        f"shardmill inspect: error: {missing!r} does not exist (inspect reads the output directory a run wrote)")


@pytest.mark.slow
def test_inspect_points_at_the_report_of_a_rejected_run(job, capsys):
    config, out = job
    strict = config + ".strict"
    with open(config) as f, open(strict, "w") as g:  # the dataset's bad files are over a zero budget
        g.write(f.read().replace("max_error_fraction: 0.5", "max_error_fraction: 0"))
    assert cli.main(["run", "--config", strict, "--output", out]) == 1
    capsys.readouterr()
    assert cli.main(["inspect", out]) == 2
    assert capsys.readouterr().err.strip() == (
        f"shardmill inspect: error: {out!r} holds no committed output: its last run exceeded max_error_fraction "
        f"and committed nothing; its report is in {out}/.rejected/manifest.json and {out}/.rejected/errors.jsonl")

    assert cli.main(["run", "--config", config, "--output", out]) == 0  # committed: the report goes
    assert cli.main(["run", "--config", strict, "--output", out, "--overwrite"]) == 1
    capsys.readouterr()
    assert cli.main(["inspect", out]) == 0  # the committed output, and a word on the rejected run after it
    assert (f"the last run was rejected (over max_error_fraction) and committed nothing; its report is in "
            f"{out}/.rejected/manifest.json and {out}/.rejected/errors.jsonl") in capsys.readouterr().out


@pytest.mark.slow
def test_inspect_into_a_pipe_closed_early_ends_quietly_with_exit_0(job):
    """`shardmill inspect OUT | head -1`: the reader going away is not a failed command."""
    import subprocess

    from tests.support.cli import shardmill_command

    config, out = job
    assert cli.main(["-q", "run", "--config", config, "--output", out]) == 0
    for extra in ([], ["--json"]):
        inspect = subprocess.Popen(shardmill_command("inspect", out, *extra), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        inspect.stdout.readline()
        inspect.stdout.close()  # as `head -1` exits after its line
        code, err = inspect.wait(timeout=120), inspect.stderr.read()
        assert code == 0 and b"failed" not in err, err


@pytest.mark.slow
def test_a_plot_into_a_missing_directory_is_refused_before_the_summary(job, tmp_path, capsys):
    config, out = job
    assert cli.main(["-q", "run", "--config", config, "--output", out]) == 0
    capsys.readouterr()
    missing = tmp_path / "no" / "such"
    assert cli.main(["inspect", out, "--plot", str(missing / "charts.png")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"shardmill inspect: error: --plot {missing / 'charts.png'}: no such directory {missing}\n"


def test_verbose_shows_the_traceback_of_a_refused_invocation_too(tmp_path, capsys):
    config = tmp_path / "bad.textproto"
    config.write_text("seed: -1\n")
    assert cli.main(["-v", "run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "shardmill run: error:" in err
