"""Rules of the ``idle`` area: the GPU waits, and why (the idle panel's causes).

What each raises and costs (``impact_fraction``, a share of the summed step time of the
main device); severity follows the cost
(:func:`~tb_kineto_insights.analysis.rules.base.severity_for_impact`), nothing below
``min_impact_fraction``:

* ``gpu_idle_dataloader`` / ``gpu_idle_host_sync`` / ``gpu_idle_host_untraced``: the
  idle attributed to data loading / host synchronization / host work outside traced
  ops (:func:`idle_cause`); with Python stacks they name the frames holding that idle
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

import msgspec
import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.autotune import conv_autotune
from tb_kineto_insights.analysis.compile_events import CompileFacts, compile_facts
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
    allocator_calls_removed,
    compiles_removed,
    host_time_removed,
    optimizer_fused,
    syncs_removed,
    tuning_removed,
)
from tb_kineto_insights.analysis.rules.idle_cause import (
    idle_cause,
    largest_part,
    sync_advice,
    sync_title,
)
from tb_kineto_insights.analysis.rules.idle_frames import (
    cause_frames,
    cpu_ops_named,
    dataloader_frame_advice,
    frames_title,
    sync_recommendation,
    untraced_recommendation,
)
from tb_kineto_insights.analysis.rules.kernels import graph_replay_evidence, graph_replay_words
from tb_kineto_insights.analysis.rules.moments import gap_moment, longest_event, step_moment
from tb_kineto_insights.analysis.units import fmt_bytes
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
    n_steps = len(dev.per_step) or 1
    parts = {c: us / n_steps for c, us in unclaimed_us.items() if us > 0}
    top = largest_part(parts)
    labels = idle.cause_labels
    top_label = labels.get(top, top.replace("_", " ")) if top else None
    cpu_ops_us = dev.causes["cpu_ops"].us / n_steps if "cpu_ops" in dev.causes else 0.0
    if top is not None and top_label is not None:
        amount = f"{duration(parts[top])} of {duration(sum(parts.values()))} per step"
        top_label += (  # the ops hold the cause's whole idle, explained or not
            f" ({amount} unexplained; of its {duration(cpu_ops_us)} per step in all, "
            f"the ops {cpu_ops_named(dev)})"
            if top == "cpu_ops" and dev.cpu_ops_top
            else f" ({amount})"
        )
    frames = cause_frames(dev, top, th) if top else []
    kernels = inp.kernels
    graphs = graph_replay_words(kernels, len(dev.per_step)) if kernels is not None else ""
    return make_diagnosis(
        "low_gpu_utilization",
        severity,
        f"GPU {dev.device} is busy only {pct(util)} of the step time; "
        f"{pct(unexplained)} of it idles for other reasons"
        + (f", mostly {top_label}" if top_label else "")
        + (frames_title(frames, top) if top else "")
        + graphs,
        {
            **({"python_frames": frames} if idle.python_stacks else {}),
            "unexplained_idle_us_per_step": sum(parts.values()),
            "unexplained_us_per_step_by_cause": dict(
                sorted(parts.items(), key=lambda kv: (-kv[1], kv[0]))
            ),
            "device": dev.device,
            "gpu_utilization_fraction": util,
            "idle_fraction_of_step_time": idle_fraction,
            "unexplained_idle_fraction": unexplained,
            "utilization_without_explained_idle_fraction": util / rest,
            "explained_fraction_by_diagnosis": claimed,
            "largest_unexplained_cause": top,
            "largest_unexplained_cause_fraction": unclaimed_us[top] * scale if top else None,
            "cpu_ops_idle_us_per_step": cpu_ops_us,
            "cpu_ops_top": [
                {"name": o.name, "idle_us_per_step": o.us / (len(dev.per_step) or 1)}
                for o in dev.cpu_ops_top
            ],
            "mean_step_us": steps.mean_step_us,
            **(graph_replay_evidence(kernels, n_steps) if kernels is not None else {}),
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
    summed step time; raised as every idle-cause diagnosis (:func:`idle_cause`: at least
    ``min_impact_fraction``, in at least ``idle_cause_min_steps`` steps), and ``low``
    from ``allocator_churn_min_fraction`` up when the cache released device memory in
    at least ``idle_cause_min_steps`` steps (:func:`_release_steps`: a release is what
    churn is, and its fix is one call removed). The evidence counts the calls per step,
    their host time inside the host step windows, and the steps in which the cache
    released memory with the bytes it released (the memory panel's
    ``fragmentation.release_steps``: that is churn, not fragmentation). Its fix removes
    the allocator's idle: the host time of those calls and the GPU idle they open
    (``impact_fraction`` = that idle / step).
    """
    index, th = inp.index, inp.th
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
    released, released_bytes = _release_steps(inp)
    churned = len(released) >= min(th.idle_cause_min_steps, len(steps))
    release_words = (
        f"; the cache released memory in {len(released)} of {len(steps)} steps"
        + (f" ({fmt_bytes(released_bytes / n_steps)} a step)" if released_bytes else "")
        if released
        else ""
    )
    found = idle_cause(
        inp,
        "allocator",
        "allocator_churn",
        ("cudaMalloc/cudaFree calls and their waits removed", allocator_calls_removed()),
        "GPU {device} idles {share} of the step time ({when}) while the CUDA caching "
        f"allocator frees and re-allocates device memory ({calls or 'no call'} and "
        f"{duration(host_us)} of host time per step){release_words}",
        "The caching allocator returns memory to the driver and asks for it again inside "
        "the loop; cudaFree waits for the GPU, so the host loses its lead. Remove "
        "torch.cuda.empty_cache() from the training loop (call it, if at all, between "
        "phases); unset PYTORCH_NO_CUDA_MEMORY_CACHING (it disables the cache); if the "
        "process is capped (torch.cuda.set_per_process_memory_fraction, a small MIG "
        "slice, other processes on the GPU) give it more memory or allocate less per "
        "step (smaller batch, activation checkpointing), and reuse buffers of one size.",
        floor=th.allocator_churn_min_fraction if churned else None,
    )
    if found is None:
        return None
    evidence = {
        **found.evidence,
        "calls_per_step": counts,
        "host_us_per_step": host_us,
        "release_steps": released,
        "released_bytes_per_step": released_bytes / n_steps,
    }
    return msgspec.structs.replace(found, evidence=evidence)


