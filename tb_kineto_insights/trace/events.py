"""msgspec types that a Kineto event decodes into.

Only the fields the analysis uses are declared; msgspec skips every other key without
building Python objects for it, which is where most of the reader's speed and memory
saving comes from. Types are deliberately wide (``int | float | str``) so that odd but
harmless values (string stream ids, float counts) decode instead of failing a chunk.

The reader decodes events *by phase* first: a tagged union on ``ph`` (msgspec's
``tag_field``; :data:`PhaseEvent`, :data:`RawTsPhaseEvent` for pieces,
:class:`PiecePhaseRoot` / :class:`RawTsPhaseRoot` for the top-level decode) with one struct
per Chrome trace phase that declares only what the reader reads for that phase: ``X``
name, dur and :class:`DurationArgs` (no ``[memory]`` fields); ``i``/``I`` name and
:class:`MemoryArgs`; ``s``/``f``/``t`` only the flow id (no name, no args); ``M`` name
and the process/thread name; other phases only ``cat``/``pid``/``tid``/``ts``. What a
phase does not declare reads as an absent key would (class attributes: ``None``, empty
``Input Dims``), so every event still has every attribute of :class:`Event`. A piece
that does not decode so (an event without ``ph``, a phase that is not a Chrome trace
phase, a ``ph`` that is not a string, a field of an odd type, bad JSON) is decoded
with one struct for every event (:class:`FastEvent`, :class:`RawTsEvent`,
:class:`Root`), whose errors are the ones raised, repaired and salvaged. So a field the
reader does not read for that phase (a flow's ``name``) is not type-checked: an odd
value there neither sends its piece to the loose path nor drops the event as
``invalid_field_type``.

The decode by phase is somewhat faster than one struct for every event
(``benchmarks/bench_decode_pieces.py``; figures in ``benchmarks/RESULTS.md``).
Declaring every field in every phase (a tagged union without the narrowing) is no
faster than one struct: the gain is the fields and ``args`` keys not built or matched
(a flow's name, an ``X`` event's memory fields). Much of the decode's time is fixed,
though: a decode that keeps only ``ph`` already costs well over half as much, since
msgspec scans every byte.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Union

import msgspec

#: A JSON scalar as found in the wild where a number is expected.
Num = int | float | str | None


class Args(msgspec.Struct, frozen=True, gc=False):
    """The subset of an event's ``args`` that the analysis reads."""

    device: Num = None
    stream: Num = None
    correlation: Num = None
    external_id: Num = msgspec.field(default=None, name="External id")
    # [memory] instant events
    bytes: Num = msgspec.field(default=None, name="Bytes")
    total_allocated: Num = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Num = msgspec.field(default=None, name="Total Reserved")
    device_type: Num = msgspec.field(default=None, name="Device Type")
    device_id: Num = msgspec.field(default=None, name="Device Id")
    addr: Num = msgspec.field(default=None, name="Addr")
    # collectives (NCCL kernels, record_param_comms / nccl:* ops)
    collective_name: Num = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: Num = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: Num = msgspec.field(default=None, name="Out msg nelems")
    in_msg_size: Num = msgspec.field(default=None, name="In msg size")
    dtype: Num = None
    group_size: Num = msgspec.field(default=None, name="Group size")
    pg_name: Num = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    seq: Num = msgspec.field(default=None, name="Seq")
    # record_shapes=True: the op's input shapes (nested lists)
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    # record_shapes=True: the op's input dtypes (a list of strings)
    input_type: Any = msgspec.field(default=None, name="Input type")
    # record_shapes=True: scalar arguments as strings (strides, padding, is_causal)
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")
    # a FLOP count of the op written by the tool that made the trace (no torch.profiler
    # up to 2.11 writes one: with_flops=True keeps it in FunctionEvent.flops only)
    flops: Any = None
    # metadata events (process_name / thread_name)
    name: Num = None


NO_ARGS = Args()


class RawDimsArgs(Args, frozen=True, gc=False):
    """As :class:`Args`, but ``Input Dims``, ``Input type`` and ``Concrete Inputs`` kept
    as their JSON texts (``msgspec.Raw``; empty when absent): the reader stores them as
    text and builds the lists only when asked (:mod:`~tb_kineto_insights.trace.rowjson`).
    Used by the typed decoders (:class:`FastEvent`, :class:`RawTsEvent`); events decoded
    loosely keep :class:`Args`."""

    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    flops: msgspec.Raw = msgspec.Raw(b"")


NO_RAW_ARGS = RawDimsArgs()


class Event(msgspec.Struct, gc=False):
    """One element of ``traceEvents``; ``ts``/``dur`` in µs as floats."""

    ph: Num = None
    cat: Num = None
    name: Num = None
    pid: Num = None
    tid: Num = None
    ts: float | None = None
    dur: float | None = None
    id: Num = None
    args: Args = NO_ARGS


