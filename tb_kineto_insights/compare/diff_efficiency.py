"""The efficiency rows of a diff (``diff.efficiency``): op groups matched by op and input
shapes across the two sides, with each side's dtype, time per step, achieved FLOP/s and
roof fraction, and a verdict on the achieved FLOP/s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.compare.diff_rules import judge
from tb_kineto_insights.schema.summary import Summary

__all__ = ["EFFICIENCY_DIFF_ROWS", "efficiency_row_verdict", "efficiency_rows"]

Side = Sequence[tuple[str, Summary]]


#: Op groups listed in ``diff.efficiency`` (by the larger side's time per step).
EFFICIENCY_DIFF_ROWS = 20


def _efficiency_groups(side: Side) -> dict[tuple[str, str], dict[str, Any]]:
    """(op, shapes) → dtype, time per step (mean over the side's spans), achieved FLOP/s
    (FLOPs over kernel time, pooled) and roof fraction (time-weighted) of one side."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    spans = 0
    for _, summary in side:
        panel = getattr(summary, "efficiency", None)
        if panel is None:
            continue
        spans += 1
        for r in panel.rows:
            a = acc.setdefault(
                (r.op, r.shapes),
                {"dtype": r.dtype, "time": 0.0, "flops": 0.0, "has_flops": False, "roof": 0.0,
                 "roof_time": 0.0},
            )  # fmt: skip
            a["time"] += r.time_us_per_step
            if r.flops_per_call is not None:
                a["flops"] += r.flops_per_call * r.calls_per_step
                a["has_flops"] = True
            if r.roof_fraction is not None:
                a["roof"] += r.roof_fraction * r.time_us_per_step
                a["roof_time"] += r.time_us_per_step
    out = {}
    for key, a in acc.items():
        time_us = a["time"] / max(spans, 1)
        seconds = a["time"] / 1e6  # 0.0 for a time of 5e-324 µs (a forged entry) too
        out[key] = {
            "dtype": a["dtype"],
            "time_us_per_step": time_us,
            "achieved_flops_per_s": a["flops"] / seconds
            if a["has_flops"] and seconds > 0
            else None,
            "roof_fraction": a["roof"] / a["roof_time"] if a["roof_time"] > 0 else None,
        }
    return out


def efficiency_rows(
    base: Side,
    exp: Side,
    *,
    step_floor_us: float = 0.0,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[dict[str, Any]]:
    """``diff.efficiency``: op groups matched by op + input shapes (so an fp32 GEMM and
    its bf16 version after autocast are one row, the dtype shown per side), the
    :data:`EFFICIENCY_DIFF_ROWS` with the most time per step on either side.

    ``verdict`` (of the achieved FLOP/s; :func:`efficiency_row_verdict`): a summary keeps
    one value per group, so the single-value rule of :mod:`.diff_rules` (a verdict from
    a 10 % change), and ``negligible`` when the group's time per step moves less than
    ``step_floor_us`` (0.5 % of the base step); ``added``/``removed`` for a group only one
    side ran; ``not judged`` without FLOPs (memory ops: bandwidth, no FLOP rate)."""
    b, e = _efficiency_groups(base), _efficiency_groups(exp)
    keys = sorted(
        set(b) | set(e),
        key=lambda k: (
            -max(
                b.get(k, {}).get("time_us_per_step", 0.0), e.get(k, {}).get("time_us_per_step", 0.0)
            )
        ),
    )[:EFFICIENCY_DIFF_ROWS]
    rows = []
    for op, shapes in keys:
        row: dict[str, Any] = {"op": op, "shapes": shapes}
        for side, groups in (("base", b), ("exp", e)):
            g = groups.get((op, shapes))
            row[f"{side}_dtype"] = g["dtype"] if g else None
            for field in ("time_us_per_step", "achieved_flops_per_s", "roof_fraction"):
                row[f"{side}_{field}"] = g[field] if g else None
        row["verdict"] = efficiency_row_verdict(row, step_floor_us, thresholds)
        rows.append(row)
    return rows


def efficiency_row_verdict(row: dict[str, Any], step_floor_us: float, th: Thresholds) -> str:
    """The verdict of one ``diff.efficiency`` row (see :func:`efficiency_rows`)."""
    b_time, e_time = row["base_time_us_per_step"], row["exp_time_us_per_step"]
    if b_time is None or e_time is None:
        return "added" if b_time is None else "removed"
    b_rate, e_rate = row["base_achieved_flops_per_s"], row["exp_achieved_flops_per_s"]
    if not b_rate or not e_rate:
        return "not judged"
    judged = judge([b_rate], [e_rate], "higher", per_step=False, thresholds=th)
    verdict: str = judged["verdict"]
    if verdict != "unchanged" and abs(e_time - b_time) < step_floor_us:
        return "negligible"  # too small to matter comes first, as in judge()
    return verdict
