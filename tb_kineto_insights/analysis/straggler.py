"""Is one rank consistently late? The straggler test on per-step lateness magnitudes.

Input: the matched collectives of one run (:mod:`.run_view`): per collective ``k`` and
rank ``r`` the rank's arrival ``s[k, r]`` (its kernel's start, ns) and the profiled step
the collective belongs to.

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
shares in step ``j``, e.g. the first rank's own hiccup; ``ε``: step-to-step noise):

- the **candidate** is the rank with the largest mean lateness over the steps;
- its **excess** = its mean lateness − the other ranks' mean lateness (µs per step);
- the **noise** ``σ̂`` = the residual standard deviation of the two-way fit,
  ``Σ (ℓ − row mean − column mean + grand mean)² / ((n − 1)(N − 1))``: the step-to-step
  spread of lateness once rank and step effects are taken out;
- ``t = excess / (σ̂ · √(1/N + 1/((n − 1) N)))``, Student's t with ``(n − 1)(N − 1)``
  degrees of freedom (with 2 ranks this is exactly the paired t-test of the two ranks'
  per-step lateness); the one-sided tail ``P(T ≥ t)`` (``p_value_one_rank``) is
  multiplied by ``n`` (Bonferroni: the candidate was picked among ``n`` ranks):
  ``p_value = min(1, n · P(T ≥ t))``. Consistent when ``p_value ≤ straggler_alpha``.

False alarms: with independent normal noise and no rank effect the chance that *some*
rank is called consistent is at most ``straggler_alpha`` (Bonferroni is conservative),
for any number of ranks ``n ≥ 2`` and steps ``N ≥ 2``. The size of the effect enters
through the noise: 37 ms of lateness in each step with a spread under 1 ms is not chance
at N = 3 (t ≈ 64 with 2 ranks), which a test of *who* was last (the sign test used before)
can never say with 2 ranks and fewer than 5 steps. A rank whose lateness is consistent but
small is no straggler: the verdict also needs its cost (``delay``, median over steps) to be
at least ``straggler_min_share_of_step`` of the other ranks' step. The rate of that full
verdict on runs synthesised from the real h200x2 ranks (``benchmarks/
straggler_false_alarms.py``) is in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


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


def lateness_test(lateness_us: np.ndarray) -> dict[str, Any]:
    """The two-way test of the module docstring on an ``n × N`` matrix of per-step
    lateness (µs; ranks × steps, no missing values).

    Returns a dict: ``candidate`` (row index, the largest mean lateness; ``None`` for
    fewer than 2 rows), ``excess_us`` (its mean lateness − the others', per step),
    ``noise_us`` (``σ̂``; ``None`` without residual degrees of freedom), ``t``, ``df``,
    ``p_value_one_rank``, ``p_value`` (``1.0`` when the test cannot be made: fewer than
    2 ranks or 2 steps; ``t = inf`` and ``p = 0`` when the residuals are all 0 and the
    excess is positive: a perfectly repeated lateness).
    """
    x = np.asarray(lateness_us, dtype=np.float64)
    out: dict[str, Any] = {
        "candidate": None,
        "excess_us": None,
        "noise_us": None,
        "t": None,
        "df": 0,
        "p_value_one_rank": 1.0,
        "p_value": 1.0,
    }
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 1:
        return out
    n, steps = x.shape
    row = x.mean(axis=1)
    c = int(np.argmax(row))
    excess = float(row[c] - (row.sum() - row[c]) / (n - 1))
    out["candidate"], out["excess_us"] = c, excess
    df = (n - 1) * (steps - 1)
    if df < 1:
        return out
    resid = x - row[:, None] - x.mean(axis=0)[None, :] + x.mean()
    # residuals below float rounding of the inputs are 0 (a lateness repeated exactly)
    scale = max(1.0, float(np.abs(x).max()))
    resid[np.abs(resid) < 1e-9 * scale] = 0.0
    noise = math.sqrt(float((resid * resid).sum()) / df)
    se = noise * math.sqrt(1.0 / steps + 1.0 / ((n - 1) * steps))
    t = excess / se if se > 0 else (math.inf if excess > 0 else 0.0)
    p_one = student_t_sf(t, df)
    out.update(noise_us=noise, t=t, df=df, p_value_one_rank=p_one, p_value=min(1.0, n * p_one))
    return out