class FastEvent(Event, gc=False):
    """:class:`Event` with :class:`RawDimsArgs`: what the typed decoder reads."""

    args: RawDimsArgs = NO_RAW_ARGS


class ExactEvent(msgspec.Struct, gc=False):
    """As :class:`Event`, but ``ts`` decoded as a ``Decimal`` so that epoch-scale
    timestamps with ns digits (``1712195495519689.047``) keep every digit; a float64
    only holds about 16 significant digits."""

    ph: Num = None
    cat: Num = None
    name: Num = None
    pid: Num = None
    tid: Num = None
    ts: Decimal | None = None
    dur: float | None = None
    id: Num = None
    args: Args = NO_ARGS


class RawTsEvent(msgspec.Struct, gc=False):
    """As :class:`ExactEvent`, but ``ts`` kept as the literal JSON text
    (``msgspec.Raw``; empty when absent), converted to ns for a whole piece at once by
    :mod:`~tb_kineto_insights.trace.numbers` instead of a ``Decimal`` per event. A
    literal that is not a plain number is converted by the reader one by one."""

    ph: Num = None
    cat: Num = None
    name: Num = None
    pid: Num = None
    tid: Num = None
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: float | None = None
    id: Num = None
    args: RawDimsArgs = NO_RAW_ARGS


# -- events decoded by phase (a tagged union on "ph") --------------------------------------
# Each phase declares only the fields the reader reads for it; msgspec skips every
# other key. The attributes a phase does not declare are class attributes holding what
# an absent key gives (``None``, empty ``Input Dims``), so code that reads any field of
# any event still works (it reads what it would for an absent key).


def _unread_as_absent(cls: Any, full: Any, absent: Any) -> Any:
    """Give ``cls`` (a Struct) a class attribute for every field of ``full`` (a Struct
    type) it does not declare, set to that field's value in ``absent``."""
    for field in full.__struct_fields__:
        if field not in cls.__struct_fields__:
            setattr(cls, field, getattr(absent, field))
    return cls


class DurationArgs(msgspec.Struct, frozen=True, gc=False):
    """``args`` of an ``X`` event: the fields :class:`RawDimsArgs` has, less the
    ``[memory]`` and metadata ones."""

    external_id: Num = msgspec.field(default=None, name="External id")
    device: Num = None
    stream: Num = None
    correlation: Num = None
    collective_name: Num = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: Num = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: Num = msgspec.field(default=None, name="Out msg nelems")
    in_msg_size: Num = msgspec.field(default=None, name="In msg size")
    dtype: Num = None
    group_size: Num = msgspec.field(default=None, name="Group size")
    pg_name: Num = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    seq: Num = msgspec.field(default=None, name="Seq")
    # Kineto writes "Concrete Inputs", "Input type", "Input Dims" in this order
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    flops: msgspec.Raw = msgspec.Raw(b"")


class MemoryArgs(msgspec.Struct, frozen=True, gc=False):
    """``args`` of an instant (``i``/``I``) event: the ``[memory]`` fields."""

    total_reserved: Num = msgspec.field(default=None, name="Total Reserved")
    total_allocated: Num = msgspec.field(default=None, name="Total Allocated")
    bytes: Num = msgspec.field(default=None, name="Bytes")
    device_id: Num = msgspec.field(default=None, name="Device Id")
    device_type: Num = msgspec.field(default=None, name="Device Type")
    addr: Num = msgspec.field(default=None, name="Addr")


class MetadataArgs(msgspec.Struct, frozen=True, gc=False):
    """``args`` of a metadata (``M``) event: the process or thread name."""

    name: Num = None


class DurationObjectArgs(DurationArgs, frozen=True, gc=False):
    """:class:`DurationArgs` with ``Input Dims`` decoded as objects, as :class:`Args`
    (:data:`ObjectPhaseEvent`)."""

    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")
    flops: Any = None


for _cls in (DurationArgs, MemoryArgs, MetadataArgs):
    _unread_as_absent(_cls, RawDimsArgs, NO_RAW_ARGS)
_unread_as_absent(DurationObjectArgs, Args, NO_ARGS)

#: Fields each phase declares after ``cat``/``pid``/``tid``/``ts`` (in the order Kineto
#: writes them: msgspec looks for the next declared key first).
_PHASE_FIELDS: dict[str, list[tuple[str, Any, Any]]] = {
    "X": [
        ("name", Num, None),
        ("dur", float | None, None),
        ("args", DurationArgs, DurationArgs()),
    ],
    "i": [("name", Num, None), ("args", MemoryArgs, MemoryArgs())],
    "I": [("name", Num, None), ("args", MemoryArgs, MemoryArgs())],
    "s": [("id", Num, None)],
    "f": [("id", Num, None)],
    "t": [("id", Num, None)],
    "M": [("name", Num, None), ("args", MetadataArgs, MetadataArgs())],
}
#: Other phases of the Chrome trace format: only their phase (and category) is read.
OTHER_PHASES = "BECbneNODSTpFRPc()"


