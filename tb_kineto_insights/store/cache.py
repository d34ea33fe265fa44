"""Summaries on disk: one cache entry per trace content, shared by every TensorBoard
and command line that points at the same folder.

The code around it is split by job: this module (the entries and the folder),
``service/worker_pool.py`` (the worker processes that read traces, killed on a deadline)
and ``service/loader.py`` (:class:`~tb_kineto_insights.service.loader.SummaryLoader`:
states, priorities, the pool's slots), used by the TensorBoard plugin and usable from
anywhere else.

:class:`DiskCache`
    One entry per trace *content*, named by its key (:func:`entry_key`: a SHA-256 of the
    cache format, the file's content key — size, mtime or the object store's ETag, and
    an XXH3-128 of its first and last MiB, see ``content_id.py``; no path, device or
    inode — and the analysis settings: byte cap, thresholds), in a folder per
    :data:`~tb_kineto_insights.summary.ANALYSIS_VERSION`. Layout::

        <folder>/v<ANALYSIS_VERSION>/<key>.summary  a summary
        <folder>/v<ANALYSIS_VERSION>/<key>.error    a verdict about the file's content
                                                    (a TraceError other than TraceIOError)
        <folder>/headlines/v<ANALYSIS_VERSION>/<key>.headline  the summary's headline
                        record (``analysis/headline.py``), written with each summary,
                        for ``history``
        <folder>/headlines/v<ANALYSIS_VERSION>/files/<sha>.headline  the same, by the
                        listed file (path, size, mtime): found without reading the file
        <folder>/headlines/v<ANALYSIS_VERSION>/index/<sha>.index  every listed run's
                        headline of one log directory, in one file
                        (``headline_index.py``)

    So one cache folder serves a log directory wherever it is mounted: a teammate's
    TensorBoard on ``/mnt/team/logs``, another's on ``/data/logs``, ``report`` and
    ``diff`` on a copy, all find the summaries any of them computed. The file's listed
    identity (path, ``st_dev``, ``st_ino``, ``st_mtime_ns``, root) still decides whether
    a file changed (and its content key is then computed again) and where it may be
    opened (``trace/confine.py``).

    Each file is a line with the hex SHA-256 of the rest (or, with a shared cache key,
    its HMAC: ``seal.py``, which states the trust model), then the JSON wrapper, which
    records the key. On read the seal and the key are verified: a file with any
    changed, missing or extra byte, sealed without the shared key, or written for
    another content, is deleted and the summary computed again; it is never served.
    I/O errors (missing file, permission, storage errors, a refused open) are never
    stored: they are retried.

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
    the last rename (or PUT) wins. A claim file with a lease is not used: on NFS and
    object storage it needs clocks that agree and a rule for a holder that died, and
    when it goes wrong a span waits for nobody; the duplicate costs one parse, once.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from tb_kineto_insights import schema
from tb_kineto_insights.analysis.headline import span_headline
from tb_kineto_insights.analysis.rule_ids import RULE_IDS
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.version import ANALYSIS_VERSION
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.schema.history import SpanHeadline
from tb_kineto_insights.store import backends as cache_store
from tb_kineto_insights.store.checked import headline_problem, summary_problem
from tb_kineto_insights.store.content_id import content_key_cached
from tb_kineto_insights.store.seal import seal_problem
from tb_kineto_insights.store.seal import sealed as sealed  # how every file is sealed
from tb_kineto_insights.store.seal import unsealed as unsealed
from tb_kineto_insights.store.settings import CACHE_DIR_ENV as CACHE_DIR_ENV  # the cache folder
from tb_kineto_insights.trace.errors import TraceIOError

if TYPE_CHECKING:  # the summary imports the analysis: a cache lookup needs none of it
    from tb_kineto_insights.summary import SpanFailed

logger = logging.getLogger(__name__)

#: Version of the cache-file wrapper (not of the summary: that is ANALYSIS_VERSION): part
#: of every entry's key and checked on read, so bump it when the wrapper changes (the
#: checksum line before the JSON, the identity's key inside it, the content identity of
#: ``content_id.py`` the key is made of); entries of another version are then not read.
CACHE_FORMAT = 3
#: Version of the stored headline record's wrapper and file name
#: (``headlines/v<ANALYSIS_VERSION>/``).
HEADLINE_FORMAT = 1

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


def settings_fingerprint(max_json_bytes: int, thresholds: Thresholds) -> str:
    """What besides the file and ANALYSIS_VERSION changes a summary: part of cache keys.
    The diagnosis ids are part of it (``analysis/rule_ids.py``, generated from the
    rules): a summary cached before a rule was added is computed again."""
    rules = ",".join(RULE_IDS)
    return f"max_json_bytes={int(max_json_bytes)};thresholds={thresholds!r};rules={rules}"


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


def _valid_text(obj: Any) -> Any:
    """``obj`` (built-ins) with every string made valid Unicode: the lone surrogates
    U+DC80..U+DCFF that stand for the bytes of a name that is not UTF-8 (Python's
    ``surrogateescape``, how ``os.scandir`` gives such a file or folder name) become
    those bytes decoded with U+FFFD for each invalid one (``b"bad\\xffrun"`` →
    ``"bad\\ufffdrun"``, as a terminal shows it); any other lone surrogate becomes
    ``?``."""
    if isinstance(obj, str):
        try:
            return obj.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return obj.encode("utf-8", "replace").decode("utf-8")
    if isinstance(obj, dict):
        return {_valid_text(k): _valid_text(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):  # tuples too: to_builtins keeps them
        return [_valid_text(v) for v in obj]
    return obj


def encode_json(obj: Any) -> bytes:
    """Strict JSON bytes (UTF-8): NaN and ±inf are written as ``null``, numpy values as
    numbers and lists, non-string keys as strings. A string UTF-8 cannot hold (a lone
    surrogate: a file or folder name that is not UTF-8, e.g. in ``/runs`` or a summary's
    ``health.path``) is written as :func:`_valid_text` makes it, not raised: one such
    name answered every ``/runs`` with a 500 and stopped ``report --cache``."""
    try:
        return _ENCODER.encode(obj)
    except UnicodeEncodeError:
        return _ENCODER.encode(_valid_text(msgspec.to_builtins(obj, enc_hook=_enc_hook)))


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
        """The file's content key (:func:`tb_kineto_insights.store.content_id.content_key`),
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
    #: the span's per-step timelines (``analysis.timeline.encode_store``), base64 in the
    #: JSON; None when the summary was made without them
    timeline: bytes | None = None


