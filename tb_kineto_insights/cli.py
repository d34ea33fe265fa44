"""Command line, a thin shell over the library:

- ``report PATH [--format text|json]``: exit 0 when at least one span was read (broken
  spans are reported as errors), 2 when nothing could be read or the arguments are bad.
- ``diff BASE EXP [--format text|json]``: exit 0, or 2 on unusable input.
- ``check BASE EXP [--max-step-time-regression 5%] [--fail-on ID ...]``: exit 0 when no
  limit is crossed, 1 on a regression or when EXP has a ``--fail-on`` diagnosis (on any
  span, or across its ranks for a run of several workers, e.g.
  ``communication_straggler``), 2 on unusable input or an unknown id; prints why.
- ``doctor``: TensorBoard version, whether both plugins are discoverable, a sample parse.
- ``index LOGDIR... [--cache DIR] [--scheduler ADDRESS]``: every missing summary into the
  cache on Dask (``index.py``); exit 0 all cached or computed, 1 some failed, 2 setup.

Paths may be local or fsspec URLs (``s3://bucket/logs``, ``gs://``, ``abfs://``; the
driver from the ``s3``/``gcs``/``azure`` extra, endpoint and credentials through fsspec's
configuration, e.g. ``FSSPEC_S3_ENDPOINT_URL``). ``report``, ``diff`` and ``check`` take
``--cache DIR`` (a folder or an fsspec URL; ``none``: no cache), else use
``KINETO_INSIGHTS_CACHE_DIR`` when it is set (the TensorBoard plugin's cache), else no
cache: see ``cached_summaries.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

import msgspec

from tb_kineto_insights import __version__
from tb_kineto_insights.analysis.comparability import format_comparability
from tb_kineto_insights.analysis.findings import DIAGNOSIS_IDS, SEVERITY_ORDER
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.cache import CACHE_DIR_ENV
from tb_kineto_insights.cached_summaries import CachedSummaries, cli_cache_location
from tb_kineto_insights.json_output import write_json
from tb_kineto_insights.local_paths import local_path
from tb_kineto_insights.logdir import (
    LogdirError,
    Run,
    Span,
    Worker,
    discover,
    folder_name,
    span_for_file,
)
from tb_kineto_insights.schema import DiffDocument, Report, RunView, Summary
from tb_kineto_insights.schema.communication import CommunicationPanel
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.report import ReportRun, ReportSpan, ReportWorker, SpanError
from tb_kineto_insights.summary import (
    REPORT_SCHEMA,
    select_run_spans,
    summarize_run,
    try_summarize_file,
)
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES
from tb_kineto_insights.units import fmt_bytes, fmt_duration_us

if TYPE_CHECKING:
    from tb_kineto_insights import compare

# Start-up: ``report`` imports neither fsspec (only for a URL: ``_is_file``, logdir,
# trace/source.py import it when a path names a protocol) nor ``compare`` (the diff
# machinery: imported by ``diff``/``check`` only, in ``_compare``/``_cmd_check``).
# tests/test_startup_imports.py holds this.

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_UNUSABLE = 2


def _is_file(path: str) -> bool:
    local = local_path(path)
    if local is not None:
        return os.path.isfile(local)
    try:
        import fsspec  # a URL: only here (0.1 s of imports)

        fs, fs_path = fsspec.core.url_to_fs(path)
        return bool(fs.isfile(fs_path))
    except (OSError, ValueError, ImportError):
        return False


def _runs_for(path: str) -> list[Run]:
    """Runs under a log directory or run folder, or the one span of a trace file. The
    traces directly in ``path`` (discovery's run ``"."``) are named by the folder's own
    name (``report sample_logs/ddp`` → run ``ddp``), as a trace file's run is."""
    if _is_file(path):
        span = span_for_file(path)
        return [Run(name=span.run, workers=(Worker(name=span.worker, spans=(span,)),))]
    return [
        dataclasses.replace(run, name=folder_name(path)) if run.name == "." else run
        for run in discover(path)
    ]


def _span_entry(
    span: Span, max_json_bytes: int, thresholds: Thresholds, summaries: CachedSummaries | None
) -> ReportSpan:
    if summaries is not None:
        summary, error = summaries.summarize(span)
    else:
        summary, error = try_summarize_file(
            span.path, max_json_bytes=max_json_bytes, thresholds=thresholds
        )
    if summary is not None:
        return ReportSpan(span=span.span, file=span.path, summary=summary)
    problem = SpanError(**error) if error is not None else SpanError(type="", message="")
    return ReportSpan(span=span.span, file=span.path, error=problem)


def _summary_of(span: ReportSpan) -> Summary | None:
    """The span's summary, None when it could not be read."""
    return span.summary if isinstance(span.summary, Summary) else None


def build_report(
    path: str,
    *,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    summaries: CachedSummaries | None = None,
) -> Report:
    """The ``tb_kineto_insights.report/1`` document (a :class:`~tb_kineto_insights.schema.Report`)
    for a log directory, run folder or file.
    ``summaries``: where span summaries come from (a shared cache); None: read every file
    (``max_json_bytes`` and ``thresholds`` then apply; otherwise ``summaries``' own).

    Shape: ``{"schema", "path", "runs": [{"run", "workers": [{"worker", "spans": [{"span",
    "file", "summary" | "error"}]}], "run_summary"}]}``; ``run_summary`` is the view
    across ranks (latest readable span of each worker) for runs of several workers, else
    ``None``; the latest readable span of each worker (of each rank, when one worker
    holds several ranks: :func:`~tb_kineto_insights.summary.select_run_spans`).

    Raises:
        LogdirError: ``path`` does not exist or its storage cannot be listed.
    """
    runs = []
    for run in _runs_for(path):
        workers: list[ReportWorker] = []
        readable: list[tuple[str, list[Summary]]] = []
        for worker in run.workers:
            spans = [_span_entry(s, max_json_bytes, thresholds, summaries) for s in worker.spans]
            workers.append(ReportWorker(worker=worker.name, spans=spans))
            readable.append((worker.name, [x for s in spans if (x := _summary_of(s))]))
        chosen, notes = select_run_spans(readable)
        run_summary = None
        if len(chosen) > 1:
            run_summary = summarize_run(chosen, thresholds)
            run_summary = msgspec.structs.replace(run_summary, notes=notes + run_summary.notes)
        runs.append(ReportRun(run=run.name, workers=workers, run_summary=run_summary))
    return Report(schema=REPORT_SCHEMA, path=path, runs=runs)


def _spans(report: Report) -> list[ReportSpan]:
    return [s for r in report.runs for w in r.workers for s in w.spans]


_fmt_us = fmt_duration_us


def _fmt_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def _all_diagnoses(report: Report) -> list[tuple[str, Diagnosis]]:
    """(``run/worker/span``, diagnosis) over every span, most severe first."""
    found = []
    for run in report.runs:
        replaced = _superseded(run)
        for worker in run.workers:
            for span in worker.spans:
                where = f"{run.run}/{worker.worker}/{span.span}"
                summary = _summary_of(span)
                for d in summary.diagnoses if summary is not None else []:
                    if (worker.worker, d.id) not in replaced:
                        found.append((where, d))
        for d in run.run_summary.diagnoses if run.run_summary is not None else []:
            found.append((f"{run.run} (all ranks)", d))
    found.sort(key=lambda wd: (SEVERITY_ORDER.index(wd[1].severity), -wd[1].impact_fraction))
    return found


def _superseded(run: ReportRun) -> set[tuple[str, str]]:
    """(worker, diagnosis id) of span-level diagnoses the view across ranks replaces
    (listed once, at run level). A worker split into ranks keeps its span diagnoses."""
    view = run.run_summary
    return {(s.worker, s.id) for s in view.superseded_span_diagnoses} if view else set()


def write_text(report: Report, out: TextIO) -> None:
    """Human-readable report: every diagnosis first (most severe first), then one block
    per span."""
    spans = _spans(report)
    ok = sum(_summary_of(s) is not None for s in spans)
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
                summary = _summary_of(span)
                if summary is None:
                    error = span.error if isinstance(span.error, SpanError) else None
                    kind, message = (error.type, error.message) if error else ("", "")
                    out.write(f"   ERROR {kind}: {message}\n")
                    continue
                _write_summary(summary, out, _superseded(run), worker.worker)


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
            f"({100 * (straggler.share_of_step or 0.0):.0f} % of their step), last in "
            f"{straggler.last_steps} of {straggler.tested_steps} steps "
            f"(p = {straggler.p_value:.3g})\n"
        )
    elif test:
        share = test.share_of_step
        out.write(
            f"   no straggler: best candidate rank {test.rank} is last in "
            f"{test.last_steps} of {test.tested_steps} steps (p = {test.p_value:.3g}, "
            f"needs <= {test.alpha:g}) and costs the others "
            f"{_fmt_us(test.delay_us_per_step)}/step"
            + (f" ({100 * share:.1f} % of their step, needs >= " if share is not None else " (")
            + f"{100 * (test.min_share_of_step or 0.0):g} %): {test.verdict}\n"
        )
    for note in run.notes:
        out.write(f"   note: {note}\n")


