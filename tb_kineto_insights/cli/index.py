"""``tb-kineto-insights index``: fill the shared summary cache on a Dask cluster.

What it does, for one or more log directories (local paths or fsspec URLs) and one cache
(a folder or an fsspec URL, the same one TensorBoard and ``report`` read):

1. Lists every span (:func:`~tb_kineto_insights.logdir.discovery.discover`) and, on this machine,
   computes each file's cache key (its first and last MiB, ``content_id.py``) and asks
   the cache whether an entry is there (a few at once: I/O only). Files with the same
   content (a copy made with its times) share one key and are counted once: an *entry*
   is one distinct content.
2. Sends one task per missing entry to Dask, largest file first (submission order and
   Dask ``priority`` = size in bytes): :func:`summarize_into_cache`, a pure function of
   (file location, cache location, settings). The worker opens the trace itself
   through fsspec and writes the entry itself, so a remote worker needs the log
   directory and the cache at the same URL (object storage, or NFS mounted at the same
   path) and this package installed, never this machine's memory. Just before parsing,
   the worker looks in the cache again: an entry another process (a TensorBoard, a
   second ``index``) stored meanwhile is not computed twice.
3. Then, for each run of two or more workers, the view across ranks of its latest
   spans (:func:`tb_kineto_insights.summary.summarize_run`, chosen as the plugin's
   ``/run_summary`` does with ``span_index=-1``) from the cached summaries, one task per
   run, stored as ``v<ANALYSIS_VERSION>/runs/<run view key>.run`` (:func:`run_view_key`).

Without ``scheduler`` the tasks run on a :class:`dask.distributed.LocalCluster` on this
machine; with one (``tcp://dask-scheduler:8786``) on that existing cluster.

Each entry ends as exactly one of:

- ``computed``: parsed by this run and stored;
- ``cached``: a summary was already stored (by anyone), nothing parsed;
- ``failed``: no summary, with the reason. ``stored: true`` when the reason is a verdict
  about the file's content (a reader error such as malformed JSON), which is cached like
  a summary and not retried; ``stored: false`` for an I/O error, a bug, a lost worker or
  an unwritable cache, retried by the next run.

So ``computed + cached + len(failed) == entries``. Idempotent (a second run computes
nothing, and starts or contacts no Dask cluster when nothing is missing) and resumable
(killed half-way, the entries written so far are whole files, written atomically by
``cache_store.py``, and the next run computes only the rest).

Concurrent writers: two ``index`` runs (or an ``index`` and a TensorBoard) may parse the
same file when they start it within the same moments; duplicates are accepted, as in
``cache.py``: both write a complete, equivalent entry by atomic rename or one PUT, and
the last one wins. No claim file: a lease needs agreeing clocks on NFS and object
storage and a rule for a holder that died, and the duplicate costs one parse, once.

Exit codes (the CLI's): 0 every entry cached or computed; 1 some entries failed (listed
with file and reason); 2 usage or setup error (:class:`IndexSetupError`: no Dask, an
unreachable scheduler, an unusable log directory or cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TextIO

from tb_kineto_insights import summary as summary_module
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.logdir.discovery import LogdirError, Run, Span, discover
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.store.cache import DiskCache, Identity, encode_json, entry_key
from tb_kineto_insights.store.cached_summaries import CachedSummaries, identity_of
from tb_kineto_insights.store.seal import sealed
from tb_kineto_insights.trace.errors import TraceIOError
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

__all__ = [
    "EXTRA_HINT",
    "IndexResult",
    "IndexSetupError",
    "Progress",
    "RunViewTask",
    "SpanTask",
    "run_index",
    "run_view_into_cache",
    "run_view_key",
    "summarize_into_cache",
]

logger = logging.getLogger(__name__)

#: What to install for ``index`` (named in the exit-2 message when Dask is missing).
EXTRA_HINT = "pip install 'tb-kineto-insights[index]'"
#: Bumped when the stored run view's wrapper changes.
RUN_VIEW_FORMAT = 1
COMPUTED = "computed"
CACHED = "cached"
FAILED = "failed"


class IndexSetupError(Exception):
    """``index`` cannot start: Dask is not installed, the scheduler cannot be reached,
    a log directory cannot be listed, or the cache location is unusable. The message
    names the thing and the problem."""


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class SpanTask:
    """One entry to compute: what a worker needs, and nothing of this machine's memory.

    Attributes:
        ident: the file as listed (path or URL, size, mtime, ETag); no containment root.
        cache_location: the cache folder or URL.
        max_json_bytes, thresholds: the analysis settings (part of the entry key).
    """

    ident: Identity
    cache_location: str
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES
    thresholds: Thresholds = DEFAULT_THRESHOLDS


@dataclass(frozen=True)
class SpanOutcome:
    """What became of one entry: ``outcome`` is ``computed``, ``cached`` or ``failed``;
    ``reason`` says why it failed; ``stored``: the failure is a cached verdict."""

    path: str
    size_bytes: int
    outcome: str
    reason: str | None = None
    stored: bool = False
    elapsed_s: float = 0.0


def summarize_into_cache(task: SpanTask) -> SpanOutcome:
    """Summarise one trace into the cache unless an entry for its content is there now
    (a Dask task; never raises for a bad trace).

    Returns:
        ``cached`` when an entry appeared since it was listed (nothing parsed),
        ``computed`` when parsed and stored, else ``failed`` with the reason.
    """
    started = time.perf_counter()
    ident = task.ident
    summaries = CachedSummaries(
        task.cache_location, max_json_bytes=task.max_json_bytes, thresholds=task.thresholds
    )
    span = Span(
        run="",
        worker="",
        span="0",
        path=ident.path,
        size_bytes=ident.size_bytes,
        mtime=ident.mtime,
        version=ident.version,
    )
    result = summaries.summarize(span)
    elapsed = time.perf_counter() - started
    if summaries.parsed == 0:  # answered from the cache (or its key could not be read)
        if isinstance(result, summary_module.SpanOk):
            return SpanOutcome(ident.path, ident.size_bytes, CACHED, elapsed_s=elapsed)
        reason = f"{result.type}: {result.message}"
        stored = result.type != "TraceIOError"
        return SpanOutcome(ident.path, ident.size_bytes, FAILED, reason, stored, elapsed)
    if summaries.store_failures:
        reason = f"cannot write the cache {task.cache_location}"
        return SpanOutcome(ident.path, ident.size_bytes, FAILED, reason, False, elapsed)
    if isinstance(result, summary_module.SpanOk):
        return SpanOutcome(ident.path, ident.size_bytes, COMPUTED, elapsed_s=elapsed)
    reason = f"{result.type}: {result.message}"
    return SpanOutcome(ident.path, ident.size_bytes, FAILED, reason, result.cacheable, elapsed)


@dataclass(frozen=True)
class RunViewTask:
    """One run's view across ranks to compute from cached summaries.

    Attributes:
        run: the run's name (relative folder).
        workers: ``(worker name, identities of its spans in span order)`` per worker.
        key: :func:`run_view_key` of the inputs.
        cache_location, max_json_bytes, thresholds: as :class:`SpanTask`.
        span_index: which span of each worker (-1: the latest, as TensorBoard shows).
    """

    run: str
    workers: tuple[tuple[str, tuple[Identity, ...]], ...]
    key: str
    cache_location: str
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    span_index: int = -1


def run_view_key(
    settings: str, span_index: int, workers: Sequence[tuple[str, Sequence[str]]]
) -> str:
    """The stored run view's key: hex SHA-256 of ``[RUN_VIEW_FORMAT, settings,
    span_index, [[worker, [entry key of each span]], ...]]`` as JSON, workers in the
    order discovery lists them (worker names appear in the view, so they are part of
    it; file paths are not)."""
    body = encode_json(
        [RUN_VIEW_FORMAT, settings, span_index, [[w, list(keys)] for w, keys in workers]]
    )
    return hashlib.sha256(body).hexdigest()


def _run_view_name(key: str) -> str:
    return f"v{summary_module.ANALYSIS_VERSION}/runs/{key}.run"


def run_view_into_cache(task: RunViewTask) -> SpanOutcome:
    """Compute a run's view across ranks from the cached summaries of its spans and
    store it (a Dask task, after the span tasks). Spans without a cached summary are
    left out of the view and named in its ``errors``, as ``/run_summary`` does.

    Returns:
        ``computed``, ``cached`` (stored meanwhile) or ``failed`` (no rank readable, or
        the cache cannot be written); ``path`` is the run's name.
    """
    started = time.perf_counter()
    summaries = CachedSummaries(
        task.cache_location, max_json_bytes=task.max_json_bytes, thresholds=task.thresholds
    )
    cache = summaries.cache
    if cache is None:  # a task always names a cache; "none" would mean no cache
        return SpanOutcome(task.run, 0, FAILED, "no cache location", False, 0.0)
    name = _run_view_name(task.key)
    if cache.backend.exists(name):
        return SpanOutcome(task.run, 0, CACHED, elapsed_s=time.perf_counter() - started)
    per_worker: dict[str, list[Summary]] = {}
    span_of: dict[int, str] = {}
    errors: dict[str, str] = {}
    for worker, idents in task.workers:
        for ident in idents:
            result = cache.load(ident)
            if result is None or result.summary is None:
                reason = "no cached summary" if result is None else (result.error or "error")
                errors.setdefault(worker, reason)
                continue
            decoded = result.decoded()
            per_worker.setdefault(worker, []).append(decoded)
            span_of[id(decoded)] = ident.path
    if not per_worker:
        reason = f"no worker of run {task.run!r} has a cached summary: {errors}"
        return SpanOutcome(task.run, 0, FAILED, reason, False, time.perf_counter() - started)
    side, view = summary_module.run_view_with_notes(
        list(per_worker.items()), span_index=task.span_index, thresholds=task.thresholds
    )
    doc = {
        "format": RUN_VIEW_FORMAT,
        "analysis_version": summary_module.ANALYSIS_VERSION,
        "key": task.key,
        "run": task.run,
        "span_index": task.span_index,
        "spans": [{"worker": w, "path": span_of.get(id(s), "")} for w, s in side],
        "errors": errors,
        "summary": view,
    }
    try:
        cache.backend.write(name, sealed(encode_json(doc)))
    except OSError as exc:
        reason = f"cannot write the cache {cache.location}: {exc}"
        return SpanOutcome(task.run, 0, FAILED, reason, False, time.perf_counter() - started)
    return SpanOutcome(task.run, 0, COMPUTED, elapsed_s=time.perf_counter() - started)


# --------------------------------------------------------------------------- progress


class Progress:
    """A text progress bar on a stream: files done / total, bytes/s, ETA.

    ``bytes/s`` is the compressed bytes of finished files over the seconds since
    :meth:`start`; ETA is the bytes left over that rate. On a terminal the line is
    redrawn in place (at most 10 times a second); otherwise a line is written every
    ``interval_s`` seconds (logs of cron and CI stay short), and at the end.
    """

    def __init__(self, stream: TextIO, total_files: int, total_bytes: int, interval_s: float = 5.0):
        self.stream = stream
        self.total_files = total_files
        self.total_bytes = total_bytes
        self.done_files = 0
        self.done_bytes = 0
        self.interval_s = interval_s
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._started = time.monotonic()
        self._last = -math.inf

    def start(self) -> None:
        self._started = time.monotonic()
        self._write(force=True)

    def advance(self, size_bytes: int) -> None:
        self.done_files += 1
        self.done_bytes += size_bytes
        self._write(force=self.done_files == self.total_files)

    def line(self) -> str:
        """The progress line, e.g. ``[#####.....] 12/24 files  41.0 MB/s read  ETA 0:00:07``
        (bytes of the files as stored: compressed bytes for gzip)."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        fraction = self.done_bytes / self.total_bytes if self.total_bytes else 1.0
        if not self.total_bytes and self.total_files:
            fraction = self.done_files / self.total_files
        filled = int(round(20 * min(max(fraction, 0.0), 1.0)))
        rate = self.done_bytes / elapsed
        eta = "?"
        if rate > 0:
            left_s = int(round(max(self.total_bytes - self.done_bytes, 0) / rate))
            eta = f"{left_s // 3600}:{left_s // 60 % 60:02d}:{left_s % 60:02d}"
        return (
            f"[{'#' * filled}{'.' * (20 - filled)}] {self.done_files}/{self.total_files} files"
            f"  {rate / 1e6:.1f} MB/s of files read  ETA {eta}"
        )

    def _write(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < (0.1 if self._tty else self.interval_s):
            return
        self._last = now
        if self._tty:
            end = "\n" if self.done_files >= self.total_files else ""
            self.stream.write("\r" + self.line() + end)
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()


# --------------------------------------------------------------------------- driver


@dataclass
class IndexResult:
    """What one ``index`` run did.

    Attributes:
        spans: spans listed. entries: distinct contents among them (what is cached).
        computed, cached: entries parsed now / found in the cache.
        failed: ``{"file", "reason", "stored"}`` per failed entry.
        run_views: ``{"computed": n, "cached": n, "failed": [{"run", "reason"}]}``.
        elapsed_s: wall seconds of the whole run.
    """

    spans: int = 0
    entries: int = 0
    computed: int = 0
    cached: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)
    run_views: dict[str, Any] = field(
        default_factory=lambda: {"computed": 0, "cached": 0, "failed": []}
    )
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "spans": self.spans,
            "entries": self.entries,
            "computed": self.computed,
            "cached": self.cached,
            "failed": self.failed,
            "run_views": self.run_views,
            "elapsed_s": round(self.elapsed_s, 3),
        }

    @property
    def exit_code(self) -> int:
        """0 when every entry is cached or computed, 1 when some failed."""
        return 1 if self.failed or self.run_views["failed"] else 0


