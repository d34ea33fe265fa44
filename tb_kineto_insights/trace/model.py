"""The in-memory form of one trace: columnar event tables, interned names, health.

Everything time-like is an ``int64`` count of **nanoseconds**. Start times are absolute
(the trace's own clock, usually µs since the epoch × 1000); an interval is
``[start_ns, start_ns + dur_ns)``. Keeping the duration rather than a rounded end
means start and end are never rounded separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.schema.health import (
    DamagedRegion,
    HealthPanel,
    StreamOverlapClipped,
    TraceFlags,
    TraceQuality,
)

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

#: Kinds of duration event the reader sorts events into (see ``routes.CATEGORY_KIND``).
KERNEL = "kernel"
MEMCPY = "memcpy"
MEMSET = "memset"
RUNTIME = "runtime"  # CUDA/HIP runtime and driver calls (launches, syncs, copies)
CPU_OP = "cpu_op"  # aten ops, `Operator` in old traces
USER_ANNOTATION = "user_annotation"  # record_function ranges, ProfilerStep#N, DataLoader
GPU_ANNOTATION = "gpu_user_annotation"  # GPU mirror of user annotations
PYTHON = "python_function"  # with_stack=True
GPU_SYNC = "cuda_sync"  # sync pseudo-events: not work
OTHER = "other"  # any other category, counted in health by its own name

DURATION_KINDS: tuple[str, ...] = (
    KERNEL,
    MEMCPY,
    MEMSET,
    RUNTIME,
    CPU_OP,
    USER_ANNOTATION,
    GPU_ANNOTATION,
    PYTHON,
    GPU_SYNC,
    OTHER,
)
#: Kinds whose events run on a device (``device`` and ``stream`` are meaningful).
GPU_KINDS: frozenset[str] = frozenset({KERNEL, MEMCPY, MEMSET, GPU_ANNOTATION, GPU_SYNC})

#: ``[memory]`` ``Device Type`` numbers as PyTorch's c10::DeviceType defines them.
DEVICE_TYPE_NAMES: dict[int, str] = {
    0: "CPU",
    1: "CUDA",
    2: "MKLDNN",
    3: "OPENGL",
    4: "OPENCL",
    5: "IDEEP",
    6: "HIP",
    7: "FPGA",
    8: "MAIA",
    9: "XLA",
    10: "Vulkan",
    11: "Metal",
    12: "XPU",
    13: "MPS",
    14: "Meta",
    15: "HPU",
    16: "VE",
    17: "Lazy",
    18: "IPU",
    19: "MTIA",
    20: "PrivateUse1",
}


#: Largest int64: numbers from a trace that go into int64 columns must fit.
INT64_MAX = 2**63 - 1


def int_in_range(value: object, lo: int, hi: int) -> int | None:
    """``value`` when it is an ``int`` (not a ``bool``: JSON ``true`` is no count)
    with ``lo <= value <= hi``, else None. Trace metadata (``distributedInfo``,
    ``deviceProperties``) is taken as written, and a boolean or a 20-digit number there
    would otherwise reach int64 arrays (``OverflowError``) or the summary (failing its
    schema)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if lo <= value <= hi else None


def _empty_i64() -> I64:
    return np.zeros(0, dtype=np.int64)


@dataclass
class CommArgs:
    """Collective arguments Kineto attaches to NCCL kernels and `record_param_comms` ops.

    ``None`` where the trace does not say. Sizes are element counts, not bytes.
    """

    collective_name: str | None = None
    in_msg_nelems: int | None = None
    out_msg_nelems: int | None = None
    in_msg_size_bytes: int | None = None
    dtype: str | None = None
    group_size: int | None = None
    process_group_name: str | None = None
    process_group_ranks: str | None = None
    seq: int | None = None


