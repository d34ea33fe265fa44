"""The least time any split of today's read and analysis could take on N CPUs (issue 46's
"1 GB in <= 5x a bare gzip read"), from the CPU seconds of each stage in one process.

    python benchmarks/bench_read_bound.py FILE [--cpus 2] [--repeat 1]

Per stage, the least CPU seconds (``time.process_time``) of ``--repeat`` runs:

* *inflate*: the file's gzip stream inflated in 1 MiB reads (``zlib_ng``, as the
  reader's :mod:`~tb_kineto_insights.trace.source` does);
* *decode*: msgspec's typed decode of the pieces, cut as the serial reader cuts them,
  timestamps parsed (``decode_typed``);
* *columns*: those events into numpy columns (``Builder.add_events``);
* *free*: dropping each piece's decoded events;
* *rest of the read*: ``read_trace(workers=0)``'s CPU less the four above (finishing the
  tables, health; whatever no worker could take);
* *analysis*: ``summarize_trace`` of the read trace (every panel, diagnoses, schema);
* *start*: a child's wall to start and import what ``report`` imports (least of 3);
* *parallel read*: ``read_trace(workers=N)`` in a fresh child with ``N`` workers forked
  ahead (as ``report`` forks them), its wall and its CPU, the child's and the workers'
  (the run of least wall).

And the yardstick: a bare gzip read's wall (Python's ``gzip``, 1 MiB reads, least of 3),
as ``bench_single_trace.py --modes gzip`` measures it.

The bounds assume a perfect split on ``--cpus`` CPUs: no transfer, no merge, no waiting:

* *read split*: start + (inflate + decode + columns + free) / N + rest + analysis;
* *read and analysis split*: start + every stage / N.

The parallel read as built can only be slower than the first; the analysis runs in one
process today, so only the first bounds today's design, and *today* (start + the
parallel read's wall + analysis) is what it gives.
Print the load (``uptime``) beside figures copied to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decode_pieces import pieces  # noqa: E402

from tb_kineto_insights.summary import summarize_trace  # noqa: E402
from tb_kineto_insights.trace.columns import Builder  # noqa: E402
from tb_kineto_insights.trace.decode import decode_typed  # noqa: E402
from tb_kineto_insights.trace.reader import read_trace  # noqa: E402

MIB = 1 << 20


def least(repeat: int, call: Callable[[], Any], clock: Callable[[], float]) -> float:
    """The least ``clock`` seconds of ``repeat`` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        call()
        best = min(best, clock() - t0)
    return best


def inflate(path: str) -> None:
    """Inflate ``path`` in 1 MiB reads, the bytes dropped (``zlib_ng``, else ``zlib``)."""
    try:
        from zlib_ng import zlib_ng as zlib
    except ImportError:  # pragma: no cover - zlib-ng is a dependency
        import zlib  # type: ignore[no-redef]
    inflater = zlib.decompressobj(wbits=31)
    with open(path, "rb") as fh:
        while block := fh.read(MIB):
            inflater.decompress(block)


def gzip_read(path: str) -> None:
    """A bare gzip read: Python's ``gzip``, 1 MiB reads, the bytes dropped."""
    with gzip.open(path, "rb") as fh:
        while fh.read(MIB):
            pass


def pieces_stages(path: str) -> tuple[float, float, float]:
    """CPU seconds of the typed decode, the columns and the freeing, over every piece."""
    decode_s = columns_s = free_s = 0.0
    builder = Builder(True)
    for piece in pieces(path):
        t0 = time.process_time()
        events = decode_typed(piece, builder)
        t1 = time.process_time()
        builder.add_events(events)
        t2 = time.process_time()
        del events
        t3 = time.process_time()
        decode_s, columns_s, free_s = decode_s + t1 - t0, columns_s + t2 - t1, free_s + t3 - t2
    return decode_s, columns_s, free_s


