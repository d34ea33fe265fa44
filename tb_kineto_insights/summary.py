"""Summary of one trace: the small, JSON-serialisable result every front end shows.

``summarize_file(path)`` reads and analyses one file; the CLI, the plugin and the cache
all call it. A summary is a :class:`~tb_kineto_insights.schema.Summary` Struct (frozen;
one field per panel in :data:`PANELS`, one schema module per panel in
``tb_kineto_insights/schema/``, published as ``docs/schema/summary.schema.json``); code
reads it by attribute (``summary.steps.mean_step_us``) and writes it as JSON with
msgspec (``cache.encode_json``):

- ``health``: what the reader saw (:class:`~tb_kineto_insights.trace.model.TraceHealth`),
  with ``trace_quality``: is the trace representative (:mod:`.analysis.trace_quality`);
- ``steps``: step windows, breakdown, GPU utilization (:mod:`.analysis.overview`);
- ``kernels``: kernel density (:mod:`.analysis.kernels`);
- ``idle``: GPU idle gaps and their causes (:mod:`.analysis.idle`);
- ``communication``: collectives, overlap with compute, bandwidth, the sequence used
  to match ranks (:mod:`.analysis.communication`);
- ``memory``: allocated/reserved over time, growth, live allocations by op
  (:mod:`.analysis.memory`);
- ``efficiency``: kernel efficiency per op group against the device's roofline
  (:mod:`.analysis.efficiency`);
- ``diagnoses``: what limits the job, most severe first (:mod:`.analysis.rules`), each
  fix with the step it would give, replayed on the step's dependency graph
  (:mod:`.analysis.step_graph`, :mod:`.analysis.replay`, :mod:`.analysis.what_if`);
- ``what_if``: those fixes ranked by predicted step time, the top ones together
  (:mod:`.analysis.what_if`);
- ``critical_path``: what each steady step waited on, end to end
  (:mod:`.analysis.critical_path`);
- ``tables``: per kernel / op name, count and time per step, for the diff
  (:mod:`.analysis.tables`).

Beside the summary, from the same read and the same index: the per-step timelines
(:mod:`.analysis.timeline`, a :class:`~tb_kineto_insights.schema.timeline.TimelineStore`)
of :func:`summarize_trace_with_timeline`, which the cache stores next to the summary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from tb_kineto_insights import schema
from tb_kineto_insights.analysis.communication import communication_summary
from tb_kineto_insights.analysis.critical_path import PathPiece, critical_path_summary
from tb_kineto_insights.analysis.efficiency import efficiency_summary
from tb_kineto_insights.analysis.idle import IdlePieces, idle_summary
from tb_kineto_insights.analysis.kernels import kernels_summary
from tb_kineto_insights.analysis.memory import memory_summary
from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.rules import SEVERITY_ORDER, diagnose
from tb_kineto_insights.analysis.run_view import run_view
from tb_kineto_insights.analysis.run_view_spans import RunViewSpan, run_view_inputs
from tb_kineto_insights.analysis.step_graph import build_step_graph
from tb_kineto_insights.analysis.tables import tables_summary
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.timeline import timeline_store
from tb_kineto_insights.analysis.trace_index import TraceIndex, build_index
from tb_kineto_insights.analysis.trace_quality import trace_quality_summary
from tb_kineto_insights.analysis.version import ANALYSIS_VERSION as _ANALYSIS_VERSION
from tb_kineto_insights.analysis.what_if import WhatIf, what_if_summary
from tb_kineto_insights.schema import REPORT_SCHEMA as REPORT_SCHEMA
from tb_kineto_insights.schema import RunView, Summary
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.timeline import TimelineStore
from tb_kineto_insights.trace.errors import SummarySchemaError, TraceError, TraceIOError
from tb_kineto_insights.trace.model import Trace
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

if TYPE_CHECKING:
    from tb_kineto_insights.schema.history import HeadlineDiagnosis

#: Bumped whenever a summary's content changes (``analysis/version.py``).
ANALYSIS_VERSION = _ANALYSIS_VERSION
#: Panels a summary holds, in display order.
PANELS: tuple[str, ...] = (
    "diagnoses",
    "what_if",
    "steps",
    "critical_path",
    "kernels",
    "idle",
    "communication",
    "memory",
    "efficiency",
    "health",
    "tables",
)


def summarize_trace(trace: Trace, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Summary:
    """Analyse a read trace; returns its :class:`~tb_kineto_insights.schema.Summary` (one
    field per panel in :data:`PANELS`), built from the Struct each panel's builder returns
    (constructed, not validated: ``tests/test_schema_real.py`` round-trips every real summary
    through the schema)."""
    return _summarize(trace, thresholds, None)[0]


def summarize_trace_with_timeline(
    trace: Trace, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> tuple[Summary, TimelineStore]:
    """:func:`summarize_trace` and, from the same index and the idle panel's attributed
    intervals, the span's per-step timelines
    (:func:`~tb_kineto_insights.analysis.timeline.timeline_store`): the idle band of each
    step is the idle panel's figure for it."""
    pieces: dict[int, IdlePieces] = {}
    summary, index = _summarize(trace, thresholds, pieces)
    return summary, timeline_store(index, pieces, thresholds)


