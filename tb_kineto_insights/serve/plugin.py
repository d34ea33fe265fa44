"""The TensorBoard plugin: HTTP routes, each parsing its query, calling the service
(``tb_kineto_insights/service/``) and responding.

Every route is listed, with its parameters, answers and errors, in ``docs/api.md`` (a
test checks that the routes served here are exactly the documented ones). In short,
under ``/data/plugin/kineto_insights``: ``/runs``, ``/summary``, ``/health``,
``/run_summary``, ``/diff``, ``/timeline``, ``/window``, ``/window_ranks``,
``/history``, ``/across_runs``, and the frontend files ``/index.js``, ``/echarts.js``
and ``/style.css``.

How it stays fast and safe:

- Discovery runs in a background thread (``serve/scanner.py``): once at start, then
  every ``rescan_s`` seconds and when a local log directory changes; ``is_active`` and
  ``/runs`` answer from the last scan.
- Summaries are loaded by :class:`~tb_kineto_insights.service.loader.SummaryLoader` in
  worker processes under a deadline and a memory cap, cached on disk, preloaded in the
  background largest first; a span the page asks for goes first. A span route answers
  202 with the load state until the summary is there (or waits up to ``wait`` seconds
  for it). Every setting: ``serve/settings.py``.
- Run, worker and span from a URL are only keys into the index of what discovery found;
  they never become part of a path. The static route serves a fixed list of files.
- Nothing outside the log directories is read: a local trace is checked when it is
  opened (``trace/confine.py``: the real path of the opened descriptor must lie in the
  log directory's real path, and it must be a regular file), so a symlink swapped after
  discovery is refused with a 422. A ``file://`` log directory is served as the local
  path it names.
- No stale answer (``service/workspace.py``): a local span whose file changed since the
  scan is loaded as it is now. Errors about a file's content are remembered until the
  file changes; I/O errors, dead workers, loads past their deadline and bugs are
  retried when the span is asked for again.
- JSON is strict (NaN and infinities are written as ``null``) and goes out through
  TensorBoard's ``http_util.Respond``. Input problems are 4xx JSON answers; only a bug in
  this package gives a 500 (JSON too).

Hooks (swap them by assigning the module attribute, or pass them to the constructor):

- :data:`RUN_SUMMARY_HOOK` ``(side) -> RunView``: the run-level view across workers for
  ``/run_summary``; ``side`` is a list of ``(worker name, summary)``, one span per
  worker (per rank when a worker holds several ranks), chosen as ``report`` chooses
  them. The default is :func:`tb_kineto_insights.summary.summarize_run`; it is given
  only the panels it reads (:data:`RUN_VIEW_PANELS`, as an object with those
  attributes), any other hook whole :class:`~tb_kineto_insights.schema.Summary` Structs.
  A hook may return a Struct or built-ins; the answer is its JSON (msgspec).
- :data:`DIFF_HOOK` ``(base_side, exp_side, *, base_label, exp_label) -> DiffDocument``:
  the diff for ``/diff``; sides are lists of ``("worker/span", Summary)``. Default:
  :func:`tb_kineto_insights.compare.diff.diff`; when the hook is set to None, ``/diff``
  answers 501.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import urllib.parse
from collections.abc import Callable
from importlib import resources
from typing import Any

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug.wrappers import Request

from tb_kineto_insights.serve.scanner import Scanner
from tb_kineto_insights.serve.settings import (
    DEFAULT_RESCAN_S,
    PRELOAD_ENV,
    RESCAN_ENV,
    LogdirSource,
    PluginSettings,
    index_root,
    is_url,
    logdir_sources,
    open_cache,
    preload_from_env,
    rescan_interval_from_env,
)
from tb_kineto_insights.service import diffs, run_views, windows
from tb_kineto_insights.service.errors import (
    Busy,
    Damaged,
    InvalidRequest,
    NotAvailable,
    NotFound,
    ServiceError,
    Unreadable,
)
from tb_kineto_insights.service.headlines import LoadedHeadlines
from tb_kineto_insights.service.loader import ERROR, SpanStatus, SummaryLoader, analysis_settings
from tb_kineto_insights.service.run_views import parse_span_index
from tb_kineto_insights.service.spans import summary_answer
from tb_kineto_insights.service.windows import parse_offset_us
from tb_kineto_insights.service.worker_pool import (
    ERROR_INTERNAL,
    ERROR_IO,
    ERROR_MEMORY,
    ERROR_TIMEOUT,
    ERROR_TRACE,
    ERROR_WORKER,
)
from tb_kineto_insights.service.workspace import (
    Snapshot,
    Workspace,
    encode_json,
    json_safe,
    listed_identity,
)

__all__ = [
    "DEFAULT_RESCAN_S",
    "DIFF_HOOK",
    "MAX_WAIT_S",
    "PLUGIN_NAME",
    "PRELOAD_ENV",
    "RESCAN_ENV",
    "ROUTES",
    "RUN_SUMMARY_HOOK",
    "KinetoInsightsPlugin",
    "LogdirSource",
    "json_safe",
    "logdir_sources",
    "preload_from_env",
    "rescan_interval_from_env",
]

logger = logging.getLogger(__name__)

PLUGIN_NAME = "kineto_insights"
#: What a ``step`` query may be: ASCII digits.
_STEP_NUMBER = re.compile(r"[0-9]{1,18}")
#: Longest ``wait`` a request may ask for (seconds).
MAX_WAIT_S = 60.0
#: What a ``wait`` query may be: seconds in ASCII digits, with an optional fraction.
_WAIT_SECONDS = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,6})?")

_JSON = "application/json"
#: Route → (file name in ``static/``, content type). The only files ever served.
_STATIC_FILES: dict[str, tuple[str, str]] = {
    "/index.js": ("index.js", "text/javascript"),
    "/echarts.js": ("echarts.js", "text/javascript"),
    "/style.css": ("style.css", "text/css"),
}
#: Every route this plugin serves (docs/api.md documents exactly these).
ROUTES: tuple[str, ...] = (
    "/runs",
    "/summary",
    "/health",
    "/run_summary",
    "/diff",
    "/timeline",
    "/window",
    "/window_ranks",
    "/history",
    "/across_runs",
    *_STATIC_FILES,
)
#: ``/across_runs``: rows per page by default, and at most.
ACROSS_RUNS_LIMIT, ACROSS_RUNS_MAX_LIMIT = 50, 500
#: The panels the default run-view hook reads (``service/run_views.py``).
RUN_VIEW_PANELS = run_views.RUN_VIEW_PANELS

#: ``/run_summary``'s function; see the module docstring.
RUN_SUMMARY_HOOK: run_views.RunViewHook | None = run_views.DEFAULT_RUN_VIEW
#: ``/diff``'s function; see the module docstring. None → 501.
DIFF_HOOK: diffs.DiffHook | None = diffs.DEFAULT_DIFF

# --------------------------------------------------------------------------- errors


class _ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


#: HTTP status of each kind of service error.
_SERVICE_CODES: dict[type[ServiceError], int] = {
    InvalidRequest: 400,
    NotFound: 404,
    Unreadable: 422,
    Damaged: 500,
    NotAvailable: 501,
    Busy: 503,
}
#: HTTP status of each kind of load error.
_ERROR_CODES = {
    ERROR_TRACE: 422,
    ERROR_IO: 422,
    ERROR_WORKER: 503,
    ERROR_TIMEOUT: 503,
    ERROR_MEMORY: 503,
    ERROR_INTERNAL: 500,
}


def _header_text(text: str) -> str:
    """A name in an HTTP header: percent-encoded outside printable ASCII (and ``,``)."""
    return urllib.parse.quote(text, safe=" !#$%&'()*+-./:;<=>?@[]^_`{|}~")


def _respond(request: Request, body: bytes, code: int = 200) -> Any:
    return http_util.Respond(request, body, _JSON, code=code)


def _error(request: Request, code: int, message: str, **extra: Any) -> Any:
    return _respond(request, encode_json({"error": message, **extra}), code)


def _not_ready(request: Request, status: SpanStatus) -> Any:
    """The answer for a span that is not ready: 202 while queued or loading, the error
    (422 / 503 / 500) otherwise."""
    if status.state == ERROR:
        code = _ERROR_CODES.get(status.error_kind or ERROR_INTERNAL, 500)
        return _error(request, code, status.error or "unknown error", state=ERROR)
    return _respond(request, encode_json(status.to_json()), 202)


def _attachment(name: str) -> tuple[str, str]:
    """A ``Content-Disposition`` header that downloads as ``name`` (made safe)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return ("Content-Disposition", f'attachment; filename="{safe}"')


