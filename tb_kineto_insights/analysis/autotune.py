"""cuDNN autotuning inside the steps (``cudnn_autotune_in_step``'s evidence).

With ``torch.backends.cudnn.benchmark = True``, the first convolution of each new
configuration (input shape, weights, dtype, layout) runs every candidate algorithm and
keeps the fastest: the host launches trial kernels and waits for each one
(``cudaEventSynchronize`` / ``cudaDeviceSynchronize``) *inside* the convolution op. Once
per shape this is warm-up; when the shapes change every step (variable sequence lengths,
images of varying size), every step pays it again.

Definitions, per host step window (``ProfilerStep#N`` on the CPU):

* a *convolution range* is an outermost CPU op on its thread among the convolution ops
  (:data:`CONV_OP`: ``aten::conv2d``, ``aten::convolution``, ``aten::convolution_backward``,
  ``aten::cudnn_convolution``, MIOpen's, ...);
* a *tuning range* is a convolution range with at least one host synchronization
  (:func:`~tb_kineto_insights.analysis.names.is_sync`: a runtime ``*Synchronize`` call) on
  its thread inside it: an ordinary convolution only enqueues work;
* a *tuning step* holds at least ``cudnn_autotune_min_syncs`` such synchronizations;
* the *cost* is the wall time of the tuning ranges of the tuning steps (the host is in
  the benchmark; the GPU idles or runs trial kernels), over the summed step time;
  ``idle_us`` is the part of it when the main GPU runs nothing (what
  ``low_gpu_utilization`` must not count again);
* shapes: the distinct first-input ``Input Dims`` of ``aten::convolution`` (else of any
  forward convolution op) per step, and how many of them no earlier step had: new shapes
  in every step are why tuning repeats.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.trace import model as m

#: Convolution ops (forward and backward) of PyTorch's ATen, cuDNN and MIOpen paths.
CONV_OP = re.compile(
    r"^aten::(?:conv[123]d|conv_transpose[123]d|_?convolution(?:_backward)?|"
    r"cudnn_convolution\w*|miopen_convolution\w*|miopen_depthwise_convolution\w*|"
    r"convolution_overrideable|convolution_backward_overrideable)$"
)


def _is_conv_op(name: str) -> bool:
    """A convolution op (:data:`CONV_OP`)."""
    return bool(CONV_OP.match(name))


_FORWARD_FIRST = ("aten::convolution", "aten::_convolution")


class ConvAutotune(NamedTuple):
    """What :func:`conv_autotune` found (see the module docstring)."""

    steps: int
    tuning_steps: int
    syncs_per_step: list[int]
    tuning_us_per_step: list[float]
    cost_us: float
    cost_fraction_of_step_time: float
    idle_us: float
    kernels_in_tuning: int
    top_ops: list[tuple[str, float]]
    shapes_per_step: list[int]
    new_shapes_per_step: list[int]
    #: the tuning ranges of the tuning steps, as an interval set (ns, trace clock)
    tuning_ranges: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))


def _shape_key(dims: object) -> str | None:
    if not isinstance(dims, list) or not dims:
        return None
    return json.dumps(dims[0])


def conv_autotune(index: TraceIndex, device: int | None, min_syncs: int) -> ConvAutotune | None:
    """Tuning inside convolution ops per host step (module docstring); ``None`` when the
    trace has no step markers or no convolution op.

    ``device``: the main GPU, for ``idle_us`` (``None``: no GPU, idle 0); ``min_syncs``:
    synchronizations inside convolution ranges that make a step a tuning step.
    """
    steps = index.steps
    if not steps.has_markers or len(steps) == 0:
        return None
    trace = index.trace
    ops = trace.tables[m.CPU_OP]
    is_conv = index.rows_where(m.CPU_OP, _is_conv_op)
    if not is_conv.any():
        return None
    host_s, host_e = steps.host_windows()
    n = len(steps)
    rt = trace.runtime
    sync_rows = index.rows_where(m.RUNTIME, nm.is_sync)
    rows = np.nonzero(is_conv)[0]
    starts = ops.start_ns[rows]
    ends = starts + ops.dur_ns[rows]
    syncs_per_step = np.zeros(n, dtype=np.int64)
    tuning_ns = np.zeros(n, dtype=np.int64)
    tuning_starts: list[np.ndarray] = []
    tuning_ends: list[np.ndarray] = []
    tuning_rows: list[np.ndarray] = []
    threads = np.unique(np.stack([ops.pid[rows], ops.tid[rows]], axis=1), axis=0)
    for p, t in threads.tolist():
        sel = (ops.pid[rows] == p) & (ops.tid[rows] == t)
        s, e, r = starts[sel], ends[sel], rows[sel]
        order = np.lexsort((-e, s))
        s, e, r = s[order], e[order], r[order]
        prev = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], e[:-1]]))
        top = s >= prev
        s, e, r = s[top], e[top], r[top]
        on = sync_rows & (rt.pid == p) & (rt.tid == t)
        sync_t = np.sort(rt.start_ns[on])
        count = np.searchsorted(sync_t, e, side="left") - np.searchsorted(sync_t, s, side="left")
        tuned = count > 0
        step_of = iv.window_index(s, host_s, host_e)
        ok = tuned & (step_of >= 0)
        np.add.at(syncs_per_step, step_of[ok], count[ok])
        np.add.at(tuning_ns, step_of[ok], (e - s)[ok])
        tuning_starts.append(s[ok])
        tuning_ends.append(e[ok])
        tuning_rows.append(r[ok])
    hit = syncs_per_step >= min_syncs
    t_s = np.concatenate(tuning_starts)
    t_e = np.concatenate(tuning_ends)
    t_r = np.concatenate(tuning_rows)
    in_hit = hit[iv.window_index(t_s, host_s, host_e)] if t_s.size else np.zeros(0, np.bool_)
    t_s, t_e, t_r = t_s[in_hit], t_e[in_hit], t_r[in_hit]
    ranges = iv.union(t_s, t_e)
    cost_ns = iv.total(ranges)
    idle_ns = 0
    if device is not None and device in index.gpu_busy:
        windows = iv.union(steps.start_ns, steps.end_ns)
        idle_ns = iv.total(iv.subtract(iv.intersect(ranges, windows), index.gpu_busy[device]))
    kt = trace.tables[m.KERNEL]
    krow = index.launch_row[m.KERNEL]
    launched = krow >= 0
    k_in = np.zeros(len(kt), dtype=np.bool_)
    if ranges[0].size:
        starts_rt = rt.start_ns[krow[launched]]
        k = np.searchsorted(ranges[0], starts_rt, side="right") - 1
        inside = (k >= 0) & (starts_rt < ranges[1][np.maximum(k, 0)])
        k_in[launched] = inside
    by_op: dict[str, float] = {}
    for r, s, e in zip(t_r.tolist(), t_s.tolist(), t_e.tolist(), strict=True):
        name = trace.names[int(ops.name[r])]
        by_op[name] = by_op.get(name, 0.0) + (e - s) / 1000.0
    shapes_per_step, new_per_step = _shapes(index, is_conv, host_s, host_e)
    total_ns = steps.total_ns
    return ConvAutotune(
        steps=n,
        tuning_steps=int(hit.sum()),
        syncs_per_step=syncs_per_step.tolist(),
        tuning_us_per_step=[x / 1000.0 for x in tuning_ns.tolist()],
        cost_us=cost_ns / 1000.0,
        cost_fraction_of_step_time=cost_ns / total_ns if total_ns else 0.0,
        idle_us=idle_ns / 1000.0,
        kernels_in_tuning=int(k_in.sum()),
        top_ops=sorted(by_op.items(), key=lambda kv: -kv[1])[:3],
        shapes_per_step=shapes_per_step,
        new_shapes_per_step=new_per_step,
        tuning_ranges=ranges,
    )


def _shapes(
    index: TraceIndex, is_conv: np.ndarray, host_s: np.ndarray, host_e: np.ndarray
) -> tuple[list[int], list[int]]:
    """Distinct first-input shapes of the forward convolutions per step, and how many of
    them are new (not in an earlier step)."""
    ops = index.trace.tables[m.CPU_OP]
    names = index.trace.names
    rows = np.nonzero(is_conv)[0]
    forward = [r for r in rows.tolist() if names[int(ops.name[r])] in _FORWARD_FIRST[:1]]
    if not forward:
        forward = [r for r in rows.tolist() if names[int(ops.name[r])] in _FORWARD_FIRST[1:]]
    per_step: list[set[str]] = [set() for _ in range(host_s.size)]
    if forward:
        fr = np.asarray(forward, dtype=np.int64)
        step_of = iv.window_index(ops.start_ns[fr], host_s, host_e)
        for r, st in zip(fr.tolist(), step_of.tolist(), strict=True):
            key = _shape_key(ops.input_dims.get(r)) if st >= 0 else None
            if key is not None:
                per_step[st].add(key)
    seen: set[str] = set()
    new: list[int] = []
    for shapes in per_step:
        new.append(len(shapes - seen))
        seen |= shapes
    return [len(s) for s in per_step], new
