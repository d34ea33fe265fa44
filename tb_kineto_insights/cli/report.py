"""The ``report`` command: the report (:func:`tb_kineto_insights.service.reports.build_report`)
as JSON, markdown or text (split from ``cli/main.py`` so that ``--version``, ``diff``
and the decode workers, which import ``cli`` through the console script, do not load
the analysis).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

import msgspec

from tb_kineto_insights.analysis.evidence_units import evidence_texts, unit_of
from tb_kineto_insights.analysis.rules import SEVERITY_ORDER
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.analysis.units import TerminalLines, fmt_bytes, fmt_duration_us
from tb_kineto_insights.analysis.what_if import what_if_lines
from tb_kineto_insights.cli.json_output import EncodedItems, write_json
from tb_kineto_insights.logdir.discovery import LogdirError
from tb_kineto_insights.schema import Report, RunView, Summary
from tb_kineto_insights.schema.communication import CommunicationPanel
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.report import ReportRun, ReportSpan, SpanError
from tb_kineto_insights.schema.run_view import RunCollectiveKind
from tb_kineto_insights.service.reports import build_report, summary_of
from tb_kineto_insights.store.settings import CACHE_DIR_ENV, cli_cache_location
from tb_kineto_insights.summary import run_diagnoses

if TYPE_CHECKING:
    pass

EXIT_OK = 0
EXIT_UNUSABLE = 2


def _spans(report: Report) -> list[ReportSpan]:
    return [s for r in report.runs for w in r.workers for s in w.spans]


_fmt_us = fmt_duration_us


def _fmt_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def _all_diagnoses(report: Report) -> list[tuple[str, Diagnosis]]:
    """(``run/worker/span``, diagnosis) over every span, most severe first
    (:func:`~tb_kineto_insights.summary.run_diagnoses`, as the history and the view
    across runs list them)."""
    found = []
    for run in report.runs:
        spans = [
            (f"{run.run}/{worker.worker}/{span.span}", worker.worker, summary)
            for worker in run.workers
            for span in worker.spans
            if (summary := summary_of(span)) is not None
        ]
        listed = run_diagnoses([(w, x) for _, w, x in spans], run.run_summary)
        for i, d in listed:
            found.append((f"{run.run} (all ranks)" if i is None else spans[i][0], d))
    found.sort(key=lambda wd: (SEVERITY_ORDER.index(wd[1].severity), -wd[1].impact_fraction))
    return found


def _superseded(run: ReportRun) -> set[tuple[str, str]]:
    """(worker, diagnosis id) of span-level diagnoses the view across ranks replaces
    (listed once, at run level). A worker split into ranks keeps its span diagnoses."""
    view = run.run_summary
    return {(s.worker, s.id) for s in view.superseded_span_diagnoses} if view else set()


def write_text(report: Report, out: TextIO) -> None:
    """Human-readable report: every diagnosis first (most severe first), then one block
    per span. Names from the traces are printed with their control characters escaped
    (:class:`~tb_kineto_insights.analysis.units.TerminalLines`)."""
    out = TerminalLines(out)  # type: ignore[assignment]
    spans = _spans(report)
    ok = sum(summary_of(s) is not None for s in spans)
    out.write(f"tb-kineto-insights report: {report.path}\n")
    out.write(f"{len(report.runs)} run(s), {len(spans)} span(s), {len(spans) - ok} error(s)\n")
    found = _all_diagnoses(report)
    out.write(f"\nDiagnoses ({len(found)}):\n")
    for where, d in found:
        out.write(f"  [{d.severity.upper():6s}] {d.id:22s} {where}: {d.title}\n")
    if not found:
        out.write("  none\n")
    for run in report.runs:
        out.write(f"\n== run {run.run}\n")
        if run.run_summary is not None:
            _write_run_summary(run.run_summary, out)
        for worker in run.workers:
            for span in worker.spans:
                out.write(f"-- worker {worker.worker}  span {span.span}  ({span.file})\n")
                summary = summary_of(span)
                if summary is None:
                    error = span.error if isinstance(span.error, SpanError) else None
                    kind, message = (error.type, error.message) if error else ("", "")
                    out.write(f"   ERROR {kind}: {message}\n")
                    continue
                _write_summary(summary, out, _superseded(run), worker.worker, _matched_kinds(run))


def _span_errors(report: Report) -> list[tuple[str, str]]:
    """``(run/worker/span, "Type: message")`` of every span that could not be read."""
    out = []
    for run in report.runs:
        for worker in run.workers:
            for span in worker.spans:
                if summary_of(span) is None:
                    error = span.error if isinstance(span.error, SpanError) else None
                    text = f"{error.type}: {error.message}" if error else "unknown error"
                    out.append((f"{run.run}/{worker.worker}/{span.span}", text))
    return out


def _write_errors_only(spans: list[ReportSpan], out: TextIO) -> None:
    """When no trace could be read: each file (``spans``, every one unreadable) and
    why, nothing else (no empty diagnoses list that reads like a healthy result)."""
    for span in spans:
        error = span.error if isinstance(span.error, SpanError) else None
        kind, message = (error.type, error.message) if error else ("", "")
        # the message names the file already (TraceError): the path once
        message = message.removeprefix(f"{span.file}: ")
        out.write(f"{span.file}: {kind}: {message}\n")


class _EncodedRuns:
    """``report --format json``'s runs, each encoded as soon as its files are in
    (:class:`~tb_kineto_insights.cli.json_output.EncodedItems`) and then let go, and
    what the command needs of them afterwards: how many spans, the unreadable ones."""

    def __init__(self) -> None:
        self.items = EncodedItems("runs")
        self.spans = 0
        self._unreadable: dict[int, list[ReportSpan]] = {}

    def add(self, index: int, run: ReportRun) -> None:
        """``build_report``'s ``on_run`` (runs in the order their files are done)."""
        for worker in run.workers:
            self.spans += len(worker.spans)
            bad = [s for s in worker.spans if summary_of(s) is None]
            self._unreadable.setdefault(index, []).extend(bad)
        self.items.add(index, run)

    def unreadable(self) -> list[ReportSpan]:
        """The spans that could not be read, in the report's order (not the order in
        which their runs were done: the largest file's first)."""
        return [s for i in sorted(self._unreadable) for s in self._unreadable[i]]


