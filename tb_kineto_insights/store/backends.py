"""Where cache entries are kept: a local (or NFS) folder, or an fsspec URL.

A store holds small immutable files by relative name (``v<ANALYSIS_VERSION>/<key>.summary``)
and knows nothing of their content. Two kinds:

:class:`LocalStore` (a path, or ``file://``)
    A write goes to a temporary file in the same folder, then ``os.replace``: readers
    see the old file or the whole new one, on a local disk and on NFS alike (rename is
    atomic within one folder). Files are created with mode 0666 less the umask (0644 or
    0664), so a teammate sharing the folder can read them.

:class:`FsspecStore` (``s3://``, ``gs://``, ``abfs://``, ``memory://`` ...)
    A write is one ``pipe_file`` call: a single PUT of the whole object, which object
    stores make visible all at once, never half-written.

Concurrent writers of one entry: both write complete, identical-in-meaning entries and
the last one wins; a reader never sees a mix (see ``cache.py`` on duplicated work).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Protocol

__all__ = [
    "MAX_ENTRY_BYTES",
    "CacheStore",
    "FsspecStore",
    "LocalStore",
    "open_store",
    "read_bounded",
]

#: Largest cache file a reader takes (a summary, an error, a headline, the headline
#: index): far above any entry the analysis writes (a summary of a 2 GB trace is a few
#: MB; the index of 20,000 runs about 30 MB). A larger file is not an entry: an
#: OSError, and the reader computes the answer again.
MAX_ENTRY_BYTES = 512 * 1024**2


class CacheStore(Protocol):
    """Small files by relative ``/``-separated name."""

    location: str

    def read(self, name: str) -> bytes | None:
        """The file's bytes; None when it does not exist. Raises OSError otherwise
        (including a file that is not a regular file, or larger than
        :data:`MAX_ENTRY_BYTES`)."""

    def exists(self, name: str) -> bool:
        """Whether the file exists (False when that cannot be asked)."""

    def write(self, name: str, data: bytes) -> None:
        """Write the whole file atomically. Raises OSError when it cannot."""

    def delete(self, name: str) -> None:
        """Remove the file; no error when it is gone or cannot be removed."""


def _create_temporary(folder: Path, name: str) -> tuple[int, str]:
    """A new file beside ``folder/name``, opened for writing, created with mode 0666
    less the umask (``tempfile.mkstemp`` would give 0600: a teammate sharing the cache
    folder could not read it)."""
    for _ in range(100):
        tmp = str(folder / f".{name}.{secrets.token_hex(8)}.tmp")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


#: A writer's temporary file older than this is left over by a killed writer (a write
#: takes well under a second): removed.
STALE_TEMPORARY_S = 3600.0
#: Seconds between two sweeps of one folder for stale temporaries, per process.
SWEEP_INTERVAL_S = 600.0
_last_sweep: dict[str, float] = {}
_HEX = frozenset("0123456789abcdef")


def _is_temporary(name: str) -> bool:
    """Whether ``name`` is one of :func:`_create_temporary`'s: ``.NAME.<16 hex>.tmp``."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    token = name[:-4].rpartition(".")[2]
    return len(token) == 16 and set(token) <= _HEX


def remove_stale_temporaries(
    folder: Path, max_age_s: float = STALE_TEMPORARY_S, now: float | None = None
) -> int:
    """Remove the temporary files of :func:`write_atomic` in ``folder`` whose last change
    is more than ``max_age_s`` seconds old (a writer killed between create and rename
    leaves one; nothing else ever removes it). Returns how many were removed; raises
    nothing (a folder that cannot be listed, a file gone meanwhile: skipped)."""
    now = time.time() if now is None else now
    removed = 0
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if not _is_temporary(entry.name):
                continue
            with contextlib.suppress(OSError):
                if now - entry.stat(follow_symlinks=False).st_mtime > max_age_s:
                    os.unlink(entry.path)
                    removed += 1
    return removed


def _sweep_now_and_then(folder: Path) -> None:
    """:func:`remove_stale_temporaries` of ``folder``, at most every
    :data:`SWEEP_INTERVAL_S` seconds per folder and process."""
    now = time.monotonic()
    key = str(folder)
    if now - _last_sweep.get(key, -SWEEP_INTERVAL_S) < SWEEP_INTERVAL_S:
        return
    _last_sweep[key] = now
    remove_stale_temporaries(folder)


