"""What the Python frames of the idle panel (``analysis.python_frames``, issue 35) cost.

    python benchmarks/bench_python_frames.py TRACE.json[.gz] ... [--repeat 5]

Per trace, read (serial: ``read_trace(workers=1)``, so that every CPU second is this
process's) + ``summarize_trace`` (every panel + diagnoses) runs ``--repeat`` times
with the frames on and as many times with them off (``idle``'s frame index replaced by
one with no frames, i.e. the analysis of a trace without stacks), alternated in one
process; the same for ``idle_summary`` alone on an index built once. Prints the median
CPU seconds (``time.process_time``) of each and the overhead of the frames as a share
of the read + analyse time. A trace without ``python_function`` events costs nothing
extra by construction (the frame work runs only when there are frames).

``--all-user`` reads every frame as user code (``is_user_frame`` always true): the worst
case of the per-frame Python loop (every frame a candidate), as in a model whose own
package holds most of the calls.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tb_kineto_insights.analysis import idle as idle_mod
from tb_kineto_insights.analysis import python_frames as pf
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace

#: The real frame index (``idle`` reaches it as ``pf.FrameIndex``, swapped below).
FRAMES = pf.FrameIndex


class _NoFrames(FRAMES):
    """A frame index that sees no frames (the analysis of a trace without stacks)."""

    def __init__(self, trace: Any) -> None:
        self.trace = trace
        self.stacks = []
        self.frame_of_stack = []
        self._frame_arr = np.zeros(0, dtype=np.int64)
        self._rows = {}

    def __len__(self) -> int:
        return 0


def _cpu(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def _read_and_analyse(path: str) -> object:
    return summarize_trace(read_trace(path, workers=1))


def _both(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median CPU seconds of ``fn`` with the frames on, then off (alternated)."""
    on: list[float] = []
    off: list[float] = []
    for _ in range(repeat):
        idle_mod.pf.FrameIndex = FRAMES  # type: ignore[misc]
        on.append(_cpu(fn))
        idle_mod.pf.FrameIndex = _NoFrames  # type: ignore[misc]
        off.append(_cpu(fn))
    idle_mod.pf.FrameIndex = FRAMES  # type: ignore[misc]
    return statistics.median(on), statistics.median(off)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--all-user", action="store_true")
    args = parser.parse_args()
    if args.all_user:
        pf.is_user_frame = lambda name: True
    for path in args.files:
        trace = read_trace(str(path))
        n_py = len(trace.tables["python_function"])
        index = build_index(trace)
        idle_on, idle_off = _both(functools.partial(idle_mod.idle_summary, index), args.repeat)
        full_on, full_off = _both(functools.partial(_read_and_analyse, str(path)), args.repeat)
        label = f"{path.name}{' (all user)' if args.all_user else ''}"
        print(
            f"{label}: {len(trace.names)} names, {n_py} python_function events; "
            f"idle_summary {idle_on:.3f} s with frames / {idle_off:.3f} s without; "
            f"read + analyse {full_on:.2f} / {full_off:.2f} s CPU, "
            f"overhead {100 * (full_on - full_off) / full_off:+.1f} % "
            f"(median of {args.repeat})"
        )


if __name__ == "__main__":
    main()
