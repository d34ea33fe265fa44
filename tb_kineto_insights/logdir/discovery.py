"""Discovery: which runs, workers and spans (trace files) a log directory holds.

A log directory is a local path or an fsspec URL (``file://``, ``memory://``, ``s3://``,
``gs://`` ...). Layout, as written by ``torch.profiler.tensorboard_trace_handler``::

    <logdir>/<run folder, any depth>/<worker>.<timestamp>.pt.trace.json[.gz]

- A *run* is any folder under the log directory (at any depth) that holds trace files.
  Its name is the folder path relative to the log directory, ``/``-separated, and
  ``"."`` for files directly in the log directory. Hidden folders (name starting with
  ``.``) and ``__pycache__`` are skipped, and so are hidden files.
- A *worker* is the file-name part before the timestamp (usually ``<host>_<pid>``).
- A *span* is one trace file; its id is the timestamp as written (``"1623143089861"``),
  or ``"0"`` when the name has none. ``schedule(repeat>1)`` gives several spans per
  worker.

Files named ``*.pt.trace.json`` / ``*.pt.trace.json.gz`` are always taken, unread.
Other ``*.json`` / ``*.json.gz`` files are taken only when their head looks like a
Kineto / Chrome trace (see :func:`is_kineto_head`); gzip is recognised by its magic
bytes, not by the suffix. Files that cannot be read while sniffing are skipped.

On object storage (``s3://``, ``gs://``, ``abfs://``, through the fsspec driver of the
``s3``/``gcs``/``azure`` extra), one scan is one recursive listing of the prefix (paged
by the driver: one request per 1,000 keys on S3), with no request per file: size,
modification time and ETag come from the listing. Only oddly named ``*.json[.gz]``
files are opened, for their first bytes (a ranged read), once per file version.

Discovery knows nothing of analysis: it only lists and names files. Keys
(run, worker, span) are what the plugin receives from URLs; :func:`find_span` maps a
key back to a file and never builds a path from user input.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from tb_kineto_insights.logdir.links import LinkPolicy, follow_roots
from tb_kineto_insights.logdir.names import (
    escaped_name,
    is_hidden,
    looks_like_trace,
    natural_key,
    odd_worker_name,
    parse_span_index,
    parse_trace_name,
    run_key,
)
from tb_kineto_insights.logdir.sniff import is_kineto_head, sniff_kineto_file
from tb_kineto_insights.trace.local_paths import (
    FileHostError,
    LocalTree,
    local_path,
    url_to_fs,
    without_local_host,
)
from tb_kineto_insights.trace.source import object_version_of

__all__ = [
    "MAX_FOLDER_DEPTH",
    "LogdirError",
    "describe_skipped",
    "folder_name",
    "Run",
    "Span",
    "Worker",
    "discover",
    "broken_link",
    "is_broken_link",
    "escaped_name",
    "find_span",
    "is_kineto_head",
    "parse_span_index",
]


class LogdirError(Exception):
    """The log directory cannot be listed: missing folder, not a folder, unknown
    protocol, missing fsspec driver package, storage error while listing.

    Attributes:
        logdir: the log directory as the caller gave it.
        problem: what was wrong, in words.
    """

    def __init__(self, logdir: str, problem: str, what: str = "log directory") -> None:
        self.logdir = logdir
        self.problem = problem
        super().__init__(f"{what} {logdir!r}: {problem}")


@dataclass(frozen=True)
class Span:
    """One trace file.

    Attributes:
        run: run name, the folder path relative to the log directory, ``/``-separated;
            ``"."`` for the log directory itself.
        worker: worker name, e.g. ``"host_1234"``; for files without the standard name,
            the file name without ``.json[.gz]``.
        span: span id, the timestamp part of the name as a string, or ``"0"``.
        path: full local path or fsspec URL to open (same protocol as the log directory).
        size_bytes: file size in bytes as listed (compressed size for gzip files).
        mtime: modification time in seconds since the epoch; ``0.0`` when the
            filesystem does not say.
        device, inode, mtime_ns: ``st_dev``, ``st_ino`` and ``st_mtime_ns`` of a local
            file (of a symlink's *target*, like ``size_bytes`` and ``mtime``: the link's
            own times say nothing about the trace); 0 on other filesystems.
        root: the real path of the local log directory the file was found in (for a file
            found through a followed symlink, the allowed root that holds it:
            ``logdir/links.py``), which the
            file must still lie in when it is opened (see ``trace/confine.py``); ``""``
            for other filesystems.
        version: on object storage, the object's ETag (S3, GCS, Azure), with
            ``@<VersionId>`` / ``@<generation>`` when the bucket keeps versions; ``""``
            for local files. Part of the content key (``content_id.py``).
    """

    run: str
    worker: str
    span: str
    path: str
    size_bytes: int
    mtime: float
    device: int = 0
    inode: int = 0
    mtime_ns: int = 0
    root: str = ""
    version: str = ""


@dataclass(frozen=True)
class Worker:
    """One worker (usually one rank / process) of a run; spans ordered by numeric id."""

    name: str
    spans: tuple[Span, ...]


@dataclass(frozen=True)
class Run:
    """One run folder; workers in natural name order (``rank2`` before ``rank10``)."""

    name: str
    workers: tuple[Worker, ...]


def _span_key(span: Span) -> tuple[int, str]:
    return int(span.span), span.span


# --------------------------------------------------------------------------- listing


def _mtime(info: Mapping[str, Any]) -> float:
    """Modification time from an fsspec info dict, in seconds; 0.0 when absent."""
    for field in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(field)
        if value is None:
            continue
        try:
            if isinstance(value, datetime):
                if value.tzinfo is None:
                    value = value.replace(tzinfo=timezone.utc)
                return float(value.timestamp())
            if isinstance(value, (int, float)):
                return float(value)
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
                    if parsed.tzinfo is None:
                        parsed = parsed.replace(tzinfo=timezone.utc)
                    return float(parsed.timestamp())
        except (ValueError, OverflowError, OSError):
            continue
    return 0.0


def object_version(url: str, fs_options: Mapping[str, Any] | None = None) -> str:
    """The object's version now (:func:`_version` of a fresh ``info``: ETag, and its
    version id when listed), as discovery lists it; ``""`` when the store gives none.
    Raises OSError (or the driver's error) when it cannot be asked."""
    fs, path = open_fs(url, dict(fs_options or {}))
    with contextlib.suppress(Exception):
        fs.invalidate_cache(path)
    return _version(fs.info(path))


_version = object_version_of  # (ETag@version id; trace/source.py reads by it)


def _size(info: Mapping[str, Any]) -> int:
    value = info.get("size")
    try:
        return max(int(value), 0) if value is not None else 0
    except (TypeError, ValueError):
        return 0


def _protocols(logdir: str) -> list[str]:
    """Protocols named in a (possibly chained ``a::b://``) URL; ``file`` for a path."""
    import fsspec  # imported by open_fs already

    out = []
    for part in logdir.split("::"):
        protocol, _ = fsspec.core.split_protocol(part)
        out.append(protocol or "file")
    return out


#: Paths that name nothing (a shell variable left unset, ``file://`` with no path): refused,
#: not read as the working folder (``diff "$BASE" exp`` compared whatever ran there).
EMPTY_PATHS = ("", "file://", "file:")


def open_fs(logdir: str, fs_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """``(filesystem, root path)`` for the log directory, or LogdirError (also for an
    empty path: :data:`EMPTY_PATHS`). A plain local
    path (no filesystem options) is listed by ``local_paths.LocalTree`` (the same
    answers as fsspec's local filesystem, without importing fsspec, a costly import:
    ``trace/local_paths.py``);
    anything else by fsspec."""
    try:  # fsspec reads file://HOST/x as HOST/x under the working folder
        logdir = without_local_host(logdir)
    except FileHostError as exc:
        raise LogdirError(logdir, exc.problem) from exc
    if logdir in EMPTY_PATHS:  # it read as the working folder: an unset variable
        raise LogdirError(logdir, "an empty path: name a trace file, a folder or a URL")
    local = None if fs_options else local_path(logdir)
    if local is not None:
        return LocalTree(), local
    import fsspec
    from fsspec.registry import known_implementations

    try:
        return fsspec.core.url_to_fs(logdir, **dict(fs_options or {}))
    except ImportError as exc:
        protocols = _protocols(logdir)
        package = exc.name or getattr(exc.__cause__, "name", None)
        if not package:
            impl = known_implementations.get(protocols[-1], {})
            package = str(impl.get("class", "")).split(".", 1)[0] or None
        hint = f"; install the {package!r} package" if package else ""
        raise LogdirError(
            logdir,
            f"protocol {protocols[-1]!r} needs a driver that is not installed ({exc}){hint}",
        ) from exc
    except ValueError as exc:
        if "protocol" in str(exc).lower():
            available = set(fsspec.available_protocols())
            unknown = [p for p in _protocols(logdir) if p not in available]
            name = unknown[0] if unknown else _protocols(logdir)[-1]
            raise LogdirError(
                logdir,
                f"unknown protocol {name!r}: fsspec has no filesystem for it "
                "(check the spelling, or install the package that provides it)",
            ) from exc
        raise LogdirError(logdir, f"cannot open: {exc}") from exc
    except Exception as exc:  # driver-specific errors, typed for callers
        raise LogdirError(logdir, f"cannot open: {type(exc).__name__}: {exc}") from exc


def _is_local(fs: Any) -> bool:
    if isinstance(fs, LocalTree):
        return True
    # the submodule itself: ``import fsspec`` does not load it (a driver that never
    # touched the local filesystem left ``fsspec.implementations.local`` unset)
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


#: Folders below the log directory that are listed, at most (deeper ones are skipped and
#: reported): a chain of ~1,000 nested folders would make a recursive walk (fsspec's)
#: raise ``RecursionError`` and hide every run. ``$KINETO_INSIGHTS_MAX_FOLDER_DEPTH`` or
#: ``discover(max_depth=)`` change it.
MAX_FOLDER_DEPTH = 64
MAX_FOLDER_DEPTH_ENV = "KINETO_INSIGHTS_MAX_FOLDER_DEPTH"
#: Linked folders waiting to be listed at most, when symlinks are followed: links that
#: fan out (each folder linking to several others) end there, with a word.
MAX_LINKED_FOLDERS = 10_000


def max_folder_depth(environ: Mapping[str, str] | None = None) -> int:
    """``$KINETO_INSIGHTS_MAX_FOLDER_DEPTH`` when it is a whole number >= 1, else
    :data:`MAX_FOLDER_DEPTH`."""
    raw = (os.environ if environ is None else environ).get(MAX_FOLDER_DEPTH_ENV, "")
    try:
        value = int(raw)
    except ValueError:
        return MAX_FOLDER_DEPTH
    return value if value >= 1 else MAX_FOLDER_DEPTH


def _list_local(
    fs: Any,
    root: str,
    max_depth: int = MAX_FOLDER_DEPTH,
    skipped: list[tuple[str, str]] | None = None,
    follow: tuple[str, ...] = (),
) -> dict[str, dict[str, Any]]:
    """Files under a local root: ``{path: info}``. Walks top-down so hidden folders are
    not entered at all; a symlinked file is kept only when it resolves to a regular file
    inside the log directory, and a symlinked folder is not entered, unless ``follow``
    names other allowed roots (``logdir/links.py``): then a linked folder or file whose
    target lies in one is listed too, each real folder once, its files with ``"root"``
    (the allowed root they must still lie in when opened). Size and times are those of
    the file itself (a symlink's target, ``os.stat``), with ``device``, ``inode`` and
    ``mtime_ns`` added. Unreadable sub-folders, folders more than ``max_depth`` below
    the root (both appended to ``skipped`` as ``(folder, reason)`` when listed by
    :class:`LocalTree`) and files gone while listing are skipped; an unreadable root
    raises the OSError. A folder named like a trace file (listed as a folder), a symlink
    named like one whose target is missing, outside every allowed root or no file, and a
    symlink to a folder outside every allowed root (a run folder linked in) are appended
    to ``skipped`` too, once per listing, by path (passed over silently, they would leave
    a run missing with no word why)."""
    real_root = os.path.realpath(root)
    policy = LinkPolicy(real_root, follow)
    out: dict[str, dict[str, Any]] = {}
    errors: list[OSError] = []
    listed_root = False
    extra: dict[str, Any] = {}
    if isinstance(fs, LocalTree) and skipped is not None:
        extra["on_skip"] = lambda folder, reason: skipped.append((folder, reason))

    def note(path: str, reason: str) -> None:
        if skipped is not None:
            skipped.append((path, reason))

    # the log directory, then each linked folder to enter: (path, its allowed root, the
    # real folders entered through links on the way there: a link back to one is a loop)
    folders: list[tuple[str, str, tuple[str, ...]]] = [(root, real_root, (real_root,))]
    while folders:
        folder, folder_root, chain = folders.pop(0)
        walk = fs.walk(
            folder,
            detail=True,
            topdown=True,
            maxdepth=max_depth + 1,
            on_error=errors.append,
            **extra,
        )
        for _, dirs, files in walk:
            listed_root = True
            for name in [d for d in dirs if is_hidden(d)]:
                del dirs[name]
            for name, info in dirs.items():
                if looks_like_trace(os.path.basename(str(info.get("name", name)))):
                    note(str(info.get("name", name)), "a folder named like a trace file, not read")
            for info in files.values():
                name = str(info.get("name", ""))
                if not name:
                    continue
                file_root = folder_root
                if info.get("islink"):
                    target = os.path.realpath(name)
                    if os.path.isdir(target):
                        why = policy.refused_folder(target)
                        if why is not None:
                            note(name, why)
                        elif (into := policy.enters(target)) is None:
                            pass  # not followed, or inside the log directory: listed there
                        elif len(folders) >= MAX_LINKED_FOLDERS:
                            note(
                                name, f"more than {MAX_LINKED_FOLDERS} linked folders, not entered"
                            )
                        elif policy.loops(target, os.path.dirname(name), chain):
                            note(
                                name, "a symlink back to a folder it lies in (a loop), not entered"
                            )
                        else:
                            folders.append((name, into, (*chain, target)))
                        continue
                    why = policy.refused_file(target)
                    if why is not None:
                        if looks_like_trace(os.path.basename(name)):
                            note(name, why)
                        continue
                    file_root = policy.root_of(target) or folder_root
                elif info.get("type") != "file":  # fifo, socket, device: never open those
                    if looks_like_trace(os.path.basename(name)):  # fsspec's kind: "other"
                        note(name, "not a regular file (a fifo, socket or device), not read")
                    continue
                try:
                    st = os.stat(name)  # follows a link: the target is what will be read
                except OSError:
                    continue
                out[name] = {
                    **info,
                    "size": st.st_size,
                    "mtime": st.st_mtime,
                    "device": st.st_dev,
                    "inode": st.st_ino,
                    "mtime_ns": st.st_mtime_ns,
                    "root": file_root,
                }
        if not listed_root and errors:
            raise errors[0]  # the log directory itself could not be listed
    return out


def broken_link(local: str) -> str:
    """What the symbolic link ``local``, which leads to nothing, is, in words: ``"a
    symbolic link in a loop"``, ``"a symbolic link to 'TARGET', which does not exist"``,
    or, through a chain of links, ``"a symbolic link to 'TARGET', which leads to
    'END', which does not exist"``."""
    local = os.path.normpath(local)
    try:
        os.stat(local)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link in a loop"
    try:
        target = os.readlink(local)
    except OSError:
        return "a symbolic link that leads nowhere"
    end = os.path.realpath(local)
    if end != os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(local)), target)):
        return f"a symbolic link to {target!r}, which leads to {end!r}, which does not exist"
    return f"a symbolic link to {target!r}, which does not exist"


