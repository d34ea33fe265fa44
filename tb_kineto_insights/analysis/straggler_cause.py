"""Why is the straggler late? What differs between it and the median rank.

A straggler (:mod:`.straggler`) arrives late at its collectives because it spent longer
on something before them. Where the ranks' collectives carry their **lead-up**
(:mod:`.lead_up`: what the rank did on its main GPU between its previous collective and
this one), the comparison is made on exactly that time (``basis``
``before_late_collectives``): per tested step, the collective the straggler is late to
(where it caused the largest delay in that step), the straggler's lead-up part by part
against the median of the other ranks' lead-ups of the same collective, then the mean
over those steps (µs per step). The parts partition each lead-up, so when every rank
left the previous collective together their excesses sum to the straggler's lateness
there:

- ``gpu_compute``: GPU time in kernels that are not communication;
- ``memcpy``: memcpy and memset time;
- the host-side causes of GPU idle time (the idle panel's, the launching thread's state
  during each idle µs): ``host_untraced`` (host busy outside traced ops: untraced
  Python, sleep, I/O), ``compiling``, ``data_loading``, ``host_sync``, ``optimizer_step``,
  ``launching``, ``cpu_ops``, ``allocator``;
- ``launches``: host time in the runtime calls that launch its kernels (a rank that
  launches more kernels, or launches slower), with ``launches_per_step_excess``, the
  excess of compute kernels started in the lead-up. It overlaps the GPU parts (a launch
  runs while the GPU works), so it is compared with them, not added to them.

Without lead-ups (collectives on no main GPU, or a summary from before them: ``basis``
``whole_step``) the same classes but ``launches`` (which only the lead-up measures) are
taken over whole steps from each rank's span summary: ``tables.kernels`` (GPU compute,
every row but NCCL/RCCL kernels plus the time of the names not kept),
``steps.mean_breakdown_us`` (memcpy, memset), ``idle.devices[main].per_step`` (the idle
causes), each a mean per step; a rank whose extra work comes after its last collective
delays no one there, which only the lead-up basis leaves out.

The reference is the median of the other ranks (of at most :data:`MAX_REFERENCE_RANKS`
of them, evenly spaced in rank order), quantity by quantity ("the median rank"). The
**cause** is the class with the largest excess of the straggler over that reference,
named only when the excess is at least ``straggler_cause_min_share_of_delay`` of the
delay the straggler causes (else ``None``: what makes it late is not in these parts,
e.g. a slower GPU clock or work before the profiled window). The kernels and CPU ops
behind a class (``top``) are per-step excesses over whole steps (``tables``; the lead-up
does not keep names).

With Python stacks (a trace recorded with ``with_stack=True``): when the cause is one
the host spends (:data:`HOST_FRAME_CLASSES`), ``frames`` names the straggler's user
Python frames that hold more of that cause's idle time on its main device than on the
median rank, largest excess first, in µs per step (per frame
``idle.devices[].python_frames[].causes_us[class]`` over the steps of
``idle.devices[].per_step``; frames as :mod:`.python_frames` folds them, matched across
ranks by name). The frames every rank spends the same time in (the training loop's own
frame) are left out: they do not make this rank late. Without stacks on the straggler,
or for a GPU-side cause, ``frames`` is empty.

Real traces: h200x2 ``ddp_straggler`` rank 1 sleeps 20 ms before ``backward()``: before
the first all-reduce of each step its lead-up holds +18.8 ms/step of ``host_untraced``
over rank 0's (whole steps: +18.6 ms/step; there the GEMM kernels of rank 0 run longer,
sharing the GPU with the NCCL kernel that waits, which its lead-up leaves out).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tb_kineto_insights.analysis import collectives as co
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds

#: Classes in the order they are told when tied, with their words.
CAUSE_CLASSES: dict[str, str] = {
    "gpu_compute": "GPU compute",
    "memcpy": "memory copies and sets",
    "host_untraced": "host time outside traced ops",
    "compiling": "torch.compile compiling",
    "data_loading": "data loading",
    "host_sync": "host synchronization",
    "optimizer_step": "the optimizer step",
    "launching": "GPU idle while the host launches",
    "cpu_ops": "CPU ops",
    "allocator": "the allocator",
    "graph_replay": "waiting inside CUDA graph replays",
    "launches": "kernel launches",
}
_IDLE_CLASSES = tuple(k for k in CAUSE_CLASSES if k not in ("gpu_compute", "memcpy", "launches"))
#: Lead-up keys (:mod:`.lead_up`) behind each class.
_LEAD_UP_KEY: dict[str, str] = {**{k: k for k in CAUSE_CLASSES}, "launches": "launch_api"}
#: Causes the host spends, so that the straggler's Python frames can say where.
HOST_FRAME_CLASSES: tuple[str, ...] = (
    "host_untraced",
    "compiling",
    "data_loading",
    "host_sync",
    "cpu_ops",
)
#: Names listed in ``top`` (and frames in ``frames``).
TOP_NAMES = 3
#: The median rank is the median of at most this many other ranks, evenly spaced in
#: their order: enough for a median, and bounded at thousands of ranks.
MAX_REFERENCE_RANKS = 64


def _mean(values: Sequence[float]) -> float:
    """Mean of a short list in plain Python (``np.mean`` costs microseconds per call: 100k
    calls at 1,024 ranks)."""
    return float(sum(values)) / len(values) if len(values) else 0.0


def rank_profile(summary: Any) -> dict[str, Any] | None:
    """One rank's per-step quantities (module docstring) from a span summary's ``idle``
    and ``tables`` panels; ``None`` when it has neither (the plugin may pass only the
    panels of the run view).

    Returns ``{"classes": {class: µs per step}, "kernels": {name: µs per step},
    "ops": {name: µs per step}, "launches": kernels per step}``."""
    idle = getattr(summary, "idle", None)
    tables = getattr(summary, "tables", None)
    if idle is None and tables is None:
        return None
    classes: dict[str, float] = dict.fromkeys(CAUSE_CLASSES, 0.0)
    kernels: dict[str, float] = {}
    ops: dict[str, float] = {}
    launches = 0.0
    if tables is not None:
        table = tables.kernels
        steps = max(1, int(table.steps))
        for row in table.rows:
            if co.is_communication_kernel(row.name):
                continue
            per_step = _mean(row.per_step_time_us)
            kernels[row.name] = per_step
            launches += _mean(row.per_step_count)
        classes["gpu_compute"] = sum(kernels.values()) + float(table.other_time_us) / steps
        for row in tables.ops.rows:
            ops[row.name] = _mean(row.per_step_time_us)
    steps_panel = getattr(summary, "steps", None)
    if steps_panel is not None and steps_panel.mean_breakdown_us:
        breakdown = steps_panel.mean_breakdown_us
        classes["memcpy"] = float(breakdown.get("memcpy", 0.0)) + float(
            breakdown.get("memset", 0.0)
        )
    if idle is not None and idle.devices:
        device = idle.main_entry()
        if device is not None and device.per_step:
            for key in _IDLE_CLASSES:
                classes[key] = _mean([s.causes_us.get(key, 0.0) for s in device.per_step])
    return {"classes": classes, "kernels": kernels, "ops": ops, "launches": launches}


def frame_times(summary: Any, cause: str) -> dict[str, float]:
    """Per user Python frame, the µs per step of ``cause``'s idle time it held on a
    rank's main device: the frame's ``idle.devices[].python_frames[].causes_us[cause]``
    ÷ the steps of the device's ``per_step``. Empty without stacks or steps."""
    idle = getattr(summary, "idle", None)
    if idle is None or not idle.devices:
        return {}
    device = idle.main_entry()
    steps = len(device.per_step) if device is not None else 0
    if not steps:
        return {}
    return {
        f.frame: f.causes_us[cause] / steps for f in device.python_frames if cause in f.causes_us
    }