_fmt_bytes = fmt_bytes


def _fmt_gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} GB/s"


def _write_run_summary(run: RunView, out: TextIO) -> None:
    """The view across ranks: per kind (calls/step, bytes per collective, bandwidth from
    the matched transfer), skew, per rank wait vs transfer /step, the straggler verdict."""
    skew = run.skew_us
    median, worst = _fmt_us(skew.median_us), _fmt_us(skew.max_us)
    out.write(
        f"   across {run.worker_count} ranks: {run.matched_count} collectives matched"
        f" over {run.matched_step_count} steps"
        + (f"; skew per collective median {median}, max {worst}" if skew.count else "")
        + "\n"
    )
    for k in run.kinds:
        calls = k.calls_per_step
        out.write(
            f"   {k.kind}: {calls:.1f} calls/step, " if calls is not None else f"   {k.kind}: "
        )
        out.write(
            f"{_fmt_bytes(k.median_bytes)} per collective (median), transfer "
            f"{_fmt_us(k.median_transfer_us)} per collective (median), busbw "
            f"{_fmt_gbps(k.busbw_gbps)} (algbw {_fmt_gbps(k.algbw_gbps)}; "
            "from the matched transfer)\n"
        )
    for r in run.ranks:
        out.write(
            f"   rank {r.rank} ({r.worker}): step {_fmt_us(r.mean_step_us)}; "
            f"/step: wait {_fmt_us(r.wait_us_per_step)}, transfer "
            f"{_fmt_us(r.transfer_us_per_step)}, exposed wait "
            f"{_fmt_us(r.exposed_wait_us_per_step)}, exposed transfer "
            f"{_fmt_us(r.exposed_transfer_us_per_step)}; last in {r.last_count} "
            f"of {r.matched_count} collectives\n"
        )
    straggler, test = run.straggler, run.straggler_test
    if straggler:
        out.write(
            f"   straggler: rank {straggler.rank}, costs the others "
            f"{_fmt_us(straggler.delay_us_per_step)}/step "
            f"({100 * (straggler.share_of_step or 0.0):.0f} % of their step), "
            f"{_fmt_us(straggler.lateness_excess_us_per_step)}/step later than the others "
            f"(noise {_fmt_us(straggler.lateness_noise_us)}) in "
            f"{straggler.tested_steps} steps, last in {straggler.last_steps} "
            f"(p = {straggler.p_value:.3g})\n"
        )
        if straggler.others_wait_us_per_step is not None:
            out.write(
                f"   what the others lose: they wait {_fmt_us(straggler.others_wait_us_per_step)}"
                f"/step in collectives for it, {_fmt_us(straggler.others_hidden_wait_us_per_step)}"
                " of it hidden behind their own compute and "
                f"{_fmt_us(straggler.others_exposed_wait_us_per_step)} exposed; without it "
                f"they could all start {_fmt_us(straggler.delay_us_per_step)}/step earlier\n"
            )
        cause = straggler.cause
        where = (
            f" in the time before the {cause.late_collectives} collectives it is late to"
            if cause is not None and cause.basis == "before_late_collectives"
            else " over whole steps"
        )
        if cause is not None and cause.class_ is not None:
            top = "".join(f"; {t.kind} {t.name} +{_fmt_us(t.us_per_step)}/step" for t in cause.top)
            if cause.class_ == "launches":
                top += f"; {cause.launches_per_step_excess:+.0f} kernels/step"
            out.write(
                f"   why: {cause.label}, +{_fmt_us(cause.us_per_step)}/step against the "
                f"median of {cause.reference_ranks} other rank(s){where} "
                f"({_fmt_us(cause.straggler_us_per_step)} against "
                f"{_fmt_us(cause.median_rank_us_per_step)}, "
                f"{100 * (cause.share_of_delay or 0.0):.0f} % of its delay){top}\n"
            )
        elif cause is not None:
            out.write(
                "   why: not in its traced time (GPU compute, memcpy, host outside traced ops, "
                "data loading, sync, optimizer, launches, CPU ops): the largest excess over the "
                f"median rank{where} is {_fmt_us(cause.us_per_step)}/step\n"
            )
    elif test:
        share = test.share_of_step
        out.write(
            f"   no straggler: best candidate rank {test.rank} is "
            f"{_fmt_us(test.lateness_excess_us_per_step)}/step later than the others "
            f"(noise {_fmt_us(test.lateness_noise_us)}) in {test.tested_steps} steps "
            f"(p = {test.p_value:.3g}, needs <= {test.alpha:g}) and costs the others "
            f"{_fmt_us(test.delay_us_per_step)}/step"
            + (f" ({100 * share:.1f} % of their step, needs >= " if share is not None else " (")
            + f"{100 * (test.min_share_of_step or 0.0):g} %): {test.verdict}\n"
        )
    for note in run.notes:
        out.write(f"   note: {note}\n")