def is_broken_link(local: str) -> bool:
    """Whether the local path names a symbolic link (a trailing ``/`` or ``/.`` allowed)
    that leads to nothing: to a missing path, or in a loop."""
    local = os.path.normpath(local)
    return os.path.islink(local) and not os.path.exists(local)


def _not_a_folder(root: str) -> str:
    """Why a local ``root`` that is not a folder cannot be listed: ``"is not a folder"``
    (with "(a fifo, socket or device)" for one that is not a regular file either),
    ``"does not exist"``, ``"is a symbolic link ..."`` (:func:`broken_link`: in a loop,
    or to a missing path), or the error of its ``stat`` (``"cannot be read: Permission
    denied"`` under a folder that may not be searched; ``os.path.exists`` says False
    there as for a missing path)."""
    try:
        st = os.stat(root)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP) and is_broken_link(root):
            return f"is {broken_link(root)}"
        if isinstance(exc, FileNotFoundError):
            return "does not exist"
        return f"cannot be read: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode):
        return "is not a folder (a fifo, socket or device)"
    return "is not a folder"


def _list_remote(fs: Any, root: str) -> dict[str, dict[str, Any]]:
    """Files under a root on any other filesystem, in one recursive listing."""
    found = fs.find(root, detail=True, withdirs=False)
    return {
        str(name): dict(info)
        for name, info in found.items()
        if isinstance(info, Mapping) and info.get("type", "file") != "directory"
    }


