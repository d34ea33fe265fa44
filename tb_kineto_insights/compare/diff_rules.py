"""The verdict of one diff row: is a change beyond noise, and is it large enough to matter.

Rules, in order (:data:`NOISE_RULE` is the one-line form shown to users):

1. *Too small to matter*, whatever the noise test says: the change
   ``|mean(exp) − mean(base)|`` is under ``diff_min_change_fraction`` (1 %) of the base
   value → ``unchanged``; or it clears that bar but is under a row-specific floor
   ``min_abs_delta`` → ``negligible`` (a real change of the row, too small against the
   step to matter: a 20 µs op that drops 71 % in a 100 ms step). The diff sets that
   floor to ``diff_min_step_fraction`` (0.5 %) of the base's mean step time for a time
   per step, and to ``diff_min_step_fraction`` itself (0.5 percentage points) for a
   share. So a change gets a verdict only when it clears both bars: ≥ 1 % of the base
   *and* ≥ 0.5 % of the step. (A 1.1 µs kernel that moves 0.05 µs is negligible; a share
   that moves 0.3 pp of 40 % is unchanged.)
2. Rows with per-step samples on both sides (n ≥ 2 each): *beyond noise* when
   ``|Δmean| > 2 · sqrt(s_base²/n_base + s_exp²/n_exp)``, ``s`` = each side's
   step-to-step standard deviation (Welch's standard error; about a 95 % two-sided
   test). Otherwise ``within noise``.
3. Rows with one value per side (a bandwidth, a median size, a value per rank): a
   verdict from ``diff_single_value_verdict_fraction`` (10 %) relative change up, else
   ``within noise``.

A change beyond noise is ``improved`` or ``regressed`` by the row's ``better``
direction (``lower`` / ``higher``); rows that describe a setting rather than a cost
(``better="none"``: collectives per step, message and bucket sizes) say ``changed``.
"""

from __future__ import annotations

import math
from typing import Any

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds

NOISE_RULE = (
    "too small to matter: under 1 % of the base (unchanged), or under 0.5 % of the base "
    "step time (0.5 pp for shares: negligible); else beyond noise when |mean(exp) - mean(base)| > "
    "2 x sqrt(s_base^2/n_base + s_exp^2/n_exp), s = step-to-step standard deviation of "
    "each side (Welch); single values: a verdict from 10 %, else within noise"
)
#: Verdicts a row can get.
VERDICTS: tuple[str, ...] = (
    "improved",
    "regressed",
    "changed",
    "within noise",
    "negligible",
    "unchanged",
    "not judged",
    "moved partly",
)
#: Verdicts that say a change is too small to matter.
TOO_SMALL: frozenset[str] = frozenset({"unchanged", "negligible"})


def _mean_std(xs: list[float]) -> tuple[float, float]:
    n = len(xs)
    mean = sum(xs) / n
    # (x - mean) * (x - mean), not ** 2: float ** raises OverflowError past 1.8e308
    # where * gives inf (an odd value such as 1e300 in a summary)
    var = sum((x - mean) * (x - mean) for x in xs) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


def _direction(delta: float, better: str) -> str:
    if better == "none":
        return "changed"
    good = delta < 0 if better == "lower" else delta > 0
    return "improved" if good else "regressed"


def judge(
    base: list[float],
    exp: list[float],
    better: str,
    per_step: bool = True,
    *,
    min_abs_delta: float = 0.0,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    means: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Compare two samples (see the module docstring for the rules).

    Args:
        base, exp: per-step values (``per_step``) or one value per span/rank, non-empty.
        better: ``"lower"``, ``"higher"`` or ``"none"`` (a setting: ``changed``).
        min_abs_delta: the row's floor in its own unit (0.5 % of the step time for a
            time per step); a smaller change is ``negligible`` (``unchanged`` under 1 %
            of the base).
        means: ``(base, exp)`` values to compare instead of the samples' means, for a
            row whose value is not a mean of its samples (GPU utilization: a ratio of
            totals, see :mod:`.overview`); the samples still give the noise.

    Returns:
        ``base``/``exp`` (means), ``delta`` (exp − base), ``change_fraction`` (delta /
        |base|, None when base is 0 and delta is not), ``base_noise``/``exp_noise``
        (standard deviations), ``stderr`` (None when the row is not judged by per-step
        samples: the noise test does not apply), ``base_n``/``exp_n``, ``min_delta`` (the
        smallest change that would have mattered), ``verdict``.

    Raises:
        ValueError: ``base`` or ``exp`` is empty, or ``better`` is unknown.
    """
    if not base or not exp:
        raise ValueError("judge needs at least one value on each side")
    if better not in ("lower", "higher", "none"):
        raise ValueError(f"better must be lower, higher or none, not {better!r}")
    mb, sb = _mean_std(base)
    me, se = _mean_std(exp)
    if means is not None:
        mb, me = means
    return judge_stats(
        (mb, sb, len(base)),
        (me, se, len(exp)),
        better,
        per_step,
        min_abs_delta=min_abs_delta,
        thresholds=thresholds,
    )


def judge_stats(
    base: tuple[float, float, int],
    exp: tuple[float, float, int],
    better: str,
    per_step: bool = True,
    *,
    min_abs_delta: float = 0.0,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, Any]:
    """:func:`judge` from each side's ``(mean, standard deviation, n)`` instead of its
    samples (the same rules; the history's levels pool many runs' steps and keep only
    these three numbers). Returns what :func:`judge` returns.

    Raises:
        ValueError: a side has ``n < 1``, or ``better`` is unknown.
    """
    (mb, sb, nb), (me, se, ne) = base, exp
    if nb < 1 or ne < 1:
        raise ValueError("judge needs at least one value on each side")
    if better not in ("lower", "higher", "none"):
        raise ValueError(f"better must be lower, higher or none, not {better!r}")
    th = thresholds
    delta = me - mb
    rel = delta / abs(mb) if mb else (0.0 if delta == 0 else math.copysign(math.inf, delta))
    stderr = math.sqrt(sb * sb / nb + se * se / ne)
    min_delta = max(th.diff_min_change_fraction * abs(mb), min_abs_delta)
    by_steps = per_step and nb > 1 and ne > 1
    if delta == 0 or abs(delta) < th.diff_min_change_fraction * abs(mb):
        verdict = "unchanged"
    elif abs(delta) < min_delta:
        verdict = "negligible"
    elif by_steps:
        verdict = _direction(delta, better) if abs(delta) > 2 * stderr else "within noise"
    elif abs(rel) >= th.diff_single_value_verdict_fraction:
        verdict = _direction(delta, better)
    else:
        verdict = "within noise"
    return {
        "base": mb,
        "exp": me,
        "delta": delta,
        "change_fraction": rel if math.isfinite(rel) else None,
        "base_noise": sb,
        "exp_noise": se,
        "stderr": stderr if by_steps else None,
        "base_n": nb,
        "exp_n": ne,
        "min_delta": min_delta,
        "verdict": verdict,
    }