def _check_writable(backend: Any) -> None:
    """Write and remove one empty hidden file in the cache's version folder, so that an
    unusable cache (a file, a read-only folder, no credentials) is a setup error (exit 2)
    before any trace is parsed, not one failure per file.

    Raises:
        IndexSetupError: the write failed; names the cache and the OS or driver error.
    """
    name = f"v{summary_module.ANALYSIS_VERSION}/.index-probe-{os.getpid()}-{time.time_ns()}"
    try:
        backend.write(name, b"")
    except OSError as exc:
        raise IndexSetupError(f"cache {backend.location!r} cannot be written: {exc}") from exc
    backend.delete(name)


def _dask() -> Any:
    try:
        import dask.distributed as distributed
    except ImportError as exc:
        raise IndexSetupError(
            f"the index command needs Dask (dask.distributed is not installed: {exc}); "
            f"install the 'index' extra: {EXTRA_HINT}"
        ) from exc
    return distributed


@contextlib.contextmanager
def _client(scheduler: str | None, workers: int, processes: bool, timeout_s: float) -> Any:
    """A Dask client: on ``scheduler``, else on a LocalCluster of ``workers`` workers
    (one thread each; separate processes unless ``processes`` is False)."""
    distributed = _dask()
    if scheduler:
        try:
            client = distributed.Client(scheduler, timeout=f"{timeout_s}s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise IndexSetupError(
                f"cannot reach the Dask scheduler at {scheduler!r}: {exc}"
            ) from exc
        with client:
            yield client
        return
    cluster = distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=processes,
        # worker processes talk TCP on loopback only (threads use in-process transport)
        **({"host": "127.0.0.1"} if processes else {}),
        dashboard_address="127.0.0.1:0",  # any free port: no clash with another cluster
        scheduler_kwargs={"dashboard": False},
        silence_logs=logging.ERROR,
    )
    with cluster, distributed.Client(cluster) as client:
        yield client


