"""The log directories as the plugin serves them: the runs of the last scan, the summary
loader, and the answers made from them, once.

A :class:`Workspace` is what every route of the TensorBoard plugin reads through: the
last discovery scan (a :class:`Snapshot`, replaced whole by the scanner, never changed),
the :class:`~.loader.SummaryLoader` that loads span summaries in the background, and the
answers made from them (run views, diffs, windows), each made once for all concurrent
requests and the last ones kept (:mod:`.shared_answers`). Run, worker and span from a
request are keys into the snapshot, never parts of a path.

No stale answer: before answering for a local span, its file is ``stat``-ed (through
links); when it is not the file discovery saw (rewritten, replaced, copied back), the
file as it is now is loaded and a re-scan is asked for (:meth:`Workspace.request_identity`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tb_kineto_insights.logdir.discovery import Run, Span, folder_name
from tb_kineto_insights.service.errors import InvalidRequest, NotFound
from tb_kineto_insights.service.loader import ERROR, READY, SpanStatus, SummaryLoader
from tb_kineto_insights.service.shared_answers import SharedAnswers
from tb_kineto_insights.store.cache import Identity, LoadResult
from tb_kineto_insights.store.cache import encode_json as encode_json  # every answer's JSON
from tb_kineto_insights.store.cache import json_safe as json_safe
from tb_kineto_insights.store.cached_summaries import identity_of

#: ``/history``'s and ``/across_runs``' reason for a run whose traces are being read.
LOADING = "loading"


@dataclass(frozen=True)
class Snapshot:
    """One scan's result; replaced whole, never changed: the runs, every span by
    ``(run, worker, span)``, every run by name, the scan's problem (or None) and
    whether a scan has finished at all."""

    runs: tuple[Run, ...]
    index: Mapping[tuple[str, str, str], Span]
    by_run: Mapping[str, Run]
    error: str | None
    scanned: bool


#: The snapshot before the first scan.
EMPTY_SNAPSHOT = Snapshot((), {}, {}, None, False)


def snapshot_of(runs: Sequence[Run], error: str | None) -> Snapshot:
    """The :class:`Snapshot` of a finished scan's ``runs``."""
    index = {
        (run.name, worker.name, span.span): span
        for run in runs
        for worker in run.workers
        for span in worker.spans
    }
    return Snapshot(tuple(runs), index, {r.name: r for r in runs}, error, True)


def listed_identity(span: Span) -> Identity:
    """The identity discovery saw, and the log directory the file must lie in when
    opened."""
    return identity_of(span, root=span.root)


def identity_now(span: Span) -> Identity | None:
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
class RunsLayout:
    """What ``/runs`` lists of one snapshot, in order: every span's identity, and per
    run, per worker, each span's ``{span, size_bytes, mtime}`` (never changed)."""

    snapshot: Snapshot
    identities: list[Identity]
    runs: list[tuple[str, list[tuple[str, list[dict[str, Any]]]]]]


@dataclass(frozen=True)
class Gathered:
    """Many spans loaded at once: per span its identity (as loaded), status and result
    (None unless ready)."""

    idents: list[Identity]
    statuses: list[SpanStatus]
    results: list[LoadResult | None]

    def pending(self, spans: Sequence[Span], with_run: bool = False) -> list[dict[str, Any]]:
        """The spans still queued or loading, each ``{worker, span, state, ...}`` (and
        ``run`` with ``with_run``)."""
        return [
            {**({"run": s.run} if with_run else {}), "worker": s.worker, "span": s.span}
            | st.to_json()
            for s, st in zip(spans, self.statuses, strict=True)
            if st.state != READY and st.state != ERROR
        ]


