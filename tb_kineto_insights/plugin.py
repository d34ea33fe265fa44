"""The TensorBoard plugin: HTTP routes over discovery and summaries, nothing more.

Routes (under ``/data/plugin/kineto_insights``):

- ``/index.js``, ``/style.css``: the frontend, from the package's ``static/`` folder,
  by a fixed list of names (a URL is never joined onto a filesystem path).
- ``/runs``: ``{"runs": [{"run", "workers": [{"worker", "spans": [{"span",
  "size_bytes", "mtime", "state", "error"}]}]}], "error"}``; ``state`` is ``"ready"``
  (summary cached), ``"not_loaded"`` or ``"error"`` (``error`` then holds the message);
  the top-level ``error`` is the log-directory problem, or ``null``.
- ``/summary?run=R&worker=W&span=S``: the span's summary (see
  :func:`tb_kineto_insights.summary.summarize_file`). 400 when a parameter is
  missing, 404 when the key names no discovered span, 422 when the trace cannot be
  read (the message names the file); errors are JSON ``{"error": message}``.

Run, worker and span from a URL are only keys looked up with
:func:`tb_kineto_insights.logdir.find_span` among what discovery found; they never
become part of a path. JSON responses never contain NaN or infinities (they become
``null``).

The log directory is TensorBoard's ``--logdir`` (or the first path of
``--logdir_spec``). Discovery results are cached and the folder is re-scanned at most
every ``KINETO_INSIGHTS_RESCAN_S`` seconds (environment variable, default 30; ``0``
re-scans on every request). Summaries are computed on request, in the request
thread, and cached in memory keyed by the file's identity (path, size, mtime).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

import numpy as np
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug.wrappers import Request

from tb_kineto_insights.logdir import LogdirError, Run, Span, discover, find_span
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace.errors import TraceError

__all__ = [
    "DEFAULT_RESCAN_S",
    "PLUGIN_NAME",
    "RESCAN_ENV",
    "KinetoInsightsPlugin",
    "json_safe",
    "logdir_from_context",
    "rescan_interval_from_env",
]

logger = logging.getLogger(__name__)

PLUGIN_NAME = "kineto_insights"
#: Environment variable: seconds between re-scans of the log directory.
RESCAN_ENV = "KINETO_INSIGHTS_RESCAN_S"
DEFAULT_RESCAN_S = 30.0
#: How many summaries the in-memory cache keeps (least recently used go first).
DEFAULT_MAX_SUMMARIES = 32
_MAX_ERRORS = 10_000

_JSON = "application/json"
#: Route → (file name in ``static/``, content type). The only files ever served.
_STATIC_FILES: dict[str, tuple[str, str]] = {
    "/index.js": ("index.js", "text/javascript"),
    "/style.css": ("style.css", "text/css"),
}
_QUERY_KEYS = ("run", "worker", "span")
# TensorBoard's own rule for `--logdir_spec` entries (name:path, URL, or bare path).
_URI = re.compile(r"[a-zA-Z][0-9a-zA-Z.]*://.*")

_SpanKey = tuple[str, int, float]


def rescan_interval_from_env(environ: Mapping[str, str] | None = None) -> float:
    """Seconds between re-scans from ``KINETO_INSIGHTS_RESCAN_S``; the default (30)
    when unset, and with a warning when not a finite number ≥ 0."""
    raw = (os.environ if environ is None else environ).get(RESCAN_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_RESCAN_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        logger.warning(
            "%s=%r is not a number of seconds >= 0; using %s",
            RESCAN_ENV,
            raw,
            DEFAULT_RESCAN_S,
        )
        return DEFAULT_RESCAN_S
    return value


def logdir_from_context(context: Any) -> str:
    """``context.logdir``, else the path of the first ``--logdir_spec`` entry, else ``""``."""
    if getattr(context, "logdir", None):
        return str(context.logdir)
    spec = str(getattr(getattr(context, "flags", None), "logdir_spec", "") or "")
    first = spec.split(",")[0].strip()
    if (
        first
        and _URI.match(first) is None
        and ":" in first
        and not first.startswith("/")
        and not os.path.splitdrive(first)[0]
    ):
        first = first.partition(":")[2]  # "name:path"
    return first


def json_safe(obj: Any) -> Any:
    """A copy of ``obj`` that ``json.dumps`` writes as strict JSON: NaN and ±inf become
    ``None``, numpy scalars and arrays become Python numbers and lists, tuples and sets
    become lists, dict keys become strings."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (np.ndarray, np.generic)):
        return json_safe(obj.tolist())
    return obj


def _error_json(request: Request, message: str, code: int) -> Any:
    return http_util.Respond(request, {"error": message}, _JSON, code=code)