@dataclass
class EventTable:
    """Duration events of one kind, sorted by ``start_ns``; all arrays have length ``n``.

    Columns:
        name: ``int32`` index into ``Trace.names``.
        start_ns, dur_ns: ``int64`` nanoseconds (absolute start, duration ≥ 0).
        pid, tid: ``int64``; string ids from the file are mapped to negative numbers
            (see ``Trace.string_ids``).
        device: ``int64`` device index for GPU kinds (``args.device``, else ``pid``), -1
            where unknown or not a device event.
        stream: ``int64`` stream id for GPU kinds (``args.stream``, else ``tid``; ROCm
            strings such as ``"0x0"`` parsed), -1 where unknown.
        correlation: ``int64`` kernel ↔ launch link (``args.correlation``), -1 if absent.
        external_id: ``int64`` link to the CPU op (``args["External id"]``), -1 if absent.
        comm: sparse collective arguments, row index → :class:`CommArgs`.
        input_dims: sparse ``Input Dims`` of CPU ops (``record_shapes=True``), row index →
            the nested list as in the file (read-only; the reader's is a
            :class:`~tb_kineto_insights.trace.rowjson.RowJson`, which builds a value
            from its JSON text when it is looked up).
        input_types: sparse ``Input type`` of CPU ops, row index → the list of dtype
            names as in the file (``"float"``, ``"c10::BFloat16"``, ``"Scalar"``, …),
            kept as ``input_dims`` is.
        concrete_inputs: sparse ``Concrete Inputs`` of CPU ops, row index → the list of
            scalar arguments as strings (``"[1, 1]"``, ``"True"``, ``""`` for tensors).
        flops: sparse ``flops`` arg of CPU ops with a FLOPs formula, row index → the
            value as in the file (a FLOP count per call written by the tool that made
            the trace; torch.profiler's ``with_flops=True`` does not write it, up to
            torch 2.11 at least).
    """

    name: I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    start_ns: I64 = field(default_factory=_empty_i64)
    dur_ns: I64 = field(default_factory=_empty_i64)
    pid: I64 = field(default_factory=_empty_i64)
    tid: I64 = field(default_factory=_empty_i64)
    device: I64 = field(default_factory=_empty_i64)
    stream: I64 = field(default_factory=_empty_i64)
    correlation: I64 = field(default_factory=_empty_i64)
    external_id: I64 = field(default_factory=_empty_i64)
    comm: dict[int, CommArgs] = field(default_factory=dict)
    input_dims: Mapping[int, Any] = field(default_factory=dict)
    input_types: Mapping[int, Any] = field(default_factory=dict)
    concrete_inputs: Mapping[int, Any] = field(default_factory=dict)
    flops: Mapping[int, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.start_ns.shape[0])

    @property
    def end_ns(self) -> I64:
        """``start_ns + dur_ns`` (int64 ns)."""
        return self.start_ns + self.dur_ns


@dataclass
class MemoryTable:
    """``[memory]`` instant events (``profile_memory=True``), sorted by ``ts_ns``.

    Columns (length ``n``): ``ts_ns`` int64 ns; ``bytes`` int64 (negative = free);
    ``total_allocated_bytes`` / ``total_reserved_bytes`` int64, -1 where the trace has no
    totals (old traces); ``device_type`` int64 (c10 DeviceType: 0 CPU, 1 CUDA, …);
    ``device_id`` int64; ``addr`` int64, -1 where absent; ``pid``/``tid`` int64.
    """

    ts_ns: I64 = field(default_factory=_empty_i64)
    bytes: I64 = field(default_factory=_empty_i64)
    total_allocated_bytes: I64 = field(default_factory=_empty_i64)
    total_reserved_bytes: I64 = field(default_factory=_empty_i64)
    device_type: I64 = field(default_factory=_empty_i64)
    device_id: I64 = field(default_factory=_empty_i64)
    addr: I64 = field(default_factory=_empty_i64)
    pid: I64 = field(default_factory=_empty_i64)
    tid: I64 = field(default_factory=_empty_i64)

    def __len__(self) -> int:
        return int(self.ts_ns.shape[0])


@dataclass
class FlowTable:
    """Flow events (``ph`` ``s``/``f``/``t``): CPU → GPU launch links and fwd/bwd links.

    Columns: ``id`` int64; ``ts_ns`` int64; ``pid``/``tid`` int64; ``phase`` int8
    (0 start ``s``, 1 finish ``f``, 2 step ``t``); ``launch`` bool (category is a launch
    link such as ``ac2g``/``async``/``async_cpu_to_gpu``, not ``fwdbwd``).
    """

    id: I64 = field(default_factory=_empty_i64)
    ts_ns: I64 = field(default_factory=_empty_i64)
    pid: I64 = field(default_factory=_empty_i64)
    tid: I64 = field(default_factory=_empty_i64)
    phase: npt.NDArray[np.int8] = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    launch: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))

    def __len__(self) -> int:
        return int(self.id.shape[0])


