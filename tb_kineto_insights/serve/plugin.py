"""The TensorBoard plugin: HTTP routes over discovery and the summary loader, nothing more.

Every route is listed, with its parameters, answers and errors, in ``docs/api.md`` (a
test checks that the routes served here are exactly the documented ones). In short,
under ``/data/plugin/kineto_insights``: ``/runs``, ``/summary``, ``/health``,
``/run_summary``, ``/diff``, ``/timeline`` (one step's timeline, stored beside the
summary), ``/history``, and the frontend files ``/index.js``, ``/echarts.js`` and
``/style.css``.

How it stays fast and safe:

- Discovery runs in a background thread: once at start, then every ``rescan_s``
  seconds (flag ``--kineto_insights_rescan_s``, environment ``KINETO_INSIGHTS_RESCAN_S``,
  default 30). ``is_active`` and ``/runs`` answer from the last scan (only the very
  first call waits, at most ``first_scan_wait_s``, for the first scan). A local log
  directory is also watched for filesystem events (``watch.py``, ``watchdog``): a new
  or finished trace starts a scan within about a second (``KINETO_INSIGHTS_WATCH=0``
  turns this off; object storage has no events and keeps the interval).
- Summaries are loaded by :class:`tb_kineto_insights.serve.loader.SummaryLoader`: at most
  ``workers`` worker processes (flag ``--kineto_insights_workers``, environment
  ``KINETO_INSIGHTS_WORKERS``, default one per core, at most 4; 0 loads in a thread of this
  process),
  results cached on disk (flag ``--kineto_insights_cache_dir``, environment
  ``KINETO_INSIGHTS_CACHE_DIR``, ``none`` for memory only). New files are preloaded
  in the background, largest first, unless ``KINETO_INSIGHTS_PRELOAD=0``; a span the
  page asks for goes first. A span route answers 202 with the load state until the
  summary is there (or waits up to ``wait`` seconds for it).
- Run, worker and span from a URL are only keys into the index of what discovery found;
  they never become part of a path. The static route serves a fixed list of files.
- Nothing outside the log directories is read: a local trace is checked when it is
  opened (``trace/confine.py``: the real path of the opened descriptor must lie in the
  log directory's real path, and it must be a regular file), so a symlink swapped after
  discovery (the file's, a run folder's, any link of a chain) is refused with a 422.
  A ``file://`` log directory is served as the local path it names.
- No stale answer: before answering for a local span, its file is ``stat``-ed (through
  links); when it is not the file discovery saw (rewritten, replaced, copied back),
  the file as it is now is loaded, and a re-scan is started. Errors about a file's
  content are remembered until the file changes; I/O errors, dead workers, loads past
  their deadline and bugs are retried when the span is asked for again.
- JSON comes from :func:`tb_kineto_insights.store.cache.encode_json` (NaN and infinities are
  written as ``null``) and goes out through TensorBoard's ``http_util.Respond``. Input
  problems are 4xx JSON answers; only a bug in this package gives a 500 (JSON too).

Hooks (swap them by assigning the module attribute, or pass them to the constructor):

- :data:`RUN_SUMMARY_HOOK` ``(side) -> RunView``: the run-level view across workers for
  ``/run_summary``; ``side`` is a list of ``(worker name, summary)``, one span per
  worker (per rank when a worker holds several ranks), chosen by
  :func:`tb_kineto_insights.summary.select_run_spans`. The default is
  :func:`tb_kineto_insights.summary.summarize_run` (matching, skew, wait and transfer,
  straggler and the run-level diagnoses); it is given only the panels it reads
  (:data:`RUN_VIEW_PANELS`, as an object with those attributes), any other hook
  whole :class:`~tb_kineto_insights.schema.Summary` Structs. A hook may return a Struct
  or built-ins; the answer is its JSON (msgspec).
- :data:`DIFF_HOOK` ``(base_side, exp_side, *, base_label, exp_label) -> DiffDocument``:
  the diff for ``/diff``; sides are lists of ``("worker/span", Summary)``. Default:
  :func:`tb_kineto_insights.compare.diff.diff`, imported when first used; when it cannot
  be imported (or the hook is set to None), ``/diff`` answers 501.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import math
import os
import re
import threading
import time
import urllib.parse
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug.wrappers import Request

from tb_kineto_insights import summary as summary_module
from tb_kineto_insights.analysis.run_view import RunViewSpan
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.analysis.timeline import decode_store, find_step, load_step
from tb_kineto_insights.compare.diff import diff
from tb_kineto_insights.logdir.discovery import (
    LogdirError,
    Run,
    Span,
    Worker,
    describe_skipped,
    discover,
    folder_name,
    parse_span_index,
)
from tb_kineto_insights.logdir.watch import folder_identity, start_watcher, watch_from_env
from tb_kineto_insights.schema import DiffDocument, RunView
from tb_kineto_insights.schema.communication import CommunicationPanel
from tb_kineto_insights.schema.health import HealthPanel
from tb_kineto_insights.schema.history import HeadlineDiagnosis, SpanHeadline
from tb_kineto_insights.schema.idle import IdlePanel
from tb_kineto_insights.schema.steps import StepsPanel
from tb_kineto_insights.schema.tables import TablesPanel
from tb_kineto_insights.schema.timeline import TimelineStep
from tb_kineto_insights.serve.loader import ERROR, READY, SpanStatus, SummaryLoader
from tb_kineto_insights.serve.worker_pool import (
    ERROR_INTERNAL,
    ERROR_IO,
    ERROR_MEMORY,
    ERROR_TIMEOUT,
    ERROR_TRACE,
    ERROR_WORKER,
    LoadDeadline,
    LoadMemoryCap,
    load_deadline_from_env,
    load_memory_cap_from_env,
    workers_from_env,
)
from tb_kineto_insights.store.cache import (
    CACHE_DIR_ENV,
    DiskCache,
    Identity,
    LoadResult,
    cache_dir_from_env,
    encode_json,
    headline_of,
    json_safe,
    settings_fingerprint,
)
from tb_kineto_insights.store.cached_summaries import identity_of
from tb_kineto_insights.store.headline_index import HeadlineIndex, run_files
from tb_kineto_insights.store.settings import seconds_from_env
from tb_kineto_insights.summary import summarize_file_with_timeline, summarize_run
from tb_kineto_insights.trace.confine import Rule, confined
from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES
from tb_kineto_insights.trace.window import (
    WindowCut,
    check_window_holds_events,
    cut_window,
    parse_offset_us,
    window_bounds,
)
from tb_kineto_insights.trace.window_merge import merge_windows

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
#: Environment variable: seconds between re-scans of the log directory.
RESCAN_ENV = "KINETO_INSIGHTS_RESCAN_S"
#: Environment variable: ``0`` / ``false`` / ``no`` turns background preloading off.
PRELOAD_ENV = "KINETO_INSIGHTS_PRELOAD"
DEFAULT_RESCAN_S = 30.0
#: The background scanner never re-scans more often than this (seconds).
MIN_RESCAN_S = 0.25
#: Seconds a request waits at a time for another computing the same run view or diff
#: (then it looks again: done, or its turn to compute).
DERIVED_WAIT_S = 1.0


def _number(raw: str | None, name: str) -> float | None:
    """A query parameter as a finite float (ASCII decimal, optional sign); None when
    absent. Raises _ApiError 400 otherwise."""
    if raw is None:
        return None
    try:
        return parse_offset_us(raw, name)
    except ValueError as exc:
        raise _ApiError(400, str(exc)) from exc


def perfetto_url_from(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Perfetto UI's address: the flag ``--kineto_insights_perfetto_url``, else
    ``KINETO_INSIGHTS_PERFETTO_URL``, else :data:`DEFAULT_PERFETTO_URL` (a self-hosted
    or offline copy of the UI for machines without the internet)."""
    env = os.environ if environ is None else environ
    value = (flag or env.get(PERFETTO_URL_ENV) or "").strip()
    return value or DEFAULT_PERFETTO_URL


