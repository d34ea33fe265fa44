"""How every file of the cache folder is sealed: a first line that vouches for the rest.

The trust model. Without a key, the first line is the hex SHA-256 of the body: it catches
damage (a flipped bit, a write cut short, a file of another format), not forgery. Anyone
who can write the cache folder can write a summary with a matching checksum, and every
TensorBoard and command that reads the folder serves it as computed. So the folder's
writers are trusted: give write access to those you would let edit the reports.

With a shared key the first line is HMAC-SHA256(key, body) in hex (RFC 2104, the same
length): a file written without the key, or edited after, does not match; it is
dropped and its summary computed again, as for a damaged file. The key is read from a
file named by ``--kineto_insights_cache_key_file`` (TensorBoard) or by the environment
variable ``KINETO_INSIGHTS_CACHE_KEY_FILE`` (TensorBoard and the command line): at least
16 bytes after surrounding whitespace is stripped (``openssl rand -hex 32 > key``), at
most 4 KiB, a regular file. Everyone who shares a folder uses the same key: a process
without it drops the keyed files (and writes plain ones), one with another key too.
Read access to the key file is what write access to the cache then needs.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading

from tb_kineto_insights.store.backends import read_bounded

#: Environment variable: the file that holds the cache's shared key.
CACHE_KEY_FILE_ENV = "KINETO_INSIGHTS_CACHE_KEY_FILE"
#: A key file's bounds (bytes, after stripping whitespace at either end).
KEY_MIN_BYTES = 16
KEY_FILE_MAX_BYTES = 4096
#: Length of the first line (hex SHA-256 or HMAC-SHA256) before its newline.
SEAL_BYTES = 64


class CacheKeyError(ValueError):
    """A cache key file that cannot be used; the message names the file and why."""


def read_key_file(path: str) -> bytes:
    """The key in ``path`` (whitespace at either end stripped).

    Raises:
        CacheKeyError: the file cannot be opened, is not a regular file, is larger than
            :data:`KEY_FILE_MAX_BYTES` or holds fewer than :data:`KEY_MIN_BYTES` bytes.
    """
    try:  # a regular file, opened non-blocking (a FIFO must not hang), size bounded
        data = read_bounded(path, KEY_FILE_MAX_BYTES, "cache key file")
    except OSError as e:  # the system's reason, or read_bounded's (after the path)
        detail = e.strerror or str(e).removeprefix(f"{path}: ")
        raise CacheKeyError(f"{path}: the cache key file cannot be used: {detail}") from e
    key = data.strip()
    if len(key) < KEY_MIN_BYTES:
        raise CacheKeyError(
            f"{path}: the cache key file holds {len(key)} bytes of key, fewer than the "
            f"{KEY_MIN_BYTES} needed (make one with: openssl rand -hex 32 > {path})"
        )
    return key


_lock = threading.Lock()
#: The key file this process read last, and its key.
_loaded: tuple[str, bytes] | None = None


def use_key_file(path: str | None) -> None:
    """Seal with the key in ``path`` from now on, in this process and in the processes
    it starts (the path goes into :data:`CACHE_KEY_FILE_ENV`); None: no key.

    Raises:
        CacheKeyError: as :func:`read_key_file`; nothing is changed then.
    """
    global _loaded
    with _lock:
        if path is None:
            os.environ.pop(CACHE_KEY_FILE_ENV, None)
            _loaded = None
            return
        key = read_key_file(path)
        os.environ[CACHE_KEY_FILE_ENV] = path
        _loaded = (path, key)


def current_key() -> bytes | None:
    """The key files are sealed with: that of the file :data:`CACHE_KEY_FILE_ENV` names
    (read once per path), None when unset or blank.

    Raises:
        CacheKeyError: the variable names a file that cannot be used.
    """
    global _loaded
    path = os.environ.get(CACHE_KEY_FILE_ENV, "").strip()
    if not path:
        return None
    loaded = _loaded
    if loaded is not None and loaded[0] == path:
        return loaded[1]
    with _lock:
        key = read_key_file(path)
        _loaded = (path, key)
        return key


def _seal_of(body: bytes, key: bytes | None) -> bytes:
    if key is None:
        return hashlib.sha256(body).hexdigest().encode("ascii")
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode("ascii")


def sealed(body: bytes) -> bytes:
    """``body`` preceded by its seal (module docstring) and a newline: how cache
    entries, run views and headline records are written (:func:`unsealed` checks it).

    Raises:
        CacheKeyError: as :func:`current_key`.
    """
    return _seal_of(body, current_key()) + b"\n" + body


def unsealed(data: bytes) -> bytes | None:
    """The body of a sealed file, or None when its first line is not the seal of the
    rest under this process's key (any changed, missing or extra byte; a file sealed
    without the key or with another).

    Raises:
        CacheKeyError: as :func:`current_key`.
    """
    seal, body = data[:SEAL_BYTES], data[SEAL_BYTES + 1 :]
    if data[SEAL_BYTES : SEAL_BYTES + 1] != b"\n":
        return None
    if not hmac.compare_digest(_seal_of(body, current_key()), seal):
        return None
    return body


def seal_problem() -> str:
    """How a file whose seal does not match is named in a log line."""
    if current_key() is None:
        return (
            "its checksum does not match: damaged, or sealed with a cache key this process "
            f"does not have ({CACHE_KEY_FILE_ENV})"
        )
    return "its seal does not match the cache key (written without it, or edited since)"


__all__ = [
    "CACHE_KEY_FILE_ENV",
    "CacheKeyError",
    "current_key",
    "read_key_file",
    "seal_problem",
    "sealed",
    "unsealed",
    "use_key_file",
]
