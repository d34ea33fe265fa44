"""What each recommended fix changes in the step's dependency graph: the
:class:`~tb_kineto_insights.analysis.replay.Change` each rule asks the replay about
(:func:`~.base.fix_prediction`). One function per fix; each states its assumption, the
one number a prediction rests on besides the trace.

* **Host time removed** (:func:`host_time_removed`): a DataLoader's fetch (workers load
  ahead: the step no longer waits), untraced host work (moved off the training
  thread), the profiler's own activities. The work of the rest of the step is kept.
* **Syncs removed** (:func:`syncs_removed`): the host's sync calls and their waits for
  the GPU go; the host keeps launching (what removing ``.item()``, a ``synchronize()``
  or a blocking copy does).
* **Allocator calls removed** (:func:`allocator_calls_removed`): ``cudaMalloc`` /
  ``cudaFree`` calls and their waits go (the cache kept).
* **Faster kernels** (:func:`kernels_faster`): the kernels of some op groups take a
  share of their time (the efficiency rules' share: the group's FLOPs at the rate its
  fix reaches).
  :func:`kernel_rows_faster`: given kernels keep a share of their time (attention's
  kernels replaced by SDPA's at what its flash backend reaches).
* **Launch costs removed** (:func:`launches_fused`): the launch calls of the replaced
  kernels, the host's op dispatch around them and the GPU's gaps between them go;
  their work is kept (CUDA graphs: ``torch.compile(mode="reduce-overhead")``). For the
  optimizer step, :func:`optimizer_fused`: its host time shrinks to
  :data:`FUSED_OPTIMIZER_HOST_SHARE`.
* **Host ranges removed** (:func:`tuning_removed`, :func:`compiles_removed`): cuDNN's
  benchmark inside its convolutions (but the chosen kernel), torch.compile's compiles
  inside the steps: the host time, calls and GPU work inside them go.
* **Pinned copies** (:func:`copies_pinned`): pageable copies at the pinned copies'
  bandwidth, no longer blocking the host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.group_sums import distinct_pairs
from tb_kineto_insights.analysis.replay import Change
from tb_kineto_insights.analysis.step_graph import ALLOCATOR, LAUNCH, MARKER, SYNC
from tb_kineto_insights.trace import model as m

if TYPE_CHECKING:
    from tb_kineto_insights.analysis.what_if import WhatIf

ChangeOf = Callable[["WhatIf"], "Change | None"]

#: The share of a per-parameter optimizer loop's host time a fused (or foreach)
#: optimizer keeps: its multi-tensor kernels still take the parameter lists. Measured on
#: ``sample_logs/optimizer_per_param`` → ``optimizer_fused``: the host time inside
#: ``Optimizer.step`` on the critical path went from 31.0 to 1.6 ms per step (0.051).
FUSED_OPTIMIZER_HOST_SHARE = 0.05
#: A pageable copy's speed-up when pinned, where the trace has no pinned copy to measure
#: (pinned host memory lets the copy engine DMA straight from it; pageable copies stage
#: through a pinned bounce buffer at about half the rate on PCIe Gen4/Gen5 hosts).
PINNED_SPEEDUP_DEFAULT = 2.0


def host_time_removed(klass: str) -> ChangeOf:
    """The host time of gap class ``klass`` (:data:`~.step_graph.GAP_CLASSES`) removed."""

    def change(wi: WhatIf) -> Change | None:
        return Change(gap_keep={klass: 0.0})

    return change


def frame_time_removed(frame: str) -> ChangeOf:
    """The host time inside Python frame ``frame`` (Kineto's ``file(line): function``,
    its ``python_function`` ranges with their callees) removed from the host's time
    between the step's calls: the function moved off the training thread, or done every
    N steps."""

    def change(wi: WhatIf) -> Change | None:
        index, g = wi.index, wi.graph
        table = index.trace.tables[m.PYTHON]
        ids = [i for i, n in enumerate(index.trace.names) if n == frame]
        if not len(table) or not ids:
            return None
        rows = np.isin(table.name, np.asarray(ids, dtype=table.name.dtype))
        ranges = iv.union(table.start_ns[rows], table.end_ns[rows])
        end = g.host_start + g.origin_ns
        removed = iv.overlap_per_window(ranges, end - g.gap, end)
        return Change(gap_removed_ns=removed) if removed.any() else None

    return change


def together(*fixes: ChangeOf) -> ChangeOf:
    """Several changes applied at once (:meth:`~.replay.Change.plus`)."""

    def change(wi: WhatIf) -> Change | None:
        found = [c for c in (f(wi) for f in fixes) if c is not None]
        if not found:
            return None
        out = found[0]
        for c in found[1:]:
            out = out.plus(c)
        return out

    return change


def syncs_removed() -> ChangeOf:
    """No host synchronisation inside the step: every sync call (``*Synchronize``, a
    synchronous copy or memset) gone, with its wait, and a copy's launch call no longer
    waiting for its copy (the copy itself stays, asynchronous)."""

    def change(wi: WhatIf) -> Change | None:
        g = wi.graph
        syncs = g.kind == SYNC
        waits = (g.awaited >= 0) & np.isin(g.kind, [SYNC, LAUNCH])
        if not (syncs.any() or waits.any()):
            return None
        return Change(own_keep=np.where(syncs, 0.0, 1.0), waits_removed=waits)

    return change


def allocator_calls_removed() -> ChangeOf:
    """``cudaMalloc``/``cudaFree`` calls removed, with their waits."""

    def change(wi: WhatIf) -> Change | None:
        calls = wi.graph.kind == ALLOCATOR
        if not calls.any():
            return None
        return Change(own_keep=np.where(calls, 0.0, 1.0), waits_removed=calls)

    return change


def kernels_faster(groups: Sequence[tuple[tuple[str, str, str], float]]) -> ChangeOf:
    """The kernels of each efficiency group ``(op, shapes, dtype)`` keep the given share
    of their time."""

    def change(wi: WhatIf) -> Change | None:
        keep = np.ones(wi.graph.op_start.size, dtype=np.float64)
        for key, share in groups:
            rows = wi.kernel_groups.get(key)
            if rows is None or rows.size == 0:
                continue
            keep[wi.ops_of_rows(m.KERNEL, rows)] = max(0.0, min(1.0, share))
        return Change(op_keep=keep) if (keep < 1.0).any() else None

    return change


def kernel_rows_faster(rows: npt.NDArray[np.int64], share: float) -> ChangeOf:
    """The kernels of ``rows`` (kernel table rows) keep ``share`` of their time (a
    fused replacement of their ops: ``attention_not_fused``'s SDPA estimate over their
    measured time); their launches and the host's time stay."""

    def change(wi: WhatIf) -> Change | None:
        if rows.size == 0:
            return None
        ops = wi.ops_of_rows(m.KERNEL, rows)
        if not ops.any():
            return None
        return Change(op_keep=np.where(ops, max(0.0, min(1.0, share)), 1.0))

    return change


