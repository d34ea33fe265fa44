"""Shape of ``diagnoses``: filled by ``analysis.diagnoses.diagnose (and run_view.run_diagnoses)``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from typing import Any

from tb_kineto_insights.schema._base import Out


class Diagnosis(Out, frozen=True, kw_only=True):
    """One diagnosis (``analysis.findings.make_diagnosis``): a stable ``id``
    (``analysis.findings.DIAGNOSIS_IDS``), ``severity`` (``high``/``medium``/``low``/
    ``info``), the ``panel`` that shows its evidence, and ``impact_fraction``: the share
    of step time it explains. ``evidence``: numbers behind it, keys depend on ``id``.
    (Also ``run_summary.diagnoses[]``.)"""

    id: str
    severity: str
    title: str
    evidence: dict[str, Any]
    recommendation: str
    panel: str
    impact_fraction: float
