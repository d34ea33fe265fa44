"""``summary.diagnoses``: what limits the job, with evidence and a concrete next step.

Each diagnosis is a :class:`~tb_kineto_insights.schema.diagnoses.Diagnosis` (``id``,
``severity``, ``title``, ``evidence``, ``recommendation``, ``panel``, ``impact_fraction``;
:mod:`~tb_kineto_insights.analysis.findings`), read from the panel Structs, with a stable ``id``
(DESIGN.md: add ids, never rename). Every threshold comes from
:class:`~tb_kineto_insights.analysis.thresholds.Thresholds`.

What each diagnosis raised here costs (``impact_fraction``, a share of the summed step
time of the main device) and what its severity follows:

* ``small_kernel_flood``: launch-bound idle before short kernels plus those kernels'
  own time (:func:`_small_kernel_flood`);
* ``gpu_idle_dataloader`` / ``gpu_idle_host_sync`` / ``gpu_idle_host_untraced``: the
  idle attributed to data loading / host synchronization / host work outside traced
  ops (:func:`_idle_cause`); with Python stacks they name the frames holding that idle
  (title and ``evidence.python_frames``) and, when one frame is the cost, advise about
  it (:func:`_sync_recommendation`, :func:`_untraced_recommendation`); the advice to
  record stacks appears only when the trace has none;
* ``low_gpu_utilization``: the idle no other raised diagnosis explains
  (:func:`_low_utilization`);
* ``pageable_memcpy``: the pageable copies' duration (:func:`_pageable_memcpy`).

These raise nothing below ``min_impact_fraction`` and take their severity from
:func:`~tb_kineto_insights.analysis.findings.severity_for_impact`. Two are not step-time
costs and keep their own rules: ``no_step_markers`` (always ``medium``: it limits every
per-step number; impact 0) and ``trace_data_loss`` (severity from the share of unusable
events and Kineto's own loss reports; its ``impact_fraction`` is that unusable share).
Memory, communication and efficiency (``matmul_without_tensor_cores``,
``low_kernel_efficiency``) diagnoses come from their own modules, and the trace-quality
ones (``trace_*`` but ``trace_data_loss``: is the trace representative; impact 0,
severity from what they put in doubt) from :mod:`.trace_quality`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec
import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.autotune import conv_autotune
from tb_kineto_insights.analysis.communication import communication_diagnoses
from tb_kineto_insights.analysis.context import TraceIndex
from tb_kineto_insights.analysis.efficiency import efficiency_diagnoses
from tb_kineto_insights.analysis.findings import (
    make_diagnosis,
    severity_for_impact,
    sort_diagnoses,
)
from tb_kineto_insights.analysis.lost import where_file_ends
from tb_kineto_insights.analysis.memory import memory_diagnoses
from tb_kineto_insights.analysis.moments import with_moments
from tb_kineto_insights.analysis.python_frames import short_frame
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_quality import trace_quality_diagnoses
from tb_kineto_insights.analysis.units import fmt_duration_us
from tb_kineto_insights.schema.communication import CommunicationPanel
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.efficiency import EfficiencyPanel
from tb_kineto_insights.schema.health import HealthPanel
from tb_kineto_insights.schema.idle import IdleDevice, IdlePanel
from tb_kineto_insights.schema.kernels import KernelsPanel
from tb_kineto_insights.schema.memory import MemoryPanel
from tb_kineto_insights.schema.steps import StepsPanel
from tb_kineto_insights.trace import model as m


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _time(us: float) -> str:
    """A duration for a title (:func:`~tb_kineto_insights.analysis.units.fmt_duration_us`: µs
    below 1 ms, ms below 1 s, else s; one decimal in ms and s)."""
    return fmt_duration_us(us, 1)


def _main_idle(idle: IdlePanel | None) -> IdleDevice | None:
    if idle is None:
        return None
    for dev in idle.devices:
        if dev.device == idle.main_device:
            return dev
    return None


_OPTIMIZER_ADVICE: dict[str, str] = {
    "per_parameter": (
        "The optimizer runs a loop over the parameters, a few small kernels per tensor: "
        "use its multi-tensor form, torch.optim.AdamW(..., foreach=True) or fused=True "
        "(one kernel per group of tensors); keep fewer, larger parameter tensors (fuse "
        "QKV projections, do not split weights); or torch.compile the optimizer step."
    ),
    "foreach": (
        "The optimizer already runs foreach (multi_tensor_apply); fused=True moves the "
        "whole update into one kernel per tensor group, and torch.compile of the step "
        "(or CUDA-graph capture with capturable=True) removes its Python overhead."
    ),
    "fused": (
        "The optimizer is already fused; what is left is its Python overhead (grouping "
        "tensors, launches): torch.compile the optimizer step, or capture it in a CUDA "
        "graph (capturable=True), and keep fewer, larger parameter tensors."
    ),
    "compiled": (
        "The optimizer step is compiled; capture it in a CUDA graph "
        "(torch.compile(mode='reduce-overhead')) and keep fewer, larger parameter tensors."
    ),
    "none": (
        "The host spends this time in the optimizer step while the GPU waits: move the "
        "optimizer state to the GPU, use a foreach or fused optimizer, or torch.compile "
        "the step."
    ),
}

_MODE_WORDS = {
    "per_parameter": "one parameter at a time",
    "foreach": "foreach (multi_tensor_apply)",
    "fused": "fused",
    "compiled": "compiled",
    "none": "with no GPU kernel",
}


def _optimizer_step_bound(idle: IdlePanel | None, th: Thresholds) -> Diagnosis | None:
    """``optimizer_step_bound``: the step waits on the optimizer step.

    ``impact_fraction`` = the main device's ``idle.devices[].optimizer
    .cost_fraction_of_step_time``: GPU idle while the launching thread is inside
    ``Optimizer.step#…`` (the ``optimizer_step`` idle cause) plus the wall time of the
    GPU work launched from inside it, over the summed step time. Raised when the idle
    part alone reaches ``optimizer_idle_min_fraction`` (the host's optimizer time is
    exposed: a GPU-bound loop hides it behind queued work;
    ``optimizer_tuned_idle_min_fraction`` for a foreach, fused or compiled optimizer) and
    the impact reaches
    ``min_impact_fraction``; severity follows the impact. The advice follows how the
    optimizer runs (``mode``, read from its kernels).
    """
    dev = _main_idle(idle)
    if dev is None:
        return None
    opt = dev.optimizer
    tuned = opt.mode in ("foreach", "fused", "compiled")
    bar = th.optimizer_tuned_idle_min_fraction if tuned else th.optimizer_idle_min_fraction
    if opt.idle_fraction_of_step_time < bar:
        return None
    impact = opt.cost_fraction_of_step_time
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    n_steps = len(dev.per_step) or 1
    return make_diagnosis(
        "optimizer_step_bound",
        severity,
        f"The optimizer step takes {_pct(impact)} of the step time "
        f"({_time(opt.cost_us / n_steps)} per step: GPU idle "
        f"{_time(opt.idle_us / n_steps)}, its kernels {_time(opt.busy_us / n_steps)}); "
        f"it runs {_MODE_WORDS.get(opt.mode, opt.mode)}, "
        f"{opt.kernels_per_step:.0f} kernels per step",
        {
            "device": dev.device,
            "mode": opt.mode,
            "cost_us_per_step": opt.cost_us / n_steps,
            "idle_us_per_step": opt.idle_us / n_steps,
            "busy_us_per_step": opt.busy_us / n_steps,
            "host_us_per_step": opt.host_us / n_steps,
            "idle_fraction_of_step_time": opt.idle_fraction_of_step_time,
            "cost_fraction_of_step_time": impact,
            "kernels_per_step": opt.kernels_per_step,
            "optimizer_steps_per_step": opt.ranges_per_step,
            "top_kernels": [k.name for k in opt.top_kernels[:3]],
        },
        _OPTIMIZER_ADVICE.get(opt.mode, _OPTIMIZER_ADVICE["none"]),
        "idle",
        impact_fraction=impact,
    )


def cpu_ops_named(dev: IdleDevice, k: int = 3) -> str:
    """The ops holding a device's ``cpu_ops`` idle, most first, with their idle time per
    step: ``"aten::linear 1.8 ms, aten::layer_norm 0.5 ms per step"`` (the first ``k`` of
    ``dev.cpu_ops_top``); empty when none is known."""
    n_steps = len(dev.per_step) or 1
    ops = dev.cpu_ops_top[:k]
    if not ops:
        return ""
    return ", ".join(f"{o.name} {_time(o.us / n_steps)}" for o in ops) + " per step"


def _small_kernel_flood(
    kernels: KernelsPanel | None,
    idle: IdlePanel | None,
    th: Thresholds,
    optimizer_raised: bool = False,
) -> Diagnosis | None:
    """``small_kernel_flood``: many short kernels *and* the GPU pays for them.

    Raised when at least ``small_kernel_count_fraction`` of the kernels per step are
    short and there are at least ``small_kernel_min_per_step`` per step (a flood), and
    its cost reaches ``min_impact_fraction``. The cost (``impact_fraction``) is the main
    device's ``idle.devices[].short_kernels.cost_fraction_of_step_time``: the
    launch-bound idle before short kernels (gaps the host spent issuing them, see
    :func:`~tb_kineto_insights.analysis.idle.launch_bound_gaps`) plus those kernels' own
    time, over the summed step time. Short kernels that run back to back while the host
    is ahead cost only their own work and are not counted: on a GPU-bound run a flood
    of short kernels is not what limits the step. Severity follows the cost
    (:func:`~tb_kineto_insights.analysis.findings.severity_for_impact`).
    """
    if kernels is None:
        return None
    short = kernels.short_count_fraction
    per_step = kernels.mean_per_step
    dev = _main_idle(idle)
    if short is None or per_step is None or dev is None:
        return None
    if short < th.small_kernel_count_fraction or per_step < th.small_kernel_min_per_step:
        return None
    cost = dev.short_kernels
    impact = cost.cost_fraction_of_step_time
    opt_us = 0.0
    if optimizer_raised and cost.cost_us > 0:
        opt = dev.optimizer
        opt_us = min(opt.launch_bound_idle_us + opt.launch_bound_kernel_us, cost.cost_us)
        impact *= 1.0 - opt_us / cost.cost_us
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    fusion = kernels.fusion_candidates
    issuer = fusion[0].cpu_op if fusion else None
    launch = kernels.launch
    where = f" The largest repeated run of short kernels comes from {issuer}." if issuer else ""
    compiled = kernels.compiled_kernel_fraction or 0.0
    if compiled >= 0.2:  # already torch.compile'd (Triton kernels): the next steps differ
        advice = (
            "The model is already compiled (Triton kernels): capture whole steps with CUDA "
            "graphs (torch.compile(mode='reduce-overhead') or torch.cuda.graphs), compile "
            "the optimizer step too, and raise the batch size so each kernel does more "
            "work; look at the remaining uncompiled ops in the fusion candidates."
        )
    else:
        advice = (
            "Fuse the small kernels: wrap the model in torch.compile (mode='reduce-overhead' "
            "adds CUDA graphs), or capture the step with CUDA graphs; use a fused or "
            "foreach optimizer (torch.optim.AdamW(..., fused=True) or foreach=True) instead "
            "of a per-parameter loop; raise the batch size so each kernel does more work."
        )
    return make_diagnosis(
        "small_kernel_flood",
        severity,
        f"The GPU waits on kernel launches: {_pct(impact)} of the step time goes to "
        f"launch-bound short kernels"
        + (" outside the optimizer step" if opt_us else "")
        + f" ({_pct(short)} of {per_step:.0f} kernels per step are "
        f"shorter than {th.short_kernel_us:g} µs)",
        {
            "device": dev.device,
            "launch_bound_cost_fraction_of_step_time": impact,
            "launch_bound_idle_us": cost.launch_bound_idle_us,
            "launch_bound_kernel_us": cost.launch_bound_kernel_us,
            "launch_bound_gaps": cost.launch_bound_gaps,
            "short_kernel_busy_us": cost.busy_us,
            "short_count_fraction": short,
            "short_time_fraction": kernels.short_time_fraction,
            "kernels_per_step": per_step,
            "launch_bound_fraction": launch.launch_bound_fraction,
            "mean_launch_us": launch.mean_launch_us,
            "gpu_busy_fraction": dev.busy_fraction,
            "short_threshold_us": th.short_kernel_us,
            "optimizer_step_cost_left_out_us": opt_us,
        },
        advice + where,
        "kernels",
        impact_fraction=impact,
    )


def _cause_frames(dev: IdleDevice, cause: str, th: Thresholds) -> list[dict[str, Any]]:
    """The Python frames (``idle.devices[].python_frames``) that hold the most of
    ``cause``'s idle: at most ``python_frames_named``, each at least
    ``python_frame_min_fraction`` of it, largest first, among the listed frames
    (``python_frames_listed``, by total idle): ``frame`` (Kineto's name),
    ``idle_us_per_step``, ``fraction_of_cause`` and, for ``host_sync``,
    ``after_sync_us_per_step`` (spent after the host left the frame that synchronised;
    0 for the other causes), ``launches_gpu_work`` (the frame was in a kernel launch
    call during some idle: it is the loop that feeds the GPU, not a call of its own).
    Empty without stacks."""
    cost_us = dev.causes[cause].us
    n_steps = len(dev.per_step) or 1
    if cost_us <= 0:
        return []
    ranked = sorted(dev.python_frames, key=lambda f: -f.causes_us.get(cause, 0.0))
    out = []
    for f in ranked[: th.python_frames_named]:
        us = f.causes_us.get(cause, 0.0)
        if us < th.python_frame_min_fraction * cost_us:
            break
        out.append(
            {
                "frame": f.frame,
                "idle_us_per_step": us / n_steps,
                "fraction_of_cause": us / cost_us,
                "after_sync_us_per_step": f.after_sync_us / n_steps
                if cause == "host_sync"
                else 0.0,
                "launches_gpu_work": f.causes_us.get("launching", 0.0) > 0,
            }
        )
    return out


def _frames_title(frames: list[dict[str, Any]], cause: str) -> str:
    """``; the host was in a.py(3): f (12.1 ms per step), …`` (empty without frames);
    for ``host_sync``, ``; after the sync the host was in …`` (a sync-opened gap is all
    time after the sync returned)."""
    if not frames:
        return ""
    lead = "; after the sync the host was in " if cause == "host_sync" else "; the host was in "
    return lead + ", ".join(
        f"{short_frame(f['frame'])} ({_time(f['idle_us_per_step'])} per step)" for f in frames
    )


def _dominant(frames: list[dict[str, Any]], th: Thresholds) -> dict[str, Any] | None:
    """The first named frame when it is *the* cost, a call of its own: it holds at least
    ``python_frame_dominant_fraction`` of the cause's idle and launched no GPU work
    while the GPU idled (the training step's own frame launches kernels: its idle is
    the loop's Python overhead, not a call to move elsewhere); else ``None``."""
    if (
        frames
        and frames[0]["fraction_of_cause"] >= th.python_frame_dominant_fraction
        and not frames[0]["launches_gpu_work"]
    ):
        return frames[0]
    return None


def _dataloader_frame_advice(frames: list[dict[str, Any]], th: Thresholds) -> str:
    """A sentence naming the frame that holds most of the data-loading idle (the
    dataset or transform code to make cheaper or move into the workers), else empty."""
    top = _dominant(frames, th)
    if top is None:
        return ""
    return (
        f" Most of the wait is in {top['frame']} ({_time(top['idle_us_per_step'])} per "
        "step): make it cheaper or run it in the workers."
    )


def _sync_recommendation(frames: list[dict[str, Any]], th: Thresholds) -> str:
    """``gpu_idle_host_sync``'s advice: about the call the host made after the sync
    when that call, in another frame than the one that synchronised, holds most of the
    idle (the sync only drained the queue; the call is the cost); else about syncs."""
    top = _dominant(frames, th)
    if top is not None and top["after_sync_us_per_step"] >= (
        th.python_frame_dominant_fraction * top["idle_us_per_step"]
    ):
        return (
            f"After the sync the host spends {_time(top['after_sync_us_per_step'])} per step "
            f"in {top['frame']}: that call, not the sync itself, keeps the GPU idle, and "
            "removing the .item() alone would not hide it behind the GPU work. If it logs or "
            "pushes metrics, log every N steps or off the training thread (a background "
            "thread or process) and keep running metrics on the GPU until then; if it "
            "checkpoints or does I/O, make it asynchronous."
        )
    return (
        "Avoid synchronising inside the step: no .item(), .cpu(), .tolist(), print() of "
        "GPU tensors or torch.cuda.synchronize() per iteration; keep running metrics on "
        "the GPU and read them every N steps; use non_blocking copies from pinned memory."
    )


def _untraced_recommendation(frames: list[dict[str, Any]], has_stacks: bool, th: Thresholds) -> str:
    """``gpu_idle_host_untraced``'s advice: about the named frames when stacks name
    them; to read the stacks when they are recorded but no frame stands out; to record
    them (``with_stack=True`` or py-spy) only when the trace has none."""
    move = (
        "move it off the training thread (DataLoader workers, a background thread or "
        "process), do it every N steps, or do it on the GPU."
    )
    top = _dominant(frames, th)
    if top is not None:
        return (
            f"The thread that launches the GPU work spends {_time(top['idle_us_per_step'])} "
            f"per step in {top['frame']}, outside every PyTorch op, while the GPU waits: " + move
        )
    if frames:
        return (
            "The thread that launches the GPU work is in the Python frames named in the "
            "title, outside every PyTorch op, while the GPU waits: look there for "
            "time.sleep, logging or printing, checkpoint or metrics I/O, and Python-side "
            "work between forward and backward; " + move
        )
    return (
        "The host thread that launches the GPU work was inside the step but in no "
        "PyTorch op or CUDA call: find what it ran. "
        + (
            "This trace has Python stacks: read the python_function ranges of that "
            "thread inside the largest gaps (PyTorch Profiler tab or Perfetto), or use "
            "py-spy (py-spy record --native); "
            if has_stacks
            else "Profile with torch.profiler.profile(with_stack=True) or py-spy "
            "(py-spy record --native); "
        )
        + "look for time.sleep, logging or printing, checkpoint or metrics I/O, and "
        "Python-side work between forward and backward; move it off the training "
        "thread or do it every N steps."
    )


def _idle_cause(
    idle: IdlePanel | None,
    cause: str,
    id_: str,
    th: Thresholds,
    title: str,
    recommendation: str | Callable[[list[dict[str, Any]]], str],
) -> Diagnosis | None:
    """An idle-cause diagnosis: the GPU idles while the launching thread does ``cause``.

    ``impact_fraction`` = the main device's idle attributed to ``cause`` / summed step
    time (``idle.devices[].causes[cause].fraction_of_step_time``); severity follows it
    (:func:`~tb_kineto_insights.analysis.findings.severity_for_impact`), nothing below
    ``min_impact_fraction``; nothing either when the cause costs that much in fewer than
    ``idle_cause_min_steps`` steps of a longer profile (a one-off stall: proved quiet on
    ``sample_logs/memory_fixed_async``, whose first profiled step starts on an empty GPU
    queue, and on ``kineto_resnet50``'s second span, one 80 ms stretch in 1 of 6 steps).

    With Python stacks the title names the frames that hold the cause's idle and the
    evidence lists them (``python_frames``, :func:`_cause_frames`); ``recommendation``
    may be a function of those frames. Without stacks the diagnosis is as before.
    """
    dev = _main_idle(idle)
    if dev is None or cause not in dev.causes:
        return None
    cost = dev.causes[cause]
    share = cost.fraction_of_step_time
    severity = severity_for_impact(share, th)
    if severity is None:
        return None
    gaps = [g for g in dev.largest_gaps if g.cause == cause]
    op = next((g.op for g in gaps if g.op), None)
    per_step = dev.per_step
    n_steps = len(per_step) or 1
    # steps where this cause alone idles the GPU for at least min_impact of the step
    hit = sum(
        1
        for st in per_step
        if st.causes_us.get(cause, 0.0) >= th.min_impact_fraction * st.duration_us > 0
    )
    if len(per_step) > th.idle_cause_min_steps and hit < th.idle_cause_min_steps:
        return None  # a one-off stall, not a steady cost (see the threshold's comment)
    frames = _cause_frames(dev, cause, th)
    evidence_frames: dict[str, Any] = (
        {"python_frames": frames} if idle and idle.python_stacks else {}
    )
    return make_diagnosis(
        id_,
        severity,
        title.format(
            share=_pct(share),
            device=dev.device,
            when=f"{_time(cost.us / n_steps)} per step"
            if hit >= len(per_step)
            else f"{_time(cost.us)} in total over {len(per_step)} steps, mostly in {hit} of them",
        )
        + _frames_title(frames, cause),
        {
            **evidence_frames,
            "device": dev.device,
            "idle_fraction_of_step_time": share,
            "idle_us": cost.us,
            "idle_us_per_step": cost.us / n_steps,
            "steps_affected": hit,
            "steps": len(per_step),
            "fraction_of_idle": cost.fraction_of_idle,
            "gpu_busy_fraction": dev.busy_fraction,
            "largest_gap_us": gaps[0].length_us if gaps else None,
            "op": op,
        },
        recommendation if isinstance(recommendation, str) else recommendation(frames),
        "idle",
        impact_fraction=share,
    )


#: Idle cause → the diagnosis that claims it (``low_gpu_utilization`` does not repeat it).
_CAUSE_DIAGNOSIS: dict[str, str] = {
    "data_loading": "gpu_idle_dataloader",
    "host_sync": "gpu_idle_host_sync",
    "host_untraced": "gpu_idle_host_untraced",
    "optimizer_step": "optimizer_step_bound",
    "allocator": "allocator_churn",
}


def _low_utilization(
    steps: StepsPanel | None, idle: IdlePanel | None, raised: list[Diagnosis], th: Thresholds
) -> Diagnosis | None:
    """``low_gpu_utilization``: idle that no cause-specific diagnosis explains.

    Rule (no double counting): the idle already claimed by raised diagnoses (each raised
    idle-cause diagnosis claims its cause; a raised ``small_kernel_flood`` claims its
    launch-bound idle) is taken out; the rest of the main device's idle share of step
    time is this diagnosis' ``impact_fraction`` (``unexplained_idle_fraction``). It is
    raised only when

    * utilization (busy / step time) is below ``low_utilization``,
    * it would still be below it with the claimed idle removed (busy / (step time −
      claimed idle)): when the cause-specific diagnoses explain why the GPU is mostly
      idle, they are the claim and this one adds nothing, and
    * the unexplained idle reaches ``min_impact_fraction``; severity follows it.

    It names the idle cause holding most of the unexplained idle and, with Python
    stacks, the frames holding most of that cause (:func:`_cause_frames`).
    """
    util = steps.gpu_utilization_fraction if steps is not None else None
    dev = _main_idle(idle)
    if steps is None or idle is None or util is None or dev is None:
        return None
    if util >= th.low_utilization:
        return None
    total_us = sum(c.us for c in dev.causes.values())
    idle_fraction = dev.idle_fraction or 0.0
    scale = idle_fraction / total_us if total_us else 0.0  # idle µs -> share of step time
    unclaimed_us = {cause: c.us for cause, c in dev.causes.items()}
    claimed: dict[str, float] = {}
    ids = {d.id for d in raised}
    for cause, id_ in _CAUSE_DIAGNOSIS.items():
        if id_ in ids and cause in unclaimed_us:
            claimed[id_] = unclaimed_us[cause] * scale
            unclaimed_us[cause] = 0.0
    if "small_kernel_flood" in ids:
        by_cause = dict(dev.short_kernels.launch_bound_idle_us_by_cause)
        if "optimizer_step_bound" in ids:  # claimed by optimizer_step_bound already
            by_cause.pop("optimizer_step", None)
        for cause, us in by_cause.items():
            unclaimed_us[cause] = max(unclaimed_us.get(cause, 0.0) - us, 0.0)
        claimed["small_kernel_flood"] = sum(by_cause.values()) * scale
    for d in raised:  # idle claimed outside the cause split (cuDNN benchmark time)
        if d.id == "cudnn_autotune_in_step":
            claimed[d.id] = float(d.evidence["idle_fraction_of_step_time"])
    claimed_fraction = sum(claimed.values())
    unexplained = max(idle_fraction - claimed_fraction, 0.0)
    rest = 1.0 - claimed_fraction
    if rest <= 0 or util / rest >= th.low_utilization:
        return None  # the cause-specific diagnoses explain the low utilization
    severity = severity_for_impact(unexplained, th)
    if severity is None:
        return None
    top = max(unclaimed_us.items(), key=lambda kv: kv[1])[0] if unclaimed_us else None
    labels = idle.cause_labels
    top_label = labels.get(top, top.replace("_", " ")) if top else None
    if top == "cpu_ops" and dev.cpu_ops_top:
        top_label = f"{top_label} ({cpu_ops_named(dev)})"
    frames = _cause_frames(dev, top, th) if top else []
    return make_diagnosis(
        "low_gpu_utilization",
        severity,
        f"GPU {dev.device} is busy only {_pct(util)} of the step time; "
        f"{_pct(unexplained)} of it idles for other reasons"
        + (f", mostly {top_label}" if top_label else "")
        + (_frames_title(frames, top) if top else ""),
        {
            **({"python_frames": frames} if idle.python_stacks else {}),
            "device": dev.device,
            "gpu_utilization_fraction": util,
            "idle_fraction_of_step_time": idle_fraction,
            "unexplained_idle_fraction": unexplained,
            "utilization_without_explained_idle_fraction": util / rest,
            "explained_fraction_by_diagnosis": claimed,
            "largest_unexplained_cause": top,
            "largest_unexplained_cause_fraction": unclaimed_us[top] * scale if top else None,
            "cpu_ops_top": [
                {"name": o.name, "idle_us_per_step": o.us / (len(dev.per_step) or 1)}
                for o in dev.cpu_ops_top
            ],
            "mean_step_us": steps.mean_step_us,
        },
        "See the idle-gap panel for what the host did while the GPU waited"
        + (f" (mostly {top_label})" if top_label else "")
        + "; feed the GPU more work per launch (larger batch, torch.compile, CUDA graphs) "
        "and keep the host ahead of it (no synchronisation inside the step).",
        "steps",
        impact_fraction=unexplained,
    )


def _allocator_churn(index: TraceIndex, idle: IdlePanel | None, th: Thresholds) -> Diagnosis | None:
    """``allocator_churn``: the caching allocator goes to the driver inside the steps.

    The cost is the ``allocator`` idle cause (:mod:`.idle`): gaps that open while the
    launching thread is in ``cudaMalloc``/``cudaFree`` (or HIP's), wholly — ``cudaFree``
    synchronises the device, so the GPU loses the work the host had queued ahead — plus
    the idle during such calls elsewhere. ``impact_fraction`` is that idle over the
    summed step time; raised as every idle-cause diagnosis (:func:`_idle_cause`: at least
    ``min_impact_fraction``, in at least ``idle_cause_min_steps`` steps). The evidence
    counts the calls per step and their host time inside the host step windows.
    """
    rt = index.trace.runtime
    rows = index.rows_where(m.RUNTIME, nm.is_allocator_call)
    if not rows.any():
        return None
    steps = index.steps
    n_steps = max(len(steps), 1)
    host = (
        iv.union(*steps.host_windows())
        if steps.has_markers
        else iv.union(steps.start_ns, steps.end_ns)
    )
    rows &= iv.window_index(rt.start_ns, *host) >= 0
    counts: dict[str, float] = {}
    for i in np.nonzero(rows)[0].tolist():
        name = index.trace.names[int(rt.name[i])]
        counts[name] = counts.get(name, 0.0) + 1.0 / n_steps
    host_us = float(rt.dur_ns[rows].sum()) / 1000.0 / n_steps
    calls = ", ".join(f"{c:.0f} {n}" for n, c in sorted(counts.items(), key=lambda kv: -kv[1]))
    found = _idle_cause(
        idle,
        "allocator",
        "allocator_churn",
        th,
        "GPU {device} idles {share} of the step time ({when}) while the CUDA caching "
        f"allocator frees and re-allocates device memory ({calls or 'no call'} per step, "
        f"{_time(host_us)} of host time)",
        "The caching allocator returns memory to the driver and asks for it again inside "
        "the loop; cudaFree waits for the GPU, so the host loses its lead. Remove "
        "torch.cuda.empty_cache() from the training loop (call it, if at all, between "
        "phases); unset PYTORCH_NO_CUDA_MEMORY_CACHING (it disables the cache); if the "
        "process is capped (torch.cuda.set_per_process_memory_fraction, a small MIG "
        "slice, other processes on the GPU) give it more memory or allocate less per "
        "step (smaller batch, activation checkpointing), and reuse buffers of one size.",
    )
    if found is None:
        return None
    evidence = {**found.evidence, "calls_per_step": counts, "host_us_per_step": host_us}
    return msgspec.structs.replace(found, evidence=evidence)


def _cudnn_autotune(index: TraceIndex, idle: IdlePanel | None, th: Thresholds) -> Diagnosis | None:
    """``cudnn_autotune_in_step``: cuDNN benchmarks convolutions again in steady steps.

    From :func:`~tb_kineto_insights.analysis.autotune.conv_autotune`: ``impact_fraction``
    = wall time of the convolution ops that synchronise (the benchmark: trial kernels,
    each waited for) in the tuning steps, over the summed step time; raised when at
    least ``idle_cause_min_steps`` steps tune (when the profile has more steps than
    that; once is the warm-up of a new shape) and the impact reaches
    ``min_impact_fraction``; severity follows it. Its ``idle_us`` (the GPU idle inside
    that time) is claimed from ``low_gpu_utilization``.
    """
    main = idle.main_device if idle is not None else None
    found = conv_autotune(index, main, th.cudnn_autotune_min_syncs)
    if found is None or found.tuning_steps == 0:
        return None
    need = min(th.idle_cause_min_steps, found.steps)
    if found.tuning_steps < need:
        return None
    impact = found.cost_fraction_of_step_time
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    n = found.steps
    new_every = all(x > 0 for x in found.new_shapes_per_step[1:]) and n > 1
    shapes = (
        f"; the convolutions see new input shapes in every step "
        f"({sum(found.new_shapes_per_step)} distinct over {n} steps)"
        if new_every
        else ""
    )
    ops = ", ".join(f"{name} {_time(us / n)}" for name, us in found.top_ops)
    return make_diagnosis(
        "cudnn_autotune_in_step",
        severity,
        f"cuDNN autotunes convolutions in {found.tuning_steps} of {n} steps: "
        f"{_pct(impact)} of the step time ({_time(found.cost_us / n)} per step) goes to "
        f"benchmark runs inside {ops} per step, "
        f"{sum(found.syncs_per_step) / n:.0f} synchronisations per step{shapes}",
        {
            "tuning_steps": found.tuning_steps,
            "steps": n,
            "cost_us_per_step": found.cost_us / n,
            "cost_fraction_of_step_time": impact,
            "idle_us_per_step": found.idle_us / n,
            "idle_fraction_of_step_time": found.idle_us * 1000.0 / index.steps.total_ns
            if index.steps.total_ns
            else 0.0,
            "syncs_per_step": found.syncs_per_step,
            "tuning_us_per_step": found.tuning_us_per_step,
            "kernels_in_tuning_per_step": found.kernels_in_tuning / n,
            "conv_input_shapes_per_step": found.shapes_per_step,
            "new_conv_input_shapes_per_step": found.new_shapes_per_step,
            "top_ops": [{"op": name, "us_per_step": us / n} for name, us in found.top_ops],
            "syncs_per_step_mean": sum(found.syncs_per_step) / n,
            "distinct_conv_input_shapes": sum(found.new_shapes_per_step),
        },
        "torch.backends.cudnn.benchmark=True tunes every new input shape again. Keep the "
        "shapes fixed (pad to one length) or bucket them into a few sizes so each is "
        "tuned once; with shapes that keep changing, set torch.backends.cudnn.benchmark="
        "False (cuDNN's heuristics pick an algorithm without trials).",
        "idle",
        impact_fraction=impact,
    )


def _pageable_memcpy(
    index: TraceIndex, steps: StepsPanel | None, th: Thresholds
) -> Diagnosis | None:
    """``pageable_memcpy``: copies from pageable host memory (synchronous for the host).

    ``impact_fraction`` = summed duration of the pageable copies / summed step time;
    severity follows it and nothing is raised below ``min_impact_fraction``: a few
    microseconds of pageable copies (e.g. a scalar per step) cost nothing worth a line.
    """
    copies = index.trace.tables[m.MEMCPY]
    rows = index.rows_where(m.MEMCPY, nm.is_pageable_memcpy)
    if not rows.any():
        return None
    time_us = float(copies.dur_ns[rows].sum()) / 1000.0
    total_us = (steps.total_us if steps is not None else 0.0) or 0.0
    share = time_us / total_us if total_us else 0.0
    severity = severity_for_impact(share, th)
    if severity is None:
        return None
    kinds = sorted({index.trace.names[int(i)] for i in np.unique(copies.name[rows])})
    return make_diagnosis(
        "pageable_memcpy",
        severity,
        f"{int(rows.sum())} copies from pageable host memory take {_pct(share)} of the "
        f"step time ({time_us / 1000:.2f} ms)",
        {
            "count": int(rows.sum()),
            "time_us": time_us,
            "fraction_of_step_time": share,
            "kinds": kinds,
        },
        "Copy from pinned memory so the copy is asynchronous and can overlap compute: "
        "DataLoader(pin_memory=True), or tensor.pin_memory(), then "
        ".to(device, non_blocking=True).",
        "steps",
        impact_fraction=share,
    )


def _no_step_markers(steps: StepsPanel | None) -> Diagnosis | None:
    """``no_step_markers``: not a cost in step time (``impact_fraction`` 0) but a limit on
    every per-step number; always ``medium``, since without steps the diff and every
    per-step value degrade to whole-trace values."""
    if steps is None or steps.has_markers:
        return None
    return make_diagnosis(
        "no_step_markers",
        "medium",
        "No ProfilerStep markers: the whole trace is treated as one step",
        {"steps": 0},
        "Profile with torch.profiler.profile(schedule=torch.profiler.schedule(...)) and call "
        "prof.step() once per training iteration, so per-step numbers and the diff work.",
        "steps",
    )


_LOSS_KEYS = ("Out-of-range", "CUPTI stopped early?", "Invalid ext correlations")


def _data_loss(health: HealthPanel | None) -> Diagnosis | None:
    """Events the trace lacks: Kineto's own loss counts and error lines, events skipped
    or quarantined by the reader (missing fields, broken timestamps), events lost to
    damaged JSON (``health.damage``), and GPU events whose duration ran over the next
    event on their stream (clipped). Not about step time: severity follows the share of
    the trace's events that are unusable (``unusable_fraction``, also the
    ``impact_fraction``): high ≥ 50 %, or when the file ends before its GPU events
    (every GPU event lost: ``health.trace_quality.lost``), medium ≥ 5 % (or when CUPTI
    stopped early, Kineto logged errors, or the file itself is damaged), else low."""
    if health is None:
        return None
    counts = health.kineto_record_counts
    lost = {k: v for k, v in counts.items() if k in _LOSS_KEYS and v}
    dropped_lines = [
        line for line in health.kineto_log if "drop" in line.lower() or line.startswith("ERROR")
    ]
    skipped = sum(health.skipped.values())
    quarantined = sum(health.quarantined.values())
    lost_events = health.lost_events
    damaged_regions = health.damaged_regions
    clipped = health.stream_overlap_clipped
    overran = clipped.overran_whole_events
    unusable_events = skipped + quarantined + lost_events + overran
    if not lost and not dropped_lines and not unusable_events and not damaged_regions:
        return None
    events = health.event_count + lost_events
    unusable = unusable_events / events if events else 0.0
    stopped = bool(counts.get("CUPTI stopped early?"))
    cut = health.trace_quality.lost
    if unusable >= 0.5 or cut.gpu_events_lost:
        severity = "high"
    elif unusable >= 0.05 or stopped or dropped_lines or damaged_regions:
        severity = "medium"
    else:
        severity = "low"
    ended = next(
        (
            d
            for d in health.damage
            if d.problem.startswith(("gzip stream ends early", "corrupt gzip"))
            and "check" not in d.problem  # a bad CRC/length: all was read
        ),
        None,
    )
    where = ""
    if cut.file_ends_at_byte is not None:
        where = where_file_ends(
            cut.file_ends_at_byte,
            compressed=health.compressed,
            file_bytes=health.file_bytes,
            corrupt=ended is not None and ended.problem.startswith("corrupt gzip"),
            gzip_whole=not any(
                d.problem.startswith(("gzip stream ends early", "corrupt gzip"))
                for d in health.damage
            ),
        )
        where = "T" + where.replace("the file ends", "the trace file ends", 1)[1:]
    if cut.gpu_events_lost and cut.file_ends_at_byte is not None and cut.gpu_events_set_aside:
        title = (
            f"{where}, inside its GPU events: "
            "every step lost part of its GPU work, so the "
            f"{cut.gpu_events_set_aside} GPU events read are not used; no GPU number in "
            "this trace can be trusted"
        )
    elif cut.gpu_events_lost and cut.file_ends_at_byte is not None:
        title = (
            f"{where}, before its GPU events: "
            "all GPU events are lost"
            + (f" ({cut.launches} launch calls without their work)" if cut.launches else "")
            + "; no GPU number in this trace can be trusted"
        )
    elif cut.file_ends_at_byte is not None and ended is None:
        cut_short = "" if "ends early" in where else " (cut short)"
        title = f"{where}{cut_short}: lost " + "; ".join(cut.lost)
    elif ended is not None:  # what followed the end of the readable stream is unknown
        title = (
            f"The trace file ends after {ended.offset:,} bytes of JSON "
            f"({ended.problem.split(' (')[0]}): every event after that point is missing, and "
            f"{damaged_regions - 1} other damaged region(s) lost {lost_events} event(s)"
        )
    elif damaged_regions:
        title = (
            f"The trace file is damaged: {damaged_regions} damaged region(s), "
            f"{lost_events} event(s) and {health.lost_bytes} bytes lost"
        )
    elif overran and unusable_events == overran:
        title = (
            f"{overran} GPU event(s) had a duration running over the next event(s) on their "
            f"stream: clipped, {_time(float(clipped.removed_ns) / 1e3)} removed "
            "(the recorded duration cannot be right)"
        )
    elif unusable_events:
        share = f"{100 * unusable:.0f} %" if unusable >= 0.005 else "< 1 %"
        title = (
            f"The trace is incomplete: {unusable_events} of {events} events were unusable ({share})"
        )
    else:
        title = "The trace is incomplete: Kineto reported dropped or out-of-range records"
    return make_diagnosis(
        "trace_data_loss",
        severity,
        title,
        {
            "kineto_record_counts": lost,
            "kineto_errors": dropped_lines[:5],
            "skipped_events": skipped,
            "quarantined_events": quarantined,
            "quarantined_by_kind": health.quarantined_by_kind,
            "lost_events": lost_events,
            "lost_bytes": health.lost_bytes,
            "damaged_regions": damaged_regions,
            "damage": msgspec.to_builtins(health.damage[:5]),
            "overran_stream_events": overran,
            "overran_clipped_us": float(clipped.removed_ns) / 1e3,
            "unusable_fraction": unusable,
            "events": events,
            "file_ends_at_byte": cut.file_ends_at_byte,
            "gpu_events_lost": cut.gpu_events_lost,
            "gpu_events_set_aside": cut.gpu_events_set_aside,
            "launches_without_gpu_event": cut.launches_without_gpu_event,
            "incomplete_steps": cut.incomplete_steps,
            "lost": cut.lost,
        },
        "Numbers near the trace's edges may be off, and every panel misses what was "
        "dropped (see Trace health for why). Profile fewer steps per trace (schedule "
        "active=3..5); if CUPTI stopped early or buffers were dropped, raise the CUPTI "
        "buffer size; if events were unusable or the file is damaged (see the byte "
        "offsets in health), the file was damaged, cut short while being written, or "
        "written by a non-Kineto tool.",
        "health",
        impact_fraction=unusable,
    )


_P = TypeVar("_P", bound=msgspec.Struct)


def _panel(panels: Mapping[str, msgspec.Struct], key: str, struct_type: type[_P]) -> _P | None:
    """``panels[key]`` as ``struct_type``; ``None`` when absent.

    Raises:
        TypeError: the panel is there but not a ``struct_type``.
    """
    panel = panels.get(key)
    if panel is None:
        return None
    if not isinstance(panel, struct_type):
        raise TypeError(
            f"diagnose: panel {key!r} is a {type(panel).__name__}, expected {struct_type.__name__}"
        )
    return panel


def diagnose(
    index: TraceIndex,
    panels: Mapping[str, msgspec.Struct],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    """Diagnoses for one trace from its panels, most severe first, then by impact (share
    of step time at stake).

    ``panels``: panel name → its Struct (``steps`` :class:`StepsPanel`, ``kernels``
    :class:`KernelsPanel`, ``idle`` :class:`IdlePanel`, ``communication``
    :class:`CommunicationPanel`, ``memory`` :class:`MemoryPanel`, ``health``
    :class:`HealthPanel`, ``efficiency`` :class:`EfficiencyPanel`); a panel left out
    raises none of the diagnoses that read it.

    Raises:
        TypeError: a panel is not the Struct of its name.
    """
    th = thresholds
    steps = _panel(panels, "steps", StepsPanel)
    kernels = _panel(panels, "kernels", KernelsPanel)
    idle = _panel(panels, "idle", IdlePanel)
    health = _panel(panels, "health", HealthPanel)
    communication = _panel(panels, "communication", CommunicationPanel)
    memory = _panel(panels, "memory", MemoryPanel)
    optimizer = _optimizer_step_bound(idle, th)
    has_stacks = health is not None and health.flags.has_stacks
    found = [
        optimizer,
        _small_kernel_flood(kernels, idle, th, optimizer is not None),
        _idle_cause(
            idle,
            "data_loading",
            "gpu_idle_dataloader",
            th,
            "GPU {device} idles {share} of the step time ({when}) waiting for the DataLoader",
            lambda frames: (
                "Load batches ahead of the GPU: DataLoader(num_workers=N>0, e.g. "
                "the CPU cores per GPU), pin_memory=True, prefetch_factor=2..4, "
                "persistent_workers=True, and .to(device, non_blocking=True); move heavy "
                "per-sample transforms to the GPU or precompute them."
                + _dataloader_frame_advice(frames, th)
            ),
        ),
        _idle_cause(
            idle,
            "host_sync",
            "gpu_idle_host_sync",
            th,
            "GPU {device} idles {share} of the step time ({when}) after host synchronisation",
            lambda frames: _sync_recommendation(frames, th),
        ),
        _idle_cause(
            idle,
            "host_untraced",
            "gpu_idle_host_untraced",
            th,
            "GPU {device} idles {share} of the step time ({when}) while the host is busy "
            "outside traced ops (untraced Python, a sleep, I/O)",
            lambda frames: _untraced_recommendation(
                frames, bool(idle is not None and idle.python_stacks) or has_stacks, th
            ),
        ),
        _allocator_churn(index, idle, th),
        _cudnn_autotune(index, idle, th),
        _pageable_memcpy(index, steps, th),
        _no_step_markers(steps),
        _data_loss(health),
    ]
    raised = [d for d in found if d is not None]
    found.append(_low_utilization(steps, idle, raised, th))
    out = [d for d in found if d is not None]
    loss = next((d for d in out if d.id == "trace_data_loss"), None)
    if loss is not None and loss.evidence["unusable_fraction"] >= 1.0:
        return [loss]  # nothing usable: every other finding would be an artefact
    if communication is not None and steps is not None:
        out.extend(communication_diagnoses(communication, steps, th))
    if memory is not None:
        out.extend(memory_diagnoses(memory, th))
    efficiency = _panel(panels, "efficiency", EfficiencyPanel)
    if efficiency is not None and steps is not None:
        out.extend(efficiency_diagnoses(efficiency, steps, th))
    if health is not None:
        out.extend(trace_quality_diagnoses(health.trace_quality, th))
    return sort_diagnoses(with_moments(out, index, panels))
