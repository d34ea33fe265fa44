"""Discovery in the background: the log directories scanned once at start, then every
``rescan_s`` seconds, and at once when a local log directory changes.

The scanner's thread replaces the :class:`~tb_kineto_insights.service.workspace.Snapshot`
whole after each scan; readers take the last one without waiting (only the very first
callers wait, at most ``first_scan_wait_s``, for the first scan). A local log directory
is also watched for filesystem events (``logdir/watch.py``, ``watchdog``): a new or
finished trace starts a scan within about a second (``KINETO_INSIGHTS_WATCH=0`` turns
this off; object storage has no events and keeps the interval). A listing that fails
(503 SlowDown, EMFILE, a folder gone for a moment) never empties the run list: the last
good one stays, with why.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tb_kineto_insights.logdir.discovery import (
    LogdirError,
    Run,
    Worker,
    describe_skipped,
    discover,
)
from tb_kineto_insights.logdir.watch import folder_identity, start_watcher
from tb_kineto_insights.serve.settings import LogdirSource, is_url
from tb_kineto_insights.service.workspace import EMPTY_SNAPSHOT, Snapshot, snapshot_of

logger = logging.getLogger(__name__)

#: The background scanner never re-scans more often than this (seconds).
MIN_RESCAN_S = 0.25


class Scanner:
    """Scans ``sources`` in a thread of its own (module docstring). ``on_scan(snapshot)``
    is called with each new snapshot before it is published (the loader learns of new
    files first, so that the snapshot's spans show their states at once)."""

    def __init__(
        self,
        sources: list[LogdirSource],
        rescan_s: float,
        first_scan_wait_s: float,
        on_scan: Callable[[Snapshot], None],
        watch: bool,
        follow_symlinks: tuple[str, ...] = (),
    ) -> None:
        self.sources = sources
        self.follow_symlinks = follow_symlinks
        self.rescan_s = rescan_s
        self.first_scan_wait_s = first_scan_wait_s
        self._on_scan = on_scan
        self._snapshot = EMPTY_SNAPSHOT
        # source path → (its last listing that succeeded, when: "HH:MM:SS")
        self._last_good: dict[str, tuple[list[Run], str]] = {}
        self._cv = threading.Condition()
        self._started = 0
        self._done = 0
        self._requested = False
        self._stopped = False
        self._first_scan = threading.Event()
        self._gave_up_waiting = False
        self.watcher: Any = None
        #: local log directories to watch (none when events are off)
        self.watch_folders: list[str] = []
        if watch:
            self.watch_folders = [src.path for src in sources if not is_url(src.path)]
            self.watcher = start_watcher(self.watch_folders, self.request_scan)
        # after the watcher: the scanner may restart it (_rearm_watcher)
        self._thread = threading.Thread(target=self._loop, name="kineto-insights-scan", daemon=True)
        self._thread.start()

    def current(self) -> Snapshot:
        """The last scan; before the first scan finished, the first callers wait for it
        (at most ``first_scan_wait_s``), later ones get the empty snapshot at once."""
        if (
            not self._first_scan.is_set()
            and not self._gave_up_waiting
            and not self._first_scan.wait(self.first_scan_wait_s)
        ):
            self._gave_up_waiting = True
        return self._snapshot

    def request_scan(self) -> None:
        """Start a scan soon (a filesystem event, a changed file), without waiting."""
        with self._cv:
            self._requested = True
            self._cv.notify_all()

    def rescan(self, timeout: float = 60.0) -> bool:
        """Scan now and wait (at most ``timeout`` s) until it is done; True when done."""
        with self._cv:
            # A scan already running may have listed the folder before the caller's
            # change: wait for one that starts after this call.
            target = self._started + 1
            self._requested = True
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._done >= target or self._stopped, timeout)
            return self._done >= target

    def close(self) -> None:
        """Stop the thread and the watcher."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        self._thread.join(timeout=10.0)  # first: the thread may restart the watcher
        if self.watcher is not None:
            self.watcher.close()

    def _loop(self) -> None:
        while True:
            with self._cv:
                if self._stopped:
                    return
                self._requested = False
                self._started += 1
            try:
                snapshot = self.scan()
            except Exception as exc:  # never let the scanner die
                logger.exception("Kineto Insights: scanning failed")
                snapshot = dataclasses.replace(self._snapshot, error=f"scan failed: {exc}")
            try:  # states first, so that the new snapshot's spans show them at once
                self._on_scan(snapshot)
            except Exception:
                logger.exception("Kineto Insights: queueing discovered traces failed")
            self._snapshot = snapshot
            self._first_scan.set()
            try:
                self._rearm_watcher()
            except Exception:  # never let the scanner die
                logger.exception("Kineto Insights: restarting the log directory watch failed")
            with self._cv:
                self._done += 1
                self._cv.notify_all()
                self._cv.wait_for(
                    lambda: self._requested or self._stopped, max(MIN_RESCAN_S, self.rescan_s)
                )

    def _rearm_watcher(self) -> None:
        """After a scan: (re)start the watcher when a local log directory was created
        after it was set up (or after TensorBoard started), or deleted and created
        again (its inotify watch died with the old folder). Until then that folder's
        new traces waited for the rescan interval, for the rest of the session."""
        wanted = self.watch_folders
        if not wanted or self._stopped:
            return
        now = {f: folder_identity(f) for f in wanted}
        before = self.watcher.identities if self.watcher is not None else {}
        lost = self.watcher is not None and self.watcher.lost
        if not any(now.values()):
            return  # nothing to watch now; re-armed when a folder is back
        if not lost and all(now[f] == before.get(f) or now[f] is None for f in wanted):
            return  # every folder there is watched, by its watch of this very folder
        if self.watcher is not None:
            self.watcher.close()
        self.watcher = start_watcher(wanted, self.request_scan)
        if self.watcher is not None:
            logger.info("Kineto Insights: watching %s for new traces again", wanted)
            self.request_scan()  # what was written before the new watch started

    def scan(self) -> Snapshot:
        """List every log directory now (module docstring): the runs, named
        ``name/run`` for a ``--logdir_spec`` group; a run hidden by one of the same name
        in an earlier log directory is left out, with a warning."""
        runs: list[Run] = []
        seen: dict[str, str] = {}
        errors: list[str] = []
        for source in self.sources:
            found = self._listing(source, errors)
            if found is None:
                continue
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
                runs.append(run if name == run.name else _renamed(run, name))
        error = "; ".join(errors) if errors else None
        if error is not None and error != self._snapshot.error:
            logger.warning("Kineto Insights: %s", error)
        return snapshot_of(runs, error)

    def _listing(self, source: LogdirSource, errors: list[str]) -> list[Run] | None:
        """One log directory's runs, else its last good listing (with why), else None;
        problems are appended to ``errors``."""
        skipped: list[tuple[str, str]] = []
        try:
            found = discover(source.path, skipped=skipped, follow=self.follow_symlinks)
        except Exception as exc:  # LogdirError, or a storage driver's own error
            message = str(exc) if isinstance(exc, LogdirError) else f"{source.path!r}: {exc}"
            kept = self._last_good.get(source.path)
            if kept is None:
                errors.append(message)
                return None
            found, listed_at = kept
            errors.append(f"{message}; showing its listing of {listed_at}")
            return found
        self._last_good[source.path] = (found, time.strftime("%H:%M:%S"))
        if skipped:
            errors.append(f"log directory {source.path!r}: {describe_skipped(skipped)}")
        return found


def _renamed(run: Run, name: str) -> Run:
    """``run`` named ``name``, with its spans' run name too."""
    return Run(
        name=name,
        workers=tuple(
            Worker(
                name=w.name,
                spans=tuple(dataclasses.replace(s, run=name) for s in w.spans),
            )
            for w in run.workers
        ),
    )
