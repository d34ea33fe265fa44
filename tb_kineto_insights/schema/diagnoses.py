"""Shape of ``diagnoses``: filled by ``analysis.diagnoses.diagnose (and run_view.run_diagnoses)``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from typing import Any

from tb_kineto_insights.schema._base import Out


class Diagnosis(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.diagnoses[]``
    (also ``run_summary.diagnoses[]``)."""

    id: str
    severity: str
    title: str
    evidence: dict[str, Any]
    recommendation: str
    panel: str
    impact_fraction: float
