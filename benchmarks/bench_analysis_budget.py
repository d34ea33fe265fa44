"""The cost budget per analysis (issue 46): each panel's, each diagnosis rule's and the
step graph's (critical path, what-if) share of the CPU of reading and summarising traces.

    python benchmarks/bench_analysis_budget.py PATH [PATH ...] [--repeat 3]
    PYTHONPATH=OLD_CHECKOUT python benchmarks/bench_analysis_budget.py PATH  # an older tree

PATH is a trace file or a folder (every ``*.json`` / ``*.json.gz`` under it, as
``report`` of a log directory reads them). Each file is read once in this process
(``read_trace(workers=0)``, timed), then summarised ``--repeat`` times
(``summarize_trace_with_timeline``, as the cache and the plugin do; ``report`` without a
cache skips the timeline row) with every stage of ``summary._summarize`` wrapped in a CPU
timer (``time.process_time``): the trace index, each panel, the step graph, the what-if
service, every rule's check and moment (a rule that asks the what-if service for a
replay pays for it: that replay is in the rule's row), the critical path, the what-if
summary, the schema check and the timeline store. The least CPU of the repeats per
stage is kept (the noise of a shared machine only adds), and each stage is printed with
its share of read + summary. "other" is the summary's time outside the stages named.
The load average is printed: compare within one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from tb_kineto_insights import summary as summary_module  # noqa: E402
from tb_kineto_insights.analysis import rules as rules_module  # noqa: E402
from tb_kineto_insights.trace.reader import read_trace  # noqa: E402

try:  # an older checkout (``PYTHONPATH=OLD``) may have no what-if service
    from tb_kineto_insights.analysis.what_if import WhatIf
except ImportError:  # pragma: no cover - older checkouts only
    WhatIf = None  # type: ignore[assignment,misc]

#: Functions of ``summary`` (module globals) timed as stages, with their row names.
STAGES = {
    "build_index": "trace index",
    "steps_summary": "panel steps",
    "kernels_summary": "panel kernels",
    "idle_summary": "panel idle",
    "communication_summary": "panel communication",
    "memory_summary": "panel memory",
    "efficiency_summary": "panel efficiency",
    "tables_summary": "panel tables",
    "trace_quality_summary": "panel health (trace quality)",
    "build_step_graph": "step graph",
    "critical_path_summary": "critical path",
    "path_intervals": "critical path intervals (timeline)",
    "what_if_summary": "what-if summary",
    "timeline_store": "timeline store",
}

#: CPU seconds per stage in the current summary.
_spent: dict[str, float] = defaultdict(float)


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[name] += time.process_time() - t0

    return wrapper


def _install() -> None:
    """Wrap every stage (module globals of ``summary``, the rules, the service); a stage
    an older checkout lacks is left out."""
    for attr, name in STAGES.items():
        if hasattr(summary_module, attr):
            setattr(summary_module, attr, _timed(name, getattr(summary_module, attr)))
    check = summary_module.schema.check_summary
    summary_module.schema.check_summary = _timed("schema check", check)  # type: ignore[attr-defined]
    if WhatIf is not None:
        of = WhatIf.of.__func__  # type: ignore[attr-defined]
        WhatIf.of = classmethod(_timed("what-if service (actual replay)", of))  # type: ignore[assignment,method-assign]
    wrapped = []
    for rule in getattr(rules_module, "RULES", ()):
        changes: dict[str, Any] = {}
        if rule.check is not None:
            changes["check"] = _timed(f"rule {rule.id}", rule.check)
        if rule.moment is not None:
            changes["moment"] = _timed(f"rule {rule.id}", rule.moment)
        wrapped.append(dataclasses.replace(rule, **changes))
    if wrapped:
        rules_module.RULES = tuple(wrapped)
        rules_module.RULES_BY_ID = {r.id: r for r in wrapped}


def whole_summary(trace: Any) -> Any:
    """The summary with its timeline where this checkout makes one."""
    if hasattr(summary_module, "summarize_trace_with_timeline"):
        return summary_module.summarize_trace_with_timeline(trace)
    return summary_module.summarize_trace(trace)


def _files(path: str) -> list[str]:
    p = Path(path)
    if p.is_file():
        return [str(p)]
    return sorted(str(f) for f in p.rglob("*.json*") if f.name.endswith((".json", ".json.gz")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    _install()
    print(f"load average before: {os.getloadavg()}")
    for path in args.paths:
        best: dict[str, float] = {}
        read_s = 0.0
        files = 0
        for f in _files(path):
            t0 = time.process_time()
            try:
                trace = read_trace(f, workers=0)
            except Exception:  # noqa: BLE001 (not a trace: report skips it too)
                continue
            read_s += time.process_time() - t0
            files += 1
            per_file: dict[str, float] = {}
            for _ in range(args.repeat):
                _spent.clear()
                t0 = time.process_time()
                try:
                    whole_summary(trace)
                except Exception:  # noqa: BLE001 (a span report lists as failed)
                    break
                total = time.process_time() - t0
                _spent["other"] = total - sum(_spent.values())
                if not per_file or total < per_file["total"]:
                    per_file = dict(_spent) | {"total": total}
            for k, v in per_file.items():
                best[k] = best.get(k, 0.0) + v
        whole = read_s + best.get("total", 0.0)
        print(
            f"\n{path}: {files} files, read {read_s:.3f} s CPU, summary "
            f"{best.get('total', 0.0):.3f} s CPU (least of {args.repeat})"
        )
        print("| stage | CPU s | share of read + summary |")
        print("|---|---|---|")
        print(f"| read | {read_s:.3f} | {100 * read_s / whole:.1f} % |")
        rows = sorted(((k, v) for k, v in best.items() if k != "total"), key=lambda kv: -kv[1])
        for k, v in rows:
            if v >= 0.0005:
                print(f"| {k} | {v:.3f} | {100 * v / whole:.1f} % |")
    print(f"\nload average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
