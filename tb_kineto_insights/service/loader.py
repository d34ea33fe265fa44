"""Loading summaries in the background: states, a priority queue, a bounded pool.

:class:`SummaryLoader`
    States per file identity (``queued``, ``loading``, ``ready``, ``error``, or
    ``not_loaded`` for a file nobody asked for yet), a priority queue (a request from
    the page goes before background preloading; requested files smallest first,
    preloaded ones largest first, so that the last to finish is a small one), and at
    most ``workers`` worker processes (default one per core, at most 4, or
    ``KINETO_INSIGHTS_WORKERS``; plain ``python -c`` child processes talking pickled
    messages over their standard input and output, so the program that embeds
    TensorBoard needs no ``__main__`` guard), each reading one file at a time and
    reused for the next; ``workers=0`` reads in one background thread of this process
    instead (tests, debugging). A worker process that sits idle for ``idle_shutdown_s``
    exits, so an idle TensorBoard holds no parsed-trace memory. A worker that dies
    (killed for memory) fails only the file it was reading; the next file gets a fresh
    process. A load in a worker process has a deadline (:class:`LoadDeadline`: base
    seconds plus seconds per MiB of file, counted from when the worker is ready); past
    it the worker is killed (stopped or stuck alike) and replaced, and the span is an
    error that a request retries after a back-off (``retry_backoff_s``, doubled at each
    failure in a row; retries queue behind first requests and leave one slot free). A
    file whose identity carries a ``root`` is opened under ``trace/confine.py``'s rule:
    inside that folder, and the very file discovery listed.
    Status questions never wait for a load: they are dictionary look-ups under a lock
    that is never held during I/O or analysis.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.service.worker_calls import CallOutcome, CallRunner, CallTask
from tb_kineto_insights.service.worker_pool import (
    ERROR_INTERNAL,
    ERROR_IO,
    ERROR_MEMORY,
    ERROR_TIMEOUT,
    ERROR_TRACE,
    ERROR_WORKER,
    LoadDeadline,
    LoadMemoryCap,
    LoadOutcome,
    LoadTask,
    WorkerSlot,
    default_workers,
    load_deadline_from_env,
    load_memory_cap_from_env,
)
from tb_kineto_insights.store.cache import (
    DiskCache,
    Identity,
    LoadResult,
    decode_entry,
    entry_key,
    settings_fingerprint,
)
from tb_kineto_insights.store.settings import seconds_from_env
from tb_kineto_insights.summary import summarize_file_with_timeline
from tb_kineto_insights.trace import parallel
from tb_kineto_insights.trace.errors import TraceIOError
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

logger = logging.getLogger(__name__)

#: Priorities: a page waiting for a span goes first, then a file asked for again after
#: its load timed out or killed its worker (a retry: it cost a slot its deadline
#: before), preloading last.
PRIORITY_REQUEST = 0
PRIORITY_RETRY = 1
PRIORITY_PRELOAD = 2

#: Environment variable: seconds before a file whose load timed out or whose worker died
#: is read again when asked for (doubled at each failure in a row, at most
#: :data:`MAX_RETRY_BACKOFF_S`); 0: at once.
RETRY_BACKOFF_ENV = "KINETO_INSIGHTS_RETRY_BACKOFF_S"
DEFAULT_RETRY_BACKOFF_S = 30.0
MAX_RETRY_BACKOFF_S = 900.0

QUEUED, LOADING, READY, ERROR, NOT_LOADED = "queued", "loading", "ready", "error", "not_loaded"
#: Worker processes for work besides summaries (window cuts) at most, beside the
#: loads': the memory such work may hold is this many times a load's cap.
CALL_SLOTS = 2


# --------------------------------------------------------------------------- loader


@dataclass(frozen=True)
class SpanStatus:
    """Load state of one file. ``progress`` (while loading) is
    ``{"elapsed_s", "estimated_fraction", "deadline_s"}``; the fraction is the share of
    the stored file read so far (compressed bytes for ``.gz``; 1.0 while the read
    file is analysed), reported by the reader; before its first report, elapsed time
    over the time the file should take at the throughput (compressed bytes per second)
    of the loads finished so far, at most 0.99, or None before any load finished;
    ``deadline_s`` is the load's deadline in seconds (None: none, a load in a thread)."""

    state: str
    error: str | None = None
    error_kind: str | None = None
    progress: dict[str, float | None] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "error": self.error, "progress": self.progress}


