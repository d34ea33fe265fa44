"""File → :class:`~tb_kineto_insights.trace.model.Trace`: tolerant, columnar, bounded memory.

How it reads:

1. :class:`~tb_kineto_insights.trace.source.BlockReader` yields uncompressed blocks
   (gzip found by magic bytes; total capped).
2. The ``traceEvents`` array is cut into pieces at event boundaries (``}`` ``,`` ``{``)
   and msgspec decodes each piece into small typed structs (:mod:`.events`) that hold
   only the fields the analysis uses.
3. Each decoded piece is turned into numpy columns at once and dropped, so memory holds
   one piece of objects at a time plus the columns.
4. A piece that fails to decode is repaired (``repair.repair_json``) and decoded again;
   damage that stays is salvaged (``salvage.salvage_events``: every event that reads is
   kept, each damaged region recorded with its byte offset in ``TraceHealth.damage``),
   and a truncated file keeps its complete events. Only a file with nothing usable raises
   :class:`TraceFormatError`; ``read_trace`` raises only :class:`TraceError` subclasses.
5. A cut inside a string cannot decode (the string never closes), so such a piece waits
   until the pending bytes grow :data:`RETRY_GROWTH` times: a long stretch without a
   real event boundary costs linear, not quadratic, time.
6. Broken timestamps are quarantined and GPU work overlapping on a stream is clipped
   (``timing``).

Timestamps become ``int64`` ns. Epoch-scale ones with ns digits (``1712195495519689.047``)
have more digits than a float64 keeps, so when the first piece shows them, ``ts`` is
kept as its literal text (``msgspec.Raw``) for the whole file (exact mode) and converted
per piece, vectorised, by :func:`~tb_kineto_insights.trace.numbers.parse_us_literals_to_ns`
(truncated toward zero: ``int(Decimal(ts).scaleb(3))``); a literal that is not a plain
number is converted one by one as a ``Decimal``.

``Input Dims`` (``record_shapes=True``, on most CPU ops), and ``Input type`` and
``Concrete Inputs`` of the ops the analysis reads them for (:mod:`.op_names`), are kept
as their literal texts,
one blob per piece (:class:`~tb_kineto_insights.trace.rowjson.RowJson`); a nested list
is built only when the analysis looks one up. Building them all was the largest single
cost of decoding such a trace, and a parallel read paid as much again to unpickle them.

No Python runs per event on the normal path (:class:`_Builder`; all loops in C). An
event costs one dict lookup of its key (phase, category, name; one ``attrgetter``
tuple); Python runs once per distinct key (``__missing__``, numbering keys in first-seen
order), fixing its route (duration kind, flow, instant), category, name id and whether
it is a ``[memory]`` instant, so routing, counts and name ids need no pass over the
events. A column is one ``np.fromiter(map(attrgetter(field), events), dtype)``: no list
in between, no type discovery (a column that does not convert takes the list path).
Fetching several fields per event at once (one tuple per event,
``msgspec.structs.astuple``) and transposing is slower: each field costs the same memory
traffic either way and the tuples cost more; so is one (pid, tid) key per event.

Cores: blocks are inflated one ahead on a helper thread (zlib releases the GIL); the
msgspec decode and the column building hold it, so a large file (:mod:`.parallel`) is
decoded in worker **processes**, not threads. The parent inflates and sends about
:data:`~.parallel.PIECE_BYTES` of blocks at a time (smaller tasks spend the parent's
time on messages); a worker cuts them into the serial loop's pieces and builds a local
:class:`_Builder`, which the parent merges in file order (:meth:`_Builder.merge`): the
result is the serial read's, bit for bit. At most 2 tasks per worker are in flight, so
progress (``reading_progress``: stored bytes the parent read) runs at most that far
ahead of the merged result. A task that fails in a worker is dropped with every later
one in flight, and their blocks go through the serial path from the state before it:
repairs, salvage and damage offsets are a serial read's. ``_finish`` (concatenation,
sorting, clipping) and the analysis are serial.

Figures (date, machine, load) are in ``benchmarks/RESULTS.md``: ``benchmarks/bench_builder.py``
(column building), ``benchmarks/bench_parallel_read.py`` (serial against parallel) and
``benchmarks/bench_decode_pieces.py`` (typed decode, timestamp parse) reproduce them.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator
from decimal import Decimal, DecimalException
from itertools import repeat
from operator import attrgetter, is_not
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec
import numpy as np

from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace import op_names, parallel, timing
from tb_kineto_insights.trace.errors import TraceFormatError
from tb_kineto_insights.trace.events import (
    METADATA_KEYS,
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
from tb_kineto_insights.trace.framing import (
    BOM_AND_WS,
    MAX_EVENT_BYTES,
    MAX_HEAD_BYTES,
    TRACE_EVENTS_KEY,
    WS,
    last_event_boundary,
    not_a_trace,
)
from tb_kineto_insights.trace.repair import passes_for_error, repair_json
from tb_kineto_insights.trace.rowjson import RowJson
from tb_kineto_insights.trace.salvage import (
    OK,
    SYNTAX,
    TRUNCATED,
    Damage,
    Salvaged,
    classify,
    salvage_events,
)
from tb_kineto_insights.trace.source import (
    BLOCK_BYTES,
    DEFAULT_MAX_JSON_BYTES,
    BlockReader,
    file_size,
)
from tb_kineto_insights.trace.timestamps import (
    EXACT_TS,
    MAX_TS_US,
    decimals_ns,
    literals_ns,
    us_to_ns,
)

#: Largest top-level ``deviceProperties`` / ``distributedInfo`` / ``tb_kineto_insights``
#: object kept (bytes of its JSON). These are copied into every summary as they are, so
#: a bigger one is left out and counted in ``TraceHealth.skipped`` as
#: ``oversized_<key>``; Kineto's and ``capture``'s own are a few KiB.
ROOT_OBJECT_MAX_BYTES = 64 * 1024


#: Category (as written by any Kineto version) → reader kind.
CATEGORY_KIND: dict[str, str] = {
    "kernel": m.KERNEL,
    "gpu_memcpy": m.MEMCPY,
    "memcpy": m.MEMCPY,
    "gpu_memset": m.MEMSET,
    "memset": m.MEMSET,
    "cuda_runtime": m.RUNTIME,
    "cuda_driver": m.RUNTIME,
    "runtime": m.RUNTIME,
    "driver": m.RUNTIME,
    "cpu_op": m.CPU_OP,
    "operator": m.CPU_OP,
    "user_annotation": m.USER_ANNOTATION,
    "gpu_user_annotation": m.GPU_ANNOTATION,
    "python_function": m.PYTHON,
    "cuda_sync": m.GPU_SYNC,
}
#: Flow categories that link a CPU launch to GPU work (``fwdbwd`` links autograd ops).
LAUNCH_FLOW_CATEGORIES = frozenset({"ac2g", "async", "async_cpu_to_gpu"})
#: Durations above this are quarantined as implausible (7 days, in µs).
MAX_DURATION_US = 7 * 24 * 3600 * 1e6
#: Marks a missing pid/tid/device/stream before fallbacks are applied.
MISSING_ID = -(2**62)

_RECORD_COUNTS = "Record counts:"
#: Names longer than this (characters) are cut, with "…" appended, and counted.
MAX_NAME_CHARS = 16384
#: After a piece cut inside an event, wait until the pending bytes are this many times
#: larger before decoding again: every retry re-reads the pending bytes, so the retries
#: cost at most 1 / (1 - 1/RETRY_GROWTH) times the bytes (linear).
RETRY_GROWTH = 4
#: Damaged regions listed one by one in ``TraceHealth.damage`` (all are counted).
MAX_DAMAGE_LISTED = 20
#: Bytes of a piece cut short that are handed back to wait for more input, at most;
#: a longer one is salvaged where it is (an event longer than this is lost as damage).
MAX_PENDING_BYTES = 4 * 1024 * 1024

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
    decoder is built on first use: a union of 25 structs takes msgspec about 3 ms,
    which a process that reads no trace need not pay) and, when that raises
    ``msgspec.DecodeError`` (``ValidationError`` included), returns what ``then`` (one
    struct for every event, as before) returns or raises: errors are ``then``'s."""

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


