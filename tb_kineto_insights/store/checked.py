"""Range checks of the records read back from a cache folder and trusted as they are.

A cache file's checksum line (``seal.py``) is plain SHA-256 unless a shared key is set:
it catches a flipped byte, not a file written by hand (nor, with a key, a file written
by a key holder's faulty code), and the schema check (msgspec) catches a wrong type,
not a wrong value. A headline whose ``median_step_us`` is ``-1e308`` fits both and would
be printed as a 300-digit negative step time. What is checked here is what no
analysis can produce: a time, size, count or fraction that is negative, or one past a
bound no profiled run reaches (:data:`MAX_TIME_US`, :data:`MAX_FRACTION`). A record that
fails is treated as damaged by its reader: dropped, logged once naming its file, and
computed again.
"""

from __future__ import annotations

import math

from tb_kineto_insights.schema import Summary
from tb_kineto_insights.schema.history import SpanHeadline

__all__ = ["MAX_FRACTION", "MAX_TIME_US", "headline_problem", "summary_problem"]

#: Largest time (µs) a headline may hold: 10^13 µs, about 116 days, far past any
#: profiled step or trace.
MAX_TIME_US = 1e13

#: Largest fraction a headline may hold (a share of step time is at most 1; 100 leaves
#: room for any rounding or window extension, and none for a forged 1e308).
MAX_FRACTION = 100.0

#: Largest size in bytes (int64).
_MAX_BYTES = 2**63 - 1


def _bad(value: float | int | None, name: str, high: float, low: float = 0.0) -> str | None:
    """Why ``value`` of field ``name`` is out of ``[low, high]`` (or not finite); None
    when it is fine or absent."""
    if value is None:
        return None
    if not math.isfinite(value) or not low <= value <= high:
        return f"{name} = {value!r:.40} is out of range [{low:g}, {high:g}]"
    return None


def headline_problem(headline: SpanHeadline) -> str | None:
    """Why a stored :class:`~tb_kineto_insights.schema.history.SpanHeadline` cannot be
    right (the first field out of range, named), or None.

    Checked: ``size_bytes``, ``mtime``, ``steps``, ``rank`` and ``world_size`` not
    negative; the step times (``median``/``mean``/``std_step_us``) and every
    ``breakdown_us`` value in ``[0, MAX_TIME_US]``; ``gpu_utilization_fraction`` and
    each diagnosis's ``impact_fraction`` in ``[0, MAX_FRACTION]``; the memory peaks in
    ``[0, 2^63)``; ``memory_growth_bytes_per_step`` (a slope: either sign) within
    ``±2^63``.
    """
    h = headline
    checks = [
        _bad(h.size_bytes, "size_bytes", _MAX_BYTES),
        _bad(h.mtime, "mtime", 1e11),
        _bad(h.steps, "steps", _MAX_BYTES),
        _bad(h.rank, "rank", _MAX_BYTES),
        _bad(h.world_size, "world_size", _MAX_BYTES),
        _bad(h.median_step_us, "median_step_us", MAX_TIME_US),
        _bad(h.mean_step_us, "mean_step_us", MAX_TIME_US),
        _bad(h.std_step_us, "std_step_us", MAX_TIME_US),
        _bad(h.gpu_utilization_fraction, "gpu_utilization_fraction", MAX_FRACTION),
        _bad(h.memory_peak_allocated_bytes, "memory_peak_allocated_bytes", _MAX_BYTES),
        _bad(h.memory_peak_reserved_bytes, "memory_peak_reserved_bytes", _MAX_BYTES),
        _bad(h.memory_growth_bytes_per_step, "memory_growth_bytes_per_step", 2.0**63, -(2.0**63)),
    ]
    checks += [_bad(v, f"breakdown_us[{k!r}]", MAX_TIME_US) for k, v in h.breakdown_us.items()]
    checks += [
        _bad(d.impact_fraction, f"diagnoses[{d.id!r}].impact_fraction", MAX_FRACTION)
        for d in h.diagnoses
    ]
    return next((c for c in checks if c is not None), None)


