"""Benchmark of ``history`` on a log directory of many runs (issue 31: 10,000 runs,
``history --format json`` in at most 2 s, in bounded memory).

Builds, in a work folder, a log directory of ``--runs`` run folders (``job<S>_<NNNNN>``,
``--series`` series), each holding one tiny trace file, and a cache holding a synthetic
headline record for each of them (``DiskCache.store_headline``: what the cache holds once
the summaries were computed), with planted changes per series: the step time's level
rises by 20 % at the middle run and one run a quarter of the way in is 30 % slower
alone. Step times per run: the level × (1 + N(0, 0.005)), standard deviation 2 % of the
level over 10 steps (seeded).

Then measures, ``--repeat`` times each (median reported):

- ``cli``: ``python -m tb_kineto_insights.cli history LOGDIR --format json --cache CACHE``
  as a fresh process: once first (it reads the per-file headlines and writes the log
  directory's headline index), then ``--repeat`` times from the index: wall time, CPU
  time (user + sys: what a busy machine inflates least) and its peak RSS (``ru_maxrss``
  of the child);
- ``build``: in this process, ``compare.history.build_history`` on the records already in
  memory, and the JSON encoding of the document.

and checks the document: per series exactly one ``regressed`` step-time change at the
middle run and one ``outlier`` at the planted run.

    python benchmarks/bench_history.py --runs 10000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS  # noqa: E402
from tb_kineto_insights.compare.history import RunHeadlines, build_history  # noqa: E402
from tb_kineto_insights.logdir.discovery import discover  # noqa: E402
from tb_kineto_insights.schema.history import (  # noqa: E402
    HeadlineDiagnosis,
    HistoryDocument,
    SpanHeadline,
)
from tb_kineto_insights.store.cache import DiskCache, settings_fingerprint  # noqa: E402
from tb_kineto_insights.store.cached_summaries import identity_of  # noqa: E402
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES  # noqa: E402

T0_NS = 1_795_000_000 * 10**9
HOUR_NS = 3600 * 10**9


def headline(path: str, start_ns: int, mean_us: float, outlier: bool) -> SpanHeadline:
    """A synthetic headline record of one run (one rank)."""
    ids = ["small_kernel_flood"] + (["gpu_idle_dataloader"] if outlier else [])
    return SpanHeadline(
        path=path,
        size_bytes=20,
        mtime=0.0,
        start_ns=start_ns,
        rank=0,
        world_size=1,
        gpu_model="NVIDIA H200",
        steps=10,
        median_step_us=mean_us,
        mean_step_us=mean_us,
        std_step_us=0.02 * mean_us,
        gpu_utilization_fraction=0.8,
        breakdown_us={"kernel": 0.8 * mean_us, "other": 0.2 * mean_us},
        memory_peak_allocated_bytes=1 << 30,
        memory_peak_reserved_bytes=1 << 31,
        memory_growth_bytes_per_step=0.0,
        diagnoses=[
            HeadlineDiagnosis(id=i, severity="medium", impact_fraction=0.2, title=i) for i in ids
        ],
        facts={"gpu_model": "NVIDIA H200", "torch_version": "2.11.0"},
        fact_sources={"gpu_model": "trace", "torch_version": "metadata"},
        label=None,
        preset="standard",
        git_commit=None,
        torch_version="2.11.0",
        cuda_version="13.0",
    )


def build(work: Path, runs: int, series: int) -> tuple[Path, Path, list[RunHeadlines]]:
    """The log directory, the cache, and the records (in memory) of the planted history."""
    logdir, cache_dir = work / "logs", work / "cache"
    rng = np.random.default_rng(31)
    per = runs // series
    names = []
    for s in range(series):
        for i in range(per):
            name = f"job{s}_{i:05d}"
            folder = logdir / name
            folder.mkdir(parents=True)
            (folder / "w.1.pt.trace.json").write_text('{"traceEvents": []}')
            names.append((name, s, i))
    cache = DiskCache(cache_dir, settings_fingerprint(DEFAULT_MAX_JSON_BYTES, DEFAULT_THRESHOLDS))
    listed = {r.name: r.workers[0].spans[0] for r in discover(str(logdir))}
    records = []
    for name, s, i in names:
        level = 10_000.0 * (1 + s / 10) * (1.2 if i >= per // 2 else 1.0)
        outlier = i == per // 4
        mean = level * (1.3 if outlier else 1.0) * (1 + rng.normal(0, 0.005))
        span = listed[name]
        h = headline(span.path, T0_NS + i * HOUR_NS, mean, outlier)
        cache.store_headline(identity_of(span), f"synthetic-{name}", h)
        records.append(RunHeadlines(name, {"w": h}))
    return logdir, cache_dir, records


def check(doc: HistoryDocument, series: int, per: int) -> None:
    """Raise AssertionError unless each series has exactly its planted changes."""
    assert len(doc.series) == series, len(doc.series)
    for s in doc.series:
        found = [(c.run.rsplit("_", 1)[1], c.verdict) for c in s.changes if c.metric == "step_time"]
        want = [(f"{per // 4:05d}", "outlier"), (f"{per // 2:05d}", "regressed")]
        assert found == want, (s.name, found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--series", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-history-"))
    try:
        started = time.perf_counter()
        logdir, cache_dir, records = build(work, args.runs, args.series)
        print(f"built {args.runs} runs in {time.perf_counter() - started:.1f} s under {work}")
        per = args.runs // args.series
        build_s, build_cpu_s, encode_s = [], [], []
        for _ in range(args.repeat):
            t, c = time.perf_counter(), time.process_time()
            doc = build_history(records, logdir=str(logdir))
            build_s.append(time.perf_counter() - t)
            build_cpu_s.append(time.process_time() - c)
            t = time.perf_counter()
            raw = msgspec.json.encode(doc)
            encode_s.append(time.perf_counter() - t)
        check(doc, args.series, per)
        cli_s, cpu_s, rss = [], [], []
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        command = [sys.executable, "-m", "tb_kineto_insights.cli", "history", str(logdir)]
        command += ["--format", "json", "--cache", str(cache_dir)]
        # the first history reads the per-file headlines and writes the log directory's
        # headline index (store/headline_index.py); the ones after read the index
        t = time.perf_counter()
        subprocess.run(command, stdout=subprocess.PIPE, env=env, check=True)
        first_s = time.perf_counter() - t
        for _ in range(args.repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            done = subprocess.run(command, stdout=subprocess.PIPE, env=env, check=True)
            out = done.stdout
            cli_s.append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu_s.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            # the largest peak of any child so far: every child runs this same command
            rss.append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
        check(msgspec.json.decode(out, type=HistoryDocument), args.series, per)
        print(f"document: {len(raw) / 1e6:.1f} MB of JSON, {len(doc.series)} series")
        print(
            f"build_history: {statistics.median(build_s):.3f} s wall, "
            f"{statistics.median(build_cpu_s):.3f} s CPU (GC on)"
        )
        print(f"encode JSON:   {statistics.median(encode_s):.3f} s")
        print(f"history --format json, first (writes the headline index): {first_s:.3f} s")
        print(
            f"history --format json (fresh process, from the index): "
            f"{statistics.median(cli_s):.3f} s "
            f"(runs {[round(x, 3) for x in cli_s]}), CPU (user + sys) "
            f"{statistics.median(cpu_s):.3f} s, peak RSS {max(rss):.0f} MiB"
        )
        print(f"load average at the end: {os.getloadavg()}")
        print("planted changes found: every series, at the right runs")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
