"""Rules of the ``idle`` area: the GPU waits, and why (the idle panel's causes).

What each raises and costs (``impact_fraction``, a share of the summed step time of the
main device); severity follows the cost
(:func:`~tb_kineto_insights.analysis.rules.base.severity_for_impact`), nothing below
``min_impact_fraction``:

* ``gpu_idle_dataloader`` / ``gpu_idle_host_sync`` / ``gpu_idle_host_untraced``: the
  idle attributed to data loading / host synchronization / host work outside traced
  ops (:func:`_idle_cause`); with Python stacks they name the frames holding that idle
  (title and ``evidence.python_frames``) and, when one frame is the cost, advise about
  it (:func:`sync_recommendation`, :func:`untraced_recommendation`); the advice to
  record stacks appears only when the trace has none;
* ``optimizer_step_bound``: the optimizer step's idle and its GPU work
  (:func:`_optimizer_step_bound`);
* ``allocator_churn``: the ``allocator`` idle cause (:func:`_allocator_churn`);
* ``cudnn_autotune_in_step``: cuDNN's benchmark runs inside steady steps
  (:func:`_cudnn_autotune`);
* ``low_gpu_utilization``: the idle no other raised diagnosis explains
  (:func:`_low_utilization`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.autotune import conv_autotune
from tb_kineto_insights.analysis.python_frames import short_frame
from tb_kineto_insights.analysis.rules.base import (
    IMPACT_THRESHOLDS,
    Fix,
    Rule,
    SpanInput,
    duration,
    fix_prediction,
    main_idle,
    make_diagnosis,
    pct,
    severity_for_impact,
)
from tb_kineto_insights.analysis.rules.fixes import (
    FUSED_OPTIMIZER_HOST_SHARE,
    ChangeOf,
    allocator_calls_removed,
    frame_time_removed,
    host_time_removed,
    optimizer_fused,
    syncs_removed,
    together,
    tuning_removed,
)
from tb_kineto_insights.analysis.rules.idle_frames import (
    cause_frames,
    cpu_ops_named,
    dataloader_frame_advice,
    dominant_frame,
    frames_title,
    sync_recommendation,
    untraced_recommendation,
)
from tb_kineto_insights.analysis.rules.moments import gap_moment, longest_event, step_moment
from tb_kineto_insights.schema.diagnoses import Diagnosis, Moment
from tb_kineto_insights.trace import model as m

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


def _optimizer_step_bound(inp: SpanInput) -> Diagnosis | None:
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
    th = inp.th
    dev = main_idle(inp.idle)
    if dev is None:
        return None
    opt = dev.optimizer
    tuned = opt.mode in ("foreach", "fused", "compiled")
    bar = th.optimizer_tuned_idle_min_fraction if tuned else th.optimizer_idle_min_fraction
    if opt.idle_fraction_of_step_time < bar:
        return None
    prediction = fix_prediction(
        inp,
        "optimizer_step_bound",
        "a fused optimizer: its host time and launches cut to "
        f"{FUSED_OPTIMIZER_HOST_SHARE:.0%}, its kernels' work kept",
        optimizer_fused(),
        opt.cost_fraction_of_step_time,
    )
    impact = prediction.saving_fraction if prediction else opt.cost_fraction_of_step_time
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    n_steps = len(dev.per_step) or 1
    return make_diagnosis(
        "optimizer_step_bound",
        severity,
        f"The optimizer step takes {pct(opt.cost_fraction_of_step_time)} of the step time "
        f"({duration(opt.cost_us / n_steps)} per step: GPU idle "
        f"{duration(opt.idle_us / n_steps)}, its kernels {duration(opt.busy_us / n_steps)}); "
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
            "cost_fraction_of_step_time": opt.cost_fraction_of_step_time,
            "kernels_per_step": opt.kernels_per_step,
            "optimizer_steps_per_step": opt.ranges_per_step,
            "top_kernels": [k.name for k in opt.top_kernels[:3]],
        },
        _OPTIMIZER_ADVICE.get(opt.mode, _OPTIMIZER_ADVICE["none"]),
        "idle",
        impact_fraction=impact,
        prediction=prediction,
    )


#: The idle causes whose cost a named Python frame can hold (the fix is then that
#: function's time off the thread).
FRAME_FIXES = ("host_sync", "host_untraced", "data_loading")


def _idle_cause(
    inp: SpanInput,
    cause: str,
    id_: str,
    fix: tuple[str, ChangeOf],
    title: str,
    recommendation: str | Callable[[list[dict[str, Any]]], str],
) -> Diagnosis | None:
    """An idle-cause diagnosis: the GPU idles while the launching thread does ``cause``.

    Raised when the main device's idle attributed to ``cause`` / summed step time
    (``idle.devices[].causes[cause].fraction_of_step_time``, the title's share) reaches
    ``min_impact_fraction``; ``impact_fraction`` is what its fix (``fix``: its words and
    its change of the step's graph, :mod:`.fixes`) saves when replayed (the idle share
    where there is no graph); severity follows it, and nothing is raised when the
    replayed saving is below ``min_impact_fraction``
    (:func:`~tb_kineto_insights.analysis.rules.base.severity_for_impact`), nothing below
    ``min_impact_fraction``; nothing either when the cause costs that much in fewer than
    ``idle_cause_min_steps`` steps of a longer profile (a one-off stall: proved quiet on
    ``sample_logs/memory_fixed_async``, whose first profiled step starts on an empty GPU
    queue, and on ``kineto_resnet50``'s second span, one 80 ms stretch in 1 of 6 steps).

    With Python stacks the title names the frames that hold the cause's idle and the
    evidence lists them (``python_frames``, :func:`cause_frames`); ``recommendation``
    may be a function of those frames. Without stacks the title and evidence name no
    frame.
    """
    idle, th = inp.idle, inp.th
    dev = main_idle(idle)
    if dev is None or cause not in dev.causes:
        return None
    cost = dev.causes[cause]
    share = cost.fraction_of_step_time
    if severity_for_impact(share, th) is None:
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
    frames = cause_frames(dev, cause, th)
    dominant = dominant_frame(frames, th) if cause in FRAME_FIXES else None
    if dominant is not None:  # the cost is one function's: its time off the thread
        frame = frame_time_removed(dominant["frame"])
        fix = (
            f"{short_frame(dominant['frame'])} off the training thread"
            + (" and no host synchronisation" if cause == "host_sync" else ""),
            together(frame, syncs_removed()) if cause == "host_sync" else frame,
        )
    prediction = fix_prediction(inp, id_, fix[0], fix[1], share)
    impact = prediction.saving_fraction if prediction else share
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None  # the replay says the fix would not shorten the step: silence
    evidence_frames: dict[str, Any] = (
        {"python_frames": frames} if idle and idle.python_stacks else {}
    )
    return make_diagnosis(
        id_,
        severity,
        title.format(
            share=pct(share),
            device=dev.device,
            when=f"{duration(cost.us / n_steps)} per step"
            if hit >= len(per_step)
            else f"{duration(cost.us)} in total over {len(per_step)} steps, "
            f"mostly in {hit} of them",
        )
        + frames_title(frames, cause),
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
        impact_fraction=impact,
        prediction=prediction,
    )


def _claimed_causes() -> dict[str, str]:
    """Idle cause → the diagnosis that claims it (``low_gpu_utilization`` does not
    repeat it): every rule's ``idle_cause``, these first (the order of the evidence's
    ``explained_fraction_by_diagnosis``), then any other rule's in ``RULES`` order."""
    from tb_kineto_insights.analysis.rules import RULES  # the list imports this module

    first = (
        GPU_IDLE_DATALOADER,
        GPU_IDLE_HOST_SYNC,
        GPU_IDLE_HOST_UNTRACED,
        OPTIMIZER_STEP_BOUND,
        ALLOCATOR_CHURN,
    )
    rules = [*first, *(r for r in RULES if r not in first)]
    return {r.idle_cause: r.id for r in rules if r.idle_cause is not None}


def _low_utilization(inp: SpanInput) -> Diagnosis | None:
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
    stacks, the frames holding most of that cause (:func:`cause_frames`).
    """
    steps, idle, raised, th = inp.steps, inp.idle, inp.raised, inp.th
    util = steps.gpu_utilization_fraction if steps is not None else None
    dev = main_idle(idle)
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
    for cause, id_ in _claimed_causes().items():
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
    frames = cause_frames(dev, top, th) if top else []
    return make_diagnosis(
        "low_gpu_utilization",
        severity,
        f"GPU {dev.device} is busy only {pct(util)} of the step time; "
        f"{pct(unexplained)} of it idles for other reasons"
        + (f", mostly {top_label}" if top_label else "")
        + (frames_title(frames, top) if top else ""),
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


def _allocator_churn(inp: SpanInput) -> Diagnosis | None:
    """``allocator_churn``: the caching allocator goes to the driver inside the steps.

    The cost is the ``allocator`` idle cause (:mod:`.idle`): gaps that open while the
    launching thread is in ``cudaMalloc``/``cudaFree`` (or HIP's), wholly — ``cudaFree``
    synchronises the device, so the GPU loses the work the host had queued ahead — plus
    the idle during such calls elsewhere. ``impact_fraction`` is that idle over the
    summed step time; raised as every idle-cause diagnosis (:func:`_idle_cause`: at least
    ``min_impact_fraction``, in at least ``idle_cause_min_steps`` steps). The evidence
    counts the calls per step and their host time inside the host step windows.
    """
    index = inp.index
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
        inp,
        "allocator",
        "allocator_churn",
        ("cudaMalloc/cudaFree calls and their waits removed", allocator_calls_removed()),
        "GPU {device} idles {share} of the step time ({when}) while the CUDA caching "
        f"allocator frees and re-allocates device memory ({calls or 'no call'} and "
        f"{duration(host_us)} of host time per step)",
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


def _cudnn_autotune(inp: SpanInput) -> Diagnosis | None:
    """``cudnn_autotune_in_step``: cuDNN benchmarks convolutions again in steady steps.

    From :func:`~tb_kineto_insights.analysis.autotune.conv_autotune`: ``impact_fraction``
    = wall time of the convolution ops that synchronise (the benchmark: trial kernels,
    each waited for) in the tuning steps, over the summed step time; raised when at
    least ``idle_cause_min_steps`` steps tune (when the profile has more steps than
    that; once is the warm-up of a new shape) and the impact reaches
    ``min_impact_fraction``; severity follows it. Its ``idle_us`` (the GPU idle inside
    that time) is claimed from ``low_gpu_utilization``.
    """
    index, idle, th = inp.index, inp.idle, inp.th
    main = idle.main_device if idle is not None else None
    found = conv_autotune(index, main, th.cudnn_autotune_min_syncs)
    if found is None or found.tuning_steps == 0:
        return None
    need = min(th.idle_cause_min_steps, found.steps)
    if found.tuning_steps < need:
        return None
    prediction = fix_prediction(
        inp,
        "cudnn_autotune_in_step",
        "shapes tuned once: the benchmark runs inside the convolutions removed",
        tuning_removed(found.tuning_ranges),
        found.cost_fraction_of_step_time,
    )
    impact = prediction.saving_fraction if prediction else found.cost_fraction_of_step_time
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
    ops = ", ".join(f"{name} {duration(us / n)}" for name, us in found.top_ops)
    return make_diagnosis(
        "cudnn_autotune_in_step",
        severity,
        f"cuDNN autotunes convolutions in {found.tuning_steps} of {n} steps: "
        f"{pct(found.cost_fraction_of_step_time)} of the step time "
        f"({duration(found.cost_us / n)} per step) goes to "
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
        prediction=prediction,
    )


def _dataloader(inp: SpanInput) -> Diagnosis | None:
    """``gpu_idle_dataloader``: the ``data_loading`` idle cause (:func:`_idle_cause`)."""
    return _idle_cause(
        inp,
        "data_loading",
        "gpu_idle_dataloader",
        ("the DataLoader's fetch off the training thread", host_time_removed("data_loading")),
        "GPU {device} idles {share} of the step time ({when}) waiting for the DataLoader",
        lambda frames: (
            "Load batches ahead of the GPU: DataLoader(num_workers=N>0, e.g. "
            "the CPU cores per GPU), pin_memory=True, prefetch_factor=2..4, "
            "persistent_workers=True, and .to(device, non_blocking=True); move heavy "
            "per-sample transforms to the GPU or precompute them."
            + dataloader_frame_advice(frames, inp.th)
        ),
    )


def _host_sync(inp: SpanInput) -> Diagnosis | None:
    """``gpu_idle_host_sync``: the ``host_sync`` idle cause (:func:`_idle_cause`)."""
    return _idle_cause(
        inp,
        "host_sync",
        "gpu_idle_host_sync",
        ("no host synchronisation inside the step", syncs_removed()),
        "GPU {device} idles {share} of the step time ({when}) after host synchronisation",
        lambda frames: sync_recommendation(frames, inp.th),
    )


def _host_untraced(inp: SpanInput) -> Diagnosis | None:
    """``gpu_idle_host_untraced``: the ``host_untraced`` idle cause
    (:func:`_idle_cause`); the advice to record stacks only when the trace has none."""
    idle, health = inp.idle, inp.health
    has_stacks = health is not None and health.flags.has_stacks
    return _idle_cause(
        inp,
        "host_untraced",
        "gpu_idle_host_untraced",
        ("the untraced host work off the training thread", host_time_removed("untraced")),
        "GPU {device} idles {share} of the step time ({when}) while the host is busy "
        "outside traced ops (untraced Python, a sleep, I/O)",
        lambda frames: untraced_recommendation(
            frames, bool(idle is not None and idle.python_stacks) or has_stacks, inp.th
        ),
    )


def _gap_of(cause: str | None) -> Callable[[Diagnosis, SpanInput], Moment | None]:
    """The moment of an idle-cause diagnosis: the longest of the main GPU's listed largest
    gaps whose cause is ``cause`` (any cause when None)."""

    def moment(d: Diagnosis, inp: SpanInput) -> Moment | None:
        return gap_moment(inp.idle, cause)

    return moment


def _allocator_moment(d: Diagnosis, inp: SpanInput) -> Moment | None:
    """The longest ``allocator`` gap; with none listed, the longest
    ``cudaMalloc``/``cudaFree`` call in a step."""
    found = gap_moment(inp.idle, "allocator")
    if found is None:
        rows = inp.index.rows_where(m.RUNTIME, nm.is_allocator_call)
        found = longest_event(inp.index, m.RUNTIME, rows, "the longest cudaMalloc/cudaFree call")
    return found


def _autotune_moment(d: Diagnosis, inp: SpanInput) -> Moment | None:
    """The step with the most autotuning time, from the diagnosis's own evidence
    (``tuning_us_per_step``, one value per step window in order)."""
    index = inp.index
    tuning = d.evidence.get("tuning_us_per_step")
    if not isinstance(tuning, list) or not tuning or len(tuning) != len(index.steps):
        return None
    i = max(range(len(tuning)), key=lambda k: (tuning[k], -k))
    if not tuning[i] > 0:
        return None
    return step_moment(
        index,
        int(index.steps.number[i]),
        f"the step with the most autotuning ({tuning[i]:.0f} µs)",
    )


_IDLE_CAUSE = (*IMPACT_THRESHOLDS, "idle_cause_min_steps")
_FRAMES = ("python_frames_named", "python_frame_min_fraction", "python_frame_dominant_fraction")

OPTIMIZER_STEP_BOUND = Rule(
    id="optimizer_step_bound",
    area="idle",
    label="Optimizer step bound",
    definition="The GPU idles while the host runs the optimizer step (`Optimizer.step`): "
    "its idle plus the GPU work it launches is the cost; the advice follows how the "
    "optimizer runs (one parameter at a time, foreach, fused, compiled).",
    panels=("idle",),
    thresholds=(
        *IMPACT_THRESHOLDS,
        "optimizer_idle_min_fraction",
        "optimizer_tuned_idle_min_fraction",
    ),
    check=_optimizer_step_bound,
    moment=_gap_of("optimizer_step"),
    idle_cause="optimizer_step",
    fix=Fix("foreach or fused optimizer"),
)
GPU_IDLE_DATALOADER = Rule(
    id="gpu_idle_dataloader",
    area="idle",
    label="GPU idle on data loading",
    definition="The GPU idles while the launching thread waits for the next batch "
    "(`enumerate(DataLoader)`), in at least two steps.",
    panels=("idle",),
    thresholds=(*_IDLE_CAUSE, *_FRAMES),
    check=_dataloader,
    moment=_gap_of("data_loading"),
    idle_cause="data_loading",
    fix=Fix("DataLoader workers"),
)
GPU_IDLE_HOST_SYNC = Rule(
    id="gpu_idle_host_sync",
    area="idle",
    label="GPU idle after host sync",
    definition="The GPU idles after the host synchronised with it (`.item()`, `.cpu()`, "
    "`torch.cuda.synchronize()`, a synchronous copy): the host drained the queue instead "
    "of running ahead.",
    panels=("idle",),
    thresholds=(*_IDLE_CAUSE, *_FRAMES),
    check=_host_sync,
    moment=_gap_of("host_sync"),
    idle_cause="host_sync",
    fix=Fix("no synchronisation inside the step"),
)
GPU_IDLE_HOST_UNTRACED = Rule(
    id="gpu_idle_host_untraced",
    area="idle",
    label="GPU idle, host busy outside traced ops",
    definition="The GPU idles while the launching thread is inside the step but in no "
    "traced op or runtime call (untraced Python, a sleep, I/O); with stacks, the Python "
    "frames are named.",
    panels=("idle",),
    thresholds=(*_IDLE_CAUSE, *_FRAMES),
    check=_host_untraced,
    moment=_gap_of("host_untraced"),
    idle_cause="host_untraced",
    fix=Fix("host work moved off the training thread"),
)
ALLOCATOR_CHURN = Rule(
    id="allocator_churn",
    area="idle",
    label="Allocator churn",
    definition="The GPU idles while the CUDA caching allocator frees and re-allocates "
    "device memory inside the steps (`cudaFree` synchronises the device): "
    "`torch.cuda.empty_cache()` in the loop, caching disabled, or a memory cap.",
    panels=("idle",),
    thresholds=(*_IDLE_CAUSE, *_FRAMES),
    check=_allocator_churn,
    moment=_allocator_moment,
    idle_cause="allocator",
    fix=Fix("allocator cache kept"),
)
CUDNN_AUTOTUNE_IN_STEP = Rule(
    id="cudnn_autotune_in_step",
    area="idle",
    label="cuDNN autotuning in the step",
    definition="cuDNN benchmarks convolution algorithms again inside steady steps "
    "(`cudnn.benchmark=True` with new input shapes): the synchronising trial runs are "
    "the cost.",
    thresholds=(*IMPACT_THRESHOLDS, "cudnn_autotune_min_syncs", "idle_cause_min_steps"),
    check=_cudnn_autotune,
    moment=_autotune_moment,
    fix=Fix("fixed or bucketed input shapes"),
)
LOW_GPU_UTILIZATION = Rule(
    id="low_gpu_utilization",
    area="idle",
    label="Low GPU utilization",
    definition="The GPU is busy less than half the step, and idle that no other raised "
    "diagnosis explains is at least the minimum impact; it names the largest remaining "
    "idle cause.",
    panels=("steps", "idle"),
    thresholds=(*IMPACT_THRESHOLDS, "low_utilization", *_FRAMES),
    check=_low_utilization,
    moment=_gap_of(None),
    after=(
        "optimizer_step_bound",
        "small_kernel_flood",
        "gpu_idle_dataloader",
        "gpu_idle_host_sync",
        "gpu_idle_host_untraced",
        "allocator_churn",
        "cudnn_autotune_in_step",
    ),
)