def _write_communication(comm: CommunicationPanel, out: TextIO) -> None:
    """Communication of one span: per kind calls/step, bytes per collective, busbw
    (least-wait estimate), and exposed time /step split by the wait estimate."""
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
            f"{_fmt_us(k.exposed_us_per_step)}/step, busbw at least "
            f"{_fmt_gbps(k.busbw_gbps)} (least-wait estimate from this trace: a rank "
            "that waits in every collective looks slower; the view across ranks measures it; "
            f"kernel time alone: {_fmt_gbps(k.kernel_time_busbw_gbps)})\n"
        )


def _write_diagnoses(diagnoses: list[Diagnosis], out: TextIO) -> None:
    if not diagnoses:
        out.write("   diagnoses: none\n")
        return
    for d in diagnoses:
        out.write(f"   [{d.severity.upper()}] {d.id}: {d.title}\n")
        out.write(f"      -> {d.recommendation}\n")


def _write_summary(
    summary: Summary,
    out: TextIO,
    superseded: set[tuple[str, str]] | None = None,
    worker: str = "",
) -> None:
    replaced = superseded or set()
    shown = [d for d in summary.diagnoses if (worker, d.id) not in replaced]
    _write_diagnoses(shown, out)
    for d in summary.diagnoses:
        if (worker, d.id) in replaced:
            out.write(f"   ({d.id}: see the view across ranks, which measures it exactly)\n")
    health = summary.health
    steps = summary.steps
    gz = " gzip" if health.compressed else ""
    out.write(f"   {health.event_count} events, {fmt_bytes(health.json_bytes)} JSON{gz}\n")
    kinds = {k: v for k, v in health.kind_counts.items() if k != "metadata"}
    out.write(f"   events: {_fmt_counts(kinds)}\n")
    if steps.count:
        out.write(
            f"   steps: {steps.count}, mean {_fmt_us(steps.mean_step_us)}"
            f" (min {_fmt_us(steps.min_step_us)}, max {_fmt_us(steps.max_step_us)})\n"
        )
    else:
        out.write("   steps: no ProfilerStep markers\n")
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
    _write_communication(summary.communication, out)
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


