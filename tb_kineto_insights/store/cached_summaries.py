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
from collections.abc import Sequence

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.timeline import encode_store
from tb_kineto_insights.logdir.discovery import Span, Worker
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.schema.history import HeadlineDiagnosis, SpanHeadline
from tb_kineto_insights.store.cache import (
    DiskCache,
    Identity,
    _entry_bytes,
    entry_key,
    headline_of,
    settings_fingerprint,
)
from tb_kineto_insights.store.headline_index import HeadlineIndex
from tb_kineto_insights.store.settings import cli_cache_location as cli_cache_location
from tb_kineto_insights.trace.errors import TraceError, TraceIOError
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

__all__ = ["CachedSummaries", "cli_cache_location", "identity_of"]

logger = logging.getLogger(__name__)

SummaryOrError = tuple[Summary | None, dict[str, str] | None]


def identity_of(span: Span, root: str = "") -> Identity:
    """The cache identity of a listed span: what discovery saw (for a local file: its
    target's device, inode, size and mtime_ns). ``root``: the log directory the file
    must lie in when opened (the plugin's rule); none for the command line, which reads
    the files it is given."""
    return Identity(
        span.path,
        span.size_bytes,
        span.mtime,
        device=span.device,
        inode=span.inode,
        mtime_ns=span.mtime_ns,
        root=root,
        version=span.version,
    )


def changed_while_read(ident: Identity) -> str | None:
    """For an object listed with a version (ETag/VersionId): a message when its version
    is no longer the listed one after the read, else None (the plugin's workers and the
    CLI's cache path both ask before storing a summary). The summary of bytes that
    may be another version's is then neither stored under the listed version's key nor
    served (issue 32 §5: an object overwritten while it was read got the new bytes'
    summary cached under the old key); the next scan lists the new version."""
    if not ident.version or "://" not in ident.path:
        return None
    from tb_kineto_insights.logdir.discovery import object_version

    try:
        now = object_version(ident.path)
    except Exception as exc:  # noqa: BLE001 (a driver's own error type)
        return f"{ident.path}: cannot check the object's version after reading it: {exc}"
    if now == ident.version:
        return None
    return (
        f"{ident.path}: the object changed while it was read (listed version "
        f"{ident.version}, now {now or 'none'}); not cached, read again at the next scan"
    )


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

    def summarize(self, span: Span) -> SummaryOrError:
        """``(summary, None)`` or ``(None, {"type", "message"})`` as
        :func:`tb_kineto_insights.summary.try_summarize_file` gives them, from the cache
        when it holds an entry for this content (a stored reader error included)."""
        ident = identity_of(span)
        key = None
        if self.cache is not None:
            try:
                key = entry_key(ident, self.settings)
            except TraceIOError as exc:
                return None, {"type": type(exc).__name__, "message": str(exc)}
            stored = self.cache.load(ident, key)
            if stored is not None:
                self.from_cache += 1
                if stored.error is not None:
                    kind = stored.error_type or "TraceError"
                    return None, {"type": kind, "message": stored.error}
                return stored.decoded(), None
        return self._parse(span, ident, key)

    def headline(self, span: Span) -> tuple[SpanHeadline | None, dict[str, str] | None]:
        """``(headline, None)`` or ``(None, {"type", "message"})``: the span's headline
        record (:class:`~tb_kineto_insights.schema.history.SpanHeadline`). With a cache,
        first by the listed file (path, size, mtime: no byte of the trace read), then by
        content key (the file's first and last MiB), then from the cached summary, else
        the trace is summarised (and its summary and headline stored). Without a cache,
        from :meth:`summarize`."""
        ident = identity_of(span)
        if self.cache is not None:
            found = self.cache.load_file_headline(ident)
            if found is not None:
                self.headlines_read += 1
                return found, None
            key = self.cache.key(ident)
            if key is not None:
                found = self.cache.load_headline(ident, key)
                if found is not None:
                    self.headlines_read += 1
                    return found, None
        parsed_before = self.parsed
        summary, error = self.summarize(span)
        if summary is None:
            return None, error
        headline = headline_of(summary, ident)
        # parsed here: its store (DiskCache.store_entry) wrote the headline already
        stored = self.parsed > parsed_before
        if not stored and self.cache is not None and self.cache.key(ident) is not None:
            try:
                self.cache.store_headline(ident, self.cache.key(ident) or "", headline)
            except OSError:
                self.store_failures += 1
        return headline, None

    def run_headline_diagnoses(self, workers: Sequence[Worker]) -> list[HeadlineDiagnosis]:
        """The diagnoses of a run of several workers as ``report`` lists them
        (``summary.run_headline_diagnoses``: the view across ranks of every worker's
        readable spans, from :meth:`summarize`, so from the cache when it holds them);
        unreadable spans are left out, as ``report`` leaves them out."""
        from tb_kineto_insights import summary as summary_module  # the analysis: only here

        readable: list[tuple[str, list[Summary]]] = []
        for worker in workers:
            found = [x for span in worker.spans if (x := self.summarize(span)[0]) is not None]
            readable.append((worker.name, found))
        return summary_module.run_headline_diagnoses(readable, self.thresholds)

    def headline_index(self, logdir: str) -> HeadlineIndex:
        """The headline index of log directory ``logdir`` in the cache
        (``store/headline_index.py``; in memory only without a cache). A local folder is
        named by its absolute path, a URL as given."""
        root = logdir if "://" in logdir else os.path.abspath(logdir)
        backend = None if self.cache is None else self.cache.backend
        return HeadlineIndex(backend, self.settings, root)

    def _parse(self, span: Span, ident: Identity, key: str | None) -> SummaryOrError:
        self.parsed += 1
        logger.info("Kineto Insights: reading %s", span.path)
        try:
            from tb_kineto_insights import summary as summary_module  # the analysis: only here

            summary, store = summary_module.summarize_file_with_timeline(
                span.path, max_json_bytes=self.max_json_bytes, thresholds=self.thresholds
            )
        except TraceIOError as exc:  # never stored: retried next time
            return None, {"type": type(exc).__name__, "message": str(exc)}
        except TraceError as exc:
            self._store(ident, key, _entry_bytes(ident, self.settings, error=exc, key=key), True)
            return None, {"type": type(exc).__name__, "message": str(exc)}
        except (RecursionError, MemoryError, ValueError, TypeError, KeyError, IndexError) as exc:
            message = f"{span.path}: internal error while analysing ({type(exc).__name__}: {exc})"
            return None, {"type": "AnalysisError", "message": message}
        changed = changed_while_read(ident)
        if changed is not None:  # another version's bytes: neither stored nor answered
            return None, {"type": "TraceIOError", "message": changed}
        if self.cache is not None:
            # the timelines too, so a TensorBoard sharing the cache finds them
            data = _entry_bytes(
                ident, self.settings, summary=summary, key=key, timeline=encode_store(store)
            )
            self._store(ident, key, data, False, summary)
        return summary, None

    def _store(
        self,
        ident: Identity,
        key: str | None,
        data: bytes,
        is_error: bool,
        summary: Summary | None = None,
    ) -> None:
        if self.cache is None:
            return
        try:
            self.cache.store_entry(ident, data, is_error=is_error, key=key, summary=summary)
        except (OSError, ValueError) as exc:
            self.store_failures += 1
            if self.store_failures == 1:
                logger.warning(
                    "Kineto Insights: cannot write the cache %s (%s)", self.cache.location, exc
                )
