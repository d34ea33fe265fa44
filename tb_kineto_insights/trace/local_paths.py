"""Plain local paths without importing fsspec.

Importing fsspec is a large part of a start-up (it pulls in asyncio, its caching and
compression registries; ``benchmarks/RESULTS.md``); a ``report FILE`` on a local trace
needs none of it. :func:`local_path` says whether a path is one fsspec would hand to its
``LocalFileSystem`` anyway, and gives the same absolute path fsspec would use
(``fsspec.implementations.local.make_path_posix``: ``~`` expanded, a relative path
joined to the working directory, trailing ``/`` dropped), so a stat or an open of it
gives the same answer and the same error text. Anything that names a protocol
(``s3://``, ``file://``, ``file:``, ``local:``, a chain ``a::b``, ``data:``), and every
path on Windows, returns ``None``: the caller then goes through fsspec.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["FileHostError", "LocalTree", "local_path", "url_to_fs", "without_local_host"]

#: The host of a ``file://HOST/PATH`` URL that names this machine (RFC 8089, section 2:
#: ``file://localhost/x`` is ``file:///x``).
LOCAL_HOST = "localhost"
#: The URL schemes of fsspec's local filesystem that take a host part.
LOCAL_SCHEMES = ("file://", "local://")


class FileHostError(ValueError):
    """A ``file://HOST/...`` URL whose HOST is not this machine (:func:`without_local_host`).

    Attributes:
        path: the path as given.
        problem: what is wrong with it, in words (the message less the path).
    """

    def __init__(self, path: str, host: str, *, has_path: bool = True) -> None:
        self.path = path
        self.problem = (
            f"names the host {host!r}: a file URL reaches this machine's files only; "
            if has_path
            else f"names the host {host!r} and no file; "
        ) + "write file:///PATH (three slashes) or the plain path"
        super().__init__(f"{path!r}: {self.problem}")


def without_local_host(path: str) -> str:
    """``path`` with the host of each ``file://localhost/...`` URL in it dropped (every
    part of an fsspec chain ``a::b``; ``local://``, fsspec's other name for local files,
    too): ``file://localhost/x`` → ``file:///x``. Anything else is returned as it is.

    fsspec's local filesystem reads ``file://HOST/x`` as the path ``HOST/x`` under the
    working folder: ``window --out file://localhost`` wrote a file named ``localhost``
    there, and ``--cache file://localhost/tmp/c`` filled ``./localhost/tmp/c``.

    Raises:
        FileHostError: (a ValueError) a ``file://`` URL names another host
            (``file://server/x``, or a relative ``file://logs``) or a host and no path
            (``file://localhost``): its message names the URL and what to write instead
            (``file:///PATH``, three slashes, or the plain path).

    >>> without_local_host("file://localhost/data/run1")
    'file:///data/run1'
    >>> without_local_host("s3://bucket/key")
    's3://bucket/key'
    """
    given = path.split("::")
    parts = list(given)
    for i, part in enumerate(given):
        scheme = next((x for x in LOCAL_SCHEMES if part.startswith(x)), None)
        if scheme is None:
            continue
        host, slash, rest = part[len(scheme) :].partition("/")
        if host.startswith("["):  # an IPv6 literal, cut at its "::" by the chain's split
            start = len("::".join(given[: i + 1])) - len(part) + len(scheme)
            host = path[start:].partition("/")[0]
        if not host:
            continue
        elsewhere = host.lower() != LOCAL_HOST
        if elsewhere or not slash:
            raise FileHostError(path, host, has_path=elsewhere or bool(slash))
        parts[i] = scheme + slash + rest
    return "::".join(parts)


def url_to_fs(url: str, **options: Any) -> tuple[Any, str]:
    """``fsspec.core.url_to_fs(url, **options)`` (the filesystem and its path) with the
    host of a ``file://localhost`` URL dropped first (:func:`without_local_host`): every
    module that opens a URL opens it through here. Raises what fsspec raises, and
    :class:`FileHostError` (a ValueError) for another host."""
    import fsspec  # a URL only: a costly import (the module docstring)

    return fsspec.core.url_to_fs(without_local_host(url), **options)


def local_path(path: str) -> str | None:
    """The absolute POSIX path of a plain local ``path`` (as fsspec's local filesystem
    strips it), or ``None`` when ``path`` is a URL or this is not a POSIX system.

    >>> local_path("/data/run1/")
    '/data/run1'
    >>> local_path("s3://bucket/key") is None
    True
    """
    if os.sep != "/" or "://" in path or "::" in path:
        return None
    if path.startswith(("data:", "file:", "local:")):
        return None
    if path.startswith("/"):
        full = path
    elif path.startswith("~"):
        full = os.path.expanduser(path)
    else:
        rel = path[2:] if path.startswith("./") else ("" if path == "." else path)
        full = f"{os.getcwd()}/{rel}"
    return full.rstrip("/") or "/"


class LocalTree:
    """The part of fsspec's ``LocalFileSystem`` that listing a local log directory uses
    (``logdir.discover``), on ``os.scandir``: so ``report``/``diff`` of a local folder
    and the plugin on a local log directory do not import fsspec.

    Same answers as fsspec 2024-2026 on a POSIX path: :meth:`isdir` and :meth:`exists`
    follow links (a broken link does not exist); :meth:`walk` (``topdown``, detailed)
    yields ``(folder, {name: info}, {name: info})`` per folder, sub-folders in
    ``os.scandir`` order and only those left in the dict by the caller; an entry is a
    ``"directory"`` or ``"file"`` when it is one without following links, else
    ``"other"`` (a symlink to anything, a FIFO...), with ``islink``; an entry gone
    while listing is left out; every entry is ``lstat``-ed as fsspec does, so a folder
    whose entries cannot be (read but not searchable: ``r--``) cannot be listed; a
    folder that cannot be listed is reported to
    ``on_error`` when it is the root and skipped below it (as fsspec's ``walk`` does),
    told to ``on_skip`` when given. ``info`` holds ``name``, ``type`` and ``islink`` only:
    the caller stats the files it keeps.
    """

    def invalidate_cache(self, path: str | None = None) -> None:
        """Nothing is cached."""

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def walk(
        self,
        path: str,
        *,
        detail: bool = True,
        topdown: bool = True,
        maxdepth: int | None = None,
        on_error: Callable[[OSError], object] | None = None,
        on_skip: Callable[[str, str], object] | None = None,
    ) -> Iterator[tuple[str, dict[str, dict[str, Any]], dict[str, dict[str, Any]]]]:
        """Folders under ``path`` (an absolute POSIX path, as :func:`local_path` gives),
        top-down, depth first, iteratively (no recursion: any depth of folders is safe;
        a recursive walk would raise ``RecursionError`` at about 1,000 levels).
        ``detail`` and ``topdown`` must be True (what discovery asks). ``maxdepth`` as
        fsspec's: ``1`` lists ``path`` alone; None: no limit. ``on_skip(folder,
        reason)`` (optional) is told of each folder below ``path`` that is not listed:
        it cannot be listed (``reason`` the error), or it lies deeper than ``maxdepth``.
        """
        if not (detail and topdown):
            raise ValueError("LocalTree.walk lists top-down with details only")
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        root = path.rstrip("/") or "/"
        try:
            listing = self._listing(root)
        except OSError as exc:
            if on_error is not None:
                on_error(exc)
            return
        dirs, files = self._split(listing)
        yield root, dirs, files
        # one iterator over the sub-folders (those the caller left) per open level
        stack = [iter(list(dirs.values()))]
        while stack:
            info = next(stack[-1], None)
            if info is None:
                stack.pop()
                continue
            folder = info["name"]
            if maxdepth is not None and len(stack) >= maxdepth:
                if on_skip is not None:
                    on_skip(folder, f"deeper than {maxdepth - 1} folders")
                continue
            try:
                below = self._listing(folder)
            except OSError as exc:
                if on_skip is not None:
                    on_skip(folder, f"cannot be listed: {exc.strerror or exc}")
                continue
            dirs, files = self._split(below)
            yield folder, dirs, files
            stack.append(iter(list(dirs.values())))

    @staticmethod
    def _split(
        listing: list[dict[str, Any]],
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        dirs: dict[str, dict[str, Any]] = {}
        files: dict[str, dict[str, Any]] = {}
        for info in listing:
            name = info["name"].rsplit("/", 1)[-1]
            (dirs if info["type"] == "directory" else files)[name] = info
        return dirs, files

    @staticmethod
    def _listing(folder: str) -> list[dict[str, Any]]:
        out = []
        prefix = folder if folder.endswith("/") else folder + "/"
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    # as fsspec's ``info``: an entry that cannot be stat'ed (a folder
                    # that may be read but not searched) fails the whole listing
                    entry.stat(follow_symlinks=False)
                    if entry.is_dir(follow_symlinks=False):
                        kind = "directory"
                    elif entry.is_file(follow_symlinks=False):
                        kind = "file"
                    else:
                        kind = "other"
                    islink = entry.is_symlink()
                except FileNotFoundError:
                    continue
                out.append({"name": prefix + entry.name, "type": kind, "islink": islink})
        return out
