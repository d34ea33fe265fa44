"""Byte source for one trace file: local path or fsspec URL, gzip by magic bytes,
decompressed in blocks with a cap on the total.

Progress: inside ``with reading_progress(callback):`` every :class:`BlockReader` made
in that context calls ``callback(bytes_read, file_bytes)`` after each read from
storage: bytes of the *stored* file read so far (compressed bytes for ``.gz``) and the
stored file's size, so ``bytes_read / file_bytes`` is the share of the file read.

Inflate ahead: a reader inflates one block ahead on a helper thread, which uses a
second core while this one decodes. Inside ``with inflate_on_this_thread():`` the
readers made there inflate on the reading thread instead: for a process that reads whole
files while every other core reads others (``store/parallel_summaries.py``), where the
helper thread only adds its start, its queue and switches, in system time
(``benchmarks/RESULTS.md``).

Inflate: `zlib-ng <https://github.com/pycompression/python-zlib-ng>`_'s ``zlib_ng``
module (a drop-in for the stdlib's ``zlib``: ``decompressobj``, ``copy`` for the
damage bisection, ``error``; it releases the GIL as zlib does) when it imports, else
the stdlib's ``zlib``. On the loop below (64 KiB of input per call, 1 MiB of output at
most) zlib-ng takes markedly less CPU than zlib (``benchmarks/bench_inflate.py``;
figures in ``benchmarks/RESULTS.md``); ISA-L's ``isal_zlib`` is about as fast, but its
decompressor has no ``copy``. Both give the same blocks, byte for byte, and the same
damage (offset and zlib's message) on whole, truncated and corrupt files
(``tests/test_source_inflate_real.py``).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

from tb_kineto_insights.trace.confine import open_local
from tb_kineto_insights.trace.errors import TraceIOError, TraceTooLargeError
from tb_kineto_insights.trace.local_paths import (
    FileHostError,
    local_path,
    url_to_fs,
    without_local_host,
)

#: The inflate module: zlib-ng's (the same API as the stdlib's: ``decompressobj``,
#: ``copy``, ``error``; faster, see the module docstring), else the stdlib's ``zlib``.
#: ``Any``: zlib-ng's stubs lack ``copy`` and type ``error`` loosely.
zlib: Any
try:
    from zlib_ng import zlib_ng as zlib
except ImportError:  # a wheel that will not load (tests/test_source_inflate.py)
    import zlib

GZIP_MAGIC = b"\x1f\x8b"
#: Default cap on uncompressed JSON bytes for one file (override per call or with the
#: CLI's ``--max-json-bytes``). Large enough for any trace a browser could ever show.
DEFAULT_MAX_JSON_BYTES = 8 * 1024**3
#: Uncompressed bytes handed to the decoder at a time.
BLOCK_BYTES = 1024 * 1024
#: Compressed bytes read from storage at a time.
COMPRESSED_READ_BYTES = 1024 * 1024
#: Compressed bytes handed to zlib at a time: a corrupt stream raises for the whole call,
#: so the data before the damage is recovered from at most this much input (bisection).
INFLATE_STEP_BYTES = 64 * 1024


#: ``callback(bytes_read, file_bytes)`` for the readers made in this context.
ProgressCallback = Callable[[int, int], None]
_progress: contextvars.ContextVar[ProgressCallback | None] = contextvars.ContextVar(
    "trace_read_progress", default=None
)


_inflate_ahead: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "trace_inflate_ahead", default=True
)


@contextlib.contextmanager
def inflate_on_this_thread() -> Iterator[None]:
    """Readers made inside this block inflate on the thread that reads them, with no
    helper thread (see the module docstring: when every core already reads a file)."""
    token = _inflate_ahead.set(False)
    try:
        yield
    finally:
        _inflate_ahead.reset(token)


@contextlib.contextmanager
def reading_progress(callback: ProgressCallback | None) -> Iterator[None]:
    """Report the bytes read of each trace file read inside this block to ``callback``
    (``callback(bytes_read, file_bytes)``, both counted in the stored, compressed
    file; called from the reading thread, after each read from storage)."""
    token = _progress.set(callback)
    try:
        yield
    finally:
        _progress.reset(token)


def object_version_of(info: Mapping[str, Any]) -> str:
    """An object's version from its fsspec ``info``: the ETag (``ETag``/``etag``), with
    ``@`` and its version id (``VersionId``, ``generation``, ``version_id``) when given;
    ``""`` when the store gives none (discovery lists spans by it too)."""
    etag = info.get("ETag") or info.get("etag") or ""
    version = info.get("VersionId") or info.get("generation") or info.get("version_id") or ""
    text = str(etag).strip('"')
    if version and str(version) != "null":
        text = f"{text}@{version}"
    return text


#: fsspec drivers whose ranged reads are pinned to the version opened by the store
#: itself: s3fs sends ``If-Match: <ETag>`` with every ranged GET and raises
#: ``FileExpired`` when the object changed. Other drivers' files are checked here.
_SERVER_PINNED_MODULES = ("s3fs",)


def _changed_message(opened: str, now: str, at_byte: int) -> str:
    return (
        f"the object changed while it was read (version {opened or 'none'} when opened, "
        f"{now or 'none'} after byte {at_byte:,}): its pieces would mix two versions; "
        "not read, read again at the next scan"
    )


def _pin_version(opened: Any, fs: Any, fs_path: str, path: str) -> None:
    """Make every ranged fetch of the fsspec file ``opened`` check that the object is
    still the version it was opened at (``details``' ETag/version), raising
    :class:`TraceIOError` when it is not: the pieces of one read must come from one
    version (an object overwritten while it is read would give a summary of mixed
    bytes). Files without a ranged cache (local, memory) are read from one copy;
    drivers that pin on the server (:data:`_SERVER_PINNED_MODULES`) are left as they
    are; an object whose store gives no version cannot be checked. One ``info`` call
    per fetch (a fetch is at least the file's block size: fsspec's default is 5 MiB)."""
    cache: Any = getattr(opened, "cache", None)
    fetcher = getattr(cache, "fetcher", None)
    if fetcher is None or type(opened).__module__.split(".")[0] in _SERVER_PINNED_MODULES:
        return
    details = getattr(opened, "details", None) or {}
    pinned = object_version_of(details)
    if not pinned:
        return

    def checked_fetch(start: int, end: int) -> bytes:
        data = fetcher(start, end)
        with contextlib.suppress(Exception):  # a filesystem without a listings cache
            fs.invalidate_cache(fs_path)
        try:
            now = object_version_of(fs.info(fs_path))
        except FileNotFoundError:
            now = ""
        if now != pinned:
            raise TraceIOError(path, _changed_message(pinned, now, start))
        return bytes(data)

    cache.fetcher = checked_fetch


def open_stored(path: str) -> IO[bytes]:
    """The stored file ``path`` (a local path, or an fsspec URL pinned to the version
    opened) open for reading bytes; ``file://localhost/x`` is ``/x``. Raises
    TraceIOError: not found, cannot be opened, or a ``file://`` URL of another host."""
    try:
        if "://" in path:
            import fsspec  # a URL only: its imports are costly (local_paths.py)

            handle = fsspec.open(without_local_host(path), "rb")
            opened = handle.open()
            _pin_version(opened, handle.fs, handle.path, path)
            return opened
        return open_local(path)  # containment rules, when registered: see trace/confine.py
    except FileNotFoundError as exc:
        raise TraceIOError(path, "file not found") from exc
    except FileHostError as exc:
        raise TraceIOError(path, exc.problem) from exc
    except (OSError, ValueError, ImportError) as exc:
        raise TraceIOError(path, f"cannot open: {exc}") from exc


def file_size(path: str) -> int:
    """Size in bytes of the stored file (compressed size for ``.gz``).

    Raises:
        TraceIOError: the file cannot be found or asked about.
    """
    try:
        local = local_path(path)
        if local is not None:  # what fsspec's local filesystem answers, without importing it
            return os.stat(local).st_size
        fs, fs_path = url_to_fs(path)
        return int(fs.size(fs_path))
    except FileNotFoundError as exc:
        raise TraceIOError(path, "file not found") from exc
    except FileHostError as exc:
        raise TraceIOError(path, exc.problem) from exc
    except (OSError, ValueError, ImportError) as exc:
        raise TraceIOError(path, f"cannot stat: {exc}") from exc


@dataclass(frozen=True)
class Checkpoint:
    """A place to resume inflating a file from (:meth:`BlockReader.json_range`).

    Attributes:
        json_offset: uncompressed offset of the next byte the inflater produces.
        raw_offset: offset in the stored file of the next byte it takes.
        inflater: the decompressor's state there (never used itself: copied to resume),
            ``None`` for a plain file (the two offsets are then equal).
    """

    json_offset: int
    raw_offset: int
    inflater: Any = None


#: Uncompressed bytes between two :class:`Checkpoint` of a gzip file: a zlib state is
#: about 45 KB (its 32 KiB window), so a 1 GB trace keeps about 5 MB of them, and
#: reading a range again inflates at most this much before it.
CHECKPOINT_SPACING_BYTES = 8 * 1024 * 1024


class BlockReader:
    """Iterates over uncompressed blocks of a trace file.

    Attributes (valid after iteration): ``compressed`` (gzip magic seen),
    ``json_bytes`` (uncompressed bytes produced so far), ``stream_damage``: ``None``, or
    ``(offset, problem)`` when a truncated or corrupt gzip stream ended the blocks early
    (offset in the uncompressed data where it broke; every byte before it was yielded,
    so the reader can keep the complete events); ``checkpoints`` (with
    ``checkpoints=True``): where :meth:`json_range` can resume inflating, one every
    :data:`CHECKPOINT_SPACING_BYTES` of output, so a range of the uncompressed JSON is
    read again without inflating the file from its start.

    Raises, while iterating:
        TraceIOError: open/read failures.
        TraceTooLargeError: more than ``max_json_bytes`` would be produced.
    """

    def __init__(
        self,
        path: str,
        max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
        block_bytes: int = BLOCK_BYTES,
        *,
        checkpoints: bool = False,
    ) -> None:
        self.path = path
        self.keep_checkpoints = checkpoints
        self.checkpoints: list[Checkpoint] = []
        self.max_json_bytes = max_json_bytes
        self.block_bytes = block_bytes
        self.compressed = False
        self.json_bytes = 0
        self.stream_damage: tuple[int, str] | None = None
        #: Bytes of the stored file read so far (compressed bytes for ``.gz``).
        self.bytes_read = 0
        self._progress = _progress.get()  # taken here: blocks are read on another thread
        self._file_bytes = 0
        self._ahead = _inflate_ahead.get()

    def __iter__(self) -> Iterator[bytes]:
        """Blocks of at most ``block_bytes`` uncompressed bytes, decompressed one block
        ahead on a helper thread (zlib and zlib-ng release the GIL, so this overlaps with
        decoding on a second core); on this thread inside :func:`inflate_on_this_thread`."""
        return _prefetch(self._blocks()) if self._ahead else self._blocks()

    def _blocks(self) -> Iterator[bytes]:
        if self._progress is not None:
            try:
                self._file_bytes = file_size(self.path)
            except TraceIOError:
                self._file_bytes = 0
        with open_stored(self.path) as raw:
            first = self._read(raw, COMPRESSED_READ_BYTES)
            self.compressed = first[:2] == GZIP_MAGIC
            chunks = self._gunzip(raw, first) if self.compressed else self._plain(raw, first)
            for block in chunks:
                self.json_bytes += len(block)
                if self.json_bytes > self.max_json_bytes:
                    raise TraceTooLargeError(
                        self.path,
                        f"uncompressed JSON exceeds the cap of {self.max_json_bytes} bytes "
                        "(raise max_json_bytes / --max-json-bytes to read it)",
                    )
                yield block

    def _read(self, raw: IO[bytes], size: int) -> bytes:
        try:
            data = raw.read(size)
        except OSError as exc:
            if type(exc).__name__ == "FileExpired":  # s3fs: If-Match failed (changed)
                opened = object_version_of(getattr(raw, "details", None) or {})
                message = _changed_message(opened, "another", self.bytes_read)
                raise TraceIOError(self.path, message) from exc
            raise TraceIOError(self.path, f"cannot read: {exc}") from exc
        self.bytes_read += len(data)
        if self._progress is not None and self._file_bytes > 0:
            self._progress(min(self.bytes_read, self._file_bytes), self._file_bytes)
        return data

    def _plain(self, raw: IO[bytes], first: bytes) -> Iterator[bytes]:
        data = first
        while data:
            yield data
            data = self._read(raw, self.block_bytes)

    def json_range(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the uncompressed JSON, read again from the file after
        an iteration with ``checkpoints=True``: a plain file from ``start``, a gzip file
        from the last checkpoint at or before ``start``.

        Raises:
            TraceIOError: the file cannot be opened or read.
            ValueError: the range is not one this reader produced (it has changed).
        """
        if end <= start:
            return b""
        with open_stored(self.path) as raw:
            if not self.compressed:
                try:
                    raw.seek(start)
                except OSError as exc:
                    raise TraceIOError(self.path, f"cannot read: {exc}") from exc
                data = self._read(raw, end - start)
            else:
                at = None
                for cp in self.checkpoints:
                    if cp.json_offset > start:
                        break
                    at = cp
                if at is None:
                    at = Checkpoint(0, 0, None)
                try:
                    raw.seek(at.raw_offset)
                except OSError as exc:
                    raise TraceIOError(self.path, f"cannot read: {exc}") from exc
                inflater = (
                    zlib.decompressobj(wbits=31) if at.inflater is None else at.inflater.copy()
                )
                out = bytearray()
                offset = at.json_offset
                for block in self._gunzip(raw, b"", inflater, offset, record=False):
                    lo, hi = max(start - offset, 0), min(end - offset, len(block))
                    if lo < hi:
                        out += block[lo:hi]
                    offset += len(block)
                    if offset >= end:
                        break
                data = bytes(out)
        if len(data) != end - start:
            raise ValueError(f"{self.path}: bytes {start}-{end} are no longer in the file")
        return data

    def _gunzip(
        self,
        raw: IO[bytes],
        first: bytes,
        inflater: Any = None,
        produced: int = 0,
        record: bool = True,
    ) -> Iterator[bytes]:
        """Decompress gzip members one after another (``cat a.gz b.gz`` is valid gzip),
        never producing more than ``block_bytes`` at once, so a bomb stops at the cap.
        ``inflater``/``produced``: resume from a checkpoint (``first`` then empty, the
        file at its ``raw_offset``)."""
        if inflater is None:
            inflater = zlib.decompressobj(wbits=31)
        pending = first
        record = record and self.keep_checkpoints
        next_checkpoint = produced + CHECKPOINT_SPACING_BYTES
        while True:
            if not pending:
                pending = self._read(raw, COMPRESSED_READ_BYTES)
                if not pending:
                    if not inflater.eof:
                        while True:  # output zlib still holds from the input it consumed
                            try:
                                out = inflater.decompress(b"", self.block_bytes)
                            except zlib.error:
                                break
                            if not out:
                                break
                            produced += len(out)
                            yield out
                    if not inflater.eof:  # (the flush may end the member's stream)
                        self.stream_damage = (
                            produced,
                            "gzip stream ends early (truncated file, or still being written)",
                        )
                    return
            piece, later = pending[:INFLATE_STEP_BYTES], pending[INFLATE_STEP_BYTES:]
            saved = inflater.copy()
            if record and produced >= next_checkpoint:
                self.checkpoints.append(
                    Checkpoint(produced, self.bytes_read - len(pending), saved.copy())
                )
                next_checkpoint = produced + CHECKPOINT_SPACING_BYTES
            try:
                out = inflater.decompress(piece, self.block_bytes)
            except zlib.error as exc:
                for out in _inflate_until_damage(saved, piece):
                    produced += len(out)
                    yield out
                self.stream_damage = (produced, f"corrupt gzip data ({exc})")
                return
            if out:
                produced += len(out)
                yield out
            if not inflater.eof:
                pending = inflater.unconsumed_tail + later
                continue
            # The member ended: RFC 1952 members follow each other (`cat a.gz b.gz` is
            # valid gzip). The input after its trailer is `unused_data` alone: at the
            # end of a stream CPython's zlib leaves a stale copy of it in
            # `unconsumed_tail` (3.11: when the previous call was cut by max_length),
            # which must not be fed again (fed again, it gives a member read twice, or
            # a loop that never ends).
            rest = (inflater.unused_data + later) or self._read(raw, COMPRESSED_READ_BYTES)
            if rest[:1] == GZIP_MAGIC[:1] and len(rest) < 2:
                rest += self._read(raw, COMPRESSED_READ_BYTES)
            if rest[:2] != GZIP_MAGIC:
                return  # end of file, or trailing padding as gzip(1) tolerates
            inflater = zlib.decompressobj(wbits=31)
            pending = rest


def _inflate_until_damage(inflater: Any, piece: bytes) -> Iterator[bytes]:
    """The output of the longest prefix of ``piece`` that ``inflater`` (a zlib
    decompressor, left untouched: copies are used) takes without an error: the data
    before a corrupt block or a bad CRC. Bisection: O(log len(piece)) decompressions of
    at most :data:`INFLATE_STEP_BYTES` of input each."""
    lo, hi = 0, len(piece)  # prefix lo decodes; prefix hi fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            inflater.copy().decompress(piece[:mid])
            lo = mid
        except zlib.error:
            hi = mid
    if lo:
        yield inflater.copy().decompress(piece[:lo])


_DONE = object()


def _prefetch(blocks: Iterator[bytes], depth: int = 2) -> Iterator[bytes]:
    """Run ``blocks`` on a daemon thread, ``depth`` items ahead; exceptions are re-raised
    in the consumer. Stops the producer when the consumer stops early."""
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in blocks:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as exc:  # noqa: BLE001 (handed to the consumer)
            q.put(exc)
        finally:
            close = getattr(blocks, "close", None)
            if close is not None and stop.is_set():
                close()

    thread = threading.Thread(target=produce, name="trace-gunzip", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while thread.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(0.05)
