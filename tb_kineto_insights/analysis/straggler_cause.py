"""Why is the straggler late? What differs between it and the median rank.

A straggler (:mod:`.straggler`) arrives late at its collectives because it spent longer
on something before them. Per profiled step, on each rank's own span summary:

- ``gpu_compute``: GPU time in kernels that are not communication (``tables.kernels``:
  every row but NCCL/RCCL kernels, plus the time of the names not kept); per kernel name
  too, for the top kernels;
- ``memcpy``: GPU memcpy and memset time (``steps.mean_breakdown_us``);
- the host-side causes of GPU idle time on the rank's main device (``idle``, the
  launching thread's state during each idle µs): ``host_untraced`` (host busy outside
  traced ops: untraced Python, sleep, I/O), ``data_loading``, ``host_sync``,
  ``optimizer_step``, ``launching``, ``cpu_ops`` (other CPU ops, with the top CPU ops of
  ``tables.ops`` by their per-step difference);
- ``launches``: non-communication kernels per step (told, not a class: a count).

Each quantity is a mean per step (step-normalised), so ranks with different numbers of
profiled steps compare. The reference is the median of the other ranks (of at most
:data:`MAX_REFERENCE_RANKS` of them, evenly spaced in rank order), quantity by quantity
("the median rank"). The **cause** is the class with the largest excess of
the straggler over that reference, named only when the excess is at least
``straggler_cause_min_share_of_delay`` of the delay the straggler causes (else
``None``: what makes it late is not in these panels, e.g. a slower GPU clock or work
before the profiled window). The panels cover the whole step, not only the time before
the collectives it is late to: a rank whose extra work comes after its last collective
delays no one, and is not a straggler in the first place.

With Python stacks (a trace recorded with ``with_stack=True``): when the cause is one
the host spends (:data:`HOST_FRAME_CLASSES`), ``frames`` names the straggler's user
Python frames that hold more of that cause's idle time on its main device than on the
median rank, largest excess first, in µs per step (per frame
``idle.devices[].python_frames[].causes_us[class]`` over the steps of
``idle.devices[].per_step``; frames as :mod:`.python_frames` folds them, matched across
ranks by name). The frames every rank spends the same time in (the training loop's own
frame) are left out: they do not make this rank late. Without stacks on the straggler,
or for a GPU-side cause, ``frames`` is empty.

Real traces: h200x2 ``ddp_straggler`` rank 1 sleeps 20 ms before ``backward()``: the
cause is ``host_untraced`` (+18.6 ms/step); on rank 0 the GEMM kernels run longer
(sharing the GPU with the NCCL kernel that waits), so GPU compute is not its excess.
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
    "data_loading": "data loading",
    "host_sync": "host synchronization",
    "optimizer_step": "the optimizer step",
    "launching": "kernel launch calls",
    "cpu_ops": "CPU ops",
}
_IDLE_CLASSES = tuple(k for k in CAUSE_CLASSES if k not in ("gpu_compute", "memcpy"))
#: Causes the host spends, so that the straggler's Python frames can say where.
HOST_FRAME_CLASSES: tuple[str, ...] = ("host_untraced", "data_loading", "host_sync", "cpu_ops")
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
        device = next((d for d in idle.devices if d.device == idle.main_device), idle.devices[0])
        if device.per_step:
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
    device = next((d for d in idle.devices if d.device == idle.main_device), idle.devices[0])
    steps = len(device.per_step)
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


def straggler_cause(
    straggler: Any,
    others: Sequence[Any],
    delay_us_per_step: float,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, Any] | None:
    """The cause of a straggler's lateness (module docstring): ``straggler`` and
    ``others`` are span summaries (each with ``idle`` and ``tables``, or without them:
    left out); ``delay_us_per_step`` is what it costs the others per step (µs).

    Returns ``None`` without profiles of the straggler and at least one other rank, else
    ``{"class", "label", "us_per_step" (its excess over the median rank, µs per step),
    "straggler_us_per_step", "median_rank_us_per_step", "share_of_delay", "top"
    (``[{"kind": "kernel" | "op", "name", "us_per_step"}]``, the names with the largest
    excess behind the class: kernels for ``gpu_compute``, CPU ops otherwise), "frames"
    (:func:`cause_frames` for a host-side class, module docstring; else empty),
    "classes" (class → excess, µs per step), "launches_per_step_excess",
    "reference_ranks"}``; ``class`` / ``label`` are ``None`` when no class reaches
    ``straggler_cause_min_share_of_delay`` of the delay."""
    mine = rank_profile(straggler)
    if len(others) > MAX_REFERENCE_RANKS:
        picks = np.linspace(0, len(others) - 1, MAX_REFERENCE_RANKS).round().astype(int)
        others = [others[int(i)] for i in picks]
    refs = [p for p in (rank_profile(o) for o in others) if p is not None]
    if mine is None or not refs:
        return None
    excess = {key: mine["classes"][key] - _median_of(refs, "classes", key) for key in CAUSE_CLASSES}
    best = max(CAUSE_CLASSES, key=lambda k: (excess[k], -list(CAUSE_CLASSES).index(k)))
    share = excess[best] / delay_us_per_step if delay_us_per_step > 0 else None
    named = share is not None and share >= thresholds.straggler_cause_min_share_of_delay
    part, kind = ("kernels", "kernel") if best == "gpu_compute" else ("ops", "op")
    names = set(mine[part]) | {n for p in refs for n in p[part]}
    diffs = sorted(
        ((mine[part].get(n, 0.0) - _median_of(refs, part, n), n) for n in names),
        key=lambda t: (-t[0], t[1]),
    )
    # host time outside traced ops has no op to name by definition
    top = [
        {"kind": kind, "name": n, "us_per_step": d}
        for d, n in diffs[:TOP_NAMES]
        if d > 0 and best != "host_untraced"
    ]
    return {
        "class": best if named else None,
        "label": CAUSE_CLASSES[best] if named else None,
        "us_per_step": excess[best],
        "straggler_us_per_step": mine["classes"][best],
        "median_rank_us_per_step": _median_of(refs, "classes", best),
        "share_of_delay": share,
        "top": top if named else [],
        "frames": (
            cause_frames(straggler, others, best) if named and best in HOST_FRAME_CLASSES else []
        ),
        "classes": excess,
        "launches_per_step_excess": mine["launches"]
        - float(np.median([p["launches"] for p in refs])),
        "reference_ranks": len(refs),
    }
