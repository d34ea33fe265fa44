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
after its end; :mod:`.window_lanes`, n log n in events). A sibling track gets a new
integer ``tid`` (above every integer tid of the events kept) and a ``thread_name`` that
says so: ``"<name> (partially overlapping events, moved from tid <tid>)"``. No event is
dropped or changed but for its ``tid``.

Timestamps are compared exactly, in integer ns parsed from the JSON text as the reader
parses them (``trace/timestamps.py``: a float µs near 1.8e15 cannot hold the ns digits).

As tolerant as the reader: the file is framed and decoded as the reader does it
(:mod:`.window_events`: a damaged piece repaired, else salvaged), so every trace
``report`` reads can be cut; a repaired event is kept as its repaired (valid) text, and
the damage is counted (:attr:`WindowCut.damage`). A gzip stream that breaks off is cut
up to the break, as the reader reads it. Only typed errors leave :func:`cut_window` and
:meth:`WindowIndex.cut` (:class:`~.errors.TraceError`).

Cost, bounded memory: the file is read once in pieces of about
:data:`~.window_events.PIECE_BYTES` cut at event boundaries (as the reader cuts them);
each piece is decoded once for the few fields the cut needs (msgspec, C speed) and
selected in numpy, and only a piece that keeps an event is decoded again for the kept
events' raw texts, which are copied out: memory holds one piece and the kept events.
When the window is known only after a read
(the CLI's step window), :class:`WindowIndex` notes during that read, per piece, its
place in the JSON and its time range, and the cut reads back only the pieces that meet
the window from the inflater's checkpoints (``trace/source.py``): one read of the
file. Figures: ``benchmarks/bench_window.py``, ``benchmarks/RESULTS.md``.

Several ranks: :mod:`.window_merge` merges the windows of one step of every rank into
one trace.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from tb_kineto_insights.trace.errors import TraceError, TraceFormatError
from tb_kineto_insights.trace.salvage import Damage
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES, BlockReader
from tb_kineto_insights.trace.window_events import (
    ABSENT,
    EventHeads,
    EventPieces,
    check_utf8,
    decode_heads,
)
from tb_kineto_insights.trace.window_events import ns_of as ns_of
from tb_kineto_insights.trace.window_lanes import lay_out
from tb_kineto_insights.trace.window_lanes import partial_overlaps as partial_overlaps

#: Categories of GPU kernels (Kineto's old and new names).
KERNEL_CATEGORIES = frozenset({"kernel", "Kernel"})


@dataclass
class WindowCut:
    """What :func:`cut_window` produced.

    Attributes:
        document: the cut trace as built-ins and raw event texts (valid JSON:
            ``msgspec.json.encode`` writes it): ``{"traceEvents": [...], <other
            top-level keys>}``.
        start_ns, end_ns: the window on the trace's clock (ns).
        events: events kept (metadata included; sibling-track names not counted).
        kernels: kernel events kept (``cat`` ``kernel``/``Kernel``).
        moved: complete events moved to a sibling track.
        sibling_tracks: ``(pid, tid, new tid)`` of each sibling track made.
        timed: events kept that have a time (``events`` less the metadata); 0: the
            window holds no event (:func:`check_window_holds_events`).
        trace_span_ns: the first start and the last end of the file's timed events
            (ns, to the µs), or ``None`` when it has none.
        damage: the damaged regions of the file the cut read around (salvaged as the
            reader salvages them), and ``stream_damage`` a gzip stream's break
            (``(offset, problem)``), or None.
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
    damage: list[Damage] = field(default_factory=list)
    stream_damage: tuple[int, str] | None = None

    @property
    def lost_events(self) -> int:
        """Events lost to damage (each damaged region's count)."""
        return sum(d.events for d in self.damage)


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


class _ThreadName(msgspec.Struct):
    args: Any = None


_THREAD_NAME = msgspec.json.Decoder(_ThreadName)
_EVENT_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _thread_label(raw: msgspec.Raw) -> str | None:
    """The ``args.name`` of a ``thread_name`` metadata event, when it is a string."""
    try:
        args = _THREAD_NAME.decode(raw).args
    except msgspec.DecodeError:
        return None
    name = args.get("name") if isinstance(args, dict) else None
    return name if isinstance(name, str) else None


def _with_tid(raw: bytes, tid: int) -> msgspec.Raw:
    """An event's JSON text with its ``tid`` replaced (every other field's text kept as
    it is: a value decoded and written again could change, or fail to encode)."""
    fields = _EVENT_FIELDS.decode(raw)
    fields["tid"] = msgspec.Raw(str(int(tid)).encode())
    return msgspec.Raw(msgspec.json.encode(fields))


class _Cutter:
    """The cut's state while the pieces of one file go by, in file order."""

    def __init__(self, path: str, start_ns: int, end_ns: int) -> None:
        self.path = path
        self.start_ns, self.end_ns = start_ns, end_ns
        self.kept: list[bytes | msgspec.Raw] = []
        self.complete: dict[tuple[Any, Any], list[tuple[int, int, int]]] = defaultdict(list)
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.max_tid = 0
        self.kernels = 0
        self.timed = 0
        self.span_ns: tuple[int, int] | None = None  # of every event added, kept or not

    def add(self, h: EventHeads) -> None:
        """The kept events of one piece (its heads, :func:`~.window_events.decode_heads`)."""
        ts, end = h.ts, h.end
        has_ts = ts != ABSENT
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
        raws = h.raw_texts()
        tids = [t for t in (h.heads[i].tid for i in rows) if type(t) is int]
        self.max_tid = max(self.max_tid, max(tids, default=0))
        for i in rows:
            head = h.heads[i]
            position = len(self.kept)
            self.kept.append(bytes(raws[i]))  # a copy: the piece's buffer is let go
            if h.is_meta[i]:
                if head.name == "thread_name":
                    label = _thread_label(raws[i])
                    if label is not None:
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
            siblings: dict[int, int] = {}
            for position, lane in lay_out(ranges).items():
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
                            "pid": msgspec.Raw(msgspec.json.encode(pid)),
                            "tid": next_tid,
                            "args": {
                                "name": f"{base} (partially overlapping events, moved from "
                                f"tid {tid})"
                            },
                        }
                    )
                    next_tid += 1
                kept[position] = _with_tid(kept[position], siblings[lane])
                cut.moved += 1
        cut.document = {
            **others,
            "traceEvents": [msgspec.Raw(k) if isinstance(k, bytes) else k for k in kept] + names,
        }
        return cut


