"""Opening a local trace file only when it is the file discovery listed, inside its
log directory.

Discovery checks that a path resolves inside the log directory, but the file is opened
later, and in between a symlink may be swapped: the file's own link, a folder above it
replaced by a link to another folder, or any link of a chain. So the check that counts
is made on the *opened* file, never on the path alone. For a path with a registered
rule (see :func:`confined`), :func:`open_local`:

1. opens the path read-only with ``O_NONBLOCK`` (a FIFO swapped in cannot block the
   open) and ``O_CLOEXEC``;
2. requires ``fstat`` of the descriptor to be a regular file (not a FIFO, device or
   folder);
3. requires the real path of the descriptor to lie inside the rule's root (the real
   path of the log directory). The real path is ``readlink("/proc/self/fd/N")``; where
   ``/proc`` is absent it is ``os.path.realpath(path)``, accepted only when that path's
   ``stat`` has the descriptor's ``st_dev`` and ``st_ino`` (the same file);
4. when the rule carries the identity discovery saw, ``(st_dev, st_ino, st_size,
   st_mtime_ns)`` of the descriptor must equal it: a file rewritten or replaced since
   it was listed is not read under the old identity (its summary would be cached as the
   old file's).

A refusal is a :class:`~tb_kineto_insights.trace.errors.TraceIOError` naming the path
and the reason; it never quotes a byte of the file. Being an I/O error, it is not
remembered as a verdict about the file's content: the next request tries again.

Paths without a rule (the CLI's ``report FILE``) are opened by ``open``, unchecked.
Rules are registered per path, not per thread, because the reader opens the file on a
helper thread (``source._prefetch``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from tb_kineto_insights.trace.errors import TraceIOError

__all__ = [
    "FileIdentity",
    "Rule",
    "confined",
    "file_identity",
    "inside",
    "open_local",
    "rule_for",
]

#: ``(st_dev, st_ino, st_size, st_mtime_ns)`` of a file.
FileIdentity = tuple[int, int, int, int]


@dataclass(frozen=True)
class Rule:
    """What an opened file must satisfy.

    Attributes:
        root: the real path (``os.path.realpath``) of the folder the file must lie in.
        expected: the file identity ``(st_dev, st_ino, st_size, st_mtime_ns)`` it must
            have, or None to accept any regular file inside ``root``.
    """

    root: str
    expected: FileIdentity | None = None


_RULES: dict[str, list[Rule]] = {}
_LOCK = threading.Lock()


@contextlib.contextmanager
def confined(path: str, rule: Rule) -> Iterator[None]:
    """While the block runs, opening ``path`` through :func:`open_local` (and so through
    the reader) obeys ``rule``. Nested rules for one path all apply."""
    with _LOCK:
        _RULES.setdefault(path, []).append(rule)
    try:
        yield
    finally:
        with _LOCK:
            rules = _RULES.get(path, [])
            with contextlib.suppress(ValueError):
                rules.remove(rule)
            if not rules:
                _RULES.pop(path, None)


def rule_for(path: str) -> list[Rule]:
    """The rules registered for ``path`` now (empty: none)."""
    with _LOCK:
        return list(_RULES.get(path, ()))


def inside(root: str, real_path: str) -> bool:
    """Whether ``real_path`` is ``root`` or lies below it (both real, absolute paths)."""
    try:
        return os.path.commonpath([root, real_path]) == root
    except ValueError:  # one relative, or different drives
        return False


def file_identity(st: os.stat_result) -> FileIdentity:
    """``(st_dev, st_ino, st_size, st_mtime_ns)`` of a stat result."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _real_path_of(fd: int, path: str, st: os.stat_result) -> str | None:
    """The real path of the open descriptor ``fd``; None when it cannot be told."""
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/self/fd/{fd}")
    real = os.path.realpath(path)
    try:
        again = os.stat(real)
    except OSError:
        return None
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
        return None  # swapped between the open and the check: refuse
    return real


def _check(path: str, fd: int, rules: list[Rule]) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise TraceIOError(path, "refused: not a regular file (a link to a device or pipe?)")
    real = _real_path_of(fd, path, st)
    for rule in rules:
        if real is None or not inside(rule.root, real):
            raise TraceIOError(
                path,
                "refused: the file opened lies outside the log directory "
                f"{rule.root!r} (a symlink changed since the log directory was listed)",
            )
        if rule.expected is not None and file_identity(st) != rule.expected:
            raise TraceIOError(
                path,
                "the file changed since the log directory was listed "
                "(other inode, size or mtime); it is read again after the next scan",
            )


def open_local(path: str) -> IO[bytes]:
    """Open a local file for reading, applying the rules registered for ``path``.

    Raises:
        TraceIOError: a rule refuses the opened file (outside the root, not a regular
            file, another identity than expected).
        OSError: the path cannot be opened (missing, permission): the caller names it.
    """
    rules = rule_for(path)
    # opened without blocking: the open of a fifo (named like a trace, or given by hand)
    # waits for a writer for ever; it is refused below, as is any file that is not regular
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    try:
        if rules:
            _check(path, fd, rules)
        elif not stat.S_ISREG(mode := os.fstat(fd).st_mode):
            if stat.S_ISDIR(mode):
                raise TraceIOError(path, "is a folder, not a trace file: give a file in it")
            raise TraceIOError(path, "not a regular file (a fifo, socket or device): not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
