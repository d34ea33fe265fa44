"""The events of a trace file as the window cut reads them: the reader's framing and
decoding, each event kept as its JSON text.

- **Framing**: the uncompressed blocks are cut into pieces of about :data:`PIECE_BYTES`
  at event boundaries (:func:`~.framing.last_event_boundary`); a piece whose last event
  is cut short (a boundary found inside a string) waits for more bytes, and more than
  :data:`~.framing.MAX_EVENT_BYTES` without the end of an event is refused, as the
  reader refuses it (:class:`EventPieces`).
- **Decoding**: a piece that decodes as it is takes the fast path (one typed decode of
  the fields the cut needs, C speed). One that does not is decoded as the reader decodes
  it (:class:`~.decode.PieceDecoder`: repaired, then salvaged, with the reader's repair
  passes and salvage rules), each event kept as its JSON text: every trace the reader
  reads can be cut, and the cut of a damaged file holds the events the reader keeps, as
  valid JSON (a repaired event's repaired text, never the damaged bytes). The damaged
  regions are counted (:attr:`EventPieces.damage`).
- **Times**: ``ts`` and ``dur`` are converted to integer ns by the reader's converter
  (:func:`~.timestamps.literals_ns`: exact decimals, truncated toward zero); a literal
  that is no number (``"N/A"``, ``true``), ``null``, or a time out of the int64 ns range
  (``1e4855364``, ``9.3e18``) leaves its event without a time (the reader quarantines
  those events too). An event's end saturates at the int64 range (``dur`` of
  ``1e308`` µs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, eq
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from tb_kineto_insights.trace.decode import NESTED_TOO_DEEP, PieceDecoder
from tb_kineto_insights.trace.errors import TraceFormatError
from tb_kineto_insights.trace.framing import (
    BOM_AND_WS,
    MAX_EVENT_BYTES,
    MAX_HEAD_BYTES,
    TRACE_EVENTS_KEY,
    last_event_boundary,
    not_a_trace,
)
from tb_kineto_insights.trace.numbers import parse_us_literals_to_ns
from tb_kineto_insights.trace.salvage import OK, Damage
from tb_kineto_insights.trace.source import BlockReader
from tb_kineto_insights.trace.timestamps import MAX_TS_US, literals_ns

#: Uncompressed bytes of events gathered before a piece is decoded (a piece is cut at
#: the last event boundary after this much).
PIECE_BYTES = 4 * 1024 * 1024

#: ``ts`` of an event without a usable one (absent, a string, NaN, out of range).
ABSENT = np.iinfo(np.int64).min
_INT64_MAX = np.iinfo(np.int64).max
#: |ns| at or beyond this is out of the reader's range (``timestamps.MAX_TS_US`` in ns).
_MAX_NS = int(MAX_TS_US) * 1000


class Head(msgspec.Struct):
    """The fields of an event the cut needs; the rest stays in the raw text."""

    ph: Any = ""
    ts: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b""))  # b"": absent
    dur: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b""))
    pid: Any = None
    tid: Any = None
    cat: Any = None
    name: Any = None


RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_HEAD = msgspec.json.Decoder(Head)
_HEADS = msgspec.json.Decoder(list[Head])
_KEYS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_BLANK = Head()
_GET_TS, _GET_DUR, _GET_PH = (attrgetter(f) for f in ("ts", "dur", "ph"))


def _one_ns(literal: msgspec.Raw) -> int:
    """One odd literal (an exponent, a string, ``null``) → ns, or :data:`ABSENT`."""
    try:
        ns, missing, out = literals_ns([literal])
    except msgspec.ValidationError:  # no number at all ("N/A", true, an object)
        return int(ABSENT)
    return int(ABSENT) if missing[0] or out[0] else int(ns[0])


def ns_column(literals: list[msgspec.Raw]) -> npt.NDArray[np.int64]:
    """µs literals → int64 ns as the reader converts them (module docstring):
    plain numbers vectorised, the odd ones one by one; :data:`ABSENT` where there is no
    usable time. Raises nothing."""
    ns, empty, odd = parse_us_literals_to_ns(literals)
    out = ns.astype(np.int64)
    out[empty | (np.abs(ns) >= _MAX_NS)] = ABSENT
    for i in np.flatnonzero(odd).tolist():
        out[i] = _one_ns(literals[i])
    return out


def ns_of(raw: msgspec.Raw) -> int | None:
    """A JSON number of µs (the text of ``ts`` or ``dur``) as integer ns, exact for
    decimals, truncated toward zero, as the reader converts it; None when absent
    (empty, ``null``), not a number (``"N/A"``, ``NaN``) or out of the int64 ns range."""
    value = int(ns_column([raw])[0])
    return None if value == ABSENT else value


def end_of(ts: npt.NDArray[np.int64], dur: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``ts + dur`` (ns; ``dur`` >= 0), saturated at the int64 maximum instead of
    wrapping around."""
    room = np.where(ts > 0, _INT64_MAX - ts, _INT64_MAX)
    return ts + np.minimum(dur, room)


