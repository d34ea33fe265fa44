"""A window of a trace file, cut from the file itself, for Perfetto UI or chrome://tracing.

:func:`cut_window` keeps, as they are in the file, every event of the window
``[start_ns, end_ns)`` on the trace's own clock:

* complete events (``ph`` ``X``) that overlap it (``ts < end`` and ``ts + dur > start``;
  a zero-length one when its ``ts`` lies in the window);
* every other event with a ``ts`` in the window (instants, counters, ``[memory]``
  events, flow ends, ``B``/``E`` halves);
* every metadata event (``ph`` ``M``: process and thread names, sort indices), and every
  top-level key other than ``traceEvents`` (``deviceProperties``, ``distributedInfo``,
  ``baseTimeNanoseconds``, …).

Partial overlaps: on one (pid, tid) track, complete events must nest; Perfetto's JSON
importer drops an event that starts inside another and ends after it (google/perfetto
#4280: kernels missing from PyTorch traces; ``with_stack=True`` traces have such
overlaps). So the kept complete events of each track are laid out, in order of start
(longer first on a tie), on the track itself or on sibling tracks: an event goes on the
first of them where it nests (the ranges still open there at its start all end at or
after its end). A sibling track gets a new integer ``tid`` (above every integer tid of
the events kept) and a ``thread_name`` that says so: ``"<name> (partially overlapping
events, moved from tid <tid>)"``. No event is dropped or changed but for its ``tid``.

Timestamps are compared exactly, in integer ns parsed from the JSON text as the reader
parses them (``trace/numbers.py``: a float µs near 1.8e15 cannot hold the ns digits).

Cost, bounded memory: the file is read once in pieces of about :data:`PIECE_BYTES` cut
at event boundaries (as the reader cuts them); each piece is decoded once for the few
fields the cut needs (msgspec, C speed) and selected in numpy, and only a piece that
keeps an event is decoded again for the kept events' raw texts, which are copied out:
memory holds one piece and the kept events. When the window is known only after a read
(the CLI's step window), :class:`WindowIndex` notes during that read, per piece, its
place in the JSON and its time range, and the cut reads back only the pieces that meet
the window from the inflater's checkpoints (``trace/source.py``): one read of the
file. Figures: ``benchmarks/bench_window.py``, ``benchmarks/RESULTS.md``.

Several ranks: :mod:`.window_merge` merges the windows of one step of every rank into
one trace.
"""

from __future__ import annotations

import gzip
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from itertools import repeat
from operator import attrgetter, eq
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from tb_kineto_insights.trace.errors import TraceError, TraceFormatError
from tb_kineto_insights.trace.framing import (
    BOM_AND_WS,
    MAX_EVENT_BYTES,
    MAX_HEAD_BYTES,
    TRACE_EVENTS_KEY,
    last_event_boundary,
    not_a_trace,
)
from tb_kineto_insights.trace.numbers import parse_us_literals_to_ns
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES, BlockReader


class _Root(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = msgspec.field(default_factory=list)  # noqa: N815


class _Head(msgspec.Struct):
    """The fields of an event the cut needs; the rest stays in the raw text."""

    ph: Any = ""
    ts: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b""))  # b"": absent
    dur: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b""))
    pid: Any = None
    tid: Any = None
    cat: Any = None
    name: Any = None


_ROOT = msgspec.json.Decoder(_Root)
_HEAD = msgspec.json.Decoder(_Head)
_HEADS = msgspec.json.Decoder(list[_Head])
_OTHER_KEYS = msgspec.json.Decoder(dict[str, msgspec.Raw])

#: Categories of GPU kernels (Kineto's old and new names).
KERNEL_CATEGORIES = frozenset({"kernel", "Kernel"})


def ns_of(raw: msgspec.Raw) -> int | None:
    """A JSON number of µs (the text of ``ts`` or ``dur``) as integer ns, exact for
    decimals, truncated toward zero; None when absent (empty, ``null``) or not a finite
    number (``"N/A"``, ``NaN``)."""
    text = bytes(raw).strip().strip(b'"')
    try:
        value = Decimal(text.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError):
        return None
    if not value.is_finite():
        return None
    return int(value.scaleb(3))  # truncated toward zero, as the reader does