# --------------------------------------------------------------------------- query


def _param(request: Request, name: str, *, required: bool = True) -> str | None:
    value = request.args.get(name)
    if value is None or value == "":
        if required:
            raise _ApiError(400, f"missing query parameter: {name}")
        return None
    return value


def _required(request: Request, name: str) -> str:
    value = _param(request, name)
    if value is None:  # _param raised already; this narrows the type
        raise _ApiError(400, f"missing query parameter: {name}")
    return value


def _wait(request: Request) -> float:
    raw = request.args.get("wait")
    if raw is None or raw == "":
        return 0.0
    try:  # ASCII decimal only: float() would also take "1_0", "５" and " 3"
        value = float(raw) if _WAIT_SECONDS.fullmatch(raw) else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or value > MAX_WAIT_S:
        raise _ApiError(400, f"wait must be a number of seconds from 0 to {MAX_WAIT_S:g}")
    return value


def _number(request: Request, name: str) -> float | None:
    """A query parameter as a finite float (ASCII decimal, optional sign); None when
    absent. Raises _ApiError 400 otherwise."""
    raw = _param(request, name, required=False)
    if raw is None:
        return None
    try:
        return parse_offset_us(raw, name)
    except ValueError as exc:
        raise _ApiError(400, str(exc)) from exc