class KinetoInsightsPlugin(base_plugin.TBPlugin):
    """Serves discovery and per-span summaries of the Kineto traces in the log directory.

    Args:
        context: TensorBoard's ``TBContext``.
        rescan_s: seconds between re-scans of the log directory; default from
            ``KINETO_INSIGHTS_RESCAN_S`` (30 when unset).
        max_summaries: how many summaries to keep in memory.
        clock: monotonic clock in seconds (tests replace it).
    """

    plugin_name = PLUGIN_NAME

    def __init__(
        self,
        context: Any,
        *,
        rescan_s: float | None = None,
        max_summaries: int = DEFAULT_MAX_SUMMARIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logdir = logdir_from_context(context)
        self._rescan_s = rescan_interval_from_env() if rescan_s is None else float(rescan_s)
        self._max_summaries = max(1, max_summaries)
        self._clock = clock
        self._scan_lock = threading.Lock()
        self._scanned_at: float | None = None
        self._runs: list[Run] = []
        self._logdir_error: str | None = None
        self._cache_lock = threading.Lock()
        self._summaries: OrderedDict[_SpanKey, dict[str, Any]] = OrderedDict()
        self._errors: dict[_SpanKey, str] = {}

    # ------------------------------------------------------------------ TBPlugin

    def get_plugin_apps(self) -> dict[str, Callable[..., Any]]:
        apps = {
            "/runs": Request.application(self._serve_runs),
            "/summary": Request.application(self._serve_summary),
        }
        for route, (filename, content_type) in _STATIC_FILES.items():
            apps[route] = Request.application(
                functools.partial(self._serve_static, filename, content_type)
            )
        return apps

    def is_active(self) -> bool:
        """Whether the log directory holds at least one trace (cached discovery)."""
        runs, _ = self._discovered()
        return bool(runs)

    def frontend_metadata(self) -> Any:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Kineto Insights")

    # ------------------------------------------------------------------ state

    def _discovered(self) -> tuple[list[Run], str | None]:
        """``(runs, log-directory error)``, re-scanning when the last scan is too old."""
        if not self._logdir:
            return [], None
        with self._scan_lock:
            if self._scanned_at is None or self._clock() - self._scanned_at >= self._rescan_s:
                error: str | None = None
                try:
                    runs = discover(self._logdir)
                except LogdirError as exc:
                    runs, error = [], str(exc)
                except Exception as exc:  # a storage driver's own error: report, keep serving
                    runs, error = [], f"log directory {self._logdir!r}: {exc}"
                if error is not None and error != self._logdir_error:
                    logger.warning("Kineto Insights: %s", error)
                self._runs, self._logdir_error = runs, error
                self._scanned_at = self._clock()
            return self._runs, self._logdir_error

    @staticmethod
    def _key(span: Span) -> _SpanKey:
        return (span.path, span.size_bytes, span.mtime)

    def _span_state(self, span: Span) -> tuple[str, str | None]:
        key = self._key(span)
        with self._cache_lock:
            if key in self._summaries:
                return "ready", None
            error = self._errors.get(key)
        return ("error", error) if error is not None else ("not_loaded", None)

    def _remember_summary(self, key: _SpanKey, summary: dict[str, Any]) -> None:
        with self._cache_lock:
            self._summaries[key] = summary
            self._summaries.move_to_end(key)
            while len(self._summaries) > self._max_summaries:
                self._summaries.popitem(last=False)
            self._errors.pop(key, None)

    def _remember_error(self, key: _SpanKey, message: str) -> None:
        with self._cache_lock:
            if len(self._errors) >= _MAX_ERRORS:
                self._errors.clear()
            self._errors[key] = message

    # ------------------------------------------------------------------ routes

    def _serve_static(self, filename: str, content_type: str, request: Request) -> Any:
        """One whitelisted file of ``static/`` (``filename`` comes from the route table)."""
        try:
            data = (
                resources.files("tb_kineto_insights")
                .joinpath("static")
                .joinpath(filename)
                .read_bytes()
            )
        except OSError:
            return _error_json(request, f"static file {filename} is missing", 404)
        return http_util.Respond(request, data, content_type)

    def _serve_runs(self, request: Request) -> Any:
        runs, error = self._discovered()
        out = []
        for run in runs:
            workers = []
            for worker in run.workers:
                spans = []
                for span in worker.spans:
                    state, span_error = self._span_state(span)
                    spans.append(
                        {
                            "span": span.span,
                            "size_bytes": span.size_bytes,
                            "mtime": span.mtime,
                            "state": state,
                            "error": span_error,
                        }
                    )
                workers.append({"worker": worker.name, "spans": spans})
            out.append({"run": run.name, "workers": workers})
        return http_util.Respond(request, json_safe({"runs": out, "error": error}), _JSON)

    def _serve_summary(self, request: Request) -> Any:
        values = {name: request.args.get(name) for name in _QUERY_KEYS}
        missing = [name for name, value in values.items() if not value]
        if missing:
            return _error_json(request, f"missing query parameter(s): {', '.join(missing)}", 400)
        run, worker, span_id = (str(values[name]) for name in _QUERY_KEYS)
        runs, _ = self._discovered()
        span = find_span(runs, run, worker, span_id)
        if span is None:
            return _error_json(
                request, f"no span {span_id!r} of worker {worker!r} in run {run!r}", 404
            )
        key = self._key(span)
        with self._cache_lock:
            summary = self._summaries.get(key)
            if summary is not None:
                self._summaries.move_to_end(key)
            error = self._errors.get(key)
        if summary is not None:
            return http_util.Respond(request, summary, _JSON)
        if error is not None:
            return _error_json(request, error, 422)
        try:
            summary = json_safe(summarize_file(span.path))
        except TraceError as exc:
            message = str(exc)
            self._remember_error(key, message)
            return _error_json(request, message, 422)
        except Exception as exc:  # a bug, or out of memory: not cached, retried next time
            logger.exception("Kineto Insights: analysing %s failed", span.path)
            return _error_json(
                request,
                f"{span.path}: internal error while analysing ({type(exc).__name__}: {exc})",
                500,
            )
        self._remember_summary(key, summary)
        return http_util.Respond(request, summary, _JSON)