@dataclass
class WindowCut:
    """What :func:`cut_window` produced.

    Attributes:
        document: the cut trace as built-ins and raw event texts (write it with
            :func:`write_window`): ``{"traceEvents": [...], <other top-level keys>}``.
        start_ns, end_ns: the window on the trace's clock (ns).
        events: events kept (metadata included; sibling-track names not counted).
        kernels: kernel events kept (``cat`` ``kernel``/``Kernel``).
        moved: complete events moved to a sibling track.
        sibling_tracks: ``(pid, tid, new tid)`` of each sibling track made.
        timed: events kept that have a time (``events`` less the metadata); 0: the
            window holds no event (:func:`check_window_holds_events`).
        trace_span_ns: the first start and the last end of the file's timed events
            (ns, to the µs), or ``None`` when it has none.
    """

    document: dict[str, Any]
    start_ns: int
    end_ns: int
    events: int = 0
    kernels: int = 0
    moved: int = 0
    sibling_tracks: list[tuple[Any, Any, int]] = field(default_factory=list)
    timed: int = 0
    trace_span_ns: tuple[int, int] | None = None


#: Share of the step window added on each side of a default window.
DEFAULT_MARGIN_FRACTION = 0.10


#: Largest ``start_us``/``end_us`` (either sign), µs from the step window's start: about
#: 11.6 days, far past any profiled step, and far inside int64 ns (a window of ``1e20``
#: µs, past int64 ns, is refused with a message, not cut).
WINDOW_OFFSET_LIMIT_US = 10**12


def check_offset_us(value: float, option: str) -> None:
    """Raise ValueError, naming ``option`` (``--start-us`` or ``start_us``) and the
    limit, when ``value`` is not a finite number of µs within
    ±:data:`WINDOW_OFFSET_LIMIT_US` of the step's start."""
    if not math.isfinite(value):
        raise ValueError(f"{option} must be a finite number of µs (got {value})")
    if abs(value) > WINDOW_OFFSET_LIMIT_US:
        raise ValueError(
            f"{option} must be within ±{WINDOW_OFFSET_LIMIT_US:,} µs of the step's start "
            f"(got {value:g})"
        )


#: A window offset as text (a query parameter, a command-line option): ASCII digits, an
#: optional sign and fraction of any length, no exponent (``1e300`` is refused the same
#: way by the ``window`` command and the ``/window`` routes). A fraction finer than a ns
#: is rounded to the ns once, here (the tab writes ns already: 3 decimals); a float such
#: as ``766.7589999999999`` that the page once sent unrounded is a decimal too.
_SIGNED_DECIMAL = re.compile(r"[-+]?[0-9]{1,15}(\.[0-9]+)?")
#: Longest offset text read (a fraction of thousands of digits says nothing more).
_OFFSET_TEXT_MAX = 64
_NS = Decimal("0.001")


def parse_offset_us(text: str, option: str) -> float:
    """A window offset given as text (µs after the step window's start), rounded once to
    the ns (half to even) and checked as :func:`check_offset_us`; the one grammar of the
    CLI's ``--start-us``/``--end-us`` and the routes' ``start_us``/``end_us``. The value
    returned holds whole ns (``round(value * 1000)`` gives them back exactly).

    Raises:
        ValueError: not a plain decimal (an exponent, ``nan``, spaces), over
            :data:`_OFFSET_TEXT_MAX` characters, or past the limit; the message names
            ``option``, the form and the limit.
    """
    if len(text) > _OFFSET_TEXT_MAX or not _SIGNED_DECIMAL.fullmatch(text):
        raise ValueError(
            f"{option} must be a decimal number of µs (digits, an optional '-' and fraction, "
            f"no exponent), within ±{WINDOW_OFFSET_LIMIT_US:,} of the step's start "
            f"(got {text[:40]!r})"
        )
    value = float(Decimal(text).quantize(_NS, rounding=ROUND_HALF_EVEN))
    check_offset_us(value, option)
    return value


