"""The Python frames behind an idle cause, and the advice that follows from them
(the idle rules' titles and recommendations, :mod:`.idle`)."""

from __future__ import annotations

from typing import Any

from tb_kineto_insights.analysis.python_frames import short_frame
from tb_kineto_insights.analysis.rules.base import duration
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.schema.idle import IdleDevice


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


def dominant_frame(frames: list[dict[str, Any]], th: Thresholds) -> dict[str, Any] | None:
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
    top = dominant_frame(frames, th)
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
    top = dominant_frame(frames, th)
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
    top = dominant_frame(frames, th)
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