#: What may go wrong in the cut beyond the typed errors: turned into a
#: TraceFormatError naming the file (a safety net for the typed-errors-only promise, as
#: the reader's; the exception's type stays in the message so such a bug is reported).
_UNTYPED = (
    msgspec.MsgspecError,
    ValueError,
    OverflowError,
    TypeError,
    IndexError,
    KeyError,
    AttributeError,
    ArithmeticError,
    UnicodeError,
    RecursionError,
)


def cut_window(
    path: str, start_ns: int, end_ns: int, *, max_json_bytes: int = DEFAULT_MAX_JSON_BYTES
) -> WindowCut:
    """The events of ``[start_ns, end_ns)`` (ns on the trace's clock) of the trace file
    ``path``, partial overlaps moved to sibling tracks (module docstring). One pass over
    the file in pieces: memory holds one piece and the kept events.

    Raises (only these):
        TraceIOError: the file cannot be opened or read.
        TraceTooLargeError: its JSON is larger than ``max_json_bytes``.
        TraceFormatError: not a JSON trace (object with ``traceEvents``, or an array of
            events), nothing usable in it, or an empty window.
    """
    if end_ns <= start_ns:
        raise TraceFormatError(path, f"empty window [{start_ns}, {end_ns}) ns")
    cutter = _Cutter(path, start_ns, end_ns)
    source = BlockReader(path, max_json_bytes)
    pieces = EventPieces(path, decode_heads, lambda _o, _n, h, _d, _a: cutter.add(h), source)
    try:
        for block in source:
            pieces.feed(block)
        cut = cutter.finish(pieces.finish())
    except RecursionError as exc:
        raise TraceFormatError(path, "JSON nested too deeply to read") from exc
    except _UNTYPED as exc:
        raise TraceFormatError(path, f"cannot cut a window ({type(exc).__name__}: {exc})") from exc
    cut.damage, cut.stream_damage = list(pieces.damage), source.stream_damage
    return cut


