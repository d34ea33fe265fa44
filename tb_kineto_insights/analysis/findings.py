"""The shape of one diagnosis, shared by every panel that emits them.

A diagnosis is ``{id, severity, title, evidence, recommendation, panel,
impact_fraction}`` (DESIGN.md, Diagnoses): a stable ``id`` (add, never rename), a
``severity`` from :data:`SEVERITY_ORDER`, a one-line ``title``, the ``evidence`` numbers
that triggered it, a concrete ``recommendation``, the summary ``panel`` with the details,
and ``impact_fraction``, the share of step time at stake (0 when none is, e.g. memory).
"""

from __future__ import annotations

from typing import Any

SEVERITY_ORDER: tuple[str, ...] = ("high", "medium", "low", "info")


def make_diagnosis(
    id_: str,
    severity: str,
    title: str,
    evidence: dict[str, Any],
    recommendation: str,
    panel: str,
    impact_fraction: float = 0.0,
) -> dict[str, Any]:
    """One diagnosis dict (see module docstring).

    Raises:
        ValueError: ``severity`` is not one of :data:`SEVERITY_ORDER`.
    """
    if severity not in SEVERITY_ORDER:
        raise ValueError(f"unknown severity {severity!r}")
    return {
        "id": id_,
        "severity": severity,
        "title": title,
        "evidence": evidence,
        "recommendation": recommendation,
        "panel": panel,
        "impact_fraction": impact_fraction,
    }


def sort_diagnoses(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Most severe first, then by impact (share of step time at stake)."""
    return sorted(found, key=lambda d: (SEVERITY_ORDER.index(d["severity"]), -d["impact_fraction"]))
