"""The fixed CPU a `shardmill run` costs before and after its work: the job's start-up, phase by phase.

    python -m benchmarks.bench_startup [--kinds lc0,labels,tokens] [--rounds 5] [--versus DIR] [--phases]
                                       [--phase-rounds 3]

For each job kind, a run on an input so small that its work is negligible (lc0: 1 archive of 1 game with
bench_lc0_floor's sampled settings, its "start-up"; labels: one CSV of 200 rows; tokens: the Megatron fixture
corpus, 50 samples), each round as a child process (`python -m shardmill.pipelines.cli run`, the default
running mode): its total CPU, user + system from wait4 (harness.run_child).

--versus DIR: the same runs with DIR first on PYTHONPATH, paired per round with the current code. DIR holds a
`shardmill` package tree of an older commit, e.g.

    mkdir -p /tmp/old/shardmill && git archive COMMIT pipelines transforms | tar -x -C /tmp/old/shardmill

(the modules it does not hold, core/, native_ext/ and proto/, are the installed ones: a namespace package's
parts are searched in PYTHONPATH's order).

--phases: --phase-rounds more runs per kind (and per side with --versus) with the CPU of each phase, process_time
at the boundaries of the functions the command calls (the same functions in old and new code); the last, "exit",
is wait4's total less the process's own clock where main() returned (the interpreter's teardown). The cyclic
collector's share, over the whole run, is reported beside them. Each phase's figure is its median over the runs
(so the phases need not add up to the median total).

Prints one JSON object: per kind, the median and the least CPU seconds over rounds (per side with --versus, and
their paired ratio new / old), and with --phases the phase table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

from benchmarks.harness import emit, interleaved_rounds, last_json_line, paired_ratio, progress, run_child

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures")
CHILD_TIMEOUT_S = 600

# job kind -> its config, as text with {data}, {fixtures} and {out}
CONFIGS = {
    "lc0": ('input: "{data}/lc0"\nlc0 {{ index {{ cache: "none" }} chunk_pool {{ passes: 4 position_count: 8 '
            'hanse_sampling_threshold: 150 hanse_sampling_gamma: 1.0 }} }}\n'
            'output {{ path: "{out}" target_shard_bytes: 67108864 overwrite: true }}\nmax_error_fraction: 1\n'),
    "labels": ('input: "{data}/labels"\nlabel_sampling {{ label_column: "clicked" ratio: 3 }}\n'
               'output {{ path: "{out}" overwrite: true }}\n'),
    "tokens": ('token_dataset {{ path_prefix: "{fixtures}/megatron/meg-gpt2-openwebtext_text_document" '
               'seq_length: 64 num_samples: 50 random_seed: 1234 }}\noutput {{ path: "{out}" overwrite: true }}\n'),
}


def write_inputs(data: str) -> None:
    from tests.datagen.lc0 import write_dataset

    write_dataset(os.path.join(data, "lc0"), 1, 1, loose_games=0, bad=False, seed=1)  # bench_lc0_floor's start-up
    os.makedirs(os.path.join(data, "labels"))
    with open(os.path.join(data, "labels", "day0.csv"), "w") as f:
        f.write("id,user,clicked\n" + "".join(f"{i},u{i % 17},{int(i % 9 == 0)}\n" for i in range(200)))


def child_env(pythonpath: str | None) -> dict | None:
    if not pythonpath:
        return None
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [pythonpath, os.environ.get("PYTHONPATH")]))}


def run_cpu(config: str, pythonpath: str | None) -> float:
    """Total CPU seconds of one `shardmill run`."""
    command = [sys.executable, "-m", "shardmill.pipelines.cli", "run", "--config", config]  # as bench_lc0_floor's
    run = run_child(command, env=child_env(pythonpath), timeout=CHILD_TIMEOUT_S)
    return run.check("shardmill run").cpu_seconds


def run_phases(config: str, pythonpath: str | None) -> dict:
    """CPU seconds per phase of one `shardmill run` (the --phases-of child below), and exit's from wait4."""
    run = run_child([sys.executable, "-m", "benchmarks.bench_startup", "--phases-of", config],
                    env=child_env(pythonpath), timeout=CHILD_TIMEOUT_S).check("the phases' run")
    phases = last_json_line(run.stdout)
    clock_at_return = phases.pop("_clock_at_return")
    phases["exit (interpreter teardown)"] = max(0.0, run.cpu_seconds - clock_at_return)
    phases["total (wait4)"] = run.cpu_seconds
    return {name: round(value, 3) for name, value in phases.items()}


# ---- the phases' child -------------------------------------------------------------------------------------