_event_decoder = _Lazy(list[FastEvent])
_exact_event_decoder = _Lazy(list[ExactEvent])
_raw_ts_event_decoder = _Lazy(list[RawTsEvent])
_phase_event_decoder = _ByPhaseFirst(list[PhaseEvent], _event_decoder)
_raw_ts_phase_event_decoder = _ByPhaseFirst(list[RawTsPhaseEvent], _raw_ts_event_decoder)
# the top level (a small file whole, a large one's last events and the keys after
# them): its events decode as a piece's do, ``Input Dims`` and (exact) ``ts`` as their
# literals, converted vectorised; as objects and ``Decimal`` it took about twice as
# long (issue 34: the read of sample_logs' 33 small files, 0.27 -> 0.18 s)
_root_decoder = _ByPhaseFirst(PiecePhaseRoot, _Lazy(Root))
_exact_root_decoder = _ByPhaseFirst(RawTsPhaseRoot, _Lazy(ExactRoot))
#: Untyped decoding; numbers beyond float range become ±inf (then quarantined), not errors.
_any_decoder = msgspec.json.Decoder(float_hook=float)


def _decimal_or_float(text: str) -> Decimal | float:
    """``float_hook`` of the exact decoder: ``Decimal(text)``; a literal whose exponent
    is past what ``decimal`` holds (``1.0e-999999999999999999999``) is ``float(text)``
    (0.0 or ±inf) instead of ``decimal.InvalidOperation`` (issue 32 §8)."""
    try:
        return Decimal(text)
    except DecimalException:
        return float(text)


#: Untyped decoding in exact mode: numbers as Decimal, so ns digits survive.
_exact_any_decoder = msgspec.json.Decoder(float_hook=_decimal_or_float)


def kind_of_category(cat: object) -> str | None:
    """Reader kind of a duration event's category; ``None`` when it has none.

    Known names in any case map through :data:`CATEGORY_KIND`; ``*_runtime`` names of
    other accelerators (``mtia_runtime``) count as runtime; anything else is ``other``.
    """
    if cat is None:
        return None
    key = str(cat).lower()
    kind = CATEGORY_KIND.get(key)
    if kind is not None:
        return kind
    if key.endswith("_runtime") or key.endswith("_driver"):
        return m.RUNTIME
    return m.OTHER


def _plain_int64s(values: list[object]) -> bool:
    """Whether every value is an ``int`` (not a ``bool``) in int64 range, which
    :func:`_as_int` returns as it is (checked in C: one ``map(type)``, ``min``, ``max``)."""
    if not values:
        return True
    if set(map(type, values)) != {int}:
        return False
    return min(values) >= -(2**63) and max(values) < 2**63  # type: ignore[type-var,operator]


def _as_int(value: object, strings: dict[str, int]) -> int:
    """One id value → int: ints as is, ``"0x0"``/``"12"`` parsed, other strings interned
    as negative numbers (``-1 - index``), missing → :data:`MISSING_ID`."""
    if value is None:
        return MISSING_ID
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else MISSING_ID
    if isinstance(value, float):
        return int(value) if np.isfinite(value) and abs(value) < 2**63 else MISSING_ID
    text = str(value).strip()
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        return int(float(text))
    except (ValueError, OverflowError):
        pass
    return -1 - strings.setdefault(text, len(strings))


# -- per-event work in C: attribute getters and routes ------------------------------------
_PH = attrgetter("ph")
_CAT = attrgetter("cat")
_NAME = attrgetter("name")
_TS = attrgetter("ts")
_DUR = attrgetter("dur")
_PID = attrgetter("pid")
_TID = attrgetter("tid")
_ID = attrgetter("id")
_ARGS = attrgetter("args")
_EXTERNAL_ID = attrgetter("external_id")
_CORRELATION = attrgetter("correlation")
_DEVICE = attrgetter("device")
_STREAM = attrgetter("stream")
_COLLECTIVE_NAME = attrgetter("collective_name")
_IN_MSG_NELEMS = attrgetter("in_msg_nelems")
_INPUT_DIMS = attrgetter("input_dims")
_INPUT_TYPE = attrgetter("input_type")
_CONCRETE_INPUTS = attrgetter("concrete_inputs")
_FLOPS = attrgetter("flops")
_BYTES = attrgetter("bytes")
_TOTAL_ALLOCATED = attrgetter("total_allocated")
_TOTAL_RESERVED = attrgetter("total_reserved")
_DEVICE_TYPE = attrgetter("device_type")
_DEVICE_ID = attrgetter("device_id")
_ADDR = attrgetter("addr")
_MEMORY_NAME = "[memory]"
_NO_TEXT = msgspec.Raw(b"")  # an absent JSON-text arg (typed decoders' default)
_NULL = np.frombuffer(b"null", dtype=np.uint8)
_FLOW_PHASE = {"s": 0, "f": 1}
#: Where an event goes, by (phase, category): a duration kind's table, or one of these.
_ROUTES: tuple[str, ...] = (
    *m.DURATION_KINDS,
    "flow",
    "instant",
    "metadata",
    "missing_cat",
    "missing_ph",
    "unsupported",
)
_DURATION_ROUTES = frozenset(m.DURATION_KINDS)
_ROUTE_INDEX = {route: i for i, route in enumerate(_ROUTES)}
_R_INSTANT = _ROUTE_INDEX["instant"]


def _route(ph: object, cat: object) -> int:
    """Index in :data:`_ROUTES` of an event with phase ``ph`` and category ``cat``."""
    if ph == "X":
        kind = kind_of_category(cat)
        return _ROUTE_INDEX["missing_cat" if kind is None else kind]
    if ph == "s" or ph == "f" or ph == "t":
        return _ROUTE_INDEX["flow"]
    if ph == "i" or ph == "I":
        return _ROUTE_INDEX["instant"]
    if ph == "M":
        return _ROUTE_INDEX["metadata"]
    if ph is None:
        return _ROUTE_INDEX["missing_ph"]
    return _ROUTE_INDEX["unsupported"]


def _take(items: list[Any], at: np.ndarray) -> list[Any]:
    """``[items[i] for i in at]``, with the loop in C."""
    if len(at) == len(items):
        return items
    return list(map(items.__getitem__, at.tolist()))


