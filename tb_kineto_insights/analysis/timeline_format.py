"""The stored form of a step's timeline (the cache entry's ``TimelineStore``), and how it
is read back into the served :class:`~tb_kineto_insights.schema.timeline.TimelineStep`.

A step is a :class:`PackedStep` (msgpack, then zlib at :data:`ZLIB_LEVEL`) whose lanes are
:class:`PackedLane`: the columns of :data:`COLUMNS` as byte-planed little-endian integers
in the fewest bytes that hold them (:func:`narrow` / :func:`widen`), gap-coded starts in
GPU and idle lanes, host lanes to :data:`HOST_QUANTUM_NS`; the names (and input shapes)
every step uses are stored once per store. Event classes index :data:`CLASSES`: the GPU
classes, the host classes (the traced host-activity causes, :mod:`.host_activity`), the
idle causes, the Python frames. A change of this layout needs a bump of
``ANALYSIS_VERSION``.
"""

from __future__ import annotations

import zlib

import msgspec
import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis.critical_path import PIECE_CLASSES as PATH_CLASSES
from tb_kineto_insights.analysis.host_activity import CAUSE_NAMES, TRACED_NAMES
from tb_kineto_insights.schema.timeline import TimelineLane, TimelineStep, TimelineStore

I64 = npt.NDArray[np.int64]

#: Classes of GPU events.
GPU_CLASSES: tuple[str, ...] = ("compute", "communication", "memcpy", "memset")


#: Classes of host ranges: the causes of :mod:`.idle` that a traced range gives.
HOST_CLASSES: tuple[str, ...] = TRACED_NAMES


#: Every class, in the order of ``TimelineStep.classes``: GPU classes, host classes,
#: the idle causes as ``idle:<cause>``, the Python frames' class (``python_frame``),
#: then the critical path's classes as ``path:<class>``
#: (:data:`~.critical_path.PIECE_CLASSES`).
CLASSES: tuple[str, ...] = (
    GPU_CLASSES
    + HOST_CLASSES
    + tuple(f"idle:{c}" for c in CAUSE_NAMES)
    + ("python_frame",)
    + tuple(f"path:{c}" for c in PATH_CLASSES)
)


IDLE_BASE = len(GPU_CLASSES) + len(HOST_CLASSES)


PYTHON_CLASS = CLASSES.index("python_frame")


PATH_BASE = PYTHON_CLASS + 1


#: The columns of a packed lane, in order. ``offset_ns``: in ``host_thread`` and
#: ``dataloader_thread`` lanes each start minus the previous one (nested ranges: the gap
#: to the previous end would be negative and wide); in ``gpu_stream``, ``idle`` and
#: ``critical_path`` lanes
#: each start minus the running maximum end of the earlier events (the gap: the stream's
#: or the device's idle or busy time, narrower than a start-to-start delta).
#: ``has_correlation``: 1 where the correlation id is positive, or all 0 where the
#: positive ids rise strictly (then a positive ``correlation`` value marks them);
#: ``correlation``: where positive, the id minus the previous positive one, elsewhere
#: the id as is (-1 or 0). ``name``: an index into the store's ``names``; ``count``:
#: the events an item stands for, minus 1; ``event_class`` of an ``idle`` lane: 0, the
#: class follows from the cause that is its name.
COLUMNS: tuple[str, ...] = (
    "offset_ns",
    "dur_ns",
    "name",
    "event_class",
    "count",
    "has_correlation",
    "correlation",
    "depth",
    "shape",
)


#: Time unit of host, data-loading and Python-frame lanes in the store (ns): starts
#: rounded down to it, ends up (a range keeps holding what it held, so nesting and the
#: op around a runtime call stay). Their ns digits are the largest part of a store
#: (``benchmarks/RESULTS.md``, timeline store); GPU streams and the idle band stay exact
#: (kernel counts and idle totals are checked against the summary to the ns).
HOST_QUANTUM_NS = 100