class Workspace:
    """The log directories' runs and their summaries, for the plugin's routes (module
    docstring).

    Args:
        loader: loads span summaries (its cache is the one the answers read).
        sources: the log directories served (paths or URLs), in order.
        settings: the analysis settings' fingerprint (``store.cache.settings_fingerprint``).
        snapshot: the last scan (the scanner replaces it).
        request_scan: asks the scanner for a scan soon, without waiting.
    """

    def __init__(
        self,
        loader: SummaryLoader,
        sources: Sequence[str],
        settings: str,
        snapshot: Callable[[], Snapshot],
        request_scan: Callable[[], None],
    ) -> None:
        self.loader = loader
        self.sources = list(sources)
        self.settings = settings
        self.snapshot = snapshot
        self.request_scan = request_scan
        self._lock = threading.Lock()
        #: run views, diffs, windows: made once, the last ones kept (shared_answers.py)
        self.answers = SharedAnswers()
        self._layout: RunsLayout | None = None
        #: ``/runs``' last answer: (layout, scanning, span statuses, body)
        self._runs_body: tuple[RunsLayout, bool, list[SpanStatus], bytes] | None = None

    # ------------------------------------------------------------------ lookups

    def span(self, run: str, worker: str, span_id: str) -> Span:
        """The span ``(run, worker, span_id)`` of the last scan.

        Raises:
            NotFound: no such span.
        """
        found = self.snapshot().index.get((run, worker, span_id))
        if found is None:
            raise NotFound(f"no span {span_id!r} of worker {worker!r} in run {run!r}")
        return found

    def run(self, name: str) -> Run:
        """The run ``name`` of the last scan.

        Raises:
            NotFound: no such run.
        """
        found = self.snapshot().by_run.get(name)
        if found is None:
            raise NotFound(f"no run {name!r}")
        return found

    def side_spans(self, run_name: str, worker_name: str | None, span_id: str | None) -> list[Span]:
        """The spans one side of a diff names: a span, all spans of a worker, or all
        spans of every worker of a run.

        Raises:
            NotFound: no such run, worker or span (the message names which).
            InvalidRequest: a span without its worker.
        """
        run = self.run(run_name)
        if worker_name is None:
            if span_id is not None:
                raise InvalidRequest("a span needs its worker")
            return [s for w in run.workers for s in w.spans]
        worker = next((w for w in run.workers if w.name == worker_name), None)
        if worker is None:
            raise NotFound(f"no worker {worker_name!r} in run {run.name!r}")
        if span_id is None:
            return list(worker.spans)
        span = next((s for s in worker.spans if s.span == span_id), None)
        if span is None:
            raise NotFound(f"no span {span_id!r} of worker {worker_name!r} in run {run.name!r}")
        return [span]

    def run_label(self, run: str) -> str:
        """A run as the user sees it: traces directly in the log directory (a run folder
        given directly) are shown by the folder's name, as ``report`` names them; the key
        stays "."."""
        if run == "." and len(self.sources) == 1:
            return folder_name(self.sources[0])
        return run

    # ------------------------------------------------------------------ loading

    def request_identity(self, span: Span) -> Identity:
        """The identity to load for a request: discovery's, unless the local file has
        changed since the scan (rewritten, replaced, copied back), then the file as it
        is now, and a re-scan is asked for so that ``/runs`` catches up. A summary is
        never served for a file that is no longer the one it was made from."""
        now = identity_now(span)
        if now is None:
            return listed_identity(span)
        self.request_scan()
        return now

    def load(self, span: Span, wait_s: float) -> tuple[SpanStatus, LoadResult | None]:
        """A span's load state and, when ready, its result (waiting up to ``wait_s``)."""
        return self.loader.get(self.request_identity(span), wait_s)

    def gather(
        self, spans: Sequence[Span], wait_s: float, idents: Sequence[Identity] | None = None
    ) -> Gathered:
        """Load many spans: queue them all first, then wait for each within ``wait_s``.
        ``idents``: their :meth:`request_identity` when the caller has them already."""
        idents = [self.request_identity(s) for s in spans] if idents is None else list(idents)
        for ident in idents:
            self.loader.request(ident)
        deadline = time.monotonic() + wait_s
        statuses, results = [], []
        for ident in idents:
            status, result = self.loader.get(ident, max(0.0, deadline - time.monotonic()))
            statuses.append(status)
            results.append(result)
        return Gathered(idents, statuses, results)

    # ------------------------------------------------------------------ the run list

    def runs_document(self, extra: Mapping[str, Any]) -> bytes:
        """``/runs``' JSON: every run, worker and span of the last scan with its load
        state, the scan's error and whether the first scan is still running, and
        ``extra`` (the plugin's settings the page reads). The same body as the last
        answer while nothing changed."""
        snapshot = self.snapshot()
        layout = self._runs_layout(snapshot)
        statuses = self.loader.statuses(layout.identities)
        scanning = not snapshot.scanned
        with self._lock:
            last = self._runs_body
        if last is not None and last[0] is layout and last[1] == scanning and last[2] == statuses:
            return last[3]  # nothing changed since the last answer
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
            label = self.run_label(run_name)
            if label != run_name:
                entry["label"] = label
            out.append(entry)
        doc = {"runs": out, "error": snapshot.error, "scanning": scanning, **extra}
        body = encode_json(doc)
        with self._lock:
            self._runs_body = (layout, scanning, statuses, body)
        return body

    def _runs_layout(self, snapshot: Snapshot) -> RunsLayout:
        """``/runs``' per-scan part (span identities, names, sizes), built once per scan:
        with thousands of spans, building it per request dominated ``/runs``."""
        with self._lock:
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
                    identities.append(listed_identity(span))
                    static.append(
                        {"span": span.span, "size_bytes": span.size_bytes, "mtime": span.mtime}
                    )
                workers.append((worker.name, static))
            runs.append((run.name, workers))
        layout = RunsLayout(snapshot, identities, runs)
        with self._lock:
            self._layout = layout
        return layout
