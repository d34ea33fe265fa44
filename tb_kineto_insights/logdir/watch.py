"""Filesystem events for local log directories: a new or finished trace is listed within
about a second, not at the next rescan (every 30 s by default).

How (``watchdog``: inotify on Linux, FSEvents on macOS, ReadDirectoryChangesW on
Windows, a polling observer elsewhere):

- An event *counts* when it creates, modifies, closes after writing, moves or deletes a
  file named ``*.json`` or ``*.json.gz`` (any case; discovery decides later whether it is
  a trace), or creates, moves or deletes a folder, outside hidden folders and files
  (name starting with ``.``: cache temporaries, editors' files). Reads (``opened``,
  ``closed_no_write``) never count, so loading a trace does not wake the scanner.
- Debounce: after the first counted event, ``on_change`` is called once the folder has
  been quiet for ``quiet_s`` (0.3 s), or ``max_delay_s`` (1.0 s) after that first event,
  whichever comes first: a trace written in many chunks gives a rescan per second at
  most, and a new file is listed within ``max_delay_s`` plus one scan.
- Settle: ``settle_s`` (5.5 s) after the last counted event, ``on_change`` is called once
  more. The loader does not preload a file modified in the last 5 s (it may still be
  written: ``SummaryLoader.note_discovered``); this later scan preloads it once it has
  stopped changing, instead of 30 s later.

A watch ends with its folder: :attr:`LogdirWatcher.lost` tells that a watched folder
itself was deleted or moved, :attr:`LogdirWatcher.identities` which folder (device,
inode) was watched; the plugin starts a new watcher from the scan that finds the folder
there again, or finds it for the first time (created after TensorBoard started).

Object storage has no such events: its log directories keep the rescan interval.
Without ``watchdog`` (or when the observer cannot start, e.g. the inotify watch limit),
:func:`start_watcher` returns None and the caller keeps rescanning on its interval.
``KINETO_INSIGHTS_WATCH=0`` turns events off.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "WATCH_ENV",
    "LogdirWatcher",
    "counts",
    "folder_identity",
    "start_watcher",
    "watch_from_env",
]

logger = logging.getLogger(__name__)

#: Environment variable: ``0`` (or ``false``, ``no``, ``off``) turns filesystem events off.
WATCH_ENV = "KINETO_INSIGHTS_WATCH"

_COUNTED = frozenset({"created", "modified", "closed", "moved", "deleted"})
_SUFFIXES = (".json", ".json.gz")


def watch_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether filesystem events are on (``KINETO_INSIGHTS_WATCH``; default on)."""
    raw = (os.environ if environ is None else environ).get(WATCH_ENV, "1")
    return raw.strip().lower() not in ("0", "false", "no", "off")


