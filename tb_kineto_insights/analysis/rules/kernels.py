"""Rules of the ``kernels`` area: what the kernels themselves cost the step.

``small_kernel_flood``: many short kernels *and* the GPU pays for them in launch-bound
idle (:func:`_small_kernel_flood`).
"""

from __future__ import annotations

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
from tb_kineto_insights.analysis.rules.fixes import launches_fused
from tb_kineto_insights.analysis.rules.moments import step_moment
from tb_kineto_insights.schema.diagnoses import Diagnosis, Moment
from tb_kineto_insights.schema.kernels import KernelsPanel


def _small_kernel_flood(inp: SpanInput) -> Diagnosis | None:
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
    (:func:`~tb_kineto_insights.analysis.rules.base.severity_for_impact`). When
    ``optimizer_step_bound`` was raised, the launch-bound cost inside the optimizer step
    is its, and left out here.
    """
    kernels, idle, th = inp.kernels, inp.idle, inp.th
    optimizer_raised = inp.was_raised("optimizer_step_bound")
    if kernels is None:
        return None
    short = kernels.short_count_fraction
    per_step = kernels.mean_per_step
    dev = main_idle(idle)
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
    cost_fraction = impact
    if severity_for_impact(cost_fraction, th) is None:
        return None
    prediction = fix_prediction(
        inp,
        "small_kernel_flood",
        "CUDA graphs over forward and backward: their launch calls and op dispatch "
        "removed, the kernels' work kept",
        launches_fused(),
        impact,
    )
    if prediction is not None:
        impact = prediction.saving_fraction
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    fusion = kernels.fusion_candidates
    issuer = fusion[0].cpu_op if fusion else None
    launch = kernels.launch
    where = f" The largest repeated run of short kernels comes from {issuer}." if issuer else ""
    compiled = kernels.compiled_kernel_fraction or 0.0
    replayed = graph_replayed_fraction(kernels)
    if replayed >= 0.5:  # most kernels come from CUDA graphs already
        advice = (
            f"{pct(replayed)} of the kernels are already replayed from CUDA graphs: the "
            "launch-bound ones run outside the graphs (ops the capture left out, graph "
            "breaks, the optimizer step). Find them in the fusion candidates and bring "
            "them into the captured region (torch.compile(mode='reduce-overhead') with "
            "no graph breaks: TORCH_LOGS=graph_breaks), and raise the batch size so each "
            "kernel does more work."
        )
    elif compiled >= 0.2:  # already torch.compile'd (Triton kernels): the next steps differ
        advice = (
            "The model is already compiled (Triton kernels) and still launch-bound: "
            'compile it with torch.compile(model, mode="reduce-overhead"), which captures '
            "the compiled graphs in CUDA graphs so the kernels of each graph replay with "
            "one launch (static input shapes; torch.compiler.cudagraph_mark_step_begin() "
            "between iterations when outputs are kept), or capture the step with "
            "torch.cuda.graphs; compile the optimizer step too, and raise the batch size "
            "so each kernel does more work; look at the remaining uncompiled ops in the "
            "fusion candidates."
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
        f"The GPU waits on kernel launches: {pct(cost_fraction)} of the step time goes to "
        f"launch-bound short kernels"
        + (" outside the optimizer step" if opt_us else "")
        + f" ({pct(short)} of {per_step:.0f} kernels per step are "
        f"shorter than {th.short_kernel_us:g} µs)",
        {
            "device": dev.device,
            "launch_bound_cost_fraction_of_step_time": cost_fraction,
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
            "compiled_kernel_fraction": compiled,
            "graph_replayed_fraction": replayed,
        },
        advice + where,
        "kernels",
        impact_fraction=impact,
        prediction=prediction,
    )


def graph_replayed_fraction(kernels: KernelsPanel) -> float:
    """The share of the kernels in the step windows launched by CUDA graph replays
    (``kernels.launch.graph_kernels`` / ``count_in_steps``; 0 without kernels)."""
    n = kernels.count_in_steps
    return kernels.launch.graph_kernels / n if n else 0.0


def graph_replay_evidence(kernels: KernelsPanel, n_steps: int) -> dict[str, float]:
    """The numbers :func:`graph_replay_words` states, for the evidence: replays, their
    kernels and their ``cudaGraphLaunch`` host time (µs) per step, and the share of the
    kernels graphs launched; empty without a replay."""
    launch = kernels.launch
    if not launch.graph_launches or n_steps <= 0:
        return {}
    return {
        "graph_replays_per_step": launch.graph_launches / n_steps,
        "graph_replay_kernels_per_step": launch.graph_kernels / n_steps,
        "graph_replay_host_us_per_step": launch.graph_launch_host_us / n_steps,
        "graph_replayed_fraction": graph_replayed_fraction(kernels),
    }


def graph_replay_words(kernels: KernelsPanel, n_steps: int) -> str:
    """``; 2 CUDA graph replays per step (266 kernels) cost the host 432 µs per step in
    cudaGraphLaunch``: a replay's host cost, when graphs launch at least half of the
    kernels; empty otherwise."""
    launch = kernels.launch
    if graph_replayed_fraction(kernels) < 0.5 or not launch.graph_launches or n_steps <= 0:
        return ""
    return (
        f"; {launch.graph_launches / n_steps:.0f} CUDA graph replays per step "
        f"({launch.graph_kernels / n_steps:.0f} kernels) cost the host "
        f"{duration(launch.graph_launch_host_us / n_steps)} per step in cudaGraphLaunch"
    )


def _flood_step(d: Diagnosis, inp: SpanInput) -> Moment | None:
    """The step with the most kernels (``kernels.per_step``), whole."""
    kernels = inp.kernels
    if kernels is None or not kernels.per_step:
        return None
    top = max(kernels.per_step, key=lambda s: (s.count, -s.number))
    return step_moment(inp.index, top.number, f"the step with the most kernels ({top.count})")


SMALL_KERNEL_FLOOD = Rule(
    id="small_kernel_flood",
    area="kernels",
    label="Small-kernel flood",
    definition="Most kernels of a step are short (under `short_kernel_us`), there are "
    "many per step, and the GPU pays for them: the idle before launch-bound short kernels "
    "plus their own time is at least the minimum impact.",
    panels=("kernels", "idle"),
    thresholds=(
        *IMPACT_THRESHOLDS,
        "small_kernel_count_fraction",
        "small_kernel_min_per_step",
        "short_kernel_us",
    ),
    check=_small_kernel_flood,
    moment=_flood_step,
    after=("optimizer_step_bound",),
    fix=Fix("fused kernels (torch.compile, CUDA graphs)"),
)
