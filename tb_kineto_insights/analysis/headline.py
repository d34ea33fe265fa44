"""A span's headline record (:class:`~tb_kineto_insights.schema.history.SpanHeadline`):
the few numbers the history of a log directory needs, taken from its summary when the
summary is computed and stored beside it in the cache (``store/cache.py``), so that the
history of thousands of runs reads no summary and no trace.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from tb_kineto_insights.analysis.run_facts import meta_facts, trace_facts
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.history import HeadlineDiagnosis, SpanHeadline
from tb_kineto_insights.schema.summary import Summary


def _int_or_none(value: Any) -> int | None:
    """An integer from a JSON value as Kineto or capture wrote it (int, integral float or
    decimal string); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _str_or_none(value: Any) -> str | None:
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def trace_start_ns(summary: Summary) -> int | None:
    """When the span's first profiled step started, in ns since the Unix epoch, on the
    trace's own clock: ``baseTimeNanoseconds`` (Kineto's epoch offset, a top-level key)
    plus ``steps.origin_ns`` (the first step's ``ts`` in ns, counted from it). None when
    the file has no ``baseTimeNanoseconds`` or no step (the caller then uses the file's
    modification time)."""
    base = _int_or_none(summary.health.metadata.get("baseTimeNanoseconds"))
    origin = summary.steps.origin_ns
    if base is None or origin is None:
        return None
    return base + origin


def headline_diagnosis(d: Diagnosis, where: str | None = None) -> HeadlineDiagnosis:
    """A diagnosis as the history keeps it (``where``: :class:`HeadlineDiagnosis`)."""
    return HeadlineDiagnosis(
        id=d.id, severity=d.severity, impact_fraction=d.impact_fraction, title=d.title, where=where
    )


def span_headline(summary: Summary, *, path: str, size_bytes: int, mtime: float) -> SpanHeadline:
    """The headline record of one span's summary (fields: the Struct's docstring).

    Args:
        summary: the span's summary.
        path, size_bytes, mtime: the file it was computed from (bytes as stored;
            seconds since the epoch).
    """
    steps = summary.steps
    # steps of no length (a trace with no usable event: its one pseudo-step spans nothing)
    # have no step time to put in a history; a 0 µs "level" would read as a 100 % gain
    durations = [s.duration_us for s in steps.steps if s.duration_us > 0]
    health = summary.health
    # a file cut in or before its GPU events ("no GPU number in this trace can be
    # trusted": trace_data_loss) has no step time or utilization either: its steps hold
    # none of their GPU work, and a history would read the cut as a regression
    untrusted = health.trace_quality.lost.gpu_events_lost
    if untrusted:
        durations = []
    dist = health.distributed_info or {}
    run_meta = health.run_metadata if isinstance(health.run_metadata, dict) else None
    facts = trace_facts(summary)
    sources = dict.fromkeys(facts, "trace")
    if run_meta is not None:
        from_meta = meta_facts(run_meta)
        facts.update(from_meta)
        sources.update(dict.fromkeys(from_meta, "metadata"))
    memory = summary.memory
    device = next((d for d in memory.devices if d.device == memory.main_device), None)
    world_size = _int_or_none(dist.get("world_size"))
    if world_size is None and run_meta is not None:
        world_size = _int_or_none(run_meta.get("world_size"))
    meta = run_meta or {}
    return SpanHeadline(
        path=path,
        size_bytes=int(size_bytes),
        mtime=float(mtime),
        start_ns=trace_start_ns(summary),
        rank=_int_or_none(dist.get("rank")),
        world_size=world_size,
        gpu_model=_str_or_none(facts.get("gpu_model")),
        steps=len(durations),
        median_step_us=statistics.median(durations) if durations else None,
        mean_step_us=statistics.fmean(durations) if durations else None,
        std_step_us=statistics.stdev(durations)
        if len(durations) > 1
        else (0.0 if durations else None),
        gpu_utilization_fraction=None if untrusted else steps.gpu_utilization_fraction,
        breakdown_us={} if untrusted else dict(steps.mean_breakdown_us),
        memory_peak_allocated_bytes=None if device is None else device.peak_allocated_bytes,
        memory_peak_reserved_bytes=None if device is None else device.peak_reserved_bytes,
        memory_growth_bytes_per_step=None if device is None else device.growth.bytes_per_step,
        diagnoses=[headline_diagnosis(d) for d in summary.diagnoses],
        facts=facts,
        fact_sources=sources,
        label=_str_or_none(meta.get("label")),
        preset=_str_or_none(meta.get("preset")),
        git_commit=_str_or_none(meta.get("git_commit")),
        torch_version=_str_or_none(meta.get("torch_version")),
        cuda_version=_str_or_none(meta.get("cuda_version")),
    )
