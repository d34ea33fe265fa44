"""One piece of events (JSON bytes) → event structs, whatever the damage.

A piece is ``[`` + events + ``]``, cut from the ``traceEvents`` array at event
boundaries (:mod:`.framing`). Its events are decoded by the first of these that
succeeds: typed by phase (:data:`~.events.PhaseEvent`: only the fields read for each
phase); typed with one struct for every event; loosely (untyped, then converted event by
event: an event whose fields do not fit is dropped and counted); after repairs
(:mod:`.repair`: at most one pass of each kind, so linear); and at last salvaged
(:mod:`.salvage`: every event that reads is kept, each damaged region recorded with its
byte offset). In exact mode (:mod:`.timestamps`) each ``ts`` is kept as its literal
text and converted per piece. The top-level object (a small file whole, a large one's
last events and the keys after them) is decoded the same way.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal, DecimalException
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from tb_kineto_insights.trace.events import (
    Event,
    ExactEvent,
    ExactRoot,
    FastEvent,
    PhaseEvent,
    PiecePhaseRoot,
    RawTsEvent,
    RawTsPhaseEvent,
    RawTsPhaseRoot,
    Root,
)
from tb_kineto_insights.trace.framing import last_event_boundary
from tb_kineto_insights.trace.repair import passes_for_error, repair_json
from tb_kineto_insights.trace.salvage import (
    OK,
    SYNTAX,
    TRUNCATED,
    Damage,
    Salvaged,
    classify,
    salvage_events,
)
from tb_kineto_insights.trace.timestamps import literals_ns

if TYPE_CHECKING:
    from tb_kineto_insights.trace.columns import Builder

#: Bytes of a piece cut short that are handed back to wait for more input, at most;
#: a longer one is salvaged where it is (an event longer than this is lost as damage).
MAX_PENDING_BYTES = 4 * 1024 * 1024
_TS = attrgetter("ts")


class _Lazy:
    """``msgspec.json.Decoder(typ)``, built at its first ``decode``: the one-struct
    decoders below serve only pieces the by-phase decode refuses (and damaged files), so
    most reads never use them, and building the five at import (msgspec's type info for
    :class:`~.events.FastEvent`, :class:`~.events.ExactEvent`, :class:`~.events.Root`...)
    added to every start-up (see ``benchmarks/RESULTS.md``). Decoding raises what the
    decoder raises."""

    def __init__(self, typ: Any) -> None:
        self.typ = typ
        self.decoder: msgspec.json.Decoder[Any] | None = None

    def decode(self, data: bytes | bytearray | memoryview) -> Any:
        if self.decoder is None:
            self.decoder = msgspec.json.Decoder(self.typ)
        return self.decoder.decode(data)


class _ByPhaseFirst:
    """A decoder that tries ``first`` (a type whose events are decoded by phase; its
    decoder is built on first use: building a decoder of a union of 25 structs takes
    msgspec a few milliseconds (``benchmarks/RESULTS.md``), which a process that reads
    no trace need not pay) and, when that raises ``msgspec.DecodeError``
    (``ValidationError`` included), returns what ``then`` (one struct for every event)
    returns or raises: errors are ``then``'s."""

    def __init__(self, first: Any, then: _Lazy) -> None:
        self.first_type, self.then = first, then
        self.first: msgspec.json.Decoder[Any] | None = None

    def decode_first(self, data: bytes | bytearray | memoryview) -> Any:
        """Decode with ``first`` only (raises its errors)."""
        if self.first is None:
            self.first = msgspec.json.Decoder(self.first_type)
        return self.first.decode(data)

    def decode(self, data: bytes | bytearray | memoryview) -> Any:
        try:
            return self.decode_first(data)
        except msgspec.DecodeError:
            return self.then.decode(data)


#: One struct for every event, ``ts`` as a float, a ``Decimal`` or its literal text.
event_decoder = _Lazy(list[FastEvent])
exact_event_decoder = _Lazy(list[ExactEvent])
raw_ts_event_decoder = _Lazy(list[RawTsEvent])
#: By phase first (only the fields read for each phase), else one struct per event.
phase_event_decoder = _ByPhaseFirst(list[PhaseEvent], event_decoder)
raw_ts_phase_event_decoder = _ByPhaseFirst(list[RawTsPhaseEvent], raw_ts_event_decoder)
# the top level (a small file whole, a large one's last events and the keys after
# them): its events decode as a piece's do, ``Input Dims`` and (exact) ``ts`` as their
# literals, converted vectorised: decoding them as objects and ``Decimal``, converted
# one by one, is slower, and a small file is read whole at the top level
# (``benchmarks/RESULTS.md``)
root_decoder = _ByPhaseFirst(PiecePhaseRoot, _Lazy(Root))
exact_root_decoder = _ByPhaseFirst(RawTsPhaseRoot, _Lazy(ExactRoot))
#: Untyped decoding; numbers beyond float range become ±inf (then quarantined), not errors.
any_decoder = msgspec.json.Decoder(float_hook=float)