def window_bounds(
    step_start_ns: int,
    step_ns: int,
    start_us: float | None,
    end_us: float | None,
    options: tuple[str, str] = ("start_us", "end_us"),
) -> tuple[int, int] | None:
    """The window to cut, ns on the trace's clock, for a step window starting at
    ``step_start_ns`` and ``step_ns`` long: ``[start_us, end_us)`` µs after its start
    when both are given, else the step with :data:`DEFAULT_MARGIN_FRACTION` of its
    length on each side. None when only one of them is given, or ``end_us <= start_us``.

    Raises:
        ValueError: ``start_us`` or ``end_us`` is NaN, infinite or past
            :data:`WINDOW_OFFSET_LIMIT_US` (the message names the option, as
            ``options`` spells it, and the limit).
    """
    for value, option in zip((start_us, end_us), options, strict=True):
        if value is not None:
            check_offset_us(value, option)
    if start_us is None and end_us is None:
        margin = int(step_ns * DEFAULT_MARGIN_FRACTION)
        return step_start_ns - margin, step_start_ns + step_ns + margin
    if start_us is None or end_us is None or end_us <= start_us:
        return None
    return step_start_ns + round(start_us * 1000), step_start_ns + round(end_us * 1000)


def _widen(span: tuple[int, int] | None, lo: int, hi: int) -> tuple[int, int]:
    """``span`` widened to hold ``[lo, hi]``."""
    return (lo, hi) if span is None else (min(span[0], lo), max(span[1], hi))


def check_window_holds_events(cut: WindowCut, path: str, step_start_ns: int, step: int) -> None:
    """Refuse a cut that holds no event with a time (only metadata: a window outside
    the trace), saying where the trace's events lie, µs relative to step ``step``'s
    window start ``step_start_ns``.

    Raises:
        TraceError: ``cut.timed`` is 0.
    """
    if cut.timed:
        return

    def rel(ns: int) -> str:
        return f"{(ns - step_start_ns) / 1000:,.3f}"

    where = (
        f"the trace's events span {rel(cut.trace_span_ns[0])} to {rel(cut.trace_span_ns[1])} µs"
        if cut.trace_span_ns is not None
        else "the trace has no event with a time"
    )
    raise TraceError(
        path,
        f"the window {rel(cut.start_ns)} to {rel(cut.end_ns)} µs after step {step}'s start "
        f"holds no event; {where} after that start",
    )


def id_key(value: Any) -> Any:
    """A pid or tid as a dict key (lists and dicts, which no trace should have, as
    their text)."""
    return repr(value) if isinstance(value, (list, dict)) else value


#: ``ts`` of an event without a usable one (absent, a string, NaN): left out.
_ABSENT = np.iinfo(np.int64).min

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
#: Uncompressed bytes of events gathered before a piece is decoded (a piece is cut at
#: the last event boundary after this much).
PIECE_BYTES = 4 * 1024 * 1024


def _ns_column(literals: list[msgspec.Raw]) -> npt.NDArray[np.int64]:
    """µs literals → int64 ns as the reader parses them
    (:func:`~tb_kineto_insights.trace.numbers.parse_us_literals_to_ns`: exact, truncated
    toward zero); the odd ones (``null``, strings, exponents) one by one with
    :func:`ns_of`; :data:`_ABSENT` where there is no number, or one that does not fit
    int64 ns (``1e400``, ``9.3e18``: the reader quarantines those events too)."""
    ns, empty, odd = parse_us_literals_to_ns(literals)
    out = ns.astype(np.int64)
    out[empty] = _ABSENT
    for i in np.flatnonzero(odd).tolist():
        value = ns_of(literals[i])
        fits = value is not None and _INT64_MIN < value <= _INT64_MAX
        out[i] = value if value is not None and fits else _ABSENT
    return out


@dataclass
class _Heads:
    """The cut's fields of one piece's events, as columns (``ok``: the event is an
    object with fields of usable types; an event that is not is left out)."""

    raws: list[msgspec.Raw] | None
    heads: list[_Head]
    ok: npt.NDArray[np.bool_]
    ts: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    is_meta: npt.NDArray[np.bool_]
    is_x: npt.NDArray[np.bool_]


