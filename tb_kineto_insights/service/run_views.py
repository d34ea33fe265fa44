"""A run's view across ranks as the plugin serves it: its spans loaded, the partial
failure of a run (workers that cannot be read are named, the others compared), and the
view made once for every request asking for the same spans.

The view is :func:`~tb_kineto_insights.summary.run_view_with_notes` of each worker's
readable spans (the same choice ``report`` and ``index`` make), through a hook
(:data:`RunViewHook`, default :func:`~tb_kineto_insights.summary.summarize_run`). The
default hook reads only :data:`RUN_VIEW_PANELS` of a summary: at thousands of ranks only
those are decoded; any other hook gets whole summaries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tb_kineto_insights.analysis.run_view_spans import RunViewSpan
from tb_kineto_insights.logdir.discovery import Span
from tb_kineto_insights.logdir.discovery import parse_span_index as parse_span_index
from tb_kineto_insights.schema.communication import CommunicationPanel
from tb_kineto_insights.schema.health import HealthPanel
from tb_kineto_insights.schema.idle import IdlePanel
from tb_kineto_insights.schema.steps import StepsPanel
from tb_kineto_insights.schema.tables import TablesPanel
from tb_kineto_insights.service.errors import Unreadable
from tb_kineto_insights.service.workspace import Workspace
from tb_kineto_insights.store.cache import LoadResult, encode_json
from tb_kineto_insights.summary import FAILED_TRACE, run_view_with_notes, summarize_run

#: The run-level view of ``[(worker, span summary), ...]`` (one per rank): a
#: :class:`~tb_kineto_insights.schema.RunView` Struct or built-ins.
RunViewHook = Callable[[list[tuple[str, RunViewSpan]]], Any]

#: The default view: :func:`~tb_kineto_insights.summary.summarize_run`.
DEFAULT_RUN_VIEW: RunViewHook = summarize_run

#: The panels the view across ranks reads (:mod:`.analysis.run_view`; ``idle`` and
#: ``tables`` for why a straggler is late, :mod:`.analysis.straggler_cause`): at
#: thousands of ranks the run view decodes these only.
RUN_VIEW_PANELS = ("health", "steps", "communication", "idle", "tables")


@dataclass(frozen=True)
class RunViewPanels:
    """The :data:`RUN_VIEW_PANELS` of one span, each decoded into its Struct: what the
    view across ranks reads of a summary (:class:`~.analysis.run_view_spans.RunViewSpan`;
    ``idle`` and ``tables`` may be None)."""

    health: HealthPanel
    steps: StepsPanel
    communication: CommunicationPanel
    idle: IdlePanel | None
    tables: TablesPanel | None


def run_view_input(result: LoadResult, whole: bool) -> RunViewSpan:
    """One span's summary for the run-view hook: its :data:`RUN_VIEW_PANELS` only,
    unless ``whole`` or one of them is missing (then the whole
    :class:`~tb_kineto_insights.schema.Summary`)."""
    if not whole:
        health, steps, comm, idle, tables = (result.panel(name) for name in RUN_VIEW_PANELS)
        if health is not None and steps is not None and comm is not None:
            return RunViewPanels(
                health=health, steps=steps, communication=comm, idle=idle, tables=tables
            )
    return result.decoded()


@dataclass(frozen=True)
class RunViewAnswer:
    """A run's view, or what it waits for: ``body`` (the ``/run_summary`` JSON) when
    every chosen span is read (or failed), else ``pending`` (the 202 document: the spans
    still queued or loading)."""

    body: bytes | None = None
    pending: dict[str, Any] | None = None


def run_view_answer(
    workspace: Workspace, run_name: str, span_index: int, wait_s: float, hook: RunViewHook
) -> RunViewAnswer:
    """The view across ranks of run ``run_name`` at ``span_index`` (``-1``: each
    worker's last span): ``{run, span_index, spans: [{worker, span}], errors: {worker:
    message}, summary}``; workers without a span at that index or whose spans cannot be
    read are in ``errors``, the others compared.

    Raises:
        NotFound: no such run.
        Unreadable: no worker of the run could be read.
    """
    run = workspace.run(run_name)
    # every span of each worker that has one at span_index: which ranks a worker holds
    # is only known once its spans are read (select_run_spans decides)
    chosen: list[Span] = []
    missing: dict[str, str] = {}
    for worker in run.workers:
        try:
            worker.spans[span_index]
        except IndexError:
            missing[worker.name] = f"worker has {len(worker.spans)} span(s), no index {span_index}"
            continue
        chosen.extend(worker.spans)
    idents = [workspace.request_identity(s) for s in chosen]
    key = ("run_summary", id(hook), run.name, span_index, tuple(idents), tuple(missing.items()))

    def make() -> tuple[RunViewAnswer, int | None]:
        gathered = workspace.gather(chosen, wait_s, idents)
        pending = gathered.pending(chosen)
        if pending:
            doc = {"state": "loading", "pending": pending, "total": len(chosen)}
            return RunViewAnswer(pending=doc), None
        errors = dict(missing)
        ready: list[tuple[Span, LoadResult]] = []
        for span, status, result in zip(chosen, gathered.statuses, gathered.results, strict=True):
            if result is None or result.summary is None:
                errors.setdefault(span.worker, status.error or "not readable")
            else:
                ready.append((span, result))
        if not ready:
            raise Unreadable(f"no worker of run {run.name!r} could be read: {errors}")
        body = _run_view_body(run.name, span_index, ready, errors, hook)
        # an error that may pass (I/O, a dead worker, a deadline): made, not kept
        lasting = all(s.error_kind in (None, FAILED_TRACE) for s in gathered.statuses)
        return RunViewAnswer(body=body), len(body) if lasting else None

    return workspace.answers.get(key, make)


def _run_view_body(
    run_name: str,
    span_index: int,
    ready: list[tuple[Span, LoadResult]],
    errors: dict[str, str],
    hook: RunViewHook,
) -> bytes:
    """The answer's JSON (:func:`run_view_answer`) from the summaries read."""
    whole = hook is not summarize_run  # another hook may read any panel
    decoded = [(span, run_view_input(result, whole)) for span, result in ready]
    per_worker: dict[str, list[RunViewSpan]] = {}
    for span, summary in decoded:
        per_worker.setdefault(span.worker, []).append(summary)
    side, view = run_view_with_notes(list(per_worker.items()), span_index=span_index, view=hook)
    span_of = {id(summary): span for span, summary in decoded}
    doc = {
        "run": run_name,
        "span_index": span_index,
        "spans": [{"worker": name, "span": span_of[id(summary)].span} for name, summary in side],
        "errors": errors,
        "summary": view,
    }
    return encode_json(doc)
