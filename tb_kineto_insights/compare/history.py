"""The history of a log directory: runs of one job grouped into series, ordered in time,
and the runs where a metric's level changed (``tb-kineto-insights history``).

Input: per run, the headline record of each worker's latest span
(:class:`~tb_kineto_insights.schema.history.SpanHeadline`, stored beside each summary in
the cache: ``store/cache.py``), so a history reads no summary and no trace.

**Series** (:func:`series_keys`): by ``--group-by`` when given (a regex on the run name,
run by RE2: ``history_groups.py``; its first group, else the whole match; a run it does
not match, or matches empty, is a series of its own; or ``key:NAME``, a run-metadata
field such as ``key:git_commit``, where a run without the field is a series of its own);
else by the run metadata label (``capture.profile(..., label=...)``); else by the run
name without its run counter (:func:`name_stem`: a trailing date or time, or a number
after a separator, ``_007``, ``_run3``, ``-v2``; ``exp_007`` → ``exp``,
``nightly-2026-11-30`` → ``nightly``) when at least two runs share that stem (the
counter varies within the series); else the run is a series of its own, named by
its whole name (``eff_mlp_fp32`` stays ``eff_mlp_fp32``: digits that are part of a
name, or a counter no sibling shares, are never stripped); a name that is nothing but a
counter (``2026-11-30``, ``0042``) joins the log directory's series. Runs are ordered
by the trace's own clock (``baseTimeNanoseconds`` + the first step, earliest rank), else
by the file's modification time, ties by name.

**A run's values**: step time of the slowest rank (the largest mean step time) as
``(mean, standard deviation, steps)``; GPU utilization of that rank; memory peak
(allocated, largest over ranks).

**Change points** (:func:`find_changes`), per metric, walking the series in time:

1. The *level* is the runs since the last change (outliers left out). Step time pools
   their steps (mean and standard deviation over all of them, so a level's spread
   includes its runs' differences); the other metrics pool one value per run.
2. Once the level has ``history_min_runs_per_level`` runs, each next run is judged
   against it with the diff's rule (:func:`.diff_rules.judge_stats`: Welch on step
   time, the single-value rule for one value per run), with a floor of
   ``history_min_change_fraction`` of the level. ``unchanged``, ``negligible`` or
   ``within noise``: the run joins the level.
3. A run judged ``regressed``/``improved`` starts a new level when it and the runs
   after it, ``history_min_runs_per_level`` in all, are judged the same way against the
   old level: a change point at that run, ``before`` = the old level, ``after`` = the
   mean of those runs. When the series ends first, the change is reported with
   ``confirmed: false``. When a run in between is back on the old level (or moves the
   other way), the off-level runs are *outliers*, not a change, and the level goes on.

Each change point also says what changed at that run against the run before it:
diagnoses gained and lost, and recording differences (``compare/comparability.py``'s
fields and reasons).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import msgspec

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.compare.comparability import ENV_WHY, WHY
from tb_kineto_insights.compare.diff_rules import judge_stats
from tb_kineto_insights.compare.history_groups import group_key, group_pattern
from tb_kineto_insights.schema.diff import ComparabilityItem
from tb_kineto_insights.schema.history import (
    HeadlineDiagnosis,
    HistoryChange,
    HistoryDocument,
    HistoryRun,
    HistorySeries,
    SpanHeadline,
)

__all__ = [
    "HISTORY_SCHEMA",
    "METRICS",
    "RULE",
    "RunHeadlines",
    "build_history",
    "combine_run",
    "find_changes",
    "name_stem",
    "series_key",
    "series_keys",
]

#: Schema id of ``history --format json``.
HISTORY_SCHEMA = "tb_kineto_insights.history/1"
#: Metric name → (which direction is better, judged from per-step samples).
METRICS: dict[str, tuple[str, bool]] = {
    "step_time": ("lower", True),
    "gpu_utilization": ("higher", False),
    "memory_peak": ("lower", False),
}
RULE = (
    "a change point is the first run judged regressed/improved against the previous level "
    "(the runs since the last change) by the diff's rule (step time: Welch on the steps; "
    "one value per run: from 10 %), by at least history_min_change_fraction of the level, "
    "and held by history_min_runs_per_level runs; fewer runs off the level, then a run "
    "back on it: outliers"
)

#: A run counter at the end of a name: a date or time (``-2026-11-30``, ``_20261130-0200``,
#: ``_2026-11-30T02-00``), or a number after a separator, optionally after a counter word
#: (``_007``, ``-12``, ``_run3``, ``-v12``, ``.r2``); only one, so ``resnet50_001`` stays
#: ``resnet50``. Digits glued to a word (``fp32``, ``workers4``, ``resnet50``) are not one.
_COUNTER = re.compile(
    r"(?:[-_. ]*\d{4}-?\d{2}-?\d{2}(?:[T_-]?\d{2}[:-]?\d{2}(?:[:-]?\d{2})?)?"
    r"|[-_. ]+(?:run|rep|trial|try|attempt|iter|seed|exp|v|r|#)?\d+"
    r"|^(?:run|v|r|#)?\d+)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RunHeadlines:
    """One run of the log directory: its ``name`` and, per worker, the headline of its
    latest span (``workers``: worker name → headline). ``run_diagnoses``, for a run of
    several workers: its diagnoses as ``report`` lists them
    (``summary.run_headline_diagnoses``: the view across ranks' included, the per-rank
    ones it supersedes left out); None: not known (each worker's are combined)."""

    name: str
    workers: dict[str, SpanHeadline] = field(default_factory=dict)
    run_diagnoses: list[HeadlineDiagnosis] | None = None


def _metadata(run: RunHeadlines) -> dict[str, str]:
    out: dict[str, str] = {}
    for h in run.workers.values():
        for key in ("label", "preset", "git_commit", "torch_version", "cuda_version"):
            value = getattr(h, key)
            if value is not None:
                out.setdefault(key, value)
    return out


def name_stem(name: str) -> str | None:
    """The run name without its run counter (:data:`_COUNTER`): ``"exp"`` for
    ``exp_007``, ``""`` for a name that is only a counter (``2026-11-30``), None when the
    name ends in no counter (``eff_mlp_fp32``, ``baseline``)."""
    m = _COUNTER.search(name)
    return None if m is None else name[: m.start()]


def series_key(
    run: RunHeadlines,
    logdir_name: str,
    group_by: str | None,
    shared_stems: Collection[str] = (),
) -> tuple[str, str]:
    """``(series name, grouped_by)`` of a run (module docstring). ``shared_stems``: the
    name stems that at least two runs share (:func:`series_keys` counts them; a caller
    judging one new run against a history passes the history's series names): the run
    joins the series of its stem only when the stem is one of them, else it is a series
    of its own (``grouped_by`` ``"run"``).

    Raises:
        ValueError: ``group_by`` is neither ``key:NAME`` nor a regex RE2 takes
            (``history_groups.py``).
    """
    if group_by:
        if group_by.startswith("key:"):
            name = group_by[4:]
            meta = _metadata(run)
            value = meta.get(name)
            if value is None:
                facts = [h.facts.get(name) for h in run.workers.values()]
                value = next((str(f) for f in facts if f is not None), None)
            if value is None:  # as an unmatched regex: no change point against
                return run.name, "run"  # runs that lack the field too
            return value, f"metadata:{name}"
        key = group_key(group_by, run.name)  # RE2: linear whatever the pattern
        if not key:  # unmatched, or an empty match ("^", "(x)?"): a series of its own,
            return run.name, "run"  # no change point against unrelated runs
        return key, "regex"
    label = _metadata(run).get("label")
    if label:
        return label, "label"
    stem = name_stem(run.name)
    if stem == "":
        return logdir_name, "logdir"
    if stem is not None and stem in shared_stems:
        return stem, "name"
    return run.name, "run"


def series_keys(
    runs: Sequence[RunHeadlines], logdir_name: str, group_by: str | None
) -> list[tuple[str, str]]:
    """:func:`series_key` of each run, with the name stems shared by at least two runs
    of ``runs`` that have no label (the runs a name decides)."""
    if group_by:
        return [series_key(run, logdir_name, group_by) for run in runs]
    # the default rule, each run's label and stem found once
    found = []
    counts: dict[str, int] = {}
    for run in runs:
        label = _metadata(run).get("label")
        stem = None if label else name_stem(run.name)
        if stem:
            counts[stem] = counts.get(stem, 0) + 1
        found.append((run, label, stem))
    out: list[tuple[str, str]] = []
    for run, label, stem in found:
        if label:
            out.append((label, "label"))
        elif stem == "":
            out.append((logdir_name, "logdir"))
        elif stem is not None and counts.get(stem, 0) >= 2:
            out.append((stem, "name"))
        else:
            out.append((run.name, "run"))
    return out


@dataclass
class _Values:
    """A run's metric values: step time (mean, std, n) and single values."""

    step: tuple[float, float, int] | None
    single: dict[str, float | None]


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat(timespec="seconds")


def _trace_start_ns(head: SpanHeadline) -> int | None:
    """The trace's own start, None when it has none or one no date can hold (a corrupt
    ``baseTimeNanoseconds`` of 1e32 made the whole history fail with OverflowError):
    the file time stands in then."""
    if head.start_ns is None:
        return None
    try:
        _iso(head.start_ns)
    except (OverflowError, ValueError, OSError):
        return None
    return head.start_ns


def _union_diagnoses(heads: Sequence[SpanHeadline]) -> list[HeadlineDiagnosis]:
    best: dict[str, HeadlineDiagnosis] = {}
    for h in heads:
        for d in h.diagnoses:
            if d.id not in best or d.impact_fraction > best[d.id].impact_fraction:
                best[d.id] = d
    return sorted(best.values(), key=lambda d: (-d.impact_fraction, d.id))


def _combine_one(run: RunHeadlines) -> HistoryRun:
    """:func:`combine_run` of a run of one worker (most runs): the same fields, without
    the reductions over ranks (a fifth of a history of 10,000 runs went to them)."""
    ((name, h),) = run.workers.items()
    trace_start = _trace_start_ns(h)
    if trace_start is not None:
        start_ns, source = trace_start, "trace"
    else:
        start_ns, source = round(h.mtime * 1e9), "file"
    diagnoses = h.diagnoses
    if len(diagnoses) > 1:
        diagnoses = _union_diagnoses([h])
    return HistoryRun(
        run=run.name,
        start_ns=start_ns,
        start_time=_iso(start_ns),
        time_source=source,
        ranks=1,
        world_size=h.world_size,
        gpu_model=h.gpu_model or None,
        slowest_worker=name if h.mean_step_us is not None else None,
        steps=h.steps,
        median_step_us=h.median_step_us,
        mean_step_us=h.mean_step_us,
        std_step_us=h.std_step_us,
        gpu_utilization_fraction=h.gpu_utilization_fraction,
        breakdown_us=dict(h.breakdown_us),
        memory_peak_bytes=h.memory_peak_allocated_bytes,
        memory_growth_bytes_per_step=h.memory_growth_bytes_per_step,
        diagnoses=list(diagnoses),
        top_diagnosis=diagnoses[0].id if diagnoses else None,
        metadata=_metadata(run),
        outlier=[],
        change=[],
    )


def combine_run(run: RunHeadlines) -> HistoryRun:
    """A :class:`HistoryRun` from a run's worker headlines (no change or outlier marks
    yet). Step time, GPU utilization and breakdown are the slowest rank's (largest mean
    step time); memory the largest peak and growth over ranks; diagnoses: the run's
    ``run_diagnoses`` (``report``'s list) when known, else over all ranks (per id the
    largest impact, largest first).

    Raises:
        ValueError: the run has no worker.
    """
    if not run.workers:
        raise ValueError(f"run {run.name!r} has no worker")
    if len(run.workers) == 1:
        return _combine_one(run)
    heads = list(run.workers.items())
    timed = [(n, h) for n, h in heads if h.mean_step_us is not None]
    slowest_name, slowest = max(timed, key=lambda nh: (nh[1].mean_step_us, nh[0]), default=heads[0])
    starts = [t for _, h in heads if (t := _trace_start_ns(h)) is not None]
    if starts:
        start_ns, source = min(starts), "trace"
    else:
        start_ns, source = min(round(h.mtime * 1e9) for _, h in heads), "file"
    peaks = [h.memory_peak_allocated_bytes for _, h in heads]
    growth = [h.memory_growth_bytes_per_step for _, h in heads]
    if run.run_diagnoses is not None:
        diagnoses = list(run.run_diagnoses)
    else:
        diagnoses = _union_diagnoses([h for _, h in heads])
    world = [h.world_size for _, h in heads if h.world_size is not None]
    return HistoryRun(
        run=run.name,
        start_ns=start_ns,
        start_time=_iso(start_ns),
        time_source=source,
        ranks=len(heads),
        world_size=max(world) if world else None,
        gpu_model=next((h.gpu_model for _, h in heads if h.gpu_model), None),
        slowest_worker=slowest_name if timed else None,
        steps=slowest.steps,
        median_step_us=slowest.median_step_us,
        mean_step_us=slowest.mean_step_us,
        std_step_us=slowest.std_step_us,
        gpu_utilization_fraction=slowest.gpu_utilization_fraction,
        breakdown_us=dict(slowest.breakdown_us),
        memory_peak_bytes=max((p for p in peaks if p is not None), default=None),
        memory_growth_bytes_per_step=max((g for g in growth if g is not None), default=None),
        diagnoses=diagnoses,
        top_diagnosis=diagnoses[0].id if diagnoses else None,
        metadata=_metadata(run),
        outlier=[],
        change=[],
    )


def _values(run: HistoryRun) -> _Values:
    step = None
    if run.mean_step_us is not None and run.steps > 0:
        step = (run.mean_step_us, run.std_step_us or 0.0, run.steps)
    return _Values(
        step,
        {
            "gpu_utilization": run.gpu_utilization_fraction,
            "memory_peak": None if run.memory_peak_bytes is None else float(run.memory_peak_bytes),
        },
    )


class _Level:
    """Pooled statistics of a level: count, sum and sum of squares of its samples (the
    steps of its runs for step time, one value per run otherwise)."""

    def __init__(self) -> None:
        self.runs = 0
        self.n = 0
        self.total = 0.0
        self.squares = 0.0

    def add(self, mean: float, std: float, n: int) -> None:
        self.runs += 1
        self.n += n
        self.total += mean * n
        self.squares += (n - 1) * std * std + n * mean * mean

    def stats(self) -> tuple[float, float, int]:
        mean = self.total / self.n
        var = (self.squares - self.n * mean * mean) / (self.n - 1) if self.n > 1 else 0.0
        return mean, math.sqrt(max(var, 0.0)), self.n


def _sample(values: _Values, metric: str) -> tuple[float, float, int] | None:
    if metric == "step_time":
        return values.step
    v = values.single.get(metric)
    return None if v is None or not math.isfinite(v) else (v, 0.0, 1)


def find_changes(
    samples: Sequence[tuple[float, float, int] | None],
    metric: str,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[list[tuple[int, str, bool, float, float, int, int]], tuple[float, float, int] | None]:
    """Change points and outliers of one metric over a series (module docstring).

    Args:
        samples: per run in time order, ``(mean, standard deviation, n)`` (step time:
            over the run's steps, µs; other metrics ``(value, 0, 1)``), None when the
            run has no value (skipped).
        metric: a key of :data:`METRICS`.

    Returns:
        ``(events, level)``: events ``(run index, verdict, confirmed, before, after,
        before_runs, after_runs)`` with verdict ``regressed``/``improved``/``outlier``
        in run order; ``level`` the current level's pooled ``(mean, std, n)`` at the end
        (None when no run has a value).

    Raises:
        KeyError: unknown ``metric``.
    """
    better, per_step = METRICS[metric]
    min_runs = max(1, int(thresholds.history_min_runs_per_level))
    events: list[tuple[int, str, bool, float, float, int, int]] = []
    idx = [i for i, s in enumerate(samples) if s is not None]
    level = _Level()

    def verdict(stats: tuple[float, float, int], s: tuple[float, float, int]) -> str:
        floor = thresholds.history_min_change_fraction * abs(stats[0])
        return str(
            judge_stats(stats, s, better, per_step, min_abs_delta=floor, thresholds=thresholds)[
                "verdict"
            ]
        )

    k = 0
    while k < len(idx):
        s = samples[idx[k]]
        assert s is not None  # idx holds only runs with a value
        if level.runs < min_runs:
            level.add(*s)
            k += 1
            continue
        stats = level.stats()
        v = verdict(stats, s)
        if v not in ("regressed", "improved"):
            level.add(*s)
            k += 1
            continue
        cand = [k]
        j = k + 1
        while len(cand) < min_runs and j < len(idx):
            sj = samples[idx[j]]
            assert sj is not None
            if verdict(stats, sj) != v:
                break
            cand.append(j)
            j += 1
        if len(cand) >= min_runs or j >= len(idx):
            new = _Level()
            for c in cand:
                new.add(*samples[idx[c]])  # type: ignore[misc]
            after = new.stats()[0]
            confirmed = len(cand) >= min_runs
            events.append((idx[k], v, confirmed, stats[0], after, level.runs, len(cand)))
            level = new
            k = j
            continue
        for c in cand:
            sc = samples[idx[c]]
            assert sc is not None
            events.append((idx[c], "outlier", True, stats[0], sc[0], level.runs, 1))
        k = j
    return events, (level.stats() if level.runs else None)


def _run_facts(run: RunHeadlines) -> tuple[dict[str, set[Any]], dict[str, str]]:
    values: dict[str, set[Any]] = {}
    sources: dict[str, str] = {}
    for h in run.workers.values():
        for key, value in h.facts.items():
            values.setdefault(key, set()).add(value if not isinstance(value, list) else str(value))
            if h.fact_sources.get(key) == "metadata" or key not in sources:
                sources[key] = h.fact_sources.get(key, "trace")
    return values, sources


def settings_changed(before: RunHeadlines, after: RunHeadlines) -> list[ComparabilityItem]:
    """Recording differences between two runs, in ``compare.comparability``'s fields and
    order, with its reasons; a field is compared only when both runs know it."""
    bv, bsrc = _run_facts(before)
    av, asrc = _run_facts(after)
    order = list(WHY) + sorted(k for k in set(bv) | set(av) if k.startswith("env."))
    out: list[ComparabilityItem] = []
    for name in order:
        if name not in bv or name not in av or bv[name] == av[name]:
            continue
        if name.startswith("env."):
            why = ENV_WHY.get(name[4:], "another environment setting")
        else:
            why = WHY[name]

        def shown(vals: set[Any]) -> Any:
            return next(iter(vals)) if len(vals) == 1 else sorted(vals, key=str)

        source = "metadata" if "metadata" in (bsrc.get(name), asrc.get(name)) else "trace"
        out.append(
            ComparabilityItem(
                field=name, base=shown(bv[name]), new=shown(av[name]), why=why, source=source
            )
        )
    return out


def check_options(group_by: str | None, metrics: Sequence[str] = ()) -> None:
    """Check a history's options before any trace is read: the metrics are keys of
    :data:`METRICS`, ``group_by`` is ``key:NAME`` or a regex RE2 compiles.

    Raises:
        ValueError: an unknown metric, or a bad ``group_by`` (the reason in the message).
        ImportError: ``google-re2`` is not installed.
    """
    unknown = sorted(set(metrics) - set(METRICS))
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(METRICS)}")
    if group_by and not group_by.startswith("key:"):
        group_pattern(group_by)


def build_history(
    runs: Sequence[RunHeadlines],
    *,
    logdir: str,
    group_by: str | None = None,
    metrics: Sequence[str] = tuple(METRICS),
    since_ns: int | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    skipped: dict[str, str] | None = None,
) -> HistoryDocument:
    """The history document of a log directory's runs (module docstring).

    Args:
        runs: every run with at least one headline (any order).
        logdir: the log directory as given (its last part names the one series of
            runs that have neither label nor numbered name).
        group_by: ``--group-by`` (regex or ``key:NAME``), None: the default grouping.
        metrics: keys of :data:`METRICS` to judge.
        since_ns: runs starting before this (ns since the epoch) are left out of the
            document, after the levels were found over all runs (a change is found at
            the same run whatever the window).
        skipped: runs left out by the caller, with the reason.

    Raises:
        ValueError: an unknown metric, or a bad ``group_by``.
    """
    check_options(group_by, metrics)
    logdir_name = logdir.rstrip("/").rsplit("/", 1)[-1] or logdir
    # under --group-by, a run the regex leaves alone never joins a group of its name
    # (run "job" beside the regex's "job" of job_1..job_3); the default rule joins them
    groups: dict[tuple[str, str], tuple[str, list[tuple[HistoryRun, RunHeadlines]]]] = {}
    runs = [run for run in runs if run.workers]
    for run, (name, how) in zip(runs, series_keys(runs, logdir_name, group_by), strict=True):
        key = (name, how if group_by else "")
        groups.setdefault(key, (how, []))[1].append((combine_run(run), run))
    series: list[HistorySeries] = []
    for key in sorted(groups):
        name = key[0]
        how, members = groups[key]
        members.sort(key=lambda m: (m[0].start_ns, m[0].run))
        values = [_values(m[0]) for m in members]
        marks: dict[int, dict[str, list[str]]] = {}
        changes: list[tuple[int, HistoryChange]] = []
        for metric in metrics:
            events, _ = find_changes([_sample(v, metric) for v in values], metric, thresholds)
            for i, verdict, confirmed, before, after, n_before, n_after in events:
                prev = members[i - 1] if i > 0 else None
                ids = {d.id for d in members[i][0].diagnoses}
                prev_ids = set() if prev is None else {d.id for d in prev[0].diagnoses}
                changes.append(
                    (
                        i,
                        HistoryChange(
                            run=members[i][0].run,
                            previous_run=None if prev is None else prev[0].run,
                            metric=metric,
                            before=before,
                            after=after,
                            change_fraction=(after - before) / abs(before) if before else None,
                            before_runs=n_before,
                            after_runs=n_after,
                            verdict=verdict,
                            confirmed=confirmed,
                            gained=sorted(ids - prev_ids),
                            lost=sorted(prev_ids - ids),
                            settings_changed=[]
                            if prev is None
                            else settings_changed(prev[1], members[i][1]),
                        ),
                    )
                )
                mark = marks.setdefault(i, {"outlier": [], "change": []})
                mark["outlier" if verdict == "outlier" else "change"].append(metric)
        changes.sort(key=lambda c: (c[0], list(metrics).index(c[1].metric)))
        shown = [i for i, m in enumerate(members) if since_ns is None or m[0].start_ns >= since_ns]
        if not shown:
            continue
        keep = set(shown)
        out_runs = [
            _with_marks(members[i][0], **marks[i]) if i in marks else members[i][0] for i in shown
        ]
        series.append(
            HistorySeries(
                name=name,
                grouped_by=how,
                runs=out_runs,
                changes=[c for i, c in changes if i in keep],
            )
        )
    return HistoryDocument(
        schema=HISTORY_SCHEMA,
        logdir=logdir,
        metrics=list(metrics),
        rule=RULE,
        series=series,
        skipped=dict(skipped or {}),
    )


def _with_marks(run: HistoryRun, outlier: list[str], change: list[str]) -> HistoryRun:
    if not outlier and not change:
        return run
    return msgspec.structs.replace(run, outlier=outlier, change=change)


def current_level(
    series: HistorySeries, metric: str = "step_time", thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> tuple[float, float, int] | None:
    """The series' current level of ``metric`` (pooled ``(mean, std, n)`` of the runs
    since its last change, outliers left out), None when no run has a value."""
    samples = [_sample(_values(r), metric) for r in series.runs]
    return find_changes(samples, metric, thresholds)[1]


def judge_against_level(
    level: tuple[float, float, int],
    run: HistoryRun,
    metric: str = "step_time",
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, Any] | None:
    """A new run judged against a series' level by the history's rule (the diff's rule
    with the ``history_min_change_fraction`` floor): :func:`.diff_rules.judge_stats`'s
    result, None when the run has no value of ``metric``."""
    better, per_step = METRICS[metric]
    s = _sample(_values(run), metric)
    if s is None:
        return None
    floor = thresholds.history_min_change_fraction * abs(level[0])
    return judge_stats(level, s, better, per_step, min_abs_delta=floor, thresholds=thresholds)


def _metric_text(metric: str, value: float | None) -> str:
    from tb_kineto_insights.analysis.units import fmt_bytes, fmt_duration_us

    if value is None:
        return "-"
    if metric == "step_time":
        return fmt_duration_us(value)
    if metric == "gpu_utilization":
        return f"{100 * value:.1f} %"
    return fmt_bytes(value)


def history_text(doc: HistoryDocument) -> str:
    """The text form of a history: per series, its change points first (run, metric,
    before → after, verdict, diagnoses gained/lost, settings changed), then one line per
    run (run, start time, step time median ± std, change or outlier marks, top
    diagnosis). Run and series names come from folder names and traces: each line is
    passed through :func:`~..analysis.units.terminal_safe` (a newline or an ESC sequence
    in a name is written as an escape, never acted on)."""
    from tb_kineto_insights.analysis.units import fmt_duration_us, terminal_safe

    lines: list[str] = []
    for s in doc.series:
        count = f"{len(s.runs)} run" + ("" if len(s.runs) == 1 else "s")
        lines.append(f"series {s.name} (by {s.grouped_by}): {count}")
        for c in s.changes:
            pct = "" if c.change_fraction is None else f" ({100 * c.change_fraction:+.1f} %)"
            state = "" if c.confirmed else " (unconfirmed: the series ends)"
            line = (
                f"  {c.verdict.upper()} {c.metric} at {c.run}: "
                f"{_metric_text(c.metric, c.before)} -> {_metric_text(c.metric, c.after)}"
                f"{pct}{state}"
            )
            if c.gained:
                line += f"; gained {', '.join(c.gained)}"
            if c.lost:
                line += f"; lost {', '.join(c.lost)}"
            lines.append(line)
            for item in c.settings_changed:
                lines.append(f"    setting changed: {item.field} {item.base} -> {item.new}")
        lines.append(f"  {'run':<28} {'start (UTC)':<25} {'step time':>22}  {'change':<18} top")
        for r in s.runs:
            step = fmt_duration_us(r.median_step_us)
            if r.std_step_us is not None and r.median_step_us is not None:
                step += f" ± {fmt_duration_us(r.std_step_us)}"
            marks = [f"change:{m}" for m in r.change] + [f"outlier:{m}" for m in r.outlier]
            lines.append(
                f"  {r.run:<28} {r.start_time:<25} {step:>22}  {','.join(marks) or '-':<18} "
                f"{r.top_diagnosis or '-'}"
            )
        lines.append("")
    if not doc.series:
        lines.append("no runs")
    for run, why in doc.skipped.items():
        lines.append(f"skipped {run}: {why}")
    return "\n".join(map(terminal_safe, lines)) + "\n"