#: Perfetto UI, where "Open in Perfetto" sends a step's window.
DEFAULT_PERFETTO_URL = "https://ui.perfetto.dev"
#: Environment variable: Perfetto UI's address (the flag wins).
PERFETTO_URL_ENV = "KINETO_INSIGHTS_PERFETTO_URL"
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
# TensorBoard's own rule for `--logdir_spec` entries (name:path, URL, or bare path).
_URI = re.compile(r"[a-zA-Z][0-9a-zA-Z.]*://.*")
_FALSE = frozenset({"0", "false", "no", "off"})

Side = list[tuple[str, RunViewSpan]]
RunSummaryHook = Callable[[Side], Any]
DiffHook = Callable[..., Any]


# --------------------------------------------------------------------------- hooks


#: ``/run_summary``'s function; see the module docstring.
RUN_SUMMARY_HOOK: RunSummaryHook | None = summarize_run
#: ``/diff``'s function; see the module docstring. None → 501.
DIFF_HOOK: DiffHook | None = diff


# --------------------------------------------------------------------------- settings


def rescan_interval_from_env(environ: Mapping[str, str] | None = None) -> float:
    """Seconds between re-scans from ``KINETO_INSIGHTS_RESCAN_S``; the default (30)
    when unset, and with a warning when not a finite number ≥ 0."""
    env = os.environ if environ is None else environ
    return seconds_from_env(env, RESCAN_ENV, DEFAULT_RESCAN_S)


def preload_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """False when ``KINETO_INSIGHTS_PRELOAD`` is ``0``, ``false``, ``no`` or ``off``."""
    raw = (os.environ if environ is None else environ).get(PRELOAD_ENV, "")
    return raw.strip().lower() not in _FALSE


@dataclass(frozen=True)
class LogdirSource:
    """One log directory; its runs are named ``name/run`` (just ``name`` for files at its
    top) when ``name`` is set, as TensorBoard names runs of ``--logdir_spec`` groups."""

    name: str | None
    path: str


def _normalise_path(path: str) -> str:
    """A local log directory as its real path (a ``file://`` URL too, so that its files
    are opened as local files, under the containment check); other URLs as given."""
    if path.startswith("file://") and "::" not in path:
        path = urllib.parse.unquote(urllib.parse.urlsplit(path).path) or "/"
    if _URI.match(path) is None:
        return os.path.realpath(os.path.expanduser(path))
    return path


def logdir_sources(context: Any) -> list[LogdirSource]:
    """The log directories to serve: ``--logdir``, else each ``--logdir_spec`` entry
    (``name:path``, a bare path, or a URL; TensorBoard's own parsing rule)."""
    logdir = getattr(context, "logdir", None)
    if logdir:
        return [LogdirSource(None, _normalise_path(str(logdir)))]
    spec = str(getattr(getattr(context, "flags", None), "logdir_spec", "") or "")
    out: list[LogdirSource] = []
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name: str | None = None
        path = entry
        if (
            _URI.match(entry) is None
            and ":" in entry
            and not entry.startswith("/")
            and not os.path.splitdrive(entry)[0]
        ):
            name, _, path = entry.partition(":")
        out.append(LogdirSource(name or None, _normalise_path(path)))
    return out


def _flag(context: Any, name: str) -> Any:
    return getattr(getattr(context, "flags", None), name, None)


# --------------------------------------------------------------------------- errors


class _ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _header_text(text: str) -> str:
    """A name in an HTTP header: percent-encoded outside printable ASCII (and ``,``)."""
    return urllib.parse.quote(text, safe=" !#$%&'()*+-./:;<=>?@[]^_`{|}~")


def _respond(request: Request, body: bytes, code: int = 200) -> Any:
    return http_util.Respond(request, body, _JSON, code=code)


def _error(request: Request, code: int, message: str, **extra: Any) -> Any:
    return _respond(request, encode_json({"error": message, **extra}), code)


_ERROR_CODES = {
    ERROR_TRACE: 422,
    ERROR_IO: 422,
    ERROR_WORKER: 503,
    ERROR_TIMEOUT: 503,
    ERROR_MEMORY: 503,
    ERROR_INTERNAL: 500,
}


def _identity(span: Span) -> Identity:
    """The identity discovery saw and the log directory it must lie in when opened."""
    return identity_of(span, root=span.root)


def _identity_now(span: Span) -> Identity | None:
    """For a local file, its identity as ``os.stat`` (following links) sees it now, when
    that differs from what discovery saw (rewritten, replaced, copied back); None when
    it is unchanged, not local, or cannot be asked about (the load then reports why)."""
    if not span.root or not span.inode:
        return None
    try:
        st = os.stat(span.path)
    except OSError:
        return None
    now = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if now == (span.device, span.inode, span.size_bytes, span.mtime_ns):
        return None
    return Identity(
        span.path,
        st.st_size,
        st.st_mtime,
        device=st.st_dev,
        inode=st.st_ino,
        mtime_ns=st.st_mtime_ns,
        root=span.root,
    )


@dataclass(frozen=True)
class _Snapshot:
    """One scan's result; replaced whole, never changed."""

    runs: tuple[Run, ...]
    index: Mapping[tuple[str, str, str], Span]
    by_run: Mapping[str, Run]
    error: str | None
    scanned: bool


_EMPTY = _Snapshot((), {}, {}, None, False)

#: ``/history``'s and ``/across_runs``' reason for a run whose traces are being read.
LOADING = "loading"


@dataclass(frozen=True)
class _RunHeadlines:
    """The headline records of one snapshot's runs (``KinetoInsightsPlugin._run_headlines``):
    ``runs`` with at least one readable worker, ``skipped`` (run → ``"loading"`` or the
    error), ``complete`` when none is loading."""

    snapshot: _Snapshot
    runs: list[Any]  # compare.history.RunHeadlines, imported when first used
    skipped: dict[str, str]
    complete: bool


#: The panels the view across ranks reads (:mod:`.analysis.run_view`; ``idle`` and
#: ``tables`` for why a straggler is late, :mod:`.analysis.straggler_cause`): at
#: thousands of ranks ``/run_summary`` decodes these only.
RUN_VIEW_PANELS = ("health", "steps", "communication", "idle", "tables")


@dataclass(frozen=True)
class _RunViewPanels:
    """The :data:`RUN_VIEW_PANELS` of one span, each decoded into its Struct: what the
    view across ranks reads of a summary (:class:`~.analysis.run_view_spans.RunViewSpan`;
    ``idle`` and ``tables`` may be None)."""

    health: HealthPanel
    steps: StepsPanel
    communication: CommunicationPanel
    idle: IdlePanel | None
    tables: TablesPanel | None