def _matched_kinds(run: ReportRun) -> tuple[dict[str, RunCollectiveKind], int] | None:
    """The run's bandwidth per kind from the matched transfer (view across ranks) and the
    ranks it was measured on, when the run has several ranks with matched collectives:
    every rank's text shows these, the same on every rank."""
    view = run.run_summary
    if view is None or view.worker_count < 2 or not view.kinds:
        return None
    return {k.kind: k for k in view.kinds}, view.worker_count


def _write_communication(
    comm: CommunicationPanel,
    out: TextIO,
    matched: tuple[dict[str, RunCollectiveKind], int] | None = None,
) -> None:
    """Communication of one span: per kind calls/step, bytes per collective, busbw, and
    exposed time /step split by the wait estimate. busbw: from the matched transfer of
    the view across ranks (``matched``) when the run has several ranks, the same on
    every rank; else the least-wait estimate of this trace alone, a lower bound (a rank
    that waits for peers not profiled looks slower)."""
    if not comm.has_collectives:
        return
    out.write(
        f"   communication /step: {_fmt_us(comm.mean_comm_us)}, exposed "
        f"{_fmt_us(comm.mean_exposed_us)} (estimated: wait "
        f"{_fmt_us(comm.exposed_wait_estimate_us_per_step)}, transfer "
        f"{_fmt_us(comm.exposed_transfer_estimate_us_per_step)})\n"
    )
    for k in comm.kinds:
        calls = k.calls_per_step
        out.write(
            f"   {k.kind}: "
            + (
                f"{calls:.1f} calls/step ({k.count} in total)"
                if calls is not None
                else f"{k.count} calls in total"
            )
            + f", {_fmt_bytes(k.median_bytes)} per collective (median), exposed "
            f"{_fmt_us(k.exposed_us_per_step)}/step, "
        )
        run_kind = matched[0].get(k.kind) if matched else None
        if matched and run_kind is not None and run_kind.busbw_gbps is not None:
            out.write(
                f"busbw {_fmt_gbps(run_kind.busbw_gbps)} (from the matched transfer across "
                f"the {matched[1]} ranks, the same on every rank)\n"
            )
        else:
            out.write(
                f"busbw at least {_fmt_gbps(k.busbw_gbps)} (peers not profiled: a lower "
                "bound estimated from this trace alone, from the collectives that waited "
                f"least; kernel time alone: {_fmt_gbps(k.kernel_time_busbw_gbps)})\n"
            )


