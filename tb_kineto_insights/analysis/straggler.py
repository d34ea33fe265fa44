"""Is one rank consistently late? The straggler test on per-step lateness magnitudes.

Input: the matched collectives of one run (:mod:`.run_view_match`): per collective ``k``
and rank ``r`` the rank's arrival ``s[k, r]`` (its kernel's start, ns) and the profiled
step the collective belongs to.

- **lateness** of rank ``r`` in step ``j``: ``ℓ[r, j] = max over the step's collectives of
  (s[k, r] − min over ranks of s[k, ·])``, how far behind the first rank it arrived at
  the collective where it was furthest behind. The maximum and not the sum: once a rank
  blocks in one collective, the ranks that waited for it reach their next collectives
  late too (DDP queues buckets on one stream), so one late arrival shows in one
  collective, not in all.
- **delay** of rank ``r`` in step ``j``: the largest ``max s[k, ·] − second-latest s[k, ·]``
  over the step's collectives where ``r`` is the unique last rank (0 where it is never
  last): how much earlier everyone else could have started without it.

The test (:func:`lateness_test`) reads ``ℓ`` as a two-way layout, ranks × steps, with
the additive model ``ℓ[r, j] = μ + a_r + b_j + ε[r, j]`` (``b_j``: what every rank
shares in step ``j``, e.g. the first rank's own hiccup; ``ε``: step-to-step noise,
normal with standard deviation ``σ``):

- the **candidate** ``c`` is the rank with the largest mean lateness over the steps;
- its per-step **excess** ``e_j = ℓ[c, j] − mean over the other ranks of ℓ[·, j]`` (the
  step effect cancels: under no straggler the ``e_j`` are independent, normal, mean 0,
  standard deviation ``σ √(1 + 1/(n − 1))``); its mean over the steps is
  ``lateness_excess_us_per_step``, its smallest ``min_excess_us``;
- the run's own noise ``σ̂_run`` = the residual standard deviation of the two-way fit,
  ``Σ (ℓ − row mean − column mean + grand mean)² / ν`` with ``ν = (n − 1)(N − 1)``;
- the **reference noise** ``σ₀`` (``reference_noise_us``): the same residual standard
  deviation measured on balanced real runs, as a share of the step
  (``straggler_reference_noise_share_of_step`` × this run's mean step time), with the
  degrees of freedom it was measured on (``straggler_reference_noise_df``, ``ν₀``):
  ``benchmarks/straggler_false_alarms.py`` prints both from the three balanced h200x2
  runs (0.050 of the step on 12 degrees of freedom).

Two statistics, each a one-sided p-value for the candidate:

1. **mean** (``p_value_mean``): Student's t of the mean excess against the noise pooled
   from the run and the reference, ``σ̃² = (ν σ̂_run² + ν₀ σ₀²) / (ν + ν₀)``:
   ``t = mean(e) / (σ̃ √(1/N + 1/((n − 1) N)))`` on ``ν + ν₀`` degrees of freedom (the
   pooled-variance t-test; with ``ν₀ = 0`` the two-way t-test, with 2 ranks the paired
   t-test; Smyth 2004's moderated t with the reference as its prior). Without the
   reference, 2 ranks × 3 steps estimate the noise from 2 degrees of freedom and need
   t ≥ 9.9: a rank 10 % of the step late in every step is named in half the runs.
2. **every step** (``p_value_min``): the smallest excess in units of the reference,
   ``m = min(e) / (σ₀ √(1 + 1/(n − 1)))``; under no straggler ``P(min ≥ m) =
   E[Φ̄(m x)^N]`` over ``x = √(W/ν₀)``, ``W ~ χ²(ν₀)`` (:func:`min_excess_sf`; the
   reference is independent of the run, so the ``e_j`` are independent given it). A
   sign test ("last in k of N steps") with the magnitude kept: it names a rank late by
   ≥ 10 % of the step in each of 3 steps with a small spread, whose mean alone is
   within what two balanced ranks reach (the real spread between two balanced H200
   ranks reaches 13 % of the step).

``p_value_one_rank = min(1, 2 · min(p_mean, p_min))`` (Bonferroni over the two) and
``p_value = min(1, n · p_value_one_rank)`` (the candidate was picked among ``n``
ranks); consistent when ``p_value ≤ straggler_alpha``. Without a step time (no
reference) only the mean test is made, on ``ν`` degrees of freedom: ``p_value = min(1, n
· p_mean)``.

False alarms: under normal noise of the reference's size and no rank effect, the chance
that *some* rank is called consistent is at most ``straggler_alpha`` for any ``n ≥ 2``
and ``N ≥ 2``. The reference is what makes 3 steps of 2 ranks decidable, and its price:
a run whose balanced jitter is larger than the reference's (as a share of the step)
alarms more often at few ranks and steps: on synthetic runs (``benchmarks/
straggler_false_alarms.py``, ``--jitter-scale``) 2 ranks × 3 steps with 1.5× / 2× the
real jitter alarm in a few % of the runs (``benchmarks/RESULTS.md``); set
``straggler_reference_noise_share_of_step`` to a noisier cluster's own. The per-collective
arrivals within a step are no extra evidence: they move together (``ddp_default``
rank 1 is later at 13 of 13 collectives in a balanced step), so a test over collectives
would count one late step 13 times. A rank whose lateness is consistent but small is no
straggler: the verdict also needs its cost (``delay``, median over steps) to be at least
``straggler_min_share_of_step`` of the other ranks' step. The rate of that full verdict
on runs synthesised from the real h200x2 ranks is in ``benchmarks/RESULTS.md``.

The verdict (:func:`straggler_test`; the view's ``straggler`` and ``straggler_test``): a
rank holds the others back only when it is both

- **consistent**: its per-step lateness stands out from the others' beyond the
  step-to-step noise (the test above): per step, each rank's lateness is how far behind
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

- **per collective** (:func:`~.straggler_collectives.collective_test`, ``basis`` =
  ``collectives``): when the per-step test finds no straggler, the rank the others wait
  for in most collectives (FSDP, tensor parallelism: the ranks re-align at every
  collective, so its per-step lateness stays small) is one when it is last in more
  collectives than chance allows for ``n`` ranks and in most collectives of most steps,
  and the exposed part of the others' wait for it, summed over the collectives of a
  step, is at least ``straggler_min_share_of_step`` of their step: that is then its
  ``delay_us_per_step`` and ``share_of_step``, ``last_steps`` the steps where it was last
  in most collectives, and its cause is read before the collectives it is late to
  (``per_collective``: the test's numbers, also when it does not hold). The lateness
  keys stay those of the per-step test.

The binomial tail (:func:`binomial_tail`) and the exact median
(:func:`exact_median`) are the statistics' helpers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from tb_kineto_insights.analysis.run_view_spans import RunViewSpan
from tb_kineto_insights.analysis.straggler_cause import straggler_cause
from tb_kineto_insights.analysis.straggler_collectives import binomial_tail as binomial_tail
from tb_kineto_insights.analysis.straggler_collectives import collective_test
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.schema.communication import CollectiveCall


class MatchedLateness(Protocol):
    """What :func:`straggler_test` reads of the collectives matched across ranks
    (:class:`~.run_view_match.Matched`; ns; per worker index, per step key)."""

    @property
    def matched_of(self) -> list[int]: ...

    @property
    def last_count(self) -> list[int]: ...

    @property
    def skews(self) -> list[float]: ...

    @property
    def step_keys(self) -> list[Any]: ...

    @property
    def step_late(self) -> list[dict[Any, int]]: ...

    @property
    def step_delay(self) -> list[dict[Any, int]]: ...

    @property
    def late_at(self) -> list[dict[Any, tuple[int, list[int], list[CollectiveCall]]]]: ...

    @property
    def last_at(self) -> list[list[tuple[Any, list[int], list[CollectiveCall]]]]: ...

    @property
    def step_collectives(self) -> list[dict[Any, int]]: ...

    @property
    def step_last(self) -> list[dict[Any, int]]: ...

    @property
    def waited_for_ns(self) -> list[dict[Any, float]]: ...

    @property
    def exposed_waited_for_ns(self) -> list[dict[Any, float]]: ...


def student_t_sf(t: float, df: int) -> float:
    """``P(T ≥ t)`` for Student's t with ``df`` degrees of freedom (one-sided upper
    tail), exact for integer ``df`` by the finite series of Abramowitz & Stegun 26.7.3
    and 26.7.4 (``θ = atan(t / √df)``); beyond ``df = 10000`` the normal tail
    (within 0.3 % of the t tail at t = 3). ``t = ±inf`` gives
    0 / 1.

    Raises:
        ValueError: ``df < 1`` or ``t`` is NaN.
    """
    if df < 1 or math.isnan(t):
        raise ValueError(f"student_t_sf needs df >= 1 and a number t, got t={t}, df={df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if t < 0:
        return 1.0 - student_t_sf(-t, df)
    if df > 10000:
        return 0.5 * math.erfc(t / math.sqrt(2.0))
    theta = math.atan(t / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    c2 = c * c
    if df % 2 == 1:  # A = (2/π)(θ + sinθ (cosθ + 2/3 cos³θ + ... ))
        total, term = 0.0, c
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        inside = (2.0 / math.pi) * (theta + s * total) if df > 1 else 2.0 * theta / math.pi
    else:  # A = sinθ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + ...)
        total, term = 0.0, 1.0
        for k in range(1, df // 2 + 1):
            total += term
            term *= c2 * (2 * k - 1) / (2 * k)
        inside = s * total
    return max(0.0, min(1.0, 0.5 * (1.0 - inside)))


def step_lateness(
    start_ns: np.ndarray, step_index: np.ndarray, n_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per rank and step, the lateness and the delay it causes (module docstring).

    Args:
        start_ns: K × M int64, rank ``m``'s arrival (kernel start, ns) at the k-th
            matched collective of one process group.
        step_index: K ints, the collective's step as an index in ``[0, n_steps)``, or
            ``-1`` for a collective outside the profiled steps (left out).
        n_steps: number of step columns.

    Returns:
        ``(lateness, delay)``, both M × n_steps int64 ns; ``lateness`` is ``-1`` where a
        rank has no collective in that step.
    """
    start = np.asarray(start_ns, dtype=np.int64)
    steps = np.asarray(step_index, dtype=np.int64)
    k_count, m_count = start.shape if start.ndim == 2 else (0, 0)
    lateness = np.full((m_count, n_steps), -1, dtype=np.int64)
    delay = np.zeros((m_count, n_steps), dtype=np.int64)
    keep = steps >= 0
    if not k_count or not keep.any():
        return lateness, delay
    start, steps = start[keep], steps[keep]
    late = start - start.min(axis=1, keepdims=True)  # K × M
    cols = np.broadcast_to(steps[:, None], late.shape)
    rows = np.broadcast_to(np.arange(m_count)[None, :], late.shape)
    np.maximum.at(lateness, (rows.ravel(), cols.ravel()), late.ravel())
    if m_count >= 2:
        latest = start.max(axis=1)
        ordered = np.sort(start, axis=1)
        unique_last = (ordered[:, -1] > ordered[:, -2]) & ((start == latest[:, None]).sum(1) == 1)
        who = np.argmax(start, axis=1)
        gap = latest - ordered[:, -2]
        sel = np.flatnonzero(unique_last)
        np.maximum.at(delay, (who[sel], steps[sel]), gap[sel])
    return lateness, delay