def _release_steps(inp: SpanInput) -> tuple[list[int], int]:
    """The steps (numbers) in which the caching allocator released device memory on the
    main device, and the bytes it released: a device-memory free call (``cudaFree``…)
    inside the step's host window, or ``Total Reserved`` falling in it (the memory
    panel's ``fragmentation.release_steps`` / ``released_bytes`` of that device)."""
    index = inp.index
    steps = index.steps
    rt = index.trace.runtime
    frees = index.rows_where(m.RUNTIME, nm.is_allocator_free)
    hs, he = steps.host_windows() if steps.has_markers else (steps.start_ns, steps.end_ns)
    k = iv.window_index(rt.start_ns[frees], hs, he) if frees.size else frees.astype(np.int64)
    numbers = {int(steps.number[j]) for j in np.unique(k[k >= 0]).tolist()}
    released = 0
    main = index.main_device
    for d in inp.memory.devices if inp.memory is not None else []:
        if d.device_type == 1 and d.device_id == main and d.fragmentation is not None:
            kept = {int(n) for n in steps.number.tolist()}
            numbers |= {n for n in d.fragmentation.release_steps if n in kept}
            released = d.fragmentation.released_bytes
    return sorted(numbers), released


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
            "cost_fraction_of_step_time": found.cost_fraction_of_step_time,
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


def _shapes_words(facts: CompileFacts) -> str:
    """``, 5 distinct input shapes ([8, 144] … [8, 176])``: the compiled graph's input
    dims that differ between its calls in the compiling steps (the first and the last
    of the first varying input), or just their count; empty without shapes."""
    if facts.input_shapes < 2:
        return ""
    text = f", {facts.input_shapes} distinct input shapes"
    if facts.varying:
        values = next(iter(facts.varying.values()))
        text += f" ({values[0]} … {values[-1]})"
    return text


