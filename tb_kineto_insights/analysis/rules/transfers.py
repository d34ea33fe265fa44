"""Rules of the ``transfers`` area: copies between host and device.

``pageable_memcpy``: copies from pageable host memory, synchronous for the host
(:func:`_pageable_memcpy`).
"""

from __future__ import annotations

import numpy as np

from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.rules.base import (
    IMPACT_THRESHOLDS,
    Fix,
    Rule,
    SpanInput,
    duration,
    fix_prediction,
    make_diagnosis,
    pct,
    severity_for_impact,
)
from tb_kineto_insights.analysis.rules.fixes import PINNED_SPEEDUP_DEFAULT, copies_pinned
from tb_kineto_insights.analysis.rules.moments import longest_event
from tb_kineto_insights.schema.diagnoses import Diagnosis, Moment
from tb_kineto_insights.trace import model as m


def _pageable_memcpy(inp: SpanInput) -> Diagnosis | None:
    """``pageable_memcpy``: copies from pageable host memory (synchronous for the host).

    ``impact_fraction`` = summed duration of the pageable copies / summed step time;
    severity follows it and nothing is raised below ``min_impact_fraction``: a few
    microseconds of pageable copies (e.g. a scalar per step) cost nothing worth a line.
    """
    index, steps, th = inp.index, inp.steps, inp.th
    copies = index.trace.tables[m.MEMCPY]
    rows = index.rows_where(m.MEMCPY, nm.is_pageable_memcpy)
    if not rows.any():
        return None
    time_us = float(copies.dur_ns[rows].sum()) / 1000.0
    total_us = (steps.total_us if steps is not None else 0.0) or 0.0
    share = time_us / total_us if total_us else 0.0
    if severity_for_impact(share, th) is None:
        return None
    speedup = PINNED_SPEEDUP_DEFAULT  # the trace has no copy sizes to measure bandwidths
    prediction = fix_prediction(
        inp,
        "pageable_memcpy",
        f"copies from pinned memory: {speedup:.1f}x faster and asynchronous",
        copies_pinned(speedup),
        share,
    )
    impact = prediction.saving_fraction if prediction else share
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    kinds = sorted({index.trace.names[int(i)] for i in np.unique(copies.name[rows])})
    n_steps = (steps.count if steps is not None else 0) or 1
    # per step, as every other cost is stated (the total over the profile read as one step)
    return make_diagnosis(
        "pageable_memcpy",
        severity,
        f"{int(rows.sum())} copies from pageable host memory take {pct(share)} of the "
        f"step time ({duration(time_us / n_steps)} per step)",
        {
            "count": int(rows.sum()),
            "time_us": time_us,
            "time_us_per_step": time_us / n_steps,
            "steps": n_steps,
            "fraction_of_step_time": share,
            "kinds": kinds,
        },
        "Copy from pinned memory so the copy is asynchronous and can overlap compute: "
        "DataLoader(pin_memory=True), or tensor.pin_memory(), then "
        ".to(device, non_blocking=True).",
        "steps",
        impact_fraction=impact,
        prediction=prediction,
    )


def _longest_pageable(d: Diagnosis, inp: SpanInput) -> Moment | None:
    """The longest copy from pageable host memory."""
    rows = inp.index.rows_where(m.MEMCPY, nm.is_pageable_memcpy)
    return longest_event(inp.index, m.MEMCPY, rows, "the longest pageable copy")


PAGEABLE_MEMCPY = Rule(
    id="pageable_memcpy",
    area="transfers",
    label="Copies from pageable memory",
    definition="Host-device copies from pageable host memory, synchronous for the host; "
    "their summed duration is the cost.",
    panels=("steps",),
    thresholds=IMPACT_THRESHOLDS,
    check=_pageable_memcpy,
    moment=_longest_pageable,
    fix=Fix("pinned memory, non_blocking copies"),
)