def _chi_grid(df: int) -> tuple[np.ndarray, np.ndarray]:
    """Points ``x`` and weights (density × trapezoid width) of ``x = √(W/df)``,
    ``W ~ χ²(df)``: density ``2 (df/2)^(df/2) / Γ(df/2) · x^(df−1) e^(−df x²/2)``, on
    4,000 points of ``(0, 1 + 12/√(2 df)]`` (12 standard deviations of ``x`` above its
    mode)."""
    hi = 1.0 + 12.0 / math.sqrt(2.0 * df)
    x = np.linspace(0.0, hi, 4001)[1:]
    log_f = (
        math.log(2.0)
        + (df / 2.0) * math.log(df / 2.0)
        - math.lgamma(df / 2.0)
        + (df - 1) * np.log(x)
        - df * x * x / 2.0
    )
    w = np.exp(log_f) * (x[1] - x[0])
    w[-1] *= 0.5  # trapezoid (the density is 0 at x = 0 for df ≥ 2)
    return x, w


def min_excess_sf(m: float, steps: int, df: int) -> float:
    """``P(min of steps independent N(0, 1) ≥ m · x)`` averaged over ``x = √(W/df)``,
    ``W ~ χ²(df)``: the chance that ``steps`` independent excesses, each in units of a
    noise estimated on ``df`` degrees of freedom independently of them, are all at least
    ``m`` (module docstring, "every step"). With ``steps = 1`` it is Student's t tail
    (:func:`student_t_sf`; numerically within 1e-6 relative of it for ``3 ≤ df ≤ 10000``
    by the trapezoid rule on 4,000 points); beyond ``df = 10000`` the known-noise
    ``Φ̄(m)^steps``.

    Raises:
        ValueError: ``steps < 1``, ``df < 3`` (the grid is not accurate there) or ``m``
            is NaN.
    """
    if steps < 1 or df < 3 or math.isnan(m):
        raise ValueError(f"min_excess_sf needs steps >= 1, df >= 3 and a number m, got {m=}")
    if math.isinf(m):
        return 0.0 if m > 0 else 1.0
    if df > 10000:
        return (0.5 * math.erfc(m / math.sqrt(2.0))) ** steps
    x, w = _chi_grid(df)
    tail = np.array([0.5 * math.erfc(v) for v in (m * x / math.sqrt(2.0)).tolist()])
    return max(0.0, min(1.0, float((tail**steps * w).sum())))


