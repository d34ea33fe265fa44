"""What the critical path and the what-if add to ``report``'s CPU time (issue 44: at most
15 %, linear in events).

For each trace, in one process, alternating: the read and the summary as ``report``
makes them (``read_trace`` serial, then ``summarize_trace``), with the step graph on and
with it off (``build_step_graph`` answering None: no replay, no critical path, every
diagnosis on its rule's estimate, as for a trace without steps). Best of ``--repeat``
CPU times (``time.process_time``) each; the difference is the cost of the step graph,
its replays (the identity check, every fix, the fixes together) and the critical path.
Also prints the graph's size (host chain events + GPU operations) and the cost per
event, which stays flat from small to large traces when the work is linear::

    python benchmarks/bench_what_if_cost.py benchmarks/traces/gpt_h100.pt.trace.json.gz
    python benchmarks/bench_what_if_cost.py sample_logs --repeat 3
    python benchmarks/bench_what_if_cost.py sample_logs --report --repeat 3

``--report``: the whole ``tb-kineto-insights report PATH`` command instead, as a child
process (interpreter start, imports, the read, the run views, the text), with the step
graph switched off in the child for the "off" runs: user + system CPU of the child and
its workers (``resource.getrusage(RUSAGE_CHILDREN)``), best of ``--repeat``, alternating,
and the median over the back-to-back pairs (on a machine shared with other jobs the
child's CPU time varies by +-15 % from run to run: the median pair is the steadier).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tb_kineto_insights import summary as summary_module
from tb_kineto_insights.analysis.step_graph import build_step_graph
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace

_ON: Callable[..., Any] = build_step_graph


def _off(index: Any, *args: Any, **kwargs: Any) -> None:
    return None


def _once(path: str, graph_on: bool) -> tuple[float, float]:
    summary_module.build_step_graph = _ON if graph_on else _off  # type: ignore[assignment]
    t0 = time.process_time()
    trace = read_trace(path, workers=0)
    t1 = time.process_time()
    summarize_trace(trace)
    t2 = time.process_time()
    return t1 - t0, t2 - t1


def _size(path: str) -> int:
    from tb_kineto_insights.analysis.trace_index import build_index  # noqa: PLC0415

    graph = build_step_graph(build_index(read_trace(path, workers=0)))
    return 0 if graph is None else int(graph.host_start.size + graph.op_start.size)


_CHILD = (
    "import sys\n"
    "if sys.argv[1] == 'off':\n"
    "    import tb_kineto_insights.summary as s\n"
    "    s.build_step_graph = lambda *a, **k: None\n"
    "from tb_kineto_insights.cli.main import main\n"
    "sys.exit(main(['report', sys.argv[2]]))\n"
)


def _report_cpu(path: str, mode: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", _CHILD, mode, path], check=False, stdout=subprocess.DEVNULL
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _report_main(paths: list[str], repeat: int) -> None:
    for path in paths:
        best = {"on": float("inf"), "off": float("inf")}
        ratios = []
        for _ in range(repeat):
            pair = {mode: _report_cpu(path, mode) for mode in ("off", "on")}
            ratios.append(pair["on"] / pair["off"] - 1.0)
            for mode, cpu in pair.items():
                best[mode] = min(best[mode], cpu)
        print(
            f"report {path}: CPU {best['off']:.2f} s without the step graph, "
            f"{best['on']:.2f} s with it (best of {repeat}): "
            f"{(best['on'] - best['off']) / best['off']:+.1%}; median of the {repeat} "
            f"back-to-back pairs: {statistics.median(ratios):+.1%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", help="traces, or folders searched for *.pt.trace.json*")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--report", action="store_true", help="time the report command")
    args = parser.parse_args()
    if args.report:
        _report_main(args.paths, args.repeat)
        return
    files: list[str] = []
    for p in map(Path, args.paths):
        files += sorted(map(str, p.rglob("*.pt.trace.json*"))) if p.is_dir() else [str(p)]
    total_on = total_off = 0.0
    print(f"{'trace':44s} {'events':>8s} {'read s':>7s} {'off s':>7s} {'on s':>7s} "
          f"{'added':>7s} {'µs/event':>9s}")  # fmt: skip
    for path in files:
        _once(path, True)  # warm: imports, caches
        best = {True: float("inf"), False: float("inf")}
        read_best = float("inf")
        for _ in range(args.repeat):
            for on in (False, True):
                read, analyse = _once(path, on)
                read_best = min(read_best, read)
                best[on] = min(best[on], analyse)
        n = _size(path)
        off, on_ = read_best + best[False], read_best + best[True]
        total_on += on_
        total_off += off
        added = on_ - off
        per_event = added / n * 1e6 if n else 0.0
        name = Path(path).parent.name + "/" + Path(path).name[:20]
        print(f"{name:44s} {n:8d} {read_best:7.3f} {off:7.3f} {on_:7.3f} "
              f"{added / off:+7.1%} {per_event:9.2f}")  # fmt: skip
    summary_module.build_step_graph = _ON  # type: ignore[assignment]
    print(
        f"all {len(files)} traces: report CPU {total_off:.2f} s without the step graph, "
        f"{total_on:.2f} s with it: {(total_on - total_off) / total_off:+.1%}"
    )


if __name__ == "__main__":
    main()
