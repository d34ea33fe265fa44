"""Reader speed and memory on real traces, against stdlib ``json.load`` into dicts.

Each measurement runs in a fresh subprocess so peak RSS (``ru_maxrss``) belongs to that
reader alone. Prints, per file: uncompressed JSON size, best-of-N wall time from the
``.gz`` file to a finished result, MB/s of uncompressed JSON, peak RSS, and peak RSS
as a multiple of the JSON size.

    python benchmarks/bench_reader.py [--repeat 3] [--all] [--readers ours,analysis,json]
        [--profile] [FILE ...]

The 1-minute load average is printed with each row (the machine may be shared); ``cpu s``
is the process's CPU time (all threads) of the best run, less sensitive to other load
than the wall time. ``--profile`` prints a cProfile summary of one ``analysis`` run.

Rows: ``ours`` = read only; ``analysis`` = read + every panel of the summary (its
``x read`` column: that time over the read-only time); ``json`` = stdlib ``json.loads``.

Targets: >= 150 MB/s end to end from the .gz and peak RSS <= 2x the uncompressed size
(issue "Foundation"); read + analysis within 2x of the read alone (issue "Analysis I");
on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces" / "public"
DEFAULT_FILES = [SHARED / "hta_df_index_resolver" / "df_index_resolver.json.gz"]

CHILD = r"""
import gc, json, resource, sys, time
which, path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
if which == "ours":
    from tb_kineto_insights.trace.reader import read_trace
    def run():
        t = read_trace(path)
        return t.health.json_bytes
elif which == "analysis":
    from tb_kineto_insights.trace.reader import read_trace
    from tb_kineto_insights.summary import summarize_trace
    def run():
        t = read_trace(path)
        summarize_trace(t)
        return t.health.json_bytes
else:
    import gzip
    def run():
        with gzip.open(path, "rb") as f:
            data = f.read()
        doc = json.loads(data)
        n = len(data)
        del data
        return n
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
best = float("inf")
size = 0
best_cpu = float("inf")
for _ in range(repeat):
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    size = run()
    best = min(best, time.perf_counter() - t0)
    best_cpu = min(best_cpu, time.process_time() - c0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if len(sys.argv) > 4:
    import cProfile, io, pstats
    prof = cProfile.Profile()
    prof.runcall(run)
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
    print(text.getvalue(), file=sys.stderr)
print(json.dumps({"seconds": best, "cpu_seconds": best_cpu, "json_bytes": size,
                  "peak_rss": peak, "base_rss": base_rss}))
"""


def measure(which: str, path: Path, repeat: int, profile: bool = False) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, which, str(path), str(repeat), *(["p"] if profile else [])],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if profile:
        print(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--all", action="store_true", help="every trace in ../shared")
    parser.add_argument("--readers", default="ours,analysis,json")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    files = args.files or (sorted(SHARED.rglob("*.json.gz")) if args.all else DEFAULT_FILES)
    missing = [f for f in files if not f.is_file()]
    if missing:
        print(f"missing: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    header = f"{'file':44s} {'reader':9s} {'JSON MB':>8s} {'s':>7s} {'cpu s':>7s} {'MB/s':>7s} "
    print(
        header + f"{'peak RSS MB':>11s} {'x JSON':>7s} {'base MB':>8s} {'x read':>7s} {'load':>5s}"
    )
    for path in files:
        read_s = None
        for which in args.readers.split(","):
            profile = args.profile and which == "analysis"
            r = measure(which, path, args.repeat if which != "json" else 1, profile)
            mb = r["json_bytes"] / 1e6
            read_s = r["seconds"] if which == "ours" else read_s
            ratio = f"{r['seconds'] / read_s:7.2f}" if read_s and which == "analysis" else ""
            print(
                f"{path.name[:44]:44s} {which:9s} {mb:8.1f} {r['seconds']:7.3f} "
                f"{r['cpu_seconds']:7.3f} {mb / r['seconds']:7.1f} {r['peak_rss'] / 1e6:11.1f} "
                f"{r['peak_rss'] / r['json_bytes']:7.2f} {r['base_rss'] / 1e6:8.1f} {ratio:>7s} "
                f"{os.getloadavg()[0]:5.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
