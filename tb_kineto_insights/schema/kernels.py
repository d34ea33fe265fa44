"""Shape of ``kernels``: filled by ``analysis.kernels.kernels_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out


class KernelsOutsideSteps(Out, frozen=True, kw_only=True):
    """``summary.kernels.outside_steps``."""

    count: int
    time_us: float


class KernelStepCount(Out, frozen=True, kw_only=True):
    """``summary.kernels.per_step[]``."""

    number: int
    count: int
    time_us: float
    short_count: int


class HistogramBin(Out, frozen=True, kw_only=True):
    """``summary.kernels.duration_histogram[]``
    (also ``summary.idle.devices[].gap_histogram[]``)."""

    lo_us: float
    hi_us: float | None
    count: int
    time_us: float


class KernelLaunch(Out, frozen=True, kw_only=True):
    """``summary.kernels.launch``."""

    mean_launch_us: float | None
    launch_count: int
    one_to_one_count: int
    launch_bound_count: int
    launch_bound_fraction: float | None
    launch_bound_denominator: str
    unlinked_kernels: int
    #: CUDA graph replays (``cudaGraphLaunch`` calls) starting in a host step window,
    #: their host time (µs, summed) and the kernels they launched in the step windows
    graph_launches: int = 0
    graph_launch_host_us: float = 0.0
    graph_kernels: int = 0


class KernelRow(Out, frozen=True, kw_only=True):
    """One kernel name in ``top_by_count`` / ``top_by_time``: calls, total and
    mean time in µs, the share of its calls that are short, and whether it is a
    communication (NCCL/RCCL) kernel."""

    name: str
    full_name: str
    count: int
    time_us: float
    mean_us: float
    short_fraction: float | None
    is_communication: bool


class FusionCandidate(Out, frozen=True, kw_only=True):
    """``summary.kernels.fusion_candidates[]``."""

    kernels: list[str]
    length: int
    truncated: bool
    occurrences: int
    per_step: float
    total_time_us: float
    cpu_op: str | None


class KernelDevice(Out, frozen=True, kw_only=True):
    """``summary.kernels.devices{}``."""

    count: int
    time_us: float
    short_count_fraction: float | None


class KernelsPanel(Out, frozen=True, kw_only=True):
    """``summary.kernels`` (``analysis.kernels.kernels_summary``): kernel
    density: counts (in and outside steps, per step), the share of short kernels (under
    ``short_threshold_us``) by count and by time, CUDA-graph and compiled (Triton)
    kernels, the duration histogram, launch overhead, the top kernels by count and by
    time, fusion candidates (repeated short-kernel sequences) and per-device totals
    (``devices``: device id → totals)."""

    count: int
    count_in_steps: int
    outside_steps: KernelsOutsideSteps
    per_step: list[KernelStepCount]
    mean_per_step: float | None
    short_threshold_us: float
    short_count_fraction: float | None
    short_time_fraction: float | None
    graph_launched_count: int
    compiled_kernel_fraction: float | None
    duration_histogram: list[HistogramBin]
    launch: KernelLaunch
    top_by_count: list[KernelRow]
    top_by_time: list[KernelRow]
    fusion_candidates: list[FusionCandidate]
    devices: dict[str, KernelDevice]
    notes: list[str]
