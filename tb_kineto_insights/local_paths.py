"""Plain local paths without importing fsspec.

Importing fsspec costs about 0.12 s (it pulls in asyncio, its caching and compression
registries); a ``report FILE`` on a local trace needs none of it. :func:`local_path`
says whether a path is one fsspec would hand to its ``LocalFileSystem`` anyway, and
gives the same absolute path fsspec would use (``fsspec.implementations.local.
make_path_posix``: ``~`` expanded, a relative path joined to the working directory,
trailing ``/`` dropped), so a stat or an open of it gives the same answer and the same
error text. Anything that names a protocol (``s3://``, ``file://``, ``file:``,
``local:``, a chain ``a::b``, ``data:``), and every path on Windows, returns ``None``:
the caller then goes through fsspec as before.
"""

from __future__ import annotations

import os

__all__ = ["local_path"]


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
