"""Summaries on disk, and loading them in the background with a bounded worker pool.

Two parts, both used by the TensorBoard plugin (and usable from anywhere else):

:class:`DiskCache`
    One entry per trace *content*, named by its key (:func:`entry_key`: a SHA-256 of the
    cache format, the file's content key — size, mtime or the object store's ETag, and
    an XXH3-128 of its first and last MiB, see ``content_id.py``; no path, device or
    inode — and the analysis settings: byte cap, thresholds), in a folder per
    :data:`~tb_kineto_insights.summary.ANALYSIS_VERSION`. Layout::

        <folder>/v<ANALYSIS_VERSION>/<key>.summary  a summary
        <folder>/v<ANALYSIS_VERSION>/<key>.error    a verdict about the file's content
                                                    (a TraceError other than TraceIOError)

    So one cache folder serves a log directory wherever it is mounted: a teammate's
    TensorBoard on ``/mnt/team/logs``, another's on ``/data/logs``, ``report`` and
    ``diff`` on a copy, all find the summaries any of them computed. The file's listed
    identity (path, ``st_dev``, ``st_ino``, ``st_mtime_ns``, root) still decides whether
    a file changed (and its content key is then computed again) and where it may be
    opened (``trace/confine.py``).

    Each file is a line with the hex SHA-256 of the rest, then the JSON wrapper, which
    records the key. On read the checksum and the key are verified: a file with any
    changed, missing or extra byte, or written for another content, is deleted and
    the summary computed again; it is never served. I/O errors (missing file,
    permission, storage errors, a refused open) are never stored: they are retried.

    The folder is a local or NFS path, or an fsspec URL (``s3://bucket/cache``; see
    ``cache_store.py``). Entries are written atomically (a temporary file in the same
    folder then ``os.replace``; one PUT on object storage), so a reader never sees half
    a file, and several processes can share one folder; local files are created with
    mode 0666 less the umask (0644 or 0664), so a teammate can read them. The folder is
    ``KINETO_INSIGHTS_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/tb-kineto-insights``,
    else ``~/.cache/tb-kineto-insights``.

    Concurrent work on one file: duplicates are accepted, not locked against. Before a
    worker parses a file it looks in the cache once more (another TensorBoard may have
    stored it since it was queued), so two processes parse the same file only when they
    start it within the same moments; both then write a complete, equivalent entry, and
    the last rename (or PUT) wins. A claim file with a lease was not chosen: on NFS and
    object storage it needs clocks that agree and a rule for a holder that died, and
    when it goes wrong a span waits for nobody; the duplicate costs one parse, once.

:class:`SummaryLoader`
    States per file identity (``queued``, ``loading``, ``ready``, ``error``, or
    ``not_loaded`` for a file nobody asked for yet), a priority queue (a request from
    the page goes before background preloading, small files before big ones), and at
    most ``workers`` worker processes (default :data:`DEFAULT_WORKERS`, or
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
    error that the next request retries. A file whose identity carries a ``root`` is
    opened under ``trace/confine.py``'s rule: inside that folder, and the very file
    discovery listed.
    Status questions never wait for a load: they are dictionary look-ups under a lock
    that is never held during I/O or analysis.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import hashlib
import heapq
import itertools
import logging
import math
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from tb_kineto_insights import cache_store
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.content_id import content_key_cached
from tb_kineto_insights.summary import ANALYSIS_VERSION, summarize_file
from tb_kineto_insights.trace.confine import Rule, confined
from tb_kineto_insights.trace.errors import TraceError, TraceIOError
from tb_kineto_insights.trace.source import (
    DEFAULT_MAX_JSON_BYTES,
    ProgressCallback,
    reading_progress,
)

__all__ = [
    "CACHE_DIR_ENV",
    "CACHE_FORMAT",
    "DEFAULT_LOAD_TIMEOUT_S",
    "DEFAULT_LOAD_TIMEOUT_S_PER_MIB",
    "DEFAULT_WORKERS",
    "ERROR_IO",
    "ERROR_TIMEOUT",
    "LOAD_TIMEOUT_ENV",
    "LOAD_TIMEOUT_PER_MIB_ENV",
    "LoadDeadline",
    "WORKERS_ENV",
    "DiskCache",
    "Identity",
    "LoadResult",
    "SpanStatus",
    "SummaryLoader",
    "cache_dir_from_env",
    "decode_entry",
    "encode_json",
    "entry_key",
    "json_safe",
    "load_deadline_from_env",
    "settings_fingerprint",
    "workers_from_env",
]

logger = logging.getLogger(__name__)

#: Environment variable: the cache folder.
CACHE_DIR_ENV = "KINETO_INSIGHTS_CACHE_DIR"
#: Environment variable: how many worker processes load traces (0: a thread instead).
WORKERS_ENV = "KINETO_INSIGHTS_WORKERS"
#: At most this many worker processes by default (fewer on a one-core machine).
DEFAULT_WORKERS = 2
#: Environment variables: a load's deadline, base seconds and seconds per MiB of file.
LOAD_TIMEOUT_ENV = "KINETO_INSIGHTS_LOAD_TIMEOUT_S"
LOAD_TIMEOUT_PER_MIB_ENV = "KINETO_INSIGHTS_LOAD_TIMEOUT_S_PER_MIB"
DEFAULT_LOAD_TIMEOUT_S = 120.0
DEFAULT_LOAD_TIMEOUT_S_PER_MIB = 2.0
MIB = 1024**2
#: Version of the cache-file wrapper (not of the summary: that is ANALYSIS_VERSION).
#: 2: a checksum line before the JSON, the identity's key inside, inode/device/mtime_ns
#: in the identity. 3: keyed on the content identity (``content_id.py``), not the path.
CACHE_FORMAT = 3
#: Priorities: a page waiting for a span goes first, preloading after.
PRIORITY_REQUEST = 0
PRIORITY_PRELOAD = 1

QUEUED, LOADING, READY, ERROR, NOT_LOADED = "queued", "loading", "ready", "error", "not_loaded"

#: Error kinds: ``trace`` (the reader's TraceError about the file's content: the file is
#: bad, remembered on disk until it changes), ``io`` (the file could not be opened or
#: read, or was refused: missing, permission, storage error, outside the log directory),
#: ``internal`` (a bug in the analysis), ``worker`` (the worker process died, e.g. killed
#: for memory) and ``timeout`` (the load passed its deadline and its worker was killed);
#: all but ``trace`` are kept in memory only and retried when the span is asked for again.
ERROR_TRACE, ERROR_INTERNAL, ERROR_WORKER = "trace", "internal", "worker"
ERROR_IO, ERROR_TIMEOUT = "io", "timeout"


# --------------------------------------------------------------------------- settings


def cache_dir_from_env(environ: Mapping[str, str] | None = None) -> Path:
    """``KINETO_INSIGHTS_CACHE_DIR``, else ``$XDG_CACHE_HOME/tb-kineto-insights``, else
    ``~/.cache/tb-kineto-insights`` (``~`` expanded)."""
    env = os.environ if environ is None else environ
    raw = (env.get(CACHE_DIR_ENV) or "").strip()
    if raw:
        return Path(raw).expanduser()
    xdg = (env.get("XDG_CACHE_HOME") or "").strip()
    base = Path(xdg).expanduser() if xdg else Path("~/.cache").expanduser()
    return base / "tb-kineto-insights"


def default_workers() -> int:
    return max(1, min(DEFAULT_WORKERS, os.cpu_count() or 1))


def workers_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``KINETO_INSIGHTS_WORKERS`` as an integer ≥ 0; the default (at most 2) when unset,
    and with a warning when it is not such an integer."""
    raw = (os.environ if environ is None else environ).get(WORKERS_ENV)
    if raw is None or not raw.strip():
        return default_workers()
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        logger.warning(
            "%s=%r is not a whole number >= 0; using %d", WORKERS_ENV, raw, default_workers()
        )
        return default_workers()
    return value