@dataclass
class _Candidate:
    run: str
    worker: str
    span: str
    filename: str
    fs_path: str
    size: int
    mtime: float
    named: bool
    stat: tuple[int, int, int]  # device, inode, mtime_ns (0s when not local)
    version: str = ""  # ETag[@version] on object storage
    root: str = ""  # the allowed root of a local file found through a followed link


def describe_skipped(skipped: list[tuple[str, str]], shown: int = 3) -> str:
    """One line about the folders and files :func:`discover` skipped: their count, the
    first ``shown`` (path, non-UTF-8 bytes escaped, and reason); ``""`` when none."""
    if not skipped:
        return ""
    listed = "; ".join(f"{escaped_name(path)} ({reason})" for path, reason in skipped[:shown])
    more = f"; and {len(skipped) - shown} more" if len(skipped) > shown else ""
    return f"skipped {len(skipped)} path(s): {listed}{more}"


def discover(
    logdir: str,
    *,
    sniff_bytes: int = 4096,
    fs_options: dict[str, Any] | None = None,
    max_depth: int | None = None,
    skipped: list[tuple[str, str]] | None = None,
    follow: str | Sequence[str] | None = None,
) -> list[Run]:
    """List the runs, workers and spans under a log directory, as they are now.

    Every call lists the storage again (fsspec listing caches are invalidated first), so
    files added since the previous call are found.

    Args:
        logdir: local path or fsspec URL (``file://``, ``memory://``, ``s3://`` ...).
        sniff_bytes: how many (decompressed) bytes to read from oddly named
            ``*.json[.gz]`` files to decide whether they are Kineto traces. Must be > 0.
        fs_options: keyword arguments for the fsspec filesystem (credentials, endpoint).
        max_depth: folders at most this deep below the log directory are listed (local
            log directories); None: :func:`max_folder_depth`.
        skipped: when given, ``(path, reason)`` is appended for each local folder not
            listed: it cannot be listed (permission, gone), or it is deeper than
            ``max_depth``; for a folder named like a trace file; and for a symlink named
            like a trace file that points to nothing readable. The rest is listed as
            usual.
        follow: the folders whose symlinked runs and files are followed besides the log
            directory (``logdir/links.py``: paths separated by ``os.pathsep``, or a
            list); None: ``$KINETO_INSIGHTS_FOLLOW_SYMLINKS``; empty: none (local log
            directories).

    Returns:
        Runs ordered by name (``"."`` first, then natural order folder by folder); runs
        without trace files are not listed. Workers in natural name order, spans by
        numeric id. When two files map to the same (run, worker, span) key (e.g.
        ``w.json`` and ``w.json.gz``), the one with the standard name wins, then the
        one whose file name sorts first; the others keep their full file name as
        worker name.

    Raises:
        LogdirError: the log directory does not exist or is not a folder, its protocol
            is unknown, the fsspec driver for it is not installed, or listing failed.
        ValueError: ``sniff_bytes`` is not positive.
    """
    if sniff_bytes <= 0:
        raise ValueError(f"sniff_bytes must be positive, got {sniff_bytes}")
    fs, root = open_fs(logdir, fs_options)
    root = str(root)
    with contextlib.suppress(Exception):  # a filesystem without a cache: nothing to drop
        fs.invalidate_cache()
    listing = _listing(logdir, fs, root, max_depth, skipped, follow_roots(follow))
    use_plain_paths = _is_local(fs) and "://" not in logdir
    real_root = os.path.realpath(root) if use_plain_paths else ""
    named, odd = _candidates(listing, root, use_plain_paths)
    if odd:
        odd = _sniffed(fs, odd, sniff_bytes, real_root)
    span_path = _span_path_maker(fs, logdir, use_plain_paths)
    spans = _unique_spans(named + odd, span_path, use_plain_paths, real_root)
    return _grouped(spans)


