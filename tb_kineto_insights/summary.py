"""Summary of one trace: the small, JSON-serialisable result every front end shows.

``summarize_file(path)`` reads and analyses one file; the CLI, the plugin and the cache
all call it. A summary is the :class:`~tb_kineto_insights.schema.Summary` Struct, one
field per panel in :data:`PANELS`, built from the Struct each panel's builder returns (one
module per panel in ``tb_kineto_insights/schema/``, published as
``docs/schema/summary.schema.json``); :func:`summarize_trace` hands it on as built-ins
(a ``dict``) until the consumers take the Struct:

- ``health``: what the reader saw (:class:`~tb_kineto_insights.trace.model.TraceHealth`),
  with ``trace_quality``: is the trace representative (:mod:`.analysis.trace_quality`);
- ``steps``: step windows, breakdown, GPU utilization (:mod:`.analysis.overview`);
- ``kernels``: kernel density (:mod:`.analysis.kernels`);
- ``idle``: GPU idle gaps and their causes (:mod:`.analysis.idle`);
- ``communication``: collectives, overlap with compute, bandwidth, the sequence used
  to match ranks (:mod:`.analysis.communication`);
- ``memory``: allocated/reserved over time, growth, live allocations by op
  (:mod:`.analysis.memory`);
- ``diagnoses``: what limits the job, most severe first (:mod:`.analysis.diagnoses`);
- ``tables``: per kernel / op name, count and time per step, for the diff
  (:mod:`.analysis.tables`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from tb_kineto_insights.analysis.communication import communication_summary
from tb_kineto_insights.analysis.context import build_index
from tb_kineto_insights.analysis.diagnoses import diagnose
from tb_kineto_insights.analysis.idle import idle_summary
from tb_kineto_insights.analysis.kernels import kernels_summary
from tb_kineto_insights.analysis.memory import memory_summary
from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.run_view import (
    run_diagnoses,
    run_summary,
    run_view_inputs,
    superseded_span_diagnoses,
)
from tb_kineto_insights.analysis.tables import tables_summary
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_quality import trace_quality_summary
from tb_kineto_insights.schema import REPORT_SCHEMA as REPORT_SCHEMA
from tb_kineto_insights.schema import RunView, Summary, checked
from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.model import Trace
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

#: Bumped whenever a summary's content changes, so cached summaries are recomputed.
ANALYSIS_VERSION = 7
#: Panels a summary holds, in display order.
PANELS: tuple[str, ...] = (
    "diagnoses",
    "steps",
    "kernels",
    "idle",
    "communication",
    "memory",
    "health",
    "tables",
)


def summarize_trace(trace: Trace, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> dict[str, Any]:
    """Analyse a read trace; returns ``{panel: ...}`` for every panel in :data:`PANELS`
    (the :class:`~tb_kineto_insights.schema.Summary` built from each panel's Struct, as
    built-ins until the consumers take the Struct: see the seam below)."""
    index = build_index(trace)
    steps = steps_summary(index)
    kernels = kernels_summary(index, thresholds)
    idle = idle_summary(index, thresholds)
    communication = communication_summary(index, thresholds)
    memory = memory_summary(index, thresholds)
    tables = tables_summary(index)
    health = trace.health.panel(trace_quality_summary(index, thresholds))
    panels = {
        "steps": steps,
        "kernels": kernels,
        "idle": idle,
        "communication": communication,
        "memory": memory,
        "health": health,
    }
    summary_struct = Summary(
        diagnoses=diagnose(index, panels, thresholds),
        steps=steps,
        kernels=kernels,
        idle=idle,
        communication=communication,
        memory=memory,
        health=health,
        tables=tables,
    )
    # seam: h/s2 makes consumers take the Struct; returns the Struct after the merge
    return checked(msgspec.to_builtins(summary_struct), Summary)


def summarize_file(
    path: str,
    *,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, Any]:
    """Read and analyse one trace file (local path or fsspec URL).

    Raises:
        TraceError: (and its subclasses) when the file cannot be read; the message names
            the file, the problem and, for malformed JSON, the byte offset.
    """
    return summarize_trace(read_trace(path, max_json_bytes=max_json_bytes), thresholds)


def summarize_run(
    workers: list[tuple[str, dict[str, Any]]], thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> dict[str, Any]:
    """Run-level view across the workers (ranks) of one run, from one span summary per
    worker (choose them with :func:`select_run_spans`):
    :func:`~tb_kineto_insights.analysis.run_view.run_summary` plus its ``diagnoses``
    (``communication_straggler``, per-rank ``exposed_communication``) and
    ``superseded_span_diagnoses`` (``{worker, rank, id}`` of the span-level diagnoses the
    run-level ones replace)."""
    run = run_summary(workers, thresholds)
    run["diagnoses"] = run_diagnoses(run, thresholds)
    run["superseded_span_diagnoses"] = superseded_span_diagnoses(run["diagnoses"])
    return checked(run, RunView)


def select_run_spans(
    workers: list[tuple[str, list[dict[str, Any]]]], span_index: int = -1
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The one place that chooses the view across ranks' input from a run's readable
    span summaries per worker (CLI and plugin): ``spans[span_index]`` per worker, and one
    entry per rank for a worker that holds several ranks' spans in the same time window
    (:func:`~tb_kineto_insights.analysis.run_view.run_view_inputs`). Returns the
    ``(name, summary)`` pairs and notes to show with the view."""
    return run_view_inputs(workers, span_index)


def try_summarize_file(
    path: str,
    *,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    """``(summary, None)``, or ``(None, {"type", "message"})`` when the file cannot be
    read (the reader's typed error) or the analysis fails on it (``AnalysisError``, a bug
    to report): one bad file never stops a report over many."""
    try:
        return summarize_file(path, max_json_bytes=max_json_bytes, thresholds=thresholds), None
    except TraceError as exc:
        return None, {"type": type(exc).__name__, "message": str(exc)}
    except (RecursionError, MemoryError, ValueError, TypeError, KeyError, IndexError) as exc:
        message = f"{path}: internal error while analysing ({type(exc).__name__}: {exc})"
        return None, {"type": "AnalysisError", "message": message}