def _step(request: Request) -> int:
    raw = _required(request, "step")
    if not _STEP_NUMBER.fullmatch(raw):
        raise _ApiError(400, "step must be a whole number (N of ProfilerStep#N)")
    return int(raw)


def _count(request: Request, name: str, default: int, bounds: str) -> int:
    """A whole-number query parameter (``default`` when absent); 400 otherwise, saying
    the ``bounds`` it must be in (a sign, a fraction, 19 digits or more)."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not _STEP_NUMBER.fullmatch(raw):
        raise _ApiError(
            400,
            f"{name} must be a whole number, {bounds}, of at most 18 digits (got {raw[:40]!r})",
        )
    return int(raw)


# --------------------------------------------------------------------------- plugin


class KinetoInsightsPlugin(base_plugin.TBPlugin):
    """Serves discovery, per-span and per-run summaries, health, timelines, windows,
    diffs, the history and the view across runs of the Kineto traces in the log
    directories.

    Args (each defaults to its TensorBoard flag, then environment variable, then
    default; ``serve/settings.py``):
        context: TensorBoard's ``TBContext``.
        rescan_s: seconds between re-scans of the log directories (flag
            ``--kineto_insights_rescan_s``, ``KINETO_INSIGHTS_RESCAN_S``, default 30).
        workers: worker processes loading traces (0: a thread of this process; flag
            ``--kineto_insights_workers``, ``KINETO_INSIGHTS_WORKERS``, default one per
            core, at most 4).
        cache_dir: the disk-cache folder (flag ``--kineto_insights_cache_dir``,
            ``KINETO_INSIGHTS_CACHE_DIR``); ``"none"`` (or a cache that cannot be used)
            keeps summaries in memory only.
        preload: load every discovered span in the background (requested ones first;
            ``KINETO_INSIGHTS_PRELOAD=0`` turns it off).
        summarize: the analysis function (default
            :func:`summary.summarize_file_with_timeline`; tests count its calls); a
            module-level function when ``workers > 0``.
        max_json_bytes: the reader's cap on uncompressed bytes per file.
        first_scan_wait_s: how long the first ``is_active`` / ``/runs`` waits for the
            first scan.
        run_summary: overrides :data:`RUN_SUMMARY_HOOK`.
        diff: overrides :data:`DIFF_HOOK`.
        load_timeout_s, load_timeout_s_per_mib: a load's deadline in a worker process,
            ``load_timeout_s + load_timeout_s_per_mib × file MiB`` seconds (see
            :class:`tb_kineto_insights.service.worker_pool.LoadDeadline`); flags
            ``--kineto_insights_load_timeout_s`` / ``--kineto_insights_load_timeout_s_per_mib``,
            environment ``KINETO_INSIGHTS_LOAD_TIMEOUT_S`` / ``..._PER_MIB``, default
            120 s + 2 s per MiB.
        watch: watch local log directories for filesystem events (``watch.py``);
            default: ``KINETO_INSIGHTS_WATCH``, else on. Without ``watchdog``, rescans.
        retry_backoff_s: seconds before a file whose load failed that way is read
            again (``service/loader.py``); flag ``--kineto_insights_retry_backoff_s``,
            environment ``KINETO_INSIGHTS_RETRY_BACKOFF_S``, default 30.
        load_max_rss_mib: a load's memory cap
            (:class:`~tb_kineto_insights.service.worker_pool.LoadMemoryCap`); flag
            ``--kineto_insights_load_max_rss_mib``, environment
            ``KINETO_INSIGHTS_LOAD_MAX_RSS_MIB``, default half the machine's memory.
    """

    plugin_name = PLUGIN_NAME

    def __init__(
        self,
        context: Any,
        *,
        rescan_s: float | None = None,
        workers: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        preload: bool | None = None,
        summarize: Callable[..., Any] | None = None,
        max_json_bytes: int | None = None,
        first_scan_wait_s: float = 2.0,
        run_summary: run_views.RunViewHook | None = None,
        diff: diffs.DiffHook | None = None,
        load_timeout_s: float | None = None,
        load_timeout_s_per_mib: float | None = None,
        watch: bool | None = None,
        retry_backoff_s: float | None = None,
        load_max_rss_mib: float | None = None,
    ) -> None:
        self.settings = PluginSettings.of(
            context,
            rescan_s=rescan_s,
            workers=workers,
            cache_dir=cache_dir,
            preload=preload,
            load_timeout_s=load_timeout_s,
            load_timeout_s_per_mib=load_timeout_s_per_mib,
            retry_backoff_s=retry_backoff_s,
            load_max_rss_mib=load_max_rss_mib,
        )
        self._run_summary_override = run_summary
        self._diff_override = diff
        self.perfetto_url = self.settings.perfetto_url
        loader_args: dict[str, Any] = {"summarize": summarize} if summarize else {}
        if max_json_bytes is not None:
            loader_args["max_json_bytes"] = max_json_bytes
        fingerprint = analysis_settings(*([] if max_json_bytes is None else [max_json_bytes]))
        self._loader = SummaryLoader(
            cache=open_cache(self.settings.cache_folder, fingerprint),
            workers=self.settings.workers,
            deadline=self.settings.deadline,
            retry_backoff_s=self.settings.retry_backoff_s,
            memory_cap=self.settings.memory_cap,
            **loader_args,
        )
        self.scanner = Scanner(
            self.settings.sources,
            self.settings.rescan_s,
            first_scan_wait_s,
            self._discovered,
            self.settings.watch if watch is None else watch,
            self.settings.follow_symlinks,
        )
        self.workspace = Workspace(
            self._loader,
            [src.path for src in self.settings.sources],
            fingerprint,
            self.scanner.current,
            self.scanner.request_scan,
        )
        self.headlines = LoadedHeadlines(self.workspace, index_root(self.settings.sources))

    def _discovered(self, snapshot: Snapshot) -> None:
        """A new scan: the loader learns of its spans (and preloads them)."""
        self._loader.note_discovered(
            (listed_identity(span) for span in snapshot.index.values()),
            preload=self.settings.preload,
        )
        headlines = getattr(self, "headlines", None)  # (a first scan may end before)
        if self.settings.preload and snapshot.runs and headlines is not None:
            headlines.warm(snapshot)  # the tab opens on the runs ranked: made ahead

    @property
    def loader(self) -> SummaryLoader:
        return self._loader

    def rescan(self, timeout: float = 60.0) -> bool:
        """Scan now and wait (at most ``timeout`` s) until it is done; True when done."""
        return self.scanner.rescan(timeout)

    def close(self) -> None:
        """Stop the scanner and the loader (TensorBoard never calls this; tests do)."""
        self.scanner.close()
        self._loader.close()

    # ------------------------------------------------------------------ TBPlugin

    def get_plugin_apps(self) -> dict[str, Callable[..., Any]]:
        apps = {
            "/runs": self._route(self._serve_runs),
            "/summary": self._route(self._serve_summary),
            "/health": self._route(self._serve_health),
            "/run_summary": self._route(self._serve_run_summary),
            "/diff": self._route(self._serve_diff),
            "/timeline": self._route(self._serve_timeline),
            "/window": self._route(self._serve_window),
            "/window_ranks": self._route(self._serve_window_ranks),
            "/history": self._route(self._serve_history),
            "/across_runs": self._route(self._serve_across_runs),
        }
        for route, (filename, content_type) in _STATIC_FILES.items():
            apps[route] = Request.application(
                functools.partial(self._serve_static, filename, content_type)
            )
        return apps

    def is_active(self) -> bool:
        """Whether the tab is shown: at once when a local log directory exists (an empty
        one too: the page names the folder it watches and lists traces as they arrive;
        TensorBoard would otherwise keep the tab under INACTIVE after they do), else when
        the last scan found a trace (object storage, a folder not there yet)."""
        if any(not is_url(s.path) and os.path.isdir(s.path) for s in self.settings.sources):
            return True
        return bool(self.scanner.current().runs)

    def frontend_metadata(self) -> Any:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Kineto Insights")

    # ------------------------------------------------------------------ helpers

    def _route(self, handler: Callable[[Request], Any]) -> Callable[..., Any]:
        @Request.application
        def app(request: Request) -> Any:
            try:
                return handler(request)
            except _ApiError as exc:
                return _error(request, exc.code, exc.message)
            except ServiceError as exc:
                return _error(request, _SERVICE_CODES.get(type(exc), 500), exc.message)
            except Exception as exc:  # a bug here: a JSON 500, and the server goes on
                logger.exception("Kineto Insights: %s failed", request.path)
                return _error(request, 500, f"internal error ({type(exc).__name__}: {exc})")

        return app

    def _span(self, request: Request) -> Any:
        return self.workspace.span(
            _required(request, "run"), _required(request, "worker"), _required(request, "span")
        )

    def _label(self, request: Request, prefix: str) -> str:
        run = request.args.get(f"{prefix}run")
        parts = [self.workspace.run_label(run) if run else None]
        parts += [request.args.get(f"{prefix}{k}") for k in ("worker", "span")]
        return "/".join(p for p in parts if p)

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
            return _error(request, 404, f"static file {filename} is missing")
        return http_util.Respond(request, data, content_type)

    def _serve_runs(self, request: Request) -> Any:
        extra = {
            "perfetto_url": self.perfetto_url,
            # what the page names when it finds nothing, and how it learns of new files
            "logdirs": [s.path for s in self.settings.sources],
            "watched": bool(self.scanner.watch_folders),
        }
        return _respond(request, self.workspace.runs_document(extra))

    def _summary_response(self, request: Request, panel: str | None) -> Any:
        span = self._span(request)
        answer = summary_answer(self.workspace, span, panel, _wait(request))
        if isinstance(answer, SpanStatus):
            return _not_ready(request, answer)
        return _respond(request, answer)

    def _serve_summary(self, request: Request) -> Any:
        return self._summary_response(request, _param(request, "panel", required=False))

    def _serve_health(self, request: Request) -> Any:
        return self._summary_response(request, "health")

    def _serve_timeline(self, request: Request) -> Any:
        """One step's timeline, loaded as ``/summary`` (same ``wait`` and error
        answers), then the step's stored document."""
        span = self._span(request)
        doc = windows.step_timeline(self.workspace, span, _step(request), _wait(request))
        if isinstance(doc, windows.NotReady):
            return _not_ready(request, doc.status)
        return _respond(request, encode_json(doc))

    def _serve_window(self, request: Request) -> Any:
        """A step's window cut from the trace file for Perfetto UI, in a worker process
        under a load's deadline and memory cap (``service/windows.py``)."""
        span = self._span(request)
        step = _step(request)
        start_us, end_us = _number(request, "start_us"), _number(request, "end_us")
        cut = windows.span_window(self.workspace, span, step, start_us, end_us, _wait(request))
        if isinstance(cut, windows.NotReady):
            return _not_ready(request, cut.status)
        headers = [
            ("X-Window-Start-Ns", str(cut.start_ns)),
            ("X-Window-End-Ns", str(cut.end_ns)),
            ("X-Window-Moved-Events", str(cut.moved)),
        ]
        if request.args.get("download"):
            headers.append(_attachment(f"{span.worker}.{span.span}.step{step}.window.json"))
        return http_util.Respond(request, cut.body, _JSON, headers=headers)

    def _serve_window_ranks(self, request: Request) -> Any:
        """ "Open ranks": the step's window of every worker (rank) of the run, merged."""
        run_name = self.workspace.run(_required(request, "run")).name
        step = _step(request)
        start_us, end_us = _number(request, "start_us"), _number(request, "end_us")
        found = windows.ranks_window(
            self.workspace, run_name, step, start_us, end_us, _wait(request)
        )
        if isinstance(found, windows.NotReady):
            return _not_ready(request, found.status)
        headers = [("X-Window-Ranks", ",".join(_header_text(n) for n in found.window.ranks))]
        if found.missing:
            headers.append(
                ("X-Window-Ranks-Missing", ",".join(_header_text(n) for n in found.missing))
            )
        if request.args.get("download"):
            headers.append(_attachment(f"{run_name}.step{step}.ranks.json"))
        return http_util.Respond(request, found.window.body, _JSON, headers=headers)

    def _serve_run_summary(self, request: Request) -> Any:
        run = self.workspace.run(_required(request, "run")).name
        raw_index = _param(request, "span_index", required=False)
        try:
            span_index = -1 if raw_index is None else parse_span_index(raw_index)
        except ValueError:
            raise _ApiError(400, "span_index must be a whole number") from None
        wait_s = _wait(request)
        hook = self._run_summary_override or RUN_SUMMARY_HOOK
        if hook is None:
            raise _ApiError(501, "the run summary is not available yet")
        answer = run_views.run_view_answer(self.workspace, run, span_index, wait_s, hook)
        if answer.pending is not None:
            return _respond(request, encode_json(answer.pending), 202)
        return _respond(request, answer.body or b"")

    def _serve_diff(self, request: Request) -> Any:
        sides = []
        for prefix in ("base_", "exp_"):
            run = _required(request, f"{prefix}run")
            worker = _param(request, f"{prefix}worker", required=False)
            span_id = _param(request, f"{prefix}span", required=False)
            if worker is None and span_id is not None:
                self.workspace.run(run)  # an unknown run is a 404 first
                raise _ApiError(400, f"{prefix}span needs {prefix}worker")
            sides.append(self.workspace.side_spans(run, worker, span_id))
        wait_s = _wait(request)
        hook = self._diff_override or DIFF_HOOK
        if hook is None:
            raise _ApiError(501, "the diff is not available yet")
        labels = (self._label(request, "base_"), self._label(request, "exp_"))
        answer = diffs.diff_answer(self.workspace, sides[0], sides[1], labels, wait_s, hook)
        if answer.pending is not None:
            return _respond(request, encode_json(answer.pending), 202)
        return _respond(request, answer.body or b"")

    def _serve_history(self, request: Request) -> Any:
        """``/history``: the ``tb_kineto_insights.history/1`` document of the log
        directories (``service/headlines.py``); optional ``group_by`` and ``metric``
        (comma-separated) as the CLI's."""
        group_by = _param(request, "group_by", required=False) or None
        raw_metrics = _param(request, "metric", required=False) or ""
        metrics = [m.strip() for m in raw_metrics.split(",") if m.strip()]
        return _respond(request, self.headlines.history(group_by, metrics))

    def _serve_across_runs(self, request: Request) -> Any:
        """``/across_runs``: one page of every run ranked worst first
        (``service/headlines.py``); ``q`` and ``severity`` filter, ``sort`` (and
        ``reverse=1``) order, ``offset`` and ``limit`` page."""
        query = _param(request, "q", required=False) or ""
        offset = _count(request, "offset", 0, "0 or more")
        limit = _count(request, "limit", ACROSS_RUNS_LIMIT, f"from 1 to {ACROSS_RUNS_MAX_LIMIT}")
        if not 1 <= limit <= ACROSS_RUNS_MAX_LIMIT:
            raise _ApiError(400, f"limit must be from 1 to {ACROSS_RUNS_MAX_LIMIT}")
        reverse = _param(request, "reverse", required=False) or "0"
        if reverse not in ("0", "1"):
            raise _ApiError(400, "reverse must be 0 or 1")
        body = self.headlines.across_runs(
            query,
            offset,
            limit,
            sort=_param(request, "sort", required=False) or "worst",
            reverse=reverse == "1",
            severity=_param(request, "severity", required=False) or "",
        )
        return _respond(request, body)
