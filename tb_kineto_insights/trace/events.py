"""msgspec types that a Kineto event decodes into.

Only the fields the analysis uses are declared; msgspec skips every other key without
building Python objects for it, which is where most of the reader's speed and memory
saving comes from. Types are deliberately wide (``int | float | str``) so that odd but
harmless values (string stream ids, float counts) decode instead of failing a chunk.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

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
    # metadata events (process_name / thread_name)
    name: Num = None


NO_ARGS = Args()


class RawDimsArgs(Args, frozen=True, gc=False):
    """As :class:`Args`, but ``Input Dims`` kept as its JSON text (``msgspec.Raw``;
    empty when absent): the reader stores it as text and builds the nested list only
    when asked (:mod:`~tb_kineto_insights.trace.rowjson`). Used by the typed decoders
    (:class:`FastEvent`, :class:`RawTsEvent`); events decoded loosely keep :class:`Args`."""

    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")


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
