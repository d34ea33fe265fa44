"""Span summaries through the shared cache, for the command line (``report``, ``diff``,
``check``) and anything else that summarises spans outside TensorBoard (a future
``index`` command): one call per span, answered from the cache when an entry for the
file's content is there, else read, analysed and stored.

Which cache (:func:`cli_cache_location`): ``--cache DIR`` (a path or an fsspec URL such
as ``s3://bucket/cache``; ``none``: no cache), else ``KINETO_INSIGHTS_CACHE_DIR`` (the
variable the TensorBoard plugin reads), else no cache: a one-off ``report`` writes
nothing anywhere unless asked to. Entries are the plugin's (``cache.py``), keyed on the
file's content, so a ``report`` on a copy of a log directory, or on the same log
directory mounted elsewhere, reuses what a TensorBoard or an earlier ``report``
computed, and the other way round.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.logdir.discovery import Span, Worker
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.schema.history import HeadlineDiagnosis, SpanHeadline
from tb_kineto_insights.store.cache import (
    DiskCache,
    Identity,
    entry_key,
    headline_of,
    settings_fingerprint,
)
from tb_kineto_insights.store.headline_index import HeadlineIndex
from tb_kineto_insights.store.parallel_summaries import changed_while_read as changed_while_read
from tb_kineto_insights.store.parallel_summaries import identity_of as identity_of
from tb_kineto_insights.store.settings import cli_cache_location as cli_cache_location
from tb_kineto_insights.summary import FAILED_IO, FAILED_TRACE, SpanFailed, SpanOk, SpanResult
from tb_kineto_insights.trace.errors import TraceIOError
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

__all__ = ["CachedSummaries", "changed_while_read", "cli_cache_location", "identity_of"]

logger = logging.getLogger(__name__)


class CachedSummaries:
    """Summaries of spans, through a :class:`~tb_kineto_insights.store.cache.DiskCache` when
    ``location`` is given.

    Attributes (counters, for the caller's log and for tests):
        parsed: spans read and analysed here.
        from_cache: spans answered from the cache.
        store_failures: entries that could not be written (the first is logged).
        headlines_read: headline records answered from the cache (:meth:`headline`).

    Raises (constructor):
        ValueError, ImportError: ``location`` is a URL whose protocol is unknown or
            whose fsspec driver is not installed.
    """

    def __init__(
        self,
        location: str | None,
        *,
        max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        self.max_json_bytes = max_json_bytes
        self.thresholds = thresholds
        self.settings = settings_fingerprint(max_json_bytes, thresholds)
        self.location = location
        self.cache = None if location is None else DiskCache(location, self.settings)
        self.parsed = 0
        self.from_cache = 0
        self.store_failures = 0
        self.headlines_read = 0

    def cached(self, span: Span) -> bool:
        """Whether the cache holds an entry (summary or reader error) for the span's
        content; reads the file's first and last MiB, not the entry. False without a
        cache or when the file cannot be read. (For a command that fills the cache:
        what is left to compute.)"""
        return self.cache is not None and self.cache.stored_kind(identity_of(span)) is not None

    def summarize(self, span: Span) -> SpanResult:
        """The span's :class:`~tb_kineto_insights.summary.SpanOk` or
        :class:`~tb_kineto_insights.summary.SpanFailed`, as
        :func:`tb_kineto_insights.summary.summarize_span` gives them, from the cache when
        it holds an entry for this content (a stored reader error included)."""
        return next(iter(self.summarize_all([span])))

    def summarize_all(self, spans: Sequence[Span]) -> Iterator[SpanResult]:
        """:meth:`summarize` of every span, in their order, each as soon as it and the
        ones before it are done: the cache is looked up here for each span first, then
        the spans it does not hold are read and analysed at once on every core
        (:func:`~tb_kineto_insights.store.parallel_summaries.summarize_spans`, largest
        first, which stores their entries)."""
        from tb_kineto_insights.store import parallel_summaries as ps

        found: dict[int, SpanResult] = {}
        tasks: list[ps.FileTask] = []
        for i, span in enumerate(spans):
            ident = identity_of(span)
            key = None
            if self.cache is not None:
                try:
                    key = entry_key(ident, self.settings)
                except TraceIOError as exc:
                    found[i] = SpanFailed(FAILED_IO, type(exc).__name__, str(exc), False)
                    continue
                stored = self.cache.load(ident, key)
                if stored is not None:
                    self.from_cache += 1
                    if stored.error is not None:
                        kind = stored.error_type or "TraceError"
                        found[i] = SpanFailed(FAILED_TRACE, kind, stored.error, True)
                    else:
                        found[i] = SpanOk(stored.decoded())
                    continue
            tasks.append(ps.FileTask(span, key))
        settings = ps.Settings(
            self.max_json_bytes,
            self.thresholds,
            self.location,
            self.settings,
        )
        results = ps.summarize_spans(tasks, settings)
        for i in range(len(spans)):
            if i not in found:  # not in the cache: the next computed span is this one
                result, warning = next(results)
                self.parsed += 1
                if warning is not None:
                    self._store_failed(warning)
                found[i] = result
            yield found.pop(i)

    def headline(self, span: Span) -> SpanHeadline | SpanFailed:
        """The span's headline
        record (:class:`~tb_kineto_insights.schema.history.SpanHeadline`). With a cache,
        first by the listed file (path, size, mtime: no byte of the trace read), then by
        content key (the file's first and last MiB), then from the cached summary, else
        the trace is summarised (and its summary and headline stored). Without a cache,
        from :meth:`summarize`."""
        return self.headlines([span])[0]

    def headlines(self, spans: Sequence[Span]) -> list[SpanHeadline | SpanFailed]:
        """:meth:`headline` of every span, in their order: the headline records found
        first, then the summaries of the others at once (:meth:`summarize_all`: on
        every core, largest first)."""
        out: dict[int, SpanHeadline | SpanFailed] = {}
        missing: list[int] = []
        for i, span in enumerate(spans):
            found = self._stored_headline(identity_of(span))
            if found is not None:
                self.headlines_read += 1
                out[i] = found
            else:
                missing.append(i)
        parsed_before = self.parsed
        summaries = self.summarize_all([spans[i] for i in missing])
        for i, result in zip(missing, summaries, strict=True):
            if isinstance(result, SpanFailed):
                out[i] = result
                parsed_before = self.parsed
                continue
            ident = identity_of(spans[i])
            headline = headline_of(result.summary, ident)
            # parsed here: its store (DiskCache.store_entry) wrote the headline already
            stored, parsed_before = self.parsed > parsed_before, self.parsed
            if not stored and self.cache is not None and self.cache.key(ident) is not None:
                try:
                    self.cache.store_headline(ident, self.cache.key(ident) or "", headline)
                except OSError:
                    self.store_failures += 1
            out[i] = headline
        return [out[i] for i in range(len(spans))]

    def run_headline_diagnoses(self, workers: Sequence[Worker]) -> list[HeadlineDiagnosis]:
        """The diagnoses of a run of several workers as ``report`` lists them
        (``summary.run_headline_diagnoses``: the view across ranks of every worker's
        readable spans, from :meth:`summarize`, so from the cache when it holds them);
        unreadable spans are left out, as ``report`` leaves them out."""
        from tb_kineto_insights import summary as summary_module  # the analysis: only here

        results = iter(self.summarize_all([span for w in workers for span in w.spans]))
        readable: list[tuple[str, list[Summary]]] = []
        for worker in workers:
            found = [x.summary for _ in worker.spans if isinstance(x := next(results), SpanOk)]
            readable.append((worker.name, found))
        return summary_module.run_headline_diagnoses(readable, self.thresholds)

    def headline_index(self, logdir: str) -> HeadlineIndex:
        """The headline index of log directory ``logdir`` in the cache
        (``store/headline_index.py``; in memory only without a cache). A local folder is
        named by its absolute path, a URL as given."""
        root = logdir if "://" in logdir else os.path.abspath(logdir)
        backend = None if self.cache is None else self.cache.backend
        return HeadlineIndex(backend, self.settings, root)

    def _stored_headline(self, ident: Identity) -> SpanHeadline | None:
        """The headline record the cache holds for the file (by listing, then by content
        key), or None."""
        if self.cache is None:
            return None
        found = self.cache.load_file_headline(ident)
        if found is not None:
            return found
        key = self.cache.key(ident)
        return None if key is None else self.cache.load_headline(ident, key)

    def _store_failed(self, message: str) -> None:
        """Count an entry that could not be written; the first is logged."""
        self.store_failures += 1
        if self.store_failures == 1:
            logger.warning("Kineto Insights: %s", message)
