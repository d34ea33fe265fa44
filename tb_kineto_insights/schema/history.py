"""Shape of the history of a log directory (``tb_kineto_insights.history/1``): the
per-span headline record stored beside each summary in the cache
(``analysis.headline.span_headline``), and the document ``history`` writes
(``compare.history.build_history``): series of runs in time order, and the runs where a
metric's level changed.

Kept in step with that code: tests round-trip headlines and documents through it.
"""

from __future__ import annotations

from typing import Any

from tb_kineto_insights.schema._base import Out
from tb_kineto_insights.schema.diff import ComparabilityItem


class HeadlineDiagnosis(Out, frozen=True, kw_only=True):
    """A diagnosis as the history keeps it: stable ``id``, ``severity``, the share of step
    time it explains (``impact_fraction``) and its ``title``. ``where``, in a run of
    several ranks (``RunHeadlines.run_diagnoses``): the worker it was found on
    (``rank1``), or ``all ranks`` for a diagnosis of the view across ranks; None in a
    span's headline."""

    id: str
    severity: str
    impact_fraction: float
    title: str
    where: str | None = None


class SpanHeadline(Out, frozen=True, kw_only=True):
    """One span's headline record, a few hundred bytes, written beside its summary in the
    cache (``<key>.headline``) so that a history of many runs reads no summary or trace.

    ``path``/``size_bytes``/``mtime``: the file it was computed from (seconds since the
    epoch). ``start_ns``: the trace's own clock, ``baseTimeNanoseconds`` + the first
    step's ``ts`` (ns since the epoch), None when the file has no
    ``baseTimeNanoseconds``. ``rank``/``world_size`` from ``distributedInfo`` (or the run
    metadata). Step times over the profiled steps in µs: ``steps`` counted, their
    ``median``/``mean``/``std`` (sample standard deviation; 0 for one step).
    ``gpu_utilization_fraction``: busy kernel time of the busiest device / step time.
    ``breakdown_us``: mean time per step by category. Memory of the main device:
    ``memory_peak_allocated_bytes``, ``memory_peak_reserved_bytes``,
    ``memory_growth_bytes_per_step`` (least-squares slope of step-end allocated bytes;
    None when not known). ``facts``: how it was recorded (``analysis.run_facts``: the
    fields ``compare.comparability`` compares), ``fact_sources`` where each came from
    (``trace`` or ``metadata``). ``label``/``preset``/``git_commit``/
    ``torch_version``/``cuda_version``: from the run metadata
    (``tb_kineto_insights.capture``), None when absent."""

    path: str
    size_bytes: int
    mtime: float
    start_ns: int | None
    rank: int | None
    world_size: int | None
    gpu_model: str | None
    steps: int
    median_step_us: float | None
    mean_step_us: float | None
    std_step_us: float | None
    gpu_utilization_fraction: float | None
    breakdown_us: dict[str, float]
    memory_peak_allocated_bytes: int | None
    memory_peak_reserved_bytes: int | None
    memory_growth_bytes_per_step: float | None
    diagnoses: list[HeadlineDiagnosis]
    facts: dict[str, Any]
    fact_sources: dict[str, str]
    label: str | None
    preset: str | None
    git_commit: str | None
    torch_version: str | None
    cuda_version: str | None


class HistoryRun(Out, frozen=True, kw_only=True):
    """One run of a series (``series[].runs[]``), from its workers' latest headlines.

    ``run``: the run's name in the log directory. ``start_ns`` (ns since the epoch) and
    ``start_time`` (ISO 8601, UTC) from ``time_source``: ``"trace"``
    (``baseTimeNanoseconds`` + first step, the earliest rank) or ``"file"`` (the
    trace file's modification time). ``ranks``: workers; ``world_size`` as recorded.
    Step time in µs of the slowest rank (``slowest_worker``: the largest mean step
    time): ``median_step_us``, ``mean_step_us``, ``std_step_us`` over its ``steps``.
    ``gpu_utilization_fraction``, ``breakdown_us`` of that rank;
    ``memory_peak_bytes`` (largest allocated peak over ranks) and
    ``memory_growth_bytes_per_step`` (largest); ``diagnoses``: for a run of several
    workers, those ``report`` lists for it (most severe first, then the largest impact;
    the view across ranks' run-level diagnoses included, the per-rank ones it supersedes
    left out, per id the first; ``where`` names the rank or ``all ranks``), else the one
    worker's, largest impact first; ``top_diagnosis`` the first id. ``metadata``:
    label, preset, git commit, torch and CUDA versions when recorded. ``outlier``: the
    metrics for which this run is a one-off outlier against its level; ``change``: the
    metrics whose level changed at this run."""

    run: str
    start_ns: int
    start_time: str
    time_source: str
    ranks: int
    world_size: int | None
    gpu_model: str | None
    slowest_worker: str | None
    steps: int
    median_step_us: float | None
    mean_step_us: float | None
    std_step_us: float | None
    gpu_utilization_fraction: float | None
    breakdown_us: dict[str, float]
    memory_peak_bytes: int | None
    memory_growth_bytes_per_step: float | None
    diagnoses: list[HeadlineDiagnosis]
    top_diagnosis: str | None
    metadata: dict[str, str]
    outlier: list[str]
    change: list[str]


