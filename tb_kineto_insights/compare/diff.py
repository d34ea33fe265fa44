"""Run-to-run diff: compare two sides (a span, a worker, or a whole run) step-normalised.

A *side* is a list of ``(label, summary)`` pairs: one span summary, the spans of one
worker, or every worker (rank) of a run. Per-step values of all its spans and workers
are pooled, so a run's numbers are the ranks averaged; :func:`diff` also compares rank
by rank when both sides are runs with the same ranks.

Verdicts (:mod:`.diff_rules`, :data:`NOISE_RULE`): a change under 1 % of the base
(``unchanged``), or under 0.5 % of the base step time (0.5 pp for shares:
``negligible``), is too small to matter; otherwise rows with per-step samples get
``improved``/``regressed`` only beyond the step-to-step noise (Welch, 2 standard
errors), and rows with one value per side from a 10 % change (both numbers in
:mod:`.thresholds`). Communication rows (collectives per step, bytes per collective,
DDP buckets, bandwidth with its basis, waited vs transfer per step) come from
:mod:`.diff_comm`; when a side is a run of several workers, the run view across its
ranks (:func:`..summary.summarize_run`, latest span of each worker) supplies the rows
across ranks and its run-level diagnoses.

NCCL/RCCL kernels are kept out of the kernel-time verdicts: an NCCL kernel runs from
its rank's arrival until the last rank's, so its time is mostly waiting when ranks
arrive apart. They are listed in ``kernels.communication`` with ``not judged``; the
waited/transfer rows say what changed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from tb_kineto_insights.analysis.host_activity import CAUSE_NAMES as IDLE_CAUSES
from tb_kineto_insights.analysis.overview import BREAKDOWN_ORDER
from tb_kineto_insights.analysis.run_view_spans import rank_of
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.units import fmt_duration_us
from tb_kineto_insights.compare.comparability import comparability
from tb_kineto_insights.compare.diff_comm import communication_rows
from tb_kineto_insights.compare.diff_efficiency import efficiency_rows
from tb_kineto_insights.compare.diff_rules import NOISE_RULE, judge
from tb_kineto_insights.compare.diff_tables import compare_table
from tb_kineto_insights.schema import DIFF_SCHEMA, DiffDocument, RunView, Summary
from tb_kineto_insights.schema.diagnoses import Diagnosis, FixPrediction
from tb_kineto_insights.schema.diff import FoundDiagnosis
from tb_kineto_insights.schema.idle import IdleDevice
from tb_kineto_insights.schema.memory import MemoryDevice
from tb_kineto_insights.schema.steps import Step

Side = Sequence[tuple[str, Summary]]
Extractor = Callable[[Summary], list[float] | None]


#: ``(base side, step floor µs, thresholds)`` → the row's smallest change that matters.
Floor = Callable[[Sequence[tuple[str, Summary]], float, Thresholds], float]


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    better: str  # "lower" or "higher"
    extract: Extractor
    per_step: bool = True
    #: None: the unit's floor (0.5 % of the step for µs, 0.5 pp for a share, else 0).
    floor: Floor | None = None
    #: Per step ``(numerator, denominator)`` for a row whose value is a ratio of totals
    #: (sum of numerators / sum of denominators over the side's steps), not a mean of
    #: the per-step ratios ``extract`` gives (those still give the noise).
    totals: Callable[[Summary], list[tuple[float, float]] | None] | None = None


def _steps(s: Summary) -> list[Step]:
    return s.steps.steps


def _main_idle(s: Summary) -> IdleDevice | None:
    return s.idle.main_entry()


def _breakdown(cat: str) -> Extractor:
    return lambda s: [x.breakdown_us[cat] for x in _steps(s)]


def _idle_cause(cause: str) -> Extractor:
    def get(s: Summary) -> list[float] | None:
        dev = _main_idle(s)
        return None if dev is None else [x.causes_us[cause] for x in dev.per_step]

    return get


def _utilization(s: Summary) -> list[float] | None:
    vals = [x.gpu_utilization_fraction for x in _steps(s)]
    return None if any(v is None for v in vals) else [v for v in vals if v is not None]


def _utilization_totals(s: Summary) -> list[tuple[float, float]] | None:
    """Per step (busy µs, step µs) of the main device: GPU utilization is their ratio of
    totals (:mod:`.overview`), the same number ``report`` and the tab show."""
    pairs = []
    for x in _steps(s):
        if x.gpu_utilization_fraction is None:
            return None
        pairs.append((x.gpu_utilization_fraction * x.duration_us, x.duration_us))
    return pairs


def _kernels_per_step(s: Summary) -> list[float] | None:
    per = s.kernels.per_step
    return None if not per else [float(x.count) for x in per]


def _short_share(s: Summary) -> list[float] | None:
    per = s.kernels.per_step
    if not per or any(x.count == 0 for x in per):
        return None
    return [x.short_count / x.count for x in per]


def _short_share_floor(base: Side, step_floor_us: float, th: Thresholds) -> float:
    """A change Δ of the short-kernel share moves Δ × (kernels per step) kernels across
    the short threshold, worth at most that many × the threshold in time: it matters
    from ``step_floor_us`` of such time, i.e. Δ ≥ step_floor_us / (kernels per step ×
    threshold); never under the 0.5 pp of any share."""
    per_step = [
        float(s.kernels.mean_per_step) * float(s.kernels.short_threshold_us or 0)
        for _, s in base
        if s.kernels.mean_per_step
    ]
    kernel_us = sum(per_step) / len(per_step) if per_step else 0.0
    share = step_floor_us / kernel_us if kernel_us > 0 else 0.0
    return max(th.diff_min_step_fraction, share)


def _comm(key: str) -> Extractor:
    """Per step ``key`` (a field of ``communication.steps[]``) of a span with
    collectives."""

    def get(s: Summary) -> list[float] | None:
        comm = s.communication
        per = comm.steps
        if not per or not comm.has_collectives:
            return None
        return [float(getattr(x, key)) for x in per]

    return get


def _memory_device(s: Summary) -> MemoryDevice | None:
    devices = s.memory.devices
    gpu = [d for d in devices if d.device_type != 0]
    pool = gpu or devices
    return max(pool, key=lambda d: d.peak_allocated_bytes or 0, default=None)


def _memory_peak(s: Summary) -> list[float] | None:
    dev = _memory_device(s)
    per = dev.per_step if dev is not None else None
    if not per:
        return None
    return [float(x.peak_bytes) for x in per if x.peak_bytes is not None] or None


def _memory_growth(s: Summary) -> list[float] | None:
    dev = _memory_device(s)
    slope = dev.growth.bytes_per_step if dev is not None else None
    return None if slope is None else [float(slope)]


def _matmul_steps(s: Summary) -> list[Any] | None:
    """``efficiency.per_step`` of a span with matmul-class work in every step."""
    panel = getattr(s, "efficiency", None)
    per = panel.per_step if panel is not None else None
    if not per or any(x.matmul_time_us <= 0 for x in per):
        return None
    return list(per)


def _matmul_tflops(s: Summary) -> list[float] | None:
    per = _matmul_steps(s)
    return None if per is None else [x.matmul_flops / x.matmul_time_us / 1e6 for x in per]


def _matmul_tflops_totals(s: Summary) -> list[tuple[float, float]] | None:
    """Per step (TFLOP, µs × 1e-6): achieved TFLOP/s is their ratio of totals."""
    per = _matmul_steps(s)
    return None if per is None else [(x.matmul_flops / 1e12, x.matmul_time_us / 1e6) for x in per]


def _matmul_tflops_floor(base: Side, step_floor_us: float, th: Thresholds) -> float:
    """The smallest rate change that matters: the base's matmul FLOPs per step at rate r
    take F/r; a rate r + δ saves ``step_floor_us`` when δ = 1/(1/r − s/F) − r (µs and
    TFLOP/s as they are); ``inf`` when even an infinite rate would save less."""
    flops = time_us = 0.0
    for _, summary in base:
        per = _matmul_steps(summary)
        if per:
            flops += sum(x.matmul_flops for x in per) / 1e12
            time_us += sum(x.matmul_time_us for x in per)
    n = sum(len(_matmul_steps(s) or []) for _, s in base) or 1
    # 1/r = T/F and s/(F/n) = s·n/F: no division by a rate or a per-step figure that can
    # underflow to 0 (a cached summary's numbers are only range-checked)
    inv = (time_us / 1e6 - step_floor_us / 1e6 * n) / flops if flops > 0 else 0.0
    if not inv > 0 or time_us <= 0:
        return math.inf
    rate = flops / (time_us / 1e6)  # TFLOP/s
    return 1.0 / inv - rate


def _tensor_core_share(s: Summary) -> list[float] | None:
    per = _matmul_steps(s)
    return None if per is None else [x.tensor_core_time_us / x.matmul_time_us for x in per]


def _tensor_core_totals(s: Summary) -> list[tuple[float, float]] | None:
    per = _matmul_steps(s)
    return None if per is None else [(x.tensor_core_time_us, x.matmul_time_us) for x in per]


#: Every category of the step breakdown, ``other`` included: the breakdown is exclusive and
#: covers the whole step window (:mod:`..analysis.overview`), so the rows' deltas add up to
#: the step-time delta; leaving a category out leaves part of the change unexplained.
_CATEGORIES = BREAKDOWN_ORDER
#: Every idle cause of the Idle panel (:data:`..analysis.host_activity.CAUSES`): their deltas add up
#: to the change of the main device's idle time.
_CAUSES = IDLE_CAUSES

METRICS: tuple[Metric, ...] = (
    Metric(
        "step_time_us",
        "step time",
        "µs",
        "lower",
        lambda s: [x.duration_us for x in _steps(s)],
    ),
    Metric(
        "gpu_utilization_fraction",
        "GPU utilization",
        "fraction",
        "higher",
        _utilization,
        totals=_utilization_totals,
    ),
    *(
        Metric(
            f"breakdown.{c}_us",
            f"step breakdown: {c.replace('_', ' ')} /step",
            "µs",
            "lower",
            _breakdown(c),
        )
        for c in _CATEGORIES
    ),
    *(
        Metric(
            f"idle.{c}_us", f"GPU idle: {c.replace('_', ' ')} /step", "µs", "lower", _idle_cause(c)
        )
        for c in _CAUSES
    ),
    Metric("kernels_per_step", "kernels /step", "count", "lower", _kernels_per_step),
    Metric(
        "short_kernel_fraction",
        "short-kernel share",
        "fraction",
        "lower",
        _short_share,
        floor=_short_share_floor,
    ),
    Metric(
        "communication.exposed_us",
        "exposed communication /step",
        "µs",
        "lower",
        _comm("exposed_us"),
    ),
    Metric(
        "communication.overlapped_us",
        "overlapped communication /step",
        "µs",
        "higher",
        _comm("overlapped_us"),
    ),
    Metric(
        "efficiency.matmul_tflops_per_s",
        "matmul/conv/attention achieved TFLOP/s",
        "TFLOP/s",
        "higher",
        _matmul_tflops,
        floor=_matmul_tflops_floor,
        totals=_matmul_tflops_totals,
    ),
    Metric(
        "efficiency.tensor_core_time_fraction",
        "tensor-core share of matmul/conv/attention time",
        "fraction",
        "higher",
        _tensor_core_share,
        totals=_tensor_core_totals,
    ),
    Metric("memory.peak_allocated_bytes", "memory peak", "bytes", "lower", _memory_peak),
    Metric(
        "memory.growth_bytes_per_step",
        "memory growth",
        "bytes/step",
        "lower",
        _memory_growth,
        per_step=False,
    ),
)


def _pool(side: Side, extract: Extractor) -> list[float] | None:
    out: list[float] = []
    for _, summary in side:
        vals = extract(summary)
        if vals is None:
            return None
        out.extend(float(v) for v in vals)
    return out or None


def _pool_totals(
    side: Side, totals: Callable[[Summary], list[tuple[float, float]] | None]
) -> float | None:
    """Sum of numerators / sum of denominators over every step of the side's spans."""
    num = den = 0.0
    for _, summary in side:
        pairs = totals(summary)
        if pairs is None:
            return None
        num += sum(p[0] for p in pairs)
        den += sum(p[1] for p in pairs)
    return num / den if den > 0 else None