_BLANK = _Head()
_GET_TS, _GET_DUR, _GET_PH = (attrgetter(f) for f in ("ts", "dur", "ph"))


def _decode_heads(doc: bytes) -> _Heads:
    """The fields the cut needs of every event of ``doc`` (a JSON array of events): one
    typed decode (C speed), else, when one event does not fit (not an object, a field
    of an odd type), one by one.

    Raises:
        msgspec.DecodeError: ``doc`` is not valid JSON (a piece cut inside a string).
    """
    raws: list[msgspec.Raw] | None = None
    try:
        heads = _HEADS.decode(doc)
        ok = np.ones(len(heads), dtype=np.bool_)
    except msgspec.ValidationError:
        raws = _RAWS.decode(doc)
        heads, flags = [], []
        for raw in raws:
            try:
                heads.append(_HEAD.decode(raw))
                flags.append(True)
            except (msgspec.DecodeError, msgspec.ValidationError):
                heads.append(_BLANK)
                flags.append(False)
        ok = np.array(flags, dtype=np.bool_)
    n = len(heads)
    ts = _ns_column(list(map(_GET_TS, heads)))
    phs = list(map(_GET_PH, heads))
    is_meta = np.fromiter(map(eq, phs, repeat("M")), dtype=np.bool_, count=n) & ok
    is_x = np.fromiter(map(eq, phs, repeat("X")), dtype=np.bool_, count=n) & ok
    dur = np.maximum(_ns_column(list(map(_GET_DUR, heads))), 0)
    has_ts = (ts != _ABSENT) & ok
    ts[~has_ts] = _ABSENT
    end = np.where(has_ts, ts + np.where(is_x, dur, 0), _ABSENT)
    return _Heads(raws, heads, ok, ts, end, is_meta, is_x)


class _Cutter:
    """The cut's state while the pieces of one file go by, in file order."""

    def __init__(self, path: str, start_ns: int, end_ns: int) -> None:
        self.path = path
        self.start_ns, self.end_ns = start_ns, end_ns
        self.kept: list[bytes | dict[str, Any]] = []
        self.complete: dict[tuple[Any, Any], list[tuple[int, int, int]]] = defaultdict(list)
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.max_tid = 0
        self.kernels = 0
        self.timed = 0
        self.span_ns: tuple[int, int] | None = None  # of every event added, kept or not

    def add(self, doc: bytes, h: _Heads | None = None) -> None:
        """The kept events of ``doc`` (a JSON array of events; ``h``: its heads when
        already decoded). Raises msgspec.DecodeError as :func:`_decode_heads`."""
        if h is None:
            h = _decode_heads(doc)
        ts, end = h.ts, h.end
        has_ts = ts != _ABSENT
        if has_ts.any():
            self.span_ns = _widen(self.span_ns, int(ts[has_ts].min()), int(end[has_ts].max()))
        lo, hi = self.start_ns, self.end_ns
        inside_x = has_ts & (ts < hi) & ((end > lo) | ((end == ts) & (ts >= lo)))
        inside = has_ts & (ts >= lo) & (ts < hi)
        keep = h.is_meta | np.where(h.is_x, inside_x, inside & ~h.is_meta)
        rows = np.flatnonzero(keep).tolist()
        if not rows:
            return
        self.timed += int(np.count_nonzero(keep & ~h.is_meta))
        raws = h.raws if h.raws is not None else _RAWS.decode(doc)
        tids = [t for t in (h.heads[i].tid for i in rows) if type(t) is int]
        self.max_tid = max(self.max_tid, max(tids, default=0))
        for i in rows:
            head = h.heads[i]
            position = len(self.kept)
            self.kept.append(bytes(raws[i]))  # a copy: the piece's buffer is let go
            if h.is_meta[i]:
                if head.name == "thread_name":
                    label = msgspec.json.decode(raws[i]).get("args", {}).get("name")
                    if isinstance(label, str):
                        self.thread_names[(id_key(head.pid), id_key(head.tid))] = label
                continue
            if h.is_x[i]:
                key = (id_key(head.pid), id_key(head.tid))
                self.complete[key].append((int(ts[i]), int(end[i]), position))
                if head.cat in KERNEL_CATEGORIES:
                    self.kernels += 1

    def finish(self, others: dict[str, msgspec.Raw]) -> WindowCut:
        """The cut: kept events, partial overlaps moved to sibling tracks."""
        kept = self.kept
        cut = WindowCut(
            {},
            self.start_ns,
            self.end_ns,
            events=len(kept),
            kernels=self.kernels,
            timed=self.timed,
            trace_span_ns=self.span_ns,
        )
        next_tid = self.max_tid + 1
        names: list[dict[str, Any]] = []
        for (pid, tid), ranges in self.complete.items():
            lanes = _lay_out(ranges)
            siblings: dict[int, int] = {}
            for position, lane in lanes.items():
                if lane == 0:
                    continue
                if lane not in siblings:
                    siblings[lane] = next_tid
                    cut.sibling_tracks.append((pid, tid, next_tid))
                    base = self.thread_names.get((pid, tid)) or f"thread {tid}"
                    names.append(
                        {
                            "ph": "M",
                            "name": "thread_name",
                            "pid": pid,
                            "tid": next_tid,
                            "args": {
                                "name": f"{base} (partially overlapping events, moved from "
                                f"tid {tid})"
                            },
                        }
                    )
                    next_tid += 1
                event = msgspec.json.decode(kept[position])  # type: ignore[arg-type]
                event["tid"] = siblings[lane]
                kept[position] = event
                cut.moved += 1
        cut.document = {
            **others,
            "traceEvents": [msgspec.Raw(k) if isinstance(k, bytes) else k for k in kept] + names,
        }
        return cut