def _inside(wi: WhatIf, predicate: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
    """Per chain event: it starts inside a CPU op or annotation whose name satisfies
    ``predicate`` (on any thread of the step)."""
    index = wi.index
    starts, ends = [], []
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        t = index.trace.tables[kind]
        rows = index.rows_where(kind, predicate)
        starts.append(t.start_ns[rows])
        ends.append(t.end_ns[rows])
    ranges = iv.union(np.concatenate(starts), np.concatenate(ends))
    at = wi.graph.host_start + wi.graph.origin_ns
    return iv.window_index(at, *ranges) >= 0


def optimizer_fused() -> ChangeOf:
    """A foreach/fused optimizer: inside ``Optimizer.step``, the host time and the launch
    calls keep :data:`FUSED_OPTIMIZER_HOST_SHARE`, and the optimizer's kernels lose their
    launch gaps (their work is kept)."""

    def change(wi: WhatIf) -> Change | None:
        g = wi.graph
        inside = _inside(wi, nm.is_optimizer_step)
        if not inside.any():
            return None
        share = FUSED_OPTIMIZER_HOST_SHARE
        host = g.gap_class["optimizer"] + g.gap_class["cpu_ops"]
        removed = np.where(inside, host * (1.0 - share), 0.0)
        launch = inside & (g.kind == LAUNCH)
        ops = np.zeros(g.op_start.size, dtype=np.bool_)
        own = g.op_launcher >= 0
        ops[own] = launch[g.op_launcher[own]]
        return Change(
            gap_removed_ns=np.round(removed).astype(np.int64),
            own_keep=np.where(launch, share, 1.0),
            op_launch_free=ops,
        )

    return change


def _dispatching_ops(wi: WhatIf, launches: npt.NDArray[np.bool_]) -> iv.Intervals:
    """The outermost CPU ops (on the host chain's threads) that contain one of the chain
    events ``launches``: the op dispatch that issued those launches (``aten::linear``
    around its ``aten::addmm`` around ``cudaLaunchKernel``)."""
    index, g = wi.index, wi.graph
    ops = index.trace.tables[m.CPU_OP]
    at = (g.host_start + g.origin_ns)[launches]
    starts: list[npt.NDArray[np.int64]] = []
    ends: list[npt.NDArray[np.int64]] = []
    for pid, tid in distinct_pairs(ops.pid, ops.tid):
        mine = np.flatnonzero((ops.pid == pid) & (ops.tid == tid))
        s, e = ops.start_ns[mine], ops.end_ns[mine]
        before = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]])
        top = s >= before  # not inside an earlier op of the thread
        s, e = s[top], e[top]
        k = np.searchsorted(s, at, side="right") - 1
        hit = (k >= 0) & (at < e[np.maximum(k, 0)])
        used = np.unique(k[hit])
        starts.append(s[used])
        ends.append(e[used])
    if not starts:
        return iv.empty()
    return iv.union(np.concatenate(starts), np.concatenate(ends))


