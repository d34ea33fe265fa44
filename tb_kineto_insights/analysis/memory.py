"""``summary.memory``: allocated and reserved memory per device, growth, live allocations.

Read from the ``[memory]`` instant events (``profile_memory=True``). Each event carries
``Bytes`` (the change: positive = allocation, negative = free) and, in traces from
PyTorch ≥ 1.10 or so, ``Total Allocated`` / ``Total Reserved`` (the allocator's totals
*after* the event) and ``Addr`` (the block's address).

Per device (each ``(Device Type, Device Id)`` pair: ``CUDA:0``, ``CPU``, ``MTIA:3``, or
``type 42:0`` for a number c10 does not name):

- ``series``: allocated and reserved bytes after each event over time (µs since
  ``index.origin_ns``: the first step start or the trace start, whichever is earlier),
  down-sampled to at most ``Thresholds.memory_series_points`` points per series; in each
  of equal-time buckets the lowest and the highest sample are kept, so every peak and
  trough survives.
- Steps are **host windows** (:meth:`StepWindows.host_windows`: each CPU
  ``ProfilerStep#N`` range, cut at the next marker's start), not the GPU-extended windows
  of the other panels. A ``[memory]`` event carries the *host* time of the allocation
  call: in a GPU-bound loop the host runs steps ahead of the GPU (``ProfilerStep#4``
  starts on the CPU while step 2's kernels still run), so the GPU-extended windows
  overlap the host's next steps, and once tiled they would put every allocation in the
  first step and leave the later steps' start/end flat.
- ``per_step``: allocated bytes at the host window's start (the level just before it: the
  last total at ``ts < start``), the peak inside the closed window ``[start, end]`` and at
  its end (the last total at ``ts ≤ end``); the reserved peak likewise.
- ``growth``: least-squares slope of step-end allocated bytes over the step number (bytes
  per step), its r² and whether it is *steady* (enough steps, slope and r² over the
  thresholds). Only complete steps count: in a file cut short, the steps whose host
  events after the cut are lost (``analysis.lost``: ``incomplete_steps``) are left out.
- allocations matched to frees by ``Addr``: an allocation (``Bytes > 0``) is freed by the
  next event at the same address when that event is a free. A free whose address has no
  earlier event frees a block allocated before the trace window: counted in
  ``freed_before_window``, never as negative live memory. ``live_at_end``: allocations
  with no later event at their address, grouped by the op that made them (the innermost
  ``cpu_op`` on the same pid/tid whose range contains the allocation) with its input shapes
  when ``record_shapes`` was on. ``largest_allocations``: the biggest ones, freed or not.
- ``cached_free_at_reserved_peak_fraction`` = 1 − allocated / reserved at the reserved
  peak (of the moments reserved sits at its peak, the one with the most allocated): the
  share of reserved memory the caching allocator holds as cached free blocks. That is
  the cache doing its job, not fragmentation.
- ``fragmentation``: allocations the cache could not serve although it held enough
  free bytes. Event ``i`` (``i-1`` the previous event on the device; the first event has
  no "before" and never counts) is a *new segment* when it allocates (``Bytes[i] > 0``)
  and ``Total Reserved`` rises at it by at least the request, ``reserved[i] −
  reserved[i-1] ≥ Bytes[i]`` (none of the cached bytes served it; with
  ``expandable_segments`` the free tail of a segment is extended instead and reserved
  grows by less); it counts as fragmentation when, also, ``Bytes[i]`` is more than
  ``Thresholds.fragmentation_min_request_bytes`` (1 MiB: smaller requests come from the
  small pool, whose segments are separate) and the cached free bytes just before,
  ``reserved[i-1] − (allocated[i] − Bytes[i])``, were at least ``Bytes[i]``. Keys:
  ``new_segment_events``, ``events`` (the fragmentation ones), their
  ``requested_bytes``, ``reserved_growth_bytes`` and ``min_cached_free_before_bytes``;
  ``per_step`` (host windows): count, bytes requested, reserved growth;
  ``steady_state_steps``: the steps after the first profiled one that have any (the
  first may still be warming the cache up), ``steady_state_events`` and
  ``steady_state_reserved_growth_bytes`` their count and reserved growth (the numbers
  the diagnosis and the Memory panel state); ``reserved_growth_bytes_per_step``: their
  reserved growth in the steps after the first / the number of those steps;
  ``allocated_peak_growth_bytes_per_step``: (last step's allocated peak − first step's)
  / the same number; ``excess_reserved_growth_bytes_per_step``: the first minus the
  second (minus 0 when the peak falls; never below 0), the reserved growth live memory
  does not need. A leak fragments the cache too (kept blocks split cached ones), but
  then reserved grows as the allocated peak does and the excess is about 0.
  ``largest``: the biggest events with their time, step, bytes and op. An event with a
  device-memory release (a ``cudaFree``/``cuMemFree``/``hipFree`` runtime call) between
  it and the event before does not count (``stale_events_ignored``): the release
  (``torch.cuda.empty_cache()``, an out-of-memory retry) emits no ``[memory]`` event, so
  ``reserved[i-1]`` still holds the released segments and the "cached free" bytes no
  longer exist. Nor does any event of a step in which the cache released memory
  (``release_steps``: ``Total Reserved`` fell between two of its events, or a
  ``cudaFree`` ran in it; ``release_events_ignored`` counts them): new segments there
  re-fill what was released (churn: ``allocator_churn``), not requests that free
  blocks failed to fit. Two caveats make
  it say *more* than there is: the allocator keeps free blocks per CUDA stream, so bytes
  cached for another stream count as free here; a ``torch.cuda.empty_cache()`` between
  two events is invisible (reserved drops with no event), so the next event's "before"
  is too high. ``None`` without ``Total Reserved``.
- ``peak_fraction_of_capacity`` = peak reserved (peak allocated when reserved is unknown)
  / ``deviceProperties.totalGlobalMem`` of the device with that ``id`` (CUDA/HIP only).

Old traces lack ``Addr`` or the totals: ``notes`` say what is missing; without totals the
allocated curve is the running sum of ``Bytes`` from 0 before the first event
(``allocated_from_deltas: true``: relative, not absolute) and reserved is unknown.

Cost: the series are downsampled in O(n) (:func:`downsample`: samples are time-sorted,
so buckets are contiguous runs and their extremes come from ``reduceat``, not from a
2-key ``lexsort``), distinct threads come from ``bincount``
(:func:`.group_sums.distinct`). Figures: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.enclosing_op import innermost_op
from tb_kineto_insights.analysis.group_sums import distinct_pairs
from tb_kineto_insights.analysis.lost import file_end_note, lost_data
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.schema.memory import (
    Allocation,
    AllocationMatching,
    Fragmentation,
    FragmentationStep,
    FreedBeforeWindow,
    LiveAtEnd,
    LiveByOp,
    MemoryDevice,
    MemoryGrowth,
    MemoryPanel,
    MemorySeries,
    MemorySeriesPoints,
    MemoryStep,
    NewSegmentEvent,
)
from tb_kineto_insights.trace import model as m

I64 = npt.NDArray[np.int64]

#: Rows in ``largest_allocations`` per device.
LARGEST_ALLOCATIONS = 10
#: Groups listed in ``live_at_end.by_op`` per device (largest bytes first).
LIVE_GROUPS = 20
#: Longest ``input_shapes`` string kept (longer ones are cut with ``…``).
MAX_SHAPES_CHARS = 300
#: Fragmentation events listed in ``fragmentation.largest`` per device.
FRAGMENTATION_LARGEST = 5
#: Device types whose ``Device Id`` indexes ``deviceProperties`` (CUDA, HIP).
_GPU_DEVICE_TYPES = frozenset({1, 6})
_MIB = 1024.0 * 1024.0


def device_name(device_type: int, device_id: int) -> str:
    """``CUDA:0``, ``CPU`` (id < 0), ``MTIA:3``; ``type 42:0`` for unnamed type numbers."""
    base = m.DEVICE_TYPE_NAMES.get(device_type, f"type {device_type}")
    return base if device_id < 0 else f"{base}:{device_id}"


# -- helpers ---------------------------------------------------------------------------


def downsample(t: I64, v: I64, max_points: int) -> I64:
    """Indices (sorted, i.e. in time order) of at most ``max_points`` samples of the
    series ``(t, v)`` (``t`` sorted): the first and the last sample, plus the lowest and
    the highest sample of each of ``(max_points - 2) // 2`` equal-time buckets, so the
    global maximum and minimum are always kept."""
    n = int(t.size)
    if n <= max_points:
        return np.arange(n, dtype=np.int64)
    buckets = max((max_points - 2) // 2, 1)
    span = int(t[-1]) - int(t[0])
    rel = (t - t[0]).astype(np.float64)
    bucket = np.minimum((rel * buckets / (span + 1)).astype(np.int64), buckets - 1)
    if n > 1 and not bool((bucket[1:] >= bucket[:-1]).all()):  # t not sorted after all
        # within each bucket by value (ties: earlier first), buckets in order
        order = np.lexsort((v, bucket))
        b_sorted = bucket[order]
        first = np.ones(n, dtype=np.bool_)
        first[1:] = b_sorted[1:] != b_sorted[:-1]
        last = np.ones(n, dtype=np.bool_)
        last[:-1] = b_sorted[1:] != b_sorted[:-1]
        keep = np.concatenate([order[first], order[last], [0, n - 1]])
    else:
        # t sorted: buckets are contiguous runs; per run the earliest lowest sample and
        # the latest highest one (what a sort by (bucket, value, index) puts first and
        # last), in O(n) instead of a 2-key lexsort (benchmarks/RESULTS.md)
        run_lo = np.concatenate([[0], np.flatnonzero(bucket[1:] != bucket[:-1]) + 1])
        run = np.repeat(np.arange(run_lo.size), np.diff(np.append(run_lo, n)))
        lowest = np.flatnonzero(v == np.minimum.reduceat(v, run_lo)[run])
        highest = np.flatnonzero(v == np.maximum.reduceat(v, run_lo)[run])
        r_lo, r_hi = run[lowest], run[highest]
        first_lowest = lowest[np.concatenate([[True], r_lo[1:] != r_lo[:-1]])]
        last_highest = highest[np.concatenate([r_hi[1:] != r_hi[:-1], [True]])]
        keep = np.concatenate([first_lowest, last_highest, [0, n - 1]])
    out = np.unique(keep).astype(np.int64)
    if out.size > max_points:  # max_points < 4: fall back to the extremes only
        out = np.unique(np.array([int(np.argmin(v)), int(np.argmax(v))], dtype=np.int64))
    return out


def _series(t_us: npt.NDArray[np.float64], v: I64, max_points: int, t: I64) -> MemorySeriesPoints:
    keep = downsample(t, v, max_points)
    return MemorySeriesPoints(t_us=t_us[keep].tolist(), bytes=v[keep].tolist())


def _shapes(ops: m.EventTable, row: int) -> str | None:
    dims = ops.input_dims.get(row)
    if dims is None:
        return None
    # default=str: in an exact-timestamp trace the numbers of a loosely decoded
    # ``Input Dims`` are Decimals, on which json.dumps alone raises TypeError (an input
    # of benchmarks/fuzz_structured.py, replayed by tests/test_fuzz_structured.py)
    text = json.dumps(dims, separators=(", ", ": "), default=str)
    return text if len(text) <= MAX_SHAPES_CHARS else text[: MAX_SHAPES_CHARS - 1] + "…"


def _fit(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]
) -> tuple[float | None, float | None]:
    """Least-squares slope of ``y`` over ``x`` and r² (``None`` when undefined: fewer than
    two points, all ``x`` equal; r² also when ``y`` is constant)."""
    if x.size < 2:
        return None, None
    xm, ym = float(x.mean()), float(y.mean())
    dx, dy = x - xm, y - ym
    sxx = float((dx * dx).sum())
    if sxx == 0.0:
        return None, None
    slope = float((dx * dy).sum()) / sxx
    ss_tot = float((dy * dy).sum())
    if ss_tot == 0.0:
        return slope, None
    resid = dy - slope * dx
    r2 = 1.0 - float((resid * resid).sum()) / ss_tot
    return slope, max(0.0, min(1.0, r2))


# -- one device ------------------------------------------------------------------------


class _Device:
    """The events of one device, in time order (file order among equal timestamps)."""

    def __init__(self, mem: m.MemoryTable, rows: I64) -> None:
        self.ts = mem.ts_ns[rows]
        self.bytes = mem.bytes[rows]
        self.addr = mem.addr[rows]
        self.pid = mem.pid[rows]
        self.tid = mem.tid[rows]
        alloc_tot = mem.total_allocated_bytes[rows]
        res_tot = mem.total_reserved_bytes[rows]
        self.has_totals = bool((alloc_tot >= 0).all())
        self.missing_totals = int((alloc_tot < 0).sum())
        if self.has_totals:
            self.allocated = alloc_tot
            # the level before the first event: the first total minus its own change
            self.base = int(alloc_tot[0]) - int(self.bytes[0])
        else:
            self.allocated = np.cumsum(self.bytes).astype(np.int64)
            self.base = 0
        self.reserved: I64 | None = res_tot if bool((res_tot >= 0).all()) else None
        self.has_addr = self.addr != -1


#: ``base`` of :func:`_level_before`: an int (allocated) or None (reserved)
_Base = TypeVar("_Base", int, None)


def _level_before(
    d: _Device, values: I64, base: _Base, t: I64, side: Literal["left", "right"]
) -> list[int | _Base]:
    """Value of a step series at each time in ``t``: the last value at ``ts < t``
    (``side='left'``) or ``ts ≤ t`` (``side='right'``); ``base`` before the first event."""
    idx = np.searchsorted(d.ts, t, side=side) - 1
    return [int(values[i]) if i >= 0 else base for i in idx.tolist()]


def _memory_per_step(d: _Device, index: TraceIndex) -> list[MemoryStep]:
    steps = index.host_steps
    h_start, h_end = steps.host_windows()
    start_vals = _level_before(d, d.allocated, d.base, h_start, "left")
    end_vals = _level_before(d, d.allocated, d.base, h_end, "right")
    res_start = (
        _level_before(d, d.reserved, None, h_start, "left")
        if d.reserved is not None
        else [None] * len(steps)
    )
    lo = np.searchsorted(d.ts, h_start, side="left")
    hi = np.searchsorted(d.ts, h_end, side="right")
    out = []
    for i in range(len(steps)):
        a, b = int(lo[i]), int(hi[i])
        cands = [v for v in (start_vals[i], end_vals[i]) if v is not None]
        if b > a:
            cands.append(int(d.allocated[a:b].max()))
        res_peak: int | None = None
        if d.reserved is not None:
            rc = [v for v in (res_start[i],) if v is not None]
            if b > a:
                rc.append(int(d.reserved[a:b].max()))
            res_peak = max(rc) if rc else None
        out.append(
            MemoryStep(
                number=int(steps.number[i]),
                start_bytes=start_vals[i],
                peak_bytes=max(cands) if cands else None,
                end_bytes=end_vals[i],
                peak_reserved_bytes=res_peak,
                events=b - a,
            )
        )
    return out


def _growth(per_step: list[MemoryStep], th: Thresholds) -> MemoryGrowth:
    used = [s for s in per_step if s.end_bytes is not None]
    x = np.array([s.number for s in used], dtype=np.float64)
    y = np.array([s.end_bytes for s in used], dtype=np.float64)
    slope, r2 = _fit(x, y)
    steady = (
        slope is not None
        and r2 is not None
        and len(used) >= th.memory_growth_min_steps
        and r2 >= th.memory_growth_min_r2
        and slope >= th.memory_growth_min_bytes_per_step
    )
    return MemoryGrowth(
        bytes_per_step=slope,
        r2=r2,
        steps_used=len(used),
        steady=bool(steady),
        total_bytes=int(y[-1] - y[0]) if y.size >= 2 else None,
    )


def _fragmentation(
    d: _Device,
    index: TraceIndex,
    t_us: npt.NDArray[np.float64],
    per_step_memory: list[MemoryStep],
    th: Thresholds,
) -> tuple[Fragmentation | None, I64]:
    """``fragmentation`` of one device (see the module docstring) and the local indices
    of its :data:`FRAGMENTATION_LARGEST` largest events (their ``op`` is filled in by the
    caller); ``(None, [])`` without ``Total Reserved``."""
    none = np.zeros(0, dtype=np.int64)
    if d.reserved is None or not d.has_totals:
        return None, none
    steps = index.host_steps
    h_start, h_end = steps.host_windows()
    res = d.reserved
    nbytes = d.bytes[1:]
    grew = res[1:] - res[:-1] >= nbytes
    free_before = res[:-1] - (d.allocated[1:] - nbytes)
    new_segment = (nbytes > 0) & grew
    hit = new_segment & (nbytes > th.fragmentation_min_request_bytes) & (free_before >= nbytes)
    # a release between the two events (cudaFree: torch.cuda.empty_cache(), an OOM
    # retry) leaves the earlier Total Reserved stale: the "cached free" bytes are gone
    rt = index.trace.runtime
    frees = index.rows_where(m.RUNTIME, nm.is_allocator_free)
    free_t = np.sort(rt.start_ns[frees])
    released = np.searchsorted(free_t, d.ts[1:], side="right") > np.searchsorted(
        free_t, d.ts[:-1], side="right"
    )
    stale = hit & released
    hit &= ~released
    # a step in which the cache released segments (reserved fell, or a cudaFree ran):
    # its new segments re-fill what was released (churn), whatever the cached bytes
    # said before; none of its events is fragmentation
    release_step, released_bytes = _release_steps(d, free_t, h_start, h_end)
    event_step = iv.window_index(d.ts[1:], h_start, h_end)
    in_release = (event_step >= 0) & release_step[np.maximum(event_step, 0)]
    churn = hit & in_release
    hit &= ~in_release
    idx = np.nonzero(hit)[0] + 1  # local event index
    growth = (res[idx] - res[idx - 1]).astype(np.int64)
    requested = d.bytes[idx]
    cached = free_before[idx - 1]
    step_of = iv.window_index(d.ts[idx], h_start, h_end)
    per_step = []
    for k in range(len(steps)):
        sel = step_of == k
        per_step.append(
            FragmentationStep(
                number=int(steps.number[k]),
                events=int(sel.sum()),
                requested_bytes=int(requested[sel].sum()),
                reserved_growth_bytes=int(growth[sel].sum()),
            )
        )
    later = per_step[1:] if steps.has_markers else []
    steady = [p.number for p in later if p.events > 0]
    in_steady = [p for p in later if p.events > 0]
    rate = sum(p.reserved_growth_bytes for p in later) / len(later) if later else None
    peaks = [p.peak_bytes for p in per_step_memory]
    peak_rate: float | None = None
    if later and peaks[0] is not None and peaks[-1] is not None:
        peak_rate = (peaks[-1] - peaks[0]) / len(later)
    excess: float | None = None
    if rate is not None and peak_rate is not None:
        excess = max(rate - max(peak_rate, 0.0), 0.0)
    top = np.argsort(-requested, kind="stable")[:FRAGMENTATION_LARGEST]
    largest = [
        NewSegmentEvent(
            t_us=float(t_us[idx[j]]),
            step=int(steps.number[step_of[j]]) if step_of[j] >= 0 else None,
            requested_bytes=int(requested[j]),
            cached_free_before_bytes=int(cached[j]),
            reserved_before_bytes=int(res[idx[j] - 1]),
            reserved_growth_bytes=int(growth[j]),
            op=None,
        )
        for j in top.tolist()
    ]
    return Fragmentation(
        events=int(idx.size),
        new_segment_events=int(new_segment.sum()),
        requested_bytes=int(requested.sum()),
        reserved_growth_bytes=int(growth.sum()),
        min_cached_free_before_bytes=int(cached.min()) if idx.size else None,
        per_step=per_step,
        steady_state_steps=steady,
        steady_state_events=sum(p.events for p in in_steady),
        steady_state_reserved_growth_bytes=sum(p.reserved_growth_bytes for p in in_steady),
        reserved_growth_bytes_per_step=rate,
        allocated_peak_growth_bytes_per_step=peak_rate,
        excess_reserved_growth_bytes_per_step=excess,
        largest=largest,
        stale_events_ignored=int(stale.sum()),
        release_steps=[int(n) for n in steps.number[release_step].tolist()],
        release_events_ignored=int(churn.sum()),
        released_bytes=released_bytes,
    ), idx[top]


def _release_steps(
    d: _Device, free_t: I64, h_start: I64, h_end: I64
) -> tuple[npt.NDArray[np.bool_], int]:
    """Per host step window: the caching allocator released device memory in it,
    ``Total Reserved`` fell between two of its events or a device-memory free call
    (``cudaFree``…, ``free_t`` sorted) started in it; and the bytes by which Total
    Reserved fell inside the windows."""
    out = np.zeros(h_start.size, dtype=np.bool_)
    released = 0
    if d.reserved is not None and d.ts.size > 1:
        fell = np.flatnonzero(np.diff(d.reserved) < 0) + 1
        k = iv.window_index(d.ts[fell], h_start, h_end)
        out[k[k >= 0]] = True
        inside = fell[k >= 0]
        released = int((d.reserved[inside - 1] - d.reserved[inside]).sum())
    k = iv.window_index(free_t, h_start, h_end)
    out[k[k >= 0]] = True
    return out, released


def _match(d: _Device) -> dict[str, Any]:
    """Match allocations to frees by address (see the module docstring).

    Returns ``alloc`` (local indices of allocations), ``freed_at`` (local index of the
    freeing event or -1), ``live`` (bool: no later event at the address), ``known``
    (bool: the allocation had an address), and counters.
    """
    n = int(d.ts.size)
    pos = np.arange(n, dtype=np.int64)
    usable = d.has_addr & (d.bytes != 0)
    sel = pos[usable]
    order = sel[np.lexsort((sel, d.addr[sel]))]  # by address, then time order
    a, b = d.addr[order], d.bytes[order]
    same_next = np.zeros(order.size, dtype=np.bool_)
    same_next[:-1] = a[1:] == a[:-1]
    nxt_bytes = np.zeros(order.size, dtype=np.int64)
    nxt_bytes[:-1] = b[1:]
    nxt_pos = np.full(order.size, -1, dtype=np.int64)
    nxt_pos[:-1] = order[1:]
    same_prev = np.zeros(order.size, dtype=np.bool_)
    same_prev[1:] = same_next[:-1]
    prev_bytes = np.zeros(order.size, dtype=np.int64)
    prev_bytes[1:] = b[:-1]

    is_alloc = b > 0
    freed = is_alloc & same_next & (nxt_bytes < 0)
    reused = is_alloc & same_next & (nxt_bytes > 0)
    live = is_alloc & ~same_next
    is_free = b < 0
    before_window = is_free & ~same_prev
    unmatched_free = is_free & same_prev & (prev_bytes < 0)

    freed_at = np.full(n, -1, dtype=np.int64)
    freed_at[order[freed]] = nxt_pos[freed]
    live_all = np.zeros(n, dtype=np.bool_)
    live_all[order[live]] = True
    return {
        "freed_at": freed_at,
        "live": live_all,
        "known": usable,
        "freed_before_window": FreedBeforeWindow(
            count=int(before_window.sum()),
            bytes=int(-b[before_window].sum()),
        ),
        "matching": AllocationMatching(
            allocations_freed=int(freed.sum()),
            allocations_live_at_end=int(live.sum()),
            reused_without_free=int(reused.sum()),
            unmatched_frees=int(unmatched_free.sum()),
            events_without_addr=int((~d.has_addr).sum()),
        ),
    }


def _device_summary(
    index: TraceIndex, mem: m.MemoryTable, rows: I64, dtype: int, did: int, th: Thresholds
) -> MemoryDevice:
    """The panel's entry of device ``(dtype, did)`` from its memory events ``rows``
    (module docstring)."""
    trace = index.trace
    ops = trace.cpu_ops
    d = _Device(mem, rows)
    name = device_name(dtype, did)
    notes: list[str] = []
    n = int(d.ts.size)
    t_us = (d.ts - index.origin_ns).astype(np.float64) / 1000.0
    addr_missing = _missing_fields_notes(d, notes)

    pts = th.memory_series_points
    series = MemorySeries(
        allocated=_series(t_us, d.allocated, pts, d.ts),
        reserved=_series(t_us, d.reserved, pts, d.ts) if d.reserved is not None else None,
        points_in=n,
    )
    per_step = _memory_per_step(d, index)
    growth = _complete_growth(index, per_step, th, notes)
    peaks = _peaks(d, t_us, trace, dtype, did)

    # allocations ↔ frees, ops that made them
    match = _match(d)
    alloc_idx = np.nonzero(d.bytes > 0)[0]
    live_idx = np.nonzero(match["live"])[0]
    top = alloc_idx[np.argsort(-d.bytes[alloc_idx], kind="stable")[:LARGEST_ALLOCATIONS]]
    frag, frag_top = _fragmentation(d, index, t_us, per_step, th)
    need = np.unique(np.concatenate([live_idx, top, frag_top]))
    op_rows = np.full(n, -1, dtype=np.int64)
    op_rows[need] = innermost_op(ops, d.pid[need], d.tid[need], d.ts[need])
    # allocations are host events: host windows (module docstring)
    step_of = index.host_steps.host_step_of(d.ts)
    if frag is not None:
        frag = _with_op_names(frag, frag_top, op_rows, trace)
    largest = _largest_allocations(index, d, t_us, top, op_rows, step_of, match)
    live = _live_at_end(index, d, live_idx, op_rows, step_of)

    return MemoryDevice(
        device=name,
        device_type=dtype,
        device_type_name=m.DEVICE_TYPE_NAMES.get(dtype),
        device_id=did,
        event_count=n,
        allocation_count=int(alloc_idx.size),
        free_count=int((d.bytes < 0).sum()),
        has_totals=d.has_totals,
        has_addresses=addr_missing == 0,
        allocated_from_deltas=not d.has_totals,
        series=series,
        per_step=per_step,
        growth=growth,
        peak_allocated_bytes=peaks.peak_alloc,
        peak_allocated_us=(
            float(t_us[peaks.peak_i]) if peaks.peak_alloc > d.base else float(t_us[0])
        ),
        peak_reserved_bytes=peaks.peak_res,
        peak_reserved_us=peaks.peak_res_us,
        allocated_at_reserved_peak_bytes=peaks.alloc_at_res_peak,
        cached_free_at_reserved_peak_fraction=peaks.cached_frac,
        fragmentation=frag,
        capacity_bytes=peaks.capacity,
        peak_fraction_of_capacity=peaks.cap_fraction,
        peak_basis=peaks.basis,
        freed_before_window=match["freed_before_window"] if addr_missing < n else None,
        matching=match["matching"] if addr_missing < n else None,
        live_at_end=live if addr_missing < n else None,
        largest_allocations=largest,
        notes=notes,
    )


def _missing_fields_notes(d: _Device, notes: list[str]) -> int:
    """Notes on the totals and addresses the device's events lack; returns how many
    events have no ``Addr``."""
    n = int(d.ts.size)
    if not d.has_totals:
        notes.append(
            "no Total Allocated / Total Reserved on "
            + ("any event" if d.missing_totals == n else f"{d.missing_totals} of {n} events")
            + " (older PyTorch): allocated is the running sum of Bytes from 0 before the "
            "first event (relative, not absolute; frees of blocks allocated before the "
            "trace push it below 0), and reserved memory, fragmentation and the share of "
            "device memory are unknown"
        )
    elif d.reserved is None:
        notes.append("no Total Reserved: reserved memory and fragmentation are unknown")
    addr_missing = int((~d.has_addr).sum())
    if addr_missing:
        notes.append(
            "no Addr on "
            + ("any event" if addr_missing == n else f"{addr_missing} of {n} events")
            + " (older PyTorch): allocations cannot be matched to their frees, so live "
            "allocations at the end and allocation lifetimes are unknown"
        )
    return addr_missing


def _complete_growth(
    index: TraceIndex, per_step: list[MemoryStep], th: Thresholds, notes: list[str]
) -> MemoryGrowth:
    """:func:`_growth` over the complete steps (a file cut short loses the host events
    of its last steps: :func:`.lost.lost_data`), with a note on the cut."""
    cut = lost_data(index)
    incomplete = set(cut.incomplete_steps)
    growth = _growth([p for p in per_step if p.number not in incomplete], th)
    if cut.file_ends_at_byte is not None:
        notes.append(
            f"{file_end_note(index, cut.file_ends_at_byte)}: events written after it are "
            "lost"
            + (
                "; step(s) "
                + ", ".join(f"#{k}" for k in sorted(incomplete))
                + " lack their host events after the cut and are left out of the growth"
                if incomplete
                else ""
            )
        )
    return growth


class _Peaks(NamedTuple):
    """A device's peaks (bytes; times in µs like ``t_us``), cached free share and
    capacity (module docstring)."""

    peak_i: int
    peak_alloc: int
    peak_res: int | None
    peak_res_us: float | None
    alloc_at_res_peak: int | None
    cached_frac: float | None
    capacity: int | None
    basis: str
    cap_fraction: float | None


def _peaks(
    d: _Device, t_us: npt.NDArray[np.float64], trace: m.Trace, dtype: int, did: int
) -> _Peaks:
    """Peaks, cached free bytes at the reserved peak, and the share of the device's
    ``totalGlobalMem`` (CUDA/HIP only)."""
    # peaks, cached free bytes, capacity
    peak_i = int(np.argmax(d.allocated))
    peak_alloc = max(int(d.allocated[peak_i]), d.base)
    peak_res: int | None = None
    cached_frac: float | None = None
    alloc_at_res_peak: int | None = None
    peak_res_us: float | None = None
    if d.reserved is not None:
        peak_res = int(d.reserved.max())
        at_peak = np.nonzero(d.reserved == peak_res)[0]
        alloc_at_res_peak = int(d.allocated[at_peak].max())
        peak_res_us = float(t_us[at_peak[0]])
        cached_frac = 1.0 - alloc_at_res_peak / peak_res if peak_res > 0 else None
    capacity: int | None = None
    if dtype in _GPU_DEVICE_TYPES:
        for prop in trace.health.device_properties:
            mem_total = m.int_in_range(prop.get("totalGlobalMem"), 1, m.INT64_MAX)
            if m.int_in_range(prop.get("id"), 0, m.INT64_MAX) == did and mem_total is not None:
                capacity = mem_total
                break
    basis = "reserved" if peak_res is not None else "allocated"
    peak_for_capacity = peak_res if peak_res is not None else peak_alloc
    cap_fraction = peak_for_capacity / capacity if capacity and d.has_totals else None
    return _Peaks(
        peak_i,
        peak_alloc,
        peak_res,
        peak_res_us,
        alloc_at_res_peak,
        cached_frac,
        capacity,
        basis,
        cap_fraction,
    )


def _op_name(trace: m.Trace, row: int) -> str | None:
    """Name of the CPU op at ``row``, ``None`` for -1."""
    return trace.names[int(trace.cpu_ops.name[row])] if row >= 0 else None


def _with_op_names(
    frag: Fragmentation, frag_top: I64, op_rows: I64, trace: m.Trace
) -> Fragmentation:
    """``frag`` with the op of each of its largest events (event rows ``frag_top``)."""
    return msgspec.structs.replace(
        frag,
        largest=[
            msgspec.structs.replace(event, op=_op_name(trace, int(op_rows[row])))
            for row, event in zip(frag_top.tolist(), frag.largest, strict=True)
        ],
    )


def _largest_allocations(
    index: TraceIndex,
    d: _Device,
    t_us: npt.NDArray[np.float64],
    top: I64,
    op_rows: I64,
    step_of: I64,
    match: dict[str, Any],
) -> list[Allocation]:
    """The allocations at the event rows ``top``, freed or not, with their op, step and
    lifetime."""
    ops = index.trace.cpu_ops
    largest = []
    for i in top.tolist():
        row = int(op_rows[i])
        f = int(match["freed_at"][i])
        known = bool(match["known"][i])
        s = int(step_of[i])
        largest.append(
            Allocation(
                bytes=int(d.bytes[i]),
                op=_op_name(index.trace, row),
                input_shapes=_shapes(ops, row) if row >= 0 else None,
                step=int(index.host_steps.number[s]) if s >= 0 else None,
                t_us=float(t_us[i]),
                freed=(f >= 0) if known else None,
                lifetime_us=(int(d.ts[f]) - int(d.ts[i])) / 1000.0 if f >= 0 else None,
            )
        )
    return largest


def _live_at_end(
    index: TraceIndex, d: _Device, live_idx: I64, op_rows: I64, step_of: I64
) -> LiveAtEnd:
    """The allocations never freed (event rows ``live_idx``), grouped by op and input
    shapes, largest bytes first."""
    ops = index.trace.cpu_ops
    groups: dict[tuple[str | None, str | None], dict[str, Any]] = {}
    if live_idx.size:
        live_rows = op_rows[live_idx]
        uniq, inv = np.unique(live_rows, return_inverse=True)
        counts = np.bincount(inv)
        sizes = np.bincount(inv, weights=d.bytes[live_idx].astype(np.float64))
        live_steps = step_of[live_idx]
        for k, row in enumerate(uniq.tolist()):
            key = (_op_name(index.trace, row), _shapes(ops, row) if row >= 0 else None)
            g = groups.setdefault(
                key,
                {"op": key[0], "input_shapes": key[1], "count": 0, "bytes": 0, "_steps": set()},
            )
            g["count"] += int(counts[k])
            g["bytes"] += int(sizes[k])
            st = live_steps[inv == k]
            g["_steps"].update(int(index.host_steps.number[s]) for s in np.unique(st[st >= 0]))
    by_op = sorted(groups.values(), key=lambda g: (-g["bytes"], -g["count"], str(g["op"])))
    return LiveAtEnd(
        count=int(live_idx.size),
        bytes=int(d.bytes[live_idx].sum()),
        by_op=[
            LiveByOp(
                op=g["op"],
                input_shapes=g["input_shapes"],
                count=g["count"],
                bytes=g["bytes"],
                steps=sorted(g["_steps"]),
            )
            for g in by_op[:LIVE_GROUPS]
        ],
        groups=len(by_op),
    )


def memory_summary(index: TraceIndex, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> MemoryPanel:
    """``summary.memory`` (:class:`~tb_kineto_insights.schema.memory.MemoryPanel`): one
    entry per device in ``devices`` (sorted by device type, then id), ``main_device``
    (the non-CPU device with the highest allocated peak, else the first) and ``notes``.
    Bytes are bytes; times are µs since ``index.origin_ns``; see the module docstring for
    every definition and denominator.
    """
    mem = index.trace.memory
    notes: list[str] = []
    if len(mem) == 0:
        notes.append("no [memory] events: profile with profile_memory=True to see memory")
        return MemoryPanel(devices=[], main_device=None, notes=notes)
    if not index.host_steps.has_markers:
        notes.append("no ProfilerStep markers: one pseudo-step, so no growth per step")
    devices: list[MemoryDevice] = []
    for dtype, did in distinct_pairs(mem.device_type, mem.device_id):
        rows = np.nonzero((mem.device_type == dtype) & (mem.device_id == did))[0]
        dev = _device_summary(index, mem, rows, int(dtype), int(did), thresholds)
        devices.append(dev)
        notes.extend(f"{dev.device}: {note}" for note in dev.notes)
    gpu = [d for d in devices if d.device_type != 0]
    main = max(gpu or devices, key=lambda d: d.peak_allocated_bytes)
    return MemoryPanel(devices=devices, main_device=main.device, notes=notes)