def _summarize(
    trace: Trace,
    thresholds: Thresholds,
    pieces: dict[int, IdlePieces] | None,
    paths: list[list[PathPiece]] | None = None,
) -> tuple[Summary, TraceIndex]:
    """The summary and the index it was built from; ``pieces``: filled by the idle
    panel (``idle_summary(pieces=)``) when given; ``paths``: each steady step's critical
    path pieces (:func:`~.analysis.critical_path.critical_path_summary`), when given."""
    index = build_index(trace, thresholds)
    steps = steps_summary(index)
    kernels = kernels_summary(index, thresholds)
    pieces = {} if pieces is None else pieces
    idle = idle_summary(index, thresholds, pieces=pieces)
    # each collective's lead-up on the main GPU, with the idle time as attributed
    main = idle.main_device
    communication = communication_summary(
        index, thresholds, main, pieces.get(main) if main is not None else None
    )
    memory = memory_summary(index, thresholds)
    kernel_groups: dict[tuple[str, str, str], Any] = {}
    efficiency = efficiency_summary(index, thresholds, kernel_groups)
    tables = tables_summary(index)
    health = trace.health.panel(trace_quality_summary(index, thresholds))
    panels = {
        "steps": steps,
        "kernels": kernels,
        "idle": idle,
        "communication": communication,
        "memory": memory,
        "efficiency": efficiency,
        "health": health,
    }
    service = WhatIf.of(index, build_step_graph(index), kernel_groups)
    diagnoses = diagnose(index, panels, thresholds, service)
    critical_path, path = critical_path_summary(
        index, service.graph if service else None, service.actual if service else None
    )
    if paths is not None:
        paths.extend(path)
    summary = Summary(
        diagnoses=diagnoses,
        what_if=what_if_summary(diagnoses, service, steps.mean_step_us),
        steps=steps,
        critical_path=critical_path,
        kernels=kernels,
        idle=idle,
        communication=communication,
        memory=memory,
        efficiency=efficiency,
        health=health,
        tables=tables,
    )
    try:
        schema.check_summary(summary)
    except (msgspec.ValidationError, msgspec.EncodeError, TypeError, NotImplementedError) as exc:
        raise SummarySchemaError(
            trace.health.path or "trace",
            f"the analysis gave a summary that does not fit its schema ({exc}); an odd "
            "value in the trace reached it: please report this file",
        ) from exc
    return summary, index