def _listing(
    logdir: str,
    fs: Any,
    root: str,
    max_depth: int | None,
    skipped: list[tuple[str, str]] | None,
    follow: tuple[str, ...] = (),
) -> dict[str, dict[str, Any]]:
    """Every file under ``root`` (:func:`_list_local` or :func:`_list_remote`), or
    LogdirError when the log directory is not a folder or cannot be listed."""
    try:
        if _is_local(fs):
            if not fs.isdir(root):
                raise LogdirError(logdir, _not_a_folder(root))
            depth = max_folder_depth() if max_depth is None else max(1, max_depth)
            listing = _list_local(fs, root, depth, skipped, follow)
        else:
            # Object storage: one recursive listing per scan (paged by the driver), not
            # one request per file or folder; the folder checks only when it is empty.
            listing = _list_remote(fs, root)
            suspicious = not listing or str(root).rstrip("/") in listing
            if suspicious and not fs.isdir(root):
                problem = "is not a folder" if fs.exists(root) else "does not exist"
                raise LogdirError(logdir, problem)
    except LogdirError:
        raise
    except Exception as exc:  # storage/driver errors, typed for callers
        raise LogdirError(logdir, f"cannot list: {type(exc).__name__}: {exc}") from exc
    return listing


def _candidates(
    listing: dict[str, dict[str, Any]], root: str, use_plain_paths: bool
) -> tuple[list[_Candidate], list[_Candidate]]:
    """The listed files that may be traces, as ``(named, odd)``: those named
    ``*.pt.trace.json[.gz]``, and the other ``*.json[.gz]`` files (to be sniffed).
    Files in hidden folders, hidden files and any other name are left out."""
    prefix = root if root.endswith("/") else root + "/"
    named: list[_Candidate] = []
    odd: list[_Candidate] = []
    for fs_path, info in listing.items():
        name = fs_path.rstrip("/")
        if not name.startswith(prefix):
            continue
        rel = name[len(prefix) :]
        parts = rel.split("/")
        if any(not part or is_hidden(part) for part in parts):
            continue
        folder, filename = escaped_name("/".join(parts[:-1])) or ".", parts[-1]
        parsed = parse_trace_name(filename)
        if parsed is not None:
            worker, span_id = escaped_name(parsed[0]), parsed[1]
            bucket, is_named = named, True
        else:
            odd_worker = odd_worker_name(filename)
            if odd_worker is None:
                continue
            worker, span_id = escaped_name(odd_worker), "0"
            bucket, is_named = odd, False
        bucket.append(
            _Candidate(
                run=folder,
                worker=worker,
                span=span_id,
                filename=filename,
                fs_path=name,
                size=_size(info),
                mtime=_mtime(info),
                named=is_named,
                stat=(
                    int(info.get("device", 0) or 0),
                    int(info.get("inode", 0) or 0),
                    int(info.get("mtime_ns", 0) or 0),
                ),
                version="" if use_plain_paths else _version(info),
                root=str(info.get("root", "")),
            )
        )
    return named, odd


