"""Files written for the user (``window --out``): whole or not at all, and never over
one of the command's inputs.

- **Atomic**: the data goes to a temporary file in the target's folder, is flushed to
  the disk (``fsync``), then renamed over the target, and the folder is flushed
  (:func:`~tb_kineto_insights.store.backends.write_atomic` with ``durable``): a full disk,
  a quota or a killed command leaves the older file (or none) and no temporary, never
  a truncated file. On object storage (``s3://``) the object is one PUT of the whole
  data (fsspec ``pipe_file``), which the store shows all at once.
- **Identity**: a name is resolved to the file it names whatever the spelling: a plain
  path, ``./``, a symbolic link, ``/proc/self/cwd/...``, and the URLs whose fsspec
  filesystem is the local one (``file://``, ``local://``, ``file:``). Two names are the
  same file when their ``(st_dev, st_ino)`` are equal (a hard link too); a remote URL is
  compared by its canonical URL.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tb_kineto_insights.store.backends import write_atomic
from tb_kineto_insights.trace.local_paths import local_path, url_to_fs

__all__ = ["local_file", "same_file", "write_output"]

#: Prefixes that may name a local file through fsspec (checked with fsspec itself).
_LOCAL_SCHEMES = ("file:", "local:")


def local_file(name: str) -> str | None:
    """The local path ``name`` names: a plain path as it is (made absolute), a URL whose
    fsspec filesystem is the local one (``file://``, ``local://``, ``file:``, a chain
    ending in one) as its path; None for anything else (``s3://``). Raises nothing: a URL
    fsspec cannot parse is not local."""
    plain = local_path(name)
    if plain is not None:
        return plain
    if "://" not in name and not name.startswith(_LOCAL_SCHEMES):
        return None
    try:
        from fsspec.implementations.local import LocalFileSystem

        fs, path = url_to_fs(name)
    except Exception:  # noqa: BLE001 (an unknown protocol, a missing driver: not local)
        return None
    return str(path) if isinstance(fs, LocalFileSystem) else None


def _identity(name: str) -> tuple[int, int] | str | None:
    """What decides whether two names are one file: ``(st_dev, st_ino)`` of a local file
    (links followed), the canonical URL of a remote one, None for a local name that does
    not exist."""
    path = local_file(name)
    if path is None:
        try:
            fs, remote = url_to_fs(name)
            return str(fs.unstrip_protocol(remote))
        except Exception:  # noqa: BLE001 (compared as written)
            return name
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def same_file(a: str, b: str) -> bool:
    """Whether names ``a`` and ``b`` (paths or URLs) are one file (module docstring); a
    local name that does not exist is no file."""
    ia = _identity(a)
    return ia is not None and ia == _identity(b)


#: What a file that is not a regular one is, by its ``stat`` type test.
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def _regular_target(name: str, path: str) -> str:
    """The file the local ``path`` (as ``name`` gave it) is written as: through a
    symbolic link to its target (the rename would replace the link itself), refused
    when that is not a regular file (a device, a FIFO, a folder: the rename replaced
    ``/dev/null`` with a regular file). Raises ``OSError`` saying what it is."""
    target = os.path.realpath(path)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target  # a new file (a link's missing target included)
    if stat.S_ISREG(mode):
        return target
    kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
    raise OSError(f"{name}: {kind}, not a regular file: name a file to write")


def write_output(name: str, data: bytes) -> None:
    """Write ``data`` as the file ``name`` (a path or URL) atomically (module docstring).

    A local name that is a symbolic link is written through it; one that is not a
    regular file (a device, a FIFO, a folder) is refused (:func:`_regular_target`).

    Raises:
        OSError: it cannot be written (a missing folder, a full disk, permissions, a
            store's error, not a regular file); the message says why, and nothing was
            changed.
    """
    path = local_file(name)
    if path is not None:
        write_atomic(Path(_regular_target(name, path)), data, durable=True, mkdir=False)
        return
    try:
        fs, remote = url_to_fs(name)
        fs.pipe_file(remote, data)  # one PUT: all or nothing
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 (a driver's own error type)
        raise OSError(f"{name}: {exc}") from exc