def _write_diagnoses(diagnoses: list[Diagnosis], out: TextIO) -> None:
    if not diagnoses:
        out.write("   diagnoses: none\n")
        return
    for d in diagnoses:
        out.write(f"   [{d.severity.upper()}] {d.id}: {d.title}\n")
        evidence = _evidence_line(d)
        if evidence:
            out.write(f"      evidence: {evidence}\n")
        out.write(f"      -> {d.recommendation}\n")


def _evidence_line(d: Diagnosis) -> str:
    """A diagnosis's numbers on one line, each in its unit (``analysis.evidence_units``,
    as the tab and ``--format markdown`` write them); names and words (kernels, the peak
    table's source) and lists of records (the largest allocations, Python frames) are
    left to JSON and Markdown, which give them in full."""
    parts = []
    for key, text in evidence_texts(d.evidence):
        value = d.evidence.get(key)
        if isinstance(value, list) and value and isinstance(value[0], dict | str):
            continue
        if unit_of(key.rpartition(".")[2])[0] in ("name", "text") or isinstance(value, str):
            continue
        parts.append(f"{key} {text}")
    return "; ".join(parts)


def _write_summary(
    summary: Summary,
    out: TextIO,
    superseded: set[tuple[str, str]] | None = None,
    worker: str = "",
    matched: tuple[dict[str, RunCollectiveKind], int] | None = None,
) -> None:
    replaced = superseded or set()
    shown = [d for d in summary.diagnoses if (worker, d.id) not in replaced]
    _write_diagnoses(shown, out)
    lines = what_if_lines(summary.what_if)
    if lines:
        err = summary.what_if.replay_error_fraction
        how = (
            f"replayed on the step's dependency graph, replay error {100 * err:.1f} %"
            if err is not None
            else "the rules' estimates"
        )
        out.write(f"   what if ({how}):\n")
        out.writelines(f"      {line}\n" for line in lines)
    for d in summary.diagnoses:
        if (worker, d.id) in replaced:
            out.write(f"   ({d.id}: see the view across ranks, which measures it exactly)\n")
    health = summary.health
    steps = summary.steps
    # the JSON's own size: for a gzip file, the inflated size, not the file's
    gz = ", inflated from gzip" if health.compressed else ""
    out.write(f"   {health.event_count} events, {fmt_bytes(health.json_bytes)} of JSON{gz}\n")
    kinds = {k: v for k, v in health.kind_counts.items() if k != "metadata"}
    out.write(f"   events: {_fmt_counts(kinds)}\n")
    if steps.count:
        out.write(
            f"   steps: {steps.count}, mean {_fmt_us(steps.mean_step_us)}"
            f" (min {_fmt_us(steps.min_step_us)}, max {_fmt_us(steps.max_step_us)})\n"
        )
        if steps.left_out_note:
            out.write(f"   {steps.left_out_note}: left out of every step figure\n")
    else:
        out.write("   steps: no ProfilerStep markers\n")
    path = summary.critical_path
    if path.mean_length_us:
        ranked = sorted(path.mean_by_class_us.items(), key=lambda kv: -kv[1])
        text = ", ".join(f"{k} {_fmt_us(v)}" for k, v in ranked if v >= 0.5)
        out.write(f"   critical path per step: {text}\n")
    util = steps.gpu_utilization_fraction
    if util is not None:
        bd = steps.mean_breakdown_us
        parts = ", ".join(f"{k} {_fmt_us(v)}" for k, v in bd.items() if v >= 0.5)
        out.write(f"   GPU utilization {100 * util:.1f} % of step time; per step: {parts}\n")
    kernels = summary.kernels
    if kernels.count:
        short = kernels.short_count_fraction
        threshold = _fmt_us(kernels.short_threshold_us)
        short_txt = f", {100 * short:.0f} % shorter than {threshold}" if short is not None else ""
        out.write(
            f"   kernels: {kernels.mean_per_step or 0:.0f} per step"
            + short_txt
            + f" ({kernels.count} in the trace, total)\n"
        )
    efficiency = getattr(summary, "efficiency", None)  # absent from older summaries
    if efficiency is not None and efficiency.device is not None:
        gpu = efficiency.peak.model if efficiency.peak else (efficiency.device_name or "?")
        said = efficiency.headline or "; ".join(efficiency.notes) or "no op group with FLOPs"
        out.write(f"   efficiency ({gpu}): {said}\n")
    _write_communication(summary.communication, out, matched)
    n_steps = max(steps.count, 1)
    for dev in summary.idle.devices:
        causes = {k: v.us for k, v in dev.causes.items() if v.us > 0}
        top = sorted(causes.items(), key=lambda kv: -kv[1])[:3]
        out.write(
            f"   GPU {dev.device} idle {_fmt_us(dev.idle_us_per_step)} per step: "
            + ", ".join(f"{k.replace('_', ' ')} {_fmt_us(v / n_steps)}" for k, v in top)
            + "\n"
        )
    for label, counts in (("skipped", health.skipped), ("quarantined", health.quarantined)):
        if counts:
            out.write(f"   {label}: {_fmt_counts(counts)}\n")
    if health.repairs:
        out.write(f"   repaired JSON: {_fmt_counts(health.repairs)}\n")
    lost = {k: v for k, v in health.kineto_record_counts.items() if v}
    if lost:
        out.write(f"   Kineto record counts: {_fmt_counts(lost)}\n")
    flags = msgspec.structs.asdict(health.flags)
    missing = [k.removeprefix("has_") for k, v in flags.items() if not v]
    if missing:
        out.write(f"   not in this trace: {', '.join(missing)}\n")