def lateness_test(
    lateness_us: np.ndarray, reference_noise_us: float | None = None, reference_df: int = 0
) -> dict[str, Any]:
    """The test of the module docstring on an ``n × N`` matrix of per-step lateness (µs;
    ranks × steps, no missing values), with the reference noise ``σ₀`` in µs (the
    reference share × the run's step time) measured on ``reference_df`` degrees of
    freedom; ``None`` or ``reference_df < 3``: the run's own noise only, mean test only.

    Returns a dict: ``candidate`` (row index, the largest mean lateness; ``None`` for
    fewer than 2 rows), ``excess_us`` (its mean excess over the others', per step),
    ``min_excess_us`` (its smallest per-step excess), ``noise_us`` (the noise the mean
    test used, ``σ̃``; ``None`` without degrees of freedom), ``run_noise_us``
    (``σ̂_run``; ``None`` for one step), ``reference_noise_us``, ``t``, ``df`` (of the
    mean test), ``p_value_mean``, ``p_value_min`` (``None`` without the reference),
    ``p_value_one_rank``, ``p_value`` (``1.0`` when the test cannot be made: fewer than 2
    ranks or 2 steps; ``t = inf`` and ``p = 0`` when the noise is 0
    and the excess positive).
    """
    x = np.asarray(lateness_us, dtype=np.float64)
    use_ref = reference_noise_us is not None and reference_noise_us > 0 and reference_df >= 3
    ref_df = reference_df if use_ref else 0
    out: dict[str, Any] = {
        "candidate": None,
        "excess_us": None,
        "min_excess_us": None,
        "noise_us": None,
        "run_noise_us": None,
        "reference_noise_us": reference_noise_us if use_ref else None,
        "t": None,
        "df": 0,
        "p_value_mean": 1.0,
        "p_value_min": None,
        "p_value_one_rank": 1.0,
        "p_value": 1.0,
    }
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 1:
        return out
    n, steps = x.shape
    row = x.mean(axis=1)
    c = int(np.argmax(row))
    excess_each = x[c] - (x.sum(axis=0) - x[c]) / (n - 1)
    excess = float(row[c] - (row.sum() - row[c]) / (n - 1))
    out["candidate"], out["excess_us"] = c, excess
    out["min_excess_us"] = float(excess_each.min())
    run_df = (n - 1) * (steps - 1)
    ss = 0.0
    if run_df >= 1:
        resid = x - row[:, None] - x.mean(axis=0)[None, :] + x.mean()
        # residuals below float rounding of the inputs are 0 (a lateness repeated exactly)
        scale = max(1.0, float(np.abs(x).max()))
        resid[np.abs(resid) < 1e-9 * scale] = 0.0
        ss = float((resid * resid).sum())
        out["run_noise_us"] = math.sqrt(ss / run_df)
    df = run_df + ref_df
    if steps < 2:  # one step says nothing of consistency, whatever the reference
        return out
    ref_ss = ref_df * float(reference_noise_us or 0.0) ** 2
    noise = math.sqrt((ss + ref_ss) / df)
    se = noise * math.sqrt(1.0 / steps + 1.0 / ((n - 1) * steps))
    t = excess / se if se > 0 else (math.inf if excess > 0 else 0.0)
    p_mean = student_t_sf(t, df)
    p_one = p_mean
    if use_ref:
        m = out["min_excess_us"] / (float(reference_noise_us or 0.0) * math.sqrt(n / (n - 1)))
        p_min = min_excess_sf(m, steps, ref_df)
        out["p_value_min"] = p_min
        p_one = min(1.0, 2.0 * min(p_mean, p_min))
    out.update(
        noise_us=noise,
        t=t,
        df=df,
        p_value_mean=p_mean,
        p_value_one_rank=p_one,
        p_value=min(1.0, n * p_one),
    )
    return out


