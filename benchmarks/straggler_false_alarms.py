"""False alarms and power of the straggler rule (issue 27), measured on runs synthesised
from the real ranks of ``../shared/traces/h200x2``.

Jitter from the real runs: in each balanced two-rank run (``ddp_default``, ``ddp_tuned``,
``fsdp``) and each profiled step, the difference of the two ranks' lateness (``run_view``
``steps[].lateness_us``, :func:`tb_kineto_insights.analysis.straggler.step_lateness`) as
a share of the run's mean step time: ``d`` (15 values, up to 13 % of the step). A rank's
arrival *offset* in a step is drawn from the symmetric pool ``±d/√2`` (30 values), so
that the difference of two independent ranks' offsets has the variance of the real
``d`` (offsets of ``±d/2``, what the two ranks of one real step had, would give two
independent ranks half the real variance of their difference). A synthetic run of ``n``
ranks and ``N`` steps draws every rank's offset in every step from that pool (a
smoothed bootstrap that keeps the pool's variance, :func:`draw`; seeded), so the
step-to-step spread of lateness is the real one (``--jitter-scale`` multiplies it: a
noisier cluster than the reference). A straggler arrives at least ``late_fraction`` of
the step after the latest other rank in every step (the delay it causes the others),
plus the real spread between two ranks (the absolute difference of two draws from the
pool): late by at least that share of the step in every step. Each step holds one
collective whose arrivals are the offsets (the lateness of a step is the lateness at
its one collective); the rule then runs unchanged on them:
:func:`~tb_kineto_insights.analysis.straggler.step_lateness` →
:func:`~tb_kineto_insights.analysis.straggler.lateness_test` with the reference noise of
the thresholds (consistent: ``p_value ≤ straggler_alpha``) and costly (median delay over
the steps ≥ ``straggler_min_share_of_step`` of the step), as ``straggler.straggler_test``
does.

The reference noise (``straggler_reference_noise_share_of_step`` on
``straggler_reference_noise_df`` degrees of freedom) is measured here too
(:func:`reference_noise`: the pooled two-way residual standard deviation of the three
balanced runs' lateness, as a share of each run's mean step) and printed first.

The per-collective test (``straggler_collectives.collective_test``, for ranks that
re-align at every collective) gets its own columns: :func:`collective_trial`.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/straggler_false_alarms.py [--trials 500]``;
prints the table of ``benchmarks/RESULTS.md`` ("Straggler rule").
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.analysis.straggler_collectives import collective_test
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds

REPO = Path(__file__).resolve().parents[1]
H200X2 = REPO.parent / "shared" / "traces" / "h200x2"
BALANCED = ("ddp_default", "ddp_tuned", "fsdp")
RANKS = (2, 8, 64, 1024)
STEPS = (3, 4, 5, 20)
#: the synthetic step, µs (offsets are shares of it)
STEP_US = 10_000.0


@functools.cache
def balanced_lateness(h200x2: Path = H200X2) -> tuple[tuple[np.ndarray, float], ...]:
    """Per balanced h200x2 run: its ranks × steps lateness (µs, 2 × 5) and its mean step
    time (µs, the mean of the ranks' ``mean_step_us``), as ``run_view`` tests them.

    Raises:
        FileNotFoundError: a run folder does not hold 2 rank traces.
    """
    from tb_kineto_insights.summary import summarize_file, summarize_run

    out = []
    for folder in BALANCED:
        paths = sorted((h200x2 / folder).glob("rank*.pt.trace.json.gz"))
        if len(paths) != 2:
            raise FileNotFoundError(f"{h200x2 / folder}: expected 2 rank traces")
        run = summarize_run([(p.name, summarize_file(str(p))) for p in paths])
        step_us = float(np.mean([r.mean_step_us for r in run.ranks]))
        ranks = [str(r.rank) for r in run.ranks]
        late = np.array(
            [[step.lateness_us[r] for step in run.steps] for r in ranks], dtype=np.float64
        )
        out.append((late, step_us))
    return tuple(out)


def reference_noise(h200x2: Path = H200X2) -> tuple[float, int]:
    """``(share of the step, degrees of freedom)``: the residual standard deviation of
    the two-way (ranks × steps) fit of the balanced runs' lateness, pooled over the runs
    with each run's sum of squares divided by its mean step squared:
    ``√(Σ_runs SS / T² ÷ Σ_runs (n − 1)(N − 1))``."""
    ss, df = 0.0, 0
    for late, step_us in balanced_lateness(h200x2):
        resid = late - late.mean(1, keepdims=True) - late.mean(0, keepdims=True) + late.mean()
        ss += float((resid**2).sum()) / step_us**2
        df += (late.shape[0] - 1) * (late.shape[1] - 1)
    return math.sqrt(ss / df), df


@functools.cache
def real_offsets(h200x2: Path = H200X2) -> np.ndarray:
    """The pool of per-rank, per-step arrival offsets (shares of the step): ``±d/√2`` for
    each real step's difference ``d`` of the two ranks' lateness (module docstring);
    1-D float64, symmetric.

    Raises:
        FileNotFoundError: a run folder is missing.
    """
    pool: list[float] = []
    for late, step_us in balanced_lateness(h200x2):
        d = (late[1] - late[0]) / step_us / math.sqrt(2.0)
        pool.extend(d.tolist())
        pool.extend((-d).tolist())
    return np.array(pool, dtype=np.float64)


def draw(pool: np.ndarray, size: int | tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A smoothed bootstrap from ``pool`` that keeps its variance (Silverman 1986,
    §6.4.1, the shrunk smoothed bootstrap): a value drawn with replacement plus normal
    noise of Silverman's bandwidth ``h = 1.06 σ m^(-1/5)`` (``m`` values), divided by
    ``√(1 + h²/σ²)`` (the pool's mean is 0). Without the noise, 30 distinct values repeat
    exactly, and a lateness repeated to the nanosecond in every step has no noise at all
    (t = inf), which real clocks never show."""
    sigma = float(pool.std())
    bandwidth = 1.06 * sigma * pool.size ** (-0.2)
    value = rng.choice(pool, size=size) + rng.normal(0.0, bandwidth, size=size)
    return value / math.sqrt(1.0 + (bandwidth / sigma) ** 2)


def trial(
    pool: np.ndarray,
    n: int,
    steps: int,
    rng: np.random.Generator,
    late_rank: int | None,
    late_fraction: float,
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> int | None:
    """One synthetic run: the rank called a straggler (consistent and costly), or
    ``None``."""
    offsets = draw(pool, (steps, n), rng)
    if late_rank is not None:
        others = np.delete(offsets, late_rank, axis=1).max(axis=1)
        own = np.abs(draw(pool, steps, rng) - draw(pool, steps, rng))
        offsets[:, late_rank] = others + late_fraction + own
    start_ns = np.rint(offsets * STEP_US * 1000.0).astype(np.int64)
    lateness, delay = st.step_lateness(start_ns, np.arange(steps), steps)
    reference_us = th.straggler_reference_noise_share_of_step * STEP_US
    test = st.lateness_test(lateness / 1000.0, reference_us, th.straggler_reference_noise_df)
    c = test["candidate"]
    if c is None or test["excess_us"] <= 0 or test["p_value"] > th.straggler_alpha:
        return None
    cost = float(np.median(delay[c])) / 1000.0 / STEP_US
    return c if cost >= th.straggler_min_share_of_step else None


@dataclass
class _Collectives:
    """A synthetic run's matched collectives as
    :func:`~tb_kineto_insights.analysis.straggler_collectives.collective_test` reads them
    (per rank, per step)."""

    step_collectives: list[dict[Any, int]]
    step_last: list[dict[Any, int]]
    waited_for_ns: list[dict[Any, float]]
    exposed_waited_for_ns: list[dict[Any, float]]


def collective_trial(
    pool: np.ndarray,
    n: int,
    steps: int,
    collectives: int,
    rng: np.random.Generator,
    late_rank: int | None,
    late_fraction: float,
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> int | None:
    """One synthetic run for the per-collective test (ranks that re-align at every
    collective: FSDP): every rank's arrival offset at each of ``collectives`` collectives
    a step drawn from the pool divided by ``collectives`` (the per-step jitter spread
    over the step's collectives; the test's two consistency gates, the binomial tail and
    "last in most collectives of most steps", do not depend on the scale, only its cost
    gate does); a straggler arrives ``late_fraction / collectives`` of the step after
    the latest other rank at each, plus the real spread of two ranks scaled the same way
    (late by ``late_fraction`` of the step over a step). Every wait counts as exposed
    (the alarm-prone end). The rank called a straggler (consistent and costly), or
    ``None``."""
    offsets = draw(pool, (steps, collectives, n), rng) / collectives
    if late_rank is not None:
        others = np.delete(offsets, late_rank, axis=2).max(axis=2)
        own = np.abs(draw(pool, (steps, collectives), rng) - draw(pool, (steps, collectives), rng))
        offsets[:, :, late_rank] = others + (late_fraction + own) / collectives
    arrive_ns = offsets * STEP_US * 1000.0
    latest = arrive_ns.max(axis=2)
    last = arrive_ns.argmax(axis=2)  # ties have probability 0 (continuous draws)
    waited = (latest[:, :, None] - arrive_ns).sum(axis=2) / (n - 1)  # the others' mean wait
    step_last, waited_for = [], []
    for r in range(n):
        mine = last == r
        step_last.append(dict(enumerate(mine.sum(axis=1).tolist())))
        waited_for.append(dict(enumerate(np.where(mine, waited, 0.0).sum(axis=1).tolist())))
    m = _Collectives(
        [dict.fromkeys(range(steps), collectives)] * n, step_last, waited_for, waited_for
    )
    rows = [{"mean_step_us": STEP_US}] * n
    per = collective_test(m, rows, list(range(n)), list(range(steps)), th)
    return per["index"] if per and per["consistent"] and per["costly"] else None


def _count(
    n: int, trials: int, seed: int, one: Callable[[np.random.Generator, int | None], int | None]
) -> tuple[int, int]:
    """``(false alarms in balanced runs, stragglers named right)`` over ``trials``
    seeded runs each: ``one(rng, late_rank)`` is one synthetic run's verdict (the
    straggler's rank drawn at random; None: a balanced run)."""
    rng = np.random.default_rng(seed)
    alarms = sum(one(rng, None) is not None for _ in range(trials))
    named = 0
    for _ in range(trials):
        late = int(rng.integers(n))
        named += one(rng, late) == late
    return alarms, named


def cell(
    pool: np.ndarray,
    n: int,
    steps: int,
    trials: int,
    seed: int,
    late_fraction: float = 0.10,
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[int, int]:
    """``(false alarms in balanced runs, stragglers named right)`` of the per-step test
    (:func:`trial`), each of ``trials`` seeded runs."""
    return _count(
        n,
        trials,
        seed,
        lambda rng, late: trial(
            pool, n, steps, rng, late, late_fraction if late is not None else 0.0, th
        ),
    )


def collective_cell(
    pool: np.ndarray,
    n: int,
    steps: int,
    collectives: int,
    trials: int,
    seed: int,
    late_fraction: float = 0.10,
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[int, int]:
    """:func:`cell` for the per-collective test (:func:`collective_trial`)."""
    return _count(
        n,
        trials,
        seed,
        lambda rng, late: collective_trial(
            pool, n, steps, collectives, rng, late, late_fraction if late is not None else 0.0, th
        ),
    )


def main(argv: list[str] | None = None) -> int:
    """Print the reference noise, then the table: per ranks × steps, balanced alarms and
    stragglers named."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--late", type=float, default=0.10, help="straggler's lateness, share")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument(
        "--jitter-scale", type=float, default=1.0, help="multiply the real jitter by this"
    )
    parser.add_argument("--ranks", type=int, nargs="*", default=list(RANKS))
    parser.add_argument("--steps", type=int, nargs="*", default=list(STEPS))
    parser.add_argument(
        "--collectives", type=int, default=38, help="collectives a step (h200x2 fsdp: 38)"
    )
    parser.add_argument("--collective-ranks", type=int, nargs="*", default=[2, 8, 64])
    args = parser.parse_args(argv)
    share, df = reference_noise()
    th = DEFAULT_THRESHOLDS
    print(
        f"reference noise of the balanced runs: {share:.4f} of the step on {df} degrees of "
        f"freedom (thresholds: {th.straggler_reference_noise_share_of_step} on "
        f"{th.straggler_reference_noise_df})"
    )
    pool = real_offsets() * args.jitter_scale
    print(
        f"pool: {pool.size} offsets, |offset| median {np.median(np.abs(pool)):.3f}, "
        f"max {np.abs(pool).max():.3f} of the step (jitter x{args.jitter_scale:g}); "
        f"alpha {th.straggler_alpha}, min share {th.straggler_min_share_of_step}; "
        f"{args.trials} trials, straggler late by {args.late:.0%} of the step"
    )
    print(
        f"per collective: {args.collectives} collectives a step, for ranks "
        f"{' '.join(map(str, args.collective_ranks))} ('-': not run, too slow)"
    )
    print(
        "| ranks | steps | balanced: alarms | straggler: named | per collective: alarms "
        "| per collective: named |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")

    def share(k: int) -> str:
        return f"{k}/{args.trials} ({100 * k / args.trials:.1f} %)"

    for n in args.ranks:
        for steps in args.steps:
            seed = args.seed + 1000 * n + steps
            alarms, named = cell(pool, n, steps, args.trials, seed, args.late, th)
            per = "| - | - |"
            if n in args.collective_ranks:
                c_alarms, c_named = collective_cell(
                    pool, n, steps, args.collectives, args.trials, seed, args.late, th
                )
                per = f"| {share(c_alarms)} | {share(c_named)} |"
            print(f"| {n} | {steps} | {share(alarms)} | {share(named)} {per}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