_ENTRY_DECODER = msgspec.json.Decoder(_Entry)


class _StoredHeadline(msgspec.Struct):
    key: str
    headline: SpanHeadline


_HEADLINE_DECODER = msgspec.json.Decoder(_StoredHeadline)


def headline_of(summary: Summary, ident: Identity) -> SpanHeadline:
    """The headline record of a span's summary
    (:func:`tb_kineto_insights.analysis.headline.span_headline`) for the listed file."""
    return span_headline(summary, path=ident.path, size_bytes=ident.size_bytes, mtime=ident.mtime)


_PANELS_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
#: Panel name → a decoder of that panel's Struct (``Summary``'s field types).
_PANEL_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    f.name: msgspec.json.Decoder(f.type) for f in msgspec.structs.fields(Summary)
}


@dataclass(frozen=True)
class LoadResult:
    """A loaded summary (``summary`` and ``panels`` are raw JSON, ready to send) or a
    reader error (``error``, the TraceError's message, naming the file); ``timeline``:
    the span's stored per-step timelines, when the entry holds them. ``struct``:
    the :class:`~tb_kineto_insights.schema.Summary` when :func:`decode_entry` already
    decoded it (a validated cache entry), else None (decoded on demand)."""

    summary: bytes | None
    panels: Mapping[str, bytes]
    error: str | None
    error_type: str | None
    size: int
    struct: Summary | None = field(default=None, repr=False, compare=False)
    #: the span's timelines as stored (``analysis.timeline.decode_store`` reads them),
    #: None when the entry has none
    timeline: bytes | None = field(default=None, repr=False, compare=False)

    def decoded(self) -> Summary:
        """The :class:`~tb_kineto_insights.schema.Summary`. Raises ValueError for an
        error result, ``msgspec.ValidationError`` (a ValueError) when the JSON does not
        fit the Struct."""
        if self.struct is not None:
            return self.struct
        if self.summary is None:
            raise ValueError(self.error or "no summary")
        return schema.summary_decoder().decode(self.summary)

    def panel(self, name: str) -> Any:
        """One panel as its Struct (``Summary``'s field of that name, e.g.
        :class:`~tb_kineto_insights.schema.health.HealthPanel` for ``health``), or None
        when absent. Raises ``msgspec.ValidationError`` when it does not fit."""
        raw = self.panels.get(name)
        if raw is None:
            return None
        if self.struct is not None:
            return getattr(self.struct, name)
        decoder = _PANEL_DECODERS.get(name)
        return msgspec.json.decode(raw) if decoder is None else decoder.decode(raw)