def launches_fused() -> ChangeOf:
    """CUDA graphs over the step's forward and backward (outside the optimizer step):
    their launch calls, the CPU-op dispatch that issued them (the outermost ops around
    those calls) and the GPU's gaps between their kernels go; the kernels' work, CPU ops
    that launch nothing, Python (``untraced``), the optimizer step and data loading
    stay."""

    def change(wi: WhatIf) -> Change | None:
        g = wi.graph
        launch = ~_inside(wi, nm.is_optimizer_step) & (g.kind == LAUNCH)
        if not launch.any():
            return None
        ops = np.zeros(g.op_start.size, dtype=np.bool_)
        own = g.op_launcher >= 0
        ops[own] = launch[g.op_launcher[own]]
        end = g.host_start + g.origin_ns
        dispatch = iv.overlap_per_window(_dispatching_ops(wi, launch), end - g.gap, end)
        return Change(
            gap_removed_ns=np.minimum(dispatch, g.gap_class["cpu_ops"]),
            own_keep=np.where(launch, 0.0, 1.0),
            op_launch_free=ops,
        )

    return change


def tuning_removed(ranges: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]) -> ChangeOf:
    """cuDNN's benchmark inside the convolutions of ``ranges`` (an interval set, trace
    clock) gone: inside each range the host's calls (trial launches, workspace
    allocations, syncs), their waits and the time between them go, and of the GPU work
    it launched only the last kernel stays, with its launch (the chosen algorithm's
    run)."""
    return _ranges_removed(ranges, keep_last=True)


def compiles_removed(ranges: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]) -> ChangeOf:
    """torch.compile's compiles inside ``ranges`` (the compile ranges,
    :mod:`~tb_kineto_insights.analysis.compile_events`) gone, as when every shape was
    compiled before the steps (dynamic shapes, buckets, a warm-up): the host time inside
    them, the calls made there (Inductor's allocations, syncs, its autotuning launches)
    with their waits and the GPU work they launched. The compiled graph's run, after
    the compile, stays."""
    return _ranges_removed(ranges, keep_last=False)


