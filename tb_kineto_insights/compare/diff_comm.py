"""Communication rows of the run-to-run diff: what the collectives are, and what they
cost split into waiting and transfer.

Words (defined in :mod:`.run_view`, one meaning each): for one collective matched
across ranks, *skew* = latest − earliest arrival; a rank *waited* latest start − its
start; its *lateness* is its start − the earliest start; *transfer* = earliest end −
latest start. Labels say ``/step`` for per-step values, ``per collective`` for values of
one call, ``total`` for sums.

Rows (``metrics`` entries, same shape as the other diff rows, plus ``basis`` / ``note``
where a number has one):

- ``communication.calls_per_step.<kind>`` (count, /step, a setting: ``changed``):
  collectives of that kind per step, from ``communication.sequence`` (each collective's
  step) pooled over the side's spans, so the noise test sees every step; from
  ``kinds[].calls_per_step`` (else ``count`` / steps) as one value per span when a
  span's sequence is missing or truncated. A kind absent on a side counts 0.
- ``communication.bytes_per_collective.<kind>`` (bytes, per collective, a setting):
  the median message size of that kind's collectives (sequence sizes; else
  ``kinds[].median_bytes``; else ``bytes / sized_count``, a mean, said in ``note``).
- ``communication.ddp_bucket_median_bytes`` (bytes, a setting): median AllReduce size,
  which under DDP is one gradient bucket (``communication.ddp_bucket_bytes``); the
  bucket list itself is in the doc's ``communication.ddp_buckets``.
- ``communication.busbw.<kind>_gbps`` (GB/s = 1e9 bytes/s, higher is better): bus
  bandwidth from the run view's matched transfer (``kinds[].busbw_basis`` =
  ``matched_transfer``) when a side is a run of several ranks, else the span's own
  (``least_wait_estimate`` when the span says so). A span value without a basis is the
  old kernel-time bandwidth, which counts the wait for other ranks: such a row, or one
  whose sides have different bases, gets the verdict ``not judged`` (only
  ``unchanged`` stands).
- From the run view (sides of several ranks only), one value per rank, mean over
  ranks, lower is better: ``communication.waited_us_per_step`` (``ranks[].
  wait_us_per_step``, else the older ``wait_us_total`` or ``wait_us`` / ``step_count``),
  ``communication.transfer_us_per_step``, ``communication.exposed_waited_us_per_step``,
  ``communication.exposed_transfer_us_per_step``; each with ``by_rank`` (``{base,
  exp}``: rank → µs /step), since the mean hides which rank waits.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.compare.diff_rules import TOO_SMALL, judge
from tb_kineto_insights.schema.communication import CollectiveKind, CommunicationPanel
from tb_kineto_insights.schema.diff import DdpBucketStats
from tb_kineto_insights.schema.run_view import RunView
from tb_kineto_insights.schema.summary import Summary

Side = Sequence[tuple[str, Summary]]
#: Bandwidth bases whose values can be compared (they leave the waiting out).
TRUSTED_BASES: tuple[str, ...] = ("matched_transfer", "least_wait_estimate")
#: Basis assumed for a bandwidth whose summary does not state one.
LEGACY_BASIS = "kernel_time"
#: Sizes listed per side in ``ddp_buckets.sizes``.
BUCKET_SIZES_LISTED = 8


def _comm(s: Summary) -> CommunicationPanel:
    return s.communication


def _kinds(s: Summary) -> list[CollectiveKind]:
    return s.communication.kinds


def _step_numbers(s: Summary) -> list[int]:
    return [x.number for x in s.steps.steps]


def _calls_per_step(side: Side) -> tuple[dict[str, list[float]], bool]:
    """kind → calls per step (per-step samples when every span has a full sequence,
    else one value per span); and whether the samples are per step."""
    usable = all(not _comm(s).sequence_truncated for _, s in side)
    out: dict[str, list[float]] = {}
    filled = 0  # samples already taken, so a kind first seen later gets zeros before
    for _, s in side:
        steps = _step_numbers(s)
        if usable:
            per: dict[str, list[float]] = {}
            index = {n: i for i, n in enumerate(steps)}
            for entry in _comm(s).sequence:
                i = index.get(entry.step) if entry.step is not None else None
                if i is not None and entry.kind:
                    per.setdefault(entry.kind, [0.0] * len(steps))[i] += 1.0
            width = len(steps)
        else:
            per = {}
            for k in _kinds(s):
                value = k.calls_per_step
                if value is None and steps:
                    value = float(k.count) / len(steps)
                if value is not None:
                    per[k.kind] = [float(value)]
            width = 1
        for kind in set(out) | set(per):
            row = out.setdefault(kind, [0.0] * filled)
            row.extend(per.get(kind, [0.0] * width))
        filled += width
    return out, usable


def _bytes_per_collective(side: Side) -> dict[str, tuple[float, str]]:
    """kind → (message size per collective in bytes, statistic: median or mean)."""
    sizes: dict[str, list[float]] = {}
    from_sequence = all(_comm(s).sequence for _, s in side)
    if from_sequence:
        for _, s in side:
            for entry in _comm(s).sequence:
                if entry.kind and entry.bytes is not None:
                    sizes.setdefault(entry.kind, []).append(float(entry.bytes))
        return {k: (float(statistics.median(v)), "median") for k, v in sizes.items() if v}
    out: dict[str, tuple[float, str]] = {}
    medians: dict[str, list[float]] = {}
    means: dict[str, list[float]] = {}
    for _, s in side:
        for k in _kinds(s):
            if k.median_bytes is not None:
                medians.setdefault(k.kind, []).append(float(k.median_bytes))
            elif k.bytes is not None and k.sized_count:
                means.setdefault(k.kind, []).append(float(k.bytes) / float(k.sized_count))
    for kind, values in means.items():
        out[kind] = (float(statistics.mean(values)), "mean")
    for kind, values in medians.items():
        out[kind] = (float(statistics.median(values)), "median")
    return out


def _buckets(side: Side) -> DdpBucketStats | None:
    """DDP buckets of a side: the first span with AllReduce sizes (every rank of a DDP
    job has the same buckets)."""
    for _, s in side:
        b = _comm(s).ddp_bucket_bytes
        if b.count and b.median_bytes is not None:
            steps = len(_step_numbers(s))
            return DdpBucketStats(
                count=b.count,
                count_per_step=b.count / steps if steps else None,
                median_bytes=b.median_bytes,
                min_bytes=b.min_bytes if b.min_bytes is not None else 0,
                max_bytes=b.max_bytes if b.max_bytes is not None else 0,
                distinct_count=b.distinct_count,
                sizes=b.sizes[:BUCKET_SIZES_LISTED],
            )
    return None


def _busbw(side: Side, run: RunView | None) -> dict[str, tuple[list[float], str]]:
    """kind → (bus bandwidth values in GB/s, basis)."""
    out: dict[str, tuple[list[float], str]] = {}
    for rk in run.kinds if run is not None else []:
        if rk.busbw_gbps is not None and rk.busbw_basis == "matched_transfer":
            out[rk.kind] = ([float(rk.busbw_gbps)], "matched_transfer")
    if out:
        return out
    for _, s in side:
        for k in _kinds(s):
            if k.busbw_gbps is None:
                continue
            basis = k.busbw_basis or LEGACY_BASIS
            values, seen = out.get(k.kind, ([], basis))
            out[k.kind] = (values + [float(k.busbw_gbps)], basis if seen == basis else "mixed")
    return out


def _by_rank(run: RunView | None, key: str) -> dict[str, float]:
    """``{rank: value}`` of :func:`_per_rank` (empty when it is None)."""
    values = _per_rank(run, key) or []
    ranks = run.ranks if run is not None else []
    return {str(r.rank): v for r, v in zip(ranks, values, strict=False)}


def _per_rank(run: RunView | None, key: str) -> list[float] | None:
    """One value per rank of ``ranks[].key`` (a field of
    :class:`~tb_kineto_insights.schema.run_view.RankRow`); ``wait_us_total`` /
    ``step_count`` stands in for a ``wait_us_per_step`` of None. None when any rank
    lacks it."""
    ranks = run.ranks if run is not None else []
    values = []
    for r in ranks:
        value = getattr(r, key)
        if value is None and key == "wait_us_per_step" and r.step_count:
            value = r.wait_us_total / r.step_count
        if value is None:
            return None
        values.append(float(value))
    return values or None


_RANK_ROWS: tuple[tuple[str, str, str], ...] = (
    ("wait_us_per_step", "communication.waited_us_per_step", "communication: waited /step"),
    ("transfer_us_per_step", "communication.transfer_us_per_step", "communication: transfer /step"),
    (
        "exposed_wait_us_per_step",
        "communication.exposed_waited_us_per_step",
        "exposed communication: waited /step",
    ),
    (
        "exposed_transfer_us_per_step",
        "communication.exposed_transfer_us_per_step",
        "exposed communication: transfer /step",
    ),
)


def communication_rows(
    base: Side,
    exp: Side,
    base_run: RunView | None,
    exp_run: RunView | None,
    *,
    step_floor_us: float,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The communication rows (see the module docstring) and the doc's ``communication``
    section: ``ddp_buckets`` (``base`` / ``exp``: ``count``, ``count_per_step``,
    ``median_bytes``, ``min_bytes``, ``max_bytes``, ``distinct_count``, ``sizes``, or
    None), ``busbw_basis`` (kind → ``{base, exp}``), ``rank_rows_from`` (``run_view``, or
    why those rows are missing).

    ``step_floor_us``: the smallest time per step that matters (see :mod:`.diff_rules`).
    """
    rows: list[dict[str, Any]] = []

    def add(
        key: str,
        label: str,
        unit: str,
        better: str,
        b: list[float],
        e: list[float],
        per_step: bool,
        floor: float = 0.0,
        **extra: Any,
    ) -> dict[str, Any]:
        row = judge(b, e, better, per_step, min_abs_delta=floor, thresholds=thresholds)
        rows.append({"key": key, "label": label, "unit": unit, "better": better, **row, **extra})
        return rows[-1]

    (b_calls, b_ps), (e_calls, e_ps) = _calls_per_step(base), _calls_per_step(exp)
    for kind in sorted(set(b_calls) | set(e_calls)):
        b = b_calls.get(kind) or [0.0] * max(len(next(iter(b_calls.values()), [])), 1)
        e = e_calls.get(kind) or [0.0] * max(len(next(iter(e_calls.values()), [])), 1)
        add(
            f"communication.calls_per_step.{kind}",
            f"{kind} calls /step",
            "count",
            "none",
            b,
            e,
            b_ps and e_ps,
        )
    b_bytes, e_bytes = _bytes_per_collective(base), _bytes_per_collective(exp)
    for kind in sorted(set(b_bytes) & set(e_bytes)):
        (bv, bs), (ev, es) = b_bytes[kind], e_bytes[kind]
        stat = bs if bs == es else "median vs mean"
        add(
            f"communication.bytes_per_collective.{kind}",
            f"{kind} bytes per collective ({stat})",
            "bytes",
            "none",
            [bv],
            [ev],
            False,
        )
    b_buckets, e_buckets = _buckets(base), _buckets(exp)
    b_median = b_buckets.median_bytes if b_buckets is not None else None
    e_median = e_buckets.median_bytes if e_buckets is not None else None
    if b_median is not None and e_median is not None:
        add(
            "communication.ddp_bucket_median_bytes",
            "DDP bucket size (median AllReduce size)",
            "bytes",
            "none",
            [float(b_median)],
            [float(e_median)],
            False,
        )
    b_bw, e_bw = _busbw(base, base_run), _busbw(exp, exp_run)
    bases: dict[str, dict[str, str]] = {}
    for kind in sorted(set(b_bw) & set(e_bw)):
        (bv_list, b_basis), (ev_list, e_basis) = b_bw[kind], e_bw[kind]
        bases[kind] = {"base": b_basis, "exp": e_basis}
        several = len(bv_list) > 1 and len(ev_list) > 1
        basis_label = b_basis.replace("_", " ") if b_basis == e_basis else "bases differ"
        row = add(
            f"communication.busbw.{kind}_gbps",
            f"busbw {kind} ({basis_label})",
            "GB/s",
            "higher",
            bv_list,
            ev_list,
            several,
            basis={"base": b_basis, "exp": e_basis},
        )
        trusted = b_basis == e_basis and b_basis in TRUSTED_BASES
        if not trusted and row["verdict"] not in TOO_SMALL:
            row["verdict"] = "not judged"
            row["note"] = (
                "different bandwidth bases on the two sides"
                if b_basis != e_basis
                else "bandwidth from each rank's kernel time counts its wait for the other "
                "ranks: see the waited/transfer rows"
            )
    rank_rows_from = "run_view"
    if base_run is None or exp_run is None:
        rank_rows_from = "a side is one rank: waited/transfer need every rank of a run"
    else:
        for src, key, label in _RANK_ROWS:
            b_r, e_r = _per_rank(base_run, src), _per_rank(exp_run, src)
            if b_r and e_r:
                by_rank = {"base": _by_rank(base_run, src), "exp": _by_rank(exp_run, src)}
                row_label = f"{label} (mean over ranks)"
                extra = {"by_rank": by_rank}
                add(key, row_label, "µs", "lower", b_r, e_r, False, step_floor_us, **extra)
    section = {
        "ddp_buckets": {"base": b_buckets, "exp": e_buckets},
        "busbw_basis": bases,
        "rank_rows_from": rank_rows_from,
    }
    return rows, section
