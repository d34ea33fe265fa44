"""Summary of one trace: the small, JSON-serialisable result every front end shows.

``summarize_file(path)`` reads and analyses one file; the CLI, the plugin and the cache
all call it. A summary is a plain ``dict`` with one key per panel (``health``,
``steps``; later ``kernels``, ``idle``, ``communication``, ``memory``, ``diagnoses``).
"""

from __future__ import annotations

from typing import Any

from tb_kineto_insights.analysis.steps import steps_summary
from tb_kineto_insights.trace.model import Trace
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

#: Schema id of ``report --format json``.
REPORT_SCHEMA = "tb_kineto_insights.report/1"
#: Bumped whenever a summary's content changes, so cached summaries are recomputed.
ANALYSIS_VERSION = 1
#: Panels a summary holds, in display order.
PANELS: tuple[str, ...] = ("health", "steps")


def summarize_trace(trace: Trace) -> dict[str, Any]:
    """Analyse a read trace; returns ``{panel: dict}`` for every panel in :data:`PANELS`."""
    return {
        "health": trace.health.to_dict(),
        "steps": steps_summary(trace),
    }


def summarize_file(path: str, *, max_json_bytes: int = DEFAULT_MAX_JSON_BYTES) -> dict[str, Any]:
    """Read and analyse one trace file (local path or fsspec URL).

    Raises:
        TraceError: (and its subclasses) when the file cannot be read; the message names
            the file, the problem and, for malformed JSON, the byte offset.
    """
    return summarize_trace(read_trace(path, max_json_bytes=max_json_bytes))