def _decimal_or_float(text: str) -> Decimal | float:
    """``float_hook`` of the exact decoder: ``Decimal(text)``; a literal whose exponent
    is past what ``decimal`` holds (``1.0e-999999999999999999999``) is ``float(text)``
    (0.0 or ±inf) instead of raising ``decimal.InvalidOperation`` out of the decode,
    past the reader's typed errors."""
    try:
        return Decimal(text)
    except DecimalException:
        return float(text)


#: Untyped decoding in exact mode: numbers as Decimal, so ns digits survive.
exact_any_decoder = msgspec.json.Decoder(float_hook=_decimal_or_float)


#: The decode error of an event nested too deeply (no byte offset: the salvage then
#: reads the piece event by event, and loses the deep one).
NESTED_TOO_DEEP = "JSON nested too deeply to read"


class Piece(list):
    """Decoded events of one piece plus their timestamps already converted
    (``ts``: what :meth:`~.columns.Builder._ts_ns` returns), so they are parsed once."""

    ts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def decode_typed(data: bytes | bytearray | memoryview, builder: Builder) -> list[Any]:
    """A JSON array of events → typed event structs (in exact mode a :class:`Piece`
    with its timestamps converted). Raises ``msgspec.DecodeError`` (bad JSON) or
    ``msgspec.ValidationError`` (a field of an unexpected type: decode loosely).

    First by phase (:data:`~tb_kineto_insights.trace.events.PhaseEvent`: only the
    fields read for each phase); a piece that does not decode so (an event without a
    ``ph`` or with one that is not a Chrome trace phase, a field of an odd type, bad
    JSON) is decoded with one struct for every event
    (:class:`~tb_kineto_insights.trace.events.FastEvent` /
    :class:`~tb_kineto_insights.trace.events.RawTsEvent`), whose errors are the ones
    raised and repaired."""
    try:
        if not builder.exact:
            return phase_event_decoder.decode_first(data)
        piece = Piece(raw_ts_phase_event_decoder.decode_first(data))
        piece.ts = literals_ns(list(map(_TS, piece)))
        return piece
    except msgspec.DecodeError:  # a ValidationError too: the decoders below decide
        pass
    if builder.exact:  # ts as literal text, converted vectorised
        try:
            piece = Piece(raw_ts_event_decoder.decode(data))
            piece.ts = literals_ns(list(map(_TS, piece)))
            return piece
        except msgspec.ValidationError:
            pass  # a field of an unexpected type: as below, event by event
    return (exact_event_decoder if builder.exact else event_decoder).decode(data)


