"""Shape of ``diagnoses``: filled by the rules of ``analysis/rules/``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tb_kineto_insights.schema._base import Out


class Moment(Out, frozen=True, kw_only=True):
    """Where a diagnosis can be seen on the timeline (each rule's moment, ``analysis/rules/``): step
    ``step`` (N of ``ProfilerStep#N``), the window ``[offset_us, offset_us + length_us)``
    µs after that step window's start (the timeline's ``offset_us``), ``what`` is there
    in words, and ``worker`` for a diagnosis across ranks (the rank's worker; null on a
    span's own diagnoses)."""

    step: int
    offset_us: float
    length_us: float
    what: str
    worker: str | None = None


class FixPrediction(Out, frozen=True, kw_only=True):
    """``diagnoses[].prediction``: the step time the diagnosis' fix would give.
    ``fix``: what the fix changes, in words; ``method``: ``"replay"`` (the step's
    dependency graph replayed with the change: ``analysis.replay``) or ``"estimate"``
    (the rule's own formula: no graph to replay); ``actual_step_us``: the mean
    steady-state step; ``predicted_step_us``; ``speedup`` = actual ÷ predicted;
    ``saving_fraction`` = 1 − predicted ÷ actual (the diagnosis' ``impact_fraction``)."""

    fix: str
    method: str
    actual_step_us: float
    predicted_step_us: float
    speedup: float
    saving_fraction: float


class Diagnosis(Out, frozen=True, kw_only=True):
    """One diagnosis (``analysis.rules.base.make_diagnosis``): a stable ``id``
    (``analysis.rules.DIAGNOSIS_IDS``), ``severity`` (``high``/``medium``/``low``/
    ``info``), the ``panel`` that shows its evidence, and ``impact_fraction``: the share
    of step time it explains. ``evidence``: numbers behind it, keys depend on ``id``;
    ``moment``: where to see it on the timeline, for a diagnosis with a place in time
    (absent otherwise); ``prediction``: the step time its fix would give, for a
    diagnosis that recommends a fix (absent otherwise). (Also
    ``run_summary.diagnoses[]``.)"""

    id: str
    severity: str
    title: str
    evidence: dict[str, Any]
    recommendation: str
    panel: str
    impact_fraction: float
    moment: Moment | msgspec.UnsetType = msgspec.UNSET
    prediction: FixPrediction | msgspec.UnsetType = msgspec.UNSET