def summary_problem(summary: Summary) -> str | None:
    """Why a stored summary's headline numbers cannot be right (the first field out of
    range, named), or None. Checked, as :func:`headline_problem`: the steps panel's
    ``count`` (the number of steps it lists), its step times (``mean``/``std``/``min``/
    ``max_step_us``, ``total_us``, each step's ``duration_us`` and ``cpu_duration_us``,
    every breakdown value), its GPU utilization fractions, and each diagnosis's
    ``impact_fraction``: what the landing view, the report and the headline are made of.
    The other panels are checked for type only (``schema.summary_decoder``)."""
    p = summary.steps
    checks = [
        # the panel lists every step it counts: a count is bounded by the document
        _bad(p.count, "steps.count", len(p.steps), len(p.steps)),
        _bad(p.mean_step_us, "steps.mean_step_us", MAX_TIME_US),
        _bad(p.std_step_us, "steps.std_step_us", MAX_TIME_US),
        _bad(p.min_step_us, "steps.min_step_us", MAX_TIME_US),
        _bad(p.max_step_us, "steps.max_step_us", MAX_TIME_US),
        _bad(p.total_us, "steps.total_us", MAX_TIME_US),
        _bad(p.gpu_utilization_fraction, "steps.gpu_utilization_fraction", MAX_FRACTION),
    ]
    checks += [
        _bad(v, f"steps.mean_breakdown_us[{k!r}]", MAX_TIME_US)
        for k, v in p.mean_breakdown_us.items()
    ]
    for step in p.steps:
        checks += [
            _bad(step.duration_us, f"steps.steps[{step.number}].duration_us", MAX_TIME_US),
            _bad(step.cpu_duration_us, f"steps.steps[{step.number}].cpu_duration_us", MAX_TIME_US),
            _bad(
                step.gpu_utilization_fraction,
                f"steps.steps[{step.number}].gpu_utilization_fraction",
                MAX_FRACTION,
            ),
        ]
        checks += [
            _bad(v, f"steps.steps[{step.number}].breakdown_us[{k!r}]", MAX_TIME_US)
            for k, v in step.breakdown_us.items()
        ]
    checks += [
        _bad(d.impact_fraction, f"diagnoses[{d.id!r}].impact_fraction", MAX_FRACTION)
        for d in summary.diagnoses
    ]
    found = next((c for c in checks if c is not None), None)
    return found or _tables_problem(summary)


def _tables_problem(summary: Summary) -> str | None:
    """Why the name tables (``tables.kernels``, ``ops``, ``ops_elsewhere``) cannot be
    right: a table covers the span's steps (``steps`` at most the steps panel's
    count), each row holds one value per step of its table, and its counts and times
    are in range. A forged ``steps`` of 3×10⁷ on a 1-row table cost the diff 9 s and
    963 MiB (it pads every row to that many steps)."""
    most = len(summary.steps.steps)  # (the steps panel's count, checked equal to it)
    for name in ("kernels", "ops", "ops_elsewhere"):
        table = getattr(summary.tables, name)
        where = f"tables.{name}"
        problem = _bad(table.steps, f"{where}.steps", most) or _bad(
            table.other_time_us, f"{where}.other_time_us", MAX_TIME_US
        )
        if problem is not None:
            return problem
        for i, row in enumerate(table.rows):
            at = f"{where}.rows[{i}]"
            if len(row.per_step_count) != table.steps or len(row.per_step_time_us) != table.steps:
                return (
                    f"{at} holds {len(row.per_step_count)} per-step counts and "
                    f"{len(row.per_step_time_us)} per-step times for {table.steps} steps"
                )
            checks = [_bad(row.count, f"{at}.count", _MAX_BYTES)]
            checks.append(_bad(row.time_us, f"{at}.time_us", MAX_TIME_US))
            checks += [_bad(v, f"{at}.per_step_count", _MAX_BYTES) for v in row.per_step_count]
            checks += [_bad(v, f"{at}.per_step_time_us", MAX_TIME_US) for v in row.per_step_time_us]
            problem = next((c for c in checks if c is not None), None)
            if problem is not None:
                return problem
    return None
