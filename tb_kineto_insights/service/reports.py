"""A report of a log directory, run folder or trace file: the
``tb_kineto_insights.report/1`` document (:class:`~tb_kineto_insights.schema.Report`),
every span summarised (on every core, or through the shared cache) and each run's view
across ranks. The ``report`` command formats it (``cli/report.py``); the library's
``build_report`` is this one.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from msgspec import UNSET

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.logdir.discovery import (
    Run,
    Span,
    Worker,
    describe_skipped,
    discover,
    escaped_name,
    folder_name,
    span_for_file,
)
from tb_kineto_insights.schema import Report, Summary
from tb_kineto_insights.schema.report import (
    ReportRun,
    ReportSpan,
    ReportWorker,
    SkippedPath,
    SpanError,
)
from tb_kineto_insights.summary import REPORT_SCHEMA, SpanOk, SpanResult, run_view_of
from tb_kineto_insights.trace.local_paths import local_path, url_to_fs
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

if TYPE_CHECKING:
    from tb_kineto_insights.store.cached_summaries import CachedSummaries


def _is_file(path: str) -> bool:
    """Whether ``path`` names one file, not a folder: locally anything that exists and is
    no folder (a fifo too, which :func:`span_for_file` then refuses by name)."""
    local = local_path(path)
    if local is not None:
        return os.path.exists(local) and not os.path.isdir(local)
    try:  # a URL: fsspec only here (a costly import: trace/local_paths.py)
        fs, fs_path = url_to_fs(path)
        return bool(fs.isfile(fs_path))
    except (OSError, ValueError, ImportError):
        return False


def _runs_for(path: str) -> tuple[list[Run], list[tuple[str, str]]]:
    """Runs under a log directory or run folder, or the one span of a trace file, and
    the (path, reason) of what discovery skipped (also said as a warning). The traces
    directly in ``path`` (discovery's run ``"."``) are named by the folder's own name
    (``report sample_logs/ddp`` → run ``ddp``), as a trace file's run is."""
    if _is_file(path):
        span = span_for_file(path)
        return [Run(name=span.run, workers=(Worker(name=span.worker, spans=(span,)),))], []
    skipped: list[tuple[str, str]] = []
    runs = discover(path, skipped=skipped)
    if skipped:
        import logging

        from tb_kineto_insights.analysis.units import terminal_safe

        # a name may hold an ESC or a newline: escaped, as every name printed is
        logging.getLogger(__name__).warning(
            "warning: %s: %s", terminal_safe(path), terminal_safe(describe_skipped(skipped))
        )
    named = [
        dataclasses.replace(run, name=folder_name(path)) if run.name == "." else run for run in runs
    ]
    return named, skipped


def _span_entry(span: Span, result: SpanResult | None) -> ReportSpan:
    """A span's entry of the report: its summary, or why it could not be read."""
    if isinstance(result, SpanOk):
        return ReportSpan(span=span.span, file=span.path, summary=result.summary)
    if result is None:  # never: every span gives a result
        return ReportSpan(span=span.span, file=span.path, error=SpanError(type="", message=""))
    return ReportSpan(span=span.span, file=span.path, error=SpanError(**result.as_dict()))


def span_results(
    spans: list[Span],
    max_json_bytes: int,
    thresholds: Thresholds,
    summaries: CachedSummaries | None,
) -> Iterator[tuple[int, SpanResult]]:
    """``(index into spans, SpanOk | SpanFailed)`` of every span, each as soon as it is
    done (in no set order), the files read and analysed at once on every core
    (:func:`~tb_kineto_insights.store.parallel_summaries.summarize_spans_as_done`);
    through ``summaries`` (a shared cache) when given, in order."""
    if summaries is not None:
        yield from enumerate(summaries.summarize_all(spans))
        return
    from tb_kineto_insights.store import parallel_summaries as ps

    settings = ps.Settings(max_json_bytes, thresholds)
    for i, (result, _) in ps.summarize_spans_as_done([ps.FileTask(s) for s in spans], settings):
        yield i, result


def summary_of(span: ReportSpan) -> Summary | None:
    """The span's summary, None when it could not be read."""
    return span.summary if isinstance(span.summary, Summary) else None


def build_report(
    path: str,
    *,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    summaries: CachedSummaries | None = None,
    on_run: Callable[[int, ReportRun], None] | None = None,
) -> Report:
    """The ``tb_kineto_insights.report/1`` document (a :class:`~tb_kineto_insights.schema.Report`)
    for a log directory, run folder or file.
    ``summaries``: where span summaries come from (a shared cache); None: read every file
    (``max_json_bytes`` and ``thresholds`` then apply; otherwise ``summaries``' own).
    ``on_run(index, run)``: called with each run as soon as its files are in (runs in no
    set order), which is then the caller's alone: the report returned lists no run, and
    the run's summaries are let go here (``report --format json`` encodes each run then,
    while other files are read, and keeps its JSON only).

    Shape: ``{"schema", "path", "skipped"?: [{"path", "reason"}], "runs": [{"run",
    "workers": [{"worker", "spans": [{"span", "file", "summary" | "error"}]}],
    "run_summary"}]}`` (``skipped`` only when discovery skipped something);
    ``run_summary`` is the view across ranks (latest readable span of each worker) for
    runs of several workers, else ``None``; the latest readable span of each worker (of
    each rank, when one worker holds several ranks:
    :func:`~tb_kineto_insights.summary.select_run_spans`).

    Raises:
        LogdirError: ``path`` does not exist or its storage cannot be listed.
    """
    found, skipped = _runs_for(path)
    spans = [s for run in found for worker in run.workers for s in worker.spans]
    first = [0]  # each run's first span, in spans
    for run in found:
        first.append(first[-1] + sum(len(w.spans) for w in run.workers))
    run_of = [r for r in range(len(found)) for _ in range(first[r], first[r + 1])]
    results: list[SpanResult | None] = [None] * len(spans)
    left = [first[r + 1] - first[r] for r in range(len(found))]
    runs: list[ReportRun | None] = [None] * len(found)
    pending = set(range(len(found)))

    def complete(r: int) -> None:
        pending.discard(r)
        entry = _run_entry(found[r], results[first[r] : first[r + 1]], thresholds)
        if on_run is None:
            runs[r] = entry
            return
        results[first[r] : first[r + 1]] = [None] * (first[r + 1] - first[r])
        on_run(r, entry)

    for r in range(len(found)):
        if not left[r]:  # no span (a listed folder without traces)
            complete(r)
    for i, result in span_results(spans, max_json_bytes, thresholds, summaries):
        results[i] = result
        r = run_of[i]
        left[r] -= 1
        if not left[r]:
            complete(r)
    for r in sorted(pending):  # (every span gives a result: never)
        complete(r)
    return Report(
        schema=REPORT_SCHEMA,
        path=path,
        # sorted as written (the order met is the file system's)
        skipped=sorted(
            (SkippedPath(path=escaped_name(p), reason=r) for p, r in skipped),
            key=lambda e: (e.path, e.reason),
        )
        or UNSET,
        runs=[e for e in runs if e is not None],
    )


def _run_entry(
    run: Run,
    results: list[SpanResult | None],
    thresholds: Thresholds,
) -> ReportRun:
    """A run's entry: its workers' spans (``results``: the run's span results, in its
    span order) and its view across ranks."""
    workers: list[ReportWorker] = []
    readable: list[tuple[str, list[Summary]]] = []
    at = 0
    for worker in run.workers:
        entries = [_span_entry(s, results[at + k]) for k, s in enumerate(worker.spans)]
        at += len(worker.spans)
        workers.append(ReportWorker(worker=worker.name, spans=entries))
        readable.append((worker.name, [x for s in entries if (x := summary_of(s))]))
    run_summary = run_view_of(readable, thresholds)
    return ReportRun(run=run.name, workers=workers, run_summary=run_summary)
