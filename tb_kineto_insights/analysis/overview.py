"""``summary.steps``: step times, their exclusive breakdown, GPU utilization, spread.

Breakdown of a step window (exclusive; where several activities overlap, the first in
:data:`BREAKDOWN_ORDER` wins, as in the PyTorch Profiler's overview):

- ``kernel``: compute kernels on any device (communication kernels excluded);
- ``memcpy`` / ``memset``: GPU copies and memsets;
- ``communication``: NCCL/RCCL kernels not hidden under compute, copies or memsets;
- ``runtime``: CUDA/HIP runtime and driver calls on any host thread;
- ``data_loading``: ``enumerate(DataLoader)#…`` ranges;
- ``cpu_exec``: any other CPU op or annotation (ProfilerStep markers excluded);
- ``other``: the rest of the window (nothing recorded).

GPU utilization of a device = its busy time (union of kernels, memcpy and memset)
inside the step windows / total step-window time: a *ratio of totals* over the profiled
steps, sum(busy) / sum(step duration), so a long step weighs as much as its time. This
is the one definition used everywhere (``report``, ``diff``, ``check``, the tab): not
the mean of the per-step ratios, which lets a short step count as much as a long one
(34.8 % vs 35.1 % on the same run). Each step's own ratio is kept in
``steps[].gpu_utilization_fraction`` (the per-step line of the tab; the diff's noise).
"""

from __future__ import annotations

import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.analysis.units import fmt_duration_us
from tb_kineto_insights.schema.steps import LeftOutStep, Step, StepDevice, StepsPanel
from tb_kineto_insights.trace import model as m

BREAKDOWN_ORDER: tuple[str, ...] = (
    "kernel",
    "memcpy",
    "memset",
    "communication",
    "runtime",
    "data_loading",
    "cpu_exec",
    "other",
)


def activity_sets(index: TraceIndex) -> dict[str, iv.Intervals]:
    """Normalised (overlapping) interval sets per breakdown category except ``other``."""
    trace = index.trace
    k = trace.kernels
    comm = index.rows_where(m.KERNEL, nm.is_communication_kernel)
    sets = {
        "kernel": iv.union(k.start_ns[~comm], k.end_ns[~comm]),
        "memcpy": iv.union(trace.tables[m.MEMCPY].start_ns, trace.tables[m.MEMCPY].end_ns),
        "memset": iv.union(trace.tables[m.MEMSET].start_ns, trace.tables[m.MEMSET].end_ns),
        "communication": iv.union(k.start_ns[comm], k.end_ns[comm]),
        "runtime": iv.union(trace.runtime.start_ns, trace.runtime.end_ns),
    }
    dl_starts, dl_ends, cpu_starts, cpu_ends = [], [], [], []
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        t = trace.tables[kind]
        dl = index.rows_where(kind, nm.is_dataloader)
        dl_starts.append(t.start_ns[dl])
        dl_ends.append(t.end_ns[dl])
        cpu = index.rows_where(kind, nm.is_not_step_marker)
        cpu_starts.append(t.start_ns[cpu])
        cpu_ends.append(t.end_ns[cpu])
    sets["data_loading"] = iv.union(np.concatenate(dl_starts), np.concatenate(dl_ends))
    sets["cpu_exec"] = iv.union(np.concatenate(cpu_starts), np.concatenate(cpu_ends))
    return sets


def exclusive_breakdown(index: TraceIndex) -> dict[str, np.ndarray]:
    """Per category, the exclusive time (ns) in each step window (int64 arrays)."""
    steps = index.steps
    sets = activity_sets(index)
    taken = iv.empty()
    out: dict[str, np.ndarray] = {}
    used = np.zeros(len(steps), dtype=np.int64)
    for cat in BREAKDOWN_ORDER[:-1]:
        own = iv.subtract(sets[cat], taken)
        out[cat] = iv.overlap_per_window(own, steps.start_ns, steps.end_ns)
        used += out[cat]
        taken = iv.union_disjoint(taken, own)  # own lies outside taken
    out["other"] = steps.dur_ns - used
    return out


def _spread(values_us: np.ndarray) -> dict[str, float | None]:
    if values_us.size == 0:
        return {"mean_us": None, "std_us": None, "min_us": None, "max_us": None, "cv": None}
    mean = float(values_us.mean())
    std = float(values_us.std())
    return {
        "mean_us": mean,
        "std_us": std,
        "min_us": float(values_us.min()),
        "max_us": float(values_us.max()),
        "cv": std / mean if mean > 0 else None,
    }


