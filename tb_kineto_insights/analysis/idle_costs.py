"""What the GPU's idle costs, by the host activity that caused it: the launch-bound idle
before short kernels (:func:`launch_bound_gaps`, the cost of ``small_kernel_flood``), the
optimizer step (:func:`optimizer_cost`, with how it runs: :func:`optimizer_mode`) and the
CPU ops holding the ``cpu_ops`` idle (:func:`cpu_ops_top`).
"""

from __future__ import annotations

import re

import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.group_sums import int_sums
from tb_kineto_insights.analysis.host_activity import CAUSE_NAMES
from tb_kineto_insights.analysis.idle_activity import (
    DeviceEvents,
    ThreadActivity,
    busy_in,
    inside,
    next_event,
)
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.schema.idle import OpIdle, OptimizerKernel, OptimizerStepCost
from tb_kineto_insights.trace import model as m

#: Causes during which a host is on the launch path: in a traced op or runtime call.
LAUNCH_PATH_CAUSES: tuple[str, ...] = ("optimizer_step", "launching", "cpu_ops")


def launch_bound_gaps(
    index: TraceIndex,
    events: DeviceEvents,
    gaps: iv.Intervals,
    amounts: np.ndarray,
    sync_opened: np.ndarray,
    max_gap_ns: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Which gaps are *launch-bound* before a short kernel, and how much of each.

    A gap ``[s, e)`` counts when all hold: the work that closes it (starts at ``e``) is
    a short compute kernel; that kernel's launch call (found by correlation id) is a
    kernel launch, not a graph launch, and had not returned when the gap opened
    (``launch end > s``: the GPU ran dry while the host was still issuing it); the gap
    was not opened by a host synchronization; and it is shorter than ``max_gap_ns``
    (``Thresholds.launch_bound_max_gap_us``: per-op host overhead of eager PyTorch is
    tens of µs; a longer wait before one kernel is a stretch of other host work, such
    as DDP's forward hooks or torch.compile's guards, that fusing kernels would not
    remove). Its launch-bound part is the idle time during which the launching thread
    was on the launch path (:data:`LAUNCH_PATH_CAUSES`); idle while loading data or
    outside traced ops is not launch overhead.

    Args:
        index: the trace index.
        events: the device's GPU events (:func:`.idle_activity.gpu_events`).
        gaps: the device's idle gaps (starts, ends in ns), sorted.
        amounts: (n_gaps, len(CAUSE_NAMES)) idle ns per cause.
        sync_opened: per gap, opened by a host synchronization.
        max_gap_ns: longest gap that can be launch-bound, ns.

    Returns:
        ``(idle_ns, closing_event)``: per gap, the launch-bound idle (int64 ns, 0 when
        the gap does not count), and the index in ``events`` of the short kernel that
        closes each counted gap (-1 elsewhere).
    """
    gap_s, gap_e = gaps
    out = np.zeros(gap_s.size, dtype=np.int64)
    closing = np.full(gap_s.size, -1, dtype=np.int64)
    if gap_s.size == 0 or events.start_ns.size == 0:
        return out, closing
    rt = index.trace.runtime
    nxt = next_event(events, gap_e)
    cand = nxt >= 0
    cand[cand] = events.short_kernel[nxt[cand]]
    cand &= ~sync_opened & ((gap_e - gap_s) < max_gap_ns)
    row = np.full(gap_s.size, -1, dtype=np.int64)
    row[cand] = events.launch_row[nxt[cand]]
    cand &= row >= 0
    if not cand.any():
        return out, closing
    launch_ok = index.rows_where(m.RUNTIME, nm.is_kernel_launch) & ~index.rows_where(
        m.RUNTIME, nm.is_graph_launch
    )
    r = row[cand]
    cand[cand] = launch_ok[r] & (rt.end_ns[r] > gap_s[cand])
    cols = [CAUSE_NAMES.index(c) for c in LAUNCH_PATH_CAUSES]
    out[cand] = amounts[cand][:, cols].sum(axis=1)
    cand &= out > 0
    closing[cand] = nxt[cand]
    return out, closing


_FUSED_KERNEL = re.compile(r"fused", re.IGNORECASE)


def optimizer_mode(
    kernel_names: list[str], kernels_per_range: float, counts: list[int] | None = None
) -> str:
    """How an optimizer step runs, from the kernels it launches (demangled names;
    ``counts``: how many kernels bear each name, one each when not given, so that a
    name is tested once however many kernels bear it):

    * ``compiled``: most are Inductor (Triton) kernels (a ``torch.compile``'d step);
    * ``fused``: else, a kernel whose name says fused (``FusedAdamMathFunctor``,
      ``fused_adam``...: ``torch.optim.Adam(fused=True)``, apex ``FusedAdam``);
    * ``foreach``: else, any ``multi_tensor_apply`` kernel (``foreach=True``: a few
      kernels per tensor group; a distributed optimizer adds its own GEMMs and
      collectives around them);
    * ``per_parameter``: none of those and at least 2 kernels per optimizer range (the
      ``for p in params`` loop: a small kernel chain per parameter tensor);
    * ``none``: no kernel at all (an optimizer on the CPU, or none traced).

    ``kernels_per_range``: kernels per ``Optimizer.step#…`` range.
    """
    if not kernel_names:
        return "none"
    counts = [1] * len(kernel_names) if counts is None else counts
    compiled = sum(c for k, c in zip(kernel_names, counts, strict=True) if nm.is_compiled_kernel(k))
    if compiled * 2 >= sum(counts):
        return "compiled"  # Inductor names its kernels triton_poi_fused_...: first
    if any(_FUSED_KERNEL.search(k) for k in kernel_names):
        return "fused"
    if any("multi_tensor_apply" in k for k in kernel_names):
        return "foreach"
    return "per_parameter" if kernels_per_range >= 2 else "none"


def optimizer_cost(
    index: TraceIndex,
    activity: ThreadActivity,
    dev: int,
    events: DeviceEvents,
    windows: iv.Intervals,
    closing_ev: np.ndarray,
    idle_ns: int,
    launch_bound_idle_ns: int,
    th: Thresholds,
) -> OptimizerStepCost:
    """:class:`~tb_kineto_insights.schema.idle.OptimizerStepCost` of device ``dev``.

    GPU work is *launched from the optimizer* when its launch call (correlation) starts
    inside an ``Optimizer.step#…`` / ``Optimizer.zero_grad#…`` range of its own thread;
    communication kernels (a sharded optimizer's collectives) are left out: their time
    is the communication panel's claim.
    ``busy_us`` is the wall time those events cover inside the step windows,
    ``idle_us`` the ``optimizer_step`` idle cause (``idle_ns``), ``host_us`` the summed
    length of the ranges inside the host windows; per-step values divide by the steps.
    """
    steps = index.steps
    total_ns = steps.total_ns
    rt = index.trace.runtime
    in_opt_rt = np.zeros(len(rt), dtype=np.bool_)
    pid, tid, s, e = activity.parts["optimizer_step"]
    host = iv.union(*steps.host_windows()) if steps.has_markers else windows
    host_ns = 0
    if s.size:
        threads = np.unique(np.stack([pid, tid], axis=1), axis=0)
        for p, t in threads.tolist():
            sel = (pid == p) & (tid == t)
            opt = iv.union(s[sel], e[sel])
            host_ns += iv.total(iv.intersect(opt, host))
            on = (rt.pid == p) & (rt.tid == t)
            in_opt_rt[on] = inside(opt, rt.start_ns[on])
    n_ranges = 0
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        tab = index.trace.tables[kind]
        is_step = index.rows_where(kind, nm.is_optimizer_step)
        n_ranges += int((iv.window_index(tab.start_ns[is_step], *host) >= 0).sum())
    row = events.launch_row
    from_opt = np.zeros(row.size, dtype=np.bool_)
    ok = row >= 0
    from_opt[ok] = in_opt_rt[row[ok]]
    from_opt &= ~events.communication  # collectives are the communication panel's claim
    busy_ns = busy_in(events, from_opt, windows)
    lb_kernel_ns = busy_in(events, from_opt & closing_ev, windows)
    kt = index.trace.tables[m.KERNEL]
    krow = index.launch_row[m.KERNEL]
    ksel = (kt.device == dev) & (krow >= 0)
    ksel[ksel] = in_opt_rt[krow[ksel]]
    ksel &= iv.window_index(kt.start_ns, *windows) >= 0
    ksel &= ~index.rows_where(m.KERNEL, nm.is_communication_kernel)
    names = kt.name[ksel]
    count = int(ksel.sum())
    top: list[OptimizerKernel] = []
    distinct: list[str] = []
    per_name: list[int] = []
    if count:
        ids, counts = np.unique(names, return_counts=True)
        distinct = [index.trace.names[int(i)] for i in ids.tolist()]
        per_name = counts.tolist()
        durs = np.bincount(np.searchsorted(ids, names), weights=kt.dur_ns[ksel].astype(float))
        by_name: dict[str, list[float]] = {}
        for i, c, d in zip(ids.tolist(), counts.tolist(), durs.tolist(), strict=True):
            short = nm.short_kernel_name(index.trace.names[int(i)])
            acc = by_name.setdefault(short, [0.0, 0.0])
            acc[0] += c
            acc[1] += d
        for name, (c, d) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[: th.idle_top_ops]:
            top.append(
                OptimizerKernel(
                    name=name,
                    count_per_step=steps.mean_per_step(c),
                    us_per_step=steps.mean_per_step(d / 1000.0),
                )
            )
    mode = optimizer_mode(distinct, count / n_ranges if n_ranges else 0.0, per_name)
    cost_ns = idle_ns + busy_ns
    return OptimizerStepCost(
        ranges_per_step=steps.mean_per_step(n_ranges),
        host_us=host_ns / 1000.0,
        idle_us=idle_ns / 1000.0,
        busy_us=busy_ns / 1000.0,
        cost_us=cost_ns / 1000.0,
        cost_fraction_of_step_time=cost_ns / total_ns if total_ns else 0.0,
        idle_fraction_of_step_time=idle_ns / total_ns if total_ns else 0.0,
        kernels_per_step=steps.mean_per_step(count),
        mode=mode,
        top_kernels=top,
        launch_bound_idle_us=launch_bound_idle_ns / 1000.0,
        launch_bound_kernel_us=lb_kernel_ns / 1000.0,
    )


def cpu_ops_top(
    index: TraceIndex,
    parts: list[tuple[tuple[int, int], iv.Intervals]],
    total_ns: int,
    k: int,
) -> list[OpIdle]:
    """The ops holding the ``cpu_ops`` idle: per launching thread, its idle attributed to
    ``cpu_ops`` (``parts``) is split over the thread's *outermost* CPU ops (a ``cpu_op``
    range not inside another one of that thread: ``aten::conv2d``, not the
    ``aten::cudnn_convolution`` inside it), summed by op name, the ``k`` largest."""
    t = index.trace.tables[m.CPU_OP]
    hit_names: list[np.ndarray] = []  # per thread, in order: name ids of the ops hit
    hit_ns: list[np.ndarray] = []  # and their idle (ns)
    for thread, part in parts:
        if part[0].size == 0:
            continue
        rows = np.nonzero((t.pid == thread[0]) & (t.tid == thread[1]))[0]
        if rows.size == 0:
            continue
        st = t.start_ns[rows]
        en = st + t.dur_ns[rows]
        order = np.lexsort((-en, st))
        st, en, nid = st[order], en[order], t.name[rows][order]
        prev_max = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], en[:-1]]))
        top = st >= prev_max
        ov = iv.overlap_per_window(part, st[top], en[top])
        hit = ov > 0
        hit_names.append(nid[top][hit])
        hit_ns.append(ov[hit])
    if not hit_names:
        return []
    ids, first, inverse = np.unique(
        np.concatenate(hit_names), return_index=True, return_inverse=True
    )
    sums = int_sums(inverse.ravel(), np.concatenate(hit_ns).astype(np.int64), ids.size)
    # the most idle first; a tie: the name hit first (threads in ``parts``' order)
    order = np.lexsort((first, -sums))[:k]
    best = list(zip(ids[order].tolist(), sums[order].tolist(), strict=True))
    return [
        OpIdle(
            name=index.trace.names[i],
            us=ns / 1000.0,
            fraction_of_step_time=ns / total_ns if total_ns else 0.0,
        )
        for i, ns in best
    ]