class _Pieces:
    """The ``traceEvents`` array of a stream of uncompressed blocks, cut into pieces at
    event boundaries (``}`` ``,`` ``{``), each handed to ``take(offset, doc)``: the
    events as a JSON array (their text in brackets, one copy) and the offset of the
    text in the JSON. ``take`` raises
    msgspec.DecodeError when the piece does not decode (a boundary found inside a
    string): the bytes then wait for more until they have doubled. After the last block
    (:meth:`finish`), the rest (the last events, the keys after the array) is decoded
    with the keys before it: :meth:`finish` returns the top-level keys other than
    ``traceEvents`` and hands the last events to ``take``."""

    def __init__(self, path: str, take: Any, source: BlockReader | None = None) -> None:
        self.path = path
        self.take = take
        self.source = source  # says whether the file was gzip, for the message
        self.head = b""  # the root object up to the traceEvents key
        self.array_root = False
        self.found = False
        self.buf = bytearray()
        self.offset = 0  # JSON offset of buf[0]
        self.retry_at = 0

    def feed(self, block: bytes) -> None:
        self.buf += block
        if not self.found:
            self._find_events()
            if not self.found:
                return
        while len(self.buf) >= max(PIECE_BYTES, self.retry_at):
            limit = max(PIECE_BYTES, self.retry_at)
            cut = last_event_boundary(self.buf, limit)
            if cut is None:
                cut = last_event_boundary(self.buf)  # an event longer than a piece
                if cut is None:
                    return
            end, next_start = cut
            with memoryview(self.buf) as view:
                piece = b"".join((b"[", view[:end], b"]"))
            try:
                self.take(self.offset, piece)
            except msgspec.DecodeError:
                self.retry_at = 2 * len(self.buf)
                if len(self.buf) > 2 * MAX_EVENT_BYTES:
                    raise TraceFormatError(
                        self.path, "not a readable JSON trace", self.offset
                    ) from None
                return
            del self.buf[:next_start]
            self.offset += next_start
            self.retry_at = 0

    def _find_events(self) -> None:
        stripped = bytes(self.buf).lstrip(BOM_AND_WS)
        if not stripped:
            return
        if stripped[:1] == b"[":
            self.array_root = True
            skip = len(self.buf) - len(stripped) + 1
        elif stripped[:1] != b"{":
            compressed = self.source is not None and self.source.compressed
            raise TraceFormatError(self.path, not_a_trace(self.path, compressed))
        else:
            match = TRACE_EVENTS_KEY.search(self.buf)
            if match is None:
                if len(self.buf) > MAX_HEAD_BYTES:
                    raise TraceFormatError(self.path, "no traceEvents array in the head")
                return
            self.head = bytes(self.buf[: match.start()])
            skip = match.end()
        self.found = True
        del self.buf[:skip]
        self.offset += skip

    def finish(self) -> dict[str, msgspec.Raw]:
        """The keys other than ``traceEvents``; the last events handed to ``take``.

        Raises:
            TraceFormatError: the rest is not valid JSON, or the events are not a list.
        """
        rest = bytes(self.buf)
        try:
            if self.array_root:
                events = _RAWS.decode(b"[" + rest)
                others: dict[str, msgspec.Raw] = {}
            else:
                whole = self.head.lstrip(BOM_AND_WS) + b'"traceEvents":[' + rest
                if not self.found:
                    whole = rest  # no traceEvents key: decode what there is
                events = _ROOT.decode(whole).traceEvents
                others = {k: v for k, v in _OTHER_KEYS.decode(whole).items() if k != "traceEvents"}
        except msgspec.DecodeError as exc:
            raise TraceFormatError(self.path, f"not a readable JSON trace ({exc})") from exc
        except msgspec.ValidationError as exc:
            raise TraceFormatError(self.path, f"not a Kineto trace ({exc})") from exc
        if events:
            self.take(self.offset, b"[" + b",".join(bytes(e) for e in events) + b"]")
        return others