def phases_main(config: str) -> None:
    """Runs `shardmill run --config config` as the command does (cli.entry's work) with process_time taken at the
    boundaries of its steps; prints the phases' CPU seconds as one JSON line."""
    import gc
    import importlib.abc
    import time

    marks: list[tuple[str, float]] = []  # (the phase that ends here, process_time)
    gc_seconds = [0.0, 0.0]

    def on_gc(phase, info):
        if phase == "start":
            gc_seconds[1] = time.process_time()
        else:
            gc_seconds[0] += time.process_time() - gc_seconds[1]

    gc.callbacks.append(on_gc)

    def marked(original, before: str, after: str | None = None):
        """original, ending the phase `before` when called and, if given, `after` when it returns."""
        def marked(*args, **kwargs):
            marks.append((before, time.process_time()))
            try:
                return original(*args, **kwargs)
            finally:
                if after:
                    marks.append((after, time.process_time()))

        return marked

    def mark_around(owner, name: str, before: str, after: str | None = None) -> None:
        setattr(owner, name, marked(getattr(owner, name), before, after))

    def on_import(module) -> None:
        if module.__name__ == "shardmill.pipelines.run_job":
            mark_around(module, "run_job", "config, imports (Beam, the job's code), options, inputs")
            mark_around(module, "build_graph", "plan, claim, staging", "graph construction")
        elif module.__name__ == "apache_beam.runners.portability.fn_api_runner.fn_runner":
            runner = module.FnApiRunner
            mark_around(runner, "run_pipeline", "Pipeline.run's own checks")
            mark_around(runner, "run_via_runner_api", "serialisation to the runner API (to_runner_api)")
            mark_around(runner, "create_stages", "runner: graph checks", "runner: stages planned")
            mark_around(runner, "run_stages", "runner: stages planned", "runner: stages run (the job's work)")

    class AfterImport(importlib.abc.MetaPathFinder):
        """Calls on_import with the modules it watches once they have loaded."""

        watched = {"shardmill.pipelines.run_job", "apache_beam.runners.portability.fn_api_runner.fn_runner"}

        def find_spec(self, name, path=None, target=None):
            if name not in self.watched:
                return None
            for finder in sys.meta_path:
                spec = None if finder is self else finder.find_spec(name, path, target)
                if spec is not None:
                    exec_module = spec.loader.exec_module

                    def exec_then_hook(module, exec_module=exec_module):
                        exec_module(module)
                        on_import(module)

                    spec.loader.exec_module = exec_then_hook
                    return spec
            return None

    sys.meta_path.insert(0, AfterImport())
    import dataclasses

    from shardmill.pipelines import cli

    mark_around(cli, "main", "Python and the command's modules")
    run = cli.COMMANDS["run"]
    cli.COMMANDS["run"] = dataclasses.replace(run, execute=marked(run.execute, "parser (the job kinds' modules)"))
    sys.argv = ["shardmill", "run", "--config", config]
    try:
        cli.entry()
    except SystemExit as stop:
        code = stop.code
    marks.append(("commit, summary", time.process_time()))
    if code:
        raise SystemExit(f"shardmill run exited {code}")
    phases: dict[str, float] = {}
    last = 0.0
    for phase, clock in marks:
        phases[phase] = phases.get(phase, 0.0) + clock - last
        last = clock
    print(json.dumps({**phases, "of which the cyclic collector": gc_seconds[0], "_clock_at_return": last}))


# ---- the benchmark -------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--rounds", type=int, default=5, help="0: --phases alone")
    parser.add_argument("--versus", help="a directory holding an older shardmill package tree, run paired")
    parser.add_argument("--phases", action="store_true", help="also runs per kind (and side) phase by phase")
    parser.add_argument("--phase-rounds", type=int, default=3, help="--phases' rounds; each phase's median")
    parser.add_argument("--fixtures", default=FIXTURES, help="holds megatron/ (the tokens kind's corpus)")
    parser.add_argument("--phases-of", help=argparse.SUPPRESS)  # the phases' child: a config to run
    args = parser.parse_args()
    if args.phases_of:
        phases_main(args.phases_of)
        return
    sides = {"new": None, **({"old": os.path.abspath(args.versus)} if args.versus else {})}
    work = tempfile.mkdtemp(prefix="bench-startup-")
    report: dict = {"rounds": args.rounds, "versus": args.versus, "kinds": {}}
    try:
        write_inputs(os.path.join(work, "data"))
        for kind in args.kinds.split(","):
            config = os.path.join(work, f"{kind}.textproto")
            with open(config, "w") as f:
                f.write(CONFIGS[kind].format(data=os.path.join(work, "data"), out=os.path.join(work, "out", kind),
                                             fixtures=os.path.abspath(args.fixtures)))
            result: dict = {}
            if args.rounds:  # 0: the phases alone
                runs = interleaved_rounds({side: (lambda path=path: run_cpu(config, path))
                                           for side, path in sides.items()}, args.rounds, warmup_rounds=1)
                cpu = {side: [run.value for run in runs[side]] for side in sides}
                result.update({f"cpu_s_{side}": round(statistics.median(values), 3) for side, values in cpu.items()})
                # The least of the rounds too: on a machine shared with other work, the round least slowed by it.
                result.update({f"cpu_s_{side}_min": round(min(values), 3) for side, values in cpu.items()})
                result.update({f"cpu_s_{side}_rounds": [round(x, 2) for x in values] for side, values in cpu.items()})
                if args.versus:
                    result["new_over_old"] = paired_ratio(cpu["new"], cpu["old"])
            if args.phases:
                runs = interleaved_rounds({side: (lambda path=path: run_phases(config, path))
                                           for side, path in sides.items()}, args.phase_rounds)
                result["phases"] = {side: {phase: round(statistics.median(run.value[phase] for run in runs[side]), 3)
                                           for phase in runs[side][0].value} for side in sides}
            report["kinds"][kind] = result
            progress({"kind": kind, **result})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(report)


if __name__ == "__main__":
    main()
