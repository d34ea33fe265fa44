"""Kernel density (DESIGN.md, Metric definitions): how many kernels, how short, how
launch-bound, which names dominate, and which short-kernel sequences repeat.

Scope of every number in :func:`kernels_summary`:

* ``count``, ``graph_launched_count``, ``outside_steps`` and the ``launch`` counts
  (``launch_count``, ``mean_launch_us``, ``unlinked_kernels``) are over the **whole
  trace**;
* everything else (per-step values, short shares, histogram, top kernels, devices,
  fusion candidates, the launch-bound share) is over kernels **whose start lies in a
  step window** (``TraceIndex.steps``; without markers one pseudo-step spans the trace,
  so this is every kernel).

Times are summed kernel durations in µs: kernels that overlap (two streams) each count
in full, so a time can exceed the wall-clock span. A kernel is *short* when its duration
is below ``Thresholds.short_kernel_us``. Graph-launched kernels (one ``cudaGraphLaunch``,
many kernels) count in every metric like any other kernel; they are only left out of the
launch-bound share, which needs one launch call per kernel.

Cost: event tables are start-sorted, so the orders this panel needs (CPU ops by
thread then start, :func:`_thread_start_order`; kernels by device then start,
:func:`_device_start_order`) are one stable sort of a small dense key instead of a
multi-key ``lexsort`` (an order of magnitude slower on a large trace), launches are
grouped by thread with one sort (not a Python loop per launch), and sums per group are
exact ``bincount`` sums (:mod:`.group_sums`). Figures (a 250 MB trace, before and after)
are in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.group_sums import distinct, int_sums
from tb_kineto_insights.analysis.lost import gpu_lost_note
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.schema.kernels import (
    FusionCandidate,
    HistogramBin,
    KernelDevice,
    KernelLaunch,
    KernelRow,
    KernelsOutsideSteps,
    KernelsPanel,
    KernelStepCount,
)
from tb_kineto_insights.trace import model as m

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]

#: Edges (µs) of the duration histogram; bins are ``[lo, hi)``, the last is open.
HISTOGRAM_EDGES_US: tuple[float, ...] = (
    0,
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    1000,
    2000,
    5000,
    10000,
    float("inf"),
)
#: A fusion-candidate sequence longer than this is shown by its first names only
#: (``truncated``); it is still grouped by its full sequence.
FUSION_SHOWN_KERNELS = 16
#: Fusion candidates reported, largest total time first.
FUSION_TOP = 10

NO_KERNELS_NOTE = "no GPU kernels in this trace (CPU-only or unsupported device)"
NO_LINKS_NOTE = "kernels could not be linked to launches: launch metrics unavailable"
LAUNCH_BOUND_DENOMINATOR = (
    "kernels in step windows launched 1:1 by a runtime call found through their "
    "correlation id (graph-launched and unlinked kernels excluded)"
)


def kernels_summary(index: TraceIndex, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> KernelsPanel:
    """Kernel-density panel (``summary.kernels``) of one trace
    (:class:`~tb_kineto_insights.schema.kernels.KernelsPanel`).

    Fields (see the module docstring for which kernels each is over):
        count: every kernel in the trace.
        count_in_steps: kernels whose start lies in a step window.
        outside_steps: ``{count, time_us}`` of kernels starting in no step window.
        per_step: per step window ``{number, count, time_us, short_count}``; a kernel
            belongs to the window holding its start; ``time_us`` = summed durations.
        mean_per_step: ``count_in_steps`` / number of step windows (``None`` if none).
        short_threshold_us: the threshold (``Thresholds.short_kernel_us``).
        short_count_fraction: short kernels / kernels in steps (``None`` if none).
        short_time_fraction: summed duration of short kernels / summed duration of all
            kernels in steps (``None`` if that is 0).
        graph_launched_count: kernels whose launch call is a graph launch.
        compiled_kernel_fraction: share of kernels in steps made by torch.compile (Triton).
        duration_histogram: ``[{lo_us, hi_us, count, time_us}]`` over
            :data:`HISTOGRAM_EDGES_US`; bins are ``[lo, hi)``, ``hi_us`` ``None`` = ∞.
        launch: ``mean_launch_us`` (mean duration of kernel-launch runtime calls, µs,
            over every such call in the trace, graph launches included),
            ``launch_count``, ``one_to_one_count``, ``launch_bound_count``,
            ``launch_bound_fraction`` (kernels shorter than their own launch call /
            ``one_to_one_count``), ``launch_bound_denominator`` (that denominator in
            words), ``unlinked_kernels`` (kernels whose correlation id matches no
            runtime call), ``graph_launches`` / ``graph_launch_host_us`` /
            ``graph_kernels`` (CUDA graph replays starting in a host step window, their
            host time in µs, and the kernels in the step windows they launched: a
            replay's host cost).
        top_by_count / top_by_time: ``Thresholds.top_kernels`` rows of ``{name, full_name,
            count, time_us, mean_us, short_fraction, is_communication}`` grouped by
            :func:`~tb_kineto_insights.analysis.names.short_kernel_name`;
            ``full_name`` is the group's most frequent full name, ``short_fraction`` =
            short kernels / kernels of the group.
        fusion_candidates: see :func:`_fusion_candidates` (whole runs of consecutive
            short kernels repeated across steps).
        devices: ``{device id (str): {count, time_us, short_count_fraction}}``.
        notes: what is missing or left out, in words.
    """
    trace = index.trace
    k = trace.kernels
    rt = trace.runtime
    steps = index.steps
    short_ns = float(thresholds.short_kernel_us) * 1000.0

    dur = k.dur_ns
    step = steps.step_of(k.start_ns)
    in_step = step >= 0
    short = dur < short_ns
    short_in = short & in_step

    per_step = _step_counts(steps.number, step, in_step, short_in, dur)
    count_in_steps = int(in_step.sum())
    out_mask = ~in_step
    time_in_steps = int(dur[in_step].sum())

    launch, linked, graph = _launches(index, in_step)

    # --- short names ---------------------------------------------------------------
    groups = _short_groups(trace, k.name)

    top_by_count, top_by_time = _top_kernels(
        groups, in_step, dur, short, trace.names, thresholds.top_kernels
    )
    return KernelsPanel(
        count=len(k),
        count_in_steps=count_in_steps,
        outside_steps=KernelsOutsideSteps(
            count=int(out_mask.sum()),
            time_us=_us(int(dur[out_mask].sum())),
        ),
        per_step=per_step,
        mean_per_step=steps.per_step(count_in_steps),
        short_threshold_us=float(thresholds.short_kernel_us),
        short_count_fraction=_fraction(int(short_in.sum()), count_in_steps),
        short_time_fraction=_fraction(int(dur[short_in].sum()), time_in_steps),
        graph_launched_count=int(graph.sum()),
        compiled_kernel_fraction=_fraction(
            int(index.rows_where(m.KERNEL, nm.is_compiled_kernel)[in_step].sum()), count_in_steps
        ),
        duration_histogram=duration_histogram(dur[in_step]),
        launch=launch,
        top_by_count=top_by_count,
        top_by_time=top_by_time,
        fusion_candidates=_fusion_candidates(index, groups, step, short, thresholds),
        devices=_devices(k.device[in_step], dur[in_step], short[in_step]),
        notes=_notes(
            lost_note=gpu_lost_note(index),
            n_kernels=len(k),
            n_runtime=len(rt),
            n_linked=int(linked.sum()),
            n_graph=int(graph.sum()),
            n_outside=int(out_mask.sum()),
            has_markers=steps.has_markers,
        ),
    )


def _step_counts(
    number: I64, step: I64, in_step: Mask, short_in: Mask, dur: I64
) -> list[KernelStepCount]:
    """Per step window (``number``: the step numbers): the kernels starting in it, their
    summed duration and the short ones (``step``: each kernel's window, -1 for none)."""
    n_steps = int(number.size)
    step_in = step[in_step]
    per_count = np.bincount(step_in, minlength=n_steps)
    per_time = _int_sums(step_in, dur[in_step], n_steps)
    per_short = np.bincount(step[short_in], minlength=n_steps)
    return [
        KernelStepCount(
            number=int(number[i]),
            count=int(per_count[i]),
            time_us=_us(per_time[i]),
            short_count=int(per_short[i]),
        )
        for i in range(n_steps)
    ]


def _launches(index: TraceIndex, in_step: Mask) -> tuple[KernelLaunch, Mask, Mask]:
    """``launch`` (:func:`kernels_summary`), and per kernel row whether it is linked to
    its launch call and whether that call is a graph launch."""
    k = index.trace.kernels
    rt = index.trace.runtime
    dur = k.dur_ns
    launch_row = index.launch_row[m.KERNEL]
    linked = launch_row >= 0
    safe_row = np.where(linked, launch_row, 0)
    graph_row = index.rows_where(m.RUNTIME, nm.is_graph_launch)
    graph = (linked & graph_row[safe_row]) if len(rt) else np.zeros(len(k), dtype=np.bool_)
    kernels_per_row = np.bincount(launch_row[linked], minlength=len(rt))
    one_to_one = linked & ~graph
    if len(rt):
        one_to_one &= kernels_per_row[safe_row] == 1
    denominator = one_to_one & in_step
    launch_dur = rt.dur_ns[safe_row] if len(rt) else np.zeros(len(k), dtype=np.int64)
    launch_bound = denominator & (dur < launch_dur)
    is_launch_call = index.rows_where(m.RUNTIME, nm.is_kernel_launch)
    launch_count = int(is_launch_call.sum())
    n_denominator = int(denominator.sum())
    steps = index.steps
    hs, he = steps.host_windows() if steps.has_markers else (steps.start_ns, steps.end_ns)
    replays = graph_row & (iv.window_index(rt.start_ns, hs, he) >= 0) if len(rt) else graph_row
    launch = KernelLaunch(
        mean_launch_us=(_us(float(rt.dur_ns[is_launch_call].mean())) if launch_count else None),
        launch_count=launch_count,
        one_to_one_count=n_denominator,
        launch_bound_count=int(launch_bound.sum()),
        launch_bound_fraction=_fraction(int(launch_bound.sum()), n_denominator),
        launch_bound_denominator=LAUNCH_BOUND_DENOMINATOR,
        unlinked_kernels=int((~linked).sum()),
        graph_launches=int(replays.sum()),
        graph_launch_host_us=_us(int(rt.dur_ns[replays].sum())) if len(rt) else 0.0,
        graph_kernels=int((graph & in_step).sum()),
    )
    return launch, linked, graph


def _notes(
    *,
    n_kernels: int,
    n_runtime: int,
    n_linked: int,
    n_graph: int,
    n_outside: int,
    has_markers: bool,
    lost_note: str | None = None,
) -> list[str]:
    """What the panel could not measure or left out, in words."""
    if n_kernels == 0 and lost_note:
        return [lost_note]
    if n_kernels == 0:
        if n_runtime:
            return [
                f"{NO_KERNELS_NOTE}; {_plural(n_runtime, 'runtime call')} recorded, so the "
                "device's work may use an event category this tool does not read as kernels"
            ]
        return [NO_KERNELS_NOTE]
    notes: list[str] = []
    if n_linked == 0:
        notes.append(NO_LINKS_NOTE)
    elif n_linked < n_kernels:
        notes.append(
            f"{n_kernels - n_linked} of {_plural(n_kernels, 'kernel')} have no launch call "
            "in the trace (no runtime event with their correlation id): left out of the "
            "launch-bound share, and without a CPU op in fusion candidates"
        )
    if n_graph:
        notes.append(
            f"{_plural(n_graph, 'kernel')} launched by CUDA graph launches (one call, many "
            "kernels): counted everywhere, left out of the launch-bound share"
        )
    if n_outside:
        notes.append(
            f"{_plural(n_outside, 'kernel')} started outside every step window: counted in "
            "count and outside_steps only"
        )
    if not has_markers:
        notes.append(
            "no ProfilerStep markers: one pseudo-step spans the trace, so per-step values "
            "are whole-trace values"
        )
    return notes


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def duration_histogram(dur_ns: I64) -> list[HistogramBin]:
    """Kernel durations (int64 ns) in the bins of :data:`HISTOGRAM_EDGES_US`.

    Returns one :class:`~tb_kineto_insights.schema.kernels.HistogramBin` per bin
    ``[lo_us, hi_us)``: ``lo_us``, ``hi_us`` (None for +∞), ``count``, ``time_us``
    (summed durations in the bin).
    """
    finite = np.array(HISTOGRAM_EDGES_US[1:-1], dtype=np.float64) * 1000.0
    n_bins = len(HISTOGRAM_EDGES_US) - 1
    bins = np.searchsorted(finite, dur_ns, side="right")
    counts = np.bincount(bins, minlength=n_bins)
    times = _int_sums(bins, dur_ns, n_bins)
    rows = []
    for i in range(n_bins):
        hi = HISTOGRAM_EDGES_US[i + 1]
        rows.append(
            HistogramBin(
                lo_us=float(HISTOGRAM_EDGES_US[i]),
                hi_us=None if hi == float("inf") else float(hi),
                count=int(counts[i]),
                time_us=_us(times[i]),
            )
        )
    return rows


def _fusion_candidates(
    index: TraceIndex,
    groups: _Groups,
    step: I64,
    short: Mask,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[FusionCandidate]:
    """Repeated sequences of short kernels inside one step: candidates for fusion.

    Per device, kernels (all streams) in start order within each step window; a *run* is
    a maximal stretch of consecutive short kernels, broken by any non-short kernel and
    at step boundaries. Communication kernels (NCCL/RCCL) are left out of the sequence:
    they run on their own stream alongside compute and cannot be fused with it, so they
    neither join nor break a run. The unit is the **whole run** (sub-sequences of a
    longer run are not counted separately). A run's key is its sequence of short kernel
    names; keys of length ≥ ``fusion_min_length`` occurring ≥ ``fusion_min_repeats``
    times (over all steps and devices) are kept.

    Args:
        index: the trace index.
        groups: kernel rows grouped by short name.
        step: per kernel row, the step window holding its start (-1: none).
        short: per kernel row, shorter than ``thresholds.short_kernel_us``.
        thresholds: fusion_min_length, fusion_min_repeats.

    Returns:
        Up to :data:`FUSION_TOP` :class:`~tb_kineto_insights.schema.kernels.FusionCandidate`
        rows, largest ``total_time_us`` first: ``{kernels``
        (short names, the first :data:`FUSION_SHOWN_KERNELS` of them), ``length``
        (kernels per occurrence), ``truncated`` (``kernels`` is cut short),
        ``occurrences``, ``per_step`` (occurrences / step windows), ``total_time_us``
        (summed durations of every kernel of every occurrence), ``cpu_op`` (the most
        common innermost CPU op, on the launching thread, around the launch call of an
        occurrence's first kernel; ``None`` when no occurrence's launch is known)``}``.
    """
    min_len = max(int(thresholds.fusion_min_length), 1)
    min_rep = max(int(thresholds.fusion_min_repeats), 1)
    runs = _short_runs(index, groups, step, short, min_len)
    if runs is None:
        return []
    key_of_run, keys = _run_keys(runs)
    kept_runs = np.nonzero(key_of_run >= 0)[0]
    occ = np.bincount(key_of_run[kept_runs], minlength=len(keys))
    key_time = _int_sums(key_of_run[kept_runs], runs.time[kept_runs], len(keys))
    good = np.nonzero(occ >= min_rep)[0]
    if good.size == 0:
        return []
    lengths = np.array([len(keys[i]) for i in good.tolist()], dtype=np.int64)
    # largest time first; ties: more occurrences, longer, then key order (stable)
    top = good[np.lexsort((-lengths, -occ[good], -key_time[good]))][:FUSION_TOP]
    per_key = _key_ops(index, runs, key_of_run, top)

    n_steps = len(index.steps)  # > 0: every run lies in a step window
    out = []
    for key_id in top.tolist():
        key = keys[key_id]
        ops = per_key[key_id]
        best = min(ops.items(), key=lambda kv: (-kv[1], kv[0]))[0] if ops else None
        out.append(
            FusionCandidate(
                kernels=[groups.names[g] for g in key[:FUSION_SHOWN_KERNELS]],
                length=len(key),
                truncated=len(key) > FUSION_SHOWN_KERNELS,
                occurrences=int(occ[key_id]),
                per_step=int(occ[key_id]) / n_steps,
                total_time_us=_us(key_time[key_id]),
                cpu_op=best,
            )
        )
    return out


class _Runs(NamedTuple):
    """Runs of consecutive short kernels (:func:`_fusion_candidates`), over the kernel
    rows in ``order`` (per device, per step, by start; communication kernels left out):
    ``short`` and ``group`` (short-name group) per position, ``run_id`` per short
    position, and per run its first position, length, summed duration (ns) and whether it
    is long enough (``keep``)."""

    order: I64
    short: Mask
    group: I64
    run_id: I64
    first_pos: I64
    length: I64
    time: I64
    keep: Mask


def _short_runs(
    index: TraceIndex, groups: _Groups, step: I64, short: Mask, min_len: int
) -> _Runs | None:
    """The runs of short kernels in the step windows; ``None`` when no run reaches
    ``min_len`` kernels."""
    k = index.trace.kernels
    communication = groups.communication[groups.of_row] if groups.names else step < -1
    rows_in = np.nonzero((step >= 0) & ~communication)[0]
    if rows_in.size == 0:
        return None
    order = rows_in[_device_start_order(k.start_ns[rows_in], k.device[rows_in])]
    s = short[order]
    st = step[order]
    dv = k.device[order]
    n = order.size
    boundary = np.ones(n, dtype=np.bool_)
    boundary[1:] = (st[1:] != st[:-1]) | (dv[1:] != dv[:-1])
    prev_short = np.zeros(n, dtype=np.bool_)
    prev_short[1:] = s[:-1]
    run_start = s & (boundary | ~prev_short)
    if not run_start.any():
        return None
    run_id = np.cumsum(run_start) - 1  # valid where s
    first_pos = np.nonzero(run_start)[0]
    run_len = np.bincount(run_id[s], minlength=first_pos.size)
    run_time = _int_sums(run_id[s], k.dur_ns[order][s], first_pos.size)
    keep = run_len >= min_len
    if not keep.any():
        return None
    gid = groups.of_row[order]
    return _Runs(order, s, gid, run_id, first_pos, run_len, run_time, keep)


def _run_keys(runs: _Runs) -> tuple[I64, list[tuple[int, ...]]]:
    """Per run, the id of its key (its sequence of short-name groups; -1 for a run not
    kept), and the keys."""
    first_pos, run_len, keep, gid = runs.first_pos, runs.length, runs.keep, runs.group
    # group runs by their name sequence: a padded matrix for short runs, tuples for long
    key_of_run = np.full(first_pos.size, -1, dtype=np.int64)
    keys: list[tuple[int, ...]] = []
    small = np.nonzero(keep & (run_len <= FUSION_SHOWN_KERNELS))[0]
    if small.size:
        mat = np.full((small.size, FUSION_SHOWN_KERNELS), -1, dtype=np.int64)
        row_of_run = np.full(first_pos.size, -1, dtype=np.int64)
        row_of_run[small] = np.arange(small.size)
        pos = np.nonzero(runs.short)[0]
        rid = runs.run_id[pos]
        row = row_of_run[rid]
        sel = row >= 0
        mat[row[sel], (pos - first_pos[rid])[sel]] = gid[pos[sel]]
        uniq, inverse = np.unique(mat, axis=0, return_inverse=True)
        key_of_run[small] = inverse.reshape(-1)
        keys = [tuple(int(x) for x in r if x >= 0) for r in uniq]
    big = np.nonzero(keep & (run_len > FUSION_SHOWN_KERNELS))[0]
    if big.size:
        seen: dict[tuple[int, ...], int] = {}
        for r in big.tolist():  # long runs are few (each holds > 16 kernels)
            a = int(first_pos[r])
            key = tuple(gid[a : a + int(run_len[r])].tolist())
            if key not in seen:
                seen[key] = len(keys)
                keys.append(key)
            key_of_run[r] = seen[key]
    return key_of_run, keys


def _key_ops(index: TraceIndex, runs: _Runs, key_of_run: I64, top: I64) -> dict[int, Counter[str]]:
    """Per key of ``top``: how often each CPU op launched the first kernel of one of its
    occurrences."""
    # CPU op of each occurrence of the chosen keys: the run's first kernel's launch
    chosen = np.isin(key_of_run, top)
    chosen_runs = np.nonzero(chosen)[0]
    first_rows = runs.order[runs.first_pos[chosen_runs]]
    launch_row = index.launch_row[m.KERNEL][first_rows]
    op_names = _cpu_op_names(index, launch_row)
    per_key: dict[int, Counter[str]] = {int(t): Counter() for t in top.tolist()}
    for key_id, op in zip(key_of_run[chosen_runs].tolist(), op_names, strict=True):
        if op is not None:
            per_key[key_id][op] += 1
    return per_key


def innermost_ops(cpu: m.EventTable, pid: I64, tid: I64, t_ns: I64) -> I64:
    """Row in ``cpu`` of the innermost op on thread ``(pid[i], tid[i])`` whose interval
    ``[start, end)`` contains ``t_ns[i]``; -1 where none does.

    "Innermost" is the latest-starting containing op (equal starts: the shorter one),
    which for properly nested ops is the deepest. Per thread: ``searchsorted`` for the
    ops starting at or before each time, then a sparse table of running maximum end
    times finds the latest of them still open, in O((n + q) log n) numpy operations.
    """
    out = np.full(t_ns.size, -1, dtype=np.int64)
    if t_ns.size == 0 or len(cpu) == 0:
        return out
    order = _thread_start_order(cpu)
    op_pid, op_tid = cpu.pid[order], cpu.tid[order]
    change = np.ones(order.size, dtype=np.bool_)
    change[1:] = (op_pid[1:] != op_pid[:-1]) | (op_tid[1:] != op_tid[:-1])
    seg_lo = np.nonzero(change)[0]
    seg_hi = np.append(seg_lo[1:], order.size)
    segments = {
        (int(op_pid[a]), int(op_tid[a])): (int(a), int(b))
        for a, b in zip(seg_lo.tolist(), seg_hi.tolist(), strict=True)
    }
    starts = cpu.start_ns[order]
    ends = cpu.end_ns[order]
    # queries grouped by thread with one stable sort (not a Python loop per query)
    q_order = np.lexsort((tid, pid))
    q_pid, q_tid = pid[q_order], tid[q_order]
    q_change = np.ones(q_order.size, dtype=np.bool_)
    q_change[1:] = (q_pid[1:] != q_pid[:-1]) | (q_tid[1:] != q_tid[:-1])
    q_lo = np.nonzero(q_change)[0]
    q_hi = np.append(q_lo[1:], q_order.size)
    for qa, qb in zip(q_lo.tolist(), q_hi.tolist(), strict=True):  # one per thread
        seg = segments.get((int(q_pid[qa]), int(q_tid[qa])))
        if seg is None:
            continue
        a, b = seg
        q = q_order[qa:qb]
        found = _latest_open(starts[a:b], ends[a:b], t_ns[q])
        ok = found >= 0
        out[q[ok]] = order[a + found[ok]]
    return out


def _device_start_order(start: I64, device: I64) -> I64:
    """``np.lexsort((start, device))``: by device, then start, then position. Kernel rows
    come start-sorted (the table's order), so one stable sort by a dense device key does
    it (a radix sort of ``uint16``); unsorted input takes the ``lexsort``."""
    n = int(start.size)
    if n > 1 and not bool((start[1:] >= start[:-1]).all()):
        return np.lexsort((start, device)).astype(np.int64)
    devices = distinct(device)
    if devices.size <= 1:
        return np.arange(n, dtype=np.int64)
    key = np.searchsorted(devices, device)
    if devices.size < 2**16:
        key = key.astype(np.uint16)
    return np.argsort(key, kind="stable").astype(np.int64)


def _thread_start_order(cpu: m.EventTable) -> I64:
    """Rows of a start-sorted table ordered by ``(pid, tid, start_ns, -dur_ns, row)``:
    the same permutation as ``np.lexsort((-dur_ns, start_ns, tid, pid))``, built from
    the table's own start order. Rows with equal starts (few, or none with ns
    timestamps) are sorted by ``-dur_ns`` among themselves; then one stable sort by a
    dense thread key (``uint16`` when there are < 65536 (pid, tid) combinations: a radix
    sort), an order of magnitude faster than the 4-key ``lexsort`` on a large trace
    (see ``benchmarks/RESULTS.md``)."""
    n = len(cpu)
    start, dur = cpu.start_ns, cpu.dur_ns
    base = np.arange(n, dtype=np.int64)
    if n > 1 and not bool((start[1:] >= start[:-1]).all()):  # not start-sorted: general case
        return np.lexsort((-dur, start, cpu.tid, cpu.pid)).astype(np.int64)
    tie = np.zeros(n, dtype=np.bool_)
    if n > 1:
        eq = start[1:] == start[:-1]
        tie[1:] = eq
        tie[:-1] |= eq
    if tie.any():  # equal-start runs are contiguous: sort inside them by -dur
        rows = np.nonzero(tie)[0]
        base[rows] = rows[np.lexsort((-dur[rows], start[rows]))]
    pids, tids = distinct(cpu.pid), distinct(cpu.tid)
    if pids.size == 1 and tids.size == 1:
        return base
    key = np.searchsorted(pids, cpu.pid) * tids.size + np.searchsorted(tids, cpu.tid)
    key_base = key[base]
    if pids.size * tids.size < 2**16:
        key_base = key_base.astype(np.uint16)
    return base[np.argsort(key_base, kind="stable")]


def _latest_open(starts: I64, ends: I64, t: I64) -> I64:
    """For ``starts`` sorted: the largest ``j`` with ``starts[j] <= t`` and
    ``ends[j] > t``, per query; -1 if none."""
    pos = np.searchsorted(starts, t, side="right")  # ops [0, pos) start at or before t
    levels = [ends]
    width = 1
    while width * 2 <= ends.size:  # levels[k][j] = max(ends[j : j + 2**k])
        prev = levels[-1]
        levels.append(np.maximum(prev[:-width], prev[width:]))
        width *= 2
    for k in range(len(levels) - 1, -1, -1):
        size = 1 << k
        lo = pos - size
        ok = lo >= 0
        idx = np.nonzero(ok)[0]
        block_max = levels[k][lo[idx]]
        skip = block_max <= t[idx]  # every op in [lo, pos) closed before t
        pos[idx[skip]] -= size
    j = pos - 1
    valid = j >= 0
    valid[valid] = ends[j[valid]] > t[valid]
    return np.where(valid, j, -1).astype(np.int64)


def _cpu_op_names(index: TraceIndex, launch_row: I64) -> list[str | None]:
    """Name of the innermost CPU op around each launch call (``None`` if unknown)."""
    trace = index.trace
    rt = trace.runtime
    out: list[str | None] = [None] * launch_row.size
    linked = np.nonzero(launch_row >= 0)[0]
    if linked.size == 0:
        return out
    rows = launch_row[linked]
    ops = innermost_ops(trace.cpu_ops, rt.pid[rows], rt.tid[rows], rt.start_ns[rows])
    names = trace.cpu_ops.name
    for i, op in zip(linked.tolist(), ops.tolist(), strict=True):
        if op >= 0:
            out[i] = trace.names[int(names[op])]
    return out


class _Groups(NamedTuple):
    """Kernel rows grouped by short name; groups are numbered in name order."""

    of_row: I64  # group per kernel row
    names: list[str]  # short name per group
    full_name: I64  # per group: name id of its most frequent full name (ties: lowest id)
    communication: Mask  # per group: some full name is a communication kernel


def _short_groups(trace: m.Trace, name_ids: npt.NDArray[np.int32]) -> _Groups:
    """Group kernel rows by :func:`~tb_kineto_insights.analysis.names.short_kernel_name`
    (one Python call per distinct kernel name, not per kernel)."""
    if name_ids.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return _Groups(empty, [], empty.copy(), np.zeros(0, dtype=np.bool_))
    uniq, inverse, counts = np.unique(name_ids, return_inverse=True, return_counts=True)
    full_names = [trace.names[int(i)] for i in uniq]
    shorts = [nm.short_kernel_name(n) for n in full_names]
    group_names = sorted(set(shorts))
    position = {s: g for g, s in enumerate(group_names)}
    group_of_uniq = np.array([position[s] for s in shorts], dtype=np.int64)
    # most frequent full name per group: sort by (group, -count), take the first
    by = np.lexsort((-counts, group_of_uniq))
    first = np.ones(by.size, dtype=np.bool_)
    first[1:] = group_of_uniq[by][1:] != group_of_uniq[by][:-1]
    full = np.zeros(len(group_names), dtype=np.int64)
    full[group_of_uniq[by][first]] = uniq[by][first]
    comm_uniq = np.fromiter(
        (nm.is_communication_kernel(n) for n in full_names), dtype=np.bool_, count=uniq.size
    )
    comm = np.zeros(len(group_names), dtype=np.bool_)
    comm[group_of_uniq[comm_uniq]] = True
    return _Groups(group_of_uniq[inverse.reshape(-1)], group_names, full, comm)


def _top_kernels(
    groups: _Groups, sel: Mask, dur: I64, short: Mask, names: list[str], top_n: int
) -> tuple[list[KernelRow], list[KernelRow]]:
    """``(top_by_count, top_by_time)`` over the kernel rows where ``sel``."""
    n_groups = len(groups.names)
    group = groups.of_row[sel]
    count = np.bincount(group, minlength=n_groups)
    time = _int_sums(group, dur[sel], n_groups)
    n_short = np.bincount(group[short[sel]], minlength=n_groups)
    present = np.nonzero(count > 0)[0]

    def row(g: int) -> KernelRow:
        c = int(count[g])
        return KernelRow(
            name=groups.names[g],
            full_name=names[int(groups.full_name[g])],
            count=c,
            time_us=_us(time[g]),
            mean_us=_us(time[g]) / c,
            short_fraction=int(n_short[g]) / c,
            is_communication=bool(groups.communication[g]),
        )

    # ties broken by the other measure, then by name (groups are in name order)
    by_count = present[np.lexsort((present, -time[present], -count[present]))][:top_n]
    by_time = present[np.lexsort((present, -count[present], -time[present]))][:top_n]
    return [row(int(g)) for g in by_count], [row(int(g)) for g in by_time]


def _devices(device: I64, dur: I64, short: Mask) -> dict[str, KernelDevice]:
    """Per device id (as a string): ``count``, ``time_us``, ``short_count_fraction``."""
    if device.size == 0:
        return {}
    ids, inverse = np.unique(device, return_inverse=True)
    inverse = inverse.reshape(-1)
    count = np.bincount(inverse, minlength=ids.size)
    time = _int_sums(inverse, dur, ids.size)
    n_short = np.bincount(inverse[short], minlength=ids.size)
    return {
        str(int(d)): KernelDevice(
            count=int(count[i]),
            time_us=_us(time[i]),
            short_count_fraction=int(n_short[i]) / int(count[i]),
        )
        for i, d in enumerate(ids.tolist())
    }


def _int_sums(group: I64, values: I64, size: int) -> I64:
    """Exact int64 sums of ``values`` per ``group`` (0..size-1)."""
    return int_sums(group, values, size)


def _us(ns: int | float | np.integer[Any] | np.floating[Any]) -> float:
    """ns → µs as a plain float."""
    return float(ns) / 1000.0


def _fraction(part: int, whole: int) -> float | None:
    """``part / whole`` as a float, ``None`` when ``whole`` is 0."""
    return part / whole if whole else None


__all__ = [
    "HISTOGRAM_EDGES_US",
    "FUSION_SHOWN_KERNELS",
    "FUSION_TOP",
    "LAUNCH_BOUND_DENOMINATOR",
    "NO_KERNELS_NOTE",
    "NO_LINKS_NOTE",
    "kernels_summary",
    "duration_histogram",
    "innermost_ops",
]