@dataclass
class EventHeads:
    """The cut's fields of one piece's events, as columns (``ok``: the event is an
    object with fields of usable types; an event that is not is left out). ``doc``:
    the piece (a valid JSON array of the events), for their raw texts."""

    doc: bytes
    raws: list[msgspec.Raw] | None
    heads: list[Head]
    ok: npt.NDArray[np.bool_]
    ts: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    is_meta: npt.NDArray[np.bool_]
    is_x: npt.NDArray[np.bool_]

    def raw_texts(self) -> list[msgspec.Raw]:
        """Every event's JSON text, in order."""
        if self.raws is None:
            self.raws = RAWS.decode(self.doc)
        return self.raws


def check_utf8(data: bytes | bytearray | memoryview) -> None:
    """Raise ``msgspec.DecodeError`` (the message the reader's repair recognises) when
    ``data`` is not UTF-8: msgspec does not check the strings it skips (an event's
    ``args`` in a typed decode, any text kept as ``msgspec.Raw``), and a cut keeps them
    as they are, so a piece is checked whole (``isascii`` first: C speed)."""
    if isinstance(data, memoryview):
        data = bytes(data)
    if data.isascii():
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise msgspec.DecodeError("Invalid UTF-8 encoded string") from None


def decode_heads(doc: bytes) -> EventHeads:
    """The fields the cut needs of every event of ``doc`` (a JSON array of events): one
    typed decode (C speed), else, when one event does not fit (not an object, a field
    of an odd type), one by one.

    Raises:
        msgspec.DecodeError: ``doc`` is not valid JSON (a piece cut inside a string,
            damage: :class:`EventPieces` then decodes it as the reader does).
    """
    raws: list[msgspec.Raw] | None = None
    check_utf8(doc)
    try:
        heads = _HEADS.decode(doc)
        ok = np.ones(len(heads), dtype=np.bool_)
    except msgspec.ValidationError:
        raws = _raw_list(doc)
        heads, flags = [], []
        for raw in raws:
            try:
                heads.append(_HEAD.decode(raw))
                flags.append(True)
            except (msgspec.DecodeError, RecursionError):
                heads.append(_BLANK)
                flags.append(False)
        ok = np.array(flags, dtype=np.bool_)
    except RecursionError:
        raise msgspec.DecodeError(NESTED_TOO_DEEP) from None
    n = len(heads)
    ts = ns_column(list(map(_GET_TS, heads)))
    phs = list(map(_GET_PH, heads))
    is_meta = np.fromiter(map(eq, phs, repeat("M")), dtype=np.bool_, count=n) & ok
    is_x = np.fromiter(map(eq, phs, repeat("X")), dtype=np.bool_, count=n) & ok
    dur = np.maximum(ns_column(list(map(_GET_DUR, heads))), 0)  # ABSENT: 0
    has_ts = (ts != ABSENT) & ok
    ts[~has_ts] = ABSENT
    end = np.where(has_ts, end_of(ts, np.where(is_x, dur, 0)), ABSENT)
    return EventHeads(doc, raws, heads, ok, ts, end, is_meta, is_x)


def _raw_list(data: bytes | bytearray | memoryview) -> list[msgspec.Raw]:
    """``RAWS.decode``, an event nested too deeply to decode, or text that is not UTF-8,
    being bad JSON (raises ``msgspec.DecodeError`` only)."""
    check_utf8(data)
    try:
        return RAWS.decode(data)
    except RecursionError:
        raise msgspec.DecodeError(NESTED_TOO_DEEP) from None


