"""What every idle-cause diagnosis of the ``idle`` area shares (:mod:`.idle`): the
diagnosis of one idle cause with its replayed fix (:func:`idle_cause`), the words of a
title that names a part (:func:`largest_part`), and where the host synchronised
(:func:`sync_title`, :func:`sync_advice`). The Python frames behind a cause and the
advice about them are in :mod:`.idle_frames`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tb_kineto_insights.analysis.python_frames import short_frame
from tb_kineto_insights.analysis.rules.base import (
    SpanInput,
    duration,
    fix_prediction,
    main_idle,
    make_diagnosis,
    pct,
    severity_for_impact,
)
from tb_kineto_insights.analysis.rules.fixes import (
    ChangeOf,
    frame_time_removed,
    syncs_removed,
    together,
)
from tb_kineto_insights.analysis.rules.idle_frames import (
    cause_frames,
    dominant_frame,
    frames_title,
)
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.idle import SyncSource

#: The idle causes whose cost a named Python frame can hold (the fix is then that
#: function's time off the thread).
FRAME_FIXES = ("host_sync", "host_untraced", "data_loading")


def idle_cause(
    inp: SpanInput,
    cause: str,
    id_: str,
    fix: tuple[str, ChangeOf],
    title: str,
    recommendation: str | Callable[[list[dict[str, Any]]], str],
    floor: float | None = None,
) -> Diagnosis | None:
    """An idle-cause diagnosis: the GPU idles while the launching thread does ``cause``.

    Raised when the main device's idle attributed to ``cause`` / summed step time
    (``idle.devices[].causes[cause].fraction_of_step_time``, the title's share) reaches
    ``min_impact_fraction``; ``impact_fraction`` is what its fix (``fix``: its words and
    its change of the step's graph, :mod:`.fixes`) saves when replayed (the idle share
    where there is no graph); severity follows it
    (:func:`~tb_kineto_insights.analysis.rules.base.severity_for_impact`), and nothing
    is raised when the replayed saving is below ``min_impact_fraction``; nothing either
    when the cause costs that much in fewer than ``idle_cause_min_steps`` steps of a
    longer profile (a one-off stall: proved quiet on ``sample_logs/memory_fixed_async``,
    whose first profiled step starts on an empty GPU queue, and on ``kineto_resnet50``'s
    second span, one 80 ms stretch in 1 of 6 steps).

    With Python stacks the title names the frames that hold the cause's idle and the
    evidence lists them (``python_frames``, :func:`cause_frames`); ``recommendation``
    may be a function of those frames; when one frame is the cost of a cause of
    :data:`FRAME_FIXES`, the fix replayed is that frame's time off the thread. Without
    stacks the title and evidence name no frame.

    ``floor`` (a share of the step below ``min_impact_fraction``): the cause and its
    replayed saving are raised ``low`` from that share up instead (a rule that knows the
    cost is real and cheap to remove below the general bar: ``allocator_churn``), and a
    step counts towards ``idle_cause_min_steps`` from that share of it up.
    """
    idle, th = inp.idle, inp.th
    dev = main_idle(idle)
    if dev is None or cause not in dev.causes:
        return None

    def severity_of(share: float) -> str | None:
        found = severity_for_impact(share, th)
        if found is None and floor is not None and floor <= share < th.min_impact_fraction:
            return "low"
        return found

    cost = dev.causes[cause]
    share = cost.fraction_of_step_time
    if severity_of(share) is None:
        return None
    bar = floor if floor is not None and share < th.min_impact_fraction else th.min_impact_fraction
    gaps = [g for g in dev.largest_gaps if g.cause == cause]
    op = next((g.op for g in gaps if g.op), None)
    per_step = dev.per_step
    n_steps = len(per_step) or 1
    # steps where this cause alone idles the GPU for at least the bar of the step
    hit_steps = [st for st in per_step if st.causes_us.get(cause, 0.0) >= bar * st.duration_us > 0]
    hit = len(hit_steps)
    if len(per_step) > th.idle_cause_min_steps and hit < th.idle_cause_min_steps:
        return None  # a one-off stall, not a steady cost (see the threshold's comment)
    # "mostly in k of them" only when those steps hold more than half of the cost
    hit_us = sum(st.causes_us.get(cause, 0.0) for st in hit_steps)
    where = "mostly in" if hit_us > 0.5 * cost.us else f"{pct(bar)} or more in"
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
    severity = severity_of(impact)
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
        impact_fraction=impact,
        prediction=prediction,
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
