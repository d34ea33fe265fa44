"""Run-level view across the workers of one run (one worker per rank): the same
collective matched across ranks, who waited for whom, how long the transfer itself took,
and whether one rank holds the others back.

Input: ``(worker name, span summary)`` pairs, each summary holding ``health``
(``distributed_info``), ``steps`` and ``communication``
(:func:`.communication.communication_summary`, whose ``sequence`` lists every collective
with its start, end, message size and the exposed pieces of it).
:func:`run_view_inputs` chooses these pairs from a run's spans (every caller uses it).

- rank: ``distributedInfo.rank``; if any worker lacks it, or two workers claim the same
  rank, the worker order (0, 1, …) is used for every worker, with a note.
- matching: within a process group, the same collective on every rank that takes part
  in that group (every worker with a collective of that group). With ``Seq`` args on
  every worker the key is ``(process group, Seq)``. Otherwise it is ``(process group,
  kind, step number, k)``: the k-th collective of that kind and group within that
  ``ProfilerStep``. Kind and step are part of the key because ranks of one job
  interleave collectives of different groups differently when the trace does not say
  which group a kernel belongs to (seen in hta's ``sampled_2ranks``), and profiling
  windows of two ranks need not start at the same collective.

Words, each with one meaning (JSON keys and CLI text use them so):

- a rank *arrives* at a matched collective when its kernel starts (``s_r``); the
  collective's *latest start* ``L`` = max over ranks of ``s_r``, its *earliest end*
  ``E`` = min over ranks of the kernel ends ``e_r``.
- **skew** (of one matched collective) = ``L − min s_r``.
- **wait** (of a rank, in one matched collective) = ``L − s_r``: the time its kernel
  spins until the last rank arrives.
- **lateness** (of a rank, in one matched collective) = ``s_r − min s``.
- **transfer** time (of one matched collective) = ``max(0, E − L)``: the time all ranks
  are inside the collective, the only part that moves data at full speed. A rank's own
  transfer time is ``max(0, e_r − L)``, so a rank's collective time = its wait + its
  transfer.
- **exposed** wait / transfer (of a rank): the part of that rank's exposed
  communication time (communication not hidden by its own compute, from
  ``sequence[].exposed_ns``) inside ``[s_r, L)`` / ``[L, e_r)``; collectives that are not
  matched count in neither.
- the **last** rank of a matched collective: the unique rank with ``s_r = L`` when the
  skew is > 0; the **delay** it causes = ``L −`` the second-latest start (how much
  earlier everyone else could have started without it).
- Units in names: ``_per_step`` = summed over the matched collectives of a step, then
  averaged over the steps that have matched collectives (a collective's step is the
  first rank's, in rank order, that has one); ``_total`` = summed over the profile;
  ``_per_collective`` = averaged over the matched collectives.

Bandwidth (``kinds``): per kind, algorithm bandwidth = Σ size / Σ transfer time over its
matched collectives (bytes-weighted, so one slow tiny collective does not dominate),
size = the larger of input and output message (nccl-tests); bus bandwidth = algorithm
bandwidth × :func:`.collectives.bus_bandwidth_factor` (``Group size``, else the ranks
matched); the same value for every rank (``busbw_basis``: ``matched_transfer``). GB/s
are 1e9 bytes per second.

Straggler (``straggler``, ``straggler_test``): a rank holds the others back only when it
is both

- **consistent**: its per-step lateness stands out from the others' beyond the
  step-to-step noise (:mod:`.straggler`): per step, each rank's lateness is how far behind
  the first rank it arrived at the step's collective where it was furthest behind; the
  candidate is the rank with the largest mean lateness; its mean excess over the other
  ranks (Student's t against the run's two-way residual noise pooled with the reference
  noise of balanced ranks, ``straggler_reference_noise_share_of_step`` of the tested
  ranks' mean step on ``straggler_reference_noise_df`` degrees of freedom) and its
  smallest per-step excess (against the reference), the better p-value × 2, × ``n``
  (Bonferroni over the ranks that could have been picked), ``p_value ≤
  straggler_alpha``. Steps where some tested rank has no matched collective are left
  out of it. Under normal noise of the reference's size with no straggler, at most
  ``straggler_alpha`` of runs show a consistent rank, at any number of ranks and steps
  ≥ 2; h200x2 ``ddp_straggler`` cut to its last 3 steps (rank 1 19.5 ms/step later, the
  run's noise 0.55 ms, pooled 1.79 ms) gives t = 13.5 on 14 degrees of freedom, p = 4e-9;
  the balanced runs cut the same way p ≥ 0.33. ``last_steps`` of ``tested_steps`` (the
  steps where it caused the largest delay) is told, not tested.
- **costly**: ``delay_us_per_step`` = per step, the largest delay it causes in that
  step (0 in steps where it is never last), median over the steps; the largest and not
  the sum because the ranks blocked in its first collective reach their next ones late
  too, so the sum counts its remaining work again, work they did meanwhile
  (``others_wait_us_per_step``, the others' mean wait, is the upper bound). What the
  others lose, explained in one breakdown: they wait ``others_wait_us_per_step`` in
  their collectives for it, of which ``others_hidden_wait_us_per_step`` is hidden
  behind their own compute and ``others_exposed_wait_us_per_step`` is exposed (their
  exposed wait, the part that lengthens their step); the cost, ``delay_us_per_step``, is
  how much earlier all of them could start without it.
  ``share_of_step`` = ``delay_us_per_step`` ÷ the other ranks' mean step time; costly
  when at least ``straggler_min_share_of_step``.

Start times are each trace's own clock: ranks on different hosts carry any clock offset
between the hosts into the skew.

Diagnoses (``analysis/rules/communication.py``): ``communication_straggler``; and
``exposed_communication`` per rank, re-qualified with the exact wait/transfer split
(the span-level diagnosis only estimates it from one rank's trace, and on a rank that
waits in every collective it cannot see the wait): the run view lists the span-level
diagnoses it replaces in ``superseded_span_diagnoses``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import msgspec
import numpy as np

from tb_kineto_insights.analysis import collectives as co
from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.analysis.rules import diagnose_run, replaces_span_diagnosis
from tb_kineto_insights.analysis.straggler_cause import straggler_cause
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.schema.communication import CollectiveCall, CommunicationPanel
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.health import HealthPanel
from tb_kineto_insights.schema.run_view import RunView, SupersededDiagnosis
from tb_kineto_insights.schema.steps import StepsPanel


class RunViewSpan(Protocol):
    """What the view across ranks reads of a span summary: its ``health``, ``steps``
    and ``communication`` panels. A :class:`~tb_kineto_insights.schema.Summary` is one;
    the plugin passes just these three panels at many ranks (``plugin.RUN_VIEW_PANELS``)."""

    @property
    def health(self) -> HealthPanel: ...

    @property
    def steps(self) -> StepsPanel: ...

    @property
    def communication(self) -> CommunicationPanel: ...


_S = TypeVar("_S", bound=RunViewSpan)

#: Matched collectives listed in ``largest_skews``.
LARGEST_SKEWS = 20
#: Ranks listed in one ``largest_skews`` entry's ``start_offsets_us`` (the latest ones and
#: the earliest): bounds that listing at thousands of ranks.
LARGEST_SKEW_RANKS = 16


def _exact_median(values: list[int]) -> float:
    """``statistics.median`` (exact on ints: the mean of the middle two as a float),
    imported here: ``statistics`` costs 6-8 ms of every start-up and only runs of
    several workers need it."""
    import statistics

    return statistics.median(values)


def binomial_tail(k: int, n: int, p: float) -> float:
    """``P(X ≥ k)`` for ``X ~ Binomial(n, p)``: the sum of the pmf from ``k`` to ``n``
    (``math.comb`` up to ``n = 1000``, log-gamma beyond).

    Raises:
        ValueError: ``n < 0`` or ``p`` outside ``[0, 1]``.
    """
    if n < 0 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_tail needs n >= 0 and 0 <= p <= 1, got n={n}, p={p}")
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p == 0.0:
        return 0.0
    if p == 1.0:
        return 1.0
    q = 1.0 - p
    if n <= 1000:  # exact binomial coefficients
        return min(sum(math.comb(n, i) * p**i * q ** (n - i) for i in range(k, n + 1)), 1.0)
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k, n + 1):
        log_comb = math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
        total += math.exp(log_comb + i * log_p + (n - i) * log_q)
    return min(total, 1.0)


def _rank_of(summary: RunViewSpan) -> tuple[int | None, int | None]:
    info = summary.health.distributed_info or {}
    rank, world = info.get("rank"), info.get("world_size")
    return (
        rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
        world if isinstance(world, int) and not isinstance(world, bool) else None,
    )


def _time_range_ns(summary: RunViewSpan) -> tuple[int, int] | None:
    """First collective start to last collective end on the trace's clock (ns); ``None``
    without collectives (step times in a summary are relative to its first step)."""
    seq = summary.communication.sequence
    if not seq:
        return None
    return _start_ns(seq[0]), max(_end_ns(e) for e in seq)


def run_view_inputs(
    workers: list[tuple[str, list[_S]]], span_index: int = -1
) -> tuple[list[tuple[str, _S]], list[str]]:
    """The ``(name, span summary)`` pairs the view across ranks compares, from each
    worker's readable span summaries (in span order), and notes.

    Normally one span per worker: ``spans[span_index]`` (the latest by default). A
    worker whose spans carry different ``distributedInfo.rank`` values in overlapping
    time windows holds several ranks saved under one worker name (a recipe that names
    every rank's file alike): each rank becomes its own entry, named
    ``"<worker> (rank N)"``, with ``span_index`` taken among that rank's spans. Time
    windows are those of the spans' collectives (first start to last end), so spans
    without collectives are never split (there is nothing to match across ranks).
    Workers without a span at ``span_index`` are left out.
    """
    out: list[tuple[str, _S]] = []
    notes: list[str] = []
    for name, spans in workers:
        by_rank: dict[int, list[_S]] = {}
        for s in spans:
            rank, _ = _rank_of(s)
            if rank is not None:
                by_rank.setdefault(rank, []).append(s)
        if len(by_rank) > 1 and _overlapping(by_rank):
            notes.append(
                f"Worker {name!r} holds spans of ranks "
                + ", ".join(str(r) for r in sorted(by_rank))
                + " in the same time window (files of several ranks saved under one "
                "worker name): each rank is treated as its own worker."
            )
            for rank in sorted(by_rank):
                chosen = _pick(by_rank[rank], span_index)
                if chosen is not None:
                    out.append((f"{name} (rank {rank})", chosen))
            continue
        chosen = _pick(spans, span_index)
        if chosen is not None:
            out.append((name, chosen))
    return out, notes


def _pick(spans: list[_S], index: int) -> _S | None:
    try:
        return spans[index]
    except IndexError:
        return None


def _overlapping(by_rank: dict[int, list[_S]]) -> bool:
    """Do spans of two different ranks overlap in time?"""
    ranges = [
        (rank, r)
        for rank, spans in by_rank.items()
        for s in spans
        if (r := _time_range_ns(s)) is not None
    ]
    for i, (rank_a, (a0, a1)) in enumerate(ranges):
        for rank_b, (b0, b1) in ranges[i + 1 :]:
            if rank_a != rank_b and a0 < b1 and b0 < a1:
                return True
    return False


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {
            "count": 0,
            "mean_us": None,
            "median_us": None,
            "p90_us": None,
            "max_us": None,
            "total_us": 0.0,
        }
    arr = np.asarray(values, dtype=np.float64)
    return {
        "count": int(arr.size),
        "mean_us": float(arr.mean()),
        "median_us": float(np.median(arr)),
        "p90_us": float(np.percentile(arr, 90)),
        "max_us": float(arr.max()),
        "total_us": float(arr.sum()),
    }


def _start_ns(entry: CollectiveCall) -> int:
    """Start in ns: the exact ``start_ns`` (a float µs on an epoch clock keeps only
    about a quarter µs)."""
    return entry.start_ns


def _end_ns(entry: CollectiveCall) -> int:
    """End in ns: ``end_ns``."""
    return entry.end_ns


def run_view(
    workers: Sequence[tuple[str, RunViewSpan]], thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> RunView:
    """The view across ranks as a :class:`~tb_kineto_insights.schema.RunView`:
    :func:`run_summary`, its diagnoses
    (:func:`~tb_kineto_insights.analysis.rules.diagnose_run`) and
    :func:`superseded_span_diagnoses`. ``workers``: ``(name, span summary)`` pairs, one
    per rank (:func:`run_view_inputs`). Raises ``msgspec.ValidationError`` when a part
    does not fit its Struct (a bug)."""
    run = run_summary(workers, thresholds)
    diagnoses = diagnose_run(run, workers, thresholds)
    run["diagnoses"] = diagnoses
    run["superseded_span_diagnoses"] = superseded_span_diagnoses(diagnoses)
    return msgspec.convert(run, RunView)


def superseded_span_diagnoses(diagnoses: list[Diagnosis]) -> list[SupersededDiagnosis]:
    """The span-level diagnoses the run-level ones replace: ``{worker, rank, id}`` for
    each run-level diagnosis whose rule says so (``exposed_communication``: the exact
    wait/transfer split of that rank replaces the estimate of its own trace). Front ends
    hide or mark those."""
    return [
        SupersededDiagnosis(worker=d.evidence["worker"], rank=d.evidence["rank"], id=d.id)
        for d in diagnoses
        if replaces_span_diagnosis(d)
    ]


def run_summary(
    workers: Sequence[tuple[str, RunViewSpan]], thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> dict[str, Any]:
    """The run-level view (every definition in the module docstring), before its
    diagnoses, as the dict the run-level rules read (:func:`run_view` makes the
    :class:`~tb_kineto_insights.schema.RunView` of it). Span summaries are read by
    attribute (:class:`RunViewSpan`).

    Keys: ``worker_count``; ``world_size`` (from distributedInfo, if any);
    ``rank_source`` (``distributed_info`` or ``worker_order``); ``match_key``
    (``seq`` or ``kind_step_order``); ``ranks`` (sorted by rank: ``rank``, ``worker``,
    ``step_count``, ``mean_step_us``, ``mean_comm_us``, ``mean_exposed_us``,
    ``exposed_fraction``, ``collective_count``, ``matched_count``, ``last_count``,
    ``last_fraction``, ``wait_us_total``, ``wait_us_per_collective``,
    ``lateness_us_per_collective``, ``wait_us_per_step``, ``transfer_us_per_step``,
    ``exposed_wait_us_per_step``, ``exposed_transfer_us_per_step``,
    ``delay_caused_us_per_step``); ``process_groups`` (``pg``, ``ranks``, ``matched``,
    ``unmatched``); ``matched_count``; ``unmatched_count``; ``kind_mismatches``;
    ``matched_step_count`` (steps with matched collectives); ``skew_us`` (per matched
    collective: ``count``, ``mean_us``, ``median_us``, ``p90_us``, ``max_us``,
    ``total_us``); ``transfer_us`` (the same for transfer times); ``kinds`` (per kind:
    ``kind``, ``matched_count``, ``calls_per_step``, ``median_bytes`` (size per
    collective), ``total_bytes``, ``median_transfer_us``, ``transfer_us_total``,
    ``algbw_gbps``, ``busbw_gbps``, ``busbw_basis`` = ``matched_transfer``,
    ``group_sizes``); ``largest_skews`` (``pg``, ``kind``, ``step``, ``seq``, ``skew_us``,
    ``transfer_us``, ``last_rank``, ``start_offsets_us`` = lateness per rank, for at most
    :data:`LARGEST_SKEW_RANKS` ranks: the latest ones and the earliest, and
    ``ranks_not_listed``, how many ranks of the group are left out); ``steps`` (step
    numbers common to all workers: per rank ``durations_us`` and ``spread_us``);
    ``straggler`` (``rank``, ``worker``, ``last_count``, ``matched_count``,
    ``last_fraction`` (collectives), ``last_steps``, ``tested_steps``,
    ``lateness_excess_us_per_step``, ``lateness_min_excess_us``, ``lateness_noise_us``,
    ``p_value``, ``delay_us_per_step``, ``share_of_step``, ``others_wait_us_per_step``,
    ``others_hidden_wait_us_per_step``, ``others_exposed_wait_us_per_step``, ``cause``
    (:func:`.straggler_cause.straggler_cause`, on the lead-ups of the collectives it is
    late to)) when the rule holds, else ``None``; ``straggler_test`` (the best candidate
    and why it is or is not a straggler: the same keys plus ``ranks_tested``,
    ``run_noise_us``, ``reference_noise_us``, ``reference_degrees_of_freedom``,
    ``t_statistic``, ``degrees_of_freedom``, ``p_value_mean``, ``p_value_min``,
    ``p_value_one_rank``, ``alpha``, ``consistent``, ``min_share_of_step``, ``costly``,
    ``verdict``) or ``None`` without matched collectives; ``notes``.
    """
    th = thresholds
    notes: list[str] = []
    infos = [_rank_of(s) for _, s in workers]
    ranks = [r for r, _ in infos]
    if workers and all(r is not None for r in ranks) and len(set(ranks)) == len(ranks):
        rank_list = [int(r) for r in ranks if r is not None]
        rank_source = "distributed_info"
    else:
        rank_list = list(range(len(workers)))
        rank_source = "worker_order"
        if workers and any(r is None for r in ranks):
            notes.append(
                "Some workers have no distributedInfo.rank: ranks are numbered in worker order."
            )
        elif workers:
            notes.append("Two workers claim the same rank: ranks are numbered in worker order.")
    worlds = {w for _, w in infos if w is not None}
    world = max(worlds) if worlds else None
    if world is not None and 1 < len(workers) < world:
        notes.append(
            f"Only {len(workers)} of {world} ranks were profiled: skew and the straggler "
            "are among these ranks only, and what is called transfer includes any wait for "
            "the ranks not profiled (bandwidth is then a lower bound)."
        )

    comms = [s.communication for _, s in workers]
    sequences = [c.sequence for c in comms]
    by_seq = bool(workers) and all(c.seq_source == "args" for c in comms if c.sequence)
    by_seq = by_seq and any(c.sequence for c in comms)
    counts = [c.collective_count for c in comms]
    if len(set(counts)) > 1:
        listed = ", ".join(f"rank {r}: {n}" for r, n in sorted(zip(rank_list, counts, strict=True)))
        notes.append(
            f"Workers have different numbers of collectives ({listed}); each keeps its own "
            "numbers, and only collectives found on every rank of their process group are "
            "matched."
        )
    if any(c.sequence_truncated for c in comms):
        notes.append("Some workers list only part of their collectives: matching uses those.")

    n_workers = len(workers)
    m = _match(sequences, by_seq, rank_list)
    notes.extend(m.notes)
    if n_workers < 2:
        notes.append("One worker: nothing to match across ranks.")
    elif not m.skews and any(sequences):
        notes.append("No collective could be matched across ranks.")
    if n_workers > 1 and m.skews:
        notes.append(
            "Start times come from each trace's own clock: ranks on different hosts carry "
            "any offset between the host clocks into the skew."
        )

    n_steps = len(m.step_keys)
    rows = []
    for i, (name, summary) in enumerate(workers):
        steps = summary.steps
        comm = comms[i]
        matched = m.matched_of[i]
        rows.append(
            {
                "rank": rank_list[i],
                "worker": name,
                "step_count": steps.count,
                "mean_step_us": steps.mean_step_us,
                "mean_comm_us": comm.mean_comm_us,
                "mean_exposed_us": comm.mean_exposed_us,
                "exposed_fraction": comm.exposed_fraction,
                "collective_count": counts[i],
                "matched_count": matched,
                "last_count": m.last_count[i],
                "last_fraction": m.last_count[i] / matched if matched else None,
                "wait_us_total": m.wait_ns[i] / 1000.0,
                "wait_us_per_collective": m.wait_ns[i] / 1000.0 / matched if matched else None,
                "lateness_us_per_collective": (
                    m.lateness_ns[i] / 1000.0 / matched if matched else None
                ),
                "wait_us_per_step": _per_step(m.in_step_ns[i, 0], n_steps),
                "transfer_us_per_step": _per_step(m.in_step_ns[i, 1], n_steps),
                "exposed_wait_us_per_step": _per_step(m.in_step_ns[i, 2], n_steps),
                "exposed_transfer_us_per_step": _per_step(m.in_step_ns[i, 3], n_steps),
                "delay_caused_us_per_step": (
                    _exact_median([m.step_delay[i].get(k, 0) for k in m.step_keys]) / 1000.0
                    if n_steps
                    else None
                ),
            }
        )
    test = _straggler_test(m, rows, workers, rank_list, th)
    straggler = None
    if test is not None and test["verdict"] == "straggler":
        straggler = {
            k: test[k]
            for k in (
                "rank",
                "worker",
                "last_count",
                "matched_count",
                "last_fraction",
                "last_steps",
                "tested_steps",
                "lateness_excess_us_per_step",
                "lateness_min_excess_us",
                "lateness_noise_us",
                "p_value",
                "delay_us_per_step",
                "share_of_step",
                "others_wait_us_per_step",
                "others_hidden_wait_us_per_step",
                "others_exposed_wait_us_per_step",
                "cause",
            )
        }
    order = sorted(range(n_workers), key=lambda i: rank_list[i])
    return {
        "worker_count": n_workers,
        "world_size": world,
        "rank_source": rank_source,
        "match_key": "seq" if by_seq else "kind_step_order",
        "ranks": [rows[i] for i in order],
        "process_groups": m.groups,
        "matched_count": len(m.skews),
        "unmatched_count": m.unmatched_total,
        "kind_mismatches": m.kind_mismatches,
        "matched_step_count": n_steps,
        "skew_us": _stats(m.skews),
        "transfer_us": _stats(m.transfers),
        "kinds": _kinds(m, n_steps),
        "largest_skews": sorted(m.largest, key=lambda d: -d["skew_us"])[:LARGEST_SKEWS],
        "steps": _step_times(workers, rank_list, m),
        "straggler": straggler,
        "straggler_test": test,
        "notes": notes,
    }


def _per_step(total_ns: Any, n_steps: int) -> float | None:
    return int(total_ns) / 1000.0 / n_steps if n_steps else None


class _Matched:
    """Accumulators of :func:`_match` (ns; per worker index; per step key)."""

    def __init__(self, n: int) -> None:
        self.matched_of = [0] * n
        self.last_count = [0] * n
        self.wait_ns = [0] * n
        self.lateness_ns = [0] * n
        #: per worker, summed over matched collectives inside steps: wait, transfer,
        #: exposed wait, exposed transfer
        self.in_step_ns = np.zeros((n, 4), dtype=np.int64)
        self.step_delay: list[dict[Any, int]] = [{} for _ in range(n)]
        #: per worker, per step key: its lateness (:func:`.straggler.step_lateness`)
        self.step_late: list[dict[Any, int]] = [{} for _ in range(n)]
        #: per worker, per step key: the matched collective where it caused the largest
        #: delay in that step, ``(delay ns, worker indexes, their entries)``
        self.late_at: list[dict[Any, tuple[int, list[int], list[CollectiveCall]]]] = [
            {} for _ in range(n)
        ]
        self.step_keys: list[Any] = []
        self.skews: list[float] = []
        self.transfers: list[float] = []
        self.per_kind: dict[str, list[tuple[int | None, int, int | None]]] = {}
        self.largest: list[dict[str, Any]] = []
        self.groups: list[dict[str, Any]] = []
        self.kind_mismatches = 0
        self.unmatched_total = 0
        self.notes: list[str] = []


class _Columns:
    """Every worker's sequence as flat columns (entry order, workers one after another;
    ns), read in one pass: a matched collective is then a row of global entry ids and
    every K × M quantity a numpy gather, not a dict lookup per rank.

    ``index[i]``: worker ``i``'s matching key → global entry id (first entry wins a
    duplicate key); ``mode``: 0 = no exposed time, 1 = exposed pieces (``piece_*``,
    offsets from the entry's start), 2 = ``exposed`` ns split in proportion to time.
    """

    def __init__(self, sequences: list[list[CollectiveCall]], by_seq: bool) -> None:
        self.index: list[dict[tuple[Any, ...], int]] = []
        self.entries: list[CollectiveCall] = []
        start: list[int] = []
        end: list[int] = []
        mode: list[int] = []
        exposed: list[int] = []
        kind: list[Any] = []
        size: list[int] = []
        group: list[int] = []
        step: list[Any] = []
        piece_of: list[int] = []  # entries with exposed pieces
        piece_lists: list[list[list[int]]] = []  # their pieces ([from, to] ns)
        for sequence in sequences:
            keyed: dict[tuple[Any, ...], int] = {}
            nth: dict[tuple[Any, ...], int] = {}
            for entry in sequence:
                pg = entry.pg
                if by_seq:
                    key: tuple[Any, ...] = (pg, entry.seq)
                else:
                    grp = (pg, entry.kind, entry.step)
                    k = nth.get(grp, 0)
                    nth[grp] = k + 1
                    key = (*grp, k)
                if key in keyed:
                    continue
                g = len(self.entries)
                keyed[key] = g
                self.entries.append(entry)
                start.append(entry.start_ns)
                end.append(entry.end_ns)
                pieces = entry.exposed_ns
                if pieces is None and not entry.exposed_us:
                    mode.append(0)
                    exposed.append(0)
                elif isinstance(pieces, list):
                    mode.append(1)
                    exposed.append(0)
                    if pieces:
                        piece_of.append(g)
                        piece_lists.append(pieces)
                else:
                    mode.append(2)
                    exposed.append(round(entry.exposed_us * 1000.0))
                kind.append(entry.kind)
                v = entry.size_bytes
                size.append(v if v is not None else -1)
                v = entry.group_size
                group.append(v if v is not None else -1)
                step.append(entry.step)
            self.index.append(keyed)
        i64 = np.int64
        self.start = np.array(start, dtype=i64)
        self.end = np.array(end, dtype=i64)
        self.mode = np.array(mode, dtype=np.int8)
        self.exposed = np.array(exposed, dtype=i64)
        codes: dict[Any, int] = {}
        self.kind_code = np.array([codes.setdefault(k, len(codes)) for k in kind], dtype=i64)
        self.size = np.array(size, dtype=i64)
        self.has_size = np.array([e.size_bytes is not None for e in self.entries])
        self.group = np.array(group, dtype=i64)
        self.has_group = np.array([e.group_size is not None for e in self.entries])
        self.step = step
        self.has_step = np.array([s is not None for s in step], dtype=bool)
        counts = np.array([len(p) for p in piece_lists], dtype=i64)
        flat = np.fromiter(
            itertools.chain.from_iterable(itertools.chain.from_iterable(piece_lists)),
            dtype=i64,
            count=2 * int(counts.sum()),
        )
        self.piece_entry = np.repeat(np.array(piece_of, dtype=i64), counts)
        self.piece_a, self.piece_b = flat[0::2], flat[1::2]


def _match(sequences: list[list[CollectiveCall]], by_seq: bool, rank_list: list[int]) -> _Matched:
    n = len(sequences)
    m = _Matched(n)
    cols = _Columns(sequences, by_seq)
    pgs_of = [{key[0] for key in k} for k in cols.index]
    pgs = sorted(set().union(*pgs_of)) if pgs_of else []
    step_keys: set[Any] = set()
    largest: list[tuple[float, dict[str, Any], Any, list[int]]] = []
    for pg in pgs:
        members = [i for i, p in enumerate(pgs_of) if pg in p]
        all_keys = sorted(
            {key for i in members for key in cols.index[i] if key[0] == pg},
            key=lambda key: tuple((x is None, str(type(x)), x) for x in key),
        )
        gids: list[list[int]] = []
        unmatched = 0
        indexes = [cols.index[i] for i in members]
        for key in all_keys:
            row = [ix.get(key, -1) for ix in indexes]
            if len(members) < 2 or -1 in row:
                unmatched += 1
                continue
            gids.append(row)
        if gids:
            gid = np.array(gids, dtype=np.int64)
            _group(m, members, gid, cols, rank_list, pg, step_keys, largest)
        m.unmatched_total += unmatched
        m.groups.append(
            {
                "pg": pg,
                "ranks": sorted(rank_list[i] for i in members),
                "matched": len(gids),
                "unmatched": unmatched,
            }
        )
    m.step_keys = sorted(step_keys, key=lambda s: (str(type(s)), s))
    largest.sort(key=lambda t: -t[0])
    for _, item, starts, members in largest[:LARGEST_SKEWS]:
        offsets = starts - starts.min()
        listed: list[int] = list(range(len(members)))
        if len(members) > LARGEST_SKEW_RANKS:
            # the latest ranks (largest offsets; ties: rank order) and the earliest one
            order = np.lexsort((np.array([rank_list[i] for i in members]), -offsets))
            listed = sorted({*order[: LARGEST_SKEW_RANKS - 1].tolist(), int(np.argmin(offsets))})
        item["start_offsets_us"] = {
            str(rank_list[members[j]]): int(offsets[j]) / 1000.0 for j in listed
        }
        item["ranks_not_listed"] = len(members) - len(listed)
        m.largest.append(item)
    if m.unmatched_total and m.skews:
        m.notes.append(
            f"{m.unmatched_total} collectives were not found on every rank of their process "
            "group and are left out of the skew, the wait and the transfer."
        )
    if m.kind_mismatches:
        m.notes.append(
            f"{m.kind_mismatches} matched collectives have different kinds on different ranks."
        )
    return m


def _first_valid(valid: Any) -> tuple[Any, Any]:
    """Per row of a K × M bool matrix: (any valid, column of the first valid)."""
    return valid.any(axis=1), np.argmax(valid, axis=1)


def _group(
    m: _Matched,
    members: list[int],
    gid: Any,
    cols: _Columns,
    rank_list: list[int],
    pg: str,
    step_keys: set[Any],
    largest: list[tuple[float, dict[str, Any], Any, list[int]]],
) -> None:
    """Account the matched collectives of one process group: ``gid[k, j]`` is the global
    entry id (:class:`_Columns`) of worker ``members[j]``'s entry of the k-th matched
    collective (arrays are K × M, ns)."""
    k_rows = np.arange(gid.shape[0])
    start = cols.start[gid]
    end = np.maximum(cols.end[gid], start)
    latest, earliest = start.max(axis=1), start.min(axis=1)
    skew = latest - earliest
    transfer = np.maximum(0, end.min(axis=1) - latest)
    wait = latest[:, None] - start
    own_transfer = np.maximum(0, end - latest[:, None])
    at_latest = start == latest[:, None]
    unique_last = (skew > 0) & (at_latest.sum(axis=1) == 1)
    last_j = np.argmax(start, axis=1)
    exp_wait, exp_transfer = _exposed_matrix(cols, gid, start, end, latest)
    has_step, step_col = _first_valid(cols.has_step[gid])
    steps = [cols.step[int(gid[k, step_col[k]])] if has_step[k] else None for k in k_rows.tolist()]
    m.skews.extend((skew / 1000.0).tolist())
    m.transfers.extend((transfer / 1000.0).tolist())
    for j, i in enumerate(members):
        m.matched_of[i] += gid.shape[0]
        m.wait_ns[i] += int(wait[:, j].sum())
        m.lateness_ns[i] += int((start[:, j] - earliest).sum())
        m.last_count[i] += int((unique_last & (last_j == j)).sum())
    in_step = [k for k, s in enumerate(steps) if s is not None]
    local_steps = list({steps[k] for k in in_step})
    column = {step: c for c, step in enumerate(local_steps)}
    step_index = np.array([column[s] if s is not None else -1 for s in steps], dtype=np.int64)
    late_ms, delay_ms = st.step_lateness(start, step_index, len(local_steps))
    for c, step in enumerate(local_steps):
        step_keys.add(step)
        sel = np.flatnonzero(step_index == c)
        for col, values in enumerate((wait, own_transfer, exp_wait, exp_transfer)):
            m.in_step_ns[members, col] += values[sel].sum(axis=0)
        for j, i in enumerate(members):
            value = int(late_ms[j, c])
            if value >= 0:
                lates = m.step_late[i]
                lates[step] = max(lates.get(step, 0), value)
            caused = int(delay_ms[j, c])
            if caused > 0:
                delays = m.step_delay[i]
                delays[step] = max(delays.get(step, 0), caused)
    # per rank and step, the collective where it caused the largest delay (its late one)
    if len(members) >= 2:
        second = np.sort(start, axis=1)[:, -2]
        gap_l = (latest - second).tolist()
        last_l = last_j.tolist()
        for k in np.flatnonzero(unique_last).tolist():
            step = steps[k]
            if step is None:
                continue
            i = members[last_l[k]]
            best = m.late_at[i].get(step)
            if best is None or gap_l[k] > best[0]:
                row = gid[k].tolist()
                m.late_at[i][step] = (gap_l[k], members, [cols.entries[g] for g in row])
    kind_code = cols.kind_code[gid]
    m.kind_mismatches += int((kind_code != kind_code[:, :1]).any(axis=1).sum())
    # the same collective on every rank: the first rank that says its size and group
    has_size, size_col = _first_valid(cols.has_size[gid])
    has_group, group_col = _first_valid(cols.has_group[gid])
    size = cols.size[gid[k_rows, size_col]].tolist()
    group = cols.group[gid[k_rows, group_col]].tolist()
    n_members = len(members)
    skew_l, transfer_l = skew.tolist(), transfer.tolist()
    for k in k_rows.tolist():
        first = cols.entries[int(gid[k, 0])]
        m.per_kind.setdefault(first.kind, []).append(
            (
                size[k] if has_size[k] else None,
                transfer_l[k],
                group[k] if has_group[k] else n_members,
            )
        )
        item: dict[str, Any] = {
            "pg": pg,
            "kind": first.kind,
            "step": first.step,
            "seq": first.seq,
            "skew_us": skew_l[k] / 1000.0,
            "transfer_us": transfer_l[k] / 1000.0,
            "last_rank": rank_list[members[int(last_j[k])]] if unique_last[k] else None,
        }
        largest.append((skew_l[k] / 1000.0, item, start[k], members))


def _exposed_matrix(cols: _Columns, gid: Any, start: Any, end: Any, latest: Any) -> tuple[Any, Any]:
    """K × M exposed ns inside each rank's wait ``[s, L)`` and transfer ``[L, e)``: the
    exposed pieces cut at ``L − s``; without pieces, ``exposed`` split in proportion to
    the two intervals' lengths (rounded half to even)."""
    cut = latest[:, None] - start
    mode = cols.mode[gid]
    # proportional split (mode 2)
    exposed = np.where(mode == 2, cols.exposed[gid], 0)
    dur = end - start
    inside = np.minimum(np.maximum(cut, 0), dur)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.rint(exposed * inside / np.where(dur > 0, dur, 1)).astype(np.int64)
    exp_wait = np.where(dur > 0, share, 0)
    exp_transfer = exposed - exp_wait
    if cols.piece_entry.size and (mode == 1).any():
        position = np.full(len(cols.entries), -1, dtype=np.int64)
        position[gid.ravel()] = np.arange(gid.size)
        where = position[cols.piece_entry]
        keep = where >= 0
        flat = where[keep]
        a, b = cols.piece_a[keep], cols.piece_b[keep]
        c = cut.ravel()[flat]
        in_wait = np.maximum(0, np.minimum(b, c) - np.minimum(a, c))
        wait_flat = np.zeros(gid.size, dtype=np.int64)
        all_flat = np.zeros(gid.size, dtype=np.int64)
        np.add.at(wait_flat, flat, in_wait)
        np.add.at(all_flat, flat, b - a)
        exp_wait = exp_wait + wait_flat.reshape(gid.shape)
        exp_transfer = exp_transfer + (all_flat - wait_flat).reshape(gid.shape)
    return exp_wait, exp_transfer


def _kinds(m: _Matched, n_steps: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind, items in m.per_kind.items():
        sized = [(size, t, g) for size, t, g in items if size is not None]
        timed = [(size, t, g) for size, t, g in sized if t > 0]
        total_bytes = sum(size for size, _, _ in timed)
        total_ns = sum(t for _, t, _ in timed)
        algbw = busbw = None
        if total_ns > 0:
            algbw = total_bytes / total_ns
            factors = [co.bus_bandwidth_factor(kind, g) for _, _, g in timed]
            if all(f is not None for f in factors):
                busbw = sum(size * f for (size, _, _), f in zip(timed, factors, strict=True) if f)
                busbw /= total_ns
        rows.append(
            {
                "kind": kind,
                "matched_count": len(items),
                "calls_per_step": len(items) / n_steps if n_steps else None,
                "median_bytes": float(np.median([s for s, _, _ in sized])) if sized else None,
                "total_bytes": total_bytes,
                "median_transfer_us": float(np.median([t for _, t, _ in items])) / 1000.0,
                "transfer_us_total": sum(t for _, t, _ in items) / 1000.0,
                "algbw_gbps": algbw,
                "busbw_gbps": busbw,
                "busbw_basis": "matched_transfer",
                "group_sizes": sorted({g for _, _, g in items if g is not None}),
            }
        )
    rows.sort(key=lambda r: -float(r["transfer_us_total"]))
    return rows


def _straggler_test(
    m: _Matched,
    rows: list[dict[str, Any]],
    workers: Sequence[tuple[str, RunViewSpan]],
    rank_list: list[int],
    th: Thresholds,
) -> dict[str, Any] | None:
    """The best straggler candidate and its two tests (module docstring;
    :func:`.straggler.lateness_test` on the ranks' per-step lateness)."""
    candidates = [i for i, c in enumerate(m.matched_of) if c]
    n = len(candidates)
    if n < 2 or not m.skews:
        return None
    # steps where every tested rank has a matched collective (the test needs no gaps)
    tested_keys = [k for k in m.step_keys if all(k in m.step_late[i] for i in candidates)]
    lateness_us = np.array(
        [[m.step_late[i][k] / 1000.0 for k in tested_keys] for i in candidates],
        dtype=np.float64,
    ).reshape(n, len(tested_keys))
    # the reference noise in µs: its share of the step × the tested ranks' mean step
    tested_steps_us = [
        float(rows[i]["mean_step_us"]) for i in candidates if rows[i].get("mean_step_us")
    ]
    reference_us = (
        th.straggler_reference_noise_share_of_step * float(np.mean(tested_steps_us))
        if len(tested_steps_us) == n
        else None
    )
    test = st.lateness_test(
        lateness_us if tested_keys else lateness_us[:, :0],
        reference_us,
        th.straggler_reference_noise_df,
    )

    def delay_of(i: int) -> float:
        values = [m.step_delay[i].get(k, 0) for k in m.step_keys]
        return _exact_median(values) / 1000.0 if values else 0.0

    if test["candidate"] is not None and tested_keys:
        top = candidates[test["candidate"]]
    else:  # no step with every rank: the rank that causes the most delay
        top = max(candidates, key=lambda i: (delay_of(i), m.last_count[i]))
    last_steps = 0
    for step in tested_keys:
        delays = [(m.step_delay[i].get(step, 0), i) for i in candidates]
        best, who = max(delays)
        if best > 0 and who == top:
            last_steps += 1
    p_value = float(test["p_value"])
    delay = delay_of(top) if m.step_keys else 0.0
    others = [r for j, r in enumerate(rows) if j != top and m.matched_of[j]]
    step_us = [r["mean_step_us"] for r in others if r.get("mean_step_us")]
    mean_step = float(np.mean(step_us)) if step_us else None
    share = delay / mean_step if mean_step else None
    waits = [r["wait_us_per_step"] for r in others if r.get("wait_us_per_step") is not None]
    exposed_waits = [
        r["exposed_wait_us_per_step"]
        for r in others
        if r.get("exposed_wait_us_per_step") is not None
    ]
    others_wait = float(np.mean(waits)) if waits else None
    others_exposed = float(np.mean(exposed_waits)) if exposed_waits else None
    others_hidden = (
        max(0.0, others_wait - others_exposed)
        if others_wait is not None and others_exposed is not None
        else None
    )
    excess = test["excess_us"] if tested_keys else None
    consistent = bool(tested_keys) and excess is not None and excess > 0
    consistent = consistent and p_value <= th.straggler_alpha
    costly = share is not None and share >= th.straggler_min_share_of_step
    if consistent and costly:
        verdict = "straggler"
    elif not consistent and not costly:
        verdict = "neither consistent nor costly"
    elif not consistent:
        verdict = "not consistent"
    else:
        verdict = "not costly"
    matched = m.matched_of[top]
    cause = None
    if verdict == "straggler":
        others_of = [workers[j][1] for j in candidates if j != top]
        # the collectives it is late to: per tested step, where it caused the most delay
        late_collectives = []
        for step in tested_keys:
            found = m.late_at[top].get(step)
            if found is not None:
                _, members_of, entries = found
                mine = entries[members_of.index(top)]
                late_collectives.append(
                    (mine, [e for j, e in zip(members_of, entries, strict=True) if j != top])
                )
        cause = straggler_cause(workers[top][1], others_of, delay, th, late_collectives)
    return {
        "rank": rank_list[top],
        "worker": workers[top][0],
        "last_count": m.last_count[top],
        "matched_count": matched,
        "last_fraction": m.last_count[top] / matched if matched else None,
        "last_steps": last_steps,
        "tested_steps": len(tested_keys),
        "ranks_tested": n,
        "lateness_excess_us_per_step": excess,
        "lateness_min_excess_us": test["min_excess_us"] if tested_keys else None,
        "lateness_noise_us": test["noise_us"],
        "run_noise_us": test["run_noise_us"],
        "reference_noise_us": test["reference_noise_us"],
        "reference_degrees_of_freedom": (
            th.straggler_reference_noise_df if test["reference_noise_us"] is not None else 0
        ),
        "t_statistic": test["t"] if test["t"] is not None and math.isfinite(test["t"]) else None,
        "degrees_of_freedom": test["df"],
        "p_value_mean": float(test["p_value_mean"]),
        "p_value_min": test["p_value_min"],
        "p_value_one_rank": float(test["p_value_one_rank"]),
        "p_value": p_value,
        "alpha": th.straggler_alpha,
        "consistent": consistent,
        "delay_us_per_step": delay,
        "share_of_step": share,
        "min_share_of_step": th.straggler_min_share_of_step,
        "costly": costly,
        "others_wait_us_per_step": others_wait,
        "others_hidden_wait_us_per_step": others_hidden,
        "others_exposed_wait_us_per_step": others_exposed,
        "verdict": verdict,
        "cause": cause,
    }


def _step_times(
    workers: Sequence[tuple[str, RunViewSpan]], ranks: list[int], m: _Matched
) -> list[Any]:
    """Per step number common to all workers: each rank's duration, their spread, and
    each rank's lateness in that step (µs; ranks without a matched collective in it are
    left out of ``lateness_us``)."""
    per_worker: list[dict[int, float]] = []
    for _, summary in workers:
        per_worker.append({s.number: s.duration_us for s in summary.steps.steps})
    if len(per_worker) < 2:
        return []
    common = set.intersection(*(set(d) for d in per_worker))
    out = []
    for number in sorted(common):
        durations = [d[number] for d in per_worker]
        out.append(
            {
                "number": number,
                "durations_us": {str(r): v for r, v in zip(ranks, durations, strict=True)},
                "spread_us": max(durations) - min(durations),
                "lateness_us": {
                    str(r): late[number] / 1000.0
                    for r, late in zip(ranks, m.step_late, strict=True)
                    if number in late
                },
            }
        )
    return out