def _decode_keys(data: bytes | bytearray | memoryview) -> dict[str, msgspec.Raw]:
    """An object's keys, their values as raw texts (UTF-8 checked: module docstring).
    Raises ``msgspec.DecodeError`` only."""
    check_utf8(data)
    try:
        return _KEYS.decode(data)
    except RecursionError:
        raise msgspec.DecodeError(NESTED_TOO_DEEP) from None


class RawEventDecoder(PieceDecoder):
    """The reader's decoding of a piece (:class:`~.decode.PieceDecoder`: as it is, then
    repaired, then salvaged), each event kept as its JSON text (``bytes``, copied out:
    the salvage writes to its buffer while it decodes)."""

    def _decode_list(self, data: bytes | bytearray | memoryview) -> list[Any]:
        return [bytes(raw) for raw in _raw_list(data)]


def joined(events: list[bytes]) -> bytes:
    """Events' JSON texts as one JSON array."""
    return b"[" + b",".join(events) + b"]"


#: What a piece is decoded into before it is handed on (:class:`EventPieces`).
Decode = Callable[[bytes], Any]
#: ``take(offset, length, decoded, doc, as_is)``: the piece's JSON offset and length
#: (its bytes in the file), what ``decode`` made of it, the valid JSON array it was
#: decoded from, and whether that is ``[`` + the file's bytes + ``]`` (False: the
#: reader's decoding repaired or salvaged them, or the file's last events).
Take = Callable[[int, int, Any, bytes, bool], None]