def _checked_blocks(reader: BlockReader) -> Iterator[bytes]:
    """The reader's blocks; TraceFormatError after them when the stream was damaged."""
    yield from reader
    if reader.stream_damage is not None:
        offset, problem = reader.stream_damage
        raise TraceFormatError(
            reader.path, f"cannot cut a window of a damaged file: {problem}", offset
        )


def cut_window(
    path: str, start_ns: int, end_ns: int, *, max_json_bytes: int = DEFAULT_MAX_JSON_BYTES
) -> WindowCut:
    """The events of ``[start_ns, end_ns)`` (ns on the trace's clock) of the trace file
    ``path``, partial overlaps moved to sibling tracks (module docstring). One pass over
    the file in pieces of about :data:`PIECE_BYTES`: memory holds one piece and the
    kept events.

    Raises:
        TraceIOError: the file cannot be opened or read.
        TraceTooLargeError: its JSON is larger than ``max_json_bytes``.
        TraceFormatError: not a JSON trace (object with ``traceEvents``, or an array of
            events), damaged (truncated gzip, a malformed event), or an empty window.
    """
    if end_ns <= start_ns:
        raise TraceFormatError(path, f"empty window [{start_ns}, {end_ns}) ns")
    cutter = _Cutter(path, start_ns, end_ns)
    source = BlockReader(path, max_json_bytes)
    pieces = _Pieces(path, lambda _offset, doc: cutter.add(doc), source)
    for block in _checked_blocks(source):
        pieces.feed(block)
    return cutter.finish(pieces.finish())


class _Bound(msgspec.Struct):
    """What :class:`WindowIndex` notes of an event: µs as floats (a superset of the exact
    range is enough to choose the pieces to read back)."""

    ts: float = math.nan
    dur: float = 0.0


_BOUNDS = msgspec.json.Decoder(list[_Bound])
#: A piece's time cover: the ``_BIN_NS`` bins its short events touch, and its longer
#: events one by one.
_BIN_NS = 1_000_000
_META = re.compile(rb'"ph"\s*:\s*"M"')