@dataclass(frozen=True)
class LoadDeadline:
    """How long one load in a worker process may take: ``base_s + per_mib_s × (stored
    file size in MiB)`` seconds (compressed size for gzip). Past it the worker process
    is killed (also when it is stopped, ``SIGSTOP``, or stuck) and replaced, and the
    span is an error of kind ``timeout`` that the next request retries.

    The defaults (120 s + 2 s per MiB) leave a wide margin over real loads: a clean
    trace reads at tens of MiB of stored file per second, and the pathological inputs
    of issue 13 (a 625 KB gzip of 27.7 MB JSON) must read within 3x of a clean file of
    the same size. A total of 0 or less means no deadline.
    """

    base_s: float = DEFAULT_LOAD_TIMEOUT_S
    per_mib_s: float = DEFAULT_LOAD_TIMEOUT_S_PER_MIB

    def for_size(self, size_bytes: int) -> float | None:
        """The deadline in seconds for a file of ``size_bytes``, or None (no deadline)."""
        total = self.base_s + self.per_mib_s * max(0, size_bytes) / MIB
        return total if math.isfinite(total) and total > 0 else None


def _seconds_from_env(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        logger.warning("%s=%r is not a number of seconds >= 0; using %s", name, raw, default)
        return default
    return value


def load_deadline_from_env(environ: Mapping[str, str] | None = None) -> LoadDeadline:
    """``KINETO_INSIGHTS_LOAD_TIMEOUT_S`` and ``KINETO_INSIGHTS_LOAD_TIMEOUT_S_PER_MIB``
    (finite numbers >= 0; each defaults, with a warning when it is not such a number)."""
    env = os.environ if environ is None else environ
    return LoadDeadline(
        _seconds_from_env(env, LOAD_TIMEOUT_ENV, DEFAULT_LOAD_TIMEOUT_S),
        _seconds_from_env(env, LOAD_TIMEOUT_PER_MIB_ENV, DEFAULT_LOAD_TIMEOUT_S_PER_MIB),
    )


def settings_fingerprint(max_json_bytes: int, thresholds: Thresholds) -> str:
    """What besides the file and ANALYSIS_VERSION changes a summary: part of cache keys."""
    return f"max_json_bytes={int(max_json_bytes)};thresholds={thresholds!r}"


# --------------------------------------------------------------------------- JSON


def json_safe(obj: Any) -> Any:
    """A copy of ``obj`` that ``json.dumps`` writes as strict JSON: NaN and ±inf become
    ``None``, numpy scalars and arrays become Python numbers and lists, tuples and sets
    become lists, dict keys become strings."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (np.ndarray, np.generic)):
        return json_safe(obj.tolist())
    return obj


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)):
        return obj.tolist()
    raise NotImplementedError(f"cannot write {type(obj).__name__} as JSON")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def encode_json(obj: Any) -> bytes:
    """Strict JSON bytes (UTF-8): NaN and ±inf are written as ``null``, numpy values as
    numbers and lists, non-string keys as strings."""
    return _ENCODER.encode(obj)


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True, order=True)
class Identity:
    """A trace file as discovery saw it: another size, mtime, device or inode is another
    file.

    Attributes:
        path: local path or fsspec URL.
        size_bytes: size in bytes (compressed size for gzip).
        mtime: modification time, seconds since the epoch (0.0 when unknown).
        device, inode, mtime_ns: ``st_dev``, ``st_ino``, ``st_mtime_ns`` of a local file
            (of a symlink's target); 0 for other filesystems. When ``inode`` is set, the
            opened file must have exactly this identity (see ``trace/confine.py``).
        root: the real path of the log directory the file must lie in when it is
            opened; ``""``: no containment rule (fsspec URLs, the CLI). Not part of the
            identity (equality, hash, cache key).
        version: the object store's ETag (and VersionId) as listed; ``""`` when none.
        content: the content key when already known (see ``content_id.py``); ``""``:
            computed from the file when first needed, once per identity.

    All of these decide whether a listed file changed; only the *content key* (size,
    mtime or ETag, and a hash of the file's first and last MiB) goes into the cache key,
    never the path, device or inode: a copy of the file elsewhere, or the same file
    mounted at another path, finds the same cache entry.
    """

    path: str
    size_bytes: int
    mtime: float
    device: int = 0
    inode: int = 0
    mtime_ns: int = 0
    root: str = field(default="", compare=False)
    version: str = ""
    content: str = ""

    def content_key(self) -> str:
        """The file's content key (:func:`tb_kineto_insights.content_id.content_key`),
        computed once per identity and process.

        Raises:
            TraceIOError: the file cannot be read (missing, refused, storage error).
        """
        if self.content:
            return self.content
        freshness = (
            self.path,
            self.size_bytes,
            self.mtime,
            self.device,
            self.inode,
            self.mtime_ns,
            self.version,
        )
        return content_key_cached(
            freshness,
            self.path,
            self.size_bytes,
            self.mtime,
            self.version,
            root=self.root,
            file_identity=self.file_identity(),
        )

    def file_identity(self) -> tuple[int, int, int, int] | None:
        """``(st_dev, st_ino, st_size, st_mtime_ns)`` an opened file must have; None when
        not known (not a local file)."""
        if not self.inode:
            return None
        return (self.device, self.inode, self.size_bytes, self.mtime_ns)


class _ErrorInfo(msgspec.Struct):
    type: str
    message: str


class _Entry(msgspec.Struct, forbid_unknown_fields=False):
    format: int
    analysis_version: int
    key: str
    settings: str
    path: str
    size_bytes: int
    mtime: float
    created: float = 0.0
    elapsed_s: float = 0.0
    summary: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    error: _ErrorInfo | None = None


_ENTRY_DECODER = msgspec.json.Decoder(_Entry)
_PANELS_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])


@dataclass(frozen=True)
class LoadResult:
    """A loaded summary (``summary`` and ``panels`` are raw JSON, ready to send) or a
    reader error (``error``, the TraceError's message, naming the file)."""

    summary: bytes | None
    panels: Mapping[str, bytes]
    error: str | None
    error_type: str | None
    size: int

    def decoded(self) -> dict[str, Any]:
        """The summary as Python objects (raises ValueError for an error result)."""
        if self.summary is None:
            raise ValueError(self.error or "no summary")
        value = msgspec.json.decode(self.summary)
        if not isinstance(value, dict):
            raise ValueError("summary is not a JSON object")
        return value

    def panel(self, name: str) -> Any:
        """One panel as Python objects, or None when absent."""
        raw = self.panels.get(name)
        return None if raw is None else msgspec.json.decode(raw)


def entry_key(ident: Identity, settings: str) -> str:
    """The key of a file's content under some analysis settings: the SHA-256 (hex) of
    ``[CACHE_FORMAT, content key, settings]`` as JSON, where the content key
    (``content_id.py``) is size, mtime or ETag and an XXH3-128 of the stored file's
    first and last MiB: no path, device or inode. It names the cache file (in the
    folder of the ``ANALYSIS_VERSION``) and is recorded inside it.

    Raises:
        TraceIOError: the file cannot be read to compute its content key.
    """
    key = encode_json([CACHE_FORMAT, ident.content_key(), settings])
    return hashlib.sha256(key).hexdigest()


#: Length of the checksum line that starts a cache entry (hex SHA-256 and a newline).
_CHECKSUM_BYTES = 64


def _sealed(body: bytes) -> bytes:
    """``body`` preceded by the hex SHA-256 of ``body`` and a newline."""
    return hashlib.sha256(body).hexdigest().encode("ascii") + b"\n" + body


def _unsealed(data: bytes) -> bytes | None:
    """The body of a sealed entry, or None when its checksum line does not match it
    exactly (any changed, missing or extra byte)."""
    digest, body = data[:_CHECKSUM_BYTES], data[_CHECKSUM_BYTES + 1 :]
    if data[_CHECKSUM_BYTES : _CHECKSUM_BYTES + 1] != b"\n":
        return None
    if hashlib.sha256(body).hexdigest().encode("ascii") != digest:
        return None
    return body


def _entry_bytes(
    ident: Identity,
    settings: str,
    *,
    summary: Any = None,
    error: TraceError | None = None,
    elapsed_s: float = 0.0,
    key: str | None = None,
) -> bytes:
    """A cache entry: a checksum line, then the JSON wrapper (format, versions, the
    identity's :func:`entry_key` (``key`` when already computed), the path it was
    computed from (for people reading the folder; not checked), and the summary or the
    reader's error)."""
    wrapper: dict[str, Any] = {
        "format": CACHE_FORMAT,
        "analysis_version": ANALYSIS_VERSION,
        "key": entry_key(ident, settings) if key is None else key,
        "settings": settings,
        "path": ident.path,
        "size_bytes": ident.size_bytes,
        "mtime": ident.mtime,
        "created": time.time(),
        "elapsed_s": elapsed_s,
    }
    if error is not None:
        wrapper["error"] = {"type": type(error).__name__, "message": str(error)}
    else:
        wrapper["summary"] = summary
    return _sealed(encode_json(wrapper))


def decode_entry(
    data: bytes, ident: Identity, settings: str, key: str | None = None
) -> LoadResult | None:
    """A cache entry's content as a LoadResult; None when its checksum does not match
    (any flipped, missing or extra byte), or it was written by another format or
    analysis version, for another content or settings (its recorded key; ``key`` when
    already computed, else :func:`entry_key`, None when the file cannot be read for
    it), or it records an error that is not about the file's content (an I/O error).
    The path recorded in the entry is not checked: a copy of the file elsewhere is the
    same content."""
    body = _unsealed(data)
    if body is None:
        return None
    if key is None:
        try:
            key = entry_key(ident, settings)
        except TraceIOError:
            return None
    try:
        entry = _ENTRY_DECODER.decode(body)
        if (
            entry.format != CACHE_FORMAT
            or entry.analysis_version != ANALYSIS_VERSION
            or entry.settings != settings
            or entry.key != key
        ):
            return None
        if entry.error is not None:
            if entry.error.type == TraceIOError.__name__:
                return None  # never a verdict about the content: read again
            return LoadResult(None, {}, entry.error.message, entry.error.type, len(data))
        summary = bytes(entry.summary)
        if summary == b"null":
            return None
        panels = {k: bytes(v) for k, v in _PANELS_DECODER.decode(summary).items()}
        if entry.path != ident.path:
            summary = _relabelled(panels, ident.path)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError):
        return None
    return LoadResult(summary, panels, None, None, len(data))


def _relabelled(panels: dict[str, bytes], path: str) -> bytes:
    """An entry computed from a copy of the file (another path, same content): the
    health panel's ``path`` becomes the path asked for (``panels`` is changed in place);
    returns the whole summary re-assembled from the panels."""
    health = msgspec.json.decode(panels.get("health", b"null"))
    if isinstance(health, dict) and "path" in health:
        health["path"] = path
        panels["health"] = encode_json(health)
    return encode_json({name: msgspec.Raw(raw) for name, raw in panels.items()})


# --------------------------------------------------------------------------- disk cache


_create_temporary = cache_store._create_temporary
_write_atomic = cache_store.write_atomic


class DiskCache:
    """Summaries (and reader errors) in a cache folder, one file per trace content.

    Args:
        folder: the cache folder: a local or NFS path (created on first write), or an
            fsspec URL (``s3://bucket/cache``); see ``cache_store.py``.
        settings: :func:`settings_fingerprint` of the analysis settings in force.

    Raises:
        ValueError, ImportError: a URL whose protocol is unknown or whose fsspec driver
            is not installed.
    """

    def __init__(self, folder: str | os.PathLike[str], settings: str) -> None:
        self.backend = cache_store.open_store(folder)
        self.location = self.backend.location
        self.folder: Path | str = self.location
        if isinstance(self.backend, cache_store.LocalStore):
            self.folder = self.backend.folder
        self.settings = settings
        self._versioned = f"v{ANALYSIS_VERSION}"

    def key(self, ident: Identity) -> str | None:
        """The entry key (:func:`entry_key`); None when the file cannot be read for it."""
        try:
            return entry_key(ident, self.settings)
        except TraceIOError:
            return None

    def _name(self, key: str, suffix: str) -> str:
        return f"{self._versioned}/{key}{suffix}"

    def _local(self, name: str) -> Path:
        if not isinstance(self.backend, cache_store.LocalStore):
            raise TypeError(f"the cache {self.location} is not a local folder")
        return self.backend.path(name)

    def summary_file(self, ident: Identity) -> Path:
        """The summary's path in a local cache folder (TypeError for a URL)."""
        return self._local(self._name(entry_key(ident, self.settings), ".summary"))

    def error_file(self, ident: Identity) -> Path:
        """The error entry's path in a local cache folder (TypeError for a URL)."""
        return self._local(self._name(entry_key(ident, self.settings), ".error"))

    def stored_kind(self, ident: Identity, key: str | None = None) -> str | None:
        """``"error"``, ``"summary"`` or None: what is stored for the file (entries are
        not read)."""
        key = key or self.key(ident)
        if key is None:
            return None
        if self.backend.exists(self._name(key, ".error")):
            return "error"
        if self.backend.exists(self._name(key, ".summary")):
            return "summary"
        return None

    def has(self, ident: Identity) -> bool:
        """Whether a summary or an error is stored (files are not read)."""
        return self.stored_kind(ident) is not None

    def load_entry(self, ident: Identity, key: str | None = None) -> bytes | None:
        """The stored entry's bytes when they pass :func:`decode_entry`, else None (a
        corrupt or stale entry is deleted, so the next :meth:`store` writes it again)."""
        key = key or self.key(ident)
        if key is None:
            return None
        for name in (self._name(key, ".summary"), self._name(key, ".error")):
            try:
                data = self.backend.read(name)
            except OSError as exc:
                logger.warning(
                    "Kineto Insights: cannot read cache file %s/%s: %s", self.location, name, exc
                )
                continue
            if data is None:
                continue
            if decode_entry(data, ident, self.settings, key) is not None:
                return data
            logger.warning(
                "Kineto Insights: dropping corrupt or stale cache file %s/%s", self.location, name
            )
            self.backend.delete(name)
        return None

    def load(self, ident: Identity, key: str | None = None) -> LoadResult | None:
        """The stored result; None when there is none, or it is unreadable or fails
        :func:`decode_entry`'s checks (a corrupt file is then deleted, and the next
        :meth:`store` writes it again)."""
        key = key or self.key(ident)
        data = self.load_entry(ident, key)
        return None if data is None else decode_entry(data, ident, self.settings, key)

    def store_entry(
        self, ident: Identity, data: bytes, *, is_error: bool, key: str | None = None
    ) -> None:
        """Write an entry (from :func:`_entry_bytes`) atomically (rename in a local
        folder, one PUT on object storage), and drop the other kind of entry for the
        same content. Raises OSError when the folder is not writable or the file cannot
        be read for its key."""
        key = key or self.key(ident)
        if key is None:
            raise OSError(f"{ident.path}: cannot be read for its cache key")
        target = self._name(key, ".error" if is_error else ".summary")
        other = self._name(key, ".summary" if is_error else ".error")
        self.backend.write(target, data)
        if self.backend.exists(other):
            self.backend.delete(other)

    def store(self, ident: Identity, data: bytes, *, is_error: bool) -> None:
        """:meth:`store_entry` with the key computed here."""
        self.store_entry(ident, data, is_error=is_error)


# --------------------------------------------------------------------------- one load


@dataclass(frozen=True)
class _Task:
    ident: Identity
    max_json_bytes: int
    thresholds: Thresholds
    settings: str
    cache_folder: str | None  # the cache's location: a path or an fsspec URL
    summarize: Callable[..., Any]
    deadline_s: float | None = None  # seconds the load may take (worker processes)
    key: str | None = None  # the entry key (computed once, by the loading thread)


@dataclass(frozen=True)
class _Outcome:
    """What one load produced: ``data`` is a cache entry (summary or reader error);
    otherwise ``kind`` and ``message`` say what went wrong."""

    data: bytes | None
    kind: str | None
    message: str | None
    elapsed_s: float
    cache_warning: str | None = None
    from_cache: bool = False  # another process had stored it meanwhile: nothing parsed


def _summarize_confined(task: _Task) -> Any:
    """``task.summarize`` of the file, which must still lie inside ``ident.root`` and be
    the file discovery listed when it is opened (see ``trace/confine.py``)."""
    ident = task.ident
    call = functools.partial(
        task.summarize, ident.path, max_json_bytes=task.max_json_bytes, thresholds=task.thresholds
    )
    if not ident.root:
        return call()
    with confined(ident.path, Rule(ident.root, ident.file_identity())):
        return call()


def _run_task(task: _Task, progress: ProgressCallback | None = None) -> _Outcome:
    """Read and analyse one file, store the result on disk; never raises. Only verdicts
    about the file's content are stored: an I/O error (missing file, permission, storage
    error, a refused open) is answered but not stored, so the next request retries.
    ``progress(bytes_read, file_bytes)`` is told how much of the stored file is read
    (see ``trace/source.py``)."""
    started = time.perf_counter()
    error: TraceError | None = None
    if task.cache_folder is not None and task.key is not None:
        # Another process sharing the cache may have finished it since it was queued.
        with contextlib.suppress(Exception):
            done = DiskCache(task.cache_folder, task.settings).load_entry(task.ident, task.key)
            if done is not None:
                return _Outcome(done, None, None, time.perf_counter() - started, from_cache=True)
    try:
        try:
            with reading_progress(progress):
                summary = _summarize_confined(task)
        except TraceIOError as exc:
            return _Outcome(None, ERROR_IO, str(exc), time.perf_counter() - started)
        except TraceError as exc:
            error = exc
            summary = None
        elapsed = time.perf_counter() - started
        data = _entry_bytes(
            task.ident, task.settings, summary=summary, error=error, elapsed_s=elapsed, key=task.key
        )
    except Exception as exc:  # a bug in the analysis, or out of memory
        logger.exception("Kineto Insights: analysing %s failed", task.ident.path)
        return _Outcome(
            None,
            ERROR_INTERNAL,
            f"{task.ident.path}: internal error while analysing ({type(exc).__name__}: {exc})",
            time.perf_counter() - started,
        )
    warning = None
    if task.cache_folder is not None:
        try:
            DiskCache(task.cache_folder, task.settings).store_entry(
                task.ident, data, is_error=error is not None, key=task.key
            )
        except (OSError, ValueError, ImportError) as exc:
            warning = f"cannot write the cache folder {task.cache_folder}: {exc}"
    return _Outcome(data, None, None, elapsed, warning)


_FRAME = struct.Struct("<Q")
#: The command a worker process runs (``python -c``): no ``__main__`` re-import, no
#: ``if __name__ == "__main__"`` needed in whatever program embeds TensorBoard.
_WORKER_CODE = "from tb_kineto_insights.cache import worker_main; worker_main()"


def _write_frame(out: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_FRAME.pack(len(data)) + data)
    out.flush()


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = stream.read(size)
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_frame(stream: IO[bytes]) -> Any:
    (size,) = _FRAME.unpack(_read_exact(stream, _FRAME.size))
    return pickle.loads(_read_exact(stream, size))


#: The first frame a worker process writes, once it has imported everything.
_READY = "ready"
#: A worker's progress frame: ``(_PROGRESS, bytes_read, file_bytes)``, before the answer.
_PROGRESS = "progress"
#: Seconds between two progress frames of one load (the last one is always sent).
PROGRESS_INTERVAL_S = 0.1
#: Seconds a new worker process may take to start (import numpy, msgspec, ...).
WORKER_START_TIMEOUT_S = 120.0


def worker_main() -> None:
    """Body of a worker process: reads tasks (pickled, length-prefixed) from standard
    input, answers each on standard output, until standard input closes or a ``None``
    task arrives. Anything the analysis prints goes to standard error."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    tasks = sys.stdin.buffer
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # keep the answer channel clean
    try:
        _write_frame(answers, _READY)  # imports done: load deadlines start from here
    except OSError:
        return
    lock = threading.Lock()  # progress frames come from the reader's gunzip thread
    last = [0.0]

    def tell_progress(bytes_read: int, file_bytes: int) -> None:
        now = time.monotonic()
        if bytes_read < file_bytes and now - last[0] < PROGRESS_INTERVAL_S:
            return
        last[0] = now
        with lock, contextlib.suppress(OSError, ValueError):
            _write_frame(answers, (_PROGRESS, bytes_read, file_bytes))

    while True:
        try:
            task = _read_frame(tasks)
        except (EOFError, OSError, pickle.UnpicklingError):
            return
        if task is None:
            return
        outcome = _run_task(task, tell_progress)
        try:
            with lock:
                _write_frame(answers, outcome)
        except OSError:
            return


def _child_env() -> dict[str, str]:
    """The worker's environment: this one, with this package importable."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    paths = [root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


_LIVE_SLOTS: weakref.WeakSet[_Slot] = weakref.WeakSet()


@atexit.register
def _stop_workers_at_exit() -> None:
    """Worker processes end with the program, even in the middle of a load."""
    for slot in list(_LIVE_SLOTS):
        with contextlib.suppress(Exception):
            slot.stop(kill=True)


def _expire(proc: subprocess.Popen[bytes], expired: threading.Event) -> None:
    """The watchdog's action: the load is over its deadline; kill its worker (a stopped
    process dies too), which ends the pending read with EOF."""
    expired.set()
    with contextlib.suppress(OSError):
        proc.kill()


def _await_ready(proc: subprocess.Popen[bytes]) -> None:
    """Wait for a new worker's ready frame, killing it after WORKER_START_TIMEOUT_S.

    Raises:
        EOFError: the process died or did not start in time.
    """
    expired = threading.Event()
    watchdog = threading.Timer(WORKER_START_TIMEOUT_S, _expire, args=(proc, expired))
    watchdog.daemon = True
    watchdog.start()
    try:
        if proc.stdout is None or _read_frame(proc.stdout) != _READY:
            raise EOFError("the worker process did not start properly")
    except EOFError:
        if expired.is_set():
            raise EOFError(
                f"the worker process did not start within {WORKER_START_TIMEOUT_S:g} s"
            ) from None
        raise
    finally:
        watchdog.cancel()


def _timeout_message(task: _Task, elapsed_s: float) -> str:
    return (
        f"{task.ident.path}: the load did not finish within its deadline of "
        f"{task.deadline_s:.1f} s ({elapsed_s:.1f} s elapsed); its worker process was "
        "stopped and replaced; ask again to retry (the deadline is "
        f"--kineto_insights_load_timeout_s + --kineto_insights_load_timeout_s_per_mib "
        f"x {task.ident.size_bytes / MIB:.2f} MiB)"
    )


class _Slot:
    """One place where a file is read: a worker process (``python -c``), reused until
    idle or dead, or (``use_process=False``) the calling thread itself."""

    def __init__(self, use_process: bool) -> None:
        self._use_process = use_process
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        _LIVE_SLOTS.add(self)

    def run(self, task: _Task, progress: ProgressCallback | None = None) -> _Outcome:
        """Run one load; in a worker process, killed when ``task.deadline_s`` passes
        (a load in this thread cannot be stopped: no deadline there). ``progress`` is
        called with ``(bytes_read, file_bytes)`` of the stored file while it is read."""
        if not self._use_process:
            return _run_task(task, progress)
        started = time.perf_counter()
        proc = None
        expired = threading.Event()
        watchdog: threading.Timer | None = None
        try:
            proc = self._ensure_process()
            if proc.stdin is None or proc.stdout is None:
                raise OSError("the worker process has no pipes")
            started = time.perf_counter()  # a new process's start-up is not the file's
            if task.deadline_s is not None:
                watchdog = threading.Timer(task.deadline_s, _expire, args=(proc, expired))
                watchdog.daemon = True
                watchdog.start()
            _write_frame(proc.stdin, task)
            outcome = _read_frame(proc.stdout)  # EOF when the process dies or is killed
            while isinstance(outcome, tuple) and outcome[:1] == (_PROGRESS,):
                if progress is not None:
                    progress(int(outcome[1]), int(outcome[2]))
                outcome = _read_frame(proc.stdout)
            if isinstance(outcome, _Outcome):
                return outcome
            raise EOFError(f"unexpected answer {type(outcome).__name__}")
        except (EOFError, OSError, pickle.PickleError, struct.error) as exc:
            code = None
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = proc.wait(timeout=1.0)
            self.stop(kill=True)
            elapsed = time.perf_counter() - started
            if expired.is_set():
                return _Outcome(None, ERROR_TIMEOUT, _timeout_message(task, elapsed), elapsed)
            reason = f"exit code {code}" if code is not None else str(exc)
            hint = " (killed: out of memory?)" if code is not None and code < 0 else ""
            return _Outcome(
                None,
                ERROR_WORKER,
                f"{task.ident.path}: the worker process reading it died ({reason}){hint}",
                elapsed,
            )
        finally:
            if watchdog is not None:
                watchdog.cancel()

    def _ensure_process(self) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return self._proc
        self.stop(kill=True)
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_CODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_child_env(),
        )
        with self._lock:
            self._proc = proc
        _await_ready(proc)
        return proc

    @property
    def pid(self) -> int | None:
        with self._lock:
            proc = self._proc
        return None if proc is None or proc.poll() is not None else proc.pid

    def stop(self, kill: bool = False) -> None:
        """End the worker process: politely (close its input) or, with ``kill``, at once
        (a load in progress is abandoned)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        if kill:
            with contextlib.suppress(OSError):
                proc.kill()
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait(timeout=5.0)
        with contextlib.suppress(OSError):
            if proc.stdout is not None:
                proc.stdout.close()


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


class SummaryLoader:
    """Loads summaries in the background, at most ``workers`` at a time.

    Args:
        cache: the disk cache, or None for memory only.
        workers: worker processes (0: one background thread in this process).
        summarize: ``summarize(path, max_json_bytes=, thresholds=) -> dict``; with
            worker processes it must be a module-level function (it is pickled).
        max_json_bytes: the reader's cap on uncompressed bytes.
        thresholds: analysis thresholds.
        memory_items: how many loaded results to keep in memory ...
        memory_bytes: ... and how many bytes of JSON at most (least recently used go).
        idle_shutdown_s: a worker process idle this long exits.
        deadline: how long one load in a worker process may take (see
            :class:`LoadDeadline`); None: from the environment, else the defaults.
    """

    def __init__(
        self,
        *,
        cache: DiskCache | None,
        workers: int = DEFAULT_WORKERS,
        summarize: Callable[..., Any] = summarize_file,
        max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        memory_items: int = 64,
        memory_bytes: int = 256 * 1024**2,
        idle_shutdown_s: float = 120.0,
        deadline: LoadDeadline | None = None,
    ) -> None:
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        self.cache = cache
        self.workers = workers
        self.settings = settings_fingerprint(max_json_bytes, thresholds)
        if cache is not None and cache.settings != self.settings:
            raise ValueError("the cache was made for other settings")
        self._summarize = summarize
        self._max_json_bytes = max_json_bytes
        self._thresholds = thresholds
        self._memory_items = max(1, memory_items)
        self._memory_bytes = max(1, memory_bytes)
        self._idle_shutdown_s = idle_shutdown_s
        self.deadline = load_deadline_from_env() if deadline is None else deadline
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
        self._slots = [_Slot(use_process) for _ in range(max(1, workers))]
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
        read; with ``preload`` the others are queued behind requested ones, smallest
        first, except files modified in the last ``settle_s`` seconds (maybe still being
        written; they are preloaded at a later scan, or loaded at once when asked for).
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
            state = self._states.get(ident, NOT_LOADED)
            if state == ERROR and self._errors.get(ident, (ERROR_INTERNAL, ""))[0] != ERROR_TRACE:
                state = NOT_LOADED
            if state in (NOT_LOADED, QUEUED):
                self._enqueue_locked(ident, PRIORITY_REQUEST)
            return self._status_locked(ident, time.monotonic())

    def _enqueue_locked(self, ident: Identity, priority: int) -> None:
        if self._states.get(ident) == QUEUED and self._queued_priority.get(ident, 99) <= priority:
            return
        self._states[ident] = QUEUED
        self._errors.pop(ident, None)
        self._queued_priority[ident] = priority
        heapq.heappush(self._heap, (priority, ident.size_bytes, next(self._seq), ident))
        self._cv.notify_all()

    def _next_task(self, timeout: float) -> _Task | None:
        deadline = time.monotonic() + timeout
        with self._cv:
            while not self._closed:
                while self._heap:
                    priority, _, _, ident = heapq.heappop(self._heap)
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
                    self._states[ident] = LOADING
                    self._queued_priority.pop(ident, None)
                    self._started[ident] = time.monotonic()
                    self.loads_started += 1
                    self._cv.notify_all()
                    return _Task(
                        ident=ident,
                        max_json_bytes=self._max_json_bytes,
                        thresholds=self._thresholds,
                        settings=self.settings,
                        cache_folder=None if self.cache is None else self.cache.location,
                        summarize=self._summarize,
                        deadline_s=self._deadline_locked(ident),
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cv.wait(remaining)
        return None

    def _slot_loop(self, slot: _Slot) -> None:
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
                self._finish(task.ident, _Outcome(None, ERROR_IO, str(exc), 0.0))
                continue
            try:
                outcome = slot.run(task, functools.partial(self._note_read, task.ident))
            except Exception as exc:  # never let a loading thread die
                logger.exception("Kineto Insights: loading %s failed", task.ident.path)
                outcome = _Outcome(
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

    def _finish(self, ident: Identity, outcome: _Outcome, key: str | None = None) -> None:
        if outcome.cache_warning and not self._cache_warned:
            self._cache_warned = True
            logger.warning(
                "Kineto Insights: %s; summaries are kept in memory only", outcome.cache_warning
            )
        result = None
        if outcome.data is not None:
            result = decode_entry(outcome.data, ident, self.settings, key)
        with self._cv:
            self._started.pop(ident, None)
            self._read_fraction.pop(ident, None)
            if result is None:
                message = outcome.message or f"{ident.path}: the analysis gave no readable result"
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
                    self._remember_locked(ident, stored)
                return stored
            if stored is not None:
                self._set_error_locked(ident, ERROR_TRACE, stored.error or "unknown error")
                return None
            if self._states.get(ident) == READY:
                self._states[ident] = NOT_LOADED
        return None

    # ---------------------------------------------------------------- shutdown

    def close(self) -> None:
        """Stop loading: worker processes are stopped (a load in progress is killed)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for slot in self._slots:
            slot.stop(kill=True)  # a load in progress ends with EOF: its thread moves on
        for thread in self._threads:
            thread.join(timeout=10.0)
        for slot in self._slots:
            slot.stop(kill=True)
