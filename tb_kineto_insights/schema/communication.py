"""Shape of ``communication``: filled by ``analysis.communication.communication_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out


class CommunicationStep(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.communication.steps[]``."""

    number: int
    comm_us: float
    overlapped_us: float
    exposed_us: float
    comm_fraction: float | None
    exposed_fraction: float | None
    wait_estimate_us: float
    exposed_wait_estimate_us: float
    exposed_transfer_estimate_us: float


class CommunicationDevice(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.communication.devices[]``."""

    device: int
    comm_us: float
    overlapped_us: float
    exposed_us: float
    comm_fraction: float
    exposed_fraction: float


class CollectiveKind(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.communication.kinds[]``."""

    kind: str
    count: int
    calls_per_step: float
    kernel_count: int
    bytes: int | None
    out_bytes: int | None
    sized_count: int
    median_bytes: float | None
    time_us: float
    mean_us: float
    wait_estimate_us_total: float
    exposed_us_per_step: float
    algbw_gbps: float | None
    busbw_gbps: float | None
    busbw_basis: str
    kernel_time_algbw_gbps: float | None
    kernel_time_busbw_gbps: float | None
    group_sizes: list[int]
    kind_from: dict[str, int]


class BucketHistogram(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.communication.ddp_bucket_bytes.histogram``."""

    edges_bytes: list[int]
    counts: list[int]


class BucketSize(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.communication.ddp_bucket_bytes.sizes[]``
    (also ``diff.communication.ddp_buckets.base.sizes[]``)."""

    bytes: int
    count: int


class DdpBucketBytes(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.communication.ddp_bucket_bytes``."""

    count: int
    total_bytes: int
    min_bytes: int | None
    median_bytes: float | None
    max_bytes: int | None
    histogram: BucketHistogram
    distinct_count: int
    sizes: list[BucketSize]


class CollectiveCall(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.communication.sequence[]``."""

    pg: str
    seq: int
    kind: str
    start_us: float
    start_ns: int
    end_ns: int
    dur_us: float
    bytes: int | None
    size_bytes: int | None
    group_size: int
    step: int
    exposed_us: float
    exposed_ns: list[list[int]] | None


class CommunicationPanel(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.communication``."""

    has_collectives: bool
    kernel_count: int
    collective_count: int
    world_size: int | None
    steps: list[CommunicationStep]
    total_step_us: float
    comm_us: float
    overlapped_us: float
    exposed_us: float
    comm_fraction: float | None
    exposed_fraction: float | None
    overlap_fraction: float | None
    mean_comm_us: float
    mean_overlapped_us: float
    mean_exposed_us: float
    comm_outside_steps_us: float
    wait_basis: str
    wait_estimate_us_per_step: float
    exposed_wait_estimate_us_per_step: float
    exposed_transfer_estimate_us_per_step: float
    exposed_wait_estimate_fraction: float | None
    devices: list[CommunicationDevice]
    kinds: list[CollectiveKind]
    ddp_bucket_bytes: DdpBucketBytes
    sequence: list[CollectiveCall]
    sequence_total: int
    sequence_truncated: bool
    seq_source: str
    collective_ops: int
    notes: list[str]