def _compile_in_step(inp: SpanInput) -> Diagnosis | None:
    """``compile_in_step``: torch.compile compiles (or recompiles) inside the profiled
    steps: the ``compiling`` idle cause (:func:`idle_cause`: at least
    ``min_impact_fraction`` of the step in at least ``idle_cause_min_steps`` steps, a
    compile in one step of many being the warm-up ``trace_warmup_step`` names), with
    :func:`~tb_kineto_insights.analysis.compile_events.compile_facts`: the compiles
    (Dynamo's compile ids) and the distinct input shapes of the compiled graph in those
    steps, and the host time compiling per step.

    ``impact_fraction`` = the GPU idle while the launching thread compiles over the
    summed step time. Its fix (shapes marked dynamic, bucketed, or every shape warmed
    up before profiling) removes the compile ranges' host time from the steps
    (``host_us_per_step``), and with it that idle. Fires on
    ``sample_logs/recompile_every_step`` (5 compiles for 5 sequence lengths, 99 % of the
    step; measured fix 6 755.6 → 6.23 ms); quiet on ``recompile_mark_dynamic`` and the
    ``compiled_*`` runs (compiled before profiling)."""
    facts = compile_facts(inp.index)
    if facts.steps_compiling == 0:
        return None
    n = len(facts.host_us_per_step) or 1
    ids = facts.compile_ids
    named = f" ({ids[0]} … {ids[-1]})" if len(ids) > 1 else f" ({ids[0]})" if ids else ""
    found = idle_cause(
        inp,
        "compiling",
        "compile_in_step",
        (
            "every shape compiled before the steps: the compiles removed",
            compiles_removed(facts.ranges),
        ),
        "torch.compile compiles inside the steps: GPU {device} idles {share} of the step "
        "time ({when}) while Dynamo and Inductor compile; "
        f"{facts.compiles} compile{'s' if facts.compiles != 1 else ''}{named} in "
        f"{facts.steps_compiling} of {len(facts.host_us_per_step)} steps"
        + _shapes_words(facts).replace("{", "{{").replace("}", "}}"),
        "Dynamo compiles again whenever a guard fails, most often a new input shape "
        "(sequence length, batch size): the compile runs inside the step, on the host, "
        "while the GPU waits. Mark the dimension that varies as dynamic before the call "
        "(torch._dynamo.mark_dynamic(x, dim), or maybe_mark_dynamic) or compile with "
        "torch.compile(..., dynamic=True), so one graph serves every length; or pad / "
        "bucket the inputs to a few fixed lengths, each compiled once; and run every shape "
        "once before profiling, so the profile shows the job's steady step. "
        "TORCH_LOGS=recompiles prints why each recompile happened.",
    )
    if found is None:
        return None
    evidence = {
        **found.evidence,
        "compiles": facts.compiles,
        "compile_ids": ids,
        "steps_compiling": facts.steps_compiling,
        "compile_host_us_per_step": sum(facts.host_us_per_step) / n,
        "compile_host_us_by_step": facts.host_us_per_step,
        "distinct_input_shapes": facts.input_shapes,
        "varying_inputs": {str(k): v for k, v in facts.varying.items()},
    }
    return msgspec.structs.replace(found, evidence=evidence)


def _dataloader(inp: SpanInput) -> Diagnosis | None:
    """``gpu_idle_dataloader``: the ``data_loading`` idle cause (:func:`idle_cause`)."""
    return idle_cause(
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
    """``gpu_idle_host_sync``: the ``host_sync`` idle cause (:func:`idle_cause`), with
    where the host synchronised (``idle.devices[].sync_sources``, :mod:`..idle_sync`):
    the title names the source that opened the most idle, its syncs per step and, with
    stacks, its Python frame; the evidence lists the sources (``sync_sources``) and
    their syncs per step (``syncs_per_step``); the advice starts with what that op
    does. Its fix removes the idle those syncs open: ``impact_fraction`` is that idle
    over the summed step time (the ``host_sync`` cause)."""
    dev = main_idle(inp.idle)
    sources = list(dev.sync_sources) if dev is not None else []
    found = idle_cause(
        inp,
        "host_sync",
        "gpu_idle_host_sync",
        ("no host synchronisation inside the step", syncs_removed()),
        "GPU {device} idles {share} of the step time ({when}) after host synchronisation"
        + sync_title(sources).replace("{", "{{").replace("}", "}}"),
        lambda frames: sync_advice(sources) + sync_recommendation(frames, inp.th),
    )
    if found is None:
        return None
    evidence = {
        **found.evidence,
        "syncs_per_step": sum(s.calls_per_step for s in sources),
        "sync_sources": [msgspec.to_builtins(s) for s in sources],
    }
    return msgspec.structs.replace(found, evidence=evidence)


def _host_untraced(inp: SpanInput) -> Diagnosis | None:
    """``gpu_idle_host_untraced``: the ``host_untraced`` idle cause
    (:func:`idle_cause`); the advice to record stacks only when the trace has none."""
    idle, health = inp.idle, inp.health
    has_stacks = health is not None and health.flags.has_stacks
    return idle_cause(
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
    "`torch.cuda.empty_cache()` in the loop, caching disabled, or a memory cap; low from "
    "`allocator_churn_min_fraction` of the step when the cache released memory in the "
    "steps.",
    panels=("idle",),
    thresholds=(*_IDLE_CAUSE, *_FRAMES, "allocator_churn_min_fraction"),
    check=_allocator_churn,
    moment=_allocator_moment,
    idle_cause="allocator",
    fix=Fix("allocator cache kept"),
)
COMPILE_IN_STEP = Rule(
    id="compile_in_step",
    area="idle",
    label="torch.compile compiling in the step",
    definition="torch.compile compiles or recompiles inside the profiled steps (Dynamo, "
    "AOTAutograd, Inductor, Triton autotuning; a new input shape each time, most often): "
    "the GPU idle while the host compiles is the cost; the card counts the compiles and "
    "the distinct input shapes.",
    panels=("idle",),
    thresholds=(*_IDLE_CAUSE, *_FRAMES),
    check=_compile_in_step,
    moment=_gap_of("compiling"),
    idle_cause="compiling",
    fix=Fix("dynamic shapes, bucketing, or warm-up before profiling"),
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
        "compile_in_step",
    ),
)