class PieceDecoder:
    """Decodes pieces and the top-level object of one file (:meth:`decode_piece`,
    :meth:`decode_root`, both through :meth:`repaired`) and notes what it took:
    ``repairs`` (counts by kind), ``invalid_events`` (events dropped by the loose decode;
    ``non_objects`` of them no JSON object at all) and ``damage`` (salvaged regions).
    ``builder`` (whose ``exact`` decides how ``ts`` is decoded) must be set before any
    event is decoded."""

    def __init__(self) -> None:
        self.repairs: Counter[str] = Counter()
        self.invalid_events = 0  # events whose fields have unusable types
        self.non_objects = 0  # of those, entries that are no JSON object at all
        self.builder: Builder | None = None
        self.damage: list[Damage] = []

    # -- decoding: typed, then loosely, then repaired, then salvaged ------------------
    def _decode_list(self, data: bytes | bytearray | memoryview) -> list[Any]:
        """A JSON array of events → event structs; a field of an unexpected type is
        decoded loosely. Raises ``msgspec.DecodeError`` (bad JSON) only."""
        assert self.builder is not None  # set before any event is decoded
        try:
            try:
                return decode_typed(data, self.builder)
            except msgspec.ValidationError:
                untyped = exact_any_decoder if self.builder.exact else any_decoder
                return self._convert_events(untyped.decode(data))
        except RecursionError:
            # an event nested deeper than msgspec decodes (~1,000 levels in ``args``):
            # bad JSON to the salvage, which then finds the event and loses it alone
            # and reads the rest of the file (raised as it is, it would end the read)
            raise msgspec.DecodeError(NESTED_TOO_DEEP) from None

    def decode_root(self, data: bytes) -> Root:
        """The top-level object (events included). Raises ``msgspec.DecodeError`` only.

        As a piece (:func:`decode_typed`): by phase first, in exact mode each ``ts``
        converted from its literal here, so that a literal that is no number (a string,
        ``true``) sends the decode to the one-struct types (``Decimal``), whose
        validation error in turn sends it to the loose decode, which drops that event
        alone (``invalid_field_type``)."""
        try:
            return self._decode_root(data)
        except RecursionError:
            # an event nested deeper than msgspec decodes: bad JSON to the caller, which
            # reads the events as a piece (:meth:`decode_piece`: the salvage loses the
            # deep event alone), as for a piece
            raise msgspec.DecodeError(NESTED_TOO_DEEP) from None

    def _decode_root(self, data: bytes) -> Root:
        """:meth:`decode_root` itself (a ``RecursionError`` is the caller's)."""
        exact = self.builder is not None and self.builder.exact
        decoder = exact_root_decoder if exact else root_decoder
        try:
            try:
                root = decoder.decode_first(data)
                if exact and root.traceEvents:
                    piece = Piece(root.traceEvents)
                    piece.ts = literals_ns(list(map(_TS, piece)))
                    root.traceEvents = piece
                return root
            except msgspec.DecodeError:  # a ValidationError too: the one-struct decode
                return decoder.then.decode(data)
        except msgspec.ValidationError:
            raw = (exact_any_decoder if exact else any_decoder).decode(data)
        if not isinstance(raw, dict):
            raise msgspec.DecodeError("JSON is malformed: top level is not an object (byte 0)")
        events = self._convert_events(raw.pop("traceEvents", []))
        root_type: Any = ExactRoot if exact else Root
        try:
            root = msgspec.convert(raw, root_type, strict=False)
        except (msgspec.ValidationError, TypeError, ValueError, OverflowError):
            root = root_type()
        root.traceEvents = events
        return root

    def _convert_events(self, items: Any) -> list[Any]:
        """Untyped events → structs one by one; those that still do not fit are counted
        (``skipped.invalid_field_type``)."""
        exact = self.builder is not None and self.builder.exact
        event_type: Any = ExactEvent if exact else Event
        out: list[Any] = []
        if not isinstance(items, list):
            self.invalid_events += 1
            self.non_objects += 1
            return out
        for item in items:
            try:
                out.append(msgspec.convert(item, event_type, strict=False))
            except (msgspec.ValidationError, TypeError, ValueError, OverflowError):
                self.invalid_events += 1
                self.non_objects += not isinstance(item, dict)
        return out

    def _repair_one(self, unit: bytes) -> list[Any] | None:
        """One lost unit after deep repair, or ``None`` (salvage's ``repair_one``)."""
        repaired, counts = repair_json(unit)
        if not counts:
            return None
        try:
            events = self._decode_list(repaired)
        except msgspec.DecodeError:
            return None
        self.repairs.update(counts)
        return events

    def repaired(self, decode: Any, data: bytes | bytearray, final: bool) -> tuple[int, Any]:
        """Decode ``data`` with ``decode``, repairing what each error points at (at most
        one pass of each kind, so linear): ``(OK, result)``, ``(TRUNCATED, None)`` when
        a piece that is not the last is cut short, else ``(SYNTAX, None)``."""
        attempt: bytes | bytearray = data
        tried: frozenset[str] = frozenset()
        counts: Counter[str] = Counter()
        while True:
            try:
                result = decode(attempt)
            except msgspec.DecodeError as exc:
                kind, offset = classify(exc)
                if kind == TRUNCATED:
                    return (TRUNCATED if not final else SYNTAX), None
                passes = passes_for_error(str(exc), attempt, offset) - tried
                if not passes:
                    return SYNTAX, None
                tried |= passes
                attempt, more = repair_json(attempt, passes)
                counts += more
                continue
            self.repairs.update(counts)
            return OK, result

    def decode_piece(self, buf: bytes | bytearray, origin: int, final: bool) -> Salvaged:
        """Events of ``buf`` = ``[`` + events + ``]`` (``buf[1]`` at file offset
        ``origin``). Returns ``leftover=1`` when a piece that is not the last is cut
        short (more input may complete it); damage is salvaged and recorded."""
        status, events = self.repaired(self._decode_list, buf, final)
        if status == OK:
            return Salvaged(events=events)
        if status == TRUNCATED:
            # Cut short: its last event is (a cut at a "},{" inside a string or inside
            # an event's args), or a bracket opened earlier never closes (a stray
            # "["). Up to MAX_PENDING_BYTES it is handed back for more input, as a big
            # event needs; past that, the piece without its last segment is decoded,
            # else salvaged here: handing back every piece would make the pending
            # bytes grow to the end of the file, every retry decoding them again (a
            # stray "[" would cost many times a clean read), and past MAX_EVENT_BYTES
            # the whole file would be lost.
            if len(buf) <= MAX_PENDING_BYTES:
                return Salvaged(leftover=1)
            cut = last_event_boundary(buf)
            if cut is None:
                return Salvaged(leftover=1)
            head = bytearray(memoryview(buf)[: cut[0]])
            head.append(0x5D)  # "]"
            status, events = self.repaired(self._decode_list, head, final)
            if status == OK:
                return Salvaged(events=events, leftover=cut[1])
        # (the salvage works on a bytearray of its own: it writes to it while it decodes)
        out = salvage_events(bytearray(buf), origin, final, self._decode_list, self._repair_one)
        self.damage.extend(out.damage)
        return out