def _touched_bins(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The sorted distinct values of ``a`` and ``b``: marked in a table over their range
    (a piece spans a few thousand bins: linear, no sort), else ``np.unique``."""
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    lo = min(int(a.min()), int(b.min()))
    span = max(int(a.max()), int(b.max())) - lo + 1
    if span > 4 * (a.size + b.size) + 65536:
        return np.unique(np.concatenate([a, b]))
    mark = np.zeros(span, dtype=np.bool_)
    mark[a - lo] = True
    mark[b - lo] = True
    return np.flatnonzero(mark) + lo


@dataclass
class _PieceBounds:
    """Where a piece lies in the JSON, when in time (``bins``: the sorted
    :data:`_BIN_NS` bins its events shorter than a bin touch; ``long_lo_ns`` /
    ``long_hi_ns``: its longer events' ranges; all widened to hold the exact ones),
    and whether it holds metadata events (kept by every cut)."""

    offset: int
    length: int
    bins: npt.NDArray[np.int64]
    long_lo_ns: npt.NDArray[np.int64]
    long_hi_ns: npt.NDArray[np.int64]
    has_meta: bool

    def meets(self, start_ns: int, end_ns: int) -> bool:
        """Whether an event of the piece may lie in ``[start_ns, end_ns)``."""
        if self.has_meta:
            return True
        a = int(np.searchsorted(self.bins, start_ns // _BIN_NS, side="left"))
        if a < self.bins.size and int(self.bins[a]) <= (end_ns - 1) // _BIN_NS:
            return True
        return bool(((self.long_lo_ns < end_ns) & (self.long_hi_ns >= start_ns)).any())

    doc: bytes | None = None  # the last piece (in brackets), kept: not read back


class WindowIndex:
    """Where the events of a file lie, gathered from the blocks of one read (pass
    :meth:`block` to :func:`~tb_kineto_insights.trace.reader.read_trace` as
    ``on_block``, with a :class:`BlockReader` made with ``checkpoints=True`` as
    ``source``), so that a window found only after the read (a step's, from the read
    trace's index) is cut without reading the file again: :meth:`cut` reads back only
    the pieces whose time range meets the window, or that hold metadata, from the
    source's checkpoints. Memory: a few numbers per piece of :data:`PIECE_BYTES`."""

    def __init__(self, source: BlockReader) -> None:
        self.source = source
        self.path = source.path
        self.bounds: list[_PieceBounds] = []
        self._pieces = _Pieces(self.path, self._take, source)
        self._others: dict[str, msgspec.Raw] | None = None
        self._final = False
        self.span_ns: tuple[int, int] | None = None  # of the file's timed events, to the µs

    def _take(self, offset: int, doc: bytes) -> None:
        try:
            bounds = _BOUNDS.decode(doc)
        except msgspec.ValidationError:  # an odd event: the cut's own reading
            h = _decode_heads(doc)
            timed = h.ts != _ABSENT
            ts_us = h.ts[timed] / 1000.0
            end_us = h.end[timed] / 1000.0
        else:
            n = len(bounds)
            ts = np.fromiter(map(_GET_TS, bounds), dtype=np.float64, count=n)
            dur = np.fromiter(map(_GET_DUR, bounds), dtype=np.float64, count=n)
            end = ts + np.maximum(np.nan_to_num(dur), 0)
            timed = np.isfinite(ts) & np.isfinite(end)
            ts_us, end_us = ts[timed], end[timed]
        if ts_us.size:
            self.span_ns = _widen(
                self.span_ns, round(float(ts_us.min()) * 1000), round(float(end_us.max()) * 1000)
            )
        # µs as floats: widened by 2 µs either side, a superset of the exact ranges
        # (epoch-scale timestamps round to 0.25 µs at 1.8e15 µs)
        lo = ((ts_us - 2) * 1000).astype(np.int64)
        hi = ((end_us + 2) * 1000).astype(np.int64)
        short = hi - lo < _BIN_NS  # covers its start's bin and at most the next
        bins = _touched_bins(lo[short] // _BIN_NS, hi[short] // _BIN_NS)
        has_meta = _META.search(doc) is not None  # a false hit costs a read back only
        kept = doc if self._final else None
        self.bounds.append(
            _PieceBounds(offset, len(doc) - 2, bins, lo[~short], hi[~short], has_meta, kept)
        )

    def block(self, block: bytes) -> None:
        """One uncompressed block of the file, in order."""
        self._pieces.feed(block)

    def finish(self) -> None:
        """After the last block. Raises TraceFormatError as :func:`cut_window`."""
        if self.source.stream_damage is not None:
            offset, problem = self.source.stream_damage
            raise TraceFormatError(
                self.path, f"cannot cut a window of a damaged file: {problem}", offset
            )
        self._final = True
        self._others = self._pieces.finish()

    def cut(self, start_ns: int, end_ns: int) -> WindowCut:
        """The cut of ``[start_ns, end_ns)``, as :func:`cut_window` gives it.

        Raises:
            TraceFormatError: an empty window.
            TraceIOError: the file cannot be read again.
        """
        if end_ns <= start_ns:
            raise TraceFormatError(self.path, f"empty window [{start_ns}, {end_ns}) ns")
        if self._others is None:
            self.finish()
        cutter = _Cutter(self.path, start_ns, end_ns)
        wanted = [b for b in self.bounds if b.meets(start_ns, end_ns)]
        # neighbouring pieces are read back together (one inflate from a checkpoint)
        runs: list[list[_PieceBounds]] = []
        for b in wanted:
            last = runs[-1][-1] if runs else None
            if (
                last is not None
                and last.doc is None
                and b.doc is None
                and (b.offset - (last.offset + last.length) < 64)
            ):
                runs[-1].append(b)
            else:
                runs.append([b])
        for run in runs:
            first, last = run[0], run[-1]
            if first.doc is not None:
                cutter.add(first.doc)
                continue
            try:
                data = self.source.json_range(first.offset, last.offset + last.length)
            except ValueError as exc:
                raise TraceFormatError(self.path, str(exc)) from exc
            for b in run:
                at = b.offset - first.offset
                cutter.add(b"[" + data[at : at + b.length] + b"]")
        assert self._others is not None
        cut = cutter.finish(self._others)
        cut.trace_span_ns = self.span_ns
        return cut


def _lay_out(ranges: list[tuple[int, int, int]]) -> dict[int, int]:
    """Per kept position, the track (0: its own; k > 0: the k-th sibling) where each
    complete event of one (pid, tid) nests: in order of start, longer first on a tie,
    the first track whose ranges open at its start all end at or after its end."""
    stacks: list[list[int]] = []  # per track, the ends of the ranges open there
    out: dict[int, int] = {}
    for start, end, position in sorted(ranges, key=lambda r: (r[0], -r[1], r[2])):
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                out[position] = lane
                break
        else:
            stacks.append([end])
            out[position] = len(stacks) - 1
    return out


def partial_overlaps(data: bytes) -> int:
    """How many complete events of a JSON trace (``data``: its bytes, uncompressed)
    start inside an earlier one on their (pid, tid) track and end after it, what
    Perfetto's JSON importer drops: the check for a cut window (timestamps exact, as in
    :func:`cut_window`)."""
    tracks: dict[tuple[Any, Any], list[tuple[int, int]]] = defaultdict(list)
    for raw in _ROOT.decode(data).traceEvents:
        head = _HEAD.decode(raw)
        ts = ns_of(head.ts)
        if head.ph == "X" and ts is not None:
            tracks[(id_key(head.pid), id_key(head.tid))].append(
                (ts, ts + max(0, ns_of(head.dur) or 0))
            )
    bad = 0
    for ranges in tracks.values():
        stack: list[int] = []
        for start, end in sorted(ranges, key=lambda r: (r[0], -r[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            if stack and stack[-1] < end:
                bad += 1
                continue
            stack.append(end)
    return bad


def write_window(cut: WindowCut, out_path: str) -> int:
    """Write the cut trace as JSON, gzip-compressed when ``out_path`` ends with ``.gz``;
    returns the bytes written. Raises OSError when the file cannot be written."""
    return write_document(cut.document, out_path)


def write_document(document: dict[str, Any], out_path: str) -> int:
    """Write a trace document as JSON, gzip-compressed when ``out_path`` ends with
    ``.gz``; returns the bytes written. Raises OSError when the file cannot be written."""
    data = msgspec.json.encode(document)
    if out_path.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6)
    with open(out_path, "wb") as f:
        f.write(data)
    return len(data)