class HistoryChange(Out, frozen=True, kw_only=True):
    """A change point (``series[].changes[]``): the first ``run`` whose ``metric`` left
    the previous level beyond noise (``compare.history`` module docstring: the diff's
    Welch rule, a minimum effect, a minimum number of runs per level), or a one-off
    ``outlier``.

    ``before``: the previous level (mean over its ``before_runs`` runs; for step time the
    mean over all their steps, µs); ``after``: the new level (the mean over the runs that
    confirm it, ``after_runs``) or, for an outlier, the run's own value.
    ``change_fraction``: (after − before) / before. ``verdict``: ``regressed``,
    ``improved`` or ``outlier``; ``confirmed``: False when the series ends before enough
    runs confirm the new level (``history_min_runs_per_level``). ``previous_run``: the run
    before it (what a diff of the change compares against). ``gained``/``lost``:
    diagnosis ids present at this run and not at the previous one, and the reverse.
    ``settings_changed``: recording differences from the previous run
    (``compare.comparability`` fields)."""

    run: str
    previous_run: str | None
    metric: str
    before: float
    after: float
    change_fraction: float | None
    before_runs: int
    after_runs: int
    verdict: str
    confirmed: bool
    gained: list[str]
    lost: list[str]
    settings_changed: list[ComparabilityItem]


class HistorySeries(Out, frozen=True, kw_only=True):
    """One series: runs of the same job (``name``, found by ``grouped_by``: ``label``,
    ``name`` (the run name's stem, shared by several runs), ``run`` (a run of its own),
    ``logdir``, ``regex`` or ``metadata:KEY``), in time order, and its change points
    (outliers included) in run order."""

    name: str
    grouped_by: str
    runs: list[HistoryRun]
    changes: list[HistoryChange]


class HistoryDocument(Out, frozen=True, kw_only=True):
    """``history --format json`` (``tb_kineto_insights.history/1``): the log directory,
    the ``metrics`` judged, the noise ``rule`` in words, the ``series``, and
    ``skipped``: runs left out with the reason (no readable span)."""

    schema: str
    logdir: str
    metrics: list[str]
    rule: str
    series: list[HistorySeries]
    skipped: dict[str, str]


class AcrossRunsRow(Out, frozen=True, kw_only=True):
    """One run of the view across runs (``/across_runs``, the tab's landing view), from
    its workers' latest headline records.

    ``position``: its place in the ranking, 1 = worst (``compare.across_runs``: the
    CLI's order of diagnoses, most severe then largest impact first, applied to each
    run's worst diagnosis). ``state``: ``ready``, ``loading`` (its traces are being read;
    no numbers yet) or ``error`` (none of its workers could be read: ``error`` says why,
    naming the file). ``ranks``: workers read; ``world_size`` as recorded. Step time in
    µs of the slowest rank (``slowest_worker``: the worker with the largest mean step
    time, None for a run of one worker; ``median_step_us``, ``steps``), its
    ``gpu_utilization_fraction``; ``diagnoses``: the run's diagnoses, most severe first,
    at most three: for a run of several workers those ``report`` lists for it (the view
    across ranks' run-level ones with ``where`` ``all ranks``, each rank's others with
    ``where`` its worker, per id the first), else its one worker's; ``diagnosis_ids``:
    the ids of all of them, in that order. ``time_lost_fraction``: the largest impact of
    its diagnoses (the share of the step its costliest one explains), and
    ``time_lost_us_per_step`` that share of ``median_step_us`` (None without a
    diagnosis or a step time): the larger of two diagnoses, never their sum, which can
    count one time twice. With another order than the ranking, ``position`` is the place
    in that order."""

    position: int
    run: str
    state: str
    error: str | None
    ranks: int
    world_size: int | None
    gpu_model: str | None
    slowest_worker: str | None
    steps: int
    median_step_us: float | None
    gpu_utilization_fraction: float | None
    diagnoses: list[HeadlineDiagnosis]
    diagnosis_ids: list[str]
    time_lost_fraction: float | None
    time_lost_us_per_step: float | None


class AcrossRunsPage(Out, frozen=True, kw_only=True):
    """``/across_runs`` (``tb_kineto_insights.across_runs/1``): one page of the ranked
    runs. ``total``: runs in the log directory; ``matched``: those the ``query`` matched
    (every whitespace-separated word in the run name or a diagnosis id, case-insensitive;
    ``""``: all); ``offset``/``limit``: the page's place in the matched list; ``loading``:
    runs still being read (the page asks again); ``rule``: the ranking in words;
    ``sort``: the order of the rows (``worst``: the ranking; ``lost``: time lost per
    step; ``step``: step time; ``util``: GPU utilization), ``reverse`` when it runs the
    other way than that order's worst-first direction; ``severity``: the severity filter
    (``""``: none; ``high``, ``medium``, ``low``, ``info``: runs with a diagnosis of at
    least that severity; ``none``: runs without a diagnosis)."""

    schema: str
    query: str
    total: int
    matched: int
    offset: int
    limit: int
    loading: int
    rule: str
    rows: list[AcrossRunsRow]
    sort: str
    reverse: bool
    severity: str
