"""Shape of ``communication``: filled by ``analysis.communication.communication_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out


class CommunicationStep(Out, frozen=True, kw_only=True):
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


class CommunicationDevice(Out, frozen=True, kw_only=True):
    """``summary.communication.devices[]``."""

    device: int
    comm_us: float
    overlapped_us: float
    exposed_us: float
    comm_fraction: float | None
    exposed_fraction: float | None


class CollectiveKind(Out, frozen=True, kw_only=True):
    """One kind of collective (AllReduce, AllGather, ...): calls, bytes,
    time, algorithm and bus bandwidth in GB/s (``busbw_basis``: what the time used was:
    the kernel time, which includes waiting, or an estimate without it)."""

    kind: str
    count: int
    calls_per_step: float | None
    kernel_count: int
    bytes: int | None
    out_bytes: int | None
    sized_count: int
    median_bytes: float | None
    time_us: float
    mean_us: float
    wait_estimate_us_total: float
    exposed_us_per_step: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    busbw_basis: str
    kernel_time_algbw_gbps: float | None
    kernel_time_busbw_gbps: float | None
    group_sizes: list[int]
    kind_from: dict[str, int]


class BucketHistogram(Out, frozen=True, kw_only=True):
    """``summary.communication.ddp_bucket_bytes.histogram``."""

    edges_bytes: list[int]
    counts: list[int]


class BucketSize(Out, frozen=True, kw_only=True):
    """``summary.communication.ddp_bucket_bytes.sizes[]``
    (also ``diff.communication.ddp_buckets.base.sizes[]``)."""

    bytes: int | None
    count: int


class DdpBucketBytes(Out, frozen=True, kw_only=True):
    """``summary.communication.ddp_bucket_bytes``."""

    count: int
    total_bytes: int
    min_bytes: int | None
    median_bytes: float | None
    max_bytes: int | None
    histogram: BucketHistogram
    distinct_count: int
    sizes: list[BucketSize]


class CollectiveCall(Out, frozen=True, kw_only=True):
    """One collective of the ``sequence`` (in launch order), with the keys
    used to match it across ranks (process group, sequence number or order) and its
    start and duration in µs."""

    pg: str
    seq: int
    kind: str
    start_us: float
    start_ns: int
    end_ns: int
    dur_us: float
    bytes: int | None
    size_bytes: int | None
    group_size: int | None
    step: int | None
    exposed_us: float
    exposed_ns: list[list[int]] | None
    #: what the rank did on its main GPU between its previous collective and this one
    #: (``analysis.lead_up``): µs by part (``gpu_compute``, ``memcpy``,
    #: ``communication``, the idle causes, ``unattributed``; 0 parts left out) and the
    #: host time in kernel launch calls (``launch_api``); ``None`` without a window
    lead_up_us: dict[str, float] | None = None
    #: compute kernels that start in that window
    lead_up_kernels: int | None = None


class CommunicationPanel(Out, frozen=True, kw_only=True):
    """``summary.communication``
    (``analysis.communication.communication_summary``): collective (NCCL/RCCL) kernel
    time per step and how much of it is overlapped with compute or exposed (``comm_us``
    = ``overlapped_us`` + ``exposed_us``, µs per step on average with ``mean_*``),
    estimates of the time spent waiting for other ranks, per collective ``kinds``
    (bytes, algbw/busbw in GB/s), DDP bucket sizes, and the ``sequence`` of collectives
    used to match ranks in the run view (``sequence_total``, ``sequence_truncated``)."""

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
    wait_estimate_us_per_step: float | None
    exposed_wait_estimate_us_per_step: float | None
    exposed_transfer_estimate_us_per_step: float | None
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