def entry_key(ident: Identity, settings: str) -> str:
    """The key of a file's content under some analysis settings: the SHA-256 (hex) of
    ``[CACHE_FORMAT, SCHEMA_FINGERPRINT, content key, settings]`` as JSON (the
    fingerprint of the Summary Struct's JSON Schema, ``schema.SCHEMA_FINGERPRINT``: a
    change of the summary's shape is a new key), where the content key
    (``content_id.py``) is size, mtime or ETag and an XXH3-128 of the stored file's
    first and last MiB: no path, device or inode. It names the cache file (in the
    folder of the ``ANALYSIS_VERSION``) and is recorded inside it.

    Raises:
        TraceIOError: the file cannot be read to compute its content key.
    """
    # SCHEMA_FINGERPRINT: made on first use (schema.schema_fingerprint), or as set here.
    fingerprint = globals().get("SCHEMA_FINGERPRINT") or schema.schema_fingerprint()
    key = encode_json([CACHE_FORMAT, fingerprint, ident.content_key(), settings])
    return hashlib.sha256(key).hexdigest()


def entry_bytes(
    ident: Identity,
    settings: str,
    *,
    summary: Any = None,
    error: SpanFailed | None = None,
    elapsed_s: float = 0.0,
    key: str | None = None,
    timeline: bytes | None = None,
) -> bytes:
    """A cache entry: a checksum line, then the JSON wrapper (format, versions, the
    identity's :func:`entry_key` (``key`` when already computed), the path it was
    computed from (for people reading the folder; not checked), and the summary or the
    reader's error (a cacheable :class:`~tb_kineto_insights.summary.SpanFailed`), with the
    span's ``timeline`` store beside the summary when given)."""
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
        wrapper["error"] = {"type": error.type, "message": error.message}
    else:
        wrapper["summary"] = summary
        if timeline is not None:
            wrapper["timeline"] = timeline
    return sealed(encode_json(wrapper))