def _listed(logdirs: Sequence[str]) -> list[Run]:
    runs: list[Run] = []
    for logdir in logdirs:
        try:
            runs.extend(discover(logdir))
        except LogdirError as exc:
            raise IndexSetupError(str(exc)) from exc
    return runs


def run_index(
    logdirs: Sequence[str],
    cache_location: str,
    *,
    scheduler: str | None = None,
    workers: int = 2,
    processes: bool = True,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    progress: TextIO | None = None,
    on_client: Callable[[Any], None] | None = None,
    connect_timeout_s: float = 10.0,
) -> IndexResult:
    """Compute every missing entry (and run view) of ``logdirs`` into the cache.

    Args:
        logdirs: log directories (paths or fsspec URLs).
        cache_location: the cache folder or URL.
        scheduler: a Dask scheduler address (``tcp://host:8786``); None: a LocalCluster
            of ``workers`` workers (``processes=False``: threads of this process).
        max_json_bytes, thresholds: analysis settings (part of every entry's key).
        progress: where the progress bar goes (None: nowhere).
        on_client: called with the Dask client once connected (tests, logging).
        connect_timeout_s: how long to try reaching ``scheduler``.

    Returns:
        An :class:`IndexResult` (its ``exit_code``: 0 or 1).

    Raises:
        IndexSetupError: Dask missing, scheduler unreachable, a log directory that cannot
            be listed, or a cache location that cannot be used.
    """
    started = time.monotonic()
    result = IndexResult()
    summaries, cache = _index_cache(cache_location, max_json_bytes, thresholds)
    _dask()  # a clear error before any file is read
    runs = _listed(logdirs)
    spans = [s for run in runs for worker in run.workers for s in worker.spans]
    result.spans = len(spans)
    key_of, todo = _sorted_out(cache, [identity_of(s) for s in spans], result)
    view_tasks = _run_view_tasks(runs, key_of, summaries.settings, cache_location, summaries)
    if not todo and all(cache.backend.exists(_run_view_name(t.key)) for t in view_tasks):
        # nothing to compute (a second run, or no trace): no cluster is started
        result.run_views["cached"] = len(view_tasks)
        result.elapsed_s = time.monotonic() - started
        return result
    with _client(scheduler, workers, processes, connect_timeout_s) as client:
        if on_client is not None:
            on_client(client)
        settings = (cache_location, max_json_bytes, thresholds)
        _compute_spans(client, todo, settings, progress, result)
        _compute_run_views(client, cache, view_tasks, result)
    result.elapsed_s = time.monotonic() - started
    return result


