"""Shape of ``critical_path`` and ``what_if``, and of a diagnosis' ``prediction``:
filled by ``analysis.critical_path`` and ``analysis.what_if``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

import msgspec

from tb_kineto_insights.schema._base import Out
from tb_kineto_insights.schema.diagnoses import Moment


class CriticalPathItem(Out, frozen=True, kw_only=True):
    """``critical_path.top[]``: GPU work on the path, by the CPU op that launched it
    (``name``; the kernel's short name where none), its class and µs per step."""

    name: str
    klass: str
    us_per_step: float


class CriticalPathStep(Out, frozen=True, kw_only=True):
    """``critical_path.steps[]``: one steady step's path: its ``length_us`` (the step
    time) and the path's time by class (µs; classes with time only)."""

    number: int
    length_us: float
    by_class_us: dict[str, float]


class CriticalPathPanel(Out, frozen=True, kw_only=True):
    """``summary.critical_path`` (``analysis.critical_path.critical_path_summary``):
    what each steady step waited on, end to end. ``mean_by_class_us``: the path's mean
    time per step by class (``analysis.critical_path.CLASSES``), adding up to
    ``mean_length_us`` (the mean step time); ``fraction_by_class``: the same ÷ the mean
    step time; ``top``: the largest GPU pieces of the path; ``notes``: why there is no
    path (empty ``steps``)."""

    steps: list[CriticalPathStep]
    mean_length_us: float | None
    mean_by_class_us: dict[str, float]
    fraction_by_class: dict[str, float]
    top: list[CriticalPathItem]
    notes: list[str]


class WhatIfFix(Out, frozen=True, kw_only=True):
    """``what_if.fixes[]``: one recommended fix: the ``diagnosis`` id that recommends it,
    its prediction (as ``FixPrediction``) and the diagnosis' ``moment`` when it has one."""

    diagnosis: str
    fix: str
    method: str
    predicted_step_us: float
    speedup: float
    saving_fraction: float
    moment: Moment | msgspec.UnsetType = msgspec.UNSET


class WhatIfCombined(Out, frozen=True, kw_only=True):
    """``what_if.combined``: the top fixes applied together and replayed together (not
    their savings added up): ``diagnoses`` (ids, in rank order), the step they give."""

    diagnoses: list[str]
    predicted_step_us: float
    speedup: float
    saving_fraction: float


class WhatIfPanel(Out, frozen=True, kw_only=True):
    """``summary.what_if`` (``analysis.what_if.what_if_summary``): "do this, and your
    step goes from A to B". ``actual_step_us``: the mean steady-state step;
    ``replay_error_fraction``: |unchanged replay − measured| ÷ measured (how closely the
    graph holds the trace; None without a graph); ``fixes``: each recommended fix with
    its predicted step, fastest first; ``combined``: the top fixes together (None with
    fewer than two); ``notes``: why a prediction is missing or only estimated."""

    actual_step_us: float | None
    replay_error_fraction: float | None
    fixes: list[WhatIfFix]
    combined: WhatIfCombined | None
    notes: list[str]
