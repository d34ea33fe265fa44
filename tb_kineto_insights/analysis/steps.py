"""Step windows from ``ProfilerStep#N`` markers.

A step is the CPU range ``ProfilerStep#N`` that ``torch.profiler`` records around each
``prof.step()`` (category ``user_annotation``, or ``Operator``/``cpu_op`` in old traces).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.reader import STEP_PREFIX


@dataclass(frozen=True)
class Step:
    """One profiler step: ``number`` from the marker's name, times in int ns."""

    number: int
    start_ns: int
    dur_ns: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


def profiler_steps(trace: m.Trace) -> list[Step]:
    """The ``ProfilerStep#N`` ranges of the trace, ordered by start.

    Markers are taken from user annotations, else from CPU ops (old traces); a marker
    that appears twice with the same number and start (once per category) counts once.
    Returns an empty list when the trace has no markers.
    """
    step_names = {i: n for i, n in enumerate(trace.names) if n.startswith(STEP_PREFIX)}
    if not step_names:
        return []
    ids = np.fromiter(step_names, dtype=np.int32, count=len(step_names))
    seen: dict[tuple[int, int], Step] = {}
    for kind in (m.USER_ANNOTATION, m.CPU_OP):
        table = trace.tables[kind]
        rows = np.nonzero(np.isin(table.name, ids))[0]
        for r in rows:
            suffix = step_names[int(table.name[r])][len(STEP_PREFIX) :]
            try:
                number = int(suffix)
            except ValueError:
                continue
            if not -m.INT64_MAX <= number <= m.INT64_MAX:
                continue  # ProfilerStep#<20 digits>: no step number (int64 columns)
            key = (number, int(table.start_ns[r]))
            seen.setdefault(key, Step(number, key[1], int(table.dur_ns[r])))
        if seen:
            break
    return sorted(seen.values(), key=lambda s: (s.start_ns, s.number))