def _index_cache(
    cache_location: str, max_json_bytes: int, thresholds: Thresholds
) -> tuple[CachedSummaries, DiskCache]:
    """The cache to fill, checked writable.

    Raises:
        IndexSetupError: the location cannot be used, is ``none``, or is not writable.
    """
    try:
        summaries = CachedSummaries(
            cache_location, max_json_bytes=max_json_bytes, thresholds=thresholds
        )
    except (ValueError, ImportError) as exc:
        raise IndexSetupError(f"cache {cache_location!r}: {exc}") from exc
    cache = summaries.cache
    if cache is None:
        raise IndexSetupError("index needs a cache (--cache DIR); 'none' was given")
    _check_writable(cache.backend)
    return summaries, cache


def _sorted_out(
    cache: DiskCache, idents: list[Identity], result: IndexResult
) -> tuple[dict[Identity, str], dict[str, Identity]]:
    """Each span's entry key and what the cache holds for it: counted in ``result``
    (cached, failed: a file that cannot be read for its key, or a stored reader error;
    ``entries``); returns ``(key of each readable span, the distinct entries to
    compute by key)``."""

    def probe(ident: Identity) -> tuple[str | None, str | None]:
        """(entry key, stored kind); (None, why) when the file cannot be read for its key."""
        try:
            key = entry_key(ident, cache.settings)
        except TraceIOError as exc:
            return None, str(exc)
        return key, cache.stored_kind(ident, key)

    with ThreadPoolExecutor(max_workers=8) as pool:  # I/O: first and last MiB per file
        probed = list(pool.map(probe, idents))
    key_of: dict[Identity, str] = {}
    todo: dict[str, Identity] = {}
    seen: set[str] = set()
    for ident, (key, kind) in zip(idents, probed, strict=True):
        if key is None:  # ``kind`` holds the reader's message: file and problem
            reason = f"TraceIOError: {kind}"
            result.failed.append({"file": ident.path, "reason": reason, "stored": False})
            continue
        key_of[ident] = key
        if key in seen:
            continue  # the same content listed twice: one entry
        seen.add(key)
        if kind == "summary":
            result.cached += 1
        elif kind == "error":
            stored = cache.load(ident, key)
            message = stored.error if stored is not None and stored.error else "reader error"
            kind_name = (stored.error_type if stored is not None else None) or "TraceError"
            result.failed.append(
                {"file": ident.path, "reason": f"{kind_name}: {message}", "stored": True}
            )
        else:
            todo[key] = ident
    result.entries = len(seen) + sum(1 for f in result.failed if not f["stored"])
    return key_of, todo