def _phase_union(prefix: str, ts_type: Any, ts_default: Any, raw_dims: bool = True) -> Any:
    """The union of one Struct per phase (tag field ``ph``), each with ``cat``, ``pid``,
    ``tid``, ``ts`` (of ``ts_type``) and its :data:`_PHASE_FIELDS`; the phase itself is
    the class attribute ``ph``, the fields of :class:`Event` a phase does not declare
    are class attributes as for an absent key. ``raw_dims=False``: ``X`` events'
    ``Input Dims`` as objects (:class:`DurationObjectArgs`)."""
    classes = []
    for phase in (*_PHASE_FIELDS, *OTHER_PHASES):
        extra = _PHASE_FIELDS.get(phase, [])
        if phase == "X" and not raw_dims:
            extra = [*extra[:2], ("args", DurationObjectArgs, DurationObjectArgs())]
        fields = [("cat", Num, None), *extra[:1], ("pid", Num, None), ("tid", Num, None)]
        fields += [("ts", ts_type, ts_default), *extra[1:]]
        declared = {f[0] for f in fields}
        unread: dict[str, Any] = {"name": None, "dur": None, "id": None}
        unread["args"] = NO_RAW_ARGS if raw_dims else NO_ARGS
        namespace = {"ph": phase, **{k: v for k, v in unread.items() if k not in declared}}
        classes.append(
            msgspec.defstruct(
                f"{prefix}_{ord(phase)}",
                fields,
                tag_field="ph",
                tag=phase,
                namespace=namespace,
                gc=False,
                module=__name__,
            )
        )
    return Union[tuple(classes)]  # noqa: UP007 (built at run time)


#: An event decoded by phase, ``ts`` in µs as a float (:class:`FastEvent`'s types).
PhaseEvent = _phase_union("PhaseEvent", float | None, None)
#: An event decoded by phase, ``ts`` as its literal (:class:`RawTsEvent`'s types).
RawTsPhaseEvent = _phase_union("RawTsPhaseEvent", msgspec.Raw, msgspec.Raw(b""))
#: Events decoded by phase with :class:`Event`'s types (``Input Dims`` as objects): the
#: decode floor of the benchmarks (:class:`PhaseRoot`).
ObjectPhaseEvent = _phase_union("ObjectPhaseEvent", float | None, None, raw_dims=False)


class Root(msgspec.Struct, gc=False):
    """The top-level object: events plus the keys that may surround them."""

    traceEvents: list[Event] = []  # noqa: N815 (the file's own key)
    deviceProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    displayTimeUnit: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    record_shapes: Any = None
    profile_memory: Any = None
    with_stack: Any = None
    with_flops: Any = None
    with_modules: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    tb_kineto_insights: Any = None  # run metadata written by tb_kineto_insights.capture
    INFO: Any = None
    WARNING: Any = None
    ERROR: Any = None


class ExactRoot(Root, gc=False):
    """:class:`Root` whose events are :class:`ExactEvent`."""

    traceEvents: list[ExactEvent] = []  # type: ignore[assignment]  # noqa: N815


class PhaseRoot(Root, gc=False):
    """:class:`Root` whose events are decoded by phase (:data:`ObjectPhaseEvent`): what
    the benchmarks' decode floor decodes (``benchmarks/compare_peers.py``), every field
    any analysis needs; the reader decodes literals instead (:class:`PiecePhaseRoot`)."""

    traceEvents: list[ObjectPhaseEvent] = []  # type: ignore[valid-type]  # noqa: N815


class PiecePhaseRoot(Root, gc=False):
    """:class:`Root` whose events are decoded as a piece's are (:data:`PhaseEvent`:
    ``Input Dims`` as literals): the reader's top-level decode of the last events."""

    traceEvents: list[PhaseEvent] = []  # type: ignore[valid-type]  # noqa: N815


class RawTsPhaseRoot(Root, gc=False):
    """:class:`PiecePhaseRoot` with ``ts`` as its literal (:data:`RawTsPhaseEvent`),
    for a trace whose timestamps need more digits than a float has."""

    traceEvents: list[RawTsPhaseEvent] = []  # type: ignore[valid-type]  # noqa: N815


#: Top-level keys copied into ``TraceHealth.metadata``.
METADATA_KEYS: tuple[str, ...] = (
    "schemaVersion",
    "traceName",
    "displayTimeUnit",
    "baseTimeNanoseconds",
    "record_shapes",
    "profile_memory",
    "with_stack",
    "with_flops",
    "with_modules",
    "cupti_version",
    "cuda_runtime_version",
    "cuda_driver_version",
)