def exact_median(values: list[int]) -> float:
    """``statistics.median`` (exact on ints: the mean of the middle two as a float),
    imported here: ``statistics`` would add to every start-up
    (``benchmarks/RESULTS.md``) and only runs of several workers need it."""
    import statistics

    return statistics.median(values)


def straggler_test(
    m: MatchedLateness,
    rows: list[dict[str, Any]],
    workers: Sequence[tuple[str, RunViewSpan]],
    rank_list: list[int],
    th: Thresholds,
) -> dict[str, Any] | None:
    """The best straggler candidate and its two tests (module docstring, The verdict;
    :func:`lateness_test` on the ranks' per-step lateness), as the dict of the view's
    ``straggler_test`` (keys in :func:`~.run_view.run_summary`); ``None`` with fewer
    than 2 ranks with matched collectives. ``m``: the matched collectives; ``rows``: the
    view's rank rows (``mean_step_us``, ``wait_us_per_step``,
    ``exposed_wait_us_per_step`` read; in worker order, like ``workers`` and
    ``rank_list``)."""
    candidates = [i for i, c in enumerate(m.matched_of) if c]
    n = len(candidates)
    if n < 2 or not m.skews:
        return None
    # steps where every tested rank has a matched collective (the test needs no gaps)
    tested_keys = [k for k in m.step_keys if all(k in m.step_late[i] for i in candidates)]
    lateness_us = _lateness_us(m, candidates, tested_keys)
    reference_us = _reference_noise_us(rows, candidates, th)
    test = lateness_test(
        lateness_us if tested_keys else lateness_us[:, :0],
        reference_us,
        th.straggler_reference_noise_df,
    )
    if test["candidate"] is not None and tested_keys:
        top = candidates[test["candidate"]]
    else:  # no step with every rank: the rank that causes the most delay
        top = max(candidates, key=lambda i: (_median_delay_us(m, i), m.last_count[i]))
    last_steps = _last_steps(m, candidates, tested_keys, top)
    p_value = float(test["p_value"])
    delay = _median_delay_us(m, top) if m.step_keys else 0.0
    share, others_wait, others_hidden, others_exposed = _others_loss(m, rows, top, delay)
    excess = test["excess_us"] if tested_keys else None
    consistent = bool(tested_keys) and excess is not None and excess > 0
    consistent = consistent and p_value <= th.straggler_alpha
    costly = share is not None and share >= th.straggler_min_share_of_step
    verdict = _verdict(consistent, costly)
    per = collective_test(m, rows, candidates, tested_keys, th)
    basis = "steps"
    if verdict != "straggler" and per is not None and per["consistent"] and per["costly"]:
        # re-aligned at every collective: the rank the others wait for in most of them
        basis, verdict, top = "collectives", "straggler", per["index"]
        last_steps = per["steps_mostly_last"]
        delay = per["exposed_waited_for_us_per_step"]
        _, others_wait, others_hidden, others_exposed = _others_loss(m, rows, top, delay)
        share = per["share_of_step"]
        consistent = costly = True
    matched = m.matched_of[top]
    cause = None
    if verdict == "straggler":
        others_of = [workers[j][1] for j in candidates if j != top]
        if basis == "collectives":  # every collective it is last to, summed per step
            keys = set(tested_keys)
            late_collectives = [
                (
                    entries[members_of.index(top)],
                    [e for j, e in zip(members_of, entries, strict=True) if j != top],
                )
                for step, members_of, entries in m.last_at[top]
                if step in keys
            ]
            per_step = len(late_collectives) / len(tested_keys) if tested_keys else None
        else:
            late_collectives = _late_collectives(m, top, tested_keys)
            per_step = None
        cause = straggler_cause(workers[top][1], others_of, delay, th, late_collectives, per_step)
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
        "basis": basis,
        "per_collective": (
            {k: v for k, v in per.items() if k != "index"} | {"rank": rank_list[per["index"]]}
            if per is not None
            else None
        ),
    }