def _compute_spans(
    client: Any,
    todo: dict[str, Identity],
    settings: tuple[str, int, Thresholds],
    progress: TextIO | None,
    result: IndexResult,
) -> None:
    """Summarise the spans of ``todo`` (by entry key) into the cache on the cluster,
    largest file first, counting each outcome in ``result`` as it comes; ``settings``:
    the cache location, ``max_json_bytes`` and thresholds of every :class:`SpanTask`."""
    cache_location, max_json_bytes, thresholds = settings
    distributed = _dask()
    ordered = sorted(todo.items(), key=lambda item: -item[1].size_bytes)
    bar = None
    if progress is not None and ordered:
        bar = Progress(progress, len(ordered), sum(i.size_bytes for _, i in ordered))
        bar.start()
    futures = [
        client.submit(
            summarize_into_cache,
            SpanTask(ident, cache_location, max_json_bytes, thresholds),
            key=f"kineto-insights-span-{key}",
            priority=ident.size_bytes,
            pure=False,
        )
        for key, ident in ordered
    ]
    size_of = {f.key: i.size_bytes for f, (_, i) in zip(futures, ordered, strict=True)}
    path_of = {f.key: i.path for f, (_, i) in zip(futures, ordered, strict=True)}
    for future in distributed.as_completed(futures):
        outcome = _outcome(future, path_of[future.key], size_of[future.key])
        if outcome.outcome == COMPUTED:
            result.computed += 1
        elif outcome.outcome == CACHED:
            result.cached += 1
        else:
            result.failed.append(
                {"file": outcome.path, "reason": outcome.reason, "stored": outcome.stored}
            )
        if bar is not None:
            bar.advance(size_of[future.key])
        future.release()


