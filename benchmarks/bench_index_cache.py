"""The index stage over a growing corpus: without the index cache, filling it, and a rerun after 1% new sources.

`shardmill count`'s pipeline (discovery + index, in-process runner) on 10^4 sources, each way in its own
process, rounds interleaved, each round on its own copy of the corpus and its own cache. Sources are
hourly-style `.tar` archives of `--members` games (lc0's corpus), or with `--layout loose` single-game `.gz`
files (where indexing a source costs about what reading its cache entry does). Ways:

- "no cache": `--index-cache none`, every source read;
- "first run": an empty cache, every source read and its entry written;
- "rerun, +1%": 1% new sources added, then the same count: the rest read from the cache;
- "rerun, unchanged": once more, nothing new.

Reports the index stage's seconds (the indexing DoFn's time: reading sources or cache entries, writing
entries), the whole pipeline's, the ratio of each way's index stage to the first run's, and the sources read
from the cache.

    python -m benchmarks.bench_index_cache [--sources 10000] [--members 50] [--layout archives|loose]
                                          [--rounds 2] [--data-root DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from benchmarks.harness import emit, last_json_line, paired_ratio, python_child, run_child
from tests.datagen.lc0 import small_games, write_archives, write_loose_games

WAYS = ["no cache", "first run", "rerun, +1%", "rerun, unchanged"]

# One count in this process's child: the index stage timed around the indexing DoFn (in-process runner).
COUNT_SCRIPT = """
import json, sys, time
from apache_beam.options.pipeline_options import PipelineOptions
from shardmill.pipelines.commands.count import run_count
from shardmill.transforms.lc0 import graph
from shardmill.transforms.lc0.index_cache import IndexCache

spent = [0.0]
process = graph._IndexFilesFn.process

def timed(self, files):
    start = time.perf_counter()
    out = list(process(self, files))
    spent[0] += time.perf_counter() - start
    return out

graph._IndexFilesFn.process = timed
corpus, location = sys.argv[1], sys.argv[2]
cache = None if location == "none" else IndexCache(location, "scan", 0, 64 << 20)
start = time.perf_counter()
result = run_count([corpus], "scan", 0, PipelineOptions([]), cache=cache)
print(json.dumps({"index_stage": spent[0], "pipeline": time.perf_counter() - start,
                  "sources": result.summary.sources, "from_cache": result.summary.sources_cached}))
"""


def count(corpus: str, cache: str) -> dict:
    return last_json_line(run_child(python_child(COUNT_SCRIPT, corpus, cache)).check("count").stdout)


def add_sources(corpus: str, count_new: int, layout: str, members: int) -> None:
    if layout == "archives":
        new = os.path.join(corpus, "new")
        write_archives(new, count_new, members)
        for name in os.listdir(new):
            os.rename(os.path.join(new, name), os.path.join(corpus, "new-" + name))
        os.rmdir(new)
        return
    games = small_games(2)
    for i in range(count_new):
        with open(os.path.join(corpus, f"training.new{i:06d}.gz"), "wb") as f:
            f.write(games[i % len(games)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sources", type=int, default=10_000)
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--layout", choices=["archives", "loose"], default="archives")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-root", default=None)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench_index_cache_", dir=args.data_root)
    template = os.path.join(work, "template")
    if args.layout == "archives":
        write_archives(template, args.sources, args.members)
    else:
        write_loose_games(template, args.sources)
    results = {way: [] for way in WAYS}
    try:
        for r in range(args.rounds):
            corpus, cache = os.path.join(work, f"corpus-{r}"), os.path.join(work, f"cache-{r}")
            shutil.copytree(template, corpus)
            results["no cache"].append(count(corpus, "none"))
            results["first run"].append(count(corpus, cache))
            add_sources(corpus, max(1, args.sources // 100), args.layout, args.members)
            results["rerun, +1%"].append(count(corpus, cache))
            results["rerun, unchanged"].append(count(corpus, cache))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stage = {way: [r["index_stage"] for r in runs] for way, runs in results.items()}
    # each way's index stage over the first run's of the same round (its own corpus copy and cache)
    ratios = {way: paired_ratio(stage[way], stage["first run"]) for way in WAYS}
    emit({
        "sources": args.sources, "layout": args.layout, "members": args.members, "rounds": args.rounds,
        "index_stage_seconds": {way: [round(r["index_stage"], 2) for r in runs] for way, runs in results.items()},
        "pipeline_seconds": {way: [round(r["pipeline"], 2) for r in runs] for way, runs in results.items()},
        "sources_from_cache": {way: [r["from_cache"] for r in runs] for way, runs in results.items()},
        "median_ratio_to_first_run": {way: ratios[way]["median"] for way in WAYS},
        "ratio_to_first_run_spread": {way: ratios[way]["spread"] for way in WAYS},
    })


if __name__ == "__main__":
    main()
