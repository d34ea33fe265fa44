"""Shape of ``health``: built by ``trace.model.TraceHealth.panel`` (``trace_quality`` by
``analysis.trace_quality.trace_quality_summary``).

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from typing import Any

from tb_kineto_insights.schema._base import Out


class StreamOverlapClipped(Out, frozen=True, kw_only=True):
    """``summary.health.stream_overlap_clipped``: kernels/memcpys/memsets clipped at the
    next event's start on their stream; ``removed_ns``: time removed."""

    events: int
    removed_ns: int
    overran_whole_events: int


class DamagedRegion(Out, frozen=True, kw_only=True):
    """``summary.health.damage[]``: one damaged region; ``offset`` where the decoder
    stopped, ``start`` and ``bytes`` the bytes lost (offsets in the uncompressed JSON)."""

    offset: int
    start: int
    bytes: int
    events: int
    problem: str


class TraceFlags(Out, frozen=True, kw_only=True):
    """``summary.health.flags``."""

    has_kernels: bool
    has_steps: bool
    has_memory: bool
    has_memory_totals: bool
    has_memory_addresses: bool
    has_stacks: bool
    has_shapes: bool
    has_correlation: bool
    has_device_properties: bool
    has_distributed_info: bool


class LaunchBlocking(Out, frozen=True, kw_only=True):
    """``summary.health.trace_quality.launch_blocking``: ``launches`` (runtime calls
    named ``*LaunchKernel*`` linked to a kernel by correlation id), ``ended_after_kernel``
    (those whose call ends at or after its kernel's end: CUDA_LAUNCH_BLOCKING=1 makes it
    nearly all), ``fraction`` of the two (None without launches)."""

    launches: int
    ended_after_kernel: int
    fraction: float | None


class ProfilerCost(Out, frozen=True, kw_only=True):
    """``summary.health.trace_quality.profiler``: Kineto's own overhead activities,
    ``overhead_us`` and ``overhead_fraction`` of the profiled time (None when nothing was
    profiled), and what the profiler recorded per step (python function and flow
    events)."""

    overhead_us: float
    overhead_fraction: float | None
    python_function_events_per_step: float
    flow_events_per_step: float


class LostData(Out, frozen=True, kw_only=True):
    """``summary.health.trace_quality.lost``: what a file cut short lost
    (``analysis.lost.lost_data``, whose module docstring defines each field)."""

    file_ends_at_byte: int | None
    launches: int
    launches_without_gpu_event: int
    gpu_events_set_aside: int
    gpu_events_lost: bool
    incomplete_steps: list[int]
    lost: list[str]


class TraceQuality(Out, frozen=True, kw_only=True):
    """``summary.health.trace_quality`` (``analysis.trace_quality``): is the trace
    representative? ``steps`` analysed and their durations (``step_us``), steps left out
    for lost GPU data, ``first_step_ratio`` (first step / median of the others; None with
    too few steps), ``step_cv`` (sample std / mean, warm-up step left out; None below 2
    steps), launches that block, and the profiler's own cost."""

    steps: int
    steps_left_out: int
    has_step_markers: bool
    step_us: list[float]
    first_step_ratio: float | None
    step_cv: float | None
    launch_blocking: LaunchBlocking
    profiler: ProfilerCost
    lost: LostData


class HealthPanel(Out, frozen=True, kw_only=True):
    """``summary.health``: what the reader saw
    (:class:`~tb_kineto_insights.trace.model.TraceHealth`, whose docstring defines each
    field). ``device_properties``, ``distributed_info`` and ``metadata`` are copied from
    the file as Kineto wrote them (``deviceProperties``, ``distributedInfo``, other
    top-level scalars), so their keys are Kineto's, not ours."""

    path: str
    compressed: bool
    file_bytes: int
    json_bytes: int
    root: str
    event_count: int
    category_counts: dict[str, int]
    kind_counts: dict[str, int]
    skipped: dict[str, int]
    quarantined: dict[str, int]
    quarantined_by_kind: dict[str, dict[str, int]]
    stream_overlap_clipped: StreamOverlapClipped
    damage: list[DamagedRegion]
    damaged_regions: int
    lost_bytes: int
    lost_events: int
    steps_without_gpu_data: list[int]
    repairs: dict[str, int]
    exact_ns_timestamps: bool
    kineto_log: list[str]
    kineto_record_counts: dict[str, int]
    flags: TraceFlags
    device_properties: list[dict[str, Any]]
    distributed_info: dict[str, Any] | None
    metadata: dict[str, Any]
    string_ids: int
    run_metadata: dict[str, Any] | None
    trace_quality: TraceQuality
