"""Shape of ``report``: filled by ``cli.main.build_report``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from msgspec import UNSET, UnsetType

from tb_kineto_insights.schema._base import Out
from tb_kineto_insights.schema.run_view import RunView
from tb_kineto_insights.schema.summary import Summary


class SpanError(Out, frozen=True, kw_only=True):
    """``report.runs[].workers[].spans[].error``."""

    type: str
    message: str


class ReportSpan(Out, frozen=True, kw_only=True):
    """One span (trace file): ``summary`` when it was read, else ``error``
    (the reader's typed error: ``type`` and a ``message`` naming the file)."""

    span: str
    file: str
    summary: Summary | UnsetType = UNSET
    error: SpanError | UnsetType = UNSET


class ReportWorker(Out, frozen=True, kw_only=True):
    """``report.runs[].workers[]``."""

    worker: str
    spans: list[ReportSpan]


class ReportRun(Out, frozen=True, kw_only=True):
    """``report.runs[]``."""

    run: str
    workers: list[ReportWorker]
    run_summary: RunView | None


class SkippedPath(Out, frozen=True, kw_only=True):
    """``report.skipped[]``: a file or folder under the path that was not read, and why
    in words (a FIFO, socket or device; a symbolic link in a loop or to no file; a folder
    that cannot be listed). ``path``: bytes that are not UTF-8 escaped (``\\xff``)."""

    path: str
    reason: str


class Report(Out, frozen=True, kw_only=True):
    """``tb_kineto_insights.report/1`` (``cli.main.build_report``, ``report --format
    json``): every run, worker and span under a path, each span with its ``summary`` or
    its ``error``, and per run the view across ranks (``run_summary``, None for a run of
    one worker). ``skipped``: what discovery left unread under the path, absent when
    nothing was (before, only a warning on standard error said so)."""

    schema: str
    path: str
    skipped: list[SkippedPath] | UnsetType = UNSET
    runs: list[ReportRun]
