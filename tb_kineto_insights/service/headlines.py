"""The runs' headline records: what the history (``compare/history.py``) and the view
across runs (``compare/across_runs.py``) are made from, for the plugin and the command
line alike.

Per run, the headline of each worker's latest span and, for a run of several workers,
its diagnoses as ``report`` lists them (the view across ranks' included:
``summary.run_headline_diagnoses``); a run none of whose workers can be read is skipped
with the first reason (:func:`assemble`). The records come from the log directory's
headline index (``store/headline_index.py``: one file of the cache), else the cache's
per-file headline, else a summary: the command line summarises what is missing at once
(:func:`collect_runs`), the plugin takes what its loader holds and queues the rest
(:class:`LoadedHeadlines`: those runs are skipped as ``loading`` until read).
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tb_kineto_insights.compare import history as hist
from tb_kineto_insights.logdir.discovery import Run, Span, folder_name
from tb_kineto_insights.schema.history import HeadlineDiagnosis, SpanHeadline
from tb_kineto_insights.service.errors import InvalidRequest
from tb_kineto_insights.service.loader import ERROR, READY
from tb_kineto_insights.service.worker_pool import ERROR_INTERNAL
from tb_kineto_insights.service.workspace import LOADING, Snapshot, Workspace, listed_identity
from tb_kineto_insights.store.cache import encode_json, headline_of
from tb_kineto_insights.store.cached_summaries import CachedSummaries
from tb_kineto_insights.store.headline_index import HeadlineIndex, run_files
from tb_kineto_insights.summary import SpanFailed, run_headline_diagnoses

#: A span's headline, or why there is none (a reason, or :data:`LOADING`).
HeadlineOrReason = SpanHeadline | str
#: Threads reading the cache's per-file headlines at once.
READ_THREADS = 16
logger = logging.getLogger(__name__)


def assemble(
    runs: Sequence[Run],
    headline: Callable[[Span], HeadlineOrReason],
    diagnoses: Callable[[Run], list[HeadlineDiagnosis] | str],
    label: Callable[[str], str] = str,
    no_trace: str | None = None,
) -> tuple[list[hist.RunHeadlines], dict[str, str]]:
    """Per run (shown as ``label(name)``), the headline of each worker's latest span and,
    with several workers, the run's diagnoses; the runs left out go to the second value:
    :data:`LOADING` when a span is still being read, else the first worker's reason, or
    ``no_trace`` for a run without a span (None: not listed)."""
    out: list[hist.RunHeadlines] = []
    skipped: dict[str, str] = {}
    for run in runs:
        name = label(run.name)
        workers: dict[str, SpanHeadline] = {}
        reasons: list[str] = []
        for worker in run.workers:
            if not worker.spans:
                continue
            got = headline(worker.spans[-1])
            if isinstance(got, str):
                reasons.append(got)
            else:
                workers[worker.name] = got
        found: list[HeadlineDiagnosis] | None = None
        if LOADING not in reasons and len(workers) > 1:
            run_found = diagnoses(run)
            if isinstance(run_found, str):
                reasons.append(run_found)
            else:
                found = run_found
        if LOADING in reasons:
            skipped[name] = LOADING  # asked again until every worker is read
        elif workers:
            out.append(hist.RunHeadlines(name, workers, found))
        elif reasons:
            skipped[name] = reasons[0]
        elif no_trace is not None:
            skipped[name] = no_trace
    return out, skipped


def _listed(span: Span) -> tuple[str, int, float, str]:
    """A span as the index keys it: as the scan listed it (no ``stat``)."""
    return (span.path, span.size_bytes, span.mtime, span.version)


def collect_runs(
    runs: list[Run], summaries: CachedSummaries, logdir: str | None = None
) -> tuple[list[hist.RunHeadlines], dict[str, str]]:
    """The command line's :func:`assemble`: the headlines of every run's latest spans;
    the run of the traces directly in ``logdir`` (discovery's ``"."``) is named after
    that folder (``logdir.discovery.folder_name``), as ``report`` and the tab name it.

    With ``logdir`` (the log directory ``runs`` were listed from) and a cache, the
    headlines come from the log directory's headline index first, else from
    :meth:`CachedSummaries.headlines` (the per-file headline, the summary, or a parse:
    the spans without a stored headline are summarised at once, on every core), and the
    index is saved again when any was added or dropped."""
    index = None if logdir is None else summaries.headline_index(logdir)
    latest = [w.spans[-1] for run in runs for w in run.workers if w.spans]
    found: dict[int, SpanHeadline | SpanFailed] = {}
    missing: list[Span] = []
    for span in latest:
        stored = None if index is None else index.get(_listed(span))
        if stored is None:
            missing.append(span)
        else:
            summaries.headlines_read += 1
            found[id(span)] = stored
    for span, got in zip(missing, summaries.headlines(missing), strict=True):
        found[id(span)] = got
        if isinstance(got, SpanHeadline) and index is not None:
            index.put(_listed(span), got)

    def headline(span: Span) -> HeadlineOrReason:
        got = found[id(span)]
        return got if isinstance(got, SpanHeadline) else f"{got.type}: {got.message}"

    def diagnoses(run: Run) -> list[HeadlineDiagnosis]:
        files = run_files(_listed(s) for w in run.workers for s in w.spans)
        cached = None if index is None else index.get_run(files)
        if cached is None:
            cached = summaries.run_headline_diagnoses(run.workers)
            if index is not None:
                index.put_run(files, cached)
        return cached

    def label(name: str) -> str:
        return folder_name(logdir) if name == "." and logdir is not None else name

    out = assemble(runs, headline, diagnoses, label, no_trace="no trace")
    if index is not None:
        index.save()
    return out


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector off meanwhile: headline records form no reference
    cycles, and its passes over tens of thousands of new objects, in a process that
    holds TensorBoard's, cost about a third of a first answer on 10,000 runs
    (``benchmarks/RESULTS.md``)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@dataclass(frozen=True)
class HeadlinesPass:
    """The headline records of one snapshot's runs: ``runs`` with at least one readable
    worker, ``skipped`` (run → :data:`LOADING` or the error), ``complete`` when none is
    loading."""

    snapshot: Snapshot
    runs: list[hist.RunHeadlines]
    skipped: dict[str, str]
    complete: bool


class LoadedHeadlines:
    """The plugin's headline records, from the loader's summaries (never reading a trace
    in the request's thread), with ``/history`` and ``/across_runs`` made from them; a
    complete pass (no run loading) is kept until the next scan."""

    def __init__(self, workspace: Workspace, index_root: str) -> None:
        self.workspace = workspace
        self.index_root = index_root
        self._index: HeadlineIndex | None = None
        self._memo: HeadlinesPass | None = None
        self._lock = threading.Lock()
        #: ``/history``'s last complete answer: (pass, (group_by, metrics), body)
        self._history: tuple[HeadlinesPass, tuple[str | None, tuple[str, ...]], bytes] | None = None
        #: ``/across_runs``' ranking of the last complete pass: (pass, rows)
        self._ranked: tuple[HeadlinesPass, list[Any]] | None = None
        self._rank_lock = threading.Lock()
        self._warming = False
        self._asking = True  # set per pass, under _lock

    def index(self) -> HeadlineIndex:
        """The log directories' headline index (named ``index_root``), read from the
        cache folder once per process (memory only without a cache folder)."""
        if self._index is None:
            cache = self.workspace.loader.cache
            settings = self.workspace.settings if cache is None else cache.settings
            backend = None if cache is None else cache.backend
            self._index = HeadlineIndex(backend, settings, self.index_root)
        return self._index

    def _stored_headlines(self, index: HeadlineIndex, runs: Sequence[Run]) -> dict[int, Any]:
        """The cache's per-file headlines of the latest spans the index does not hold
        (``id(span)`` → headline or None). On object storage (an fsspec URL) each read
        waits for a round trip: read on :data:`READ_THREADS` threads. A local folder is
        read in this thread: its reads are in the page cache or one disk queue, and
        threads only contend for the GIL (a first ``/across_runs`` of 20,000 runs:
        2.2 s of CPU serial, 3.0 s on 16 threads; benchmarks/bench_history_route.py)."""
        cache = self.workspace.loader.cache
        if cache is None:
            return {}
        missing = [
            w.spans[-1]
            for run in runs
            for w in run.workers
            if w.spans and index.get(_listed(w.spans[-1])) is None
        ]
        if not missing:
            return {}
        from tb_kineto_insights.store.backends import LocalStore

        if isinstance(cache.backend, LocalStore):
            return {id(s): cache.load_file_headline(listed_identity(s)) for s in missing}
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(missing))) as pool:
            found = pool.map(lambda s: cache.load_file_headline(listed_identity(s)), missing)
            return {id(span): headline for span, headline in zip(missing, found, strict=True)}

    def _span_headline(
        self, index: HeadlineIndex, span: Span, stored: dict[int, Any]
    ) -> HeadlineOrReason:
        """A span's headline record or why there is none: :data:`LOADING` (queued) or
        the load's error (``error (KIND): message``); from the index, else the cache's
        per-file headline (``stored``: read ahead, :meth:`_stored_headlines`), else a
        summary the loader holds."""
        found = index.get(_listed(span))
        if found is not None:
            return found
        ident = listed_identity(span)
        headline = stored.get(id(span))
        if headline is None:
            status, result = self._loaded(ident)
            if status.state == ERROR:
                kind = status.error_kind or ERROR_INTERNAL
                return f"error ({kind}): {status.error or 'unknown error'}"
            if result is None or result.summary is None:
                return LOADING
            try:
                headline = headline_of(result.decoded(), ident)
            except (ValueError, TypeError, KeyError) as exc:  # a bug: say so, do not wait
                return f"error (internal): {span.path}: no headline ({exc})"
        index.put(_listed(span), headline)
        return headline

    def _loaded(self, ident: Any) -> tuple[Any, Any]:
        """``loader.get(ident, 0)`` (which asks for a load), or only its state when the
        pass asks for nothing (:meth:`warm`: it must not reorder the preload)."""
        loader = self.workspace.loader
        if not self._asking and loader.status(ident).state != READY:
            return loader.status(ident), None
        return loader.get(ident, 0.0)

    def _run_diagnoses(self, index: HeadlineIndex, run: Run) -> list[HeadlineDiagnosis] | str:
        """A run of several workers' diagnoses, or :data:`LOADING` while a span is still
        being read: from the index while none of the run's files changed, else from the
        summaries the loader holds (unreadable spans left out), then put in it."""
        spans = [s for w in run.workers for s in w.spans]
        files = run_files(_listed(s) for s in spans)
        found = index.get_run(files)
        if found is not None:
            return found
        per_worker: dict[str, list[Any]] = {w.name: [] for w in run.workers}
        for span in spans:
            status, result = self._loaded(listed_identity(span))
            if status.state == ERROR:
                continue  # unreadable: left out, as report leaves it out
            if result is None or result.summary is None:
                return LOADING
            per_worker[span.worker].append(result.decoded())
        found = run_headline_diagnoses(list(per_worker.items()))
        index.put_run(files, found)
        return found

    def headlines(self, snapshot: Snapshot, ask: bool = True) -> HeadlinesPass:
        """The headline records of ``snapshot``'s runs (shown by their label); a complete
        pass is kept while the scans list the same files (a rescan that finds nothing
        new keeps it) and saves the index. Made once for concurrent requests (they wait
        on the lock, then find it kept). ``ask``: spans not loaded are asked for (a
        request); else only looked at (:meth:`warm`)."""
        with self._lock:
            self._asking = ask
            last = self._memo
            if last is not None and (
                last.snapshot is snapshot or last.snapshot.runs == snapshot.runs
            ):
                return last
            index = self.index()
            stored = self._stored_headlines(index, snapshot.runs)
            runs, skipped = assemble(
                snapshot.runs,
                lambda span: self._span_headline(index, span, stored),
                lambda run: self._run_diagnoses(index, run),
                label=self.workspace.run_label,
            )
            done = HeadlinesPass(snapshot, runs, skipped, LOADING not in skipped.values())
            if done.complete:
                index.save()
                self._memo = done
            return done

    def warm(self, snapshot: Snapshot) -> None:
        """Make the headline pass and the ranking of ``snapshot`` in a background thread
        (one at a time; a scan that comes meanwhile is warmed by the next call), so that
        the tab's first view (``/across_runs``, its landing page) finds them made. For a
        plugin that preloads (the loader reads every trace anyway). Raises nothing."""
        with self._lock:
            if self._warming:
                return
            self._warming = True

        def run() -> None:
            try:
                with _no_cyclic_gc():
                    self._ranking(snapshot, ask=False)
            except Exception:  # noqa: BLE001 (a bug: the request then says it)
                logger.exception("Kineto Insights: preparing the view across runs failed")
            finally:
                with self._lock:
                    self._warming = False

        threading.Thread(target=run, name="kineto-insights-headlines", daemon=True).start()

    def history(self, group_by: str | None, metrics: list[str]) -> bytes:
        """``/history``: the ``tb_kineto_insights.history/1`` document of the log
        directory (``compare.history.build_history``) of the last scan, as JSON.

        Raises:
            InvalidRequest: a bad ``group_by`` regex or metric.
        """
        metrics = metrics or list(hist.METRICS)
        snapshot = self.workspace.snapshot()
        params = (group_by, tuple(metrics))
        with _no_cyclic_gc():
            heads = self.headlines(snapshot)
            last = self._history
            if last is not None and last[0] is heads and last[1] == params:
                return last[2]  # same files listed, every run was read: same answer
            try:
                doc = hist.build_history(
                    heads.runs,
                    logdir=", ".join(self.workspace.sources),
                    group_by=group_by,
                    metrics=metrics,
                    skipped=heads.skipped,
                )
            except ValueError as exc:
                raise InvalidRequest(str(exc)) from None
        body = encode_json(doc)
        if heads.complete:
            self._history = (heads, params, body)
        return body

    def across_runs(
        self,
        query: str,
        offset: int,
        limit: int,
        *,
        sort: str = "worst",
        reverse: bool = False,
        severity: str = "",
    ) -> bytes:
        """``/across_runs``: one page of every run ranked worst first, or in another
        order, filtered (``compare.across_runs.page_of``), as JSON; the ranking of a
        complete pass is kept until the next scan.

        Raises:
            InvalidRequest: an unknown ``sort`` or ``severity``.
        """
        from tb_kineto_insights.compare import across_runs

        with _no_cyclic_gc():
            rows = self._ranking(self.workspace.snapshot())
        try:
            page = across_runs.page_of(
                rows, query, offset, limit, sort=sort, reverse=reverse, severity=severity
            )
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        return encode_json(page)

    def _ranking(self, snapshot: Snapshot, ask: bool = True) -> list[Any]:
        """Every run ranked worst first (``compare.across_runs.rank_runs``), made once
        per complete headline pass (concurrent requests wait for it: single-flight)."""
        from tb_kineto_insights.compare import across_runs

        with self._rank_lock:
            heads = self.headlines(snapshot, ask)
            ranked = self._ranked
            if ranked is not None and ranked[0] is heads:
                return ranked[1]
            rows = across_runs.rank_runs(heads.runs, heads.skipped)
            if heads.complete:
                self._ranked = (heads, rows)
            return rows
