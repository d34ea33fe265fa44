"""File → :class:`~tb_kineto_insights.trace.model.Trace`: tolerant, columnar, bounded memory.

How it reads:

1. :class:`~tb_kineto_insights.trace.source.BlockReader` yields uncompressed blocks
   (gzip found by magic bytes; total capped).
2. The ``traceEvents`` array is cut into pieces at event boundaries (``}`` ``,`` ``{``;
   :mod:`.framing`) and msgspec decodes each piece into small typed structs
   (:mod:`.events`, :mod:`.decode`) that hold only the fields the analysis uses.
3. Each decoded piece is turned into numpy columns at once and dropped
   (:mod:`.columns`), so memory holds one piece of objects at a time plus the columns.
4. A piece that fails to decode is repaired (``repair.repair_json``) and decoded again;
   damage that stays is salvaged (``salvage.salvage_events``: every event that reads is
   kept, each damaged region recorded with its byte offset in ``TraceHealth.damage``),
   and a truncated file keeps its complete events. Only a file with nothing usable raises
   :class:`TraceFormatError`; ``read_trace`` raises only :class:`TraceError` subclasses.
5. A cut inside a string cannot decode (the string never closes), so such a piece waits
   until the pending bytes grow :data:`RETRY_GROWTH` times: a long stretch without a
   real event boundary costs linear, not quadratic, time.
6. Broken timestamps are quarantined and GPU work overlapping on a stream is clipped
   (``timing``; :mod:`.assemble` gives the ``Trace``).

Timestamps become ``int64`` ns, exact to the digit (:mod:`.timestamps`). Columns are
built with no Python per event on the normal path (:mod:`.columns`), ``Input Dims`` and
the like kept as their literal texts.

Cores: blocks are inflated one ahead on a helper thread (zlib releases the GIL); the
msgspec decode and the column building hold it, so a large file (:mod:`.parallel`) is
decoded in worker **processes**, not threads (:meth:`_Reader._read_parallel`; the
serial path is :meth:`_Reader._read_serial`). The parent inflates and sends about
:data:`~.parallel.PIECE_BYTES` of blocks at a time (smaller tasks spend the parent's
time on messages); a worker cuts them into the serial loop's pieces and builds a local
:class:`~.columns.Builder` (:func:`build_pieces`), which the parent merges in file order
(:meth:`~.columns.Builder.merge`): the result is the serial read's, bit for bit. At
most 2 tasks per worker are in flight, so progress (``reading_progress``: stored bytes
the parent read) runs at most that far ahead of the merged result. A task that fails in
a worker is dropped with every later one in flight, and their blocks go through the
serial path from the state before it: repairs, salvage and damage offsets are a serial
read's. Assembling the ``Trace`` (:mod:`.assemble`: concatenation, sorting, clipping)
and the analysis are serial.

Figures (date, machine, load) are in ``benchmarks/RESULTS.md``: ``benchmarks/bench_builder.py``
(column building), ``benchmarks/bench_parallel_read.py`` (serial against parallel) and
``benchmarks/bench_decode_pieces.py`` (typed decode, timestamp parse) reproduce them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec

from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace import parallel
from tb_kineto_insights.trace.assemble import STEP_PREFIX, assemble
from tb_kineto_insights.trace.columns import Builder
from tb_kineto_insights.trace.decode import PieceDecoder, any_decoder, decode_typed
from tb_kineto_insights.trace.errors import TraceFormatError
from tb_kineto_insights.trace.events import METADATA_KEYS, Root
from tb_kineto_insights.trace.framing import (
    BOM_AND_WS,
    MAX_EVENT_BYTES,
    MAX_HEAD_BYTES,
    TRACE_EVENTS_KEY,
    WS,
    last_event_boundary,
    not_a_trace,
)
from tb_kineto_insights.trace.local_paths import local_path
from tb_kineto_insights.trace.routes import CATEGORY_KIND, kind_of_category
from tb_kineto_insights.trace.salvage import OK, TRUNCATED, Damage, classify
from tb_kineto_insights.trace.source import (
    BLOCK_BYTES,
    DEFAULT_MAX_JSON_BYTES,
    BlockReader,
    file_size,
)
from tb_kineto_insights.trace.timestamps import EXACT_TS

#: After a piece cut inside an event, wait until the pending bytes are this many times
#: larger before decoding again: every retry re-reads the pending bytes, so the retries
#: cost at most 1 / (1 - 1/RETRY_GROWTH) times the bytes (linear).
RETRY_GROWTH = 4

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future


class _Logger:
    """This module's ``logging`` logger, imported on first use: ``logging`` and
    ``concurrent.futures`` (which imports it) are a noticeable share of start-up (see
    ``benchmarks/RESULTS.md``), and a read that warns of nothing and starts no worker
    need not import them."""

    def warning(self, msg: str, *args: object) -> None:
        import logging

        logging.getLogger(__name__).warning(msg, *args)


_logger = _Logger()


def build_piece(data: bytes | bytearray, exact: bool) -> Builder | None:
    """One piece (``[`` events ``]``) → a fresh :class:`Builder` holding its columns,
    names (local ids) and counts, for :meth:`Builder.merge`; ``None`` as
    :func:`build_pieces`."""
    return build_pieces(b"", [bytes(data[1:-1]) + b",{"], exact)


def build_pieces(tail: bytes, blocks: list[bytes], exact: bool) -> Builder | None:
    """Pending bytes ``tail`` and the ``blocks`` after them, cut into pieces exactly as
    the serial reader cuts them (each block at its last event boundary, a block without
    one joins the next), each piece decoded and added in order to one fresh
    :class:`Builder` (run in a worker process; the piece order inside a builder
    decides the order of first-seen names, so the cuts must be the serial ones). The
    bytes after the last boundary of the last block are left out: the parent keeps
    them as its next pending bytes.

    Returns ``None`` when the pieces must take the serial path instead: one does not
    decode as typed events (bad JSON, cut short, or a field of an unexpected type), or
    an id is a non-numeric string (its interned number depends on earlier pieces), or
    the last block has no event boundary.
    """
    builder = Builder(exact)
    pending = bytearray(tail)
    cut = None
    try:
        for block in blocks:
            cut = last_event_boundary(block)
            if cut is None:
                pending += block
                continue
            end_of_piece, next_start = cut
            view = memoryview(block)
            events = decode_typed(b"".join((b"[", pending, view[:end_of_piece], b"]")), builder)
            builder.add_events(events)
            pending = bytearray(view[next_start:])
            if builder.strings:
                return None
    except Exception:  # noqa: BLE001 (any trouble: the parent's serial path decides)
        return None
    if cut is None:
        return None
    builder.drop_caches()  # caches: not needed by merge, smaller to send back
    return builder


#: What a decode worker runs on its pieces (:func:`build_pieces`, sent to the pool by
#: reference; a test may plant another function here).
decode_in_worker = build_pieces


#: The reading state a piece starts from: the pending bytes (``tail``), the file offset
#: of their first byte, and the size they must reach before a piece cut short is retried.
_State = tuple[bytearray, int, int]


class _InFlight:
    """The parallel path's bookkeeping (:meth:`_Reader._read_parallel`): the pieces sent
    to workers, in file order, each with the reading state before it and its blocks; the
    blocks of the next piece; and the blocks to read again serially."""

    def __init__(self, pool: Executor, workers: int, state: _State) -> None:
        self.pool: Executor | None = pool  # None once it broke: serial from there on
        self.in_flight = workers * parallel.IN_FLIGHT_PER_WORKER
        self.held = workers * parallel.HELD_PER_WORKER
        self.workers_up = False  # a worker has decoded a piece: the parent stops decoding
        self.here: set[Future[Any]] = set()  # pieces decoded by the parent (while workers start)
        # pieces sent to workers, in file order: (future, state before it, its blocks)
        self.pending: deque[tuple[Future[Any], _State, list[bytes]]] = deque()
        self.replay: deque[bytes] = deque()  # blocks to read again serially (a piece failed)
        self.group: list[bytes] = []  # blocks of the next piece for a worker (tail untouched)
        self.group_state = state


class _Reader(PieceDecoder):
    """One read of one file (:func:`read_trace`): the pass over its blocks, the reading
    state (``tail``, ``consumed``, ``retry_at``) kept between its steps."""

    def __init__(
        self,
        path: str,
        max_json_bytes: int,
        block_bytes: int,
        workers: int | None = None,
        source: BlockReader | None = None,
        on_block: Callable[[bytes], None] | None = None,
        pool: Executor | None = None,
    ) -> None:
        super().__init__()
        self.path = path
        self.workers = workers
        self.source = source or BlockReader(path, max_json_bytes, block_bytes)
        self.on_block = on_block
        self.pool = pool  # a shared pool (the caller's, never shut down here)
        self.root_fields: dict[str, Any] = {}
        self.root_kind = "object"
        self.tail = bytearray()  # the pending bytes: events not decoded yet
        self.consumed = 0  # file offset of tail[0]
        self.retry_at = 0  # after a piece cut short: wait until the pending bytes grow

    def _not_a_trace(self) -> str:
        """Why this file is no trace (:func:`not_a_trace`)."""
        return not_a_trace(self.path, self.source.compressed)

    # -- the pass over the file -------------------------------------------------------
    def read(self) -> m.Trace:
        """The pass over the file: where the events start (:meth:`_find_events`), the
        pieces of events, serially (:meth:`_read_serial`) or with worker processes
        (:meth:`_read_parallel`: the same result), then the rest (:meth:`_read_tail`).
        Raises :class:`TraceError` subclasses (see :func:`read_trace`)."""
        blocks = iter(self.source)
        if self.on_block is not None:
            blocks = _tapped(blocks, self.on_block)
        # 1. find where the events start (leading BOM/whitespace is dropped, not kept)
        self._find_events(blocks)
        # 2. whole pieces of events; exact mode is decided on the first one
        pool, executor, workers = self._pool()
        try:
            if pool is None:
                self._read_serial(blocks)
            else:
                self._read_parallel(blocks, pool, workers)
        finally:
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
        if self.builder is None:
            self.builder = Builder(bool(EXACT_TS.search(bytes(self.tail[:65536]))))
        # 3. the rest: last events and the keys after the array
        self._read_tail(bytes(self.tail), self.consumed)
        return assemble(self)

    def _find_events(self, blocks: Iterator[bytes]) -> None:
        """Read ``blocks`` up to the ``[`` that opens the events (of ``traceEvents``, or
        of an array root), the keys before it kept (:meth:`_read_head`): the bytes after
        it become the pending bytes (``tail``, at file offset ``consumed``).

        Raises:
            TraceFormatError: the first byte is neither ``{`` nor ``[``, no
                ``traceEvents`` in the first :data:`~.framing.MAX_HEAD_BYTES`, or no events
                at all (:meth:`_no_events`).
        """
        buf = bytearray()
        consumed = 0  # file offset of buf[0]
        searched = 0  # bytes of buf already searched for the traceEvents key
        events_start = None
        for block in blocks:
            if not buf:
                stripped = block.lstrip(BOM_AND_WS)
                consumed += len(block) - len(stripped)
                if not stripped:
                    continue
                block = stripped
                if block[:1] == b"[":
                    self.root_kind = "array"
                    buf += block
                    events_start = 1
                    break
                if block[:1] != b"{":
                    raise TraceFormatError(  # never quote a non-trace file's bytes
                        self.path, self._not_a_trace(), consumed
                    )
            buf += block
            match = TRACE_EVENTS_KEY.search(buf, max(0, searched - 64))
            if match:
                self._read_head(bytes(buf[: match.start()]), consumed)
                events_start = match.end()
                break
            searched = len(buf)
            if len(buf) > MAX_HEAD_BYTES:
                raise TraceFormatError(
                    self.path, f"no traceEvents array in the first {MAX_HEAD_BYTES} bytes"
                )
        if events_start is None:
            self._no_events(bytes(buf))  # raises: empty, truncated, or not a trace
        self.consumed = consumed + events_start
        self.tail = bytearray(buf[events_start:])

    def _pool(self) -> tuple[Executor | None, Executor | None, int]:
        """Where the pieces go: the pool (``None``: read serially), the pool started here
        (shut down at the end by the caller) and the number of workers."""
        pool = None
        executor = None  # a pool started here: shut down at the end even if it broke
        if self.pool is not None and self.workers is not None and self.workers >= 2:
            workers, pool = self.workers, self.pool
        else:
            workers = parallel.read_workers(self._estimated_json_bytes(), self.workers)
            if workers:
                pool = executor = parallel.start_pool(workers)
        return pool, executor, workers

    def _start_builder(self, block: bytes) -> None:
        """At the first block of events, the builder: in exact mode when the pending
        bytes and the block's first 64 KiB hold an epoch-scale ``ts`` with a fraction
        (:data:`~.timestamps.EXACT_TS`)."""
        if self.builder is None:
            self.builder = Builder(bool(EXACT_TS.search(bytes(self.tail) + block[:65536])))

    def _read_serial(self, blocks: Iterator[bytes]) -> None:
        """The serial path: every block in turn (:meth:`_serial_block`)."""
        for block in blocks:
            self._start_builder(block)
            self._serial_block(block)

    def _serial_block(self, block: bytes) -> None:
        """One block on the serial path: the pending bytes and the block up to its last
        event boundary are decoded as one piece (:meth:`~.decode.PieceDecoder.decode_piece`)
        and added, the rest kept pending. A block without a boundary, or one that comes
        while a piece cut short waits for the pending bytes to grow, is only added to them.

        Raises:
            TraceFormatError: more than :data:`~.framing.MAX_EVENT_BYTES` pending
                (:meth:`_grow`).
        """
        assert self.builder is not None
        tail = self.tail
        if len(tail) + len(block) < self.retry_at:
            self.consumed = self._grow(tail, block, self.consumed)
            return
        cut = last_event_boundary(block)
        if cut is None:  # no event ends in this block: keep collecting
            self.consumed = self._grow(tail, block, self.consumed)
            return
        end_of_piece, next_start = cut
        view = memoryview(block)
        piece = b"".join((b"[", tail, view[:end_of_piece], b"]"))  # one copy
        out = self.decode_piece(piece, self.consumed, final=False)
        self.builder.add_events(out.events)
        if out.leftover is None:
            self.consumed += len(tail) + next_start
            self.tail = bytearray(view[next_start:])
            self.retry_at = 0
        else:  # the last event is cut short (a cut inside a string): wait for more
            keep_from = out.leftover - 1  # index in tail + block
            self.consumed += keep_from
            rest = bytearray(piece[out.leftover : len(piece) - 1])
            del piece
            rest += view[end_of_piece:]
            self.tail = rest
            self.retry_at = RETRY_GROWTH * len(rest)
            if len(rest) > MAX_EVENT_BYTES:
                self._grow(rest, b"", self.consumed)  # raises

    def _read_parallel(self, blocks: Iterator[bytes], pool: Executor, workers: int) -> None:
        """The parallel path: blocks grouped into pieces for the workers
        (:meth:`_to_group`), merged in file order. A piece that fails in a worker is read
        again serially with every later one, from the state before it; so are the blocks
        that come while a piece cut short waits to grow (:meth:`_serial_block`)."""
        f = _InFlight(pool, workers, self._state())
        try:
            while True:
                if f.replay:
                    block, serial = f.replay.popleft(), True
                else:
                    nxt = next(blocks, None)
                    if nxt is None:  # the last group here, merge what is held, the rest serially
                        if self._end_of_blocks(f):
                            continue
                        break
                    # after a piece cut short (retry_at), the serial path waits for more
                    block, serial = nxt, f.pool is None or self.retry_at > 0
                self._start_builder(block)
                if serial:
                    self._serial_block(block)
                else:  # group blocks into one piece of about PIECE_BYTES
                    self._to_group(f, block)
        finally:
            for future, _, _ in f.pending:
                future.cancel()

    def _state(self) -> _State:
        """The reading state: the pending bytes, their file offset, the retry size."""
        return self.tail, self.consumed, self.retry_at

    def _serially_from(self, f: _InFlight, state: _State) -> None:
        """A piece failed in a worker: back to the ``state`` before it; the pieces in
        flight are cancelled and their blocks read again serially."""
        self.tail, self.consumed, self.retry_at = state
        f.replay.extend(_abandon(f.pending))

    def _to_group(self, f: _InFlight, block: bytes) -> None:
        """Add ``block`` to the next group; once the group holds
        :data:`~.parallel.PIECE_BYTES` and the block an event boundary, send it
        (:meth:`_send`) and merge what is done (:meth:`_merge_done`). A group that is
        not sent (no boundary within :data:`~.framing.MAX_EVENT_BYTES`, or the pool
        broke) is read serially once every piece in flight is merged."""
        if not f.group:
            f.group_state = self._state()
        f.group.append(block)
        grouped = sum(map(len, f.group))
        if grouped < parallel.PIECE_BYTES:
            return
        cut = last_event_boundary(block)
        if cut is None and grouped < MAX_EVENT_BYTES:
            return
        future = None if cut is None else self._send(f)
        if cut is None or future is None:  # merge what is in flight; this group serially
            while f.pending:
                back = self._collect(f.pending)
                if back is not None:
                    self._serially_from(f, back)
            f.replay.extend(f.group)
            f.group = []
            return
        next_start = cut[1]
        f.pending.append((future, f.group_state, f.group))
        self.consumed += len(self.tail) + grouped - len(block) + next_start
        self.tail = bytearray(memoryview(block)[next_start:])
        self.retry_at = 0
        f.group = []
        self._merge_done(f)

    def _send(self, f: _InFlight) -> Future[Any] | None:
        """The group's pieces on their way: to a worker (:data:`decode_in_worker`), or
        decoded here while the workers are still starting (none has decoded a piece
        yet, and enough wait). ``None`` when the pool broke: serial from here on."""
        assert self.builder is not None and f.pool is not None
        if not f.workers_up:  # has a worker decoded a piece yet?
            f.workers_up = any(fu.done() for fu, _, _ in f.pending if fu not in f.here)
        if not f.workers_up and _workers_busy(f.pending) >= f.in_flight:
            # the workers are still starting: decode this piece here
            future = _decoded_here(bytes(self.tail), f.group, self.builder.exact)
            f.here.add(future)
            return future
        try:
            return f.pool.submit(decode_in_worker, bytes(self.tail), f.group, self.builder.exact)
        except RuntimeError:  # the pool broke: serial from here on
            f.pool = None
            return None

    def _merge_done(self, f: _InFlight) -> None:
        """Merge the pieces that are done, oldest first (:meth:`_collect`), waiting for
        the oldest while too many are held."""
        # merge what is done, in file order; wait for the oldest when too
        # many pieces are held (backpressure: bounded memory): ``held`` while
        # the parent decodes, ``in_flight`` once the workers do
        while f.pending and (
            f.pending[0][0].done() or len(f.pending) >= (f.in_flight if f.workers_up else f.held)
        ):
            f.workers_up = f.workers_up or f.pending[0][0] not in f.here
            back = self._collect(f.pending)
            if back is not None:
                self._serially_from(f, back)

    def _end_of_blocks(self, f: _InFlight) -> bool:
        """After the last block: the last group's pieces decoded here while the workers
        end, then the oldest piece in flight merged (or, when it failed, read again
        serially with every later one), and the group left over read serially. Returns
        whether there is more to do (pieces to merge, blocks to read again)."""
        if f.group and (cut := last_event_boundary(f.group[-1])) is not None:
            # the last group's pieces: decoded here while the workers end
            assert self.builder is not None
            last = f.group[-1]
            here = _decoded_here(bytes(self.tail), f.group, self.builder.exact)
            f.pending.append((here, f.group_state, f.group))
            self.consumed += len(self.tail) + sum(map(len, f.group)) - len(last) + cut[1]
            self.tail = bytearray(memoryview(last)[cut[1] :])
            self.retry_at = 0
            f.group = []
        if f.pending:
            back = self._collect(f.pending)
            if back is None:
                return True
            self._serially_from(f, back)
        f.replay.extend(f.group)
        f.group = []
        return bool(f.replay)

    def _estimated_json_bytes(self) -> int:
        """Uncompressed size (for the parallel decision): a local file's
        (:func:`.parallel.estimate_json_bytes`: a gzip file's ``ISIZE``), else a guess from
        the stored size."""
        local = local_path(self.path)
        if local is not None:
            estimate = parallel.estimate_json_bytes(local)
            if estimate:
                return estimate
        try:
            size = file_size(self.path)
        except Exception:  # noqa: BLE001 (a guess only: read serially)
            return 0
        return size * (parallel.GZIP_RATIO_ESTIMATE if self.source.compressed else 1)

    def _collect(self, pending: deque[tuple[Future[Any], _State, list[bytes]]]) -> _State | None:
        """Merge the oldest piece sent to a worker. Returns ``None`` when merged, else
        the reading state from before that piece (tail, offset, retry size): it failed
        in the worker, and it and every later block go through the serial path, so
        repairs, salvage and damage offsets are exactly those of a serial read."""
        assert self.builder is not None
        future, state, _ = pending[0]
        try:
            result = future.result()
        except Exception as exc:  # noqa: BLE001 (a worker died or broke: serial from here)
            _logger.warning(
                "Kineto Insights: %s: a decode worker failed (%s: %s); reading on serially",
                self.path,
                type(exc).__name__,
                exc,
            )
            result = None
        if result is None:
            return state
        pending.popleft()
        self.builder.merge(result)
        return None

    def _grow(self, tail: bytearray, block: bytes, consumed: int) -> int:
        """Append ``block`` to the pending bytes; whitespace before any content is dropped
        (returns the new file offset of ``tail[0]``).

        Raises:
            TraceFormatError: more than :data:`MAX_EVENT_BYTES` pending without the end of
                an event: an event that large, or padded or damaged data (a gzip bomb of
                spaces or one endless string ends here, in linear time).
        """
        if not tail.strip(WS):
            consumed += len(tail)
            tail.clear()
            stripped = block.lstrip(WS)
            consumed += len(block) - len(stripped)
            block = stripped
        tail += block
        if len(tail) > MAX_EVENT_BYTES:
            raise TraceFormatError(
                self.path,
                f"more than {MAX_EVENT_BYTES} bytes without the end of an event "
                "(one event that large, or padded or damaged data)",
                consumed,
            )
        return consumed

    def _read_head(self, head: bytes, base: int) -> None:
        """Keys before ``traceEvents``; an unreadable header is recorded as damage and
        reading goes on (the events may be intact)."""
        data = head + b'"traceEvents": []}'
        status, root = self.repaired(self.decode_root, data, final=True)
        if status == OK:
            self._keep_root_fields(root)
            return
        self.damage.append(
            Damage(base, base, len(head), 0, "header before traceEvents is not valid JSON")
        )

    def _no_events(self, data: bytes) -> NoReturn:
        total = self.source.json_bytes
        if not data.strip(b"\xef\xbb\xbf \t\r\n"):
            if self.source.stream_damage is not None:  # a gzip header, then nothing usable
                raise TraceFormatError(
                    self.path, f"no JSON before the gzip damage: {self.source.stream_damage[1]}", 0
                )
            raise TraceFormatError(self.path, "empty file", 0)
        try:
            doc = any_decoder.decode(data)
        except msgspec.DecodeError as exc:
            kind, offset = classify(exc)
            if kind == TRUNCATED:
                raise TraceFormatError(
                    self.path,
                    "file ends early (truncated JSON; was it still being written?)",
                    total,
                ) from exc
            message = str(exc).split(" (byte")[0]
            raise TraceFormatError(self.path, f"invalid JSON: {message}", offset) from exc
        if isinstance(doc, dict):
            raise TraceFormatError(self.path, "JSON object has no traceEvents array", 0)
        raise TraceFormatError(self.path, "top level is neither an object nor an array", 0)

    def _read_tail(self, rest: bytes, base: int) -> None:
        """The last events and, for an object root, the keys after ``traceEvents``."""
        assert self.builder is not None
        total = self.source.json_bytes
        if self.root_kind == "object":
            status, root = self.repaired(self.decode_root, b'{"traceEvents":[' + rest, True)
            if status == OK:
                self.builder.add_events(root.traceEvents)
                root.traceEvents = []
                self._keep_root_fields(root)
                return
        out = self.decode_piece(b"[" + rest + b"]", base, final=True)
        self.builder.add_events(out.events)
        if out.trailer is None:
            if rest.strip(WS) and not out.damage:
                self.damage.append(
                    Damage(
                        total,
                        total,
                        0,
                        0,
                        "file ends early: traceEvents never closed (truncated JSON; "
                        "was it still being written?)",
                    )
                )
            return
        trailer = rest[out.trailer - 1 :]
        if self.root_kind == "array":
            if trailer.strip(WS):
                at = base + out.trailer - 1
                self.damage.append(Damage(at, at, len(trailer), 0, "data after the events"))
            return
        try:
            root = self.decode_root(b'{"traceEvents":[]' + trailer)
            self._keep_root_fields(root)
        except msgspec.DecodeError:
            at = base + out.trailer - 1
            self.damage.append(
                Damage(at, at, len(trailer), 0, "keys after traceEvents are not valid JSON")
            )

    def _keep_root_fields(self, root: Root) -> None:
        for key in (*METADATA_KEYS, "deviceProperties", "distributedInfo", "tb_kineto_insights"):
            value = getattr(root, key)
            if value is not None:
                self.root_fields[key] = value
        for level in ("INFO", "WARNING", "ERROR"):
            value = getattr(root, level)
            if value is None:
                continue
            lines = value if isinstance(value, list) else [value]
            self.root_fields.setdefault(level, []).extend(str(x) for x in lines)


def _tapped(blocks: Iterator[bytes], on_block: Callable[[bytes], None]) -> Iterator[bytes]:
    """``blocks``, each handed to ``on_block`` first (once, in file order)."""
    for block in blocks:
        on_block(block)
        yield block


def _workers_busy(pending: deque[tuple[Future[Any], Any, list[bytes]]]) -> int:
    """Pieces sent to workers and not yet decoded (those decoded here are done)."""
    return sum(not future.done() for future, _, _ in pending)


def _decoded_here(tail: bytes, blocks: list[bytes], exact: bool) -> Future[Any]:
    """:func:`build_pieces` run in this process, as a finished future (its result or its
    exception, as a worker's would be): merged in file order like a worker's piece."""
    from concurrent.futures import Future  # a parallel read: the pool imported it

    future: Future[Any] = Future()
    try:
        future.set_result(build_pieces(tail, blocks, exact))
    except Exception as exc:  # noqa: BLE001 (as in a worker: the serial path decides)
        future.set_exception(exc)
    return future


def _abandon(pending: deque[tuple[Future[Any], Any, list[bytes]]]) -> list[bytes]:
    """Cancel the pieces sent to workers and return their blocks, in order (they are
    read again serially)."""
    blocks = []
    for future, _, group in pending:
        future.cancel()
        blocks.extend(group)
    pending.clear()
    return blocks


def read_trace(
    path: str,
    *,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    block_bytes: int = BLOCK_BYTES,
    workers: int | None = None,
    source: BlockReader | None = None,
    on_block: Callable[[bytes], None] | None = None,
    pool: Executor | None = None,
) -> m.Trace:
    """Read one Kineto trace file (plain or gzipped JSON, local path or fsspec URL).

    Args:
        path: file path or URL, as discovery found it.
        max_json_bytes: cap on uncompressed bytes (gzip-bomb guard).
        block_bytes: uncompressed bytes decoded per piece (memory vs. overhead).
        workers: worker processes that decode pieces (:mod:`.parallel`): ``None`` =
            decide by size and cores (``$KINETO_INSIGHTS_READ_WORKERS``), ``<= 1`` =
            serial, ``n >= 2`` = ``n`` workers whatever the size. The result is the same
            in every case.
        source: the file's blocks (default: a :class:`BlockReader` of ``path`` with
            ``max_json_bytes`` and ``block_bytes``), e.g. one that keeps checkpoints.
        on_block: called with every uncompressed block, in file order, as it is read
            (``trace.window.WindowIndex.block``: the window cut's index from the same
            read).
        pool: a process pool (:func:`.parallel.start_pool`) shared with other work of
            the caller, used for the pieces instead of a pool of this read's own when
            ``workers >= 2`` is given too (``workers``: its size, the pieces kept in
            flight follow it); the caller shuts it down. Files of a log directory read
            at once share one budget of processes this way
            (``store/parallel_summaries.py``).

    Returns:
        A :class:`Trace` with columnar tables (ns times) and :class:`TraceHealth`.

    Raises (only these; damaged JSON that leaves usable events is salvaged and reported
    in ``health.damage`` instead):
        TraceIOError: the file cannot be opened or read.
        TraceFormatError: not JSON, no ``traceEvents``, or nothing usable (truncated or
            damaged before any event); the message names the file and the byte offset in
            the uncompressed JSON.
        TraceTooLargeError: more than ``max_json_bytes`` uncompressed bytes.
    """
    try:
        return _Reader(path, max_json_bytes, block_bytes, workers, source, on_block, pool).read()
    except RecursionError as exc:  # msgspec on absurdly nested arrays/objects
        raise TraceFormatError(path, "JSON nested too deeply to read") from exc
    except (msgspec.MsgspecError, ValueError, OverflowError, TypeError, IndexError) as exc:
        # a safety net for the typed-errors-only promise (no fuzzed input has reached
        # it: benchmarks/RESULTS.md); the exception's type stays in the message so such
        # a bug is reported
        raise TraceFormatError(path, f"unreadable trace ({type(exc).__name__}: {exc})") from exc


__all__ = ["read_trace", "kind_of_category", "CATEGORY_KIND", "STEP_PREFIX"]
