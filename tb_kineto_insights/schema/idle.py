"""Shape of ``idle``: filled by ``analysis.idle.idle_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out
from tb_kineto_insights.schema.kernels import HistogramBin


class IdleCause(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.idle.devices[].causes{}``."""

    us: float
    fraction_of_idle: float
    fraction_of_step_time: float


class ShortKernelCost(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.idle.devices[].short_kernels``."""

    busy_us: float
    launch_bound_gaps: int
    launch_bound_idle_us: float
    launch_bound_idle_us_by_cause: dict[str, float]
    launch_bound_kernel_us: float
    cost_us: float
    cost_fraction_of_step_time: float


class IdleStep(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.idle.devices[].per_step[]``."""

    number: int
    duration_us: float
    idle_us: float
    busy_fraction: float
    causes_us: dict[str, float]


class HostThread(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.idle.devices[].largest_gaps[].thread``."""

    pid: int
    tid: int


class IdleGap(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.idle.devices[].largest_gaps[]``."""

    step: int
    offset_us: float
    start_us: float
    length_us: float
    cause: str
    opened_by_sync: bool
    causes_us: dict[str, float]
    op: str | None
    innermost_op: str | None
    thread: HostThread


class IdleDevice(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.idle.devices[]``."""

    device: int
    busy_us: float
    busy_fraction: float
    idle_us: float
    idle_fraction: float
    idle_us_per_step: float
    gap_count: int
    causes: dict[str, IdleCause]
    sync_opened_gaps: int
    short_kernels: ShortKernelCost
    per_step: list[IdleStep]
    gap_histogram: list[HistogramBin]
    largest_gaps: list[IdleGap]


class IdlePanel(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.idle``."""

    cause_order: list[str]
    cause_labels: dict[str, str]
    main_device: int | None
    devices: list[IdleDevice]
    notes: list[str]