def summarize_file(
    path: str,
    *,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> Summary:
    """Read and analyse one trace file (local path or fsspec URL): its
    :class:`~tb_kineto_insights.schema.Summary`.

    Raises:
        TraceError: (and its subclasses) when the file cannot be read; the message names
            the file, the problem and, for malformed JSON, the byte offset.
    """
    return summarize_trace(read_trace(path, max_json_bytes=max_json_bytes), thresholds)


def summarize_file_with_timeline(
    path: str,
    *,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[Summary, TimelineStore]:
    """:func:`summarize_file` and the span's per-step timelines, from one read
    (:func:`summarize_trace_with_timeline`); what the plugin's loader and the cache-filling
    commands store. Raises as :func:`summarize_file`."""
    return summarize_trace_with_timeline(
        read_trace(path, max_json_bytes=max_json_bytes), thresholds
    )


def summarize_run(
    workers: Sequence[tuple[str, RunViewSpan]], thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> RunView:
    """Run-level view across the workers (ranks) of one run, from one span summary per
    worker (a :class:`~tb_kineto_insights.schema.Summary`, or any object with its
    ``health``, ``steps`` and ``communication`` panels; choose them with
    :func:`select_run_spans`): the :class:`~tb_kineto_insights.schema.RunView` of
    :func:`~tb_kineto_insights.analysis.run_view.run_view`, with its ``diagnoses``
    (``communication_straggler``, per-rank ``exposed_communication``) and
    ``superseded_span_diagnoses`` (``{worker, rank, id}`` of the span-level diagnoses the
    run-level ones replace)."""
    return run_view(workers, thresholds)


_S = TypeVar("_S", bound=RunViewSpan)


def select_run_spans(
    workers: list[tuple[str, list[_S]]], span_index: int = -1
) -> tuple[list[tuple[str, _S]], list[str]]:
    """The one place that chooses the view across ranks' input from a run's readable
    span summaries per worker (CLI and plugin): ``spans[span_index]`` per worker, and one
    entry per rank for a worker that holds several ranks' spans in the same time window
    (:func:`~tb_kineto_insights.analysis.run_view_spans.run_view_inputs`). Returns the
    ``(name, summary)`` pairs and notes to show with the view."""
    return run_view_inputs(workers, span_index)


def run_view_with_notes(
    readable: Sequence[tuple[str, Sequence[_S]]],
    *,
    span_index: int = -1,
    view: Callable[[list[tuple[str, _S]]], Any] | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    min_ranks: int = 0,
) -> tuple[list[tuple[str, _S]], Any]:
    """The one way a run's view across ranks is made, for ``report``, the diff, the
    plugin and ``index``: the spans :func:`select_run_spans` chooses from each worker's
    readable span summaries (``readable``: ``(worker, summaries in span order)``) at
    ``span_index``, and ``view(chosen)`` (default :func:`summarize_run`) with the
    selection's notes first (a :class:`~tb_kineto_insights.schema.RunView`'s ``notes``,
    or a dict's ``"notes"``, as another view function may return). Returns the chosen
    ``(name, summary)`` pairs and the view (None when fewer than ``min_ranks`` are
    chosen)."""
    chosen, notes = select_run_spans([(w, list(spans)) for w, spans in readable], span_index)
    if len(chosen) < min_ranks:
        return chosen, None
    made = summarize_run(chosen, thresholds) if view is None else view(chosen)
    if notes and isinstance(made, RunView):
        made = msgspec.structs.replace(made, notes=notes + made.notes)
    elif notes and isinstance(made, dict):
        made["notes"] = notes + list(made.get("notes") or [])
    return chosen, made


def run_view_of(
    readable: Sequence[tuple[str, Sequence[Summary]]], thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> RunView | None:
    """The view across ranks ``report`` and the diff show for a run (``run_summary``):
    :func:`run_view_with_notes` of its workers' latest readable spans; None when fewer
    than two ranks are chosen (a run of one rank has no view across ranks)."""
    view: RunView | None = run_view_with_notes(readable, thresholds=thresholds, min_ranks=2)[1]
    return view


def run_diagnoses(
    spans: Sequence[tuple[str, Summary]], view: RunView | None
) -> list[tuple[int | None, Diagnosis]]:
    """A run's diagnoses as ``report`` lists them, most severe first, then the largest
    share of step time (a stable sort: spans in the given order, then the run-level
    ones). ``spans``: ``(worker, span summary)`` of the run's readable spans; ``view``:
    its :func:`run_view_of`. Every span-level diagnosis, except those the view
    supersedes (``superseded_span_diagnoses``: ``{worker, id}``, e.g. a rank's
    ``exposed_communication`` estimated from its own trace, which the view measures
    across ranks), then the view's run-level diagnoses (``communication_straggler``...).
    Returns ``(index into spans, or None for a run-level diagnosis, diagnosis)``."""
    replaced = {(s.worker, s.id) for s in view.superseded_span_diagnoses} if view else set()
    found: list[tuple[int | None, Diagnosis]] = []
    for i, (worker, summary) in enumerate(spans):
        found.extend((i, d) for d in summary.diagnoses if (worker, d.id) not in replaced)
    found.extend((None, d) for d in (view.diagnoses if view is not None else []))
    order = SEVERITY_ORDER
    found.sort(key=lambda wd: (order.index(wd[1].severity), -wd[1].impact_fraction))
    return found


#: ``where`` of a run-level diagnosis in a run's headline diagnoses.
ALL_RANKS = "all ranks"


def run_headline_diagnoses(
    readable: list[tuple[str, list[Summary]]], thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[HeadlineDiagnosis]:
    """The diagnoses of a run of several workers as the history and the view across runs
    keep them: :func:`run_diagnoses` over every readable span (``readable``:
    ``(worker, summaries in span order)``, as ``report`` reads them) and the run's
    :func:`run_view_of`, in that order, per id the first (the most severe, then largest
    impact), ``where`` the worker, or :data:`ALL_RANKS` for a run-level one."""
    # here, not at the top: ``report`` loads neither the headline nor its statistics
    from tb_kineto_insights.analysis.headline import headline_diagnosis

    spans = [(worker, x) for worker, summaries in readable for x in summaries]
    found = run_diagnoses(spans, run_view_of(readable, thresholds))
    out: dict[str, HeadlineDiagnosis] = {}
    for i, d in found:
        if d.id not in out:
            out[d.id] = headline_diagnosis(d, ALL_RANKS if i is None else spans[i][0])
    return list(out.values())


#: :attr:`SpanFailed.kind` of a reader's verdict about the file's content (remembered
#: until the file changes), of an I/O error (retried), and of a bug in the analysis
#: (retried); the plugin's loads add ``worker``, ``timeout`` and ``memory``.
FAILED_TRACE, FAILED_IO, FAILED_INTERNAL = "trace", "io", "internal"
#: What reading and analysing a span may raise for the file's sake: the reader's typed
#: errors, and what the analysis may raise on odd input (a bug to report, never the
#: input's fault). :func:`span_failed` classifies them.
SPAN_ERRORS: tuple[type[Exception], ...] = (
    TraceError,
    RecursionError,
    MemoryError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
)


@dataclass(frozen=True)
class SpanOk:
    """A span summarised: its summary and, when asked for, its per-step timelines."""

    summary: Summary
    timeline: TimelineStore | None = None


@dataclass(frozen=True)
class SpanFailed:
    """A span that could not be summarised: ``kind`` (:data:`FAILED_TRACE`,
    :data:`FAILED_IO`, :data:`FAILED_INTERNAL`, or the plugin's load kinds), ``type``
    (the error's class name: ``TraceFormatError``, ``TraceIOError``, ``AnalysisError``…),
    ``message`` (names the file and the problem) and ``cacheable`` (a verdict about the
    file's content, remembered until the file changes; else asked again next time)."""

    kind: str
    type: str
    message: str
    cacheable: bool

    def as_dict(self) -> dict[str, str]:
        """``{"type", "message"}``, as the report's ``error`` of a span says it."""
        return {"type": self.type, "message": self.message}


#: The one result of summarising a span, for the command line, the parallel batches
#: and the plugin's worker pool.
SpanResult = SpanOk | SpanFailed


def span_failed(exc: BaseException, path: str) -> SpanFailed:
    """The :class:`SpanFailed` of an exception raised while reading or analysing
    ``path``: a :class:`~tb_kineto_insights.trace.errors.TraceIOError` is an I/O error
    (retried), any other reader error a verdict about the content (cacheable), anything
    else a bug in the analysis (``AnalysisError``, retried)."""
    if isinstance(exc, TraceIOError):
        return SpanFailed(FAILED_IO, type(exc).__name__, str(exc), cacheable=False)
    if isinstance(exc, TraceError):
        return SpanFailed(FAILED_TRACE, type(exc).__name__, str(exc), cacheable=True)
    message = f"{path}: internal error while analysing ({type(exc).__name__}: {exc})"
    return SpanFailed(FAILED_INTERNAL, "AnalysisError", message, cacheable=False)


def summarize_span(
    path: str,
    *,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    with_timeline: bool = False,
) -> SpanResult:
    """Read and analyse one file (local path or fsspec URL); never raises for the file's
    sake: one bad file never stops a report over many. :class:`SpanOk` with the summary
    (and its timelines when ``with_timeline``), else :class:`SpanFailed`
    (:func:`span_failed`)."""
    try:
        if with_timeline:
            summary, store = summarize_file_with_timeline(
                path, max_json_bytes=max_json_bytes, thresholds=thresholds
            )
            return SpanOk(summary, store)
        return SpanOk(summarize_file(path, max_json_bytes=max_json_bytes, thresholds=thresholds))
    except SPAN_ERRORS as exc:
        return span_failed(exc, path)