def _run_view_input(result: LoadResult, whole: bool) -> RunViewSpan:
    """One span's summary for the run-summary hook: its :data:`RUN_VIEW_PANELS` only,
    unless ``whole`` or one of them is missing (then the whole
    :class:`~tb_kineto_insights.schema.Summary`)."""
    if not whole:
        health, steps, comm, idle, tables = (result.panel(name) for name in RUN_VIEW_PANELS)
        if health is not None and steps is not None and comm is not None:
            return _RunViewPanels(
                health=health, steps=steps, communication=comm, idle=idle, tables=tables
            )
    return result.decoded()


@dataclass(frozen=True)
class _RunsLayout:
    """What ``/runs`` lists of one snapshot, in order: every span's identity, and per
    run, per worker, each span's ``{span, size_bytes, mtime}`` (never changed)."""

    snapshot: _Snapshot
    identities: list[Identity]
    runs: list[tuple[str, list[tuple[str, list[dict[str, Any]]]]]]


# --------------------------------------------------------------------------- plugin


class KinetoInsightsPlugin(base_plugin.TBPlugin):
    """Serves discovery, per-span and per-run summaries, health and diffs of the Kineto
    traces in the log directories.

    Args (each defaults to its TensorBoard flag, then environment variable, then default):
        context: TensorBoard's ``TBContext``.
        rescan_s: seconds between re-scans of the log directories.
        workers: worker processes loading traces (0: a thread of this process).
        cache_dir: the disk-cache folder; ``"none"`` (or a cache that cannot be used)
            keeps summaries in memory only.
        preload: load every discovered span in the background (requested ones first).
        summarize: the analysis function (default
            :func:`summary.summarize_file_with_timeline`; tests
            count its calls); a module-level function when ``workers > 0``.
        max_json_bytes: the reader's cap on uncompressed bytes per file.
        first_scan_wait_s: how long the first ``is_active`` / ``/runs`` waits for the
            first scan.
        run_summary: overrides :data:`RUN_SUMMARY_HOOK`.
        diff: overrides :data:`DIFF_HOOK`.
        load_timeout_s, load_timeout_s_per_mib: a load's deadline in a worker process,
            ``load_timeout_s + load_timeout_s_per_mib × file MiB`` seconds (see
            :class:`tb_kineto_insights.serve.worker_pool.LoadDeadline`); flags
            ``--kineto_insights_load_timeout_s`` / ``--kineto_insights_load_timeout_s_per_mib``,
            environment ``KINETO_INSIGHTS_LOAD_TIMEOUT_S`` / ``..._PER_MIB``, default
            120 s + 2 s per MiB.
        watch: watch local log directories for filesystem events (``watch.py``);
            default: ``KINETO_INSIGHTS_WATCH``, else on. Without ``watchdog``, rescans.
        retry_backoff_s: seconds before a file whose load failed that way is read
            again (``serve/loader.py``); flag ``--kineto_insights_retry_backoff_s``,
            environment ``KINETO_INSIGHTS_RETRY_BACKOFF_S``, default 30.
        load_max_rss_mib: a load's memory cap
            (:class:`~tb_kineto_insights.serve.worker_pool.LoadMemoryCap`); flag
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
        max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
        first_scan_wait_s: float = 2.0,
        run_summary: RunSummaryHook | None = None,
        diff: DiffHook | None = None,
        load_timeout_s: float | None = None,
        load_timeout_s_per_mib: float | None = None,
        watch: bool | None = None,
        retry_backoff_s: float | None = None,
        load_max_rss_mib: float | None = None,
    ) -> None:
        self._sources = logdir_sources(context)
        if rescan_s is None:
            rescan_s = _flag(context, "kineto_insights_rescan_s")
        self._rescan_s = rescan_interval_from_env() if rescan_s is None else float(rescan_s)
        if workers is None:
            workers = _flag(context, "kineto_insights_workers")
        workers = workers_from_env() if workers is None else int(workers)
        self._preload = preload_from_env() if preload is None else bool(preload)
        self._first_scan_wait_s = first_scan_wait_s
        self._run_summary_override = run_summary
        self._diff_override = diff
        self.perfetto_url = perfetto_url_from(_flag(context, "kineto_insights_perfetto_url"))

        settings = settings_fingerprint(max_json_bytes, DEFAULT_THRESHOLDS)
        cache = self._cache(self._cache_folder(context, cache_dir), settings)
        self._loader = SummaryLoader(
            cache=cache,
            workers=workers,
            summarize=summarize or summarize_file_with_timeline,
            max_json_bytes=max_json_bytes,
            deadline=self._deadline(context, load_timeout_s, load_timeout_s_per_mib),
            retry_backoff_s=(
                _flag(context, "kineto_insights_retry_backoff_s")
                if retry_backoff_s is None
                else retry_backoff_s
            ),
            memory_cap=self._memory_cap(context, load_max_rss_mib),
        )
        self._snapshot = _EMPTY
        # source path → (its last listing that succeeded, when: "HH:MM:SS")
        self._last_good: dict[str, tuple[list[Run], str]] = {}
        self._scan_cv = threading.Condition()
        self._scans_started = 0
        self._scans_done = 0
        self._scan_requested = False
        self._stopped = False
        self._first_scan = threading.Event()
        self._gave_up_waiting = False
        self._derived_lock = threading.Lock()
        self._derived: OrderedDict[Any, bytes] = OrderedDict()
        self._derived_running: dict[Any, threading.Event] = {}  # key → done
        self._layout: _RunsLayout | None = None
        #: ``/runs``' last answer: (layout, scanning, span statuses, body)
        self._runs_body: tuple[_RunsLayout, bool, list[SpanStatus], bytes] | None = None
        self._settings = settings
        #: ``/history`` and ``/across_runs``: the log directories' headline index (read
        #: once), the last complete pass over a scan's runs, and the lock of both
        self._index: HeadlineIndex | None = None
        self._run_headlines_memo: _RunHeadlines | None = None
        self._history_lock = threading.Lock()
        #: ``/across_runs``' ranking of the last complete pass: (scan, rows)
        self._ranked: tuple[_Snapshot, list[Any]] | None = None
        #: ``/history``'s last complete answer: (scan, (group_by, metrics), body)
        self._history_body: tuple[_Snapshot, tuple[str | None, tuple[str, ...]], bytes] | None
        self._history_body = None
        self._watcher = None
        #: local log directories to watch (none when events are off)
        self._watch_folders: list[str] = []
        if watch_from_env() if watch is None else watch:
            local = [src.path for src in self._sources if _URI.match(src.path) is None]
            self._watch_folders = local
            self._watcher = start_watcher(local, self._request_scan)
        # after the watcher: the scanner may restart it (_rearm_watcher)
        self._scanner = threading.Thread(
            target=self._scan_loop, name="kineto-insights-scan", daemon=True
        )
        self._scanner.start()

    def _rearm_watcher(self) -> None:
        """After a scan: (re)start the watcher when a local log directory was created
        after it was set up (or after TensorBoard started), or deleted and created
        again (its inotify watch died with the old folder). Until then that folder's
        new traces waited for the rescan interval, for the rest of the session."""
        wanted = self._watch_folders
        if not wanted or self._stopped:
            return
        now = {f: folder_identity(f) for f in wanted}
        before = self._watcher.identities if self._watcher is not None else {}
        lost = self._watcher is not None and self._watcher.lost
        if not any(now.values()):
            return  # nothing to watch now; re-armed when a folder is back
        if not lost and all(now[f] == before.get(f) or now[f] is None for f in wanted):
            return  # every folder there is watched, by its watch of this very folder
        if self._watcher is not None:
            self._watcher.close()
        self._watcher = start_watcher(wanted, self._request_scan)
        if self._watcher is not None:
            logger.info("Kineto Insights: watching %s for new traces again", wanted)
            self._request_scan()  # what was written before the new watch started

    def _request_scan(self) -> None:
        """Start a scan soon (a filesystem event, a changed file), without waiting."""
        with self._scan_cv:
            self._scan_requested = True
            self._scan_cv.notify_all()

    @staticmethod
    def _deadline(context: Any, base_s: float | None, per_mib_s: float | None) -> LoadDeadline:
        """Each part: the argument, else its flag, else its environment variable."""
        env = load_deadline_from_env()
        if base_s is None:
            base_s = _flag(context, "kineto_insights_load_timeout_s")
        if per_mib_s is None:
            per_mib_s = _flag(context, "kineto_insights_load_timeout_s_per_mib")
        return LoadDeadline(
            env.base_s if base_s is None else float(base_s),
            env.per_mib_s if per_mib_s is None else float(per_mib_s),
        )

    @staticmethod
    def _memory_cap(context: Any, max_rss_mib: float | None) -> LoadMemoryCap:
        """The argument, else the flag, else the environment (or the default)."""
        if max_rss_mib is None:
            max_rss_mib = _flag(context, "kineto_insights_load_max_rss_mib")
        if max_rss_mib is None:
            return load_memory_cap_from_env()
        return LoadMemoryCap(float(max_rss_mib))

    @staticmethod
    def _cache(folder: Path | str | None, settings: str) -> DiskCache | None:
        if folder is None:
            return None
        try:
            return DiskCache(folder, settings)
        except (ValueError, ImportError) as exc:
            logger.warning(
                "Kineto Insights: cache folder %s cannot be used (%s); summaries are kept "
                "in memory only",
                folder,
                exc,
            )
            return None

    @staticmethod
    def _cache_folder(context: Any, cache_dir: Any) -> Path | str | None:
        raw = cache_dir if cache_dir is not None else _flag(context, "kineto_insights_cache_dir")
        if raw is None or not str(raw).strip():
            raw = os.environ.get(CACHE_DIR_ENV)
        if raw is not None and str(raw).strip().lower() == "none":
            return None
        if raw and str(raw).strip().startswith("file://"):
            raw = str(raw).strip()[len("file://") :]
        elif raw and _URI.match(str(raw).strip()):
            return str(raw).strip()  # object storage (s3://bucket/cache): no folder to make
        folder = Path(str(raw)).expanduser() if raw and str(raw).strip() else cache_dir_from_env()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            logger.warning(
                "Kineto Insights: cache folder %s cannot be used (%s); summaries are kept "
                "in memory only",
                folder,
                exc,
            )
            return None
        return folder

    @property
    def loader(self) -> SummaryLoader:
        return self._loader

    def close(self) -> None:
        """Stop the scanner and the loader (TensorBoard never calls this; tests do)."""
        with self._scan_cv:
            self._stopped = True
            self._scan_cv.notify_all()
        self._scanner.join(timeout=10.0)  # first: the scanner may restart the watcher
        if self._watcher is not None:
            self._watcher.close()
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
        if any(_URI.match(s.path) is None and os.path.isdir(s.path) for s in self._sources):
            return True
        return bool(self._current().runs)

    def frontend_metadata(self) -> Any:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Kineto Insights")

    # ------------------------------------------------------------------ discovery

    def _current(self) -> _Snapshot:
        """The last scan; before the first scan finished, the first callers wait for it
        (at most ``first_scan_wait_s``), later ones get the empty snapshot at once."""
        if (
            not self._first_scan.is_set()
            and not self._gave_up_waiting
            and not self._first_scan.wait(self._first_scan_wait_s)
        ):
            self._gave_up_waiting = True
        return self._snapshot

    def rescan(self, timeout: float = 60.0) -> bool:
        """Scan now and wait (at most ``timeout`` s) until it is done; True when done."""
        with self._scan_cv:
            # A scan already running may have listed the folder before the caller's
            # change: wait for one that starts after this call.
            target = self._scans_started + 1
            self._scan_requested = True
            self._scan_cv.notify_all()
            self._scan_cv.wait_for(lambda: self._scans_done >= target or self._stopped, timeout)
            return self._scans_done >= target

    def _scan_loop(self) -> None:
        while True:
            with self._scan_cv:
                if self._stopped:
                    return
                self._scan_requested = False
                self._scans_started += 1
            try:
                snapshot = self._scan()
            except Exception as exc:  # never let the scanner die
                logger.exception("Kineto Insights: scanning failed")
                snapshot = dataclasses.replace(self._snapshot, error=f"scan failed: {exc}")
            try:  # states first, so that the new snapshot's spans show them at once
                self._loader.note_discovered(
                    (_identity(span) for span in snapshot.index.values()), preload=self._preload
                )
            except Exception:
                logger.exception("Kineto Insights: queueing discovered traces failed")
            self._snapshot = snapshot
            self._first_scan.set()
            try:
                self._rearm_watcher()
            except Exception:  # never let the scanner die
                logger.exception("Kineto Insights: restarting the log directory watch failed")
            with self._scan_cv:
                self._scans_done += 1
                self._scan_cv.notify_all()
                self._scan_cv.wait_for(
                    lambda: self._scan_requested or self._stopped,
                    max(MIN_RESCAN_S, self._rescan_s),
                )

    def _scan(self) -> _Snapshot:
        runs: list[Run] = []
        seen: dict[str, str] = {}
        errors: list[str] = []
        for source in self._sources:
            skipped: list[tuple[str, str]] = []
            try:
                found = discover(source.path, skipped=skipped)
            except Exception as exc:  # LogdirError, or a storage driver's own error
                message = str(exc) if isinstance(exc, LogdirError) else f"{source.path!r}: {exc}"
                kept = self._last_good.get(source.path)
                if kept is None:
                    errors.append(message)
                    continue
                # a listing that failed (503 SlowDown, EMFILE, a folder gone for a
                # moment) never empties the run list: the last good one stays, with why
                found, listed_at = kept
                errors.append(f"{message}; showing its listing of {listed_at}")
            else:
                self._last_good[source.path] = (found, time.strftime("%H:%M:%S"))
                if skipped:
                    errors.append(f"log directory {source.path!r}: {describe_skipped(skipped)}")
            for run in found:
                name = run.name
                if source.name is not None:
                    name = source.name if run.name == "." else f"{source.name}/{run.name}"
                if name in seen:
                    logger.warning(
                        "Kineto Insights: run %r of %s hides the run of the same name in %s",
                        name,
                        seen[name],
                        source.path,
                    )
                    continue
                seen[name] = source.path
                if name != run.name:
                    run = Run(
                        name=name,
                        workers=tuple(
                            Worker(
                                name=w.name,
                                spans=tuple(dataclasses.replace(s, run=name) for s in w.spans),
                            )
                            for w in run.workers
                        ),
                    )
                runs.append(run)
        error = "; ".join(errors) if errors else None
        if error is not None and error != self._snapshot.error:
            logger.warning("Kineto Insights: %s", error)
        index = {
            (run.name, worker.name, span.span): span
            for run in runs
            for worker in run.workers
            for span in worker.spans
        }
        return _Snapshot(tuple(runs), index, {r.name: r for r in runs}, error, True)

    # ------------------------------------------------------------------ helpers

    def _route(self, handler: Callable[[Request], Any]) -> Callable[..., Any]:
        @Request.application
        def app(request: Request) -> Any:
            try:
                return handler(request)
            except _ApiError as exc:
                return _error(request, exc.code, exc.message)
            except Exception as exc:  # a bug here: a JSON 500, and the server goes on
                logger.exception("Kineto Insights: %s failed", request.path)
                return _error(request, 500, f"internal error ({type(exc).__name__}: {exc})")

        return app

    @staticmethod
    def _param(request: Request, name: str, *, required: bool = True) -> str | None:
        value = request.args.get(name)
        if value is None or value == "":
            if required:
                raise _ApiError(400, f"missing query parameter: {name}")
            return None
        return value

    @classmethod
    def _required(cls, request: Request, name: str) -> str:
        value = cls._param(request, name)
        if value is None:  # _param raised already; this narrows the type
            raise _ApiError(400, f"missing query parameter: {name}")
        return value

    @staticmethod
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

    def _span(self, request: Request, prefix: str = "") -> Span:
        run = self._required(request, f"{prefix}run")
        worker = self._required(request, f"{prefix}worker")
        span_id = self._required(request, f"{prefix}span")
        span = self._current().index.get((run, worker, span_id))
        if span is None:
            raise _ApiError(404, f"no span {span_id!r} of worker {worker!r} in run {run!r}")
        return span

    def _run(self, request: Request, name: str) -> Run:
        run_name = self._required(request, name)
        run = self._current().by_run.get(run_name)
        if run is None:
            raise _ApiError(404, f"no run {run_name!r}")
        return run

    def _failed(self, request: Request, status: SpanStatus) -> Any:
        """The answer for a span that is not ready: 202 while queued or loading, the
        error (422 / 503 / 500) otherwise."""
        if status.state == ERROR:
            code = _ERROR_CODES.get(status.error_kind or ERROR_INTERNAL, 500)
            return _error(request, code, status.error or "unknown error", state=ERROR)
        return _respond(request, encode_json(status.to_json()), 202)

    def _request_identity(self, span: Span) -> Identity:
        """The identity to load for a request: discovery's, unless the local file has
        changed since the scan (rewritten, replaced, copied back), then the file as it
        is now, and a re-scan is started so that ``/runs`` catches up. A summary is
        never served for a file that is no longer the one it was made from."""
        now = _identity_now(span)
        if now is None:
            return _identity(span)
        with self._scan_cv:
            self._scan_requested = True
            self._scan_cv.notify_all()
        return now

    def _gather(
        self, spans: Sequence[Span], wait_s: float
    ) -> tuple[list[Identity], list[SpanStatus], list[LoadResult | None]]:
        """Load many spans: queue them all first, then wait for each within ``wait_s``.
        Returns the identities loaded, their statuses and results (None unless ready)."""
        idents = [self._request_identity(s) for s in spans]
        for ident in idents:
            self._loader.request(ident)
        deadline = time.monotonic() + wait_s
        statuses, results = [], []
        for ident in idents:
            status, result = self._loader.get(ident, max(0.0, deadline - time.monotonic()))
            statuses.append(status)
            results.append(result)
        return idents, statuses, results

    def _derived_put(self, key: Any, body: bytes) -> None:
        with self._derived_lock:
            self._derived[key] = body
            while len(self._derived) > 32:
                self._derived.popitem(last=False)

    def _derived_once(self, key: Any, compute: Callable[[], bytes]) -> bytes:
        """The derived document of ``key`` (a run view, a diff): from the cache of the
        last 32, else computed by ``compute`` once for all concurrent requests
        (single-flight): the others wait for it instead of computing it too (issue 32:
        4 concurrent /diff over 1,000 ranks each built the whole view, 5.4 GB). A
        computation that raises is not shared: the next waiter computes again."""
        while True:
            with self._derived_lock:
                body = self._derived.get(key)
                if body is not None:
                    self._derived.move_to_end(key)
                    return body
                running = self._derived_running.get(key)
                if running is None:
                    running = self._derived_running[key] = threading.Event()
                    break
            running.wait(DERIVED_WAIT_S)
        try:
            body = compute()
            self._derived_put(key, body)
            return body
        finally:
            with self._derived_lock:
                self._derived_running.pop(key, None)
            running.set()

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
        snapshot = self._current()
        layout = self._runs_layout(snapshot)
        statuses = self._loader.statuses(layout.identities)
        scanning = not snapshot.scanned
        with self._derived_lock:
            last = self._runs_body
        if last is not None and last[0] is layout and last[1] == scanning and last[2] == statuses:
            return _respond(request, last[3])  # nothing changed since the last answer
        # most spans share a plain state (not loaded, ready): one JSON object per state
        plain: dict[str, dict[str, Any]] = {}
        out = []
        at = 0
        for run_name, workers_of_run in layout.runs:
            workers = []
            for worker_name, static in workers_of_run:
                entries = []
                for fields in static:
                    status = statuses[at]
                    at += 1
                    if status.error is None and status.progress is None:
                        state = plain.get(status.state)
                        if state is None:
                            state = plain[status.state] = status.to_json()
                        entries.append({**fields, **state})
                    else:
                        entries.append({**fields, **status.to_json()})
                workers.append({"worker": worker_name, "spans": entries})
            entry: dict[str, Any] = {"run": run_name, "workers": workers}
            label = self._run_label(run_name)
            if label != run_name:
                entry["label"] = label
            out.append(entry)
        doc = {
            "runs": out,
            "error": snapshot.error,
            "scanning": scanning,
            "perfetto_url": self.perfetto_url,
            # what the page names when it finds nothing, and how it learns of new files
            "logdirs": [s.path for s in self._sources],
            "watched": bool(self._watch_folders),
        }
        body = encode_json(doc)
        with self._derived_lock:
            self._runs_body = (layout, scanning, statuses, body)
        return _respond(request, body)

    def _runs_layout(self, snapshot: _Snapshot) -> _RunsLayout:
        """``/runs``' per-scan part (span identities, names, sizes), built once per scan:
        with thousands of spans, building it per request dominated ``/runs``."""
        with self._derived_lock:
            cached = self._layout
        if cached is not None and cached.snapshot is snapshot:
            return cached
        identities: list[Identity] = []
        runs = []
        for run in snapshot.runs:
            workers = []
            for worker in run.workers:
                static = []
                for span in worker.spans:
                    identities.append(_identity(span))
                    static.append(
                        {"span": span.span, "size_bytes": span.size_bytes, "mtime": span.mtime}
                    )
                workers.append((worker.name, static))
            runs.append((run.name, workers))
        layout = _RunsLayout(snapshot, identities, runs)
        with self._derived_lock:
            self._layout = layout
        return layout

    def _span_response(self, request: Request, span: Span, panel: str | None) -> Any:
        status, result = self._loader.get(self._request_identity(span), self._wait(request))
        if result is None or result.summary is None:
            return self._failed(request, status)
        if panel is None:
            return _respond(request, result.summary)
        body = result.panels.get(panel)
        if body is None:
            raise _ApiError(404, f"the summary of this span has no panel {panel!r}")
        return _respond(request, body)

    def _serve_summary(self, request: Request) -> Any:
        span = self._span(request)
        panel = self._param(request, "panel", required=False)
        if panel is not None and panel not in summary_module.PANELS:
            raise _ApiError(
                400, f"unknown panel {panel!r}; one of: {', '.join(summary_module.PANELS)}"
            )
        return self._span_response(request, span, panel)

    def _step_timeline(self, request: Request, span: Span) -> TimelineStep | Any:
        """The step's :class:`TimelineStep` (the ``step`` parameter) from the span's
        stored timelines, loaded as ``/summary`` (same ``wait``); else the response to
        send (202 while loading, the load's error). Raises _ApiError for a bad or
        unknown step, a span stored without timelines, a damaged store."""
        raw_step = self._required(request, "step")
        if not _STEP_NUMBER.fullmatch(raw_step):
            raise _ApiError(400, "step must be a whole number (N of ProfilerStep#N)")
        status, result = self._loader.get(self._request_identity(span), self._wait(request))
        if result is None or result.summary is None:
            return self._failed(request, status)
        if result.timeline is None:
            raise _ApiError(404, "no timeline is stored for this span (summarised without one)")
        try:
            store = decode_store(result.timeline)
            position = find_step(store, int(raw_step))
            if position is None:
                raise _ApiError(
                    404,
                    f"no step {raw_step} in this span; its steps: "
                    + ", ".join(str(n) for n in store.steps),
                )
            return load_step(store, position)
        except (ValueError, zlib.error) as exc:  # a damaged store: a bug or a bad disk
            raise _ApiError(500, f"the stored timeline of this span is damaged ({exc})") from exc

    def _serve_timeline(self, request: Request) -> Any:
        """One step's timeline (``analysis/timeline.py``): loaded as ``/summary`` (same
        ``wait`` and error answers), then the step's stored document."""
        doc = self._step_timeline(request, self._span(request))
        if not isinstance(doc, TimelineStep):
            return doc
        return _respond(request, encode_json(doc))

    def _cut_span_window(
        self, request: Request, span: Span, doc: TimelineStep, require_events: bool = True
    ) -> WindowCut:
        """The window of ``doc``'s step (± 10 %, or the request's ``start_us``/``end_us``
        µs after its start) cut from ``span``'s file, opened under the same rule as a
        load (inside the log directory, the file discovery listed). A window that holds
        no event (outside the trace): 422 saying where the trace's events lie, unless
        ``require_events`` is false (the caller decides)."""
        start_us = _number(self._param(request, "start_us", required=False), "start_us")
        end_us = _number(self._param(request, "end_us", required=False), "end_us")
        step_ns = round(doc.duration_us * 1000)
        window = window_bounds(doc.trace_start_ns, step_ns, start_us, end_us)
        if window is None and start_us is not None and end_us is not None:
            raise _ApiError(400, f"end_us {end_us:g} is not after start_us {start_us:g}")
        if window is None:
            raise _ApiError(400, "give both start_us and end_us (end after start), or neither")
        ident = self._request_identity(span)
        try:
            if ident.root:
                with confined(ident.path, Rule(ident.root, ident.file_identity())):
                    cut = cut_window(ident.path, *window)
            else:
                cut = cut_window(ident.path, *window)
            if require_events:
                check_window_holds_events(cut, span.path, doc.trace_start_ns, doc.step)
        except TraceError as exc:
            raise _ApiError(422, str(exc)) from exc
        return cut

    def _serve_window(self, request: Request) -> Any:
        """A step's window cut from the trace file (``trace/window.py``) for Perfetto UI:
        the step window ± 10 %, or ``[start_us, end_us)`` µs after its start; the file is
        opened under the same rule as a load (inside the log directory, the file
        discovery listed)."""
        span = self._span(request)
        doc = self._step_timeline(request, span)
        if not isinstance(doc, TimelineStep):
            return doc
        cut = self._cut_span_window(request, span, doc)
        body = msgspec.json.encode(cut.document)
        headers = [
            ("X-Window-Start-Ns", str(cut.start_ns)),
            ("X-Window-End-Ns", str(cut.end_ns)),
            ("X-Window-Moved-Events", str(cut.moved)),
        ]
        if request.args.get("download"):
            name = f"{span.worker}.{span.span}.step{doc.step}.window.json"
            safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
            headers.append(("Content-Disposition", f'attachment; filename="{safe}"'))
        return http_util.Respond(request, body, _JSON, headers=headers)

    def _serve_window_ranks(self, request: Request) -> Any:
        """ "Open ranks": step ``step``'s window of every worker (rank) of run ``run``,
        each its last span's, cut from its file as ``/window`` cuts one and merged into
        one trace (:func:`~tb_kineto_insights.trace.window_merge.merge_windows`: each rank's
        processes named after its worker). A worker still loading: 202 as ``/summary``;
        a worker without that step is left out and named in ``X-Window-Ranks-Missing``;
        none with it: 404."""
        run = self._run(request, "run")
        parts: list[tuple[str, WindowCut]] = []
        first: tuple[Span, TimelineStep] | None = None
        missing: list[str] = []
        for worker in run.workers:
            if not worker.spans:
                continue
            span = worker.spans[-1]
            try:
                doc = self._step_timeline(request, span)
            except _ApiError as exc:
                if exc.code == 404:
                    missing.append(worker.name)
                    continue
                raise
            if not isinstance(doc, TimelineStep):
                return doc  # still loading, or the load's error
            parts.append((worker.name, self._cut_span_window(request, span, doc, False)))
            first = first or (span, doc)
        if not parts or first is None:
            raise _ApiError(404, f"no worker of run {run.name!r} has that step")
        if not any(cut.timed for _, cut in parts):  # one rank may be quiet; all: refuse
            try:
                check_window_holds_events(
                    parts[0][1], first[0].path, first[1].trace_start_ns, first[1].step
                )
            except TraceError as exc:
                raise _ApiError(422, str(exc)) from exc
        body = msgspec.json.encode(merge_windows(parts))
        headers = [("X-Window-Ranks", ",".join(_header_text(n) for n, _ in parts))]
        if missing:
            headers.append(("X-Window-Ranks-Missing", ",".join(_header_text(n) for n in missing)))
        if request.args.get("download"):
            name = f"{run.name}.step{self._required(request, 'step')}.ranks.json"
            safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
            headers.append(("Content-Disposition", f'attachment; filename="{safe}"'))
        return http_util.Respond(request, body, _JSON, headers=headers)

    def _serve_health(self, request: Request) -> Any:
        return self._span_response(request, self._span(request), "health")

    def _serve_run_summary(self, request: Request) -> Any:
        run = self._run(request, "run")
        raw_index = self._param(request, "span_index", required=False)
        try:
            span_index = -1 if raw_index is None else parse_span_index(raw_index)
        except ValueError:
            raise _ApiError(400, "span_index must be a whole number") from None
        wait_s = self._wait(request)
        hook = self._run_summary_override or RUN_SUMMARY_HOOK
        if hook is None:
            raise _ApiError(501, "the run summary is not available yet")
        # every span of each worker that has one at span_index: which ranks a worker
        # holds is only known once its spans are read (select_run_spans decides)
        chosen: list[Span] = []
        missing: dict[str, str] = {}
        for worker in run.workers:
            try:
                worker.spans[span_index]
            except IndexError:
                missing[worker.name] = (
                    f"worker has {len(worker.spans)} span(s), no index {span_index}"
                )
                continue
            chosen.extend(worker.spans)
        idents, statuses, results = self._gather(chosen, wait_s)
        pending = [
            {"worker": s.worker, "span": s.span, **st.to_json()}
            for s, st in zip(chosen, statuses, strict=True)
            if st.state != READY and st.state != ERROR
        ]
        if pending:
            doc = {"state": "loading", "pending": pending, "total": len(chosen)}
            return _respond(request, encode_json(doc), 202)
        errors = dict(missing)
        ready: list[tuple[Span, LoadResult]] = []
        used: list[Identity] = []
        for span, ident, status, result in zip(chosen, idents, statuses, results, strict=True):
            if result is None or result.summary is None:
                errors.setdefault(span.worker, status.error or "not readable")
            else:
                ready.append((span, result))
                used.append(ident)
        if not ready:
            raise _ApiError(422, f"no worker of run {run.name!r} could be read: {errors}")
        # The errors are part of the answer: a worker failing otherwise is another answer.
        key = (
            "run_summary",
            id(hook),
            run.name,
            span_index,
            tuple(used),
            tuple(sorted(errors.items())),
        )

        def compute() -> bytes:
            whole = hook is not summarize_run  # another hook may read any panel
            decoded = [(span, _run_view_input(result, whole)) for span, result in ready]
            per_worker: dict[str, list[RunViewSpan]] = {}
            for span, summary in decoded:
                per_worker.setdefault(span.worker, []).append(summary)
            side, notes = summary_module.select_run_spans(list(per_worker.items()), span_index)
            span_of = {id(summary): span for span, summary in decoded}
            result_doc = hook(side)
            if notes and isinstance(result_doc, RunView):
                result_doc = msgspec.structs.replace(result_doc, notes=notes + result_doc.notes)
            elif notes and isinstance(result_doc, dict):
                result_doc["notes"] = notes + list(result_doc.get("notes") or [])
            doc = {
                "run": run.name,
                "span_index": span_index,
                "spans": [
                    {"worker": name, "span": span_of[id(summary)].span} for name, summary in side
                ],
                "errors": errors,
                "summary": result_doc,
            }
            return encode_json(doc)

        return _respond(request, self._derived_once(key, compute))

    def _side(self, request: Request, prefix: str) -> list[Span]:
        """The spans one side of a diff names: a span, all spans of a worker, or all
        spans of every worker of a run."""
        run = self._run(request, f"{prefix}run")
        worker_name = self._param(request, f"{prefix}worker", required=False)
        span_id = self._param(request, f"{prefix}span", required=False)
        if worker_name is None:
            if span_id is not None:
                raise _ApiError(400, f"{prefix}span needs {prefix}worker")
            return [s for w in run.workers for s in w.spans]
        worker = next((w for w in run.workers if w.name == worker_name), None)
        if worker is None:
            raise _ApiError(404, f"no worker {worker_name!r} in run {run.name!r}")
        if span_id is None:
            return list(worker.spans)
        span = next((s for s in worker.spans if s.span == span_id), None)
        if span is None:
            raise _ApiError(
                404, f"no span {span_id!r} of worker {worker_name!r} in run {run.name!r}"
            )
        return [span]

    def _serve_diff(self, request: Request) -> Any:
        base = self._side(request, "base_")
        exp = self._side(request, "exp_")
        wait_s = self._wait(request)
        hook = self._diff_override or DIFF_HOOK
        if hook is None:
            raise _ApiError(501, "the diff is not available yet")
        idents, statuses, results = self._gather(base + exp, wait_s)
        pending = [
            {"run": s.run, "worker": s.worker, "span": s.span, **st.to_json()}
            for s, st in zip(base + exp, statuses, strict=True)
            if st.state != READY and st.state != ERROR
        ]
        if pending:
            doc = {"state": "loading", "pending": pending, "total": len(base) + len(exp)}
            return _respond(request, encode_json(doc), 202)
        sides: list[list[tuple[Span, LoadResult]]] = [[], []]
        warnings: list[str] = []
        for i, (span, status, result) in enumerate(zip(base + exp, statuses, results, strict=True)):
            which = 0 if i < len(base) else 1
            if result is None or result.summary is None:
                warnings.append(f"{('base', 'exp')[which]}: {status.error or 'not readable'}")
            else:
                sides[which].append((span, result))
        for which, name in ((0, "base"), (1, "exp")):
            if not sides[which]:
                raise _ApiError(422, f"{name}: no trace could be read ({'; '.join(warnings)})")
        labels = [self._label(request, p) for p in ("base_", "exp_")]
        key = (
            "diff",
            id(hook),
            tuple(labels),
            len(base),
            tuple((i, r is not None) for i, r in zip(idents, results, strict=True)),
            tuple(warnings),
        )

        def compute() -> bytes:
            b, e = ([(f"{s.worker}/{s.span}", r.decoded()) for s, r in side] for side in sides)
            try:
                diffed: Any = hook(b, e, base_label=labels[0], exp_label=labels[1])
            except ValueError as exc:  # e.g. no steps on one side: the input's problem
                raise _ApiError(422, str(exc)) from None
            if isinstance(diffed, DiffDocument) and warnings:
                diffed = msgspec.structs.replace(diffed, warnings=[*diffed.warnings, *warnings])
            elif isinstance(diffed, dict) and warnings:
                diffed = {**diffed, "warnings": [*diffed.get("warnings", []), *warnings]}
            return encode_json(diffed)

        return _respond(request, self._derived_once(key, compute))

    def _headline_index(self) -> HeadlineIndex:
        """The log directories' headline index (``store/headline_index.py``), read from
        the cache folder once per process (memory only without a cache folder)."""
        if self._index is None:
            cache = self._loader.cache
            settings = self._settings if cache is None else cache.settings
            paths = [src.path for src in self._sources]
            if len(paths) == 1:  # as the CLI names it: the two share the index
                root = paths[0] if _URI.match(paths[0]) else os.path.abspath(paths[0])
            else:
                root = encode_json(paths).decode()
            self._index = HeadlineIndex(None if cache is None else cache.backend, settings, root)
        return self._index

    def _span_headline(self, index: HeadlineIndex, span: Span) -> tuple[SpanHeadline | None, str]:
        """A span's headline record and, when there is none yet, why: ``"loading"``
        (queued for loading: ``/history`` answers with it pending) or the load's error
        (``error (KIND): message``, naming the file, as ``history`` prints it). From the
        headline index, else the cache's per-file headline, else a summary the loader
        holds; never reads the trace in this thread. The span is taken as the scan
        listed it (no ``stat``: these views are of the last scan, as ``/runs``)."""
        listed = (span.path, span.size_bytes, span.mtime, span.version)
        found = index.get(listed)
        if found is not None:
            return found, ""
        ident = _identity(span)
        cache = self._loader.cache
        headline = None if cache is None else cache.load_file_headline(ident)
        if headline is None:
            status, result = self._loader.get(ident, 0.0)
            if status.state == ERROR:
                kind = status.error_kind or ERROR_INTERNAL
                return None, f"error ({kind}): {status.error or 'unknown error'}"
            if result is None or result.summary is None:
                return None, LOADING
            try:
                headline = headline_of(result.decoded(), ident)
            except (ValueError, TypeError, KeyError) as exc:  # a bug: say so, do not wait
                return None, f"error (internal): {span.path}: no headline ({exc})"
        index.put(listed, headline)
        return headline, ""

    def _run_diagnoses(
        self, index: HeadlineIndex, run: Run
    ) -> tuple[list[HeadlineDiagnosis] | None, str]:
        """A run of several workers' diagnoses as ``report`` lists them
        (``summary.run_headline_diagnoses``: the view across ranks of every worker's
        readable spans), or None and ``"loading"`` while a span is still being read. From
        the headline index while none of the run's files changed (as the scan listed
        them), else computed once from the summaries the loader holds and put in it."""
        spans = [s for w in run.workers for s in w.spans]
        files = run_files((s.path, s.size_bytes, s.mtime, s.version) for s in spans)
        found = index.get_run(files)
        if found is not None:
            return found, ""
        per_worker: dict[str, list[Any]] = {w.name: [] for w in run.workers}
        for span in spans:
            status, result = self._loader.get(_identity(span), 0.0)
            if status.state == ERROR:
                continue  # unreadable: left out, as report leaves it out
            if result is None or result.summary is None:
                return None, LOADING
            per_worker[span.worker].append(result.decoded())
        found = summary_module.run_headline_diagnoses(list(per_worker.items()))
        index.put_run(files, found)
        return found, ""

    def _run_headlines(self, snapshot: _Snapshot) -> _RunHeadlines:
        """Per run of ``snapshot`` (shown by its label), the headline of each worker's
        latest span, and the runs left out (run → ``"loading"`` or the error of its
        first unreadable worker). A complete pass (none loading) is kept for the
        snapshot and saves the headline index when anything was added or dropped;
        ``/history`` and ``/across_runs`` share it."""
        from tb_kineto_insights.compare import history as hist

        with self._history_lock:
            last = self._run_headlines_memo
            if last is not None and last.snapshot is snapshot:
                return last
            index = self._headline_index()
            runs: list[hist.RunHeadlines] = []
            skipped: dict[str, str] = {}
            for run in snapshot.runs:
                label = self._run_label(run.name)
                workers: dict[str, SpanHeadline] = {}
                reasons: list[str] = []
                for worker in run.workers:
                    if not worker.spans:
                        continue
                    headline, why = self._span_headline(index, worker.spans[-1])
                    if headline is None:
                        reasons.append(why)
                    else:
                        workers[worker.name] = headline
                found: list[HeadlineDiagnosis] | None = None
                if LOADING not in reasons and len(workers) > 1:
                    found, why = self._run_diagnoses(index, run)
                    if found is None:
                        reasons.append(why)
                if LOADING in reasons:
                    skipped[label] = LOADING  # asked again until every worker is read
                elif workers:
                    runs.append(hist.RunHeadlines(label, workers, found))
                elif reasons:
                    skipped[label] = reasons[0]
            done = _RunHeadlines(snapshot, runs, skipped, LOADING not in skipped.values())
            if done.complete:
                index.save()
                self._run_headlines_memo = done
            return done

    def _serve_history(self, request: Request) -> Any:
        """``/history``: the ``tb_kineto_insights.history/1`` document of the log
        directory (``compare.history.build_history``) from each worker's latest span's
        headline record (:meth:`_run_headlines`); optional ``group_by`` and ``metric``
        (comma-separated) as the CLI's. Spans not summarised yet are queued and named in
        ``skipped`` (with ``"loading"``) until they are; a run none of whose workers can
        be read is named there with the error. A complete answer is kept until the next
        scan of the log directory."""
        from tb_kineto_insights.compare import history as hist

        group_by = self._param(request, "group_by", required=False) or None
        raw_metrics = self._param(request, "metric", required=False) or ""
        metrics = [m.strip() for m in raw_metrics.split(",") if m.strip()] or list(hist.METRICS)
        snapshot = self._current()
        params = (group_by, tuple(metrics))
        with self._derived_lock:
            last = self._history_body
        if last is not None and last[0] is snapshot and last[1] == params:
            return _respond(request, last[2])  # same scan, every run was read: same answer
        # The headlines and run records form no reference cycles; the cyclic garbage
        # collector's passes over tens of thousands of new objects, in a process that
        # holds TensorBoard's, cost about a third of a first answer on 10,000 runs
        # (benchmarks/RESULTS.md), so it is off while the answer is built, as in the CLI.
        collecting = gc.isenabled()
        gc.disable()
        try:
            heads = self._run_headlines(snapshot)
            logdir = ", ".join(src.path for src in self._sources)
            try:
                doc = hist.build_history(
                    heads.runs,
                    logdir=logdir,
                    group_by=group_by,
                    metrics=metrics,
                    skipped=heads.skipped,
                )
            except ValueError as exc:
                raise _ApiError(400, str(exc)) from None
        finally:
            if collecting:
                gc.enable()
        body = encode_json(doc)
        if heads.complete:
            with self._derived_lock:
                self._history_body = (snapshot, params, body)
        return _respond(request, body)

    def _serve_across_runs(self, request: Request) -> Any:
        """``/across_runs``: one page of every run ranked worst first
        (``compare.across_runs``: ``tb_kineto_insights.across_runs/1``) from the same
        headline records as ``/history`` (:meth:`_run_headlines`); ``q`` filters (words
        in the run name or a diagnosis id), ``offset`` and ``limit`` (default 50, at
        most 500) page. Runs still being read are listed last as ``loading`` (ask
        again); unreadable ones with their error. The ranking of a complete pass is kept
        until the next scan."""
        from tb_kineto_insights.compare import across_runs

        query = self._param(request, "q", required=False) or ""
        offset = self._count(request, "offset", 0, "0 or more")
        limit = self._count(
            request, "limit", ACROSS_RUNS_LIMIT, f"from 1 to {ACROSS_RUNS_MAX_LIMIT}"
        )
        if not 1 <= limit <= ACROSS_RUNS_MAX_LIMIT:
            raise _ApiError(400, f"limit must be from 1 to {ACROSS_RUNS_MAX_LIMIT}")
        snapshot = self._current()
        with self._derived_lock:
            ranked = self._ranked
        if ranked is None or ranked[0] is not snapshot:
            collecting = gc.isenabled()
            gc.disable()  # as /history: no reference cycles among these records
            try:
                heads = self._run_headlines(snapshot)
                rows = across_runs.rank_runs(heads.runs, heads.skipped)
            finally:
                if collecting:
                    gc.enable()
            ranked = (snapshot, rows)
            if heads.complete:
                with self._derived_lock:
                    self._ranked = ranked
        page = across_runs.page_of(ranked[1], query, offset, limit)
        return _respond(request, encode_json(page))

    @staticmethod
    def _count(request: Request, name: str, default: int, bounds: str) -> int:
        """A whole-number query parameter (``default`` when absent); 400 otherwise,
        saying the ``bounds`` it must be in (a sign, a fraction, 19 digits or more)."""
        raw = request.args.get(name)
        if raw is None or raw == "":
            return default
        if not _STEP_NUMBER.fullmatch(raw):
            raise _ApiError(
                400,
                f"{name} must be a whole number, {bounds}, of at most 18 digits (got {raw[:40]!r})",
            )
        return int(raw)

    def _run_label(self, run: str) -> str:
        """A run as the user sees it: traces directly in --logdir (a run folder given
        directly) are shown by the folder's name, as ``report`` names them; the key
        stays "."."""
        if run == "." and len(self._sources) == 1:
            return folder_name(self._sources[0].path)
        return run

    def _label(self, request: Request, prefix: str) -> str:
        run = request.args.get(f"{prefix}run")
        parts = [self._run_label(run) if run else None]
        parts += [request.args.get(f"{prefix}{k}") for k in ("worker", "span")]
        return "/".join(p for p in parts if p)