def _lateness_us(m: MatchedLateness, candidates: list[int], tested_keys: list[Any]) -> np.ndarray:
    """``n × N`` per-step lateness (µs) of the ``candidates`` (rows) in the steps
    ``tested_keys`` (columns)."""
    return np.array(
        [[m.step_late[i][k] / 1000.0 for k in tested_keys] for i in candidates],
        dtype=np.float64,
    ).reshape(len(candidates), len(tested_keys))


def _reference_noise_us(
    rows: list[dict[str, Any]], candidates: list[int], th: Thresholds
) -> float | None:
    """The reference noise in µs; ``None`` unless every candidate has a mean step."""
    # the reference noise in µs: its share of the step × the tested ranks' mean step
    tested_steps_us = [
        float(rows[i]["mean_step_us"]) for i in candidates if rows[i].get("mean_step_us")
    ]
    return (
        th.straggler_reference_noise_share_of_step * float(np.mean(tested_steps_us))
        if len(tested_steps_us) == len(candidates)
        else None
    )


def _median_delay_us(m: MatchedLateness, i: int) -> float:
    """Median over the steps of the delay worker ``i`` causes per step (µs; 0 in a step
    where it is never last, and without steps)."""
    values = [m.step_delay[i].get(k, 0) for k in m.step_keys]
    return exact_median(values) / 1000.0 if values else 0.0