def _sniffed(fs: Any, odd: list[_Candidate], sniff_bytes: int, real_root: str) -> list[_Candidate]:
    """The oddly named candidates whose head looks like a Kineto trace, sniffed on up to
    8 threads, in their order."""
    # imported here: concurrent.futures (with logging) would add to every start-up
    # (benchmarks/RESULTS.md)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(odd))) as pool:
        verdicts = list(
            pool.map(
                lambda c: sniff_kineto_file(
                    fs, c.fs_path, c.size, c.mtime, sniff_bytes, c.root or real_root
                ),
                odd,
            )
        )
    return [c for c, ok in zip(odd, verdicts, strict=True) if ok]


def _span_path_maker(fs: Any, logdir: str, use_plain_paths: bool) -> Callable[[str, str], str]:
    """``span_path(fs_path, rel)``: the path a span is opened by, in the log directory's
    own form (a plain path, the chained URL's base, or the filesystem's URL)."""
    url_base = logdir.rstrip("/") if "::" in logdir else None

    def span_path(fs_path: str, rel: str) -> str:
        if use_plain_paths:
            return fs_path
        if url_base is not None:
            return f"{url_base}/{rel}"
        return str(fs.unstrip_protocol(fs_path))

    return span_path


def _unique_spans(
    candidates: list[_Candidate],
    span_path: Callable[[str, str], str],
    use_plain_paths: bool,
    real_root: str,
) -> dict[tuple[str, str, str], Span]:
    """One span per (run, worker, span) key: standard names first, then by file name;
    a candidate whose key is taken is named by its whole file name, or dropped when that
    key is taken too."""
    spans: dict[tuple[str, str, str], Span] = {}
    ordered = sorted(candidates, key=lambda c: (not c.named, c.run, c.filename))
    for cand in ordered:
        worker = cand.worker
        if (cand.run, worker, cand.span) in spans:
            worker = escaped_name(cand.filename)
            if (cand.run, worker, cand.span) in spans:
                continue
        rel = cand.filename if cand.run == "." else f"{cand.run}/{cand.filename}"
        spans[(cand.run, worker, cand.span)] = Span(
            run=cand.run,
            worker=worker,
            span=cand.span,
            path=span_path(cand.fs_path, rel),
            size_bytes=cand.size,
            mtime=cand.mtime,
            device=cand.stat[0] if use_plain_paths else 0,
            inode=cand.stat[1] if use_plain_paths else 0,
            mtime_ns=cand.stat[2] if use_plain_paths else 0,
            root=(cand.root or real_root) if use_plain_paths else real_root,
            version=cand.version,
        )
    return spans


