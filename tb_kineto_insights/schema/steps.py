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


class LeftOutStep(Out, frozen=True, kw_only=True):
    """``summary.steps.left_out[]``: a step window left out of every steady-state
    figure. ``reason``: ``"gpu_backlog"`` (the first window: the GPU ran
    ``backlog_us`` of work queued before the profiled range ahead of the step's own),
    ``"warm_up"`` (the first steady window lasting at least
    ``Thresholds.quality_warmup_ratio`` times the others: one-off work) or ``"cut_off"``
    (the last window: ``launches_without_gpu_event`` of its launches lost their GPU work
    when the profiler stopped). ``start_us`` counts from ``origin_ns``; ``ratio``: the
    duration / the median steady-state step."""

    number: int
    reason: str
    start_us: float
    duration_us: float
    ratio: float
    backlog_us: float
    launches_without_gpu_event: int


class StepsPanel(Out, frozen=True, kw_only=True):
    """``summary.steps`` (``analysis.overview.steps_summary``): the steady-state
    ProfilerStep windows analysed (DESIGN.md, "Steady-state steps and step time"), their
    durations in µs (mean, std, min, max; ``cv`` = std / mean, None with fewer than 2
    steps), the mean time per step by category (``mean_breakdown_us``, keys in
    ``breakdown_order``) and the GPU utilization (busy kernel time / step time, per
    device and overall). ``left_out``: the windows left out of all of these, and why;
    ``left_out_note``: that said in one sentence (None when none is left out).
    ``origin_ns``: the first window's start (a left-out one included) on the trace's own
    clock (Kineto ``ts`` × 1000, counted from the file's ``baseTimeNanoseconds`` when it
    has one; ``steps[].start_us`` and ``left_out[].start_us`` count from it), None
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
    left_out: list[LeftOutStep] = []
    left_out_note: str | None = None
