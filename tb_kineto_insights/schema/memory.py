"""Shape of ``memory``: filled by ``analysis.memory.memory_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out


class MemorySeriesPoints(Out, frozen=True, kw_only=True):
    """A memory series: ``t_us[i]`` (µs) and ``bytes[i]``, downsampled
    for display. (``series.allocated`` and ``series.reserved``.)"""

    t_us: list[float]
    bytes: list[int]


class MemorySeries(Out, frozen=True, kw_only=True):
    """``summary.memory.devices[].series``."""

    allocated: MemorySeriesPoints
    reserved: MemorySeriesPoints | None
    points_in: int


class MemoryStep(Out, frozen=True, kw_only=True):
    """``summary.memory.devices[].per_step[]``."""

    number: int
    start_bytes: int
    peak_bytes: int | None
    end_bytes: int
    peak_reserved_bytes: int | None
    events: int


class MemoryGrowth(Out, frozen=True, kw_only=True):
    """Growth of end-of-step allocated bytes: ``bytes_per_step`` (slope of a
    least-squares fit over ``steps_used`` steps), its ``r2``, whether it is ``steady``,
    and ``total_bytes`` over the window."""

    bytes_per_step: float | None
    r2: float | None
    steps_used: int
    steady: bool
    total_bytes: int | None


class FragmentationStep(Out, frozen=True, kw_only=True):
    """``summary.memory.devices[].fragmentation.per_step[]``."""

    number: int
    events: int
    requested_bytes: int
    reserved_growth_bytes: int


class NewSegmentEvent(Out, frozen=True, kw_only=True):
    """``summary.memory.devices[].fragmentation.largest[]``."""

    t_us: float
    step: int | None
    requested_bytes: int
    cached_free_before_bytes: int | None
    reserved_before_bytes: int
    reserved_growth_bytes: int
    op: str | None


class Fragmentation(Out, frozen=True, kw_only=True):
    """``summary.memory.devices[].fragmentation``."""

    events: int
    new_segment_events: int
    requested_bytes: int
    reserved_growth_bytes: int
    min_cached_free_before_bytes: int | None
    per_step: list[FragmentationStep]
    steady_state_steps: list[int]
    steady_state_events: int
    steady_state_reserved_growth_bytes: int
    reserved_growth_bytes_per_step: float | None
    allocated_peak_growth_bytes_per_step: float | None
    excess_reserved_growth_bytes_per_step: float | None
    largest: list[NewSegmentEvent]
    stale_events_ignored: int
    #: steps (numbers) in which the cache released device memory (Total Reserved fell,
    #: or a cudaFree ran): their new segments are churn, not fragmentation
    release_steps: list[int] = []
    #: new-segment events in those steps that would otherwise have counted
    release_events_ignored: int = 0
    #: bytes by which Total Reserved fell inside the host step windows (the segments the
    #: cache released there), summed over the steps
    released_bytes: int = 0


class FreedBeforeWindow(Out, frozen=True, kw_only=True):
    """``summary.memory.devices[].freed_before_window``."""

    count: int
    bytes: int


class AllocationMatching(Out, frozen=True, kw_only=True):
    """``summary.memory.devices[].matching``."""

    allocations_freed: int
    allocations_live_at_end: int
    reused_without_free: int
    unmatched_frees: int
    events_without_addr: int


class LiveByOp(Out, frozen=True, kw_only=True):
    """``summary.memory.devices[].live_at_end.by_op[]``."""

    op: str | None
    input_shapes: str | None
    count: int
    bytes: int
    steps: list[int]


class LiveAtEnd(Out, frozen=True, kw_only=True):
    """``summary.memory.devices[].live_at_end``."""

    count: int
    bytes: int
    by_op: list[LiveByOp]
    groups: int


class Allocation(Out, frozen=True, kw_only=True):
    """``summary.memory.devices[].largest_allocations[]``."""

    bytes: int
    op: str | None
    input_shapes: str | None
    step: int | None
    t_us: float
    freed: bool | None
    lifetime_us: float | None


class MemoryDevice(Out, frozen=True, kw_only=True):
    """One device's memory (CPU or a GPU; ``device_type_name`` is None for a
    ``Device Type`` number PyTorch does not name): ``series`` of allocated/reserved
    bytes over time, ``per_step`` start/peak/end bytes, ``growth`` (linear fit of end
    bytes per step, ``r2``), ``fragmentation``, ``live_at_end``, ``largest_allocations``
    and how allocations and frees were matched by address (``matching``)."""

    device: str
    device_type: int
    device_type_name: str | None
    device_id: int
    event_count: int
    allocation_count: int
    free_count: int
    has_totals: bool
    has_addresses: bool
    allocated_from_deltas: bool
    series: MemorySeries
    per_step: list[MemoryStep]
    growth: MemoryGrowth
    peak_allocated_bytes: int
    peak_allocated_us: float
    peak_reserved_bytes: int | None
    peak_reserved_us: float | None
    allocated_at_reserved_peak_bytes: int | None
    cached_free_at_reserved_peak_fraction: float | None
    fragmentation: Fragmentation | None
    capacity_bytes: int | None
    peak_fraction_of_capacity: float | None
    peak_basis: str
    freed_before_window: FreedBeforeWindow | None
    matching: AllocationMatching | None
    live_at_end: LiveAtEnd | None
    largest_allocations: list[Allocation]
    notes: list[str]


class MemoryPanel(Out, frozen=True, kw_only=True):
    """``summary.memory`` (``analysis.memory.memory_summary``): per device
    (``devices``), the allocated and reserved bytes over time, per step, growth per step
    (a leak), fragmentation (reserved growth beyond what allocations need), allocations
    still alive at the end, the largest allocations."""

    devices: list[MemoryDevice]
    main_device: str | None
    notes: list[str]
