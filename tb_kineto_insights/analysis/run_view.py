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

import math
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.analysis.rules import diagnose_run, replaces_span_diagnosis
from tb_kineto_insights.analysis.run_view_match import (
    LARGEST_SKEWS,
    Matched,
    kind_rows,
    match_collectives,
)
from tb_kineto_insights.analysis.run_view_spans import RunViewSpan, rank_of
from tb_kineto_insights.analysis.straggler_cause import straggler_cause
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.run_view import RunView, SupersededDiagnosis


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
    m = match_collectives(sequences, by_seq, rank_list)
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
        "kinds": kind_rows(m, n_steps),
        "largest_skews": sorted(m.largest, key=lambda d: -d["skew_us"])[:LARGEST_SKEWS],
        "steps": _step_times(workers, rank_list, m),
        "straggler": straggler,
        "straggler_test": test,
        "notes": notes,
    }


def _per_step(total_ns: Any, n_steps: int) -> float | None:
    return int(total_ns) / 1000.0 / n_steps if n_steps else None


def _straggler_test(
    m: Matched,
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