def cmd_report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``report``: see ``cli.py``; returns the exit code."""
    try:
        thresholds = DEFAULT_THRESHOLDS.with_overrides(args.threshold)
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_UNUSABLE
    location = cli_cache_location(args.cache)
    summaries = None
    if location is not None:  # the cache machinery (costly imports) only here
        from tb_kineto_insights.store.cached_summaries import CachedSummaries

        try:
            summaries = CachedSummaries(
                location, max_json_bytes=args.max_json_bytes, thresholds=thresholds
            )
        except (ValueError, ImportError) as exc:  # unknown protocol, missing driver
            err.write(f"error: --cache {args.cache or '$' + CACHE_DIR_ENV}: {exc}\n")
            return EXIT_UNUSABLE
    # the JSON of each run is encoded as soon as its files are in, while the others are
    # read, and only its JSON kept: after the last file, only the last run's is left
    # and the document is joined
    encoded = _EncodedRuns() if args.format == "json" else None
    try:
        report = build_report(
            args.path,
            max_json_bytes=args.max_json_bytes,
            thresholds=thresholds,
            summaries=summaries,
            on_run=encoded.add if encoded is not None else None,
        )
    except LogdirError as exc:
        from tb_kineto_insights.logdir.sides import path_hint

        err.write(f"error: {exc}{path_hint(args.path)}\n")
        return EXIT_UNUSABLE
    if encoded is not None:
        span_count, unreadable = encoded.spans, encoded.unreadable()
    else:
        spans = _spans(report)
        span_count, unreadable = len(spans), [s for s in spans if summary_of(s) is None]
    # the error first, then what was found (the text report lists each file's error)
    problem = None
    if not span_count:
        problem = f"error: no Kineto trace files found under {args.path}\n"
    elif len(unreadable) == span_count:
        problem = "error: no trace could be read; the reasons, per file, follow\n"
    if problem:  # the error and each file's reason, together on stderr
        err.write(problem)
        _write_errors_only(unreadable, TerminalLines(err))  # type: ignore[arg-type]
        err.flush()
    if encoded is not None:
        write_json(report, out, encoded.items)
    elif args.format == "markdown":
        from tb_kineto_insights.cli.markdown import report_markdown

        out.write(report_markdown(report, _all_diagnoses(report), _span_errors(report)))
    elif not problem:
        write_text(report, out)
    return EXIT_UNUSABLE if problem else EXIT_OK