#: Lane kinds whose ``offset_ns`` column is a gap to the previous end (else a delta of
#: starts).
GAP_CODED: frozenset[str] = frozenset({"gpu_stream", "idle", "critical_path"})


class PackedLane(msgspec.Struct, frozen=True, array_like=True):
    """A lane as stored: its identity and ``columns``, the arrays of :data:`COLUMNS`
    one after the other (``n`` values each), each little-endian in the fewest bytes
    that hold it (``widths``: 1, 2, 4 or 8 per column, 0 for a column of zeros, stored as
    no bytes; :func:`narrow`) and byte-planed
    (the values' first bytes, then their second bytes, ...: the high bytes of small
    values, all 0 or all 0xFF, become long runs that zlib compresses to almost
    nothing)."""

    kind: str
    label: str
    device: int | None
    stream: int | None
    pid: int | None
    tid: int | None
    n: int
    widths: list[int]
    columns: bytes
    quantum_ns: int = 1


DTYPES = {1: "<i1", 2: "<i2", 4: "<i4", 8: "<i8"}


def narrow(column: I64) -> tuple[int, bytes]:
    """A column in the narrowest little-endian signed integer type holding every value,
    byte-planed (:class:`PackedLane`): ``(bytes per value, data)``."""
    if column.size == 0:
        return 1, b""
    lo, hi = int(column.min()), int(column.max())
    if lo == hi == 0:
        return 0, b""
    width = 8
    for w in (1, 2, 4):
        limit = 1 << (8 * w - 1)
        if -limit <= lo and hi < limit:
            width = w
            break
    data = column.astype(DTYPES[width])
    if width == 1:
        return 1, data.tobytes()
    return width, data.view(np.uint8).reshape(-1, width).T.tobytes()


def widen(data: bytes, width: int, n: int, at: int) -> I64:
    """:func:`narrow`'s inverse: ``n`` values of ``width`` bytes from byte ``at``."""
    if width == 0:
        return np.zeros(n, dtype=np.int64)
    planes = np.frombuffer(data, dtype=np.uint8, count=width * n, offset=at)
    if width == 1:
        return planes.view(np.int8).astype(np.int64)
    values = np.ascontiguousarray(planes.reshape(width, n).T).view(DTYPES[width])
    return values.reshape(n).astype(np.int64)


def previous_end(start_ns: I64, end_ns: I64) -> I64:
    """Per event, the running maximum end of the events before it (0 for the first)."""
    if start_ns.size == 0:
        return start_ns
    return np.concatenate([[0], np.maximum.accumulate(end_ns)[:-1]])


def correlation_code(corr: I64) -> tuple[I64, I64]:
    """``(has_correlation, correlation)`` columns of :data:`COLUMNS` from the ids."""
    has = corr > 0
    code = corr.copy()
    code[has] = np.diff(corr[has], prepend=0)
    if bool((code[has] > 0).all()):  # rising: code > 0 marks them (the usual case)
        return np.zeros(corr.size, dtype=np.int64), code
    return has.astype(np.int64), code


def correlation_decode(has: I64, code: I64) -> I64:
    """:func:`correlation_code`'s inverse."""
    corr = code.copy()
    sel = has.astype(np.bool_) if has.any() else code > 0
    corr[sel] = np.cumsum(code[sel])
    return corr


class PackedStep(msgspec.Struct, frozen=True, array_like=True):
    """A step as stored (msgpack, then zlib): :class:`TimelineStep`'s fields with its
    lanes packed and times in ns; the names are the store's (``TimelineStore.names``).
    Stored in cache entries: a change of this layout (or of :class:`PackedLane`'s)
    needs a bump of ``ANALYSIS_VERSION``."""

    step: int
    start_ns: int
    end_ns: int
    origin_ns: int
    kernel_count: int
    idle_ns: dict[str, int]
    block_ns: int
    lanes: list[PackedLane]
    left_out: str | None = None


