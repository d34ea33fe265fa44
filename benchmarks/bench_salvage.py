"""Reads of a clean trace, the same with one stray ``[`` after its first event (an array
that never closes), and with one event whose ``args`` nest 1,000 deep (issue 32 §7):
wall time, kernels read, damaged regions. Serial reads (``workers=1``).

    python benchmarks/bench_salvage.py 20000 80000   # kernel events per trace
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.reader import read_trace


def make(n: int, kind: str) -> str:
    """A trace of ``n`` kernels; ``kind``: ``clean``, ``stray`` or ``deep1000``."""
    events = [
        json.dumps(
            {"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7,
             "ts": 1000 + i, "dur": 0.5, "args": {"stream": 7, "correlation": i}}
        )
        for i in range(n)
    ]  # fmt: skip
    if kind == "deep1000":
        deep = "[" * 1000 + "1" + "]" * 1000
        events[n // 2] = (
            '{"ph":"X","cat":"cpu_op","name":"deep","pid":1,"tid":1,"ts":5,"dur":1,'
            f'"args":{{"x":{deep}}}}}'
        )
    body = events[0] + (",[" if kind == "stray" else ",") + ",".join(events[1:])
    return '{"traceEvents":[' + body + "]}"


def main() -> None:
    for n in [int(a) for a in sys.argv[1:]] or [20_000]:
        for kind in ("clean", "stray", "deep1000"):
            text = make(n, kind)
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
                fh.write(text)
            started = time.perf_counter()
            try:
                tr = read_trace(fh.name, workers=1)
                result = (
                    f"kernels={len(tr.kernels)} damaged_regions={tr.health.damaged_regions} "
                    f"lost_events={tr.health.lost_events}"
                )
            except TraceError as exc:
                result = f"error: {str(exc)[-80:]}"
            took = time.perf_counter() - started
            os.unlink(fh.name)
            print(f"{len(text) / 1e6:6.1f} MB {kind:9s} {took:6.2f} s {result}", flush=True)


if __name__ == "__main__":
    main()
