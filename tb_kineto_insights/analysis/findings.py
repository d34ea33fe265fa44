"""The shape of one diagnosis, shared by every panel that emits them.

A diagnosis is a :class:`~tb_kineto_insights.schema.diagnoses.Diagnosis`: ``id``,
``severity``, ``title``, ``evidence``, ``recommendation``, ``panel``,
``impact_fraction`` (DESIGN.md, Diagnoses): a stable ``id`` (add, never rename), a
``severity`` from :data:`SEVERITY_ORDER`, a one-line ``title``, the ``evidence`` numbers
that triggered it, a concrete ``recommendation``, the summary ``panel`` with the details,
and ``impact_fraction``, the share of step time at stake (0 when none is, e.g. memory).
"""

from __future__ import annotations

from typing import Any

from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.schema.diagnoses import Diagnosis

SEVERITY_ORDER: tuple[str, ...] = ("high", "medium", "low", "info")
#: Every diagnosis id the analysis can emit (stable: add, never rename).
DIAGNOSIS_IDS: tuple[str, ...] = (
    "small_kernel_flood",
    "gpu_idle_dataloader",
    "gpu_idle_host_sync",
    "low_gpu_utilization",
    "pageable_memcpy",
    "exposed_communication",
    "communication_straggler",
    "memory_growth",
    "memory_fragmentation",
    "memory_near_capacity",
    "no_step_markers",
    "trace_data_loss",
    "gpu_idle_host_untraced",
    "trace_too_few_steps",
    "trace_warmup_step",
    "trace_unequal_steps",
    "trace_cuda_launch_blocking",
    "trace_profiler_overhead",
    "matmul_without_tensor_cores",
    "low_kernel_efficiency",
    "optimizer_step_bound",
    "allocator_churn",
    "cudnn_autotune_in_step",
)


def make_diagnosis(
    id_: str,
    severity: str,
    title: str,
    evidence: dict[str, Any],
    recommendation: str,
    panel: str,
    impact_fraction: float = 0.0,
) -> Diagnosis:
    """One :class:`~tb_kineto_insights.schema.diagnoses.Diagnosis` (see module docstring).

    Raises:
        ValueError: ``severity`` is not one of :data:`SEVERITY_ORDER`, or ``id_`` is not in
            :data:`DIAGNOSIS_IDS`.
    """
    if severity not in SEVERITY_ORDER:
        raise ValueError(f"unknown severity {severity!r}")
    if id_ not in DIAGNOSIS_IDS:
        raise ValueError(f"unregistered diagnosis id {id_!r}: add it to DIAGNOSIS_IDS")
    return Diagnosis(
        id=id_,
        severity=severity,
        title=title,
        evidence=evidence,
        recommendation=recommendation,
        panel=panel,
        impact_fraction=impact_fraction,
    )


def severity_for_impact(impact_fraction: float, th: Thresholds) -> str | None:
    """Severity of a diagnosis from what it costs: its ``impact_fraction`` (share of step
    time it explains, 0..1). ``None`` below ``th.min_impact_fraction`` (raise nothing),
    ``low`` below ``th.impact_medium_fraction``, ``medium`` below
    ``th.impact_high_fraction``, else ``high``."""
    if not impact_fraction >= th.min_impact_fraction:  # also catches NaN
        return None
    if impact_fraction >= th.impact_high_fraction:
        return "high"
    if impact_fraction >= th.impact_medium_fraction:
        return "medium"
    return "low"


def sort_diagnoses(found: list[Diagnosis]) -> list[Diagnosis]:
    """Most severe first, then by impact (share of step time at stake)."""
    return sorted(found, key=lambda d: (SEVERITY_ORDER.index(d.severity), -d.impact_fraction))