#: Shift of name ids: ``-2 - c`` (the name of idle cause ``c``) .. ``-1`` (no name) →
#: ``0 .. len(CAUSE_NAMES)``, a trace name id ``k`` → ``k + NAME_SHIFT``.
NAME_SHIFT = 1 + len(CAUSE_NAMES)


def unpack_step(
    packed: PackedStep, store_names: list[str], store_shapes: list[str] | None = None
) -> TimelineStep:
    """The served :class:`~tb_kineto_insights.schema.timeline.TimelineStep` of a stored
    step (µs, exact to the ns: three decimals); its ``names`` are the store's names the
    step uses, in store order.

    Raises:
        ValueError: a lane whose columns do not fit its ``n`` and ``widths``.
    """
    decoded: list[tuple[PackedLane, list[I64]]] = []
    for lane in packed.lanes:
        if len(lane.widths) != len(COLUMNS) or any(w not in DTYPES and w != 0 for w in lane.widths):
            raise ValueError(f"timeline lane {lane.label!r}: bad column widths {lane.widths}")
        if sum(lane.widths) * lane.n != len(lane.columns):
            raise ValueError(f"timeline lane {lane.label!r}: {len(lane.columns)} column bytes")
        cols = []
        at = 0
        for width in lane.widths:
            cols.append(widen(lane.columns, width, lane.n, at))
            at += width * lane.n
        decoded.append((lane, cols))
    used_names = np.unique(
        np.concatenate([cols[2] for _, cols in decoded] + [np.zeros(0, dtype=np.int64)])
    )
    used_names = used_names[used_names >= 0]
    if used_names.size and int(used_names[-1]) >= len(store_names):
        raise ValueError(f"timeline step {packed.step}: a name index past the store's names")
    lanes = []
    shapes_all = store_shapes or []
    used_shapes = np.unique(
        np.concatenate([cols[8] for _, cols in decoded] + [np.zeros(0, dtype=np.int64)])
    )
    used_shapes = used_shapes[used_shapes > 0]
    if used_shapes.size and int(used_shapes[-1]) > len(shapes_all):
        raise ValueError(f"timeline step {packed.step}: a shape index past the store's shapes")
    for lane, cols in decoded:
        q = max(1, lane.quantum_ns)
        dur = cols[1] * q
        offset = gap_decode(cols[0], dur) if lane.kind in GAP_CODED else np.cumsum(cols[0]) * q
        name = cols[2]
        event_class = cols[3]
        if lane.kind == "idle":
            uniq, inverse = np.unique(name, return_inverse=True)
            causes = np.array([_cause_of(store_names, k) for k in uniq.tolist()], dtype=np.int64)
            event_class = IDLE_BASE + causes[inverse.reshape(-1)]
        name = np.where(name >= 0, np.searchsorted(used_names, name), -1)
        lanes.append(
            TimelineLane(
                kind=lane.kind,
                label=lane.label,
                device=lane.device,
                stream=lane.stream,
                pid=lane.pid,
                tid=lane.tid,
                name=name.tolist(),
                offset_us=_us_list(offset),
                dur_us=_us_list(dur),
                event_class=event_class.tolist(),
                count=(cols[4] + 1).tolist(),
                correlation=correlation_decode(cols[5], cols[6]).tolist(),
                depth=cols[7].tolist(),
                shape=np.where(cols[8] > 0, np.searchsorted(used_shapes, cols[8]), -1).tolist(),
            )
        )
    return TimelineStep(
        step=packed.step,
        start_us=packed.start_ns / 1000.0,
        end_us=packed.end_ns / 1000.0,
        trace_start_ns=packed.origin_ns + packed.start_ns,
        duration_us=(packed.end_ns - packed.start_ns) / 1000.0,
        kernel_count=packed.kernel_count,
        idle_us={dev: ns / 1000.0 for dev, ns in packed.idle_ns.items()},
        names=[store_names[k] for k in used_names.tolist()],
        classes=list(CLASSES),
        block_us=packed.block_ns / 1000.0,
        lanes=lanes,
        shapes=[shapes_all[k - 1] for k in used_shapes.tolist()],
        left_out=packed.left_out,
    )