def cause_frames(
    straggler: Any, others: Sequence[Any], cause: str, listed: int = TOP_NAMES
) -> list[dict[str, Any]]:
    """The ``listed`` user Python frames where the straggler spends the most more of
    ``cause``'s time than the median rank (:func:`frame_times`; a frame a rank lacks
    counts 0), largest excess first (ties by name), only positive excesses:
    ``[{"frame", "us_per_step" (the excess), "straggler_us_per_step"}]``. Empty when
    the straggler's trace has no stacks."""
    mine = frame_times(straggler, cause)
    if not mine:
        return []
    refs = [frame_times(o, cause) for o in others]
    rows = []
    for frame, us in mine.items():
        median = float(np.median([r.get(frame, 0.0) for r in refs])) if refs else 0.0
        rows.append((us - median, frame, us))
    rows.sort(key=lambda t: (-t[0], t[1]))
    return [
        {"frame": f, "us_per_step": d, "straggler_us_per_step": us}
        for d, f, us in rows[:listed]
        if d > 0
    ]


def _median_of(profiles: list[dict[str, Any]], part: str, key: str) -> float:
    return float(np.median([p[part].get(key, 0.0) for p in profiles]))


def _window_excess(
    late_collectives: Sequence[tuple[Any, Sequence[Any]]],
) -> tuple[dict[str, float], dict[str, float], dict[str, float], float] | None:
    """Per class, the straggler's lead-up (µs), the median rank's, their excess, each a
    mean over the late collectives; and the excess of compute kernels started in the
    lead-up. ``None`` unless every late collective has the straggler's lead-up and at
    least one other rank's (module docstring)."""
    if not late_collectives:
        return None
    mine_sum = dict.fromkeys(CAUSE_CLASSES, 0.0)
    ref_sum = dict.fromkeys(CAUSE_CLASSES, 0.0)
    kernels = 0.0
    for mine, others in late_collectives:
        if len(others) > MAX_REFERENCE_RANKS:
            picks = np.linspace(0, len(others) - 1, MAX_REFERENCE_RANKS).round().astype(int)
            others = [others[int(i)] for i in picks]
        refs = [o for o in others if o.lead_up_us is not None]
        if mine.lead_up_us is None or not refs:
            return None
        for key in CAUSE_CLASSES:
            part = _LEAD_UP_KEY[key]
            mine_sum[key] += float(mine.lead_up_us.get(part, 0.0))
            ref_sum[key] += float(np.median([o.lead_up_us.get(part, 0.0) for o in refs]))
        kernels += float(mine.lead_up_kernels or 0) - float(
            np.median([o.lead_up_kernels or 0 for o in refs])
        )
    n = len(late_collectives)
    mine_mean = {k: v / n for k, v in mine_sum.items()}
    ref_mean = {k: v / n for k, v in ref_sum.items()}
    return mine_mean, ref_mean, {k: mine_mean[k] - ref_mean[k] for k in CAUSE_CLASSES}, kernels / n