def start_s() -> float:
    """A child's wall to start and import what ``report`` imports (least of 3)."""
    code = "import tb_kineto_insights.cli.report, tb_kineto_insights.summary"

    def child() -> None:
        subprocess.run([sys.executable, "-c", code], check=True)

    return least(3, child, time.perf_counter)


#: A fresh child's parallel read, as ``report`` makes it: workers forked ahead while the
#: process is small (forked from this benchmark's large heap, each would pay for copying
#: its pages), then ``read_trace``; prints wall, own CPU, the workers' CPU.
PARALLEL_READ = """
import os, resource, sys, time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from tb_kineto_insights.trace import parallel
from tb_kineto_insights.trace.reader import read_trace
if __name__ == "__main__":
    path, workers = sys.argv[1], int(sys.argv[2])
    if not parallel.prestart_pool(workers):
        raise SystemExit(f"cannot fork {workers} workers here")
    t0, c0 = time.perf_counter(), time.process_time()
    read_trace(path, workers=workers)  # shuts the pool down: its workers are reaped
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(wall, cpu, kids.ru_utime + kids.ru_stime)
"""


def parallel_read(path: str, workers: int) -> tuple[float, float, float]:
    """Wall, the reading process's CPU and its workers' CPU of ``read_trace(workers=)``
    with the workers forked ahead, in a fresh child (:data:`PARALLEL_READ`)."""
    argv = [sys.executable, "-c", PARALLEL_READ, path, str(workers)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.split()
    wall, cpu, used = (float(x) for x in out[-3:])
    return wall, cpu, used


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    path, n = args.file, args.cpus
    print(f"load average before: {os.getloadavg()}")
    gz = least(3, lambda: gzip_read(path), time.perf_counter)
    inflate_s = least(args.repeat, lambda: inflate(path), time.process_time)
    decode_s, columns_s, free_s = min(pieces_stages(path) for _ in range(args.repeat))
    trace: list[Any] = []
    read_s = least(
        args.repeat, lambda: trace.append(read_trace(path, workers=0)), time.process_time
    )
    analysis_s = least(args.repeat, lambda: summarize_trace(trace[-1]), time.process_time)
    start = start_s()
    par_wall, par_cpu, par_workers = min(parallel_read(path, n) for _ in range(args.repeat))
    split = inflate_s + decode_s + columns_s + free_s
    rest = max(0.0, read_s - split)
    rows = [
        ("bare gzip read (wall, the yardstick)", gz),
        ("start and imports (wall)", start),
        ("inflate (zlib-ng)", inflate_s),
        ("typed decode of the pieces", decode_s),
        ("columns (add_events)", columns_s),
        ("freeing the decoded events", free_s),
        ("rest of the read", rest),
        ("analysis (summarize_trace)", analysis_s),
    ]
    print(f"\n{Path(path).name}, {trace[-1].health.event_count:,} events; least of {args.repeat}")
    print("| stage | s | x the gzip read |\n|---|---|---|")
    for label, value in rows:
        print(f"| {label} | {value:.3f} | {value / gz:.2f}x |")
    read_split = start + split / n + rest + analysis_s
    all_split = start + (split + rest + analysis_s) / n
    print(f"\nbounds on {n} CPUs (a perfect split: no transfer, no merge, no waiting):")
    print(f"  read split, analysis in one process: {read_split:.3f} s = {read_split / gz:.2f}x")
    print(f"  read and analysis split:             {all_split:.3f} s = {all_split / gz:.2f}x")
    print(f"  the issue's target, 5x the gzip read: {5 * gz:.3f} s")
    today = start + par_wall + analysis_s
    print(
        f"today, {n} workers forked ahead: read {par_wall:.3f} s wall, CPU {par_cpu:.3f} s "
        f"here + {par_workers:.3f} s in workers = {(par_cpu + par_workers) / read_s:.2f}x "
        f"the serial read's {read_s:.3f} s; with start and analysis {today:.3f} s = "
        f"{today / gz:.2f}x"
    )
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
