"""Where one file's time goes between the decode floor and ours (issue 34), in one
process, on one core (``KINETO_INSIGHTS_READ_WORKERS=1``: no worker processes).

    python benchmarks/profile_per_file.py FILE [FILE ...] [--repeat 3] [--top 15]

Per file, the best of ``--repeat`` runs of each stage, in seconds:

* *floor*: inflate (``zlib_ng``) and msgspec's decode into the typed events of the fields
  the analysis reads (``trace/events.py``'s ``PhaseRoot``): what any reader must do;
* *read*: ``read_trace`` (inflate on its thread, the typed decode by pieces, the columns,
  timestamps, names, health);
* *analysis*: ``summarize_trace`` on the read trace (every panel, the diagnoses, the
  schema check);
* *json*: the summary written as JSON (what ``report --format json`` adds per file).

Then a cProfile of ``summarize_file`` (read + analysis), its own time summed by module
(the ``tb_kineto_insights`` module, or the extension: msgspec, numpy, zlib) and the
functions with the most own time. Figures go to ``benchmarks/RESULTS.md`` by hand, with
the load (``uptime``) they were measured at.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["KINETO_INSIGHTS_READ_WORKERS"] = "1"
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def best_of(repeat: int, call: Callable[[], Any]) -> tuple[float, Any]:
    """The least wall seconds of ``repeat`` calls, and the last call's result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = call()
        best = min(best, time.perf_counter() - t0)
    return best, out


def floor(path: str) -> int:
    """Inflate and decode ``path`` into typed events; returns the event count."""
    import msgspec

    try:
        from zlib_ng import zlib_ng as zlib
    except ImportError:  # pragma: no cover - zlib-ng is a dependency
        import zlib  # type: ignore[no-redef]
    from tb_kineto_insights.trace.events import PhaseRoot, Root

    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = zlib.decompress(data, 31)
    try:
        root = msgspec.json.decode(data, type=PhaseRoot)
    except msgspec.ValidationError:
        root = msgspec.json.decode(data, type=Root)
    return len(root.traceEvents)


def by_module(stats: pstats.Stats) -> list[tuple[str, float]]:
    """Own time summed per module (our package's module, else the file or extension)."""
    sums: dict[str, float] = defaultdict(float)
    for (filename, _, func), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "tb_kineto_insights" in filename:
            key = filename.split("tb_kineto_insights/")[-1]
        elif filename == "~":
            key = func.split(" of ")[-1].strip("'>") if " of " in func else func
        else:
            key = Path(filename).name
        sums[key] += tottime
    return sorted(sums.items(), key=lambda kv: -kv[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    import msgspec

    from tb_kineto_insights.summary import summarize_file, summarize_trace
    from tb_kineto_insights.trace.reader import read_trace

    print(f"uptime: {os.popen('uptime').read().strip()}")
    print("| file | JSON MB | events | floor s | read s | analysis s | json s | ours / floor |")
    print("|---|---|---|---|---|---|---|---|")
    for path in args.files:
        t_floor, events = best_of(args.repeat, lambda p=path: floor(p))
        t_read, trace = best_of(args.repeat, lambda p=path: read_trace(p))
        t_an, summary = best_of(args.repeat, lambda t=trace: summarize_trace(t))
        t_json, _ = best_of(args.repeat, lambda s=summary: msgspec.json.encode(s))
        size = trace.health.json_bytes if hasattr(trace.health, "json_bytes") else 0
        size = size or os.path.getsize(path)
        ours = t_read + t_an + t_json
        print(
            f"| {Path(path).name} | {size / 1e6:.1f} | {events} | {t_floor:.3f} | {t_read:.3f} "
            f"| {t_an:.3f} | {t_json:.3f} | {ours / t_floor:.2f}x |"
        )
        del trace
    for path in args.files:
        prof = cProfile.Profile()
        prof.enable()
        summarize_file(path)
        prof.disable()
        stats = pstats.Stats(prof)
        total = stats.total_tt  # type: ignore[attr-defined]
        print(f"\ncProfile of summarize_file({Path(path).name}): {total:.3f} s")
        print("own time by module:")
        for name, t in by_module(stats)[: args.top]:
            print(f"  {t:7.3f} s {100 * t / total:5.1f} %  {name}")
        print("functions with the most own time:")
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
        for (filename, line, func), (_, ncalls, tottime, _, _) in rows[: args.top]:
            where = filename.split("tb_kineto_insights/")[-1] if filename != "~" else ""
            print(f"  {tottime:7.3f} s {ncalls:8d} calls  {where}:{line} {func}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
