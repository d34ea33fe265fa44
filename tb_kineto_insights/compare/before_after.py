"""Before/after comparison for the CLI: pick the two sides, summarise them, diff, judge.

A side is named by a run folder, a trace file, or ``LOGDIR:RUN``
(:func:`~tb_kineto_insights.logdir.sides.resolve_side`, re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.units import fmt_bytes, fmt_duration_us, terminal_safe_line
from tb_kineto_insights.compare.comparability import format_comparability
from tb_kineto_insights.compare.diff import diff
from tb_kineto_insights.logdir.discovery import LogdirError, Span
from tb_kineto_insights.logdir.sides import SideError, resolve_side
from tb_kineto_insights.schema import DiffDocument, Summary
from tb_kineto_insights.schema.diff import ByRankPair, DdpBucketStats, DiffMetric, DiffOps, DiffRow
from tb_kineto_insights.summary import SpanFailed, SpanResult, summarize_span
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES


@dataclass
class LoadedSide:
    """``summaries``: ``(worker/span label, summary)`` pairs; ``errors``: unreadable spans."""

    spec: str
    summaries: list[tuple[str, Summary]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def load_side(
    spec: str,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    summarize: Callable[[Span], SpanResult] | None = None,
    spans: list[Span] | None = None,
) -> LoadedSide:
    """Resolve and summarise a side; unreadable spans are listed in ``errors``.
    ``spans``: the side's spans when already resolved (:func:`resolve_side`).
    ``summarize(span) -> SpanResult``: where summaries come from (e.g.
    :meth:`tb_kineto_insights.store.cached_summaries.CachedSummaries.summarize`, through the
    shared cache); None: :func:`~tb_kineto_insights.summary.summarize_span`.

    Raises:
        SideError: as :func:`resolve_side`, or when no span of the side could be read.
        LogdirError: the storage cannot be listed.
    """
    side = LoadedSide(spec)
    for span in resolve_side(spec) if spans is None else spans:
        if summarize is not None:
            result = summarize(span)
        else:
            result = summarize_span(span.path, max_json_bytes=max_json_bytes, thresholds=thresholds)
        if isinstance(result, SpanFailed):
            side.errors.append(result.message)
            continue
        summary = result.summary
        if not summary.steps.total_us > 0:
            side.errors.append(f"{span.path}: no usable events (nothing to compare)")
            continue
        side.summaries.append((f"{span.worker}/{span.span}", summary))
    if not side.summaries:
        raise SideError(f"{spec}: no trace could be read ({'; '.join(side.errors)})")
    return side


def compare(
    base: LoadedSide, exp: LoadedSide, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> DiffDocument:
    """The diff document of two loaded sides, with their read errors as warnings."""
    doc = diff(
        base.summaries,
        exp.summaries,
        base_label=base.spec,
        exp_label=exp.spec,
        thresholds=thresholds,
    )
    read_errors = [f"base: {e}" for e in base.errors] + [f"exp: {e}" for e in exp.errors]
    return msgspec.structs.replace(doc, warnings=doc.warnings + read_errors)


def fmt_row_value(value: float | None, unit: str) -> str:
    """A value of a diff row in its unit (durations and sizes: :mod:`..units`)."""
    if value is None:
        return "-"
    if unit == "µs":
        return fmt_duration_us(value)
    if unit == "fraction":
        return f"{100 * value:.1f} %"
    if unit.startswith("bytes"):
        return fmt_bytes(value) + unit[5:]
    if unit == "GB/s":
        return f"{value:.1f} GB/s"
    if unit == "TFLOP/s":
        return f"{value:.1f} TFLOP/s"
    return f"{value:.1f}"


def change_text(m: DiffMetric) -> str:
    """The change of a diff row in words: relative to base (``+12.3 %``; ``new`` when
    base is 0), or in percentage points for a share (``-1.5 pp``)."""
    if m.unit == "fraction":  # shares change in percentage points
        return f"{100 * m.delta:+.1f} pp"
    rel = m.change_fraction
    return f"{100 * rel:+.1f} %" if rel is not None else "new"


def _by_rank_text(by_rank: ByRankPair) -> str:
    def one(values: dict[str, float]) -> str:
        return ", ".join(f"rank {r} {fmt_row_value(v, 'µs')}" for r, v in values.items()) or "-"

    return f"base {one(by_rank.base)}; exp {one(by_rank.exp)}"


def _buckets_text(b: DdpBucketStats | None) -> str:
    if not b:
        return "none"
    per_step = b.count_per_step
    head = f"{per_step:.1f} /step" if per_step is not None else f"{b.count} total"
    sizes = ", ".join(f"{fmt_bytes(x.bytes, 2)} x{x.count}" for x in b.sizes)
    return f"{head}, median {fmt_row_value(b.median_bytes, 'bytes')} per collective ({sizes})"


#: Text heading of each group of a kernels/ops comparison.
_GROUP_HEADINGS = {
    "changed": "changed",
    "added": "added (only in exp; not judged)",
    "removed": "removed (only in base; not judged)",
    "moved_out": "removed, or moved out of the traced threads (into DataLoader worker "
    "processes; not judged)",
}


def _table_text(table: DiffOps, noun: str) -> list[str]:
    """The changed, added, removed and moved-out rows of one table, time /step."""
    groups: dict[str, list[DiffRow]] = {"changed": table.changed}
    groups["added"] = table.added
    for r in table.removed:
        groups.setdefault(r.status or "removed", []).append(r)
    lines = []
    for group, heading in _GROUP_HEADINGS.items():
        rows = groups.get(group, [])[:8]
        if not rows:
            continue
        lines.append(f"\n{noun} {heading} (time /step):")
        for r in rows:
            t = r.time_us_per_step
            before = "-" if group == "added" else fmt_row_value(t.base, "µs")
            after = fmt_row_value(t.exp, "µs") if group in ("changed", "added") else "-"
            lines.append(f"  {before:>12s} -> {after:>12s}  {t.verdict:12s} {r.name}")
    return lines


def _tflops(flops_per_s: float | None) -> str:
    return "-" if flops_per_s is None else f"{flops_per_s / 1e12:.0f}"


def diff_text(doc: DiffDocument) -> str:
    """Terminal rendering: unlike-for-like recording differences first, then the
    headline, then the largest changes, the matmul-class op groups' TFLOP/s, metrics
    (with the communication rows), DDP buckets, kernels (communication kernels apart,
    not judged), diagnoses gained/lost/kept (span- and run-level) and warnings."""
    h = doc.headline
    speed = h.speedup
    # unlike-for-like recordings first: they qualify every number below
    lines = format_comparability(doc.comparability) + [
        h.text,
        f"step time {fmt_row_value(h.base_step_us, 'µs')} -> {fmt_row_value(h.exp_step_us, 'µs')}"
        + (
            f"  ({speed:.2f}x faster)"
            if speed and speed >= 1
            else (f"  ({1 / speed:.2f}x slower)" if speed else "")
        )
        + f"  [{h.verdict}]",
        f"base: {doc.base.label}   exp: {doc.exp.label}",
    ]
    gained = h.straggler_gained
    if gained is not None:
        lines.insert(len(lines) - 1, f"gained a straggler: {gained.title} (not in the base)")
    for w in doc.warnings:
        lines.append(f"warning: {w}")
    lines.append("\nLargest changes (time /step):")
    for c in doc.largest_changes:
        delta = c.delta_us_per_step
        signed = ("+" if delta >= 0 else "") + fmt_duration_us(delta)
        lines.append(f"  {signed:>12s}  {c.what:6s} {c.name}  [{c.verdict}]")
    matmuls = [
        g for g in doc.efficiency if g.base_achieved_flops_per_s or g.exp_achieved_flops_per_s
    ]
    if matmuls:
        lines.append("\nKernel efficiency (matmul/conv/attention groups, TFLOP/s):")
        for g in matmuls[:8]:
            before = _tflops(g.base_achieved_flops_per_s)
            after = _tflops(g.exp_achieved_flops_per_s)
            lines.append(
                f"  {before:>6s} -> {after:>6s}  {g.base_dtype or '-'} -> {g.exp_dtype or '-'}"
                f"  {g.op} {g.shapes[:60]}  [{g.verdict}]"
            )
    lines.append("\nMetrics:")
    notes = []
    for m in doc.metrics:
        before, after = fmt_row_value(m.base, m.unit), fmt_row_value(m.exp, m.unit)
        lines.append(
            f"  {m.label:54s} {before:>12s} -> {after:>12s}  {change_text(m):>9s}  {m.verdict}"
        )
        if m.note:
            notes.append(f"  {m.label}: {m.note}")
        if m.by_rank:
            lines.append("      by rank: " + _by_rank_text(m.by_rank))
    if notes:
        lines.append("Not judged:")
        lines.extend(notes)
    comm = doc.communication
    buckets = comm.ddp_buckets
    if buckets.base or buckets.exp:
        lines.append("\nDDP buckets (AllReduce sizes):")
        lines.append(f"  base: {_buckets_text(buckets.base)}")
        lines.append(f"  exp:  {_buckets_text(buckets.exp)}")
    if comm.rank_rows_from != "run_view":
        lines.append(f"\nWaited/transfer rows: none ({comm.rank_rows_from})")
    for table, noun in ((doc.kernels, "Kernels"), (doc.ops, "CPU ops")):
        lines.extend(_table_text(table, noun))
    comm_kernels = doc.kernels.communication
    if comm_kernels:
        lines.append(
            "\nCommunication kernels (time /step includes waiting for the other ranks; "
            "not judged: see the waited/transfer rows):"
        )
        for r in comm_kernels[:8]:
            t = r.time_us_per_step
            before, after = fmt_row_value(t.base, "µs"), fmt_row_value(t.exp, "µs")
            lines.append(f"  {before:>12s} -> {after:>12s}  {t.verdict:12s} {r.name}")
    d = doc.diagnoses
    lines.append(
        "\nDiagnoses: appeared "
        + (", ".join(d.appeared) or "none")
        + "; disappeared "
        + (", ".join(d.disappeared) or "none")
        + "; kept "
        + (", ".join(d.kept) or "none")
    )
    for f in d.found.exp:
        lines.append(f"  exp [{f.severity.upper()}] {f.id} ({f.where}): {f.title}")
    if d.predictions:
        lines.append("\nPredictions checked (the base's prediction for a fix it lost):")
        lines += [f"  {c.text}" for c in d.predictions]
    lines.append(f"Noise rule: {doc.noise_rule}")
    # names from traces escaped; each line's own leading newline (a blank line) kept
    return "\n".join(map(terminal_safe_line, lines)) + "\n"


def parse_fraction(text: str) -> float:
    """``"5%"`` → 0.05, ``"0.05"`` → 0.05.

    Raises:
        ValueError: not a number or percentage, negative, or a bare number of 1 or more
            (is ``5`` meant as 5 %? write ``5%``).
    """
    t = text.strip()
    hint = f"{text!r}: expected a percentage such as 5% or a fraction such as 0.05"
    try:
        value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(hint) from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(hint)
    if not t.endswith("%") and value >= 1:
        raise ValueError(f"{text!r} is ambiguous: write {t}% for {t} percent, or a fraction <= 1")
    return value


def check(
    doc: DiffDocument, exp: LoadedSide, max_step_time_regression: float, fail_on: list[str]
) -> list[str]:
    """Reasons to fail a CI pipeline (empty: pass): step time regressed beyond noise by
    more than ``max_step_time_regression`` (fraction), or the experiment has a diagnosis
    listed in ``fail_on``, on any of its spans or in its run view across ranks
    (``doc.diagnoses.found.exp``, e.g. ``communication_straggler``)."""
    reasons = []
    h = doc.headline
    rel = h.change_fraction
    if h.verdict == "regressed" and rel is not None and rel > max_step_time_regression:
        reasons.append(
            f"step time regressed {100 * rel:.1f} % ({fmt_row_value(h.base_step_us, 'µs')} -> "
            f"{fmt_row_value(h.exp_step_us, 'µs')}), beyond noise and over the "
            f"{100 * max_step_time_regression:.1f} % limit"
        )
    found = doc.diagnoses.found.exp
    for wanted in fail_on:
        hits = [f for f in found if f.id == wanted]
        if hits:
            first = hits[0]
            where = ", ".join(sorted({f.where for f in hits}))
            reasons.append(
                f"diagnosis {wanted} present in {exp.spec} ({where}): "
                f"[{first.severity.upper()}] {first.title}"
            )
    return reasons


__all__ = [
    "LoadedSide",
    "LogdirError",
    "SideError",
    "check",
    "change_text",
    "compare",
    "diff_text",
    "fmt_row_value",
    "load_side",
    "parse_fraction",
    "resolve_side",
]