#: Severities a gained diagnosis must have to reach the headline.
HEADLINE_SEVERITIES: tuple[str, ...] = ("high", "medium")


def gained_diagnoses(
    base: Sequence[FoundDiagnosis], exp: Sequence[FoundDiagnosis]
) -> list[dict[str, str]]:
    """The ``high``/``medium`` diagnoses of ``exp`` whose id ``base`` does not have, most
    severe first (one per id: its most severe occurrence, span or run level), as
    ``{id, severity, title}``: what the headline must say beside the step time, since a
    faster step that gained a memory leak is not simply an improvement."""
    have = {d.id for d in base}
    best: dict[str, FoundDiagnosis] = {}
    for d in exp:
        if d.id in have or d.severity not in HEADLINE_SEVERITIES:
            continue
        old = best.get(d.id)
        if old is None or HEADLINE_SEVERITIES.index(d.severity) < HEADLINE_SEVERITIES.index(
            old.severity
        ):
            best[d.id] = d
    ordered = sorted(best.values(), key=lambda d: (HEADLINE_SEVERITIES.index(d.severity), d.id))
    return [{"id": d.id, "severity": d.severity, "title": d.title} for d in ordered]


def headline_text(speedup: float | None, verdict: str, gained: Sequence[dict[str, str]]) -> str:
    """One line for the headline: the step-time change in words (``"1.10x faster"`` /
    ``"1.25x slower"`` when beyond noise, else ``"step time within noise (1.02x)"`` or
    ``"step time unchanged"``), then ``", but memory_growth (high) appeared"`` for the
    gained diagnoses (``"and …"`` when the step time regressed)."""
    if verdict == "improved" and speedup:
        text = f"{speedup:.2f}x faster"
    elif verdict == "regressed" and speedup:
        text = f"{1 / speedup:.2f}x slower"
    elif verdict == "within noise" and speedup:
        text = f"step time within noise ({speedup:.2f}x)"
    else:
        text = f"step time {verdict}"
    if gained:
        what = ", ".join(f"{g['id']} ({g['severity']})" for g in gained)
        joint = ", and " if verdict == "regressed" else ", but "
        text += joint + what + " appeared"
    return text