def analysis_settings(max_json_bytes: int = DEFAULT_MAX_JSON_BYTES) -> str:
    """The fingerprint of the analysis settings a loader of ``max_json_bytes`` runs with
    (the default thresholds): what its cache must have been made for."""
    return settings_fingerprint(max_json_bytes, DEFAULT_THRESHOLDS)


class SummaryLoader:
    """Loads summaries in the background, at most ``workers`` at a time.

    Args:
        cache: the disk cache, or None for memory only.
        workers: worker processes (0: one background thread in this process; None:
            one per usable core, at most ``worker_pool.DEFAULT_WORKERS``).
        summarize: ``summarize(path, max_json_bytes=, thresholds=)``: a summary, or
            ``(summary, timeline store)`` (the default,
            :func:`~tb_kineto_insights.summary.summarize_file_with_timeline`: the
            timelines are stored beside the summary); with worker processes it must be a
            module-level function (it is pickled).
        max_json_bytes: the reader's cap on uncompressed bytes.
        thresholds: analysis thresholds.
        memory_items: how many loaded results to keep in memory ...
        memory_bytes: ... and how many bytes of JSON at most (least recently used go).
        idle_shutdown_s: a worker process idle this long exits.
        deadline: how long one load in a worker process may take (see
            :class:`LoadDeadline`); None: from the environment, else the defaults.
        memory_cap: how much memory one load in a worker process may hold (see
            :class:`LoadMemoryCap`; past it the load fails with an error of kind
            ``memory``); None: ``$KINETO_INSIGHTS_LOAD_MAX_RSS_MIB``, else half the
            machine's memory.
        retry_backoff_s: seconds before a file whose load timed out or killed its
            worker is read again when asked for, doubled at each such failure in a row
            (at most :data:`MAX_RETRY_BACKOFF_S`); until then every request answers the
            error, which says when it is retried (without it, a pathological file
            asked for by a polling page would hold a worker for good). None:
            ``$KINETO_INSIGHTS_RETRY_BACKOFF_S``, else :data:`DEFAULT_RETRY_BACKOFF_S`.

    Fairness: a file asked for again after such a failure is queued behind first
    requests (:data:`PRIORITY_RETRY`), and with two or more slots at most all but one
    read such files at once: one user's bad files cannot keep good ones waiting.
    """

    def __init__(
        self,
        *,
        cache: DiskCache | None,
        workers: int | None = None,
        summarize: Callable[..., Any] | None = None,
        max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        memory_items: int = 64,
        memory_bytes: int = 256 * 1024**2,
        idle_shutdown_s: float = 120.0,
        deadline: LoadDeadline | None = None,
        retry_backoff_s: float | None = None,
        memory_cap: LoadMemoryCap | None = None,
    ) -> None:
        if workers is None:
            workers = default_workers()
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        self.cache = cache
        self.workers = workers
        self.settings = settings_fingerprint(max_json_bytes, thresholds)
        if cache is not None and cache.settings != self.settings:
            raise ValueError("the cache was made for other settings")
        self._summarize = summarize_file_with_timeline if summarize is None else summarize
        self._max_json_bytes = max_json_bytes
        self._thresholds = thresholds
        self._memory_items = max(1, memory_items)
        self._memory_bytes = max(1, memory_bytes)
        self._idle_shutdown_s = idle_shutdown_s
        self.deadline = load_deadline_from_env() if deadline is None else deadline
        self.memory_cap = load_memory_cap_from_env() if memory_cap is None else memory_cap
        self.retry_backoff_s = (
            seconds_from_env(os.environ, RETRY_BACKOFF_ENV, DEFAULT_RETRY_BACKOFF_S)
            if retry_backoff_s is None
            else retry_backoff_s
        )
        # ident → (failures in a row, monotonic time before which it is not read again)
        self._failures: dict[Identity, tuple[int, float]] = {}
        self._retries_running = 0  # loads of files that failed before, running now
        self._cv = threading.Condition()
        self._closed = False
        self._states: dict[Identity, str] = {}
        self._errors: dict[Identity, tuple[str, str]] = {}  # ident → (kind, message)
        self._started: dict[Identity, float] = {}
        self._read_fraction: dict[Identity, float] = {}  # share of the file read
        self._queued_priority: dict[Identity, int] = {}
        self._heap: list[tuple[int, int, int, Identity]] = []
        self._seq = itertools.count()
        self._current: set[Identity] | None = None  # identities discovery knows now
        self._memory: OrderedDict[Identity, LoadResult] = OrderedDict()
        self._memory_used = 0
        self._throughput: float | None = None  # compressed bytes per second
        self._cache_warned = False
        self.loads_started = 0
        use_process = workers > 0
        self._slots = [WorkerSlot(use_process) for _ in range(max(1, workers))]
        #: work besides summaries (a window's cut), as loads run (``worker_calls.py``)
        self.calls = CallRunner(max(1, min(CALL_SLOTS, workers)), use_process, idle_shutdown_s)
        self._threads = [
            threading.Thread(
                target=self._slot_loop, args=(slot,), name=f"kineto-insights-load-{i}", daemon=True
            )
            for i, slot in enumerate(self._slots)
        ]
        for thread in self._threads:
            thread.start()

    # ---------------------------------------------------------------- questions

    def status(self, ident: Identity) -> SpanStatus:
        """The current state; never waits for a load or touches the disk."""
        with self._cv:
            return self._status_locked(ident, time.monotonic())

    def statuses(self, idents: Iterable[Identity]) -> list[SpanStatus]:
        """:meth:`status` of many files under one lock."""
        with self._cv:
            now = time.monotonic()
            return [self._status_locked(ident, now) for ident in idents]

    def _status_locked(self, ident: Identity, now: float) -> SpanStatus:
        state = self._states.get(ident, NOT_LOADED)
        if state == ERROR:
            kind, message = self._errors.get(ident, (ERROR_INTERNAL, "unknown error"))
            return SpanStatus(ERROR, message, kind)
        if state == LOADING:
            elapsed = max(0.0, now - self._started.get(ident, now))
            fraction: float | None = self._read_fraction.get(ident)
            if fraction is None and self._throughput and ident.size_bytes > 0:
                fraction = min(0.99, elapsed * self._throughput / ident.size_bytes)
            deadline = self._deadline_locked(ident)
            return SpanStatus(
                LOADING,
                progress={
                    "elapsed_s": round(elapsed, 3),
                    "estimated_fraction": fraction,
                    "deadline_s": None if deadline is None else round(deadline, 3),
                },
            )
        return SpanStatus(state)

    def _deadline_locked(self, ident: Identity) -> float | None:
        """The load's deadline in seconds; None in thread mode (nothing can stop it)."""
        return self.deadline.for_size(ident.size_bytes) if self.workers > 0 else None

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the worker processes alive now (tests, benchmarks)."""
        return [pid for pid in (slot.pid for slot in self._slots) if pid is not None]

    # ---------------------------------------------------------------- discovery

    def note_discovered(
        self, idents: Iterable[Identity], *, preload: bool, settle_s: float = 5.0
    ) -> None:
        """Tell the loader which files exist now (called after each scan, off the request
        path). Files with a stored result become ``ready`` (or ``error``) without being
        read; with ``preload`` the others are queued behind requested ones, largest
        first (so that the last to finish is a small one), except files modified in
        the last ``settle_s`` seconds (maybe still being written; they are preloaded at
        a later scan, or loaded at once when asked for).
        Forgets the state of files that are gone."""
        current = set(idents)
        with self._cv:
            known = set(self._states)
        fresh = [ident for ident in current if ident not in known]
        stored: dict[Identity, LoadResult | None] = {}
        if self.cache is not None and fresh:
            cache = self.cache
            # The content key of each new file (its first and last MiB), a few at once:
            # on object storage each is two ranged GETs.
            with ThreadPoolExecutor(max_workers=min(8, len(fresh))) as pool:
                kinds = list(pool.map(cache.stored_kind, fresh))
            for ident, kind in zip(fresh, kinds, strict=True):
                if kind == "error":
                    stored[ident] = cache.load(ident)  # small: read it for its message
                elif kind == "summary":
                    stored[ident] = None  # ready; read when asked for
        wall_now = time.time()
        with self._cv:
            self._current = current
            for ident in list(self._states):
                if ident not in current and self._states[ident] != LOADING:
                    self._forget_locked(ident)
            for ident in fresh:
                if ident in self._states:
                    continue
                if ident in stored:
                    result = stored[ident]
                    if result is not None and result.error is not None:
                        self._set_error_locked(ident, ERROR_TRACE, result.error)
                    else:
                        self._states[ident] = READY
                else:
                    self._states[ident] = NOT_LOADED
            if preload:
                for ident in current:
                    if self._states.get(ident) == NOT_LOADED and not (
                        ident.mtime > 0 and wall_now - ident.mtime < settle_s
                    ):
                        self._enqueue_locked(ident, PRIORITY_PRELOAD)
            self._cv.notify_all()

    def _forget_locked(self, ident: Identity) -> None:
        self._states.pop(ident, None)
        self._failures.pop(ident, None)
        self._errors.pop(ident, None)
        self._queued_priority.pop(ident, None)
        self._started.pop(ident, None)
        self._read_fraction.pop(ident, None)
        result = self._memory.pop(ident, None)
        if result is not None:
            self._memory_used -= result.size

    # ---------------------------------------------------------------- loading

    def request(self, ident: Identity) -> SpanStatus:
        """Ask for a file: queue it ahead of preloading unless it is loaded, loading, or
        failed with a reader error. A file that failed for another reason (a bug, a
        dead worker) is queued again."""
        with self._cv:
            now = time.monotonic()
            state = self._states.get(ident, NOT_LOADED)
            if state == ERROR and self._errors.get(ident, (ERROR_INTERNAL, ""))[0] != ERROR_TRACE:
                _, retry_at = self._failures.get(ident, (0, 0.0))
                if now >= retry_at:  # a timeout or a dead worker: after its back-off
                    state = NOT_LOADED
            if state in (NOT_LOADED, QUEUED):
                retry = ident in self._failures
                self._enqueue_locked(ident, PRIORITY_RETRY if retry else PRIORITY_REQUEST)
            return self._status_locked(ident, now)

    def _enqueue_locked(self, ident: Identity, priority: int) -> None:
        if self._states.get(ident) == QUEUED and self._queued_priority.get(ident, 99) <= priority:
            return
        self._states[ident] = QUEUED
        self._errors.pop(ident, None)
        self._queued_priority[ident] = priority
        # requests: the smallest first (a page waits); preloading: the largest first
        size = -ident.size_bytes if priority == PRIORITY_PRELOAD else ident.size_bytes
        heapq.heappush(self._heap, (priority, size, next(self._seq), ident))
        self._cv.notify_all()

    def _next_task(self, timeout: float) -> LoadTask | None:
        deadline = time.monotonic() + timeout
        with self._cv:
            while not self._closed:
                task = self._pop_task_locked()
                if task is not None:
                    return task
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cv.wait(remaining)
        return None

    def _pop_task_locked(self) -> LoadTask | None:
        """The next queued file as a task (now ``loading``), or None. A file that failed
        before (:attr:`_failures`) waits while all slots but one read such files."""
        held_back: list[tuple[int, int, int, Identity]] = []
        try:
            while self._heap:
                item = heapq.heappop(self._heap)
                priority, _, _, ident = item
                if (
                    self._states.get(ident) != QUEUED
                    or self._queued_priority.get(ident) != priority
                ):
                    continue  # taken, superseded by a higher priority, or forgotten
                if (
                    priority == PRIORITY_PRELOAD
                    and self._current is not None
                    and ident not in self._current
                ):
                    self._forget_locked(ident)
                    continue
                if ident in self._failures:
                    if self._retries_running >= max(1, len(self._slots) - 1):
                        held_back.append(item)  # a slot stays for files that never failed
                        continue
                    self._retries_running += 1
                self._states[ident] = LOADING
                self._queued_priority.pop(ident, None)
                self._started[ident] = time.monotonic()
                self.loads_started += 1
                others = sum(1 for state in self._states.values() if state == LOADING) - 1
                self._cv.notify_all()
                return LoadTask(
                    ident=ident,
                    max_json_bytes=self._max_json_bytes,
                    thresholds=self._thresholds,
                    settings=self.settings,
                    cache_folder=None if self.cache is None else self.cache.location,
                    summarize=self._summarize,
                    deadline_s=self._deadline_locked(ident),
                    max_rss_bytes=self.memory_cap.max_rss_bytes if self.workers > 0 else None,
                    read_workers=self._read_budget(others),
                )
            return None
        finally:
            for item in held_back:
                heapq.heappush(self._heap, item)

    def _read_budget(self, others_loading: int) -> int | None:
        """The cores a load's read may use for its decode processes when
        ``others_loading`` other loads run (one budget of processes for the loader):
        the cores not taken by the others (each holds one at least), at least
        1 (a serial read); None in a thread of this process (one slot: the reader
        decides alone)."""
        if self.workers == 0:
            return None
        return max(1, parallel.usable_cores() - others_loading)

    def _slot_loop(self, slot: WorkerSlot) -> None:
        while True:
            task = self._next_task(self._idle_shutdown_s)
            if task is None:
                slot.stop()  # idle or closed: no process sits on memory
                if self._closed:
                    return
                continue
            try:  # the content key: read here once (head and tail), used by the worker
                task = dataclasses.replace(task, key=entry_key(task.ident, task.settings))
            except TraceIOError as exc:
                self._finish(task.ident, LoadOutcome(None, ERROR_IO, str(exc), 0.0))
                continue
            try:
                outcome = slot.run(task, functools.partial(self._note_read, task.ident))
            except Exception as exc:  # never let a loading thread die
                logger.exception("Kineto Insights: loading %s failed", task.ident.path)
                outcome = LoadOutcome(
                    None,
                    ERROR_WORKER,
                    f"{task.ident.path}: could not run the load ({type(exc).__name__}: {exc})",
                    0.0,
                )
            self._finish(task.ident, outcome, task.key)

    def _note_read(self, ident: Identity, bytes_read: int, file_bytes: int) -> None:
        """A load's progress: the share of the stored file read so far."""
        if file_bytes > 0:
            with self._cv:
                self._read_fraction[ident] = min(1.0, bytes_read / file_bytes)

    def _finish(self, ident: Identity, outcome: LoadOutcome, key: str | None = None) -> None:
        if outcome.cache_warning and not self._cache_warned:
            self._cache_warned = True
            logger.warning(
                "Kineto Insights: %s; summaries are kept in memory only", outcome.cache_warning
            )
        result = None
        if outcome.data is not None:
            # the worker checked a cached entry; a summary it computed is served as is
            result = decode_entry(outcome.data, ident, self.settings, key, validate=False)
        with self._cv:
            self._started.pop(ident, None)
            self._read_fraction.pop(ident, None)
            failures, _ = self._failures.pop(ident, (0, 0.0))
            if failures:
                self._retries_running = max(0, self._retries_running - 1)
            if result is None:
                message = outcome.message or f"{ident.path}: the analysis gave no readable result"
                if outcome.kind in (ERROR_TIMEOUT, ERROR_WORKER, ERROR_MEMORY):
                    message = self._back_off_locked(ident, failures + 1, message)
                self._set_error_locked(ident, outcome.kind or ERROR_INTERNAL, message)
            elif result.error is not None:
                self._set_error_locked(ident, ERROR_TRACE, result.error)
            else:
                self._states[ident] = READY
                self._remember_locked(ident, result)
                if outcome.elapsed_s > 0 and ident.size_bytes > 0:
                    rate = ident.size_bytes / outcome.elapsed_s
                    self._throughput = (
                        rate if self._throughput is None else 0.7 * self._throughput + 0.3 * rate
                    )
            self._cv.notify_all()

    def _back_off_locked(self, ident: Identity, failures: int, message: str) -> str:
        """Remember the ``failures``-th timeout or worker death of ``ident`` in a row:
        not read again for ``retry_backoff_s x 2^(failures-1)`` seconds (at most
        :data:`MAX_RETRY_BACKOFF_S`); returns ``message`` saying so."""
        wait_s = min(MAX_RETRY_BACKOFF_S, self.retry_backoff_s * 2.0 ** min(failures - 1, 30))
        self._failures[ident] = (failures, time.monotonic() + wait_s)
        if wait_s <= 0:
            return message
        times = "once" if failures == 1 else f"{failures} times in a row"
        return (
            f"{message}. It failed so {times}: asking again within {wait_s:.0f} s answers "
            "this error; after that it is read again (behind files that never failed)"
        )

    def _set_error_locked(self, ident: Identity, kind: str, message: str) -> None:
        self._states[ident] = ERROR
        self._errors[ident] = (kind, message)
        old = self._memory.pop(ident, None)
        if old is not None:
            self._memory_used -= old.size

    def _remember_locked(self, ident: Identity, result: LoadResult) -> None:
        old = self._memory.pop(ident, None)
        if old is not None:
            self._memory_used -= old.size
        self._memory[ident] = result
        self._memory_used += result.size
        while len(self._memory) > 1 and (
            len(self._memory) > self._memory_items or self._memory_used > self._memory_bytes
        ):
            _, dropped = self._memory.popitem(last=False)
            self._memory_used -= dropped.size

    # ---------------------------------------------------------------- results

    def get(self, ident: Identity, wait_s: float = 0.0) -> tuple[SpanStatus, LoadResult | None]:
        """``(status, result)``: the result when the file is ready (from memory, else
        from the disk cache), else queue it first in line and wait up to ``wait_s``
        seconds for it. A stored result that turns out corrupt or missing is loaded
        again. ``result`` is None unless the state is ``ready``; a reader error is
        ``(error status, None)``."""
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            status = self.request(ident)
            if status.state == READY:
                result = self._ready_result(ident)
                if result is not None:
                    return status, result
                continue  # the stored file is gone or corrupt: queued again
            if status.state == ERROR:
                return status, None
            with self._cv:
                while (
                    not self._closed
                    and self._states.get(ident) in (QUEUED, LOADING)
                    and time.monotonic() < deadline
                ):
                    self._cv.wait(max(0.0, min(1.0, deadline - time.monotonic())))
                state = self._states.get(ident, NOT_LOADED)
                if state in (QUEUED, LOADING) or self._closed:
                    return self._status_locked(ident, time.monotonic()), None
                if state == ERROR:
                    return self._status_locked(ident, time.monotonic()), None

    def _ready_result(self, ident: Identity) -> LoadResult | None:
        with self._cv:
            result = self._memory.get(ident)
            if result is not None:
                self._memory.move_to_end(ident)
                return result
        stored = self.cache.load(ident) if self.cache is not None else None
        with self._cv:
            if stored is not None and stored.error is None:
                if self._states.get(ident) == READY:
                    # kept as JSON only: the decoded Summary is several times its size
                    self._remember_locked(ident, dataclasses.replace(stored, struct=None))
                return stored
            if stored is not None:
                self._set_error_locked(ident, ERROR_TRACE, stored.error or "unknown error")
                return None
            if self._states.get(ident) == READY:
                self._states[ident] = NOT_LOADED
        return None

    def run_call(
        self, ident: Identity, call: Callable[..., Any], args: tuple[Any, ...], what: str
    ) -> CallOutcome:
        """``call(*args)`` (a module-level function) about the file ``ident``, run as a
        load of it runs: in a worker process, under its deadline and this loader's memory
        cap (``worker_calls.py``; in this thread with ``workers=0``). ``what`` names the
        work in a timeout's or memory cap's message. Never raises."""
        task = CallTask(
            ident,
            call,
            args,
            deadline_s=self._deadline_locked(ident),
            max_rss_bytes=self.memory_cap.max_rss_bytes if self.workers > 0 else None,
            what=what,
        )
        return self.calls.run(task)

    # ---------------------------------------------------------------- shutdown

    def close(self) -> None:
        """Stop loading: worker processes are stopped (a load in progress is killed)."""
        self.calls.close()
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for slot in self._slots:
            slot.stop(kill=True)  # a load in progress ends with EOF: its thread moves on
        for thread in self._threads:
            thread.join(timeout=10.0)
        for slot in self._slots:
            slot.stop(kill=True)
