"""Run-level view across the workers of one run (one worker per rank): the same
collective matched across ranks, who waited for whom, how long the transfer itself took,
and whether one rank holds the others back.

Input: ``(worker name, span summary)`` pairs, each summary holding ``health``
(``distributed_info``), ``steps`` and ``communication``
(:func:`.communication.communication_summary`, whose ``sequence`` lists every collective
with its start, end, message size and the exposed pieces of it).
:func:`.run_view_spans.run_view_inputs` chooses these pairs from a run's spans (every
caller uses it).

- rank: ``distributedInfo.rank``; if any worker lacks it, or two workers claim the same
  rank, the worker order (0, 1, …) is used for every worker, with a note.
- matching, and the words skew, wait, lateness, transfer, exposed wait / transfer,
  last rank and delay: :mod:`.run_view_match`, which defines each; bandwidth per kind
  (``kinds``) likewise.
- Units in names: ``_per_step`` = summed over the matched collectives of a step, then
  averaged over the steps that have matched collectives (a collective's step is the
  first rank's, in rank order, that has one); ``_total`` = summed over the profile;
  ``_per_collective`` = averaged over the matched collectives.

Straggler (``straggler``, ``straggler_test``): a rank holds the others back only when it
is both consistent and costly (:func:`.straggler.straggler_test`, which defines both).

Start times are each trace's own clock: ranks on different hosts carry any clock offset
between the hosts into the skew.

Diagnoses (``analysis/rules/communication.py``): ``communication_straggler``; and
``exposed_communication`` per rank, re-qualified with the exact wait/transfer split
(the span-level diagnosis only estimates it from one rank's trace, and on a rank that
waits in every collective it cannot see the wait): the run view lists the span-level
diagnoses it replaces in ``superseded_span_diagnoses``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.analysis.rules import (
    diagnose_run,
    replaces_span_diagnosis,
    straggler_superseded,
)
from tb_kineto_insights.analysis.run_view_match import (
    LARGEST_SKEWS,
    Matched,
    kind_rows,
    match_collectives,
)
from tb_kineto_insights.analysis.run_view_spans import RunViewSpan, rank_of
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.schema.communication import CollectiveCall, CommunicationPanel
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.run_view import RunView, SupersededDiagnosis


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


def run_view(
    workers: Sequence[tuple[str, RunViewSpan]], thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> RunView:
    """The view across ranks as a :class:`~tb_kineto_insights.schema.RunView`:
    :func:`run_summary`, its diagnoses
    (:func:`~tb_kineto_insights.analysis.rules.diagnose_run`) and
    :func:`superseded_span_diagnoses`. ``workers``: ``(name, span summary)`` pairs, one
    per rank (:func:`.run_view_spans.run_view_inputs`). Raises
    ``msgspec.ValidationError`` when a part does not fit its Struct (a bug)."""
    run = run_summary(workers, thresholds)
    diagnoses = diagnose_run(run, workers, thresholds)
    run["diagnoses"] = diagnoses
    run["superseded_span_diagnoses"] = superseded_span_diagnoses(diagnoses)
    return msgspec.convert(run, RunView)


def superseded_span_diagnoses(diagnoses: list[Diagnosis]) -> list[SupersededDiagnosis]:
    """The span-level diagnoses the run-level ones replace: ``{worker, rank, id}`` for
    each run-level diagnosis whose rule says so (``exposed_communication``: the exact
    wait/transfer split of that rank replaces the estimate of its own trace; the
    straggler's own diagnosis of the cause that makes it late: the straggler's measure
    across ranks states what fixing it gives the job). Front ends hide or mark those."""
    out = [
        SupersededDiagnosis(worker=d.evidence["worker"], rank=d.evidence["rank"], id=d.id)
        for d in diagnoses
        if replaces_span_diagnosis(d)
    ]
    for d in diagnoses:
        same = straggler_superseded(d)
        if same is not None:
            out.append(
                SupersededDiagnosis(worker=d.evidence["worker"], rank=d.evidence["rank"], id=same)
            )
    return out


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
    :data:`~.run_view_match.LARGEST_SKEW_RANKS` ranks: the latest ones and the earliest, and
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
    rank_list, rank_source, world = _ranks(workers, notes)
    comms = [s.communication for _, s in workers]
    sequences = [c.sequence for c in comms]
    by_seq = bool(workers) and all(c.seq_source == "args" for c in comms if c.sequence)
    by_seq = by_seq and any(c.sequence for c in comms)
    counts = [c.collective_count for c in comms]
    _collective_notes(comms, counts, rank_list, notes)
    n_workers = len(workers)
    m = match_collectives(sequences, by_seq, rank_list)
    _match_notes(m, n_workers, sequences, notes)
    n_steps = len(m.step_keys)
    rows = _rank_rows(workers, comms, counts, rank_list, m)
    test = st.straggler_test(m, rows, workers, rank_list, th)
    straggler = _straggler_of(test)
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
        "kinds": kind_rows(m, n_steps),
        "largest_skews": sorted(m.largest, key=lambda d: -d["skew_us"])[:LARGEST_SKEWS],
        "steps": _step_times(workers, rank_list, m),
        "straggler": straggler,
        "straggler_test": test,
        "notes": notes,
    }


def _ranks(
    workers: Sequence[tuple[str, RunViewSpan]], notes: list[str]
) -> tuple[list[int], str, int | None]:
    """Each worker's rank (``distributedInfo.rank``, else the worker order), where they
    come from (``distributed_info`` or ``worker_order``) and the world size (the largest
    given, else ``None``); why the worker order is used, or only part of the world was
    profiled, goes to ``notes``."""
    infos = [rank_of(s) for _, s in workers]
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
    return rank_list, rank_source, world


def _collective_notes(
    comms: list[CommunicationPanel], counts: list[int], rank_list: list[int], notes: list[str]
) -> None:
    """Notes on the workers' collectives before matching: different counts per rank
    (``counts``, in worker order), sequences listed only in part."""
    if len(set(counts)) > 1:
        listed = ", ".join(f"rank {r}: {n}" for r, n in sorted(zip(rank_list, counts, strict=True)))
        notes.append(
            f"Workers have different numbers of collectives ({listed}); each keeps its own "
            "numbers, and only collectives found on every rank of their process group are "
            "matched."
        )
    if any(c.sequence_truncated for c in comms):
        notes.append("Some workers list only part of their collectives: matching uses those.")


def _match_notes(
    m: Matched, n_workers: int, sequences: list[list[CollectiveCall]], notes: list[str]
) -> None:
    """The matching's notes, and why nothing could be matched, or the clock caveat."""
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


