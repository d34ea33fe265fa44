"""False alarms and power of the straggler rule (issue 27), measured on runs synthesised
from the real ranks of ``../shared/traces/h200x2``.

Jitter from the real runs: in each balanced two-rank run (``ddp_default``, ``ddp_tuned``,
``fsdp``) and each profiled step, the two ranks' lateness (``run_view`` ``steps[].
lateness_us``, :func:`tb_kineto_insights.analysis.straggler.step_lateness`) gives each
rank's arrival *offset* in that step: its lateness minus the mean of the two, as a share
of the run's mean step time (up to ±6.6 % of the step; 30 values, symmetric). A
synthetic run of ``n`` ranks and ``N`` steps draws every rank's offset in every step from
that pool (a smoothed bootstrap, :func:`draw`; seeded), so the step-to-step spread of
lateness is the real one. A straggler arrives at least ``late_fraction`` of the step
after the latest other rank in every step (the delay it causes the others), plus the real
spread between two ranks (the absolute difference of two draws from the pool): late by
at least that share of the step in every step. Each step holds one collective whose
arrivals are the offsets (the lateness of a step is the lateness at its one
collective); the rule then runs unchanged on them:
:func:`~tb_kineto_insights.analysis.straggler.step_lateness` →
:func:`~tb_kineto_insights.analysis.straggler.lateness_test` (consistent: ``p_value ≤
straggler_alpha``) and costly (median delay over the steps ≥
``straggler_min_share_of_step`` of the step), as ``run_view._straggler_test`` does.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/straggler_false_alarms.py [--trials 500]``;
prints the table of ``benchmarks/RESULTS.md`` ("Straggler rule").
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np

from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds

REPO = Path(__file__).resolve().parents[1]
H200X2 = REPO.parent / "shared" / "traces" / "h200x2"
BALANCED = ("ddp_default", "ddp_tuned", "fsdp")
RANKS = (2, 8, 64, 1024)
STEPS = (3, 4, 5, 20)
#: the synthetic step, µs (offsets are shares of it)
STEP_US = 10_000.0


@functools.cache
def real_offsets(h200x2: Path = H200X2) -> np.ndarray:
    """The pool of per-rank, per-step arrival offsets (shares of the step) of the balanced
    h200x2 runs (module docstring); 1-D float64.

    Raises:
        FileNotFoundError: a run folder is missing.
    """
    from tb_kineto_insights.summary import summarize_file, summarize_run

    pool: list[float] = []
    for folder in BALANCED:
        paths = sorted((h200x2 / folder).glob("rank*.pt.trace.json.gz"))
        if len(paths) != 2:
            raise FileNotFoundError(f"{h200x2 / folder}: expected 2 rank traces")
        run = summarize_run([(p.name, summarize_file(str(p))) for p in paths])
        step_us = float(np.mean([r.mean_step_us for r in run.ranks]))
        for step in run.steps:
            late = np.array(list(step.lateness_us.values()), dtype=np.float64)
            if late.size == 2:
                pool.extend(((late - late.mean()) / step_us).tolist())
    return np.array(pool, dtype=np.float64)


def draw(pool: np.ndarray, size: int | tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A smoothed bootstrap from ``pool``: a value drawn with replacement plus normal noise
    of Silverman's bandwidth ``1.06 σ m^(-1/5)`` (``m`` values; 0.019 of the step for the
    real pool). Without it, 30 distinct values repeat exactly, and a lateness repeated to
    the nanosecond in every step has no noise at all (t = inf), which real clocks never
    show."""
    bandwidth = 1.06 * float(pool.std()) * pool.size ** (-0.2)
    return rng.choice(pool, size=size) + rng.normal(0.0, bandwidth, size=size)


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
    test = st.lateness_test(lateness / 1000.0)
    c = test["candidate"]
    if c is None or test["excess_us"] <= 0 or test["p_value"] > th.straggler_alpha:
        return None
    cost = float(np.median(delay[c])) / 1000.0 / STEP_US
    return c if cost >= th.straggler_min_share_of_step else None


def cell(
    pool: np.ndarray,
    n: int,
    steps: int,
    trials: int,
    seed: int,
    late_fraction: float = 0.10,
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[int, int]:
    """``(false alarms in balanced runs, stragglers named right)``, each of ``trials``
    seeded runs (the straggler's rank drawn at random)."""
    rng = np.random.default_rng(seed)
    alarms = sum(trial(pool, n, steps, rng, None, 0.0, th) is not None for _ in range(trials))
    named = 0
    for _ in range(trials):
        late = int(rng.integers(n))
        named += trial(pool, n, steps, rng, late, late_fraction, th) == late
    return alarms, named


def main(argv: list[str] | None = None) -> int:
    """Print the table: per ranks × steps, balanced alarms and stragglers named."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--late", type=float, default=0.10, help="straggler's lateness, share")
    parser.add_argument("--seed", type=int, default=27)
    args = parser.parse_args(argv)
    pool = real_offsets()
    print(
        f"pool: {pool.size} offsets, |offset| median {np.median(np.abs(pool)):.3f}, "
        f"max {np.abs(pool).max():.3f} of the step; alpha {DEFAULT_THRESHOLDS.straggler_alpha}, "
        f"min share {DEFAULT_THRESHOLDS.straggler_min_share_of_step}; {args.trials} trials, "
        f"straggler late by {args.late:.0%} of the step"
    )
    print("| ranks | steps | balanced: alarms | straggler: named |")
    print("| ---: | ---: | ---: | ---: |")
    for n in RANKS:
        for steps in STEPS:
            alarms, named = cell(
                pool, n, steps, args.trials, args.seed + 1000 * n + steps, args.late
            )
            print(
                f"| {n} | {steps} | {alarms}/{args.trials} ({100 * alarms / args.trials:.1f} %) "
                f"| {named}/{args.trials} ({100 * named / args.trials:.1f} %) |"
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
