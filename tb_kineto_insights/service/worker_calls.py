"""Work a request asks for besides a summary (a window cut from a trace) run as a load
runs: in a worker process of its own, under a load's deadline and memory cap.

The attack run cut windows inside TensorBoard's own process: no deadline, no memory
cap, and four concurrent cuts of a 300 MB-JSON trace took TensorBoard from 99 to 5,759
MiB. Here a cut is a :class:`CallTask` sent to a worker process
(``worker_pool.WorkerSlot``: the process is killed past the task's deadline or memory
cap, the request gets a ``timeout``/``memory`` error, a 503), and what comes back is the
answer's bytes. :class:`CallRunner` holds at most ``slots`` such processes, reused
from call to call and stopped when idle: a request waits for a free one, so calls
never take more memory than ``slots`` caps. With ``use_process=False`` (a loader of
``workers=0``: tests, debugging) a call runs in the calling thread, with no deadline.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tb_kineto_insights.service.worker_pool import ERROR_INTERNAL, WorkerSlot
from tb_kineto_insights.store.cache import Identity
from tb_kineto_insights.summary import SPAN_ERRORS, span_failed
from tb_kineto_insights.trace.source import ProgressCallback

__all__ = ["CallOutcome", "CallRunner", "CallTask"]


@dataclass(frozen=True)
class CallOutcome:
    """What a call produced: ``value`` (what the function returned), else ``kind``
    (``trace``, ``io``, ``internal``, ``worker``, ``timeout``, ``memory``: the loads'
    error kinds) and ``message``."""

    value: Any
    kind: str | None
    message: str | None
    elapsed_s: float


@dataclass(frozen=True)
class CallTask:
    """``call(*args)`` in a worker process (``call`` a module-level function, pickled),
    about the file ``ident`` (its size sets the deadline; its path names it in
    messages), with a load's ``deadline_s`` and ``max_rss_bytes``. The function opens
    what it reads itself (under the load's rule, ``trace/confine.py``)."""

    ident: Identity
    call: Callable[..., Any]
    args: tuple[Any, ...] = ()
    deadline_s: float | None = None
    max_rss_bytes: int | None = None
    what: str = "request"
    outcome_type: type = field(default=CallOutcome, repr=False)

    def execute(self, progress: ProgressCallback | None = None) -> CallOutcome:
        """Run the call here (in the worker process); never raises: a reader's error is
        an outcome of its kind, anything else ``internal``."""
        started = time.perf_counter()
        try:
            value = self.call(*self.args)
        except SPAN_ERRORS as exc:
            failed = span_failed(exc, self.ident.path)
            return CallOutcome(None, failed.kind, failed.message, time.perf_counter() - started)
        except Exception as exc:  # a bug: said, not raised out of the worker
            message = f"{self.ident.path}: {type(exc).__name__}: {exc}"
            return CallOutcome(None, ERROR_INTERNAL, message, time.perf_counter() - started)
        return CallOutcome(value, None, None, time.perf_counter() - started)

    def failed(self, kind: str, message: str, elapsed_s: float) -> CallOutcome:
        """The outcome of a call whose worker died, or ran past its deadline or cap."""
        return CallOutcome(None, kind, message, elapsed_s)


class CallRunner:
    """At most ``slots`` calls at once, each in a worker process of its own (module
    docstring), the others waiting for a free one; a process idle for ``idle_s`` is
    stopped."""

    def __init__(self, slots: int, use_process: bool, idle_s: float = 120.0) -> None:
        self._free = [WorkerSlot(use_process) for _ in range(max(1, slots))]
        self._all = list(self._free)
        self._last_used: dict[int, float] = {}
        self._cv = threading.Condition()
        self._idle_s = idle_s
        self._closed = False
        self._reaper: threading.Thread | None = None
        self._use_process = use_process

    def run(self, task: CallTask) -> CallOutcome:
        """Run ``task`` in a free slot (waiting for one); never raises."""
        with self._cv:
            while not self._free:
                self._cv.wait()
            slot = self._free.pop()
            self._start_reaper_locked()
        outcome: Any
        try:
            outcome = slot.run(task)
        except Exception as exc:  # a slot that cannot start: said as a dead worker
            outcome = CallOutcome(None, "worker", f"{task.ident.path}: {exc}", 0.0)
        finally:
            with self._cv:
                self._last_used[id(slot)] = time.monotonic()
                self._free.append(slot)
                self._cv.notify()
        if not isinstance(outcome, CallOutcome):  # (a LoadOutcome cannot come: typed)
            return CallOutcome(None, ERROR_INTERNAL, "unexpected answer", 0.0)
        return outcome

    def _start_reaper_locked(self) -> None:
        if self._reaper is None and self._use_process:
            self._reaper = threading.Thread(
                target=self._reap, name="kineto-insights-calls-idle", daemon=True
            )
            self._reaper.start()

    def _reap(self) -> None:
        """Stop the processes of slots idle for ``idle_s`` (no process sits on memory)."""
        while True:
            with self._cv:
                if self._closed:
                    return
                self._cv.wait(max(1.0, self._idle_s / 2))
                now = time.monotonic()
                idle = [
                    s
                    for s in self._free
                    if s.pid is not None and now - self._last_used.get(id(s), now) > self._idle_s
                ]
                for slot in idle:  # out of reach of run() while it stops
                    self._free.remove(slot)
            for slot in idle:
                with contextlib.suppress(Exception):
                    slot.stop()
            with self._cv:
                self._free.extend(idle)
                self._cv.notify_all()

    def close(self) -> None:
        """Stop every process (a call in progress is killed: its request gets an error)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for slot in self._all:
            slot.stop(kill=True)