def _take_ts(
    ts: tuple[np.ndarray, np.ndarray, np.ndarray], at: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if len(at) == len(ts[0]):
        return ts
    return ts[0][at], ts[1][at], ts[2][at]


def _present(values: list[object]) -> np.ndarray:
    """bool mask: the value is not ``None`` (the loop in C)."""
    return np.fromiter(map(is_not, values, repeat(None)), np.bool_, count=len(values))


#: The decode error of an event nested too deeply (no byte offset: the salvage then
#: reads the piece event by event, and loses the deep one).
NESTED_TOO_DEEP = "JSON nested too deeply to read"


class _Piece(list):
    """Decoded events of one piece plus their timestamps already converted
    (``ts``: what :meth:`_Builder._ts_ns` returns), so they are parsed once."""

    ts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


#: (phase, category, name) of an event, one tuple per event built in C: the event's key.
_EVENT_KEY = attrgetter("ph", "cat", "name")


#: The args that make an event a collective (:meth:`_Builder._comm`), absent.
_COMM_KEYS = attrgetter("collective_name", "in_msg_nelems")
_NO_COMM = (None, None)


class _FirstSeen(dict):
    """Numbers keys in first-seen order as they are looked up: a missing key gets the
    next number (``__missing__``: Python runs once per distinct key, the lookups of
    known keys stay in C) and is listed in ``new`` until the caller takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.new: list[Any] = []

    def __missing__(self, key: Any) -> int:
        number = self[key] = len(self)
        self.new.append(key)
        return number


class _Columns:
    """Accumulates numpy column chunks for one table."""

    def __init__(self) -> None:
        self.chunks: dict[str, list[np.ndarray]] = defaultdict(list)
        self.rows = 0
        self.comm: dict[int, m.CommArgs] = {}
        self.input_dims = RowJson()
        self.input_types = RowJson()
        self.concrete_inputs = RowJson()
        self.flops = RowJson()

    def add(self, cols: dict[str, np.ndarray]) -> None:
        n = 0
        for key, arr in cols.items():
            self.chunks[key].append(arr)
            n = len(arr)
        self.rows += n

    def concat(self, key: str, dtype: Any) -> np.ndarray:
        parts = self.chunks.get(key)
        if not parts:
            return np.zeros(0, dtype=dtype)
        return np.concatenate(parts).astype(dtype, copy=False)


class _Builder:
    """Turns decoded event pieces into columns and counts (:meth:`add_events`, one
    piece at a time, or :meth:`merge` of a builder made elsewhere); the ``*_out``
    methods give the tables."""

    def __init__(self, exact: bool) -> None:
        self.exact = exact
        self.names: dict[object, int] = {}
        self._arg_flags: list[tuple[bool, bool]] = []
        self._arg_flag_arrays = (np.zeros(1, dtype=np.bool_), np.zeros(1, dtype=np.bool_))
        self.strings: dict[str, int] = {}
        self.tables: dict[str, _Columns] = {kind: _Columns() for kind in m.DURATION_KINDS}
        self.memory = _Columns()
        self.flows = _Columns()
        self.event_count = 0
        self.category_counts: Counter[object] = Counter()
        self.kind_counts: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.quarantined: Counter[str] = Counter()
        self.quarantined_by_kind: dict[str, Counter[str]] = defaultdict(Counter)
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.string_id_count = 0
        self._launch_cache: dict[object, bool] = {}
        self._clear_keys()

    def _clear_keys(self) -> None:
        """Empty the per-key caches (:meth:`add_events`); :meth:`merge` needs none."""
        # each distinct (phase, category, name), numbered in first-seen order: its
        # (phase, category) number, its name, and the name's id (-1: no name; -2: not
        # interned yet: names are interned when a duration kind's events are added)
        self._keys = _FirstSeen()
        self._key_pair = np.zeros(0, dtype=np.intp)
        self._key_name: list[object] = []
        self._key_name_id = np.zeros(0, dtype=np.int64)
        self._key_is_memory = np.zeros(0, dtype=np.bool_)
        # per key: 1 if its name is "process_name", 2 if "thread_name", else 0
        self._key_metadata_name = np.zeros(0, dtype=np.int8)
        # each distinct (phase, category), numbered in first-seen order: its route
        # (index in _ROUTES) and its category (the key of category_counts)
        self._pairs: dict[tuple[object, object], int] = {}
        self._pair_route: list[int] = []
        self._pair_cat: list[object] = []
        self._pair_routes = np.zeros(0, dtype=np.int16)

    # -- columns -----------------------------------------------------------------------
    def _ids_of(self, get: Any, objs: list[Any], missing: int = MISSING_ID) -> np.ndarray:
        """:meth:`_ids` of ``list(map(get, objs))`` (``get``: an ``attrgetter``), the
        common case (all ints) in one pass without the list."""
        try:
            return np.fromiter(map(get, objs), np.int64, count=len(objs))
        except (TypeError, ValueError, OverflowError):
            return self._ids(list(map(get, objs)), missing, ints_tried=True)

    def _ids(
        self, values: list[object], missing: int = MISSING_ID, ints_tried: bool = False
    ) -> np.ndarray:
        """int64 column from id-like values (ints, numeric or hex strings, None):
        ``missing`` where a value is ``None``; a non-numeric string is interned as a
        negative number (:func:`_as_int`) and counted in ``string_id_count``.

        One C call in the common cases: all ints (``np.fromiter``: numpy's own
        conversion, the same as ``np.array(values, dtype=np.int64)`` value for value),
        all ``None`` (``list.count``); ints mixed with ``None`` go through float64
        (exact below 2^53), anything else value by value. ``ints_tried``: the caller
        already failed to convert them as ints.

        Otherwise :func:`_as_int` runs once per distinct (type, value) pair
        (``dict.fromkeys``), not per value. Old Kineto traces name
        threads ``"stream 7"`` or ``"5555"`` (``kineto_resnet50``: 51,168 string
        ``tid`` values, 5 distinct); converting each, with two caught exceptions per
        non-numeric string, was a large share of that read (see ``benchmarks/RESULTS.md``)."""
        n = len(values)
        if not ints_tried:
            try:
                return np.fromiter(values, np.int64, count=n)
            except (TypeError, ValueError, OverflowError):
                pass
        if values.count(None) == n:
            return np.full(n, missing, dtype=np.int64)
        try:
            arr = np.fromiter(values, np.float64, count=n)
            if np.all(np.abs(arr[~np.isnan(arr)]) < 2.0**53):
                out = np.where(np.isnan(arr), float(missing), arr)
                return out.astype(np.int64)
        except (TypeError, ValueError, OverflowError):
            pass
        self.string_id_count += sum(map(isinstance, values, repeat(str)))
        # each distinct (type, value) once, in first-seen order (strings interned as
        # before); the type in the key keeps -2**63 (int, kept) apart from -2.0**63
        # (float, missing), which compare equal
        typed = list(zip(map(type, values), values, strict=True))
        try:
            distinct = dict.fromkeys(typed)
        except TypeError:  # an unhashable value (a list from a loose decode)
            distinct = None
        if distinct is not None:
            for key in distinct:
                iv = _as_int(key[1], self.strings)
                distinct[key] = missing if iv == MISSING_ID else iv
            return np.fromiter(map(distinct.__getitem__, typed), np.int64, count=n)
        out_list = []
        for v in values:
            iv = _as_int(v, self.strings)
            out_list.append(missing if iv == MISSING_ID else iv)
        return np.array(out_list, dtype=np.int64)

    def _floats_of(self, get: Any, objs: list[Any]) -> np.ndarray:
        """:meth:`_floats` of ``list(map(get, objs))``, in one pass when all convert."""
        try:
            return np.fromiter(map(get, objs), np.float64, count=len(objs))
        except (TypeError, ValueError, OverflowError):
            return self._floats(list(map(get, objs)))

    def _floats(self, values: list[object]) -> np.ndarray:
        """float64 column; ``None`` and values that are not numbers → NaN.
        ``np.fromiter`` converts as ``np.array(values, dtype=np.float64)`` does (``None``
        → NaN, numeric strings parsed) without its type discovery pass."""
        try:
            return np.fromiter(values, np.float64, count=len(values))
        except (TypeError, ValueError, OverflowError):
            out = []
            for v in values:
                try:
                    out.append(float(v) if v is not None else np.nan)  # type: ignore[arg-type]
                except (TypeError, ValueError, OverflowError):
                    out.append(np.nan)
            return np.array(out, dtype=np.float64)

    def _ts_ns(self, values: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Timestamps (µs: float, ``Decimal``, or the literal as ``msgspec.Raw``) →
        (int64 ns, missing mask, out-of-range mask). Values beyond the int64 ns range
        (|ts| ≥ :data:`MAX_TS_US`, ±inf from ``1e400``) are unusable; the caller
        quarantines them as ``ts_out_of_range``. Literals are converted vectorised
        (:func:`~tb_kineto_insights.trace.numbers.parse_us_literals_to_ns`), truncated
        toward zero like ``int(Decimal(ts).scaleb(3))``; floats as :func:`us_to_ns`."""
        n = len(values)
        if not self.exact:
            us = self._floats(values)
            missing = np.isnan(us)
            huge = ~missing & ~(np.abs(us) < MAX_TS_US)
            return us_to_ns(np.where(missing | huge, 0.0, us)), missing, huge
        is_raw = np.fromiter(map(isinstance, values, repeat(msgspec.Raw)), np.bool_, count=n)
        if is_raw.all():
            return literals_ns(values)
        ns = np.zeros(n, dtype=np.int64)
        missing = np.zeros(n, dtype=np.bool_)
        huge = np.zeros(n, dtype=np.bool_)
        raw_at = np.flatnonzero(is_raw)
        if len(raw_at):
            raws = list(map(values.__getitem__, raw_at.tolist()))
            ns[raw_at], missing[raw_at], huge[raw_at] = literals_ns(raws)
        dec_at = np.flatnonzero(~is_raw)  # Decimal (or None): the top-level decode
        if len(dec_at):
            ns[dec_at], missing[dec_at], huge[dec_at] = decimals_ns(
                list(map(values.__getitem__, dec_at.tolist()))
            )
        return ns, missing, huge

    def _quarantine(self, kind: str, reason: str, n: int) -> None:
        if n:
            self.quarantined[reason] += n
            self.quarantined_by_kind[kind][reason] += n

    def _name_ids(self, keys: np.ndarray) -> np.ndarray:
        """Name ids of events given their key numbers (:meth:`add_events`): a name not
        interned yet gets the next id, in the order its events come (first-seen order,
        as looking names up one by one would give); Python runs per new key only."""
        ids = self._key_name_id[keys]
        new = ids == -2
        if new.any():
            todo = keys[new]
            unique, first_at = np.unique(todo, return_index=True)
            names, key_name, key_name_id = self.names, self._key_name, self._key_name_id
            for k in unique[np.argsort(first_at, kind="stable")].tolist():
                key_name_id[k] = names.setdefault(key_name[k], len(names))
            ids = key_name_id[keys]
        return ids

    def _add_keys(self) -> None:
        """Number the (phase, category) pairs and note the names of the keys that the
        last piece brought (in first-seen order)."""
        new, self._keys.new = self._keys.new, []
        pairs = self._pairs
        pair_of, name_id, is_memory, metadata_name = [], [], [], []
        for ph, cat, name in new:
            pair = pairs.get((ph, cat))
            if pair is None:
                pair = pairs[(ph, cat)] = len(pairs)
                self._pair_route.append(_route(ph, cat))
                self._pair_cat.append(cat)
            pair_of.append(pair)
            self._key_name.append(name)
            name_id.append(-1 if name is None else -2)
            # as `"[memory]".__eq__(name)` was taken: NotImplemented (a name that is not
            # a string, or none) counted as true
            is_memory.append(name == _MEMORY_NAME or not isinstance(name, str))
            metadata_name.append(1 if name == "process_name" else 2 if name == "thread_name" else 0)
        self._pair_routes = np.array(self._pair_route, dtype=np.int16)
        self._key_pair = np.concatenate([self._key_pair, np.array(pair_of, dtype=np.intp)])
        self._key_name_id = np.concatenate([self._key_name_id, np.array(name_id, dtype=np.int64)])
        self._key_is_memory = np.concatenate(
            [self._key_is_memory, np.array(is_memory, dtype=np.bool_)]
        )
        self._key_metadata_name = np.concatenate(
            [self._key_metadata_name, np.array(metadata_name, dtype=np.int8)]
        )

    # -- pieces -------------------------------------------------------------------------
    def add_events(self, events: list[Any]) -> None:
        """One decoded piece (a list, or a :class:`_Piece` with its timestamps) →
        columns. Per-event work runs in C (``map`` with ``attrgetter``, dict lookups,
        numpy); Python runs per kind and per distinct (phase, category, name), not per
        event (see the module docstring)."""
        n = len(events)
        if not n:
            return
        self.event_count += n
        keys = self._keys
        key = np.fromiter(map(keys.__getitem__, map(_EVENT_KEY, events)), np.intp, count=n)
        if keys.new:
            self._add_keys()
        pair = self._key_pair[key]
        per_pair = np.bincount(pair, minlength=len(self._pairs))
        # categories in first-seen order, as Counter.update(cats) made them: pairs are
        # numbered in first-seen order and a new category comes with a new pair
        category_counts, pair_cat = self.category_counts, self._pair_cat
        seen = np.flatnonzero(per_pair)
        for p, count in zip(seen.tolist(), per_pair[seen].tolist(), strict=True):
            category_counts[pair_cat[p]] += count
        code = self._pair_routes[pair]
        counts = np.bincount(code, minlength=len(_ROUTES))
        present, first_at = np.unique(code, return_index=True)
        # the order the reader always used: metadata and skips as met, then each
        # duration kind in order of first appearance, then flows, then instants
        order = [int(c) for c in present[np.argsort(first_at, kind="stable")]]
        ts_all = getattr(events, "ts", None)
        if ts_all is None and counts[: _R_INSTANT + 1].any():
            ts_all = self._ts_ns(list(map(_TS, events)))
        later: list[tuple[str, np.ndarray]] = []
        for c in order:
            route = _ROUTES[c]
            at = np.flatnonzero(code == c) if counts[c] != n else np.arange(n)
            if route == "metadata":
                self._metadata_events(_take(events, at), key if len(at) == n else key[at])
            elif route == "missing_cat" or route == "missing_ph":
                self.skipped[route] += int(counts[c])
            elif route == "unsupported":  # counted per phase
                self.skipped.update(f"unsupported_phase_{ph}" for ph in map(_PH, _take(events, at)))
            else:
                later.append((route, at))
        rank = {"flow": 1, "instant": 2}
        for route, at in sorted(later, key=lambda item: rank.get(item[0], 0)):
            assert ts_all is not None
            evs, ts = _take(events, at), _take_ts(ts_all, at)
            if route == "flow":
                self._flows(evs, ts, pair if len(at) == n else pair[at])
            elif route == "instant":
                self._instants(evs, ts, key if len(at) == n else key[at])
            else:
                self._duration(route, evs, ts, key if len(at) == n else key[at])

    def _metadata_events(self, evs: list[Any], keys: np.ndarray) -> None:
        """Metadata (``M``) events of a piece (``keys``: their key numbers) →
        ``process_names`` / ``thread_names``, as :meth:`_metadata_label` event by event
        gives (the last label of an id wins, ids in first-seen order, strings interned in
        event order), with no Python per event when every ``pid`` (and every ``tid`` of a
        named thread) is a plain int in int64 range: then nothing is interned, only the
        events whose key names ``process_name`` / ``thread_name`` are looked at, and each
        dict takes one ``dict.update``. Anything else (a string id, a float, a huge int)
        goes event by event, as before. ``hta_mtia`` has 310,046 metadata events (of
        455,739), repeating the names of 2 processes and their threads, so reading them
        one by one was a measurable part of its read (see ``benchmarks/RESULTS.md``)."""
        self.kind_counts["metadata"] += len(evs)
        pids = list(map(_PID, evs))
        if not _plain_int64s(pids):
            for e in evs:
                self._metadata_label(e)
            return
        which = self._key_metadata_name[keys]
        named: list[tuple[list[Any], list[Any], list[Any]]] = []
        for code in (1, 2):
            at = np.flatnonzero(which == code).tolist()
            labels = list(map(attrgetter("args.name"), map(evs.__getitem__, at)))
            is_str = np.fromiter(map(isinstance, labels, repeat(str)), np.bool_, count=len(at))
            if not is_str.all():
                keep = np.flatnonzero(is_str).tolist()
                at, labels = list(map(at.__getitem__, keep)), list(map(labels.__getitem__, keep))
            named.append((at, list(map(pids.__getitem__, at)), labels))
        (_, process_pids, process_labels), (thread_at, thread_pids, thread_labels) = named
        tids = list(map(_TID, map(evs.__getitem__, thread_at)))
        if not _plain_int64s(tids):
            for e in evs:
                self._metadata_label(e)
            return
        self.process_names.update(zip(process_pids, process_labels, strict=True))
        thread_ids = zip(thread_pids, tids, strict=True)
        self.thread_names.update(zip(thread_ids, thread_labels, strict=True))

    def _metadata_label(self, e: Any) -> None:
        """One metadata event with a string label (``args.name``), event by event."""
        label = e.args.name
        if not isinstance(label, str):
            return
        pid = _as_int(e.pid, self.strings)
        if e.name == "process_name":
            self.process_names[pid] = label
        elif e.name == "thread_name":
            self.thread_names[(pid, _as_int(e.tid, self.strings))] = label

    def _duration(
        self,
        kind: str,
        evs: list[Any],
        ts: tuple[np.ndarray, np.ndarray, np.ndarray],
        keys: np.ndarray,
    ) -> None:
        """Events of one duration kind (``keys``: their key numbers, which give their
        names) → rows of its table; events without name, ts or dur are skipped, broken
        ones quarantined."""
        start_ns, ts_missing, ts_huge = ts
        if ts_huge.any():
            self._quarantine(kind, "ts_out_of_range", int(ts_huge.sum()))
        dur_us = self._floats_of(_DUR, evs)
        name = self._name_ids(keys)
        dur_missing = ~np.isfinite(dur_us)
        name_missing = name < 0
        bad = name_missing | ts_missing | dur_missing
        if bad.any():
            self.skipped["missing_name"] += int(name_missing.sum())
            self.skipped["missing_ts"] += int((ts_missing & ~name_missing).sum())
            self.skipped["missing_dur"] += int((dur_missing & ~ts_missing & ~name_missing).sum())
        bad |= ts_huge  # quarantined as ts_out_of_range above
        negative = ~bad & (dur_us < 0)
        too_long = ~bad & (dur_us > MAX_DURATION_US)
        if negative.any() or too_long.any():
            self._quarantine(kind, "negative_duration", int(negative.sum()))
            self._quarantine(kind, "duration_over_7_days", int(too_long.sum()))
        keep = ~(bad | negative | too_long)
        if not keep.any():
            return
        args = list(map(_ARGS, evs))
        pid = self._ids_of(_PID, evs)
        tid = self._ids_of(_TID, evs)
        dur_ns = np.rint(np.where(keep, dur_us, 0.0) * 1000.0).astype(np.int64)
        cols: dict[str, np.ndarray] = {
            "name": name,
            "start_ns": start_ns,
            "dur_ns": dur_ns,
            "pid": pid,
            "tid": tid,
            "external_id": self._ids_of(_EXTERNAL_ID, args, -1),
        }
        if kind in m.GPU_KINDS or kind == m.RUNTIME:
            cols["correlation"] = self._ids_of(_CORRELATION, args, -1)
        if kind in m.GPU_KINDS:
            device = self._ids_of(_DEVICE, args)
            stream = self._ids_of(_STREAM, args)
            cols["device"] = np.where(device == MISSING_ID, pid, device)
            cols["stream"] = np.where(stream == MISSING_ID, tid, stream)
        table = self.tables[kind]
        if kind in (m.KERNEL, m.CPU_OP, m.USER_ANNOTATION):
            self._comm(table, args, keep)
        if kind == m.CPU_OP:
            self._input_dims(table.input_dims, list(map(_INPUT_DIMS, args)), keep, table.rows)
            # Input type and Concrete Inputs only where the analysis reads them
            typed, scalars = self._arg_names()
            for flags, getter, into in (
                (typed, _INPUT_TYPE, table.input_types),
                (scalars, _CONCRETE_INPUTS, table.concrete_inputs),
                (typed, _FLOPS, table.flops),
            ):
                wanted = np.flatnonzero(flags[name] & keep)
                if wanted.size:
                    texts: list[Any] = [_NO_TEXT] * len(args)
                    for i in wanted.tolist():
                        texts[i] = getter(args[i])
                    self._input_dims(into, texts, keep, table.rows)
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
        n = int(keep.sum())
        for key in ("correlation", "device", "stream"):
            cols.setdefault(key, np.full(n, -1, dtype=np.int64))
        table.add(cols)
        self.kind_counts[kind] += n

    def _arg_names(self) -> tuple[np.ndarray, np.ndarray]:
        """Bool per name id (one extra slot, False, for a missing name, -1): the op's
        ``Input type`` is kept (:func:`~.op_names.has_formula`), its ``Concrete Inputs``
        are kept (:func:`~.op_names.needs_scalars`); extended as names are interned."""
        flags = self._arg_flags
        if len(flags) < len(self.names):
            for name in list(self.names)[len(flags) :]:
                text = name if isinstance(name, str) else ""
                flags.append((op_names.has_formula(text), op_names.needs_scalars(text)))
            table = np.array([*flags, (False, False)], dtype=np.bool_).reshape(-1, 2)
            self._arg_flag_arrays = (table[:, 0].copy(), table[:, 1].copy())
        return self._arg_flag_arrays

    def _comm(self, table: _Columns, args: list[Any], keep: np.ndarray) -> None:
        # one pass, one tuple per event; list.count compares in C
        if list(map(_COMM_KEYS, args)).count(_NO_COMM) == len(args):  # most pieces
            return
        has = _present(list(map(_COLLECTIVE_NAME, args))) | _present(
            list(map(_IN_MSG_NELEMS, args))
        )
        has &= keep
        if not has.any():
            return
        kept_rows = np.cumsum(keep) - 1 + table.rows
        for i in np.flatnonzero(has).tolist():
            a = args[i]
            table.comm[int(kept_rows[i])] = m.CommArgs(
                collective_name=_opt_str(a.collective_name),
                in_msg_nelems=_opt_int(a.in_msg_nelems),
                out_msg_nelems=_opt_int(a.out_msg_nelems),
                in_msg_size_bytes=_opt_int(a.in_msg_size),
                dtype=_opt_str(a.dtype),
                group_size=_opt_int(a.group_size),
                process_group_name=_opt_str(a.pg_name),
                process_group_ranks=None if a.pg_ranks is None else str(a.pg_ranks),
                seq=_opt_int(a.seq),
            )

    def _input_dims(self, into: RowJson, dims: list[Any], keep: np.ndarray, rows: int) -> None:
        """``Input Dims`` (or ``Input type``) of the kept rows into ``into`` (row numbers
        after the table's first ``rows``): literal texts (``msgspec.Raw``, from the
        typed decoders) joined into one blob (:class:`RowJson`), objects (from a loose
        decode) as they are; absent (empty text, ``null``, ``None``) is left out."""
        n = len(dims)
        kept_rows = np.cumsum(keep) - 1 + rows
        try:  # all texts (the typed decoders), the common case: no type test per value
            joined: bytes | None = b"".join(dims)
        except TypeError:  # objects from a loose decode (a list, None) among them
            joined = None
        if joined is not None:
            is_raw = np.ones(n, dtype=np.bool_)
        else:
            is_raw = np.fromiter(map(isinstance, dims, repeat(msgspec.Raw)), np.bool_, count=n)
        raw_at = np.arange(n) if is_raw.all() else np.flatnonzero(is_raw)
        if len(raw_at):
            raws = dims if len(raw_at) == n else list(map(dims.__getitem__, raw_at.tolist()))
            lengths = np.fromiter(map(len, raws), np.int64, count=len(raws))
            has = (lengths > 0) & keep[raw_at]
            if has.any():
                blob = joined if joined is not None else b"".join(raws)
                ends = np.cumsum(lengths)
                starts = ends - lengths
                four = np.flatnonzero(has & (lengths == 4))
                if len(four):  # a literal null is absent, as None was
                    text = np.frombuffer(blob, dtype=np.uint8)
                    at = starts[four][:, None] + np.arange(4)
                    has[four[(text[at] == _NULL).all(axis=1)]] = False
                into.add_texts(kept_rows[raw_at[has]], starts[has], ends[has], blob)
        if len(raw_at) < n:
            objects = np.flatnonzero(~is_raw & keep & _present(dims))
            for i in objects.tolist():
                into.add_object(int(kept_rows[i]), dims[i])

    def _instants(
        self, evs: list[Any], ts: tuple[np.ndarray, np.ndarray, np.ndarray], keys: np.ndarray
    ) -> None:
        """Instant events (``keys``: their key numbers): ``[memory]`` ones → rows of the
        memory table, the others only counted."""
        is_mem = self._key_is_memory[keys]
        others = len(evs) - int(is_mem.sum())
        if others:
            self.kind_counts["instant"] += others
        if not is_mem.any():
            return
        at = np.flatnonzero(is_mem)
        mem = _take(evs, at) if others else evs
        ts_ns, missing, huge = _take_ts(ts, at) if others else ts
        if huge.any():
            self._quarantine("memory", "ts_out_of_range", int(huge.sum()))
        if missing.any():
            self.skipped["missing_ts"] += int(missing.sum())
        keep = ~missing & ~huge
        args = list(map(_ARGS, mem))
        cols = {
            "ts_ns": ts_ns,
            "bytes": self._ids_of(_BYTES, args, 0),
            "total_allocated_bytes": self._ids_of(_TOTAL_ALLOCATED, args, -1),
            "total_reserved_bytes": self._ids_of(_TOTAL_RESERVED, args, -1),
            "device_type": self._ids_of(_DEVICE_TYPE, args, -1),
            "device_id": self._ids_of(_DEVICE_ID, args, -1),
            "addr": self._ids_of(_ADDR, args, -1),
            "pid": self._ids_of(_PID, mem),
            "tid": self._ids_of(_TID, mem),
        }
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
        self.memory.add(cols)
        self.kind_counts["memory"] += int(keep.sum())

    def _flows(
        self, evs: list[Any], ts: tuple[np.ndarray, np.ndarray, np.ndarray], pair: np.ndarray
    ) -> None:
        """Flow events (``pair``: their (phase, category) numbers, which give the phase
        and whether the flow is a launch without reading either field again)."""
        ts_ns, missing, huge = ts
        if huge.any():
            self._quarantine("flow", "ts_out_of_range", int(huge.sum()))
        ids = self._ids_of(_ID, evs)
        keep = ~missing & ~huge & (ids != MISSING_ID)
        if (~keep & ~huge).any():
            self.skipped["flow_missing_id_or_ts"] += int((~keep & ~huge).sum())
        launch_of = self._launch_cache
        phase_of, launch_of_pair = [], []
        for ph, cat in self._pairs:  # in number order
            phase_of.append(_FLOW_PHASE.get(ph, 2))  # type: ignore[call-overload]
            if cat not in launch_of:
                launch_of[cat] = str(cat).lower() in LAUNCH_FLOW_CATEGORIES
            launch_of_pair.append(launch_of[cat])
        cols = {
            "id": ids,
            "ts_ns": ts_ns,
            "pid": self._ids_of(_PID, evs),
            "tid": self._ids_of(_TID, evs),
            "phase": np.array(phase_of, dtype=np.int8)[pair],
            "launch": np.array(launch_of_pair, dtype=np.bool_)[pair],
        }
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
        self.flows.add(cols)
        self.kind_counts["flow"] += int(keep.sum())

    # -- merging a piece built elsewhere ----------------------------------------------
    def merge(self, piece: _Builder) -> None:
        """Add a piece built by :func:`build_piece` (the pieces before it already
        added): names get global ids in first-seen order (one ``np.take`` per name
        column), row-keyed comm/shape args are shifted by the rows already held, counts
        are added. The result equals :meth:`add_events` on the same events."""
        names = self.names
        remap = np.empty(len(piece.names) + 1, dtype=np.int64)
        remap[-1] = -1  # a missing name (-1) stays missing
        for name, local in piece.names.items():
            remap[local] = names.setdefault(name, len(names))
        for kind, cols in piece.tables.items():
            table = self.tables[kind]
            if not cols.rows:
                continue
            base = table.rows
            for key, chunks in cols.chunks.items():
                if key == "name":
                    chunks = [np.take(remap, c) for c in chunks]
                table.chunks[key].extend(chunks)
            table.comm.update(zip(map(base.__add__, cols.comm), cols.comm.values(), strict=True))
            table.input_dims.extend(cols.input_dims, base)
            table.input_types.extend(cols.input_types, base)
            table.concrete_inputs.extend(cols.concrete_inputs, base)
            table.flops.extend(cols.flops, base)
            table.rows += cols.rows
        for own, other in ((self.memory, piece.memory), (self.flows, piece.flows)):
            for key, chunks in other.chunks.items():
                own.chunks[key].extend(chunks)
            own.rows += other.rows
        self.event_count += piece.event_count
        self.string_id_count += piece.string_id_count
        self.category_counts.update(piece.category_counts)
        self.kind_counts.update(piece.kind_counts)
        self.skipped.update(piece.skipped)
        self.quarantined.update(piece.quarantined)
        for kind, reasons in piece.quarantined_by_kind.items():
            self.quarantined_by_kind[kind].update(reasons)
        self.process_names.update(piece.process_names)
        self.thread_names.update(piece.thread_names)

    # -- result -------------------------------------------------------------------------
    def tables_out(self) -> dict[str, m.EventTable]:
        return {kind: _event_table(cols) for kind, cols in self.tables.items()}

    def memory_out(self) -> m.MemoryTable:
        c = self.memory
        ts = c.concat("ts_ns", np.int64)
        order = np.argsort(ts, kind="stable")
        return m.MemoryTable(
            **{
                key: c.concat(key, np.int64)[order]
                for key in (
                    "ts_ns",
                    "bytes",
                    "total_allocated_bytes",
                    "total_reserved_bytes",
                    "device_type",
                    "device_id",
                    "addr",
                    "pid",
                    "tid",
                )
            }
        )

    def flows_out(self) -> m.FlowTable:
        c = self.flows
        return m.FlowTable(
            id=c.concat("id", np.int64),
            ts_ns=c.concat("ts_ns", np.int64),
            pid=c.concat("pid", np.int64),
            tid=c.concat("tid", np.int64),
            phase=c.concat("phase", np.int8),
            launch=c.concat("launch", np.bool_),
        )


def _event_table(cols: _Columns) -> m.EventTable:
    """Concatenate one kind's chunks and sort the rows by start time (stable)."""
    start = cols.concat("start_ns", np.int64)
    order = np.argsort(start, kind="stable")
    in_order = bool(np.all(order[1:] > order[:-1]))

    def col(key: str, dtype: Any) -> np.ndarray:
        arr = cols.concat(key, dtype)
        return arr if in_order else arr[order]

    comm, dims, types = cols.comm, cols.input_dims, cols.input_types
    concrete, flops = cols.concrete_inputs, cols.flops
    if (comm or dims or types or concrete or flops) and not in_order:
        new_row = np.empty_like(order)
        new_row[order] = np.arange(len(order))
        comm = dict(zip(new_row[list(comm)].tolist(), comm.values(), strict=True))
        dims = dims.renumbered(new_row)
        types = types.renumbered(new_row)
        concrete = concrete.renumbered(new_row)
        flops = flops.renumbered(new_row)
    return m.EventTable(
        name=col("name", np.int32),
        start_ns=start if in_order else start[order],
        dur_ns=col("dur_ns", np.int64),
        pid=col("pid", np.int64),
        tid=col("tid", np.int64),
        device=col("device", np.int64),
        stream=col("stream", np.int64),
        correlation=col("correlation", np.int64),
        external_id=col("external_id", np.int64),
        comm=comm,
        input_dims=dims,
        input_types=types,
        concrete_inputs=concrete,
        flops=flops,
    )


def _opt_int(v: object) -> int | None:
    """An args value as an int (``bool``, ``int``, finite ``float``, a numeric string),
    None when it is none of these or does not fit int64 (a 20-digit ``In msg nelems``
    used to overflow the int64 columns: issue 32 §8)."""
    out: int | None = None
    if isinstance(v, bool):
        out = int(v)
    elif isinstance(v, int):
        out = v
    elif isinstance(v, float) and np.isfinite(v):
        out = int(v)
    elif isinstance(v, str):
        try:
            out = int(v, 0)
        except ValueError:
            return None
    if out is None or not -m.INT64_MAX <= out <= m.INT64_MAX:
        return None
    return out


def _opt_str(v: object) -> str | None:
    return None if v is None else str(v)


def _decode_typed(data: bytes | bytearray | memoryview, builder: _Builder) -> list[Any]:
    """A JSON array of events → typed event structs (in exact mode a :class:`_Piece`
    with its timestamps converted). Raises ``msgspec.DecodeError`` (bad JSON) or
    ``msgspec.ValidationError`` (a field of an unexpected type: decode loosely).

    First by phase (:data:`~tb_kineto_insights.trace.events.PhaseEvent`: only the
    fields read for each phase); a piece that does not decode so (an event without a
    ``ph`` or with one that is not a Chrome trace phase, a field of an odd type, bad
    JSON) is decoded exactly as before, with one struct for every event
    (:class:`~tb_kineto_insights.trace.events.FastEvent` /
    :class:`~tb_kineto_insights.trace.events.RawTsEvent`), whose errors are the ones
    raised and repaired."""
    try:
        if not builder.exact:
            return _phase_event_decoder.decode_first(data)
        piece = _Piece(_raw_ts_phase_event_decoder.decode_first(data))
        piece.ts = literals_ns(list(map(_TS, piece)))
        return piece
    except msgspec.DecodeError:  # a ValidationError too: the decoders below decide
        pass
    if builder.exact:  # ts as literal text, converted vectorised
        try:
            piece = _Piece(_raw_ts_event_decoder.decode(data))
            piece.ts = literals_ns(list(map(_TS, piece)))
            return piece
        except msgspec.ValidationError:
            pass  # a field of an unexpected type: as below, event by event
    return (_exact_event_decoder if builder.exact else _event_decoder).decode(data)


def build_piece(data: bytes | bytearray, exact: bool) -> _Builder | None:
    """One piece (``[`` events ``]``) → a fresh :class:`_Builder` holding its columns,
    names (local ids) and counts, for :meth:`_Builder.merge`; ``None`` as
    :func:`build_pieces`."""
    return build_pieces(b"", [bytes(data[1:-1]) + b",{"], exact)


def build_pieces(tail: bytes, blocks: list[bytes], exact: bool) -> _Builder | None:
    """Pending bytes ``tail`` and the ``blocks`` after them, cut into pieces exactly as
    the serial reader cuts them (each block at its last event boundary, a block without
    one joins the next), each piece decoded and added in order to one fresh
    :class:`_Builder` (run in a worker process; the piece order inside a builder
    decides the order of first-seen names, so the cuts must be the serial ones). The
    bytes after the last boundary of the last block are left out: the parent keeps
    them as its next pending bytes.

    Returns ``None`` when the pieces must take the serial path instead: one does not
    decode as typed events (bad JSON, cut short, or a field of an unexpected type), or
    an id is a non-numeric string (its interned number depends on earlier pieces), or
    the last block has no event boundary.
    """
    builder = _Builder(exact)
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
            events = _decode_typed(b"".join((b"[", pending, view[:end_of_piece], b"]")), builder)
            builder.add_events(events)
            pending = bytearray(view[next_start:])
            if builder.strings:
                return None
    except Exception:  # noqa: BLE001 (any trouble: the parent's serial path decides)
        return None
    if cut is None:
        return None
    builder._clear_keys()  # caches: not needed by merge, smaller to send back
    builder._launch_cache.clear()
    return builder


#: What a decode worker runs on its pieces (:func:`build_pieces`, sent to the pool by
#: reference; a test may plant another function here).
decode_in_worker = build_pieces


class _Reader:
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
        self.path = path
        self.workers = workers
        self.source = source or BlockReader(path, max_json_bytes, block_bytes)
        self.on_block = on_block
        self.pool = pool  # a shared pool (the caller's, never shut down here)
        self.repairs: Counter[str] = Counter()
        self.invalid_events = 0  # events whose fields have unusable types
        self.non_objects = 0  # of those, entries that are no JSON object at all
        self.builder: _Builder | None = None
        self.root_fields: dict[str, Any] = {}
        self.root_kind = "object"
        self.damage: list[Damage] = []

    # -- decoding: typed, then loosely, then repaired, then salvaged ------------------
    def _decode_list(self, data: bytes | bytearray | memoryview) -> list[Any]:
        """A JSON array of events → event structs; a field of an unexpected type is
        decoded loosely. Raises ``msgspec.DecodeError`` (bad JSON) only."""
        assert self.builder is not None  # set before any event is decoded
        try:
            try:
                return _decode_typed(data, self.builder)
            except msgspec.ValidationError:
                untyped = _exact_any_decoder if self.builder.exact else _any_decoder
                return self._convert_events(untyped.decode(data))
        except RecursionError:
            # an event nested deeper than msgspec decodes (~1,000 levels in ``args``):
            # bad JSON to the salvage, which then finds the event and loses it alone
            # (it used to reject the whole trace: issue 32 §7)
            raise msgspec.DecodeError(NESTED_TOO_DEEP) from None

    def _decode_root(self, data: bytes) -> Root:
        """The top-level object (events included). Raises ``msgspec.DecodeError`` only.

        As a piece (:func:`_decode_typed`): by phase first, in exact mode each ``ts``
        converted from its literal here, so that a literal that is no number (a string,
        ``true``) sends the decode to the one-struct types (``Decimal``), whose
        validation error in turn sends it to the loose decode, which drops that event
        alone (``invalid_field_type``)."""
        exact = self.builder is not None and self.builder.exact
        decoder = _exact_root_decoder if exact else _root_decoder
        try:
            try:
                root = decoder.decode_first(data)
                if exact and root.traceEvents:
                    piece = _Piece(root.traceEvents)
                    piece.ts = literals_ns(list(map(_TS, piece)))
                    root.traceEvents = piece
                return root
            except msgspec.DecodeError:  # a ValidationError too: the one-struct decode
                return decoder.then.decode(data)
        except msgspec.ValidationError:
            raw = (_exact_any_decoder if exact else _any_decoder).decode(data)
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

    def _repaired(self, decode: Any, data: bytes | bytearray, final: bool) -> tuple[int, Any]:
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

    def _events(self, buf: bytes | bytearray, origin: int, final: bool) -> Salvaged:
        """Events of ``buf`` = ``[`` + events + ``]`` (``buf[1]`` at file offset
        ``origin``). Returns ``leftover=1`` when a piece that is not the last is cut
        short (more input may complete it); damage is salvaged and recorded."""
        status, events = self._repaired(self._decode_list, buf, final)
        if status == OK:
            return Salvaged(events=events)
        if status == TRUNCATED:
            # Cut short: its last event is (a cut at a "},{" inside a string or inside
            # an event's args), or a bracket opened earlier never closes (a stray
            # "["). Up to MAX_PENDING_BYTES it is handed back for more input, as a big
            # event needs; past that, the piece without its last segment is decoded,
            # else salvaged here: handing back every piece made the pending bytes grow
            # to the end of the file (issue 32 §7: a stray "[" cost 10-90x a clean
            # read, and past MAX_EVENT_BYTES the whole file was lost).
            if len(buf) <= MAX_PENDING_BYTES:
                return Salvaged(leftover=1)
            cut = last_event_boundary(buf)
            if cut is None:
                return Salvaged(leftover=1)
            head = bytearray(memoryview(buf)[: cut[0]])
            head.append(0x5D)  # "]"
            status, events = self._repaired(self._decode_list, head, final)
            if status == OK:
                return Salvaged(events=events, leftover=cut[1])
        # (the salvage works on a bytearray of its own: it writes to it while it decodes)
        out = salvage_events(bytearray(buf), origin, final, self._decode_list, self._repair_one)
        self.damage.extend(out.damage)
        return out

    def _not_a_trace(self) -> str:
        """Why this file is no trace (:func:`not_a_trace`)."""
        return not_a_trace(self.path, self.source.compressed)

    # -- the pass over the file -------------------------------------------------------
    def read(self) -> m.Trace:
        blocks = iter(self.source)
        if self.on_block is not None:
            blocks = _tapped(blocks, self.on_block)
        buf = bytearray()
        consumed = 0  # file offset of buf[0]
        searched = 0  # bytes of buf already searched for the traceEvents key
        # 1. find where the events start (leading BOM/whitespace is dropped, not kept)
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
        consumed += events_start
        # 2. whole pieces of events; exact mode is decided on the first one
        tail = bytearray(buf[events_start:])
        del buf
        retry_at = 0  # after a piece cut short: wait until the pending bytes grow
        pool = None
        executor = None  # a pool started here: shut down at the end even if it broke
        if self.pool is not None and self.workers is not None and self.workers >= 2:
            workers, pool = self.workers, self.pool
        else:
            workers = parallel.read_workers(self._estimated_json_bytes(), self.workers)
            if workers:
                pool = executor = parallel.start_pool(workers)
        in_flight = workers * parallel.IN_FLIGHT_PER_WORKER
        held = workers * parallel.HELD_PER_WORKER
        workers_up = False  # a worker has decoded a piece: the parent stops decoding
        here: set[Future[Any]] = set()  # pieces decoded by the parent (while workers start)
        # pieces sent to workers, in file order: (future, state before it, its blocks)
        pending: deque[tuple[Future[Any], tuple[bytearray, int, int], list[bytes]]] = deque()
        replay: deque[bytes] = deque()  # blocks to read again serially (a piece failed)
        group: list[bytes] = []  # blocks of the next piece for a worker (tail untouched)
        group_state = (tail, consumed, retry_at)
        try:
            while True:
                if replay:
                    block, serial = replay.popleft(), True
                else:
                    nxt = next(blocks, None)
                    if nxt is None:  # the last group here, merge what is held, the rest serially
                        if group and (cut := last_event_boundary(group[-1])) is not None:
                            # the last group's pieces: decoded here while the workers end
                            assert self.builder is not None
                            last = group[-1]
                            pending.append(
                                (
                                    _decoded_here(bytes(tail), group, self.builder.exact),
                                    group_state,
                                    group,
                                )
                            )
                            consumed += len(tail) + sum(map(len, group)) - len(last) + cut[1]
                            tail = bytearray(memoryview(last)[cut[1] :])
                            retry_at = 0
                            group = []
                        if pending:
                            back = self._collect(pending)
                            if back is None:
                                continue
                            tail, consumed, retry_at = back
                            replay.extend(_abandon(pending))
                        replay.extend(group)
                        group = []
                        if replay:
                            continue
                        break
                    # after a piece cut short (retry_at), the serial path waits for more
                    block, serial = nxt, pool is None or retry_at > 0
                if self.builder is None:
                    self.builder = _Builder(bool(EXACT_TS.search(bytes(tail) + block[:65536])))
                if not serial:  # group blocks into one piece of about PIECE_BYTES
                    assert pool is not None
                    if not group:
                        group_state = (tail, consumed, retry_at)
                    group.append(block)
                    grouped = sum(map(len, group))
                    if grouped < parallel.PIECE_BYTES:
                        continue
                    cut = last_event_boundary(block)
                    if cut is None and grouped < MAX_EVENT_BYTES:
                        continue
                    future = None
                    if cut is not None:
                        end_of_piece, next_start = cut
                        view = memoryview(block)
                        if not workers_up:  # has a worker decoded a piece yet?
                            workers_up = any(f.done() for f, _, _ in pending if f not in here)
                        if not workers_up and _workers_busy(pending) >= in_flight:
                            # the workers are still starting: decode this piece here
                            future = _decoded_here(bytes(tail), group, self.builder.exact)
                            here.add(future)
                        else:
                            try:
                                future = pool.submit(
                                    decode_in_worker, bytes(tail), group, self.builder.exact
                                )
                            except RuntimeError:  # the pool broke: serial from here on
                                pool = None
                    if future is None:  # merge what is in flight; this group serially
                        while pending:
                            back = self._collect(pending)
                            if back is not None:
                                tail, consumed, retry_at = back
                                replay.extend(_abandon(pending))
                        replay.extend(group)
                        group = []
                        continue
                    pending.append((future, group_state, group))
                    consumed += len(tail) + grouped - len(block) + next_start
                    tail = bytearray(view[next_start:])
                    retry_at = 0
                    group = []
                    # merge what is done, in file order; wait for the oldest when too
                    # many pieces are held (backpressure: bounded memory): more while
                    # the parent decodes, as before once the workers do
                    while pending and (
                        pending[0][0].done() or len(pending) >= (in_flight if workers_up else held)
                    ):
                        workers_up = workers_up or pending[0][0] not in here
                        back = self._collect(pending)
                        if back is not None:
                            tail, consumed, retry_at = back
                            replay.extend(_abandon(pending))
                    continue
                if len(tail) + len(block) < retry_at:
                    consumed = self._grow(tail, block, consumed)
                    continue
                cut = last_event_boundary(block)
                if cut is None:  # no event ends in this block: keep collecting
                    consumed = self._grow(tail, block, consumed)
                    continue
                end_of_piece, next_start = cut
                view = memoryview(block)
                piece = b"".join((b"[", tail, view[:end_of_piece], b"]"))  # one copy
                out = self._events(piece, consumed, final=False)
                self.builder.add_events(out.events)
                if out.leftover is None:
                    consumed += len(tail) + next_start
                    tail = bytearray(view[next_start:])
                    retry_at = 0
                else:  # the last event is cut short (a cut inside a string): wait for more
                    keep_from = out.leftover - 1  # index in tail + block
                    consumed += keep_from
                    rest = bytearray(piece[out.leftover : len(piece) - 1])
                    del piece
                    rest += view[end_of_piece:]
                    tail = rest
                    retry_at = RETRY_GROWTH * len(tail)
                    if len(tail) > MAX_EVENT_BYTES:
                        self._grow(tail, b"", consumed)  # raises
                del out
        finally:
            for future, _, _ in pending:
                future.cancel()
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
        if self.builder is None:
            self.builder = _Builder(bool(EXACT_TS.search(bytes(tail[:65536]))))
        # 3. the rest: last events and the keys after the array
        self._read_tail(bytes(tail), consumed)
        return self._finish()

    def _estimated_json_bytes(self) -> int:
        """Uncompressed size guess from the stored size (for the parallel decision)."""
        try:
            size = file_size(self.path)
        except Exception:  # noqa: BLE001 (a guess only: read serially)
            return 0
        return size * (parallel.GZIP_RATIO_ESTIMATE if self.source.compressed else 1)

    def _collect(
        self, pending: deque[tuple[Future[Any], tuple[bytearray, int, int], list[bytes]]]
    ) -> tuple[bytearray, int, int] | None:
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
        status, root = self._repaired(self._decode_root, data, final=True)
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
            doc = _any_decoder.decode(data)
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
            status, root = self._repaired(self._decode_root, b'{"traceEvents":[' + rest, True)
            if status == OK:
                self.builder.add_events(root.traceEvents)
                root.traceEvents = []
                self._keep_root_fields(root)
                return
        out = self._events(b"[" + rest + b"]", base, final=True)
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
            root = self._decode_root(b'{"traceEvents":[]' + trailer)
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

    def _finish(self) -> m.Trace:
        b = self.builder
        assert b is not None
        tables, memory, flows, far, lost_corr = timing.quarantine_far_events(
            b.tables_out(), b.memory_out(), b.flows_out()
        )
        for kind, n in far.items():
            b._quarantine(kind, timing.FAR_REASON, n)
            b.kind_counts[kind] -= n
        clipped = timing.clip_stream_overlaps(tables)
        damage = sorted(self.damage, key=lambda d: d.offset)
        listed = damage[:MAX_DAMAGE_LISTED]
        if self.source.stream_damage is not None:  # always listed: it ends the file
            at, problem = self.source.stream_damage
            ended = Damage(at, at, 0, 0, problem)
            damage.append(ended)
            listed = [*listed[: MAX_DAMAGE_LISTED - 1], ended]
        usable = sum(len(t) for t in tables.values()) + len(memory) + len(flows)
        if damage and not usable:
            first = min(damage, key=lambda d: d.offset)
            raise TraceFormatError(self.path, f"nothing usable: {first.problem}", first.offset)
        objects = b.event_count + self.invalid_events - self.non_objects
        if self.non_objects and not objects:  # e.g. [1, 2, 3]: JSON, but not a trace
            n = self.non_objects
            raise TraceFormatError(
                self.path,
                f"holds no trace event: {n:,} {'entry' if n == 1 else 'entries'}, "
                f"{'not an object' if n == 1 else 'none an object'}",
            )
        names = [str(n) for n in b.names]
        long_names = sum(len(n) > MAX_NAME_CHARS for n in names)
        if long_names:  # keep summaries and tables small whatever a name holds
            names = [n if len(n) <= MAX_NAME_CHARS else n[:MAX_NAME_CHARS] + "…" for n in names]
            self.repairs["long_name_truncated"] += long_names
        health = m.TraceHealth(
            path=self.path,
            compressed=self.source.compressed,
            json_bytes=self.source.json_bytes,
            root=self.root_kind,
            event_count=b.event_count + self.invalid_events,
            category_counts={
                ("(none)" if k is None else str(k)): v for k, v in b.category_counts.items()
            },
            kind_counts=dict(b.kind_counts),
            skipped={
                k: v
                for k, v in (b.skipped + Counter(invalid_field_type=self.invalid_events)).items()
                if v
            },
            quarantined={k: v for k, v in b.quarantined.items() if v},
            quarantined_by_kind={
                kind: dict(reasons) for kind, reasons in b.quarantined_by_kind.items() if reasons
            },
            stream_overlap_clipped=clipped,
            damage=[d.to_dict() for d in listed],
            damaged_regions=len(damage),
            lost_bytes=sum(d.bytes for d in damage),
            lost_events=sum(d.events for d in damage),
            repairs=dict(self.repairs),
            exact_ns_timestamps=b.exact,
            string_ids=b.string_id_count,
        )
        try:
            health.file_bytes = file_size(self.path)
        except Exception:  # noqa: BLE001 (size is informative only)
            health.file_bytes = 0
        fields = self.root_fields
        for key in ("deviceProperties", "distributedInfo", "tb_kineto_insights"):
            if key in fields and len(msgspec.json.encode(fields[key])) > ROOT_OBJECT_MAX_BYTES:
                # copied into every summary as is: a huge one is left out, and said so
                del fields[key]
                health.skipped[f"oversized_{key}"] = 1
        props = fields.get("deviceProperties")
        health.device_properties = (
            [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
        )
        dist = fields.get("distributedInfo")
        health.distributed_info = dist if isinstance(dist, dict) else None
        run_meta = fields.get("tb_kineto_insights")
        health.run_metadata = run_meta if isinstance(run_meta, dict) else None
        health.metadata = {
            k: fields[k]
            for k in METADATA_KEYS
            if k in fields and isinstance(fields[k], (str, int, float, bool))
        }
        for level in ("INFO", "WARNING", "ERROR"):
            for line in fields.get(level, []):
                health.kineto_log.append(line if line.startswith(level) else f"{level}: {line}")
                health.kineto_record_counts.update(record_counts(line))
        python = tables[m.PYTHON]
        health.flags = {
            "has_kernels": len(tables[m.KERNEL]) > 0,
            "has_steps": _has_profiler_steps(names, tables),
            "has_memory": len(memory) > 0,
            "has_memory_totals": bool(len(memory) and (memory.total_allocated_bytes >= 0).any()),
            "has_memory_addresses": bool(len(memory) and (memory.addr >= 0).any()),
            "has_stacks": len(python) > 0 or bool(fields.get("with_stack")),
            "has_shapes": bool(fields.get("record_shapes")),
            "has_correlation": bool(
                len(tables[m.KERNEL]) and (tables[m.KERNEL].correlation >= 0).any()
            ),
            "has_device_properties": bool(health.device_properties),
            "has_distributed_info": health.distributed_info is not None,
        }
        return m.Trace(
            names=names,
            tables=tables,
            memory=memory,
            flows=flows,
            health=health,
            process_names=b.process_names,
            thread_names=b.thread_names,
            string_ids=list(b.strings),
            quarantined_correlations=lost_corr,
        )


STEP_PREFIX = "ProfilerStep#"


def _has_profiler_steps(names: list[str], tables: dict[str, m.EventTable]) -> bool:
    step_ids = {i for i, n in enumerate(names) if n.startswith(STEP_PREFIX)}
    if not step_ids:
        return False
    for kind in (m.USER_ANNOTATION, m.CPU_OP):
        if np.isin(tables[kind].name, list(step_ids)).any():
            return True
    return False


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


#: Digits read of one record count (larger numbers are no count Kineto writes).
_MAX_COUNT_DIGITS = 18


def record_counts(line: str) -> dict[str, int]:
    """The counts of a Kineto log line ``... Record counts: name = 12, other = 3``:
    ``{"name": 12, "other": 3}`` (names stripped; an item without ``=`` and digits, or
    with more than 18 digits, is left out; text after the first newline is not read).

    Parsed by hand in one pass (``str.find``/``split``), not with a regex: the former
    pattern ``\\s*([^=,]+?)\\s*=`` backtracked polynomially on a line of spaces
    without ``=`` (issue 32 §3: 1.8 KB of trace text cost minutes of CPU)."""
    at = line.find(_RECORD_COUNTS)
    if at < 0:
        return {}
    rest = line[at + len(_RECORD_COUNTS) :].split("\n", 1)[0]
    counts: dict[str, int] = {}
    for item in rest.split(","):
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or not key:
            continue
        value = value.lstrip()
        digits = len(value) - len(value.lstrip("0123456789"))
        if 0 < digits <= _MAX_COUNT_DIGITS:
            counts[key] = int(value[:digits])
    return counts


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
        # a safety net for the typed-errors-only promise (10^5 fuzzed inputs reached
        # none); the exception's type stays in the message so such a bug is reported
        raise TraceFormatError(path, f"unreadable trace ({type(exc).__name__}: {exc})") from exc


__all__ = ["read_trace", "kind_of_category", "CATEGORY_KIND", "STEP_PREFIX"]
