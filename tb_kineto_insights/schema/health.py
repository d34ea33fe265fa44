"""Shape of ``health``: filled by ``trace.model.TraceHealth.to_dict``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from typing import Any

from tb_kineto_insights.schema._base import Out


class StreamOverlapClipped(Out, frozen=True, kw_only=True):
    """``summary.health.stream_overlap_clipped``: kernels/memcpys/memsets clipped at the
    next event's start on their stream; ``removed_ns``: time removed."""

    events: int
    removed_ns: int
    overran_whole_events: int


class DamagedRegion(Out, frozen=True, kw_only=True):
    """``summary.health.damage[]``: one damaged region; ``offset`` where the decoder
    stopped, ``start`` and ``bytes`` the bytes lost (offsets in the uncompressed JSON)."""

    offset: int
    start: int
    bytes: int
    events: int
    problem: str


class TraceFlags(Out, frozen=True, kw_only=True):
    """``summary.health.flags``."""

    has_kernels: bool
    has_steps: bool
    has_memory: bool
    has_memory_totals: bool
    has_memory_addresses: bool
    has_stacks: bool
    has_shapes: bool
    has_correlation: bool
    has_device_properties: bool
    has_distributed_info: bool


class HealthPanel(Out, frozen=True, kw_only=True):
    """``summary.health``: what the reader saw
    (:class:`~tb_kineto_insights.trace.model.TraceHealth`, whose docstring defines each
    field). ``device_properties``, ``distributed_info`` and ``metadata`` are copied from
    the file as Kineto wrote them (``deviceProperties``, ``distributedInfo``, other
    top-level scalars), so their keys are Kineto's, not ours."""

    path: str
    compressed: bool
    file_bytes: int
    json_bytes: int
    root: str
    event_count: int
    category_counts: dict[str, int]
    kind_counts: dict[str, int]
    skipped: dict[str, int]
    quarantined: dict[str, int]
    quarantined_by_kind: dict[str, dict[str, int]]
    stream_overlap_clipped: StreamOverlapClipped
    damage: list[DamagedRegion]
    damaged_regions: int
    lost_bytes: int
    lost_events: int
    steps_without_gpu_data: list[int]
    repairs: dict[str, int]
    exact_ns_timestamps: bool
    kineto_log: list[str]
    kineto_record_counts: dict[str, int]
    flags: TraceFlags
    device_properties: list[dict[str, Any]]
    distributed_info: dict[str, Any] | None
    metadata: dict[str, Any]
    string_ids: int