def _ranges_removed(
    ranges: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]], keep_last: bool
) -> ChangeOf:
    """Host ranges gone: inside each range the chain's calls, their waits and the time
    between them, and the GPU work launched there (``keep_last``: but the last kernel of
    each range, with its launch)."""

    def change(wi: WhatIf) -> Change | None:
        g = wi.graph
        if ranges[0].size == 0:
            return None
        at = g.host_start + g.origin_ns
        which = np.where(g.kind != MARKER, iv.window_index(at, *ranges), -1)
        inside = which >= 0
        if not inside.any():
            return None
        own = g.op_launcher >= 0
        op_range = np.full(g.op_start.size, -1, dtype=np.int64)
        op_range[own] = which[g.op_launcher[own]]
        keep = np.where(op_range >= 0, 0.0, 1.0)
        own_keep = np.where(inside, 0.0, 1.0)
        # keep_last: the last kernel launched in each range runs (the tuned convolution)
        tuned = np.flatnonzero((op_range >= 0) & (g.op_table == 0) & keep_last)
        if tuned.size:
            order = tuned[np.lexsort((g.op_launcher[tuned], op_range[tuned]))]
            last = np.append(op_range[order][1:] != op_range[order][:-1], True)
            keep[order[last]] = 1.0
            kept_ops = np.flatnonzero((keep > 0) & (op_range >= 0))
            own_keep[g.op_launcher[kept_ops]] = 1.0  # the tuned kernels' own launches
        return Change(
            gap_removed_ns=iv.overlap_per_window(ranges, at - g.gap, at),
            own_keep=own_keep,
            waits_removed=inside & (g.awaited >= 0),
            op_keep=keep,
        )

    return change


def copies_pinned(speedup: float) -> ChangeOf:
    """Pageable copies ``speedup`` times faster and asynchronous (their launch calls no
    longer wait)."""

    def change(wi: WhatIf) -> Change | None:
        g = wi.graph
        copies = wi.index.rows_where(m.MEMCPY, nm.is_pageable_memcpy)
        if not copies.any():
            return None
        pageable = wi.ops_of_rows(m.MEMCPY, np.flatnonzero(copies))
        if not pageable.any():
            return None
        keep = np.where(pageable, 1.0 / max(speedup, 1.0), 1.0)
        waits = np.zeros(g.gap.size, dtype=np.bool_)
        launcher = g.op_launcher[pageable & (g.op_launcher >= 0)]
        waits[launcher] = True
        waits &= (g.awaited >= 0) & np.isin(g.kind, [LAUNCH, SYNC])
        return Change(op_keep=keep, waits_removed=waits)

    return change


def profiler_activities_removed() -> ChangeOf:
    """The profiler's own activities (Kineto ``overhead`` events) taken out of the
    host's time between the step's calls where they overlap it."""
    from tb_kineto_insights.analysis.trace_quality import OVERHEAD_NAMES

    def change(wi: WhatIf) -> Change | None:
        index, g = wi.index, wi.graph
        other = index.trace.tables[m.OTHER]
        rows = index.rows_where(m.OTHER, OVERHEAD_NAMES.__contains__)
        if not rows.any():
            return None
        busy = iv.union(other.start_ns[rows], other.end_ns[rows])
        end = g.host_start + g.origin_ns
        start = end - g.gap
        removed = iv.overlap_per_window(busy, start, end)
        return Change(gap_removed_ns=removed) if removed.any() else None

    return change


__all__ = [
    "FUSED_OPTIMIZER_HOST_SHARE",
    "PINNED_SPEEDUP_DEFAULT",
    "allocator_calls_removed",
    "compiles_removed",
    "copies_pinned",
    "frame_time_removed",
    "host_time_removed",
    "kernel_rows_faster",
    "kernels_faster",
    "launches_fused",
    "optimizer_fused",
    "profiler_activities_removed",
    "syncs_removed",
    "together",
    "tuning_removed",
]
