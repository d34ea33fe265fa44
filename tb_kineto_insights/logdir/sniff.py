"""Sniffing: whether a file not named ``*.pt.trace.json[.gz]`` is a Kineto trace, from
its first (decompressed) bytes, remembered per file (path, size, mtime) so that a
re-scan of a log directory does not open the same file again.
"""

from __future__ import annotations

import re
import threading
import zlib
from collections.abc import Iterator
from typing import Any

from tb_kineto_insights.trace.confine import Rule, confined, open_local

__all__ = ["is_kineto_head", "sniff_kineto_file"]

_BOM = b"\xef\xbb\xbf"
_WHITESPACE = b" \t\r\n"
_GZIP_MAGIC = b"\x1f\x8b"
# A JSON string (possibly cut off at the end of the head is fine: see is_kineto_head),
# or one structural character.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:]', re.DOTALL)
_KINETO_FIRST_KEYS = frozenset({b'"schemaVersion"', b'"deviceProperties"'})


def _skip_ws(head: bytes, pos: int) -> int:
    while pos < len(head) and head[pos] in _WHITESPACE:
        pos += 1
    return pos


def _object_keys(head: bytes, start: int) -> Iterator[bytes]:
    """Keys (quoted, raw bytes) of the JSON object opening at ``head[start] == '{'``,
    at its own nesting level only, until it closes or the head ends."""
    depth = 0
    previous: bytes | None = None
    for match in _TOKEN.finditer(head, start):
        token = match.group()
        if token in (b"{", b"["):
            depth += 1
        elif token in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                return
        elif token == b":" and depth == 1 and previous is not None and previous[:1] == b'"':
            yield previous
        previous = token


def is_kineto_head(head: bytes) -> bool:
    """Whether the first bytes of a (decompressed) JSON file look like a Kineto trace.

    Args:
        head: the first bytes of the file, decompressed; may be cut anywhere.

    Returns:
        True when, after an optional UTF-8 BOM and whitespace, the head is either

        - an object that has a top-level ``"traceEvents"`` key within the head, or whose
          first key is ``"schemaVersion"`` or ``"deviceProperties"`` (Kineto writes those
          first, and ``deviceProperties`` can be longer than the head); or
        - an array whose first element is an object with a ``"ph"`` key (legacy
          bare-array root).

        False otherwise, including for empty input. Never raises.
    """
    data = bytes(head)
    pos = 0
    if data.startswith(_BOM):
        pos = len(_BOM)
    pos = _skip_ws(data, pos)
    if pos >= len(data):
        return False
    if data[pos : pos + 1] == b"{":
        for index, key in enumerate(_object_keys(data, pos)):
            if key == b'"traceEvents"' or (index == 0 and key in _KINETO_FIRST_KEYS):
                return True
        return False
    if data[pos : pos + 1] == b"[":
        pos = _skip_ws(data, pos + 1)
        if data[pos : pos + 1] != b"{":
            return False
        return any(key == b'"ph"' for key in _object_keys(data, pos))
    return False


def _open_head(fs: Any, path: str, sniff_bytes: int, root: str) -> Any:
    """The file opened for sniffing; a local one (``root`` set) under the same rule as a
    load: a regular file inside ``root`` when opened (a FIFO or a link swapped to lead
    outside since the listing raises TraceIOError, and is skipped)."""
    if root:
        with confined(path, Rule(root)):
            return open_local(path)
    return fs.open(path, "rb", block_size=max(sniff_bytes, 1 << 16))


def _read_head(fs: Any, path: str, sniff_bytes: int, root: str = "") -> bytes:
    """First ``sniff_bytes`` bytes of the file, gunzipped when it starts with the gzip
    magic. A truncated gzip stream gives what could be decompressed. Raises whatever
    the filesystem raises when the file cannot be opened, or TraceIOError when a local
    file is refused (see :func:`_open_head`)."""
    with _open_head(fs, path, sniff_bytes, root) as raw:
        magic = raw.read(2)
        raw.seek(0)
        if magic != _GZIP_MAGIC:
            return bytes(raw.read(sniff_bytes))
        import gzip  # a gzip file of an odd name: only here

        out = bytearray()
        with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            try:
                while len(out) < sniff_bytes:
                    chunk = gz.read1(sniff_bytes - len(out))
                    if not chunk:
                        break
                    out += chunk
            except (EOFError, OSError, zlib.error):
                pass  # truncated or damaged after the head: keep what we have
        return bytes(out)


# Sniff results for files whose identity (path, size, mtime) is known, so that a
# re-scan of a shared log directory does not re-open every oddly named file.
_SNIFF_CACHE: dict[tuple[str, int, float, int], bool] = {}
_SNIFF_CACHE_MAX = 20_000
_SNIFF_CACHE_LOCK = threading.Lock()


def sniff_kineto_file(
    fs: Any, path: str, size: int, mtime: float, sniff_bytes: int, root: str = ""
) -> bool:
    """Whether the file looks like a Kineto trace; False when it cannot be read (or is
    refused: see :func:`_open_head`)."""
    key = (f"{type(fs).__module__}.{type(fs).__name__}:{path}", size, mtime, sniff_bytes)
    cacheable = mtime > 0.0
    if cacheable:
        with _SNIFF_CACHE_LOCK:
            cached = _SNIFF_CACHE.get(key)
        if cached is not None:
            return cached
    try:
        result = is_kineto_head(_read_head(fs, path, sniff_bytes, root))
    except Exception:  # any driver error: unreadable now, skip it
        return False
    if cacheable:
        with _SNIFF_CACHE_LOCK:
            if len(_SNIFF_CACHE) >= _SNIFF_CACHE_MAX:
                _SNIFF_CACHE.clear()
            _SNIFF_CACHE[key] = result
    return result
