"""``summary.diagnoses``: what limits the job, with evidence and a concrete next step.

Each diagnosis is ``{id, severity, title, evidence, recommendation, panel}`` with a
stable ``id`` (DESIGN.md: add ids, never rename), ``severity`` one of
:data:`SEVERITY_ORDER`, ``evidence`` the numbers that triggered it, and ``panel`` the
summary panel that shows the details. Every threshold comes from
:class:`~tb_kineto_insights.analysis.thresholds.Thresholds`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.communication import communication_diagnoses
from tb_kineto_insights.analysis.context import TraceIndex
from tb_kineto_insights.analysis.findings import make_diagnosis, sort_diagnoses
from tb_kineto_insights.analysis.memory import memory_diagnoses
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.trace import model as m


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _main_idle(idle: dict[str, Any]) -> dict[str, Any] | None:
    for dev in idle.get("devices", []):
        if dev["device"] == idle.get("main_device"):
            return dev
    return None


def _small_kernel_flood(
    steps: dict[str, Any], kernels: dict[str, Any], th: Thresholds
) -> dict[str, Any] | None:
    short = kernels.get("short_count_fraction")
    per_step = kernels.get("mean_per_step")
    if short is None or per_step is None:
        return None
    if short < th.small_kernel_count_fraction or per_step < th.small_kernel_min_per_step:
        return None
    util = steps.get("gpu_utilization_fraction")
    severity = "high" if util is not None and util < th.small_kernel_high_utilization else "medium"
    fusion = kernels.get("fusion_candidates") or []
    issuer = fusion[0].get("cpu_op") if fusion else None
    launch = kernels.get("launch") or {}
    where = f" The largest repeated run of short kernels comes from {issuer}." if issuer else ""
    compiled = kernels.get("compiled_kernel_fraction") or 0.0
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
        f"{_pct(short)} of {per_step:.0f} kernels per step are shorter than "
        f"{th.short_kernel_us:g} µs: the GPU waits on kernel launches",
        {
            "short_count_fraction": short,
            "short_time_fraction": kernels.get("short_time_fraction"),
            "kernels_per_step": per_step,
            "launch_bound_fraction": launch.get("launch_bound_fraction"),
            "mean_launch_us": launch.get("mean_launch_us"),
            "gpu_utilization_fraction": util,
            "short_threshold_us": th.short_kernel_us,
        },
        advice + where,
        "kernels",
        impact_fraction=1.0 - (util or 0.0),
    )


def _idle_cause(
    idle: dict[str, Any],
    cause: str,
    id_: str,
    threshold: float,
    th: Thresholds,
    title: str,
    recommendation: str,
) -> dict[str, Any] | None:
    dev = _main_idle(idle)
    if dev is None:
        return None
    share = dev["causes"][cause]["fraction_of_step_time"]
    if share < threshold:
        return None
    gaps = [g for g in dev["largest_gaps"] if g["cause"] == cause]
    op = next((g["op"] for g in gaps if g.get("op")), None)
    return make_diagnosis(
        id_,
        "high" if share >= th.idle_high_fraction else "medium",
        title.format(share=_pct(share), device=dev["device"]),
        {
            "device": dev["device"],
            "idle_fraction_of_step_time": share,
            "idle_us": dev["causes"][cause]["us"],
            "fraction_of_idle": dev["causes"][cause]["fraction_of_idle"],
            "gpu_busy_fraction": dev["busy_fraction"],
            "largest_gap_us": gaps[0]["length_us"] if gaps else None,
            "op": op,
        },
        recommendation,
        "idle",
        impact_fraction=share,
    )


def _low_utilization(
    steps: dict[str, Any], idle: dict[str, Any], th: Thresholds
) -> dict[str, Any] | None:
    util = steps.get("gpu_utilization_fraction")
    if util is None or util >= th.low_utilization:
        return None
    dev = _main_idle(idle)
    top = None
    if dev is not None:
        top = max(dev["causes"].items(), key=lambda kv: kv[1]["us"])[0]
    return make_diagnosis(
        "low_gpu_utilization",
        "high" if util < th.very_low_utilization else "medium",
        f"GPU {steps.get('main_device')} is busy only {_pct(util)} of the step time",
        {
            "gpu_utilization_fraction": util,
            "mean_step_us": steps.get("mean_step_us"),
            "largest_idle_cause": top,
        },
        "See the idle-gap panel for what the host did while the GPU waited"
        + (f" (mostly {top.replace('_', ' ')})" if top else "")
        + "; feed the GPU more work per launch (larger batch, torch.compile, CUDA graphs) "
        "and keep the host ahead of it (no synchronisation inside the step).",
        "steps",
        impact_fraction=1.0 - util,
    )


def _pageable_memcpy(
    index: TraceIndex, steps: dict[str, Any], th: Thresholds
) -> dict[str, Any] | None:
    copies = index.trace.tables[m.MEMCPY]
    rows = index.rows_where(m.MEMCPY, nm.is_pageable_memcpy)
    if not rows.any():
        return None
    time_us = float(copies.dur_ns[rows].sum()) / 1000.0
    total_us = steps.get("total_us") or 0.0
    share = time_us / total_us if total_us else 0.0
    kinds = sorted({index.trace.names[int(i)] for i in np.unique(copies.name[rows])})
    return make_diagnosis(
        "pageable_memcpy",
        "medium" if share >= th.pageable_memcpy_fraction else "low",
        f"{int(rows.sum())} copies from pageable host memory ({time_us / 1000:.2f} ms)",
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


def _no_step_markers(steps: dict[str, Any]) -> dict[str, Any] | None:
    if steps.get("has_markers"):
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


def _data_loss(health: dict[str, Any]) -> dict[str, Any] | None:
    """Events the trace lacks: Kineto's own loss counts and error lines, events skipped
    or quarantined by the reader (missing fields, broken timestamps), events lost to
    damaged JSON (``health.damage``), and GPU events whose duration ran over the next
    event on their stream (clipped). Not about step time: severity follows the share of
    the trace's events that are unusable (``unusable_fraction``, also the
    ``impact_fraction``): high ≥ 50 %, medium ≥ 5 % (or when CUPTI stopped early, Kineto
    logged errors, or the file itself is damaged), else low."""
    counts = health.get("kineto_record_counts") or {}
    lost = {k: v for k, v in counts.items() if k in _LOSS_KEYS and v}
    dropped_lines = [
        line
        for line in health.get("kineto_log", [])
        if "drop" in line.lower() or line.startswith("ERROR")
    ]
    skipped = sum((health.get("skipped") or {}).values())
    quarantined = sum((health.get("quarantined") or {}).values())
    lost_events = int(health.get("lost_events") or 0)
    damaged_regions = int(health.get("damaged_regions") or 0)
    overran = int((health.get("stream_overlap_clipped") or {}).get("overran_whole_events") or 0)
    unusable_events = skipped + quarantined + lost_events + overran
    if not lost and not dropped_lines and not unusable_events and not damaged_regions:
        return None
    events = (health.get("event_count") or 0) + lost_events
    unusable = unusable_events / events if events else 0.0
    stopped = bool(counts.get("CUPTI stopped early?"))
    if unusable >= 0.5:
        severity = "high"
    elif unusable >= 0.05 or stopped or dropped_lines or damaged_regions:
        severity = "medium"
    else:
        severity = "low"
    if damaged_regions:
        title = (
            f"The trace file is damaged: {damaged_regions} damaged region(s), "
            f"{lost_events} event(s) and {health.get('lost_bytes', 0)} bytes lost"
        )
    elif unusable_events:
        title = (
            f"The trace is incomplete: {unusable_events} of {events} events were "
            f"unusable ({100 * unusable:.0f} %)"
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
            "quarantined_by_kind": health.get("quarantined_by_kind") or {},
            "lost_events": lost_events,
            "lost_bytes": int(health.get("lost_bytes") or 0),
            "damaged_regions": damaged_regions,
            "damage": (health.get("damage") or [])[:5],
            "overran_stream_events": overran,
            "unusable_fraction": unusable,
            "events": events,
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


def diagnose(
    index: TraceIndex, panels: dict[str, Any], thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[dict[str, Any]]:
    """Diagnoses for one trace from its panels (``steps``, ``kernels``, ``idle``,
    ``communication``, ``memory``, ``health``), most severe first, then by impact (share
    of step time at stake)."""
    th = thresholds
    steps, kernels, idle, health = (
        panels.get("steps", {}),
        panels.get("kernels", {}),
        panels.get("idle", {}),
        panels.get("health", {}),
    )
    found = [
        _small_kernel_flood(steps, kernels, th),
        _idle_cause(
            idle,
            "data_loading",
            "gpu_idle_dataloader",
            th.dataloader_idle_fraction,
            th,
            "GPU {device} idles {share} of the step time waiting for the DataLoader",
            "Load batches ahead of the GPU: DataLoader(num_workers=N>0, e.g. the CPU cores "
            "per GPU), pin_memory=True, prefetch_factor=2..4, persistent_workers=True, and "
            ".to(device, non_blocking=True); move heavy per-sample transforms to the GPU "
            "or precompute them.",
        ),
        _idle_cause(
            idle,
            "host_sync",
            "gpu_idle_host_sync",
            th.host_sync_idle_fraction,
            th,
            "GPU {device} idles {share} of the step time after host synchronisation",
            "Avoid synchronising inside the step: no .item(), .cpu(), .tolist(), print() of "
            "GPU tensors or torch.cuda.synchronize() per iteration; keep running metrics on "
            "the GPU and read them every N steps; use non_blocking copies from pinned memory.",
        ),
        _low_utilization(steps, idle, th),
        _pageable_memcpy(index, steps, th),
        _no_step_markers(steps),
        _data_loss(health),
    ]
    out = [d for d in found if d is not None]
    loss = next((d for d in out if d["id"] == "trace_data_loss"), None)
    if loss is not None and loss["evidence"]["unusable_fraction"] >= 1.0:
        return [loss]  # nothing usable: every other finding would be an artefact
    if panels.get("communication"):
        out.extend(communication_diagnoses(panels["communication"], steps, th))
    out.extend(memory_diagnoses(panels.get("memory") or {}, th))
    return sort_diagnoses(out)
