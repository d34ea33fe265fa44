"""Shape of ``steps``: filled by ``analysis.overview.steps_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out


class StepDevice(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.steps.devices[]``."""

    device: int
    busy_us: float
    gpu_utilization_fraction: float


class Step(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.steps.steps[]``."""

    number: int
    start_us: float
    duration_us: float
    cpu_duration_us: float
    breakdown_us: dict[str, float]
    gpu_utilization_fraction: float | None


class StepsPanel(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.steps``."""

    count: int
    has_markers: bool
    mean_step_us: float
    std_step_us: float
    min_step_us: float
    max_step_us: float
    cv: float | None
    total_us: float
    breakdown_order: list[str]
    mean_breakdown_us: dict[str, float]
    gpu_utilization_fraction: float | None
    main_device: int | None
    devices: list[StepDevice]
    steps: list[Step]
