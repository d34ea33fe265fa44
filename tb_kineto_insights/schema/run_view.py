"""Shape of ``run_view``: filled by ``summary.summarize_run (analysis.run_view)``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

import msgspec

from tb_kineto_insights.schema._base import Out
from tb_kineto_insights.schema.diagnoses import Diagnosis


class RankRow(Out, frozen=True, kw_only=True):
    """One rank in the run view: its steps, mean step/communication/exposed time in
    µs, how often it arrived last at matched collectives, its waiting and transfer time
    (in total, per collective and per step, exposed or not), its lateness and the delay
    it causes others per step."""

    rank: int
    worker: str
    step_count: int
    mean_step_us: float
    mean_comm_us: float
    mean_exposed_us: float
    exposed_fraction: float | None
    collective_count: int
    matched_count: int
    last_count: int
    last_fraction: float | None
    wait_us_total: float
    wait_us_per_collective: float | None
    lateness_us_per_collective: float | None
    wait_us_per_step: float | None
    transfer_us_per_step: float | None
    exposed_wait_us_per_step: float | None
    exposed_transfer_us_per_step: float | None
    delay_caused_us_per_step: float | None


class ProcessGroupMatch(Out, frozen=True, kw_only=True):
    """``run_summary.process_groups[]``."""

    pg: str
    ranks: list[int]
    matched: int
    unmatched: int


class SpreadStats(Out, frozen=True, kw_only=True):
    """``run_summary.skew_us``
    (also ``run_summary.transfer_us``)."""

    count: int
    mean_us: float | None
    median_us: float | None
    p90_us: float | None
    max_us: float | None
    total_us: float


class RunCollectiveKind(Out, frozen=True, kw_only=True):
    """``run_summary.kinds[]``."""

    kind: str
    matched_count: int
    calls_per_step: float | None
    median_bytes: float | None
    total_bytes: int
    median_transfer_us: float
    transfer_us_total: float
    algbw_gbps: float | None
    busbw_gbps: float | None
    busbw_basis: str
    group_sizes: list[int] | None


class CollectiveSkew(Out, frozen=True, kw_only=True):
    """``run_summary.largest_skews[]``."""

    pg: str
    kind: str
    step: int
    seq: int
    skew_us: float
    transfer_us: float
    last_rank: int | None
    start_offsets_us: dict[str, float]
    ranks_not_listed: int


class RunStep(Out, frozen=True, kw_only=True):
    """``run_summary.steps[]``: per rank (key: rank) the step's duration and its
    lateness (µs: how far behind the first rank it arrived at the step's collective where
    it was furthest behind, ``analysis.straggler``), and the spread of the durations."""

    number: int
    durations_us: dict[str, float]
    spread_us: float
    lateness_us: dict[str, float]


class _LastArrivals(Out, frozen=True, kw_only=True):
    """How often one rank arrived last at matched collectives: ``last_count`` of
    ``matched_count`` (``last_fraction``), in ``last_steps`` of ``tested_steps`` steps."""

    rank: int
    worker: str
    last_count: int
    matched_count: int
    last_fraction: float | None
    last_steps: int
    tested_steps: int


class CauseName(Out, frozen=True, kw_only=True):
    """``run_summary.straggler.cause.top[]``: a kernel or CPU op the straggler spends
    longer on per step than the median rank (``us_per_step``: the excess, µs)."""

    kind: str
    name: str
    us_per_step: float


class CauseFrame(Out, frozen=True, kw_only=True):
    """``run_summary.straggler.cause.frames[]``: a user Python frame (``frame``, as Kineto
    names it) where the straggler's host spends more of the cause's time than the median
    rank: ``us_per_step`` the excess, ``straggler_us_per_step`` its own time (µs per
    step)."""

    frame: str
    us_per_step: float
    straggler_us_per_step: float


class StragglerCause(Out, frozen=True, kw_only=True):
    """``run_summary.straggler.cause`` (``analysis.straggler_cause``): the class of
    time (``gpu_compute``, ``memcpy``, ``host_untraced``, ``data_loading``,
    ``host_sync``, ``optimizer_step``, ``launching``, ``cpu_ops``, ``allocator``,
    ``launches``) where the straggler exceeds the median of the other ranks most, in µs
    per step (``us_per_step``; its own and the median rank's), as a share of the delay it
    causes; ``basis``: ``before_late_collectives`` (measured on what each rank did
    between its previous collective and the ``late_collectives`` the straggler is late
    to, one per step) or ``whole_step``; ``class``/``label`` are null when no class
    explains ``straggler_cause_min_share_of_delay`` of it. ``top``: the kernels (GPU
    compute) or CPU ops behind it, over whole steps; ``frames``: with Python stacks and a
    host-side class (``host_untraced``, ``data_loading``, ``host_sync``, ``cpu_ops``),
    the straggler's Python frames with the largest excess of that time (else empty);
    ``classes``: every class's excess; ``launches_per_step_excess``: compute kernels
    started per step beyond the median rank's."""

    class_: str | None = msgspec.field(name="class")
    label: str | None
    basis: str = "whole_step"
    late_collectives: int = 0
    us_per_step: float
    straggler_us_per_step: float
    median_rank_us_per_step: float
    share_of_delay: float | None
    top: list[CauseName]
    frames: list[CauseFrame] = msgspec.field(default_factory=list)
    classes: dict[str, float]
    launches_per_step_excess: float
    reference_ranks: int


class PerCollectiveTest(Out, frozen=True, kw_only=True):
    """``straggler_test.per_collective``: the rank the others wait for in most
    collectives (``analysis.straggler_collectives``): last in ``last_count`` of the
    ``collectives`` of the ``tested_steps`` (``p_value``: the binomial tail at ``1/n``,
    × ``n``), in most collectives of ``steps_mostly_last`` of them; the others' wait for
    it summed over a step's collectives (``waited_for_us_per_step``, µs, mean over the
    steps) and its exposed part (``exposed_waited_for_us_per_step``), that part over
    their mean step (``share_of_step``); ``consistent`` and ``costly``."""

    rank: int
    last_count: int
    collectives: int
    p_value: float
    steps_mostly_last: int
    tested_steps: int
    waited_for_us_per_step: float
    exposed_waited_for_us_per_step: float
    share_of_step: float | None
    consistent: bool
    costly: bool


class Straggler(_LastArrivals, frozen=True, kw_only=True):
    """``run_summary.straggler``: the rank that holds the others back, when the test
    (:class:`StragglerTest`) says so; costs per step in µs: what the others lose to it
    (``delay_us_per_step``), and their wait for it, split into the part hidden behind
    their own compute and the exposed rest."""

    lateness_excess_us_per_step: float | None
    lateness_min_excess_us: float | None
    lateness_noise_us: float | None
    p_value: float
    delay_us_per_step: float | None
    share_of_step: float | None
    others_wait_us_per_step: float | None
    others_hidden_wait_us_per_step: float | None
    others_exposed_wait_us_per_step: float | None
    cause: StragglerCause | None
    #: ``steps``: the per-step lateness test named it; ``collectives``: the
    #: per-collective test (:class:`PerCollectiveTest`), its cost the others' exposed
    #: wait for it summed over a step's collectives
    basis: str = "steps"
    per_collective: PerCollectiveTest | None = None


class StragglerTest(_LastArrivals, frozen=True, kw_only=True):
    """``run_summary.straggler_test``: the test on per-step lateness of the rank with
    the largest mean lateness (``analysis.straggler``): its excess lateness over the
    other ranks' (µs per step: the mean, and the smallest of its steps), the noise the
    mean test used (``lateness_noise_us``: the run's residual standard deviation of the
    ranks × steps fit, ``run_noise_us``, pooled with the reference noise of balanced
    ranks, ``reference_noise_us`` on ``reference_degrees_of_freedom``), Student's
    ``t_statistic`` with ``degrees_of_freedom`` (``None`` when the lateness repeats
    exactly) and its ``p_value_mean``, the every-step test's ``p_value_min`` (``None``
    without a reference), ``p_value_one_rank`` (the better of the two, × 2) before and
    ``p_value`` after the correction for testing every rank, against ``alpha``; and its
    cost."""

    ranks_tested: int
    lateness_excess_us_per_step: float | None
    lateness_min_excess_us: float | None
    lateness_noise_us: float | None
    run_noise_us: float | None
    reference_noise_us: float | None
    reference_degrees_of_freedom: int
    t_statistic: float | None
    degrees_of_freedom: int
    p_value_mean: float
    p_value_min: float | None
    p_value_one_rank: float
    p_value: float
    alpha: float
    consistent: bool
    delay_us_per_step: float | None
    share_of_step: float | None
    min_share_of_step: float | None
    costly: bool
    others_wait_us_per_step: float | None
    others_hidden_wait_us_per_step: float | None
    others_exposed_wait_us_per_step: float | None
    verdict: str
    cause: StragglerCause | None
    #: which test gives the verdict (``steps`` or ``collectives``, :class:`Straggler`)
    basis: str = "steps"
    per_collective: PerCollectiveTest | None = None


class SupersededDiagnosis(Out, frozen=True, kw_only=True):
    """``run_summary.superseded_span_diagnoses[]``."""

    worker: str
    rank: int | None
    id: str


class RunView(Out, frozen=True, kw_only=True):
    """The view across the ranks of one run (``summary.summarize_run``,
    ``analysis.run_view``): one row per rank, collectives matched across ranks
    (``matched_count``) with their start skew and transfer time (µs), per-kind
    bandwidth, per-step durations by rank, the straggler test and its verdict, notes,
    run-level diagnoses and the span-level ones they supersede."""

    worker_count: int
    world_size: int | None
    rank_source: str
    match_key: str
    ranks: list[RankRow]
    process_groups: list[ProcessGroupMatch]
    matched_count: int
    unmatched_count: int
    kind_mismatches: int
    matched_step_count: int
    skew_us: SpreadStats
    transfer_us: SpreadStats
    kinds: list[RunCollectiveKind]
    largest_skews: list[CollectiveSkew]
    steps: list[RunStep]
    straggler: Straggler | None
    straggler_test: StragglerTest | None
    notes: list[str]
    diagnoses: list[Diagnosis]
    superseded_span_diagnoses: list[SupersededDiagnosis]