@dataclass
class TraceHealth:
    """What the reader saw, skipped, repaired and was told by Kineto; the summary's
    ``health`` panel through :meth:`panel`.

    Attributes:
        path: the file read.
        compressed: whether the file was gzip (by magic bytes, not suffix).
        file_bytes: size of the file as stored.
        json_bytes: size of the uncompressed JSON.
        root: ``"object"`` or ``"array"`` (legacy bare array of events).
        event_count: every event in ``traceEvents``.
        category_counts: events per raw category (``"(none)"`` for events without one).
        kind_counts: events per reader kind (``kernel``, ``memory``, ``flow``, …).
        skipped: events left out, per reason (``missing_name``, ``missing_ts``, …), and
            top-level objects left out for their size (``oversized_distributedInfo``,
            ``oversized_deviceProperties``, ``oversized_tb_kineto_insights``: over
            ``assemble.ROOT_OBJECT_MAX_BYTES``).
        quarantined: events left out for implausible timing, per reason
            (``negative_duration``, ``duration_over_7_days``, ``ts_out_of_range``: a
            ``ts`` beyond the int64 ns range such as ``1e300``, ``ts_far_outside_trace``:
            see ``trace.timing``).
        quarantined_by_kind: the same per reader kind (``kernel``, ``cpu_op``, …,
            ``memory``, ``flow``) then reason.
        stream_overlap_clipped: kernels/memcpys/memsets clipped at the next event's
            start on their device and stream: ``events``, ``removed_ns`` (time removed,
            ns), ``overran_whole_events`` (of those, ran past the next event's end: a
            broken duration).
        damage: up to 20 damaged regions of the file, by offset: ``offset`` (where the
            decoder stopped, bytes of the uncompressed JSON), ``start`` and ``bytes``
            (the bytes lost), ``events`` (events lost), ``problem``.
        damaged_regions / lost_bytes / lost_events: totals over every damaged region
            (a truncated or corrupt gzip stream is one region, its ``offset`` where the
            stream broke).
        steps_without_gpu_data: ``ProfilerStep`` numbers left out of every panel because
            GPU work they launched was quarantined (its time is unknown); filled by
            ``analysis.trace_index.build_index``.
        repairs: JSON damage repaired, per kind (``nan_token``, ``lone_backslash``, …).
        exact_ns_timestamps: timestamps were parsed as decimals, exact to the ns.
        kineto_log: Kineto's own ``INFO``/``WARNING``/``ERROR`` lines, prefixed by level.
        kineto_record_counts: numbers from Kineto's "Record counts:" line
            (e.g. ``{"Out-of-range": 3829}``), where present.
        flags: ``has_steps``, ``has_kernels``, ``has_memory``, ``has_memory_totals``,
            ``has_stacks``, ``has_shapes``, ``has_correlation``, ``has_device_properties``,
            ``has_distributed_info``.
        device_properties: ``deviceProperties`` as in the file (list of dicts).
        distributed_info: ``distributedInfo`` as in the file (``rank``, ``world_size``,
            ``backend``, …) or ``None``.
        metadata: other top-level scalars kept for display (``schemaVersion``,
            ``traceName``, ``displayTimeUnit``, ``baseTimeNanoseconds``, versions, profiler
            settings).
        string_ids: how many pid/tid/stream/device values were strings (e.g. ``"0x0"``).
        run_metadata: the top-level ``tb_kineto_insights`` object written by
            :func:`tb_kineto_insights.capture.profile` (preset, settings, versions, GPU,
            env, label), or ``None``.
    """

    path: str = ""
    compressed: bool = False
    file_bytes: int = 0
    json_bytes: int = 0
    root: str = "object"
    event_count: int = 0
    category_counts: dict[str, int] = field(default_factory=dict)
    kind_counts: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    quarantined: dict[str, int] = field(default_factory=dict)
    quarantined_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    stream_overlap_clipped: dict[str, int] = field(default_factory=dict)
    damage: list[dict[str, Any]] = field(default_factory=list)
    damaged_regions: int = 0
    lost_bytes: int = 0
    lost_events: int = 0
    steps_without_gpu_data: list[int] = field(default_factory=list)
    repairs: dict[str, int] = field(default_factory=dict)
    exact_ns_timestamps: bool = False
    kineto_log: list[str] = field(default_factory=list)
    kineto_record_counts: dict[str, int] = field(default_factory=dict)
    flags: dict[str, bool] = field(default_factory=dict)
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed_info: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    string_ids: int = 0
    run_metadata: dict[str, Any] | None = None

    def panel(self, trace_quality: TraceQuality) -> HealthPanel:
        """``summary.health``: every attribute above, in this order, as a
        :class:`~tb_kineto_insights.schema.health.HealthPanel`, with ``trace_quality``
        (``analysis.trace_quality.trace_quality_summary``) last. Containers are copied,
        so the panel does not change if this object does.

        Raises:
            TypeError: ``stream_overlap_clipped``, ``flags`` or a ``damage`` entry lacks a
                key of its Struct, or has one it does not name.
        """
        return HealthPanel(
            path=self.path,
            compressed=self.compressed,
            file_bytes=self.file_bytes,
            json_bytes=self.json_bytes,
            root=self.root,
            event_count=self.event_count,
            category_counts=dict(self.category_counts),
            kind_counts=dict(self.kind_counts),
            skipped=dict(self.skipped),
            quarantined=dict(self.quarantined),
            quarantined_by_kind={k: dict(v) for k, v in self.quarantined_by_kind.items()},
            stream_overlap_clipped=StreamOverlapClipped(**self.stream_overlap_clipped),
            damage=[DamagedRegion(**d) for d in self.damage],
            damaged_regions=self.damaged_regions,
            lost_bytes=self.lost_bytes,
            lost_events=self.lost_events,
            steps_without_gpu_data=list(self.steps_without_gpu_data),
            repairs=dict(self.repairs),
            exact_ns_timestamps=self.exact_ns_timestamps,
            kineto_log=list(self.kineto_log),
            kineto_record_counts=dict(self.kineto_record_counts),
            flags=TraceFlags(**self.flags),
            device_properties=list(self.device_properties),
            distributed_info=self.distributed_info,
            metadata=dict(self.metadata),
            string_ids=self.string_ids,
            run_metadata=self.run_metadata,
            trace_quality=trace_quality,
        )