def _cmd_report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        thresholds = DEFAULT_THRESHOLDS.with_overrides(args.threshold)
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_UNUSABLE
    try:
        summaries = CachedSummaries(
            cli_cache_location(args.cache),
            max_json_bytes=args.max_json_bytes,
            thresholds=thresholds,
        )
    except (ValueError, ImportError) as exc:  # unknown protocol, missing driver
        err.write(f"error: --cache {args.cache or '$' + CACHE_DIR_ENV}: {exc}\n")
        return EXIT_UNUSABLE
    try:
        report = build_report(
            args.path,
            max_json_bytes=args.max_json_bytes,
            thresholds=thresholds,
            summaries=summaries if summaries.cache is not None else None,
        )
    except LogdirError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_UNUSABLE
    spans = _spans(report)
    if args.format == "json":
        write_json(report, out)
    else:
        write_text(report, out)
    if not spans:
        err.write(f"error: no Kineto trace files found under {args.path}\n")
        return EXIT_UNUSABLE
    if not any(_summary_of(s) is not None for s in spans):
        err.write("error: no trace could be read\n")
        return EXIT_UNUSABLE
    return EXIT_OK


def _compare(
    args: argparse.Namespace, err: TextIO
) -> tuple[DiffDocument, compare.LoadedSide] | None:
    """Load both sides and diff them; None (after printing why) on unusable input."""
    from tb_kineto_insights import compare  # diff machinery: diff/check only

    try:
        thresholds = DEFAULT_THRESHOLDS.with_overrides(args.threshold)
        summaries = CachedSummaries(cli_cache_location(args.cache), thresholds=thresholds)
        # No cache: each side read as before (compare.try_summarize_file).
        summarize = summaries.summarize if summaries.cache is not None else None
        base = compare.load_side(args.base, thresholds=thresholds, summarize=summarize)
        exp = compare.load_side(args.exp, thresholds=thresholds, summarize=summarize)
        return compare.compare(base, exp, thresholds), exp
    except (ValueError, LogdirError, ImportError) as exc:
        err.write(f"error: {exc}\n")
        return None


