"""Answers made once: for every request asking the same question at the same time, and
for the next ones while nothing they read has changed.

A question's key names the request and the identity of every file its answer reads
(size, mtime, device, inode: a changed file is another key), so a kept answer is never
stale. :meth:`SharedAnswers.get`:

- **single-flight**: the first request of a key makes the answer; the others asking
  the same key meanwhile wait for it and get the same answer, or the same error (a
  copy of it), instead of making it again: four concurrent ``/diff`` of a 400-rank run
  cost 3.9x the CPU and +2.06 GB before, each re-reading and decoding 800 summaries;
- **kept**: an answer whose size ``make`` gives is kept, the most recently used
  :data:`KEPT` answers, at most :data:`KEPT_BYTES` in all (an answer larger than
  :data:`KEPT_ONE_BYTES` is not kept: a window of a large trace); ``make`` gives no size
  for what must not be kept (a 202 while spans load, an answer made while a span had an
  error that may pass);
- **bounded**: with ``heavy``, at most :data:`AT_ONCE` answers are made at a time (a diff
  or a view across hundreds of ranks holds every rank's summary while it is made):
  distinct requests wait for a turn instead of multiplying the memory.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["AT_ONCE", "KEPT", "KEPT_BYTES", "KEPT_ONE_BYTES", "SharedAnswers"]

T = TypeVar("T")

#: Answers kept (the most recently used).
KEPT = 32
#: Bytes of answers kept in all, and for one answer at most.
KEPT_BYTES = 256 * 1024**2
KEPT_ONE_BYTES = 64 * 1024**2
#: Heavy answers made at once.
AT_ONCE = 2


@dataclass
class _Flight:
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None


class SharedAnswers:
    """The answers of one plugin (module docstring)."""

    def __init__(
        self, kept: int = KEPT, kept_bytes: int = KEPT_BYTES, at_once: int = AT_ONCE
    ) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._kept_bytes = 0
        self._max_kept, self._max_bytes = kept, kept_bytes
        self._flights: dict[Any, _Flight] = {}
        self._turns = threading.BoundedSemaphore(max(1, at_once))
        #: answers made (not kept, not shared): for tests and benchmarks
        self.made = 0

    def get(self, key: Any, make: Callable[[], tuple[T, int | None]], *, heavy: bool = True) -> T:
        """The answer of ``key``: kept, else being made (waited for), else made here by
        ``make`` (``(answer, size in bytes, or None: not to keep)``). An error of
        ``make`` reaches every request that waited for it (each gets a copy) and is not
        kept: the next request makes the answer again."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return kept[0]
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise copy.copy(flight.error) from flight.error
            return flight.value
        try:
            if heavy:
                with self._turns:
                    value, size = make()
            else:
                value, size = make()
            self.made += 1
            flight.value = value
            self._keep(key, value, size)
            return value
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                self._flights.pop(key, None)
            flight.done.set()

    def _keep(self, key: Any, value: Any, size: int | None) -> None:
        if size is None or size > KEPT_ONE_BYTES:
            return
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._kept_bytes -= old[1]
            self._kept[key] = (value, size)
            self._kept_bytes += size
            while self._kept and (
                len(self._kept) > self._max_kept or self._kept_bytes > self._max_bytes
            ):
                _, (_, dropped) = self._kept.popitem(last=False)
                self._kept_bytes -= dropped
