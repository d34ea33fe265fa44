"""What every idle-cause diagnosis of the ``idle`` area shares (:mod:`.idle`): the
diagnosis of one idle cause (:func:`idle_cause`), the Python frames that hold a cause's
idle and the advice about them, and the words of a title that names a part
(:func:`largest_part`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tb_kineto_insights.analysis.python_frames import short_frame
from tb_kineto_insights.analysis.rules.base import (
    duration,
    main_idle,
    make_diagnosis,
    pct,
    severity_for_impact,
)
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.idle import IdleDevice, IdlePanel, SyncSource


def cpu_ops_named(dev: IdleDevice, k: int = 3) -> str:
    """The ops holding a device's ``cpu_ops`` idle, most first, with their idle time per
    step: ``"aten::linear 1.8 ms, aten::layer_norm 0.5 ms per step"`` (the first ``k`` of
    ``dev.cpu_ops_top``); empty when none is known."""
    n_steps = len(dev.per_step) or 1
    ops = dev.cpu_ops_top[:k]
    if not ops:
        return ""
    return ", ".join(f"{o.name} {duration(o.us / n_steps)}" for o in ops) + " per step"


def cause_frames(dev: IdleDevice, cause: str, th: Thresholds) -> list[dict[str, Any]]:
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


def frames_title(frames: list[dict[str, Any]], cause: str) -> str:
    """``; the host was in a.py(3): f (12.1 ms per step), …`` (empty without frames);
    for ``host_sync``, ``; after the sync the host was in …`` (a sync-opened gap is all
    time after the sync returned)."""
    if not frames:
        return ""
    lead = "; after the sync the host was in " if cause == "host_sync" else "; the host was in "
    return lead + ", ".join(
        f"{short_frame(f['frame'])} ({duration(f['idle_us_per_step'])} per step)" for f in frames
    )


def dominant(frames: list[dict[str, Any]], th: Thresholds) -> dict[str, Any] | None:
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


def dataloader_frame_advice(frames: list[dict[str, Any]], th: Thresholds) -> str:
    """A sentence naming the frame that holds most of the data-loading idle (the
    dataset or transform code to make cheaper or move into the workers), else empty."""
    top = dominant(frames, th)
    if top is None:
        return ""
    return (
        f" Most of the wait is in {top['frame']} ({duration(top['idle_us_per_step'])} per "
        "step): make it cheaper or run it in the workers."
    )


def sync_recommendation(frames: list[dict[str, Any]], th: Thresholds) -> str:
    """``gpu_idle_host_sync``'s advice: about the call the host made after the sync
    when that call, in another frame than the one that synchronised, holds most of the
    idle (the sync only drained the queue; the call is the cost); else about syncs."""
    top = dominant(frames, th)
    if top is not None and top["after_sync_us_per_step"] >= (
        th.python_frame_dominant_fraction * top["idle_us_per_step"]
    ):
        return (
            f"After the sync the host spends {duration(top['after_sync_us_per_step'])} per step "
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


def untraced_recommendation(frames: list[dict[str, Any]], has_stacks: bool, th: Thresholds) -> str:
    """``gpu_idle_host_untraced``'s advice: about the named frames when stacks name
    them; to read the stacks when they are recorded but no frame stands out; to record
    them (``with_stack=True`` or py-spy) only when the trace has none."""
    move = (
        "move it off the training thread (DataLoader workers, a background thread or "
        "process), do it every N steps, or do it on the GPU."
    )
    top = dominant(frames, th)
    if top is not None:
        return (
            f"The thread that launches the GPU work spends {duration(top['idle_us_per_step'])} "
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


def idle_cause(
    idle: IdlePanel | None,
    cause: str,
    id_: str,
    th: Thresholds,
    title: str,
    recommendation: str | Callable[[list[dict[str, Any]]], str],
    floor: float | None = None,
) -> Diagnosis | None:
    """An idle-cause diagnosis: the GPU idles while the launching thread does ``cause``.

    ``impact_fraction`` = the main device's idle attributed to ``cause`` / summed step
    time (``idle.devices[].causes[cause].fraction_of_step_time``); severity follows it
    (:func:`~tb_kineto_insights.analysis.rules.base.severity_for_impact`), nothing below
    ``min_impact_fraction``; nothing either when the cause costs that much in fewer than
    ``idle_cause_min_steps`` steps of a longer profile (a one-off stall: proved quiet on
    ``sample_logs/memory_fixed_async``, whose first profiled step starts on an empty GPU
    queue, and on ``kineto_resnet50``'s second span, one 80 ms stretch in 1 of 6 steps).

    With Python stacks the title names the frames that hold the cause's idle and the
    evidence lists them (``python_frames``, :func:`cause_frames`); ``recommendation``
    may be a function of those frames. Without stacks the title and evidence name no
    frame.

    ``floor`` (a share of the step below ``min_impact_fraction``): the cause is raised
    ``low`` from that share up instead (a rule that knows the cost is real and cheap to
    remove below the general bar: ``allocator_churn``), and a step counts towards
    ``idle_cause_min_steps`` from that share of it up.
    """
    dev = main_idle(idle)
    if dev is None or cause not in dev.causes:
        return None
    cost = dev.causes[cause]
    share = cost.fraction_of_step_time
    severity = severity_for_impact(share, th)
    bar = th.min_impact_fraction
    if severity is None and floor is not None and floor <= share < bar:
        severity, bar = "low", floor
    if severity is None:
        return None
    gaps = [g for g in dev.largest_gaps if g.cause == cause]
    op = next((g.op for g in gaps if g.op), None)
    per_step = dev.per_step
    n_steps = len(per_step) or 1
    # steps where this cause alone idles the GPU for at least min_impact of the step
    hit = sum(1 for st in per_step if st.causes_us.get(cause, 0.0) >= bar * st.duration_us > 0)
    if len(per_step) > th.idle_cause_min_steps and hit < th.idle_cause_min_steps:
        return None  # a one-off stall, not a steady cost (see the threshold's comment)
    # "mostly in k of them" only when those steps hold more than half of the cost
    hit_us = sum(
        st.causes_us.get(cause, 0.0)
        for st in per_step
        if st.causes_us.get(cause, 0.0) >= bar * st.duration_us > 0
    )
    where = "mostly in" if hit_us > 0.5 * cost.us else f"{pct(bar)} or more in"
    frames = cause_frames(dev, cause, th)
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
            else f"{duration(cost.us)} in total over {len(per_step)} steps, {where} {hit} of them",
        )
        + frames_title(frames, cause),
        {
            **evidence_frames,
            "device": dev.device,
            "idle_fraction_of_step_time": share,
            "idle_us": cost.us,
            "idle_us_per_step": cost.us / n_steps,
            "steps_affected": hit,
            "idle_us_in_steps_affected": hit_us,
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


def largest_part(parts: dict[str, float]) -> str | None:
    """The key of the largest value of ``parts`` (ties: the first in order), None when
    ``parts`` is empty or holds nothing above 0: a title says "mostly X" only of the
    largest part of what it names."""
    best = max(parts.items(), key=lambda kv: kv[1], default=None)
    return best[0] if best is not None and best[1] > 0 else None


#: What makes the host wait, by the outermost op around the sync (``sync_sources[].op``),
#: and how to avoid it.
_SYNC_OP_ADVICE: dict[str, str] = {
    "aten::is_nonzero": (
        "A Python `if` (or bool()) on a GPU tensor, e.g. `if torch.isnan(x).any():`, "
        "copies it to the host and waits for the GPU: keep the check on the GPU (a flag "
        "tensor accumulated with torch.logical_or and read every N steps, "
        "torch.nan_to_num, or anomaly detection only while debugging)."
    ),
    "aten::item": (
        ".item() reads a GPU value to the host and waits for the GPU: keep running "
        "values (loss, metrics) on the GPU and read them every N steps."
    ),
    "aten::to": (
        ".cpu() / .to('cpu') copies to the host and waits: copy every N steps, or "
        "with .to('cpu', non_blocking=True) into pinned memory and read it after an "
        "event (torch.cuda.Event) has completed."
    ),
    "aten::nonzero": (
        "An op whose output size depends on the data (nonzero, masked_select, unique, "
        "boolean indexing) waits for the GPU to know its size: use a fixed-size form "
        "(torch.where with a mask, multiplying by the mask) where the algorithm allows."
    ),
}
_SYNC_OP_ADVICE["aten::tolist"] = _SYNC_OP_ADVICE["aten::item"]
_SYNC_OP_ADVICE["aten::_local_scalar_dense"] = _SYNC_OP_ADVICE["aten::item"]
_SYNC_OP_ADVICE["aten::_to_copy"] = _SYNC_OP_ADVICE["aten::to"]
_SYNC_OP_ADVICE["aten::copy_"] = _SYNC_OP_ADVICE["aten::to"]
_SYNC_OP_ADVICE["aten::masked_select"] = _SYNC_OP_ADVICE["aten::nonzero"]
_SYNC_OP_ADVICE["aten::unique"] = _SYNC_OP_ADVICE["aten::nonzero"]


def sync_label(source: SyncSource) -> str:
    """``aten::is_nonzero ← aten::any``: the op that synchronised, and the op the
    thread ran just before it (whose result it usually reads) when there is one."""
    return f"{source.op} ← {source.after}" if source.after else source.op


def sync_title(sources: list[SyncSource]) -> str:
    """The title's part on where the host synchronised (``idle.devices[]
    .sync_sources``, most idle first): ``: 12 syncs per step from aten::is_nonzero ←
    aten::any`` (with stacks ``, in train.py(42): step``), ``(+N other sources)``
    when others opened gaps too; empty without a source."""
    if not sources:
        return ""
    top = sources[0]
    calls = top.calls_per_step
    shown = f"{calls:.0f}" if calls >= 0.95 else f"{calls:.1f}"
    count = f"{shown} sync{'' if shown == '1' else 's'} per step from " if calls > 0 else "from "
    text = f": {count}{sync_label(top)}"
    if top.python_frame:
        text += f", in {short_frame(top.python_frame)}"
    others = sum(1 for s in sources[1:] if s.gaps_opened > 0)
    if others:
        text += f" (+{others} other source{'s' if others > 1 else ''})"
    return text


def sync_advice(sources: list[SyncSource]) -> str:
    """A sentence on the sync the largest source makes (by its op,
    :data:`_SYNC_OP_ADVICE`), empty when the op is not one it knows."""
    if not sources:
        return ""
    top = sources[0]
    advice = next((_SYNC_OP_ADVICE[n] for n in top.chain if n in _SYNC_OP_ADVICE), "")
    if not advice and top.op in ("cudaDeviceSynchronize", "cudaStreamSynchronize"):
        advice = (
            "A bare torch.cuda.synchronize() in the loop drains the GPU's queue: remove "
            "it (time with CUDA events instead)."
        )
    return f"{sync_label(top)}: {advice} " if advice else ""
