"""CPU time of the reader's column building (``columns.Builder``) alone, old against new.

Reads FILE serially once with this checkout's reader, keeping every decoded piece that
reaches ``Builder.add_events``. Then, in turn (A B A B ...), builds the columns from
those same pieces with this checkout's ``Builder`` and with the builder of another
checkout's ``trace/columns.py`` (``Builder``), or ``trace/reader.py`` (``_Builder``)
where it has no ``columns.py`` (``--old PATH``; loaded as a separate module,
the rest of the package shared), ``add_events`` for every piece and then
``tables_out``/``memory_out``/``flows_out``, and prints the CPU seconds
(``time.process_time``) of each build, their minimum and median, and whether the two
builders' results are equal (every column, name, count). Both run in one process, so a
busy machine slows both alike::

    python benchmarks/bench_builder.py FILE --old /path/to/old/tb_kineto_insights/trace/columns.py
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import time
from typing import Any

import numpy as np

from tb_kineto_insights.trace import columns, reader


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("old_reader", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_reader"] = module
    spec.loader.exec_module(module)
    return module


def _build(module: Any, pieces: list[Any], exact: bool) -> tuple[float, Any]:
    gc.collect()
    t = time.process_time()
    b = (getattr(module, "Builder", None) or module._Builder)(exact)
    for p in pieces:
        b.add_events(p)
    out = (b.tables_out(), b.memory_out(), b.flows_out())
    return time.process_time() - t, (b, out)


def _same(x: Any, y: Any) -> bool:
    (bx, (tx, mx, fx)), (by, (ty, my, fy)) = x, y
    for a, b in ((mx, my), (fx, fy), *((tx[k], ty[k]) for k in tx)):
        for f in a.__dataclass_fields__:
            va, vb = getattr(a, f), getattr(b, f)
            if isinstance(va, np.ndarray):
                if not np.array_equal(va, vb):
                    return False
            elif dict(va) != dict(vb):
                return False
    return all(
        getattr(bx, k) == getattr(by, k) and list(getattr(bx, k)) == list(getattr(by, k))
        for k in ("names", "strings", "category_counts", "kind_counts", "skipped", "quarantined")
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument(
        "--old", required=True, help="another checkout's trace/columns.py (or trace/reader.py)"
    )
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    old = _load(args.old)
    pieces: list[Any] = []
    original = columns.Builder.add_events

    def keep(self: columns.Builder, events: list[Any]) -> None:
        pieces.append(events)
        original(self, events)

    columns.Builder.add_events = keep  # type: ignore[method-assign]
    reader.read_trace(args.file, workers=1)
    columns.Builder.add_events = original  # type: ignore[method-assign]
    exact = any(getattr(p, "ts", None) is not None for p in pieces)
    times: dict[str, list[float]] = {"old": [], "new": []}
    results = {}
    for _ in range(args.repeat):
        for label, module in (("old", old), ("new", columns)):
            t, results[label] = _build(module, pieces, exact)
            times[label].append(t)
    for label, ts in times.items():
        print(
            f"{label}: build_cpu_s {' '.join(f'{x:.3f}' for x in ts)} "
            f"min {min(ts):.3f} median {statistics.median(ts):.3f}"
        )
    print(
        f"events {sum(map(len, pieces))} pieces {len(pieces)} exact {exact} "
        f"equal {_same(results['old'], results['new'])}"
    )


if __name__ == "__main__":
    main()