def steps_summary(index: TraceIndex) -> StepsPanel:
    """``summary.steps`` (:class:`~tb_kineto_insights.schema.steps.StepsPanel`).

    Fields: ``count``; ``has_markers`` (False: one pseudo-step over the whole trace);
    ``mean_step_us`` and spread (``std_step_us``, ``min_step_us``, ``max_step_us``,
    ``cv`` = std / mean); ``total_us``; ``breakdown_order``; ``mean_breakdown_us``
    (per category, mean over steps); ``gpu_utilization_fraction`` (the main device,
    :attr:`~.trace_index.TraceIndex.main_device`,
    denominator: total step-window time) and ``devices`` (per device); ``steps``: per step
    ``number``, ``start_us`` (from the first step's start), ``duration_us``,
    ``cpu_duration_us`` (the marker alone), ``breakdown_us``, ``gpu_utilization_fraction``;
    ``left_out``: the windows :func:`.step_windows.steady_steps` left out of all of
    these, and why, said in ``left_out_note`` (:func:`steady_state_note`);
    ``origin_ns``: the first window's start (a left-out one included) on the trace's own
    clock (Kineto's ``ts`` in ns, counted from the file's ``baseTimeNanoseconds`` when it
    has one), None without steps: with ``baseTimeNanoseconds`` it dates the run
    (``compare/history.py`` orders runs by it).
    """
    steps = index.steps
    dur_us = steps.dur_ns.astype(np.float64) / 1000.0
    breakdown = exclusive_breakdown(index)
    per_device = {
        dev: iv.overlap_per_window(busy, steps.start_ns, steps.end_ns)
        for dev, busy in index.gpu_busy.items()
    }
    total_ns = steps.total_ns
    devices = [
        StepDevice(
            device=dev,
            busy_us=float(busy.sum()) / 1000.0,
            gpu_utilization_fraction=float(busy.sum()) / total_ns if total_ns else None,
        )
        for dev, busy in per_device.items()
    ]
    main = index.main_device
    per_step = []
    starts = [int(steps.start_ns[0])] if len(steps) else []
    origin = min(starts + [s.start_ns for s in index.left_out_steps], default=0)
    for i in range(len(steps)):
        d = int(steps.dur_ns[i])
        per_step.append(
            Step(
                number=int(steps.number[i]),
                start_us=(int(steps.start_ns[i]) - origin) / 1000.0,
                duration_us=d / 1000.0,
                cpu_duration_us=int(steps.cpu_end_ns[i] - steps.cpu_start_ns[i]) / 1000.0,
                breakdown_us={c: int(breakdown[c][i]) / 1000.0 for c in BREAKDOWN_ORDER},
                gpu_utilization_fraction=(
                    int(per_device[main][i]) / d if main is not None and d > 0 else None
                ),
            )
        )
    spread = _spread(dur_us)
    left_out = [
        LeftOutStep(
            number=s.number,
            reason=s.reason,
            start_us=(s.start_ns - origin) / 1000.0,
            duration_us=(s.end_ns - s.start_ns) / 1000.0,
            ratio=s.ratio,
            backlog_us=s.backlog_ns / 1000.0,
            launches_without_gpu_event=s.launches_without_gpu_event,
        )
        for s in index.left_out_steps
    ]
    return StepsPanel(
        count=len(steps),
        has_markers=steps.has_markers,
        mean_step_us=spread["mean_us"],
        std_step_us=spread["std_us"],
        min_step_us=spread["min_us"],
        max_step_us=spread["max_us"],
        cv=spread["cv"],
        total_us=total_ns / 1000.0,
        breakdown_order=list(BREAKDOWN_ORDER),
        mean_breakdown_us={
            c: float(breakdown[c].mean()) / 1000.0 if len(steps) else 0.0 for c in BREAKDOWN_ORDER
        },
        gpu_utilization_fraction=(
            float(per_device[main].sum()) / total_ns if main is not None and total_ns else None
        ),
        main_device=main,
        devices=devices,
        steps=per_step,
        origin_ns=origin if len(steps) else None,
        left_out=left_out,
        left_out_note=steady_state_note(len(steps), left_out),
    )


def steady_state_note(count: int, left_out: list[LeftOutStep]) -> str | None:
    """The sentence that says which windows the step figures leave out, e.g. "4
    steady-state steps of 5: step 2 carries 114.4 ms of GPU backlog from before the
    profiled range"; None when none is left out. ``StepsPanel.left_out_note``: the one
    wording for ``report``, markdown and the tab."""
    if not left_out:
        return None
    whys = []
    for s in left_out:
        if s.reason == "gpu_backlog":
            whys.append(
                f"step {s.number} carries {fmt_duration_us(s.backlog_us, 1)} of GPU backlog "
                "from before the profiled range"
            )
        elif s.reason == "warm_up":
            whys.append(f"step {s.number} is a warm-up step ({s.ratio:.1f}x the others)")
        else:
            whys.append(
                f"step {s.number} was cut off when the profiler stopped "
                f"({s.launches_without_gpu_event} launches without their GPU work)"
            )
    return f"{count} steady-state steps of {count + len(left_out)}: " + "; ".join(whys)