def _cmd_diff(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tb_kineto_insights import compare  # diff machinery: diff/check only

    result = _compare(args, err)
    if result is None:
        return EXIT_UNUSABLE
    doc = result[0]
    if args.format == "json":
        write_json(doc, out)
    else:
        out.write(compare.diff_text(doc))
    return EXIT_OK


def _cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tb_kineto_insights import compare  # diff machinery: diff/check only

    try:
        limit = compare.parse_fraction(args.max_step_time_regression)
    except ValueError as exc:
        err.write(f"error: --max-step-time-regression {exc}\n")
        return EXIT_UNUSABLE
    fail_on = [i.strip() for item in args.fail_on for i in item.split(",") if i.strip()]
    unknown = sorted(set(fail_on) - set(DIAGNOSIS_IDS))
    if unknown:
        err.write(
            f"error: unknown diagnosis id(s) {', '.join(unknown)}; known: "
            + ", ".join(DIAGNOSIS_IDS)
            + "\n"
        )
        return EXIT_UNUSABLE
    result = _compare(args, err)
    if result is None:
        return EXIT_UNUSABLE
    doc, exp = result
    reasons = compare.check(doc, exp, limit, fail_on)
    h = doc.headline
    for line in format_comparability(doc.comparability):
        out.write(line + "\n")
    out.write(f"step time {_fmt_us(h.base_step_us)} -> {_fmt_us(h.exp_step_us)} [{h.verdict}]\n")
    for warning in doc.warnings:
        out.write(f"warning: {warning}\n")
    if reasons:
        for reason in reasons:
            out.write(f"FAIL: {reason}\n")
        return EXIT_REGRESSION
    out.write("OK: no limit crossed\n")
    return EXIT_OK


def _cmd_doctor(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tb_kineto_insights.doctor import run_doctor  # imports TensorBoard: only here

    return run_doctor(out, err)


# ---------------------------------------------------------------- index (issue 15 §3)


def _cmd_index(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``index LOGDIR... [--cache DIR] [--scheduler ADDRESS]``: see ``index.py``. Exit 0
    when every trace is cached or computed, 1 when some failed (listed), 2 on a usage or
    setup error (no Dask, unreachable scheduler, bad log directory or cache)."""
    from tb_kineto_insights import index as index_module
    from tb_kineto_insights.cache import cache_dir_from_env

    try:
        thresholds = DEFAULT_THRESHOLDS.with_overrides(args.threshold)
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_UNUSABLE
    if args.workers is not None and args.workers < 1:
        err.write(f"error: --workers must be at least 1, got {args.workers}\n")
        return EXIT_UNUSABLE
    # Without --cache or the variable: the folder TensorBoard on this machine uses.
    raw = args.cache if args.cache is not None else os.environ.get(CACHE_DIR_ENV, "")
    location = cli_cache_location(args.cache) or str(cache_dir_from_env())
    if raw.strip().lower() == "none":
        err.write("error: index fills a cache: give --cache DIR (not 'none')\n")
        return EXIT_UNUSABLE
    try:
        result = index_module.run_index(
            args.logdir,
            location,
            scheduler=args.scheduler,
            workers=args.workers or index_module.default_workers(),
            processes=not args.threads,
            max_json_bytes=args.max_json_bytes,
            thresholds=thresholds,
            progress=None if args.quiet else err,
        )
    except index_module.IndexSetupError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_UNUSABLE
    if args.format == "json":
        json.dump(result.to_json(), out, indent=1)
        out.write("\n")
    else:
        index_module.write_result(result, out)
    if not result.spans:  # e.g. a mistyped path in a cron line: say so, as report does
        err.write(f"warning: no Kineto trace files found under {', '.join(args.logdir)}\n")
    return result.exit_code


def _add_index_parser(sub: Any, cache_help: str) -> None:
    cmd = sub.add_parser(
        "index",
        help="precompute every missing summary (and run view) into the cache, on Dask",
    )
    cmd.add_argument("logdir", nargs="+", help="log directory (path or URL); several allowed")
    cmd.add_argument(
        "--cache",
        metavar="DIR",
        default=None,
        help=cache_help.replace("else no cache", "else TensorBoard's default cache folder"),
    )
    cmd.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="an existing Dask scheduler (tcp://dask-scheduler:8786); default: a "
        "LocalCluster on this machine",
    )
    cmd.add_argument(
        "--workers", type=int, default=None, help="LocalCluster workers (default: CPUs, at most 4)"
    )
    cmd.add_argument(
        "--threads",
        action="store_true",
        help="LocalCluster workers as threads of this process instead of processes",
    )
    cmd.add_argument("--format", choices=("text", "json"), default="text")
    cmd.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    cmd.add_argument("--max-json-bytes", type=int, default=DEFAULT_MAX_JSON_BYTES)
    cmd.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE")
    cmd.set_defaults(func=_cmd_index)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tb-kineto-insights",
        description="Why is my GPU job slow? Kineto trace analysis (CLI and TensorBoard tab).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    report = sub.add_parser(
        "report", help="summarise the traces of a log directory, run folder or trace file"
    )
    report.add_argument("path", help="log directory, run folder or trace file (path or URL)")
    report.add_argument("--format", choices=("text", "json"), default="text")
    report.add_argument(
        "--max-json-bytes",
        type=int,
        default=DEFAULT_MAX_JSON_BYTES,
        help="refuse files whose uncompressed JSON is larger (default: %(default)s)",
    )
    report.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a diagnosis threshold (repeatable); names: "
        + ", ".join(DEFAULT_THRESHOLDS.to_dict()),
    )
    report.set_defaults(func=_cmd_report)
    cache_help = (
        "summary cache: a folder (local, NFS) or fsspec URL (s3://bucket/cache), shared with "
        "TensorBoard and teammates; 'none': no cache. Default: $KINETO_INSIGHTS_CACHE_DIR "
        "when set, else no cache"
    )
    report.add_argument("--cache", metavar="DIR", default=None, help=cache_help)
    side_help = "run folder, trace file, or LOGDIR:RUN"
    diff_cmd = sub.add_parser("diff", help="compare two runs, workers or traces (before → after)")
    check_cmd = sub.add_parser(
        "check", help="exit 1 when EXP regressed against BASE (for CI pipelines)"
    )
    for cmd in (diff_cmd, check_cmd):
        cmd.add_argument("base", help=f"BASE: {side_help}")
        cmd.add_argument("exp", help=f"EXP: {side_help}")
        cmd.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE")
        cmd.add_argument("--cache", metavar="DIR", default=None, help=cache_help)
    diff_cmd.add_argument("--format", choices=("text", "json"), default="text")
    diff_cmd.set_defaults(func=_cmd_diff)
    check_cmd.add_argument(
        "--max-step-time-regression",
        default="5%",
        help="fail when step time grows more than this, beyond noise (default: %(default)s)",
    )
    check_cmd.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="ID[,ID]",
        help="fail when EXP has this diagnosis, on any span or across its ranks (repeatable, "
        "or comma-separated), e.g. memory_growth, communication_straggler",
    )
    check_cmd.set_defaults(func=_cmd_check)
    doctor_cmd = sub.add_parser(
        "doctor", help="check TensorBoard, both plugins (ours, PyTorch Profiler) and a sample parse"
    )
    doctor_cmd.set_defaults(func=_cmd_doctor)
    _add_index_parser(sub, cache_help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tb-kineto-insights`` console script; returns the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if exc.code in (0, None) else EXIT_UNUSABLE
    try:
        return int(args.func(args, sys.stdout, sys.stderr))
    except BrokenPipeError:  # e.g. `report ... | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