def _grouped(spans: dict[tuple[str, str, str], Span]) -> list[Run]:
    """Spans grouped into workers and runs, each in :func:`discover`'s order."""
    by_run: dict[str, dict[str, list[Span]]] = {}
    for span in spans.values():
        by_run.setdefault(span.run, {}).setdefault(span.worker, []).append(span)
    return [
        Run(
            name=run_name,
            workers=tuple(
                Worker(name=worker_name, spans=tuple(sorted(worker_spans, key=_span_key)))
                for worker_name, worker_spans in sorted(
                    by_run[run_name].items(), key=lambda item: natural_key(item[0])
                )
            ),
        )
        for run_name in sorted(by_run, key=run_key)
    ]


def find_span(runs: list[Run], run: str, worker: str, span: str) -> Span | None:
    """The span with exactly this (run, worker, span) key, or None.

    A pure lookup among what :func:`discover` returned: the key is never turned into a
    path, so keys such as ``"../x"`` simply miss.
    """
    for candidate_run in runs:
        if candidate_run.name != run:
            continue
        for candidate_worker in candidate_run.workers:
            if candidate_worker.name != worker:
                continue
            for candidate in candidate_worker.spans:
                if candidate.span == span:
                    return candidate
    return None


def span_for_file(path: str) -> Span:
    """A :class:`Span` for one trace file given directly (``report FILE``).

    Worker and span come from the file name as in :func:`discover`; any other name gives
    worker = the file name and span ``"0"``. The run is the name of the parent folder.
    The file is not read, so a file that is not a trace fails later, in the reader.

    Raises:
        LogdirError: the file does not exist or cannot be asked about.
    """
    local = local_path(path)
    if local is not None:  # what fsspec's local filesystem answers, without importing it
        fs_path = local
        try:
            st = os.stat(local)
        except (OSError, ValueError) as exc:
            raise LogdirError(path, f"cannot read file: {exc}") from exc
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):  # a fifo blocks a read
            raise LogdirError(
                path, "not a regular file (a fifo, socket or device): not read", "input"
            )
        info: Mapping[str, Any] = {"size": st.st_size, "mtime": st.st_mtime}
    else:
        fs, fs_path = open_fs(path, None)
        try:
            info = fs.info(fs_path)
        except (OSError, ValueError) as exc:
            raise LogdirError(path, f"cannot read file: {exc}") from exc
    filename = fs_path.rstrip("/").rsplit("/", 1)[-1]
    parent = fs_path.rstrip("/").rsplit("/", 1)[0].rsplit("/", 1)[-1] or "."
    parsed = parse_trace_name(filename) or (odd_worker_name(filename) or filename, "0")
    return Span(
        run=parent,
        worker=parsed[0],
        span=parsed[1],
        path=path,
        size_bytes=_size(info),
        mtime=_mtime(info),
        version="" if local is not None or _is_local(fs) else _version(info),
    )


def folder_name(path: str) -> str:
    """The last component of a folder's path or URL, for naming the run of the traces
    directly in it (discovery's run ``"."``): ``"sample_logs/ddp/"`` → ``"ddp"``,
    ``"s3://bucket/logs/run1"`` → ``"run1"``; a local ``"."`` or ``".."`` is resolved
    first (``"."`` in ``/home/me/run1`` → ``"run1"``). ``"."`` when no name is left
    (``"/"``, a bucket root)."""
    local = local_path(path)
    if local is not None:
        fs_path = os.path.abspath(local)
    else:
        fs, fs_path = url_to_fs(path)
        if _is_local(fs):
            fs_path = os.path.abspath(fs_path)
    name = fs_path.rstrip("/").rsplit("/", 1)[-1]
    return name or "."