def _compute_run_views(
    client: Any, cache: DiskCache, view_tasks: list[RunViewTask], result: IndexResult
) -> None:
    """Compute the run views not in the cache yet on the cluster, counting them in
    ``result`` (``run_views``)."""
    pending = [t for t in view_tasks if not cache.backend.exists(_run_view_name(t.key))]
    result.run_views["cached"] = len(view_tasks) - len(pending)
    view_futures = [
        client.submit(run_view_into_cache, t, key=f"kineto-insights-run-{t.key}", pure=False)
        for t in pending
    ]
    for future, task in zip(view_futures, pending, strict=True):
        outcome = _outcome(future, task.run, 0)
        if outcome.outcome == FAILED:
            result.run_views["failed"].append({"run": task.run, "reason": outcome.reason})
        else:
            result.run_views[outcome.outcome] += 1


def _outcome(future: Any, path: str, size_bytes: int) -> SpanOutcome:
    """The task's outcome; a task that raised (a lost worker, ``KilledWorker``, a bug)
    is a failure with its exception as the reason."""
    try:
        outcome = future.result()
    except Exception as exc:
        return SpanOutcome(path, size_bytes, FAILED, f"task failed: {type(exc).__name__}: {exc}")
    if not isinstance(outcome, SpanOutcome):
        return SpanOutcome(path, size_bytes, FAILED, f"task returned {type(outcome).__name__}")
    return outcome


def _run_view_tasks(
    runs: Sequence[Run],
    key_of: dict[Identity, str],
    settings: str,
    cache_location: str,
    summaries: CachedSummaries,
) -> list[RunViewTask]:
    """One task per run of two or more workers whose spans all have a key."""
    tasks = []
    for run in runs:
        if len(run.workers) < 2:
            continue
        workers = tuple(
            (w.name, tuple(identity_of(s) for s in w.spans)) for w in run.workers if w.spans
        )
        if any(i not in key_of for _, ids in workers for i in ids):
            continue
        key = run_view_key(settings, -1, [(w, [key_of[i] for i in ids]) for w, ids in workers])
        tasks.append(
            RunViewTask(
                run.name,
                workers,
                key,
                cache_location,
                summaries.max_json_bytes,
                summaries.thresholds,
            )
        )
    return tasks


def write_result(result: IndexResult, out: TextIO) -> None:
    """The end-of-run summary in words: counts, then each failure with file and reason."""
    views = result.run_views
    out.write(
        f"{result.spans} span(s), {result.entries} distinct trace(s): "
        f"{result.computed} computed, {result.cached} cached already, "
        f"{len(result.failed)} failed; run views across ranks: {views['computed']} computed, "
        f"{views['cached']} cached already, {len(views['failed'])} failed "
        f"({result.elapsed_s:.1f} s)\n"
    )
    for item in result.failed:
        again = "stored verdict" if item["stored"] else "retried next time"
        out.write(f"  failed: {item['file']}: {item['reason']} ({again})\n")
    for item in views["failed"]:
        out.write(f"  failed run view: {item['run']}: {item['reason']}\n")


def default_workers() -> int:
    """LocalCluster workers when not given: the CPU count, at most 4 (each worker holds
    one parsed trace in memory at a time)."""
    return max(1, min(4, os.cpu_count() or 1))