def write_atomic(path: Path, data: bytes, *, durable: bool = False, mkdir: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one:
    a temporary file beside it (same folder: the rename is atomic there, on NFS too),
    written, then renamed over ``path``; on any failure (a full disk, a quota) the
    temporary is removed and ``path`` is left as it was. The file's mode is 0666 less
    the umask (0644 with the usual umask 022, 0664 with 002), like any file the user
    writes.

    ``durable``: the data is on the disk (``fsync``) before the rename, and the rename
    (the folder, ``fsync``) before returning: after a crash the file is the old one or
    the whole new one (a file written for the user, ``window --out``). Cache entries
    skip it: a torn one fails its checksum and is computed again. ``mkdir``: create the
    missing folders (the cache's); without it a missing folder is an OSError.

    Raises:
        OSError: the file cannot be written (the message is the system's).
    """
    if mkdir:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temporary(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_folder(path.parent)
    _sweep_now_and_then(path.parent)


def _fsync_folder(folder: Path) -> None:
    """``fsync`` a folder (the rename in it), where the system allows it (not on
    Windows; some filesystems refuse it: EINVAL, ignored)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(folder, flags)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def read_bounded(
    path: str | os.PathLike[str], max_bytes: int | None = None, what: str = "cache entry"
) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` (``what``: the file's
    kind, in the messages). Anyone who can
    write a cache folder can plant anything in it: a FIFO (a plain ``open`` waits for a
    writer forever), a link to ``/dev/zero`` (a plain read fills the memory), a sparse
    file of a terabyte. The file is opened non-blocking (a FIFO opens at once), must be
    a regular file (``fstat`` of what was opened: no race with a swap), and is read to
    ``max_bytes`` (default :data:`MAX_ENTRY_BYTES`) + 1 at most.

    Raises:
        FileNotFoundError: no such file.
        OSError: not a regular file, larger than ``max_bytes``, or unreadable (the
            message names the file and the problem).
    """
    max_bytes = MAX_ENTRY_BYTES if max_bytes is None else max_bytes
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{os.fspath(path)}: not a regular file (a {what} must be one)")
        if st.st_size > max_bytes:
            raise OSError(
                f"{os.fspath(path)}: {st.st_size:,} bytes, larger than any {what} "
                f"({max_bytes:,} bytes at most)"
            )
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file: reads never wait
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:  # grew past the bound while read
            raise OSError(
                f"{os.fspath(path)}: larger than any {what} ({max_bytes:,} bytes at most)"
            )
        return b"".join(chunks)
    finally:
        os.close(fd)


class LocalStore:
    """A local or NFS folder (created on first write)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).expanduser()
        self.location = str(self.folder)

    def path(self, name: str) -> Path:
        return self.folder / name

    def read(self, name: str) -> bytes | None:
        """The file's bytes (:func:`read_bounded`); None when it does not exist."""
        try:
            return read_bounded(self.path(name))
        except FileNotFoundError:
            return None

    def exists(self, name: str) -> bool:
        try:
            return self.path(name).is_file()
        except OSError:
            return False

    def write(self, name: str, data: bytes) -> None:
        write_atomic(self.path(name), data)

    def delete(self, name: str) -> None:
        with contextlib.suppress(OSError):
            self.path(name).unlink()


class FsspecStore:
    """A folder on any fsspec filesystem (``s3://bucket/cache``); credentials and
    endpoint through fsspec's configuration (``FSSPEC_S3_ENDPOINT_URL`` ...)."""

    def __init__(self, url: str) -> None:
        from tb_kineto_insights.trace.local_paths import url_to_fs  # fsspec: a URL only

        self.location = url.rstrip("/")
        self._fs, root = url_to_fs(self.location)
        self._root = str(root).rstrip("/")

    def _path(self, name: str) -> str:
        return f"{self._root}/{name}"

    def read(self, name: str) -> bytes | None:
        """The object's bytes, :data:`MAX_ENTRY_BYTES` at most (one ranged read: a
        larger object is an OSError); None when it does not exist."""
        try:
            data = bytes(self._fs.cat_file(self._path(name), start=0, end=MAX_ENTRY_BYTES + 1))
            if len(data) > MAX_ENTRY_BYTES:
                raise OSError(
                    f"{self.location}/{name}: larger than any cache entry "
                    f"({MAX_ENTRY_BYTES:,} bytes at most)"
                )
            return data
        except FileNotFoundError:
            return None
        except OSError:
            raise
        except Exception as exc:  # a driver's own error type
            raise OSError(f"cannot read {self.location}/{name}: {exc}") from exc

    def exists(self, name: str) -> bool:
        try:
            return bool(self._fs.exists(self._path(name)))
        except Exception:
            return False

    def write(self, name: str, data: bytes) -> None:
        try:
            self._fs.pipe_file(self._path(name), data)  # one PUT: all or nothing
        except OSError:
            raise
        except Exception as exc:
            raise OSError(f"cannot write {self.location}/{name}: {exc}") from exc
        with contextlib.suppress(Exception):
            self._fs.invalidate_cache(self._path(name))

    def delete(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self._fs.rm_file(self._path(name))


def open_store(location: str | os.PathLike[str]) -> LocalStore | FsspecStore:
    """The store for a cache location: a local path or ``file://`` URL gives a
    :class:`LocalStore`, any other URL an :class:`FsspecStore`.

    Raises:
        ValueError, ImportError: unknown protocol, or its fsspec driver is missing; a
            ``file://`` URL of another host (``file://localhost/x`` is ``/x``).
    """
    from tb_kineto_insights.trace.local_paths import without_local_host

    text = without_local_host(os.fspath(location))
    if text.startswith("file://"):
        return LocalStore(text[len("file://") :])
    if "://" in text or "::" in text:
        return FsspecStore(text)
    return LocalStore(text)
