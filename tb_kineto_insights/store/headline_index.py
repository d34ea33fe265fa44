"""One headline index per scanned log directory: the headline records
(:class:`~tb_kineto_insights.schema.history.SpanHeadline`) of every listed span a
``history`` or the tab's views across runs used, in one file of the cache folder, so that
a history of 10,000 runs opens one file, not 10,000.

Layout (beside the per-span headlines of ``cache.py``)::

    <folder>/headlines/v<ANALYSIS_VERSION>/index/<SHA-256 of [INDEX_FORMAT, settings, root]>.index

One line with the hex SHA-256 of the rest, then the JSON wrapper ``{"format",
"analysis_version", "settings", "root", "entries": [[etag, headline], ...], "runs":
[[[listed file, ...], [diagnosis, ...]], ...]}``. ``runs``: per run of several workers,
its diagnoses as ``report`` lists them (``summary.run_headline_diagnoses``: they need
the view across ranks, so every worker's summary), keyed by all of the run's listed
files (sorted): computed once, and again only when one of those files changes, is
added or removed. An entry is
used only for the listed file it was made from: the same path, size, mtime and ETag
(``etag``: the object store's version, ``""`` on a filesystem), as the per-file headline
(``DiskCache.file_headline_name``). A file whose checksum, format, analysis version,
settings or root differ, or whose entries do not fit the Struct, is ignored as a whole
(and written again on the next :meth:`HeadlineIndex.save`).

Keeping it current: the caller looks each listed span up (:meth:`HeadlineIndex.get`),
finds the missing ones elsewhere (the per-file headline, the summary, or a new parse;
``CachedSummaries.headline``) and :meth:`~HeadlineIndex.put` s them; :meth:`save` then
writes the index again when anything was added, or when an entry of a file no longer
listed (changed, removed) is to be dropped. A run added to the log directory costs its
own headline and one rewrite of the index; no other run's headline is computed or read
again. Two processes saving at once: the last rename (or PUT) wins, and the entries only
the other one added are found again by the next history from their per-file headlines
(one small read each) and saved then: the index is a shortcut, never the only copy.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from tb_kineto_insights.analysis.version import ANALYSIS_VERSION
from tb_kineto_insights.schema.history import HeadlineDiagnosis, SpanHeadline
from tb_kineto_insights.store import backends as cache_store
from tb_kineto_insights.store.cache import encode_json
from tb_kineto_insights.store.checked import MAX_FRACTION, headline_problem
from tb_kineto_insights.store.seal import seal_problem, sealed, unsealed

logger = logging.getLogger(__name__)

#: Version of the index file's wrapper (2: ``runs``).
INDEX_FORMAT = 2

#: (path, size in bytes, mtime in s, ETag) of a listed file: what an entry is valid for.
ListedFile = tuple[str, int, float, str]
#: Every listed file of a run, sorted: what a run's entry is valid for.
RunFiles = tuple[ListedFile, ...]


class _IndexFile(msgspec.Struct):
    format: int
    analysis_version: int
    settings: str
    root: str
    entries: list[tuple[str, SpanHeadline]]
    runs: list[tuple[list[ListedFile], list[HeadlineDiagnosis]]] = []


_DECODER = msgspec.json.Decoder(_IndexFile)


def run_files(files: Iterable[Sequence[Any]]) -> RunFiles:
    """A run's entry key: its listed files ``(path, size in bytes, mtime in s, ETag)``,
    sorted (as tuples, so the key read back from JSON equals the one built)."""
    return tuple(sorted((str(p), int(n), float(t), str(e)) for p, n, t, e in files))


def index_name(settings: str, root: str) -> str:
    """The index's name in the cache folder for log directory ``root`` (as the caller
    lists it: an absolute local path or a URL) under analysis ``settings``."""
    digest = hashlib.sha256(encode_json([INDEX_FORMAT, settings, root])).hexdigest()
    return f"headlines/v{ANALYSIS_VERSION}/index/{digest}.index"


class HeadlineIndex:
    """The headline index of one log directory in a cache folder (module docstring).

    Args:
        backend: the cache folder's store (``DiskCache.backend``); None: kept in memory
            only (no cache folder), :meth:`save` writes nothing.
        settings: the analysis settings' fingerprint (``cache.settings_fingerprint``).
        root: the log directory as listed (absolute local path, or URL).

    Attributes:
        loaded: entries read from the index file (0 when there was none, or it was
            stale or damaged).
        added: entries :meth:`put` since it was read.
    """

    def __init__(self, backend: cache_store.CacheStore | None, settings: str, root: str) -> None:
        self.backend = backend
        self.settings = settings
        self.root = root
        self.name = index_name(settings, root)
        self._entries: dict[ListedFile, SpanHeadline] = {}
        self._used: set[ListedFile] = set()
        self._runs: dict[RunFiles, list[HeadlineDiagnosis]] = {}
        self._runs_used: set[RunFiles] = set()
        self.added = 0
        self.loaded = 0
        if backend is not None:
            self._entries, self._runs = self._read(backend)
            self.loaded = len(self._entries)

    def _read(
        self, backend: cache_store.CacheStore
    ) -> tuple[dict[ListedFile, SpanHeadline], dict[RunFiles, list[HeadlineDiagnosis]]]:
        try:
            data = backend.read(self.name)
        except OSError as exc:
            logger.warning("Kineto Insights: cannot read the headline index %s: %s", self.name, exc)
            return {}, {}
        if data is None:
            return {}, {}
        body = unsealed(data)
        if body is None:
            self._damaged(seal_problem())
            return {}, {}
        try:
            stored = _DECODER.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self._damaged(str(exc))
            return {}, {}
        if (
            stored.format != INDEX_FORMAT
            or stored.analysis_version != ANALYSIS_VERSION
            or stored.settings != self.settings
            or stored.root != self.root
        ):
            return {}, {}
        entries = {}
        dropped: list[str] = []
        for etag, h in stored.entries:
            problem = headline_problem(h)
            if problem is None:
                entries[(h.path, h.size_bytes, h.mtime, etag)] = h
            else:
                dropped.append(f"{h.path}: {problem}")
        runs = {}
        for files, found in stored.runs:
            problem = next(
                (
                    f"impact_fraction {d.impact_fraction!r} of {d.id!r}"
                    for d in found
                    if not 0.0 <= d.impact_fraction <= MAX_FRACTION
                ),
                None,
            )
            if problem is None:
                runs[run_files(files)] = found
            else:
                dropped.append(
                    f"a run's diagnoses ({files[0][0] if files else 'no file'}): {problem}"
                )
        if dropped:  # found again elsewhere and put back: the index is then written again
            self._damaged(
                f"{len(dropped)} of {len(stored.entries) + len(stored.runs)} entries out of "
                f"range, the first {dropped[0]}"
            )
        return entries, runs

    def _damaged(self, problem: str) -> None:
        """One log line naming the index file and what is wrong with it."""
        where = self.backend.location if self.backend is not None else "(memory)"
        logger.warning(
            "Kineto Insights: damaged headline index %s/%s (%s): computing it again",
            where,
            self.name,
            problem,
        )

    def get_run(self, files: RunFiles) -> list[HeadlineDiagnosis] | None:
        """The diagnoses stored for a run of several workers whose listed files are
        ``files`` (:func:`run_files`), or None; marks the entry as in use."""
        found = self._runs.get(files)
        if found is not None:
            self._runs_used.add(files)
        return found

    def put_run(self, files: RunFiles, diagnoses: list[HeadlineDiagnosis]) -> None:
        """Add the diagnoses of a run of several workers (``report``'s list,
        ``summary.run_headline_diagnoses``) for its listed ``files``."""
        if self._runs.get(files) != diagnoses:
            self.added += 1
        self._runs[files] = list(diagnoses)
        self._runs_used.add(files)

    def get(self, listed: ListedFile) -> SpanHeadline | None:
        """The headline stored for this listed file (path, size, mtime, ETag), or None;
        marks the entry as in use (kept by :meth:`save`)."""
        found = self._entries.get(listed)
        if found is not None:
            self._used.add(listed)
        return found

    def put(self, listed: ListedFile, headline: SpanHeadline) -> None:
        """Add (or replace) the headline of a listed file; its ``path``/``size_bytes``/
        ``mtime`` become the listed file's."""
        path, size, mtime, _ = listed
        if (headline.path, headline.size_bytes, headline.mtime) != (path, size, mtime):
            headline = msgspec.structs.replace(headline, path=path, size_bytes=size, mtime=mtime)
        if self._entries.get(listed) != headline:
            self.added += 1
        self._entries[listed] = headline
        self._used.add(listed)

    def save(self) -> bool:
        """Write the index again (atomically: one rename or PUT) with the entries looked
        up or added since the last save (or the read), when any was added or any stored
        one went unused (a file changed or removed); True when written. Either way the
        next pass of look-ups starts afresh. A folder that cannot be written
        is logged, not raised: the index is only a shortcut."""
        stale = len(self._entries) - len(self._used) + len(self._runs) - len(self._runs_used)
        if self.backend is None or (self.added == 0 and stale == 0):
            self._used = set()
            self._runs_used = set()
            return False
        kept = [(listed[3], self._entries[listed]) for listed in sorted(self._used)]
        runs = [(list(files), self._runs[files]) for files in sorted(self._runs_used)]
        wrapper = {
            "format": INDEX_FORMAT,
            "analysis_version": ANALYSIS_VERSION,
            "settings": self.settings,
            "root": self.root,
            "entries": kept,
            "runs": runs,
        }
        try:
            self.backend.write(self.name, sealed(encode_json(wrapper)))
        except OSError as exc:
            logger.warning(
                "Kineto Insights: cannot write the headline index %s: %s", self.name, exc
            )
            return False
        self._entries = {k: self._entries[k] for k in self._used}
        self._used = set()
        self._runs = {k: self._runs[k] for k in self._runs_used}
        self._runs_used = set()
        self.added = 0
        return True