@dataclass
class Trace:
    """One trace file, read.

    Attributes:
        names: interned event names; tables refer to them by index.
        tables: one :class:`EventTable` per kind in :data:`DURATION_KINDS`.
        memory: ``[memory]`` events.
        flows: flow events.
        process_names / thread_names: from ``M`` metadata events, keyed by pid / (pid, tid).
        string_ids: the strings behind negative pid/tid values (value ``-1 - i`` is
            ``string_ids[i]``).
        health: :class:`TraceHealth`.
        quarantined_correlations: correlation ids (int64, sorted) of kernels, memcpys
            and memsets quarantined for broken timestamps: launched, GPU time unknown.
    """

    names: list[str]
    tables: dict[str, EventTable]
    memory: MemoryTable
    flows: FlowTable
    health: TraceHealth
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    string_ids: list[str] = field(default_factory=list)
    quarantined_correlations: I64 = field(default_factory=_empty_i64)

    @property
    def kernels(self) -> EventTable:
        return self.tables[KERNEL]

    @property
    def cpu_ops(self) -> EventTable:
        return self.tables[CPU_OP]

    @property
    def runtime(self) -> EventTable:
        return self.tables[RUNTIME]

    def name_of(self, index: int) -> str:
        """The name behind an interned index."""
        return self.names[index]

    @property
    def rank(self) -> int | None:
        """``distributedInfo.rank`` as an int, or ``None``."""
        info = self.health.distributed_info or {}
        return int_in_range(info.get("rank"), 0, 2**31 - 1)

    @property
    def world_size(self) -> int | None:
        """``distributedInfo.world_size`` as an int (1 to 2**31 - 1; a boolean is
        none), or ``None``."""
        info = self.health.distributed_info or {}
        return int_in_range(info.get("world_size"), 1, 2**31 - 1)