def _setting(s: Summary, key: str) -> Any:
    return s.health.metadata.get(key)


def _warnings(base: Side, exp: Side, said: frozenset[str] = frozenset()) -> list[str]:
    """Why the sides may not compare; ``said``: the ``comparability`` fields, whose
    profiler settings are not repeated here (the text would say them twice)."""

    def devices(side: Side) -> set[str]:
        names = set()
        for _, s in side:
            for p in s.health.device_properties:
                if p.get("name"):
                    names.add(str(p["name"]))
        return names

    def world(side: Side) -> set[Any]:
        return {rank_of(s)[1] for _, s in side}

    def values(side: Side, key: str) -> set[Any]:
        return {_setting(s, key) for _, s in side}

    def flags(side: Side, key: str) -> set[Any]:
        return {bool(getattr(s.health.flags, key)) for _, s in side}

    out = []
    bd, ed = devices(base), devices(exp)
    if bd and ed and bd != ed:
        out.append(f"different devices: {', '.join(sorted(bd))} vs {', '.join(sorted(ed))}")
    bw, ew = world(base), world(exp)
    if bw != ew and bw != {None} and ew != {None}:  # None: no distributedInfo, unknown
        out.append(f"different world sizes: {sorted(map(str, bw))} vs {sorted(map(str, ew))}")
    for key in ("cuda_runtime_version", "cuda_driver_version", "cupti_version"):
        bv, ev = values(base, key), values(exp, key)
        if bv != ev and bv != {None} and ev != {None}:
            what = key.replace("_", " ")
            out.append(f"different {what}: {sorted(map(str, bv))} vs {sorted(map(str, ev))}")
    for key, flag in (
        ("record_shapes", "has_shapes"),
        ("with_stack", "has_stacks"),
        ("profile_memory", "has_memory"),
    ):
        if flags(base, flag) != flags(exp, flag) and key not in said:
            out.append(f"different profiler settings: {key} differs (changes timings)")
    if len(base) != len(exp):
        out.append(f"different number of workers/spans: {len(base)} vs {len(exp)}")
    for name, side in (("base", base), ("experiment", exp)):
        lossy = [label for label, s in side if any(d.id == "trace_data_loss" for d in s.diagnoses)]
        if lossy:
            out.append(
                f"the {name} side lost trace data ({', '.join(lossy[:3])}"
                f"{', …' if len(lossy) > 3 else ''}: damaged, truncated or dropped events): "
                "its numbers may miss work, so changes may be artefacts"
            )
    return out