def _cause_of(store_names: list[str], k: int) -> int:
    """The idle cause (index into ``CAUSE_NAMES``) whose name is store name ``k``.

    Raises:
        ValueError: the name is no cause's (a damaged store).
    """
    if 0 <= k < len(store_names) and store_names[k] in CAUSE_NAMES:
        return CAUSE_NAMES.index(store_names[k])
    raise ValueError(f"timeline idle lane: name index {k} is no idle cause")


def gap_decode(gap: I64, dur: I64) -> I64:
    """Offsets from gap coding (:data:`COLUMNS`): ``offset[k] = gap[k] +
    max(0, max(offset[j] + dur[j] for j < k))``. Sequential where an event ends before
    an earlier one (a nested or overlapping event); a plain cumulative sum otherwise."""
    n = gap.size
    if n == 0:
        return gap
    # fast path: each event ends at or after the previous ones, so the running maximum
    # end is the previous event's end: offset[k] = offset[k-1] + dur[k-1] + gap[k]
    step = gap.copy()
    step[1:] += dur[:-1]
    offset = np.cumsum(step)
    end = offset + dur
    if n < 2 or bool((end[1:] >= np.maximum.accumulate(end)[:-1]).all()):
        return offset
    out = np.empty(n, dtype=np.int64)
    running = 0
    for k, (g, d) in enumerate(zip(gap.tolist(), dur.tolist(), strict=True)):
        o = g + running
        out[k] = o
        running = max(running, o + d)
    return out


def _us_list(ns: I64) -> list[float]:
    """ns → µs, exact to the ns (three decimals)."""
    return [v / 1000.0 for v in ns.tolist()]


PACK = msgspec.msgpack.Encoder()


UNPACK = msgspec.msgpack.Decoder(PackedStep)


_NAMES = msgspec.msgpack.Decoder(list[str])


#: zlib level of the stored blobs: the byte-planed columns compress at level 6 to about
#: 6 % less than at level 1, for a small share of the analysis time
#: (``benchmarks/bench_timeline.py``, ``benchmarks/RESULTS.md``).
ZLIB_LEVEL = 6


_STORE_ENCODER = msgspec.msgpack.Encoder()


_STORE_DECODER = msgspec.msgpack.Decoder(TimelineStore)


def load_step(store: TimelineStore, position: int) -> TimelineStep:
    """The step at ``position`` (in window order) of a store, unpacked.

    Raises:
        zlib.error, msgspec.DecodeError, msgspec.ValidationError: a damaged blob.
    """
    return unpack_step(
        UNPACK.decode(zlib.decompress(store.blobs[position])),
        store_names(store),
        store_shapes(store),
    )


def store_names(store: TimelineStore) -> list[str]:
    """The names a store's steps refer to (``TimelineStore.names`` decoded).

    Raises:
        zlib.error, msgspec.DecodeError, msgspec.ValidationError: a damaged table.
    """
    return _NAMES.decode(zlib.decompress(store.names)) if store.names else []


def store_shapes(store: TimelineStore) -> list[str]:
    """The input shapes a store's steps refer to (``TimelineStore.shapes`` decoded).

    Raises:
        zlib.error, msgspec.DecodeError, msgspec.ValidationError: a damaged table.
    """
    return _NAMES.decode(zlib.decompress(store.shapes)) if store.shapes else []


def encode_store(store: TimelineStore) -> bytes:
    """A store as msgpack bytes (its blobs as raw bytes)."""
    return _STORE_ENCODER.encode(store)


def decode_store(data: bytes) -> TimelineStore:
    """A :class:`TimelineStore` from :func:`encode_store`'s bytes.

    Raises:
        msgspec.DecodeError, msgspec.ValidationError: (ValueErrors) when it does not fit.
    """
    return _STORE_DECODER.decode(data)


def find_step(store: TimelineStore, step: int) -> int | None:
    """Position in the store of step number ``step``, or None."""
    try:
        return store.steps.index(step)
    except ValueError:
        return None