def _last_steps(m: MatchedLateness, candidates: list[int], tested_keys: list[Any], top: int) -> int:
    """The tested steps where ``top`` caused the largest delay (> 0)."""
    last_steps = 0
    for step in tested_keys:
        delays = [(m.step_delay[i].get(step, 0), i) for i in candidates]
        best, who = max(delays)
        if best > 0 and who == top:
            last_steps += 1
    return last_steps


def _others_loss(
    m: MatchedLateness, rows: list[dict[str, Any]], top: int, delay: float
) -> tuple[float | None, float | None, float | None, float | None]:
    """What the other ranks with matched collectives lose to ``top``: ``delay`` as a
    share of their mean step, their mean wait per step, its hidden and its exposed
    part (µs; ``None`` where a rank row lacks the value)."""
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
    return share, others_wait, others_hidden, others_exposed


def _verdict(consistent: bool, costly: bool) -> str:
    """``straggler`` when both hold, else which of the two fails."""
    if consistent and costly:
        verdict = "straggler"
    elif not consistent and not costly:
        verdict = "neither consistent nor costly"
    elif not consistent:
        verdict = "not consistent"
    else:
        verdict = "not costly"
    return verdict


def _late_collectives(
    m: MatchedLateness, top: int, tested_keys: list[Any]
) -> list[tuple[CollectiveCall, list[CollectiveCall]]]:
    """``top``'s entry and the others' of the collectives it is late to."""
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
    return late_collectives