def _worker_of(label: str) -> str:
    """``worker/span`` → worker (worker names hold no ``/``)."""
    return label.partition("/")[0]


def side_run_view(side: Side, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> RunView | None:
    """The run view across the ranks of a side (labels are ``worker/span``), or None
    when the side holds fewer than two ranks. Its input is chosen as ``report`` chooses
    it (``summary.run_view_of``: the latest span of each worker; one entry per rank for a
    worker holding several ranks' spans in one time window; that choice's notes lead
    the view's ``notes``)."""
    # summary.py sits above the analysis modules; imported here, where it is used
    from tb_kineto_insights import summary as summary_module

    grouped: dict[str, list[Summary]] = {}
    for label, s in side:
        grouped.setdefault(_worker_of(label), []).append(s)
    return summary_module.run_view_of(list(grouped.items()), thresholds)


def gained_straggler(base_run: RunView | None, exp_run: RunView | None) -> dict[str, Any] | None:
    """The straggler the experiment's run view names when the base's does not name one
    on that rank (``diff.headline.straggler_gained``): rank, worker, cost, cause and the
    experiment's ``communication_straggler`` title; None otherwise."""
    s = exp_run.straggler if exp_run is not None else None
    if s is None:
        return None
    before = base_run.straggler if base_run is not None else None
    if before is not None and before.rank == s.rank:
        return None
    title = (
        next(
            (d.title for d in exp_run.diagnoses if d.id == "communication_straggler"),
            f"Rank {s.rank} holds the other ranks back",
        )
        if exp_run is not None
        else ""
    )
    cause = s.cause if s.cause is not None and s.cause.class_ is not None else None
    return {
        "rank": s.rank,
        "worker": s.worker,
        "delay_us_per_step": s.delay_us_per_step,
        "share_of_step": s.share_of_step,
        "cause": cause.label if cause is not None else None,
        "cause_us_per_step": cause.us_per_step if cause is not None else None,
        "title": title,
    }


def diagnoses_found(side: Side, run: RunView | None) -> list[FoundDiagnosis]:
    """Every diagnosis of a side: span-level (``scope`` ``span``, ``where`` = its
    ``worker/span``) and run-level from the run view (``scope`` ``run``, ``where`` =
    ``all ranks``); each ``{id, scope, where, severity, title, impact_fraction}``. A
    span-level diagnosis the run view supersedes (its ``superseded_span_diagnoses``:
    ``{worker, id}``, e.g. a rank's ``exposed_communication`` whose wait/transfer split
    the view across ranks states exactly) is left out, as ``report`` leaves it out."""
    replaced = {(x.worker, x.id) for x in run.superseded_span_diagnoses} if run else set()
    found = []
    for label, s in side:
        for d in s.diagnoses:
            if (_worker_of(label), d.id) not in replaced:
                found.append(_brief(d, "span", label))
    for d in run.diagnoses if run is not None else []:
        found.append(_brief(d, "run", "all ranks"))
    return found


def _brief(d: Diagnosis, scope: str, where: str) -> FoundDiagnosis:
    p = d.prediction if isinstance(d.prediction, FixPrediction) else None
    return FoundDiagnosis(
        id=d.id,
        severity=d.severity,
        title=d.title,
        impact_fraction=d.impact_fraction,
        scope=scope,
        where=where,
        fix=p.fix if p is not None else None,
        predicted_step_us=p.predicted_step_us if p is not None else None,
    )


def _unit_floor(unit: str, step_floor_us: float, th: Thresholds) -> float:
    """The row's smallest change that matters in its own unit (see :mod:`.diff_rules`)."""
    if unit == "µs":
        return step_floor_us
    if unit == "fraction":
        return th.diff_min_step_fraction
    return 0.0


def diff(
    base: Side,
    exp: Side,
    *,
    base_label: str = "base",
    exp_label: str = "exp",
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> DiffDocument:
    """Compare two sides (span summaries, read by attribute); returns the
    ``tb_kineto_insights.diff/1`` document, a :class:`~tb_kineto_insights.schema.DiffDocument`
    (built from its parts with ``msgspec.convert``).

    Keys: ``headline`` (step time before → after, ``speedup`` = base / exp, verdict, the
    high/medium diagnoses gained (:func:`gained_diagnoses`) and :func:`headline_text`),
    ``metrics`` (one row per metric both sides have: means, ``delta``,
    ``change_fraction`` (relative to base), noise, ``min_delta``, ``verdict``; the
    communication rows of :mod:`.diff_comm` carry ``basis``/``note`` where they have
    one), ``communication`` (``ddp_buckets``, ``busbw_basis``, ``rank_rows_from``),
    ``kernels`` / ``ops`` (``changed`` / ``added`` / ``removed`` by time per step;
    ``kernels.communication``: NCCL kernels, time ``not judged``), ``diagnoses``
    (``appeared`` / ``disappeared`` / ``kept`` ids, span- and run-level; ``found``:
    ``{base, exp}`` lists from :func:`diagnoses_found`), ``warnings`` (device, world
    size, CUDA versions, profiler settings), ``comparability`` (unlike-for-like
    recording differences ``{field, base, new, why, source}``,
    :mod:`.comparability`), ``per_rank`` (runs with matching ranks),
    ``largest_changes``, ``efficiency`` (op groups matched by op + shapes:
    :func:`efficiency_rows`) and ``noise_rule``.

    Raises:
        ValueError: a side has no summaries or no steps.
    """
    if not base or not exp:
        raise ValueError("both sides need at least one readable trace")
    th = thresholds
    step_floor_us = _step_floor_us(base, exp, th)
    metrics = _metric_rows(base, exp, step_floor_us, th)
    base_run, exp_run = side_run_view(base, th), side_run_view(exp, th)
    comm_rows, comm_section = communication_rows(
        base, exp, base_run, exp_run, step_floor_us=step_floor_us, thresholds=th
    )
    metrics.extend(comm_rows)
    table_args: dict[str, Any] = {"step_floor_us": step_floor_us, "thresholds": th}
    kernels = compare_table(base, exp, "kernels", **table_args)
    ops = compare_table(base, exp, "ops", **table_args)
    b_found, e_found = diagnoses_found(base, base_run), diagnoses_found(exp, exp_run)
    headline = _headline(metrics[0], b_found, e_found, base_run, exp_run)
    largest = _largest_changes(metrics, kernels)
    unlike = comparability(base, exp)
    doc = {
        "schema": DIFF_SCHEMA,
        "base": {"label": base_label, "workers": [w for w, _ in base]},
        "exp": {"label": exp_label, "workers": [w for w, _ in exp]},
        "headline": headline,
        "warnings": _warnings(base, exp, frozenset(c.field for c in unlike)),
        "comparability": unlike,
        "metrics": metrics,
        "communication": comm_section,
        "kernels": kernels,
        "ops": ops,
        "diagnoses": _diagnoses_section(b_found, e_found, headline),
        "per_rank": _per_rank(base, exp, step_floor_us, th),
        "largest_changes": largest,
        "efficiency": efficiency_rows(base, exp, step_floor_us=step_floor_us, thresholds=th),
        "noise_rule": NOISE_RULE,
    }
    return msgspec.convert(doc, DiffDocument)


def _step_floor_us(base: Side, exp: Side, th: Thresholds) -> float:
    """The smallest change of a time per step that matters: ``diff_min_step_fraction``
    of the base's mean step time.

    Raises:
        ValueError: a side has no step times.
    """
    base_steps = _pool(base, METRICS[0].extract)
    if not base_steps or not _pool(exp, METRICS[0].extract):
        raise ValueError("no step times on one side")
    return th.diff_min_step_fraction * sum(base_steps) / len(base_steps)


def _metric_rows(
    base: Side, exp: Side, step_floor_us: float, th: Thresholds
) -> list[dict[str, Any]]:
    """One judged row per metric of :data:`METRICS` that both sides have, in its order
    (step time first)."""
    metrics = []
    for metric in METRICS:
        b, e = _pool(base, metric.extract), _pool(exp, metric.extract)
        if not b or not e:
            continue
        floor = (
            metric.floor(base, step_floor_us, th)
            if metric.floor
            else _unit_floor(metric.unit, step_floor_us, th)
        )
        means = None
        if metric.totals is not None:
            b_tot, e_tot = _pool_totals(base, metric.totals), _pool_totals(exp, metric.totals)
            means = (b_tot, e_tot) if b_tot is not None and e_tot is not None else None
        row = judge(
            b, e, metric.better, metric.per_step, min_abs_delta=floor, thresholds=th, means=means
        )
        metrics.append(
            {
                "key": metric.key,
                "label": metric.label,
                "unit": metric.unit,
                "better": metric.better,
                **row,
            }
        )
    return metrics


def _headline(
    step: dict[str, Any],
    b_found: list[FoundDiagnosis],
    e_found: list[FoundDiagnosis],
    base_run: RunView | None,
    exp_run: RunView | None,
) -> dict[str, Any]:
    """``diff.headline``: the step-time row's numbers and verdict, ``speedup`` = base /
    exp, the diagnoses gained, :func:`headline_text` and the straggler gained."""
    speedup = step["base"] / step["exp"] if step["exp"] else None
    gained = gained_diagnoses(b_found, e_found)
    return {
        "base_step_us": step["base"],
        "exp_step_us": step["exp"],
        "speedup": speedup,
        "change_fraction": step["change_fraction"],
        "verdict": step["verdict"],
        "gained": gained,
        "text": headline_text(speedup, step["verdict"], gained),
        "straggler_gained": gained_straggler(base_run, exp_run),
    }


def _largest_changes(
    metrics: list[dict[str, Any]], kernels: dict[str, Any]
) -> list[dict[str, Any]]:
    """``diff.largest_changes``: the 10 rows that moved most in µs per step, among the
    metric rows in µs (step time aside) and the changed, added and removed kernels."""
    return sorted(
        [
            {
                "what": "metric",
                "name": m["label"],
                "delta_us_per_step": m["delta"],
                "verdict": m["verdict"],
            }
            for m in metrics
            if m["unit"] == "µs" and m["key"] != "step_time_us"
        ]
        + [
            {
                "what": "kernel",
                "name": r["name"],
                "delta_us_per_step": r["delta_time_us_per_step"],
                "verdict": r["time_us_per_step"]["verdict"],
            }
            for group in ("changed", "added", "removed")
            for r in kernels[group]
        ],
        key=lambda r: -abs(r["delta_us_per_step"]),
    )[:10]


def _diagnoses_section(
    b_found: list[FoundDiagnosis], e_found: list[FoundDiagnosis], headline: dict[str, Any]
) -> dict[str, Any]:
    """``diff.diagnoses``: the ids that appeared, disappeared and were kept, every
    diagnosis found on each side, and each disappeared one's prediction beside the
    experiment's measured step (:func:`prediction_checks`)."""
    b_ids, e_ids = {d.id for d in b_found}, {d.id for d in e_found}
    gone = sorted(b_ids - e_ids)
    return {
        "appeared": sorted(e_ids - b_ids),
        "disappeared": gone,
        "kept": sorted(b_ids & e_ids),
        "found": {"base": b_found, "exp": e_found},
        "predictions": prediction_checks(
            [d for d in b_found if d.id in gone], headline["base_step_us"], headline["exp_step_us"]
        ),
    }


def prediction_checks(
    gone: list[FoundDiagnosis], base_us: float | None, measured_us: float | None
) -> list[dict[str, Any]]:
    """Per disappeared diagnosis with a prediction (the slowest span's, as the step time
    is the job's pace): ``{id, fix, base_step_us, predicted_step_us, measured_step_us,
    error_fraction, text}``; none without both step times."""
    if not base_us or not measured_us:
        return []
    best: dict[str, FoundDiagnosis] = {}
    for d in gone:
        if d.predicted_step_us is None:
            continue
        if d.id not in best or d.predicted_step_us > (best[d.id].predicted_step_us or 0.0):
            best[d.id] = d
    out = []
    for id_, d in sorted(best.items()):
        predicted = float(d.predicted_step_us or 0.0)
        error = predicted / measured_us - 1.0
        out.append(
            {
                "id": id_,
                "fix": d.fix or id_,
                "base_step_us": base_us,
                "predicted_step_us": predicted,
                "measured_step_us": measured_us,
                "error_fraction": error,
                "text": f"{id_}: predicted {fmt_duration_us(base_us)} → "
                f"{fmt_duration_us(predicted)} for {d.fix or 'its fix'}; measured "
                f"{fmt_duration_us(measured_us)} ({100 * error:+.0f} %)",
            }
        )
    return out


def _rank(summary: Summary) -> Any:
    return rank_of(summary)[0]


def _per_rank(base: Side, exp: Side, step_floor_us: float, th: Thresholds) -> list[dict[str, Any]]:
    by_b: dict[Any, list[tuple[str, Summary]]] = {}
    by_e: dict[Any, list[tuple[str, Summary]]] = {}
    for side, into in ((base, by_b), (exp, by_e)):
        for label, s in side:
            into.setdefault(_rank(s), []).append((label, s))
    if len(by_b) < 2 or set(by_b) != set(by_e) or None in by_b:
        return []
    out = []
    metric = METRICS[0]
    for rank in sorted(by_b):
        b, e = _pool(by_b[rank], metric.extract), _pool(by_e[rank], metric.extract)
        if b and e:
            row = judge(b, e, "lower", min_abs_delta=step_floor_us, thresholds=th)
            out.append({"rank": rank, "step_time_us": row})
    return out
