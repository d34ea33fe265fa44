"""Shape of ``steps``: filled by ``analysis.overview.steps_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out


class StepDevice(Out, frozen=True, kw_only=True):
    """``summary.steps.devices[]``."""

    device: int
    busy_us: float
    gpu_utilization_fraction: float | None


class Step(Out, frozen=True, kw_only=True):
    """One ProfilerStep: ``start_us``, ``duration_us`` (GPU-inclusive window),
    ``cpu_duration_us`` (the step annotation's own duration), time by category
    (``breakdown_us``), ``gpu_utilization_fraction`` (None without GPU data)."""

    number: int
    start_us: float
    duration_us: float
    cpu_duration_us: float
    breakdown_us: dict[str, float]
    gpu_utilization_fraction: float | None


class StepsPanel(Out, frozen=True, kw_only=True):
    """``summary.steps`` (``analysis.overview.steps_summary``): the ProfilerStep
    windows analysed, their durations in µs (mean, std, min, max; ``cv`` = std / mean,
    None with fewer than 2 steps), the mean time per step by category
    (``mean_breakdown_us``, keys in ``breakdown_order``) and the GPU utilization (busy
    kernel time / step time, per device and overall). ``origin_ns``: the first step's
    start on the trace's own clock (Kineto ``ts`` × 1000, counted from the file's
    ``baseTimeNanoseconds`` when it has one; ``steps[].start_us`` count from it), None
    without steps."""

    count: int
    has_markers: bool
    mean_step_us: float | None
    std_step_us: float | None
    min_step_us: float | None
    max_step_us: float | None
    cv: float | None
    total_us: float
    breakdown_order: list[str]
    mean_breakdown_us: dict[str, float]
    gpu_utilization_fraction: float | None
    main_device: int | None
    devices: list[StepDevice]
    steps: list[Step]
    origin_ns: int | None