def folder_identity(folder: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of a folder, or None when it is not one (missing, a file).
    A folder deleted and created again has another identity: its old watch is gone."""
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if os.path.isdir(folder) else None


def _hidden_below(path: str, root: str) -> bool:
    rel = os.path.relpath(path, root)
    return any(part.startswith(".") or part == "__pycache__" for part in rel.split(os.sep))


def counts(event_type: str, path: str, is_directory: bool, root: str) -> bool:
    """Whether an event on ``path`` (under the watched ``root``) may change what
    discovery lists (definition in the module docstring)."""
    if event_type not in _COUNTED or not path or _hidden_below(path, root):
        return False
    if is_directory:
        return event_type in ("created", "moved", "deleted")
    return path.lower().endswith(_SUFFIXES)


class LogdirWatcher:
    """Calls ``on_change()`` (from its own thread) after counted events under
    ``folders``, debounced; see the module docstring for the timing.

    Args:
        folders: local folders, watched recursively.
        on_change: called with no arguments; must not block for long.
        quiet_s, max_delay_s, settle_s: the debounce and settle delays, in seconds.

    Raises (constructor):
        ImportError: ``watchdog`` is not installed.
        OSError: a folder cannot be watched (missing, or the inotify watch limit).
    """

    def __init__(
        self,
        folders: Sequence[str],
        on_change: Callable[[], None],
        *,
        quiet_s: float = 0.3,
        max_delay_s: float = 1.0,
        settle_s: float = 5.5,
    ) -> None:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        self._on_change = on_change
        self._quiet_s = quiet_s
        self._max_delay_s = max_delay_s
        self._settle_s = settle_s
        self._cv = threading.Condition()
        self._first: float | None = None  # first counted event not yet answered
        self._last = 0.0
        self._settle_due: float | None = None
        self._stopped = False
        #: counted events and calls of on_change so far (tests)
        self.events = 0
        self.calls = 0
        watcher = self

        class _Handler(FileSystemEventHandler):
            def __init__(self, root: str) -> None:
                super().__init__()
                self.root = root

            def on_any_event(self, event: Any) -> None:
                paths = [str(event.src_path), str(getattr(event, "dest_path", "") or "")]
                if event.event_type in ("deleted", "moved") and os.path.normpath(
                    paths[0]
                ) == os.path.normpath(self.root):
                    watcher.lost = True  # the watched folder itself: its watch ends
                if any(counts(event.event_type, p, event.is_directory, self.root) for p in paths):
                    watcher._note()

        #: a watched folder itself was deleted or moved away (its watch is gone)
        self.lost = False
        #: each given folder's :func:`folder_identity` when its watch was set up
        self.identities = {folder: folder_identity(folder) for folder in folders}
        self._observer = Observer()
        self._observer.daemon = True
        try:
            for folder in folders:
                root = os.path.realpath(folder)
                self._observer.schedule(_Handler(root), root, recursive=True)
            self._observer.start()
        except BaseException:
            self._observer.stop()
            raise
        self._thread = threading.Thread(
            target=self._loop, name="kineto-insights-watch", daemon=True
        )
        self._thread.start()

    def _note(self) -> None:
        now = time.monotonic()
        with self._cv:
            self.events += 1
            if self._first is None:
                self._first = now
            self._last = now
            self._settle_due = now + self._settle_s
            self._cv.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cv:
                if self._stopped:
                    return
                now = time.monotonic()
                due: list[float] = []
                if self._first is not None:
                    due.append(min(self._last + self._quiet_s, self._first + self._max_delay_s))
                if self._settle_due is not None:
                    due.append(self._settle_due)
                if not due:
                    self._cv.wait()
                    continue
                if now < min(due):
                    self._cv.wait(min(due) - now)
                    continue
                if self._first is not None and now >= due[0]:
                    self._first = None
                if self._settle_due is not None and now >= self._settle_due:
                    self._settle_due = None
                self.calls += 1
            try:
                self._on_change()
            except Exception:  # never let the watcher die
                logger.exception("Kineto Insights: reacting to a log directory change failed")

    def close(self) -> None:
        """Stop watching (joins the observer, at most a few seconds)."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        self._observer.stop()
        self._observer.join(timeout=5.0)
        self._thread.join(timeout=5.0)


def start_watcher(
    folders: Sequence[str], on_change: Callable[[], None], **delays: float
) -> LogdirWatcher | None:
    """A :class:`LogdirWatcher` on the local ``folders`` that exist, or None (nothing to
    watch, ``watchdog`` missing, or the observer cannot start: the caller's rescans are
    then the only way new traces are found; logged once)."""
    existing = [f for f in folders if os.path.isdir(f)]
    if not existing:
        return None
    try:
        return LogdirWatcher(existing, on_change, **delays)
    except ImportError:
        logger.info("Kineto Insights: watchdog is not installed; new traces are found by rescans")
    except Exception as exc:
        logger.warning(
            "Kineto Insights: cannot watch %s for new traces (%s); rescans only", existing, exc
        )
    return None