class EventPieces:
    """The ``traceEvents`` array of a stream of uncompressed blocks (:meth:`feed`, then
    :meth:`finish`), cut into pieces at event boundaries, each decoded with ``decode``
    (which raises ``msgspec.DecodeError`` for bad JSON, before any side effect) and
    handed to ``take`` (:data:`Take`). A piece that does not decode is decoded as the
    reader decodes it (module docstring) and handed on as the valid JSON of the events
    kept. :meth:`finish` decodes the rest (the last events, the keys after the array) and
    returns the top-level keys other than ``traceEvents`` (those before it too), as raw
    JSON texts. ``damage``: the damaged regions (byte offsets, events lost)."""

    def __init__(
        self, path: str, decode: Decode, take: Take, source: BlockReader | None = None
    ) -> None:
        self.path = path
        self.decode = decode
        self.take = take
        self.source = source  # says whether the file was gzip, for the message
        self.decoder = RawEventDecoder()
        self.damage: list[Damage] = self.decoder.damage
        self.head = b""  # the root object up to the traceEvents key
        self.array_root = False
        self.found = False
        self.buf = bytearray()
        self.offset = 0  # JSON offset of buf[0]
        self.retry_at = 0
        self.events_seen = False  # whether any piece was handed to ``take``

    def _piece(self, piece: bytes, final: bool) -> int:
        """Decode and hand on one piece (``[`` + ``buf[:n]`` + ``]``); returns the bytes of
        ``buf`` it used: ``n``, fewer when its last event is cut short (0: wait for more)."""
        try:
            decoded = self.decode(piece)
        except msgspec.DecodeError:
            pass
        else:
            self._hand(len(piece) - 2, decoded, piece, True)
            return len(piece) - 2
        out = self.decoder.decode_piece(piece, self.offset, final)
        used = len(piece) - 2 if out.leftover is None else out.leftover - 1
        if out.events:
            doc = joined(out.events)
            self._hand(used, self.decode(doc), doc, False)
        return used

    def feed(self, block: bytes) -> None:
        """One uncompressed block of the file, in order.

        Raises:
            TraceFormatError: not a JSON trace, no ``traceEvents`` in the head, or more
                than :data:`~.framing.MAX_EVENT_BYTES` without the end of an event.
        """
        self.buf += block
        if not self.found:
            self._find_events()
            if not self.found:
                return
        while len(self.buf) >= max(PIECE_BYTES, self.retry_at):
            cut = last_event_boundary(self.buf, max(PIECE_BYTES, self.retry_at))
            if cut is None:
                cut = last_event_boundary(self.buf)  # an event longer than a piece
            if cut is None:
                self._check_pending()
                return
            end, next_start = cut
            with memoryview(self.buf) as view:
                piece = b"".join((b"[", view[:end], b"]"))
            used = self._piece(piece, final=False)
            if used == 0:  # the first event is cut short: wait until the bytes double
                self.retry_at = 2 * len(self.buf)
                self._check_pending()
                return
            used = next_start if used == end else used
            del self.buf[:used]
            self.offset += used
            self.retry_at = 0

    def _check_pending(self) -> None:
        if len(self.buf) > MAX_EVENT_BYTES:
            raise TraceFormatError(
                self.path,
                f"more than {MAX_EVENT_BYTES} bytes without the end of an event "
                "(one event that large, or padded or damaged data)",
                self.offset,
            )

    def _find_events(self) -> None:
        # the leading whitespace is dropped as it comes: kept, it was copied and
        # stripped again at every block (200 MB of spaces: 90 s, where the reader takes 2)
        lead = len(self.buf) - len(self.buf.lstrip(BOM_AND_WS))
        if lead:
            del self.buf[:lead]
            self.offset += lead
        first = bytes(self.buf[:1])
        if not first:
            return
        if first == b"[":
            self.array_root = True
            skip = 1
        elif first != b"{":
            compressed = self.source is not None and self.source.compressed
            raise TraceFormatError(self.path, not_a_trace(self.path, compressed), 0)
        else:
            match = TRACE_EVENTS_KEY.search(self.buf)
            if match is None:
                if len(self.buf) > MAX_HEAD_BYTES:
                    raise TraceFormatError(self.path, "no traceEvents array in the head")
                return
            self.head = bytes(self.buf[: match.start()]).lstrip(BOM_AND_WS)
            skip = match.end()
        self.found = True
        del self.buf[:skip]
        self.offset += skip

    def _keys(self, data: bytes) -> dict[str, msgspec.Raw] | None:
        """The top-level keys of ``data`` (an object), repaired as the reader repairs;
        None when they do not decode."""
        status, keys = self.decoder.repaired(_decode_keys, data, True)
        return keys if status == OK else None

    def finish(self) -> dict[str, msgspec.Raw]:
        """The keys other than ``traceEvents`` (before and after it); the last events
        handed to ``take``.

        Raises:
            TraceFormatError: the file holds no ``traceEvents`` array (empty, not a
                trace), or nothing usable (every event damaged).
        """
        if not self.found:
            self._no_events()
        rest = bytes(self.buf)
        others: dict[str, msgspec.Raw] = {}
        if not self.array_root:
            head = self._keys(self.head + b'"traceEvents":[]}') if self.head.strip() else {}
            if head is None:
                self.damage.append(
                    Damage(0, 0, len(self.head), 0, "header before traceEvents is not valid JSON")
                )
            others.update(head or {})
            whole = self._keys(b'{"traceEvents":[' + rest)
            if whole is not None:
                events = _raw_list(bytes(whole.pop("traceEvents", msgspec.Raw(b"[]"))))
                others.update(whole)
                if events:
                    doc = joined([bytes(e) for e in events])
                    self._hand(len(rest), self.decode(doc), doc, False)
                return self._usable(others)
        out = self.decoder.decode_piece(b"[" + rest + b"]", self.offset, final=True)
        if out.events:
            doc = joined(out.events)
            self._hand(len(rest), self.decode(doc), doc, False)
        if out.trailer is not None and not self.array_root:
            after = self._keys(b'{"traceEvents":[]' + rest[out.trailer - 1 :])
            others.update(after or {})
        others.pop("traceEvents", None)
        return self._usable(others)

    def _usable(self, others: dict[str, msgspec.Raw]) -> dict[str, msgspec.Raw]:
        """``others``, unless the file held damage and no event at all (the reader's
        "nothing usable")."""
        if self.damage and not self.events_seen:
            first = self.damage[0]
            raise TraceFormatError(self.path, f"nothing usable: {first.problem}", first.offset)
        return others

    def _hand(self, length: int, decoded: Any, doc: bytes, as_is: bool) -> None:
        """``take`` of a piece at the current offset."""
        self.events_seen = True
        self.take(self.offset, length, decoded, doc, as_is)

    def _no_events(self) -> None:
        data = bytes(self.buf).strip(BOM_AND_WS)
        if not data:
            raise TraceFormatError(self.path, "empty file", 0)
        raise TraceFormatError(self.path, "no traceEvents array (not a Kineto trace)", 0)
