"""Content identity of a trace file: what the shared summary cache is keyed on.

A trace file's *content key* is the hex XXH3-128 digest (``xxhash``) of::

    b"kineto-insights-content/1\\n"
    + b"size=<size_bytes>\\n"
    + b"version=<version>\\n"
    + <first HASH_BYTES bytes of the stored file>
    + b"\\n--tail--\\n"
    + <bytes from max(HASH_BYTES, size - HASH_BYTES) to the end>  (when size > HASH_BYTES)

- ``size_bytes`` is the stored size (compressed size for gzip).
- ``version`` is the object store's ``ETag`` (and ``VersionId`` when versioning is on)
  when the listing gives one, else ``mtime=`` and the modification time in whole
  microseconds (``round(mtime * 1e6)``; ``cp -p``, ``rsync -t`` and ``shutil.copy2``
  keep it, a plain ``cp`` does not, and then the copy is simply another key).
- The bytes are those of the stored file (not decompressed): at most 2 × ``HASH_BYTES``
  (1 MiB) are read, with two ranged reads, whatever the file's size.

No path, device, inode or log-directory root goes in: the same file mounted at
``/mnt/a/logs`` on one machine and ``/home/me/logs`` on another, or copied with its
times to another folder, has the same key, so a teammate's TensorBoard (or ``report``)
finds the summary another one computed. Those (``st_dev``, ``st_ino``, ``st_mtime_ns``,
root) stay in :class:`~tb_kineto_insights.store.cache.Identity` for deciding whether a listed
file changed and for the containment rule of ``trace/confine.py``; a local file's head
and tail are read under that same rule.

Check by hand (local file, no ETag)::

    import xxhash, os
    st = os.stat(p); data = open(p, "rb").read()
    h = xxhash.xxh3_128(b"kineto-insights-content/1\\n")
    h.update(b"size=%d\\n" % st.st_size)
    h.update(b"version=mtime=%d\\n" % round(st.st_mtime * 1e6))
    h.update(data[:2**20])
    if len(data) > 2**20:
        h.update(b"\\n--tail--\\n")
        h.update(data[max(2**20, len(data) - 2**20):])
    h.hexdigest()
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import IO

import xxhash

from tb_kineto_insights.trace.confine import Rule, confined, open_local
from tb_kineto_insights.trace.errors import TraceIOError
from tb_kineto_insights.trace.local_paths import url_to_fs, without_local_host

__all__ = ["HASH_BYTES", "content_key", "content_key_cached", "version_token"]

#: Bytes hashed at each end of the stored file.
HASH_BYTES = 1024 * 1024
_PREFIX = b"kineto-insights-content/1\n"


def version_token(mtime: float, version: str = "") -> str:
    """The ``version`` part of the key: the object store's ETag/VersionId when given,
    else ``mtime=`` and the modification time in whole microseconds."""
    if version:
        return version
    return f"mtime={round(mtime * 1e6)}"


def _read_ranges(handle: IO[bytes], size_bytes: int) -> tuple[bytes, bytes]:
    head = handle.read(HASH_BYTES)
    tail = b""
    if size_bytes > HASH_BYTES:
        handle.seek(max(HASH_BYTES, size_bytes - HASH_BYTES))
        tail = handle.read(HASH_BYTES)
    return head, tail


def _head_and_tail(
    path: str, size_bytes: int, root: str, file_identity: tuple[int, int, int, int] | None
) -> tuple[bytes, bytes]:
    path = without_local_host(path)  # file://localhost/x is /x
    if "://" not in path or path.startswith("file://"):
        local = path.removeprefix("file://")
        if root:
            with confined(local, Rule(root, file_identity)), open_local(local) as handle:
                return _read_ranges(handle, size_bytes)
        with open_local(local) as handle:
            return _read_ranges(handle, size_bytes)
    fs, fs_path = url_to_fs(path)  # fsspec: a URL only (trace/local_paths.py)
    if size_bytes <= 2 * HASH_BYTES:
        data = bytes(fs.cat_file(fs_path))
        return data[:HASH_BYTES], data[HASH_BYTES:]
    head = bytes(fs.cat_file(fs_path, start=0, end=HASH_BYTES))  # ranged GETs
    tail = bytes(fs.cat_file(fs_path, start=size_bytes - HASH_BYTES, end=size_bytes))
    return head, tail


def content_key(
    path: str,
    size_bytes: int,
    mtime: float,
    version: str = "",
    *,
    root: str = "",
    file_identity: tuple[int, int, int, int] | None = None,
) -> str:
    """The content key (32 hex digits) of a stored trace file; formula in the module
    docstring.

    Args:
        path: local path or fsspec URL.
        size_bytes: stored size as listed.
        mtime: modification time in seconds (used when ``version`` is empty).
        version: the object store's ETag/VersionId, ``""`` when none.
        root, file_identity: a local file is read under ``trace/confine.py``'s rule
            (inside ``root``, and exactly this ``(st_dev, st_ino, st_size,
            st_mtime_ns)`` when given).

    Raises:
        TraceIOError: the file cannot be opened or read (missing, refused, storage
            error); names the file.
    """
    try:
        head, tail = _head_and_tail(path, size_bytes, root, file_identity)
    except TraceIOError:
        raise
    except FileNotFoundError as exc:
        raise TraceIOError(path, "file not found") from exc
    except (OSError, ValueError, ImportError) as exc:
        raise TraceIOError(path, f"cannot read for its content key: {exc}") from exc
    digest = xxhash.xxh3_128(_PREFIX)
    digest.update(f"size={int(size_bytes)}\n".encode())
    digest.update(f"version={version_token(mtime, version)}\n".encode())
    digest.update(head)
    if tail:
        digest.update(b"\n--tail--\n")
        digest.update(tail)
    return digest.hexdigest()


# Keys of files whose listed identity (path, size, times, device, inode, ETag) has not
# changed are computed once per process.
_MEMO: OrderedDict[tuple[object, ...], str] = OrderedDict()
_MEMO_MAX = 100_000
_MEMO_LOCK = threading.Lock()
#: How many content keys were computed (files read) in this process; tests use it.
computed = 0


def content_key_cached(
    freshness: tuple[object, ...],
    path: str,
    size_bytes: int,
    mtime: float,
    version: str = "",
    *,
    root: str = "",
    file_identity: tuple[int, int, int, int] | None = None,
) -> str:
    """:func:`content_key`, remembered per ``freshness`` (the listed identity: a file
    with the same path, size, mtime, device, inode and ETag is not read again).

    Raises:
        TraceIOError: as :func:`content_key` (failures are not remembered).
    """
    global computed
    with _MEMO_LOCK:
        key = _MEMO.get(freshness)
        if key is not None:
            _MEMO.move_to_end(freshness)
            return key
    key = content_key(path, size_bytes, mtime, version, root=root, file_identity=file_identity)
    with _MEMO_LOCK:
        computed += 1
        _MEMO[freshness] = key
        while len(_MEMO) > _MEMO_MAX:
            _MEMO.popitem(last=False)
    return key