def _rank_rows(
    workers: Sequence[tuple[str, RunViewSpan]],
    comms: list[CommunicationPanel],
    counts: list[int],
    rank_list: list[int],
    m: Matched,
) -> list[dict[str, Any]]:
    """One row per worker, in worker order (keys in :func:`run_summary`'s ``ranks``)."""
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
                "wait_us_per_step": _ns_per_step_us(m.in_step_ns[i, 0], n_steps),
                "transfer_us_per_step": _ns_per_step_us(m.in_step_ns[i, 1], n_steps),
                "exposed_wait_us_per_step": _ns_per_step_us(m.in_step_ns[i, 2], n_steps),
                "exposed_transfer_us_per_step": _ns_per_step_us(m.in_step_ns[i, 3], n_steps),
                "delay_caused_us_per_step": (
                    st.exact_median([m.step_delay[i].get(k, 0) for k in m.step_keys]) / 1000.0
                    if n_steps
                    else None
                ),
            }
        )
    return rows


#: The keys of ``straggler_test`` that ``straggler`` repeats when the verdict holds.
_STRAGGLER_KEYS: tuple[str, ...] = (
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


def _straggler_of(test: dict[str, Any] | None) -> dict[str, Any] | None:
    """``straggler``: the :data:`_STRAGGLER_KEYS` of ``test`` when its verdict is
    ``straggler``, else ``None``."""
    straggler = None
    if test is not None and test["verdict"] == "straggler":
        straggler = {k: test[k] for k in _STRAGGLER_KEYS}
    return straggler


def _ns_per_step_us(total_ns: Any, n_steps: int) -> float | None:
    return int(total_ns) / 1000.0 / n_steps if n_steps else None


def _step_times(
    workers: Sequence[tuple[str, RunViewSpan]], ranks: list[int], m: Matched
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
