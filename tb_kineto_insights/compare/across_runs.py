"""The view across runs (the tab's landing view, ``/across_runs``): every run of the log
directory with its step time, GPU utilization, world size and top diagnoses, worst
first, from the same headline records as the history (``compare/history.py``), so it
reads no summary and no trace.

**A run's diagnoses**: for a run of several workers, those ``report`` lists for it
(``RunHeadlines.run_diagnoses``: the view across ranks' run-level diagnoses such as
``communication_straggler``, each rank's others, less those the view supersedes), each
naming its rank (``where``); the step time and GPU utilization are the slowest rank's
(``slowest_worker``).

**Ranking** (:func:`rank_runs`), the order ``report LOGDIR`` lists its diagnoses in
(``analysis/rules/``: most severe first, then the largest share of step time):
a run's place is decided by its worst diagnosis, ``(severity order, -impact_fraction)``;
ties by more diagnoses first, then the longer median step time, then the name. Runs with
no diagnosis follow, longest step first; then runs still being read; then runs that
could not be read.

**Time lost per step**: the share of the step the run's costliest diagnosis explains
(its largest ``impact_fraction``) times its median step time: what fixing that one
would save per step, in µs. Not the sum over diagnoses, which can explain one time
twice.

**Other orders** (:func:`page_of`, :data:`SORTS`): by time lost per step (most first),
step time (longest first) or GPU utilization (lowest first), each ``reverse``-able;
ties keep the ranking's order; runs still being read, then unreadable ones, stay last.
``position`` is then the place in that order.

**Filter** (:func:`page_of`): every whitespace-separated word of the query must occur,
case-insensitively, in the run name, in one of its diagnosis ids or as one of its
diagnoses' severities (``high``); the severity filter keeps the runs with a diagnosis of
at least that severity (``none``: the runs without one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import msgspec

from tb_kineto_insights.analysis.rules import SEVERITY_ORDER
from tb_kineto_insights.compare.history import RunHeadlines, combine_run
from tb_kineto_insights.schema.history import AcrossRunsPage, AcrossRunsRow, HeadlineDiagnosis

__all__ = [
    "ACROSS_RUNS_SCHEMA",
    "RULE",
    "SEVERITY_FILTERS",
    "SORTS",
    "TOP_DIAGNOSES",
    "page_of",
    "rank_runs",
]

#: Schema id of ``/across_runs``.
ACROSS_RUNS_SCHEMA = "tb_kineto_insights.across_runs/1"
#: Diagnoses shown per run.
TOP_DIAGNOSES = 3
RULE = (
    "worst first: by each run's most severe diagnosis (high, medium, low, info), then the "
    "largest share of step time it explains, as report lists diagnoses; runs without a "
    "diagnosis after, longest step first"
)
_LOADING = "loading"


def _severity(d: HeadlineDiagnosis) -> tuple[int, float]:
    order = (
        SEVERITY_ORDER.index(d.severity) if d.severity in SEVERITY_ORDER else len(SEVERITY_ORDER)
    )
    return order, -d.impact_fraction


def rank_runs(
    runs: Sequence[RunHeadlines], skipped: Mapping[str, str] | None = None
) -> list[AcrossRunsRow]:
    """Every run as an :class:`AcrossRunsRow`, ranked (module docstring).

    Args:
        runs: runs with at least one readable worker (any order).
        skipped: runs without a headline: run → ``"loading"`` or the error (naming the
            file), as ``/history``'s ``skipped``.
    """
    ready = []
    for run in runs:
        if not run.workers:
            continue
        combined = combine_run(run)
        diagnoses = sorted(combined.diagnoses, key=_severity)
        step = combined.median_step_us
        key = (
            0 if diagnoses else 1,
            _severity(diagnoses[0]) if diagnoses else (0, 0.0),
            -len(diagnoses),
            -(step if step is not None else -1.0),
            run.name,
        )
        ready.append((key, run, combined, diagnoses))
    ready.sort(key=lambda item: item[0])
    rows: list[AcrossRunsRow] = []
    for _, run, combined, diagnoses in ready:
        lost = max((d.impact_fraction for d in diagnoses), default=None)
        step = combined.median_step_us
        rows.append(
            AcrossRunsRow(
                position=len(rows) + 1,
                run=run.name,
                state="ready",
                error=None,
                ranks=combined.ranks,
                world_size=combined.world_size,
                gpu_model=combined.gpu_model,
                slowest_worker=combined.slowest_worker if combined.ranks > 1 else None,
                steps=combined.steps,
                median_step_us=combined.median_step_us,
                gpu_utilization_fraction=combined.gpu_utilization_fraction,
                diagnoses=diagnoses[:TOP_DIAGNOSES],
                diagnosis_ids=[d.id for d in diagnoses],
                time_lost_fraction=lost,
                time_lost_us_per_step=lost * step
                if lost is not None and step is not None
                else None,
            )
        )
    left = sorted((skipped or {}).items(), key=lambda kv: (kv[1] != _LOADING, kv[0]))
    for name, why in left:
        rows.append(
            AcrossRunsRow(
                position=len(rows) + 1,
                run=name,
                state=_LOADING if why == _LOADING else "error",
                error=None if why == _LOADING else why,
                ranks=0,
                world_size=None,
                gpu_model=None,
                slowest_worker=None,
                steps=0,
                median_step_us=None,
                gpu_utilization_fraction=None,
                diagnoses=[],
                diagnosis_ids=[],
                time_lost_fraction=None,
                time_lost_us_per_step=None,
            )
        )
    return rows


def _matches(row: AcrossRunsRow, words: list[str]) -> bool:
    name = row.run.lower()
    ids = [i.lower() for i in row.diagnosis_ids]
    severities = {d.severity.lower() for d in row.diagnoses}
    return all(w in name or any(w in i for i in ids) or w in severities for w in words)


def _at_least(severity: str) -> Callable[[AcrossRunsRow], bool]:
    """Whether a row has a diagnosis of at least ``severity`` (``none``: has none)."""
    if severity == "none":
        return lambda row: row.state == "ready" and not row.diagnosis_ids
    bar = SEVERITY_ORDER.index(severity)

    def keep(row: AcrossRunsRow) -> bool:
        return any(
            d.severity in SEVERITY_ORDER and SEVERITY_ORDER.index(d.severity) <= bar
            for d in row.diagnoses
        )

    return keep


#: The orders of :func:`page_of`: name → the value a row is ordered by, worst first
#: (smaller first); None: the ranking itself.
SORTS: dict[str, Callable[[AcrossRunsRow], float] | None] = {
    "worst": None,
    "lost": lambda r: -(r.time_lost_us_per_step or 0.0),
    "step": lambda r: -(r.median_step_us or 0.0),
    "util": lambda r: r.gpu_utilization_fraction if r.gpu_utilization_fraction is not None else 2.0,
}
#: The severity filter's values (``""``: no filter).
SEVERITY_FILTERS = ("", *SEVERITY_ORDER, "none")


def _ordered(rows: Sequence[AcrossRunsRow], sort: str, reverse: bool) -> list[AcrossRunsRow]:
    """``rows`` (in the ranking's order) in ``sort``'s order, ``reverse``d or not; rows
    without numbers (loading, unreadable) last, as ranked; ``position`` renumbered when
    the order is not the ranking's."""
    key = SORTS[sort]
    if key is None and not reverse:
        return list(rows)
    ready = [r for r in rows if r.state == "ready"]
    rest = [r for r in rows if r.state != "ready"]
    if key is None:
        ready.reverse()
    else:
        ready.sort(key=key, reverse=reverse)  # stable: ties keep the ranking's order
    return [msgspec.structs.replace(r, position=i) for i, r in enumerate([*ready, *rest], start=1)]


def page_of(
    rows: Sequence[AcrossRunsRow],
    query: str,
    offset: int,
    limit: int,
    *,
    sort: str = "worst",
    reverse: bool = False,
    severity: str = "",
) -> AcrossRunsPage:
    """One page of the ranked ``rows`` (:func:`rank_runs`'s order) in ``sort``'s order
    (:data:`SORTS`, ``reverse``d or not): those matching ``query`` and ``severity``
    (module docstring), from ``offset`` (0-based, in the matched list), at most
    ``limit``. ``position`` stays the place in the whole order (filters aside). Raises
    ValueError for a negative offset, a limit below 1, an unknown sort or severity."""
    if offset < 0 or limit < 1:
        raise ValueError("offset must be 0 or more and limit 1 or more")
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)} (got {sort!r})")
    if severity not in SEVERITY_FILTERS:
        allowed = ", ".join(s for s in SEVERITY_FILTERS if s)
        raise ValueError(f"severity must be one of {allowed} (got {severity!r})")
    words = query.lower().split()
    ordered = _ordered(rows, sort, reverse)
    keep = _at_least(severity) if severity else None
    matched = [
        r for r in ordered if (not words or _matches(r, words)) and (keep is None or keep(r))
    ]
    return AcrossRunsPage(
        schema=ACROSS_RUNS_SCHEMA,
        query=query,
        total=len(rows),
        matched=len(matched),
        offset=offset,
        limit=limit,
        loading=sum(r.state == _LOADING for r in rows),
        rule=RULE,
        rows=matched[offset : offset + limit],
        sort=sort,
        reverse=reverse,
        severity=severity,
    )