def decode_entry(
    data: bytes,
    ident: Identity,
    settings: str,
    key: str | None = None,
    *,
    validate: bool = True,
    why: list[str] | None = None,
) -> LoadResult | None:
    """A cache entry's content as a LoadResult; None when its checksum does not match
    (any flipped, missing or extra byte), or it was written by another format or
    analysis version, for another content or settings (its recorded key; ``key`` when
    already computed, else :func:`entry_key`, None when the file cannot be read for
    it), or it records an error that is not about the file's content (an I/O error).
    The path recorded in the entry is not checked: a copy of the file elsewhere is the
    same content. With ``validate`` (entries read from a cache folder), the summary is
    also decoded with ``schema.summary_decoder()`` (``msgspec.json.Decoder(Summary)``):
    one that does not fit the :class:`~tb_kineto_insights.schema.Summary` Struct (a key
    missing, of another type; written by other code under the same key) is None too, so
    it is dropped and computed again. ``validate=False``: a summary this process's worker
    has just computed, served as it is. ``why``: given, a damaged entry's reason is
    appended to it (a checksum that does not match, a summary that does not fit the
    Struct or holds a value out of range: :func:`~.checked.summary_problem`) instead of
    logged here; the caller logs one line naming the file."""
    body = unsealed(data)
    if body is None:
        if why is not None:
            why.append(seal_problem())
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
        struct = None
        if validate:
            try:
                struct = schema.summary_decoder().decode(summary)
                problem = summary_problem(struct)  # fits the Struct, cannot be right
            except msgspec.ValidationError as exc:
                problem = str(exc)
            if problem is not None:
                if why is None:
                    logger.warning("Kineto Insights: cached summary of %s: %s", ident.path, problem)
                else:
                    why.append(f"its summary: {problem}")
                return None
        panels = {k: bytes(v) for k, v in _PANELS_DECODER.decode(summary).items()}
        if entry.path != ident.path:
            summary = _relabelled(panels, ident.path)
            if struct is not None:
                health = msgspec.structs.replace(struct.health, path=ident.path)
                struct = msgspec.structs.replace(struct, health=health)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError):
        return None
    return LoadResult(summary, panels, None, None, len(data), struct, entry.timeline)


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
            why: list[str] = []
            if decode_entry(data, ident, self.settings, key, why=why) is not None:
                return data
            logger.warning(
                "Kineto Insights: dropping corrupt or stale cache file %s/%s%s",
                self.location,
                name,
                f" ({why[0]}): computing it again" if why else "",
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
        self,
        ident: Identity,
        data: bytes,
        *,
        is_error: bool,
        key: str | None = None,
        summary: Summary | None = None,
    ) -> None:
        """Write an entry (from :func:`entry_bytes`) atomically (rename in a local
        folder, one PUT on object storage), and drop the other kind of entry for the
        same content; then the span's headline record for ``history``, from ``summary``
        when the caller has the Struct (else decoded from ``data``). Raises OSError when
        the folder is not writable or the file cannot be read for its key."""
        key = key or self.key(ident)
        if key is None:
            raise OSError(f"{ident.path}: cannot be read for its cache key")
        target = self._name(key, ".error" if is_error else ".summary")
        other = self._name(key, ".summary" if is_error else ".error")
        self.backend.write(target, data)
        if self.backend.exists(other):
            self.backend.delete(other)
        if is_error:
            return
        try:
            if summary is None:
                result = decode_entry(data, ident, self.settings, key, validate=False)
                if result is None or result.summary is None:
                    return
                summary = result.decoded()
            headline = headline_of(summary, ident)
        except (ValueError, TypeError, KeyError) as exc:  # a bug: keep the summary
            logger.warning("Kineto Insights: no headline for %s: %s", ident.path, exc)
            return
        self.store_headline(ident, key, headline)

    # ------------------------------------------------------------------ headlines

    def file_headline_name(self, ident: Identity) -> str:
        """Where the headline of a listed file is found without reading the file:
        ``headlines/v<ANALYSIS_VERSION>/files/<SHA-256 of [HEADLINE_FORMAT, settings,
        path, size, mtime, ETag]>.headline``. (No schema fingerprint: computing it costs
        a ``history`` more than reading a thousand headlines, and a stored headline must
        fit :class:`~tb_kineto_insights.schema.history.SpanHeadline` to be used.)"""
        listed = [HEADLINE_FORMAT, self.settings, ident.path, ident.size_bytes]
        digest = hashlib.sha256(encode_json([*listed, ident.mtime, ident.version]))
        return f"headlines/{self._versioned}/files/{digest.hexdigest()}.headline"

    def _headline_name(self, key: str) -> str:
        return f"headlines/{self._versioned}/{key}.headline"

    def store_headline(self, ident: Identity, key: str, headline: SpanHeadline) -> None:
        """Write a span's headline record twice, sealed like an entry: by content key
        (``headlines/v<ANALYSIS_VERSION>/<key>.headline``: found from any path of the
        same content) and by listed file (:meth:`file_headline_name`: found from a listing
        alone, no byte of the trace read). Raises OSError when the folder is not
        writable."""
        data = sealed(encode_json({"key": key, "headline": headline}))
        self.backend.write(self._headline_name(key), data)
        self.backend.write(self.file_headline_name(ident), data)

    def _read_headline(self, name: str, key: str | None) -> SpanHeadline | None:
        """A stored headline record, or None: absent, for another key, or damaged (a
        checksum that does not match, a body that does not fit the Struct, a value out
        of range: :func:`~tb_kineto_insights.store.checked.headline_problem`), which is
        logged once naming the file; the caller then computes it again."""
        try:
            data = self.backend.read(name)
        except OSError:
            return None
        if data is None:
            return None
        body = unsealed(data)
        problem = None
        stored = None
        if body is None:
            problem = seal_problem()
        else:
            try:
                stored = _HEADLINE_DECODER.decode(body)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                problem = str(exc)
            else:
                problem = headline_problem(stored.headline)
        if problem is not None or stored is None:
            logger.warning(
                "Kineto Insights: damaged cache file %s/%s (%s): computing it again",
                self.location,
                name,
                problem,
            )
            return None
        if key is not None and stored.key != key:
            return None
        return stored.headline

    def load_file_headline(self, ident: Identity) -> SpanHeadline | None:
        """The headline stored for this listed file (path, size, mtime, ETag), or None;
        reads one small file of the cache and nothing of the trace."""
        return self._read_headline(self.file_headline_name(ident), None)

    def load_headline(self, ident: Identity, key: str) -> SpanHeadline | None:
        """The headline stored for this content key, or None. When found, it is also
        written under :meth:`file_headline_name` (the next lookup of this file reads
        nothing of the trace); its ``path``/``size_bytes``/``mtime`` become the listed
        file's."""
        headline = self._read_headline(self._headline_name(key), key)
        if headline is None:
            return None
        headline = msgspec.structs.replace(
            headline, path=ident.path, size_bytes=ident.size_bytes, mtime=ident.mtime
        )
        with contextlib.suppress(OSError):  # only a shortcut for the next lookup
            self.backend.write(
                self.file_headline_name(ident),
                sealed(encode_json({"key": key, "headline": headline})),
            )
        return headline

    def store(self, ident: Identity, data: bytes, *, is_error: bool) -> None:
        """:meth:`store_entry` with the key computed here."""
        self.store_entry(ident, data, is_error=is_error)


def __getattr__(name: str) -> Any:
    """``SCHEMA_FINGERPRINT``, made on first use (PEP 562)."""
    if name == "SCHEMA_FINGERPRINT":
        return schema.schema_fingerprint()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