def _index_bounds(doc: bytes) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The start and end (ns) of the timed events of a piece, for :class:`WindowIndex`:
    floats first (the fast path: a superset of the exact ranges is enough to choose the
    pieces to read back), widened by 2 µs either side (epoch-scale timestamps round to
    0.25 µs at 1.8e15 µs) and clipped to the int64 ns range; the cut's exact reading
    (:func:`~.window_events.decode_heads`) when a field is of an odd type. Raises
    ``msgspec.DecodeError`` for bad JSON only."""
    check_utf8(doc)
    try:
        bounds = _BOUNDS.decode(doc)
    except msgspec.ValidationError:  # an odd event: the cut's own reading
        h = decode_heads(doc)
        timed = h.ts != ABSENT
        return h.ts[timed] - 2000, np.maximum(h.end[timed], h.ts[timed]) + 2000
    n = len(bounds)
    ts = np.fromiter(map(_GET_TS, bounds), dtype=np.float64, count=n)
    dur = np.fromiter(map(_GET_DUR, bounds), dtype=np.float64, count=n)
    end = ts + np.clip(np.nan_to_num(dur, nan=0.0, posinf=_LIMIT_US), 0.0, _LIMIT_US)
    timed = np.isfinite(ts) & (np.abs(ts) < _LIMIT_US)
    lo = np.clip(ts[timed] - 2, -_LIMIT_US, _LIMIT_US)
    hi = np.clip(end[timed] + 2, -_LIMIT_US, _LIMIT_US)
    return (lo * 1000).astype(np.int64), (hi * 1000).astype(np.int64)


class _Bound(msgspec.Struct):
    """What :class:`WindowIndex` notes of an event: µs as floats."""

    ts: float = math.nan
    dur: float = 0.0


_BOUNDS = msgspec.json.Decoder(list[_Bound])
_GET_TS, _GET_DUR = attrgetter("ts"), attrgetter("dur")
#: Timestamps beyond this (µs) are clipped: within int64 ns with room for the margins.
_LIMIT_US = 9.2e15
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
    and whether it holds metadata events (kept by every cut). ``doc``: the piece's
    events as valid JSON, kept when it is not read back (the file's last piece, or one
    made of a piece the reader's decoding repaired or salvaged: memory then holds the
    damaged pieces' events, as the read that finds the window holds them all)."""

    offset: int
    length: int
    bins: npt.NDArray[np.int64]
    long_lo_ns: npt.NDArray[np.int64]
    long_hi_ns: npt.NDArray[np.int64]
    has_meta: bool
    doc: bytes | None = None

    def meets(self, start_ns: int, end_ns: int) -> bool:
        """Whether an event of the piece may lie in ``[start_ns, end_ns)``."""
        if self.has_meta:
            return True
        a = int(np.searchsorted(self.bins, start_ns // _BIN_NS, side="left"))
        if a < self.bins.size and int(self.bins[a]) <= (end_ns - 1) // _BIN_NS:
            return True
        return bool(((self.long_lo_ns < end_ns) & (self.long_hi_ns >= start_ns)).any())


class WindowIndex:
    """Where the events of a file lie, gathered from the blocks of one read (pass
    :meth:`block` to :func:`~tb_kineto_insights.trace.reader.read_trace` as
    ``on_block``, with a :class:`BlockReader` made with ``checkpoints=True`` as
    ``source``), so that a window found only after the read (a step's, from the read
    trace's index) is cut without reading the file again: :meth:`cut` reads back only
    the pieces whose time range meets the window, or that hold metadata, from the
    source's checkpoints, and decodes them as :func:`cut_window` does. Memory: a few
    numbers per piece of :data:`~.window_events.PIECE_BYTES`."""

    def __init__(self, source: BlockReader) -> None:
        self.source = source
        self.path = source.path
        self.bounds: list[_PieceBounds] = []
        self._pieces = EventPieces(self.path, _index_bounds, self._take, source)
        self._others: dict[str, msgspec.Raw] | None = None
        self.span_ns: tuple[int, int] | None = None  # of the file's timed events, to the µs

    def _take(self, offset: int, length: int, found: Any, doc: bytes, as_is: bool) -> None:
        lo, hi = found
        if lo.size:
            self.span_ns = _widen(self.span_ns, int(lo.min()) + 2000, int(hi.max()) - 2000)
        short = hi - lo < _BIN_NS  # covers its start's bin and at most the next
        bins = _touched_bins(lo[short] // _BIN_NS, hi[short] // _BIN_NS)
        has_meta = _META.search(doc) is not None  # a false hit costs a read back only
        # a piece the reader's decoding made (repaired, salvaged; the file's last events)
        # is kept, not read back: its bytes in the file are not its events' JSON
        kept = None if as_is else doc
        self.bounds.append(
            _PieceBounds(offset, length, bins, lo[~short], hi[~short], has_meta, kept)
        )

    def block(self, block: bytes) -> None:
        """One uncompressed block of the file, in order. Raises TraceFormatError as
        :func:`cut_window`."""
        self._guarded(lambda: self._pieces.feed(block))

    def finish(self) -> None:
        """After the last block. Raises TraceFormatError as :func:`cut_window`."""
        self._others = self._guarded(self._pieces.finish)

    def _guarded(self, call: Any) -> Any:
        try:
            return call()
        except RecursionError as exc:
            raise TraceFormatError(self.path, "JSON nested too deeply to read") from exc
        except _UNTYPED as exc:
            raise TraceFormatError(
                self.path, f"cannot cut a window ({type(exc).__name__}: {exc})"
            ) from exc

    def cut(self, start_ns: int, end_ns: int) -> WindowCut:
        """The cut of ``[start_ns, end_ns)``, as :func:`cut_window` gives it.

        Raises:
            TraceFormatError: an empty window, or nothing usable in the file.
            TraceIOError: the file cannot be read again.
        """
        if end_ns <= start_ns:
            raise TraceFormatError(self.path, f"empty window [{start_ns}, {end_ns}) ns")
        if self._others is None:
            self.finish()
        cut = self._guarded(lambda: self._cut(start_ns, end_ns))
        cut.damage, cut.stream_damage = list(self._pieces.damage), self.source.stream_damage
        cut.trace_span_ns = self.span_ns
        return cut

    def _cut(self, start_ns: int, end_ns: int) -> WindowCut:
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
                cutter.add(decode_heads(first.doc))
                continue
            try:
                data = self.source.json_range(first.offset, last.offset + last.length)
            except ValueError as exc:
                raise TraceFormatError(self.path, str(exc)) from exc
            for b in run:
                at = b.offset - first.offset
                cutter.add(decode_heads(b"[" + data[at : at + b.length] + b"]"))
        if self._others is None:  # finish() set it, or raised
            raise TraceFormatError(self.path, "the file was not read to its end")
        return cutter.finish(self._others)