def straggler_cause(
    straggler: Any,
    others: Sequence[Any],
    delay_us_per_step: float,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    late_collectives: Sequence[tuple[Any, Sequence[Any]]] = (),
    collectives_per_step: float | None = None,
) -> dict[str, Any] | None:
    """The cause of a straggler's lateness (module docstring): ``straggler`` and
    ``others`` are span summaries (each with ``idle`` and ``tables``, or without them:
    left out); ``delay_us_per_step`` is what it costs the others per step (µs);
    ``late_collectives``: per tested step, the straggler's entry of the collective it is
    late to (a ``communication.sequence`` entry) and the other ranks' entries of it.
    ``collectives_per_step``: ``late_collectives`` are every collective it is last to
    (the per-collective straggler, whose cost is summed over a step's collectives): the
    lead-up excess per collective × that many per step is the excess per step (basis
    ``before_late_collectives``, summed); without it, one collective per step.

    Returns ``None`` without profiles of the straggler and at least one other rank (and
    no lead-ups), else ``{"class", "label", "basis" (``before_late_collectives`` or
    ``whole_step``), "late_collectives" (how many the lead-ups were compared on; 0 on
    whole steps), "us_per_step" (its excess over the median rank, µs per step),
    "straggler_us_per_step", "median_rank_us_per_step", "share_of_delay", "top"
    (``[{"kind": "kernel" | "op", "name", "us_per_step"}]``, the names with the largest
    excess behind the class over whole steps: kernels for ``gpu_compute``, CPU ops
    otherwise), "frames" (:func:`cause_frames` for a host-side class, module docstring;
    else empty), "classes" (class → excess, µs per step), "launches_per_step_excess"
    (compute kernels per step: in the lead-ups, else over whole steps),
    "reference_ranks"}``; ``class`` / ``label`` are ``None`` when no class reaches
    ``straggler_cause_min_share_of_delay`` of the delay."""
    mine = rank_profile(straggler)
    if len(others) > MAX_REFERENCE_RANKS:
        picks = np.linspace(0, len(others) - 1, MAX_REFERENCE_RANKS).round().astype(int)
        others = [others[int(i)] for i in picks]
    refs = [p for p in (rank_profile(o) for o in others) if p is not None]
    window = _window_excess(late_collectives)
    if window is None and (mine is None or not refs):
        return None
    if window is not None:
        mine_classes, ref_classes, excess, launches = window
        if collectives_per_step is not None:  # summed over a step's late collectives
            f = collectives_per_step
            mine_classes = {k: v * f for k, v in mine_classes.items()}
            ref_classes = {k: v * f for k, v in ref_classes.items()}
            excess = {k: v * f for k, v in excess.items()}
            launches *= f
        basis = "before_late_collectives"
        reference_ranks = min(MAX_REFERENCE_RANKS, min(len(o) for _, o in late_collectives))
    else:
        assert mine is not None  # for mypy: checked above
        mine_classes = dict(mine["classes"])
        ref_classes = {k: _median_of(refs, "classes", k) for k in CAUSE_CLASSES}
        excess = {k: mine_classes[k] - ref_classes[k] for k in CAUSE_CLASSES}
        launches = mine["launches"] - float(np.median([p["launches"] for p in refs]))
        basis = "whole_step"
        reference_ranks = len(refs)
    best = max(CAUSE_CLASSES, key=lambda k: (excess[k], -list(CAUSE_CLASSES).index(k)))
    share = excess[best] / delay_us_per_step if delay_us_per_step > 0 else None
    named = share is not None and share >= thresholds.straggler_cause_min_share_of_delay
    top: list[dict[str, Any]] = []
    if mine is not None and refs and best not in ("host_untraced", "launches"):
        # host time outside traced ops has no op to name by definition; launches are
        # told by their count
        part, kind = ("kernels", "kernel") if best == "gpu_compute" else ("ops", "op")
        names = set(mine[part]) | {n for p in refs for n in p[part]}
        diffs = sorted(
            ((mine[part].get(n, 0.0) - _median_of(refs, part, n), n) for n in names),
            key=lambda t: (-t[0], t[1]),
        )
        top = [{"kind": kind, "name": n, "us_per_step": d} for d, n in diffs[:TOP_NAMES] if d > 0]
    return {
        "class": best if named else None,
        "label": CAUSE_CLASSES[best] if named else None,
        "basis": basis,
        "late_collectives": len(late_collectives) if window is not None else 0,
        "us_per_step": excess[best],
        "straggler_us_per_step": mine_classes[best],
        "median_rank_us_per_step": ref_classes[best],
        "share_of_delay": share,
        "top": top if named else [],
        "frames": (
            cause_frames(straggler, others, best) if named and best in HOST_FRAME_CLASSES else []
        ),
        "classes": excess,
        "launches_per_step_excess": launches,
        "reference_ranks": reference_ranks,
    }
