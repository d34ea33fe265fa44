"""The per-collective straggler test: the rank the others wait for in most collectives.

In jobs whose collectives sit inside the step (FSDP's all-gathers and reduce-scatters,
tensor parallelism) the ranks re-align at every collective: a rank that is slow before
each of them is late by a little many times a step, so its per-step lateness
(:mod:`.straggler`, the largest over the step's collectives) stays within the noise while
the others wait for it in most collectives (DESIGN.md, "per-collective wait").

Input: the matched collectives (:class:`~.run_view_match.Matched`) inside the steps
every tested rank has (``tested_keys``); per rank ``r`` and step ``j``:
``collectives[r, j]`` (matched collectives of that step it is in), ``last[r, j]`` (those
where it is the unique last to arrive), ``waited_for[r, j]`` (summed over those, the
mean over the other ranks of their wait for it: latest start − their start) and
``exposed_waited_for[r, j]`` (the same of the exposed part of that wait: not hidden
behind their own compute).

- **candidate**: the rank with the largest mean ``waited_for`` per step;
- **consistent** over collectives *and* over steps: last in ``k`` of the ``K``
  collectives of the tested steps with ``p_value = min(1, n · P(Bin(K, 1/n) ≥ k))``
  (under no straggler each of ``n`` ranks is last with chance ``1/n``; × ``n`` for the
  pick) at most ``straggler_alpha``, and last in more than half of the collectives in
  more than half of the tested steps (``steps_mostly_last``: a DDP run's buckets queue
  on one stream, so one late step makes a rank last in all of that step's collectives;
  the ``h200x2`` balanced DDP runs flip from rank to rank between steps);
- **costly**: ``exposed_waited_for_us_per_step`` (mean over the tested steps: the part of
  the others' wait that lengthens their step) ÷ the other ranks' mean step
  (``share_of_step``) at least ``straggler_min_share_of_step``.

h200x2 ``fsdp``: rank 1 last in 141 of 190 collectives, in most of them in 4 of 5
steps; rank 0 waits 46.3 ms/step for it, 31.7 ms/step exposed (40 % of its step):
consistent and costly. ``ddp_default``: rank 1 last in 32 of 65 (p = 1), ``ddp_tuned``
rank 1 in 16 of 20 but 0.16 ms/step exposed (0.9 %): neither is a straggler.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from tb_kineto_insights.analysis.thresholds import Thresholds


class MatchedCollectives(Protocol):
    """What :func:`collective_test` reads of :class:`~.run_view_match.Matched`."""

    @property
    def step_collectives(self) -> list[dict[Any, int]]: ...

    @property
    def step_last(self) -> list[dict[Any, int]]: ...

    @property
    def waited_for_ns(self) -> list[dict[Any, float]]: ...

    @property
    def exposed_waited_for_ns(self) -> list[dict[Any, float]]: ...


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


def collective_test(
    m: MatchedCollectives,
    rows: list[dict[str, Any]],
    candidates: list[int],
    tested_keys: list[Any],
    th: Thresholds,
) -> dict[str, Any] | None:
    """The per-collective test (module docstring) over the worker indexes
    ``candidates`` in the steps ``tested_keys``; ``rows``: the view's rank rows (their
    ``mean_step_us`` read). Keys: ``index`` (the candidate's worker index),
    ``last_count``, ``collectives`` (in the tested steps), ``p_value``,
    ``steps_mostly_last``, ``tested_steps``, ``waited_for_us_per_step``,
    ``exposed_waited_for_us_per_step`` (µs, means over the tested steps),
    ``share_of_step``, ``consistent``, ``costly``. None with fewer than 2 candidates or
    no tested step."""
    n, steps = len(candidates), len(tested_keys)
    if n < 2 or steps == 0:
        return None

    def per_step_us(values: dict[Any, float]) -> float:
        return sum(values.get(k, 0.0) for k in tested_keys) / steps / 1000.0

    top = max(candidates, key=lambda i: (per_step_us(m.waited_for_ns[i]), -i))
    last = sum(m.step_last[top].get(k, 0) for k in tested_keys)
    total = sum(m.step_collectives[top].get(k, 0) for k in tested_keys)
    mostly = sum(
        1 for k in tested_keys if 2 * m.step_last[top].get(k, 0) > m.step_collectives[top].get(k, 0)
    )
    p_value = min(1.0, n * binomial_tail(last, total, 1.0 / n))
    waited = per_step_us(m.waited_for_ns[top])
    exposed = per_step_us(m.exposed_waited_for_ns[top])
    others = [float(rows[j]["mean_step_us"]) for j in candidates if j != top]
    others = [x for x in others if x > 0]
    share = exposed / float(np.mean(others)) if others else None
    consistent = p_value <= th.straggler_alpha and 2 * mostly > steps
    return {
        "index": top,
        "last_count": last,
        "collectives": total,
        "p_value": p_value,
        "steps_mostly_last": mostly,
        "tested_steps": steps,
        "waited_for_us_per_step": waited,
        "exposed_waited_for_us_per_step": exposed,
        "share_of_step": share,
        "consistent": consistent,
        "costly": share is not None and share >= th.straggler_min_share_of_step,
    }
