"""A step's timeline and windows cut from the trace, as the plugin serves them.

A step's timeline comes from the span's stored per-step timelines (the cache entry's
``timeline``, :mod:`~tb_kineto_insights.analysis.timeline_format`), loaded as its summary
is. A window is cut from the file itself (:mod:`~tb_kineto_insights.trace.window`): the
step window with 10 % of its length on each side, or ``[start_us, end_us)`` µs after its
start, the file opened under the same rule as a load (inside the log directory, the file
discovery listed). "Open ranks" cuts the same step of every worker of a run and merges
the windows into one trace.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from tb_kineto_insights.analysis.timeline_format import decode_store, find_step, load_step
from tb_kineto_insights.logdir.discovery import Span
from tb_kineto_insights.schema.timeline import TimelineStep
from tb_kineto_insights.service.errors import Damaged, InvalidRequest, NotFound, Unreadable
from tb_kineto_insights.service.loader import SpanStatus
from tb_kineto_insights.service.workspace import Workspace
from tb_kineto_insights.trace.confine import Rule, confined
from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.window import (
    WindowCut,
    check_window_holds_events,
    cut_window,
    window_bounds,
)
from tb_kineto_insights.trace.window import parse_offset_us as parse_offset_us
from tb_kineto_insights.trace.window_merge import merge_windows


@dataclass(frozen=True)
class NotReady:
    """A span that is not loaded: its status (queued, loading, or its load's error)."""

    status: SpanStatus


def step_timeline(
    workspace: Workspace, span: Span, step: int, wait_s: float
) -> TimelineStep | NotReady:
    """The :class:`TimelineStep` of ``ProfilerStep#step`` from the span's stored
    timelines, loaded as its summary (waiting up to ``wait_s``); else the span's status.

    Raises:
        NotFound: the span has no such step (the message lists its steps), or was stored
            without timelines.
        Damaged: the stored timelines cannot be read.
    """
    status, result = workspace.load(span, wait_s)
    if result is None or result.summary is None:
        return NotReady(status)
    if result.timeline is None:
        raise NotFound("no timeline is stored for this span (summarised without one)")
    try:
        store = decode_store(result.timeline)
        position = find_step(store, step)
        if position is None:
            steps = ", ".join(str(n) for n in store.steps)
            raise NotFound(f"no step {step} in this span; its steps: {steps}")
        return load_step(store, position)
    except (ValueError, zlib.error) as exc:  # a damaged store: a bug or a bad disk
        raise Damaged(f"the stored timeline of this span is damaged ({exc})") from exc


def cut_span_window(
    workspace: Workspace,
    span: Span,
    doc: TimelineStep,
    start_us: float | None,
    end_us: float | None,
    require_events: bool = True,
) -> WindowCut:
    """The window of ``doc``'s step (± 10 %, or ``start_us``/``end_us`` µs after its
    start) cut from ``span``'s file, opened under the same rule as a load.

    Raises:
        InvalidRequest: one of ``start_us``/``end_us`` alone, or an empty range.
        Unreadable: the file cannot be cut, or (with ``require_events``) the window
            holds no event (the message says where the trace's events lie).
    """
    step_ns = round(doc.duration_us * 1000)
    window = window_bounds(doc.trace_start_ns, step_ns, start_us, end_us)
    if window is None and start_us is not None and end_us is not None:
        raise InvalidRequest(f"end_us {end_us:g} is not after start_us {start_us:g}")
    if window is None:
        raise InvalidRequest("give both start_us and end_us (end after start), or neither")
    ident = workspace.request_identity(span)
    try:
        if ident.root:
            with confined(ident.path, Rule(ident.root, ident.file_identity())):
                cut = cut_window(ident.path, *window)
        else:
            cut = cut_window(ident.path, *window)
        if require_events:
            check_window_holds_events(cut, span.path, doc.trace_start_ns, doc.step)
    except TraceError as exc:
        raise Unreadable(str(exc)) from exc
    return cut


@dataclass
class RanksWindow:
    """ "Open ranks": the merged trace (``document``), the workers merged, in rank order
    (``ranks``) and those without the step (``missing``); or ``not_ready``, the status
    of a worker still loading (or whose load failed)."""

    document: dict[str, object] | None = None
    ranks: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    not_ready: NotReady | None = None


def ranks_window(
    workspace: Workspace,
    run_name: str,
    step: int,
    start_us: float | None,
    end_us: float | None,
    wait_s: float,
) -> RanksWindow:
    """Step ``step``'s window of every worker (rank) of run ``run_name``, each its last
    span's, cut as :func:`cut_span_window` cuts one and merged into one trace
    (:func:`~tb_kineto_insights.trace.window_merge.merge_windows`: each rank's processes
    named after its worker). A worker without that step is left out and named in
    ``missing``.

    Raises:
        NotFound: no such run, or no worker has that step.
        InvalidRequest, Unreadable: as :func:`cut_span_window`; Unreadable also when no
            rank's window holds an event.
    """
    run = workspace.run(run_name)
    parts: list[tuple[str, WindowCut]] = []
    first: tuple[Span, TimelineStep] | None = None
    missing: list[str] = []
    for worker in run.workers:
        if not worker.spans:
            continue
        span = worker.spans[-1]
        try:
            doc = step_timeline(workspace, span, step, wait_s)
        except NotFound:
            missing.append(worker.name)
            continue
        if isinstance(doc, NotReady):
            return RanksWindow(not_ready=doc)  # still loading, or the load's error
        parts.append((worker.name, cut_span_window(workspace, span, doc, start_us, end_us, False)))
        first = first or (span, doc)
    if not parts or first is None:
        raise NotFound(f"no worker of run {run.name!r} has that step")
    if not any(cut.timed for _, cut in parts):  # one rank may be quiet; all: refuse
        try:
            check_window_holds_events(
                parts[0][1], first[0].path, first[1].trace_start_ns, first[1].step
            )
        except TraceError as exc:
            raise Unreadable(str(exc)) from exc
    return RanksWindow(merge_windows(parts), [n for n, _ in parts], missing)
