"""The diff of two sides (a run, a worker or a span each), as the plugin and the command
line make it: each side's spans summarised, the unreadable ones named (``warnings``,
the side's ``errors``) and left out, the ``tb_kineto_insights.diff/1`` document of the
rest (:func:`~tb_kineto_insights.compare.diff.diff`). The plugin's sides come from its
loader (:func:`diff_answer`); the command line's are read here, both sides' files at once
on every core when that pays, through the shared cache when there is one
(:func:`compare_sides`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.compare import before_after as compare
from tb_kineto_insights.compare.diff import diff
from tb_kineto_insights.logdir.discovery import LogdirError, Span
from tb_kineto_insights.schema import DiffDocument
from tb_kineto_insights.service.errors import Unreadable
from tb_kineto_insights.summary import FAILED_TRACE

if TYPE_CHECKING:  # the command line's diff loads neither the cache nor the plugin's loader
    from tb_kineto_insights.service.workspace import Workspace
    from tb_kineto_insights.store.cache import LoadResult
    from tb_kineto_insights.store.cached_summaries import CachedSummaries
    from tb_kineto_insights.summary import SpanResult

#: The diff of ``(base_side, exp_side, *, base_label, exp_label)``; sides are
#: ``[("worker/span", Summary), ...]``; a :class:`DiffDocument` or built-ins.
DiffHook = Callable[..., Any]
#: The default diff: :func:`~tb_kineto_insights.compare.diff.diff`.
DEFAULT_DIFF: DiffHook = diff


@dataclass(frozen=True)
class DiffAnswer:
    """A diff, or what it waits for: ``body`` (its JSON) when every span of both sides
    is read (or failed), else ``pending`` (the 202 document)."""

    body: bytes | None = None
    pending: dict[str, Any] | None = None


def with_warnings(diffed: Any, warnings: Sequence[str]) -> Any:
    """A diff (Struct or built-ins) with ``warnings`` added to its own."""
    if isinstance(diffed, DiffDocument) and warnings:
        return msgspec.structs.replace(diffed, warnings=[*diffed.warnings, *warnings])
    if isinstance(diffed, dict) and warnings:
        return {**diffed, "warnings": [*diffed.get("warnings", []), *warnings]}
    return diffed


def diff_answer(
    workspace: Workspace,
    base: list[Span],
    exp: list[Span],
    labels: tuple[str, str],
    wait_s: float,
    hook: DiffHook,
) -> DiffAnswer:
    """The diff of spans ``base`` against ``exp`` (``labels``: how each side is named),
    made once for every request asking for the same spans at the same time, and kept
    while none of their files changes (``workspace.answers``: the key names every
    file's identity, so a kept answer skips even the gathering of the summaries).

    Raises:
        Unreadable: no span of a side could be read, or the diff cannot be made (e.g.
            no steps on one side).
    """
    spans = base + exp
    idents = [workspace.request_identity(s) for s in spans]
    key = ("diff", id(hook), labels, len(base), tuple(idents))

    def make() -> tuple[DiffAnswer, int | None]:
        gathered = workspace.gather(spans, wait_s, idents)
        pending = gathered.pending(spans, with_run=True)
        if pending:
            doc = {"state": "loading", "pending": pending, "total": len(spans)}
            return DiffAnswer(pending=doc), None
        sides: list[list[tuple[Span, LoadResult]]] = [[], []]
        warnings: list[str] = []
        for i, (span, status, result) in enumerate(
            zip(spans, gathered.statuses, gathered.results, strict=True)
        ):
            which = 0 if i < len(base) else 1
            if result is None or result.summary is None:
                warnings.append(f"{('base', 'exp')[which]}: {status.error or 'not readable'}")
            else:
                sides[which].append((span, result))
        for which, name in ((0, "base"), (1, "exp")):
            if not sides[which]:
                raise Unreadable(f"{name}: no trace could be read ({'; '.join(warnings)})")
        from tb_kineto_insights.store.cache import encode_json

        b, e = ([(f"{s.worker}/{s.span}", r.decoded()) for s, r in side] for side in sides)
        try:
            diffed = hook(b, e, base_label=labels[0], exp_label=labels[1])
        except ValueError as exc:  # e.g. no steps on one side: the input's problem
            raise Unreadable(str(exc)) from None
        body = encode_json(with_warnings(diffed, warnings))
        # an error that may pass (I/O, a dead worker, a deadline): made, not kept
        lasting = all(s.error_kind in (None, FAILED_TRACE) for s in gathered.statuses)
        return DiffAnswer(body=body), len(body) if lasting else None

    return workspace.answers.get(key, make)


def compare_sides(
    base_spec: str, exp_spec: str, thresholds: Thresholds, cache_location: str | None
) -> tuple[DiffDocument, compare.LoadedSide]:
    """The diff of sides ``base_spec`` and ``exp_spec`` (run folders, trace files or
    ``LOGDIR:RUN``), and the experiment's side (``check`` reads its diagnoses); through
    the cache at ``cache_location`` when given, else each side read as it comes.

    Raises:
        ValueError: a side that does not resolve or has no readable trace
            (``before_after.SideError``), or a cache location fsspec cannot use.
        LogdirError: the storage cannot be listed.
        ImportError: a storage driver is missing.
    """
    summarize = None
    summaries = None
    if cache_location is not None:
        from tb_kineto_insights.store.cached_summaries import CachedSummaries

        summaries = CachedSummaries(cache_location, thresholds=thresholds)
        summarize = summaries.summarize
    sides = _both_sides_at_once(base_spec, exp_spec, thresholds, summaries)
    if sides is not None:  # both sides' files read at once, on every core
        (base_spans, exp_spans), found = sides
        base = compare.load_side(
            base_spec, thresholds=thresholds, summarize=found, spans=base_spans
        )
        exp = compare.load_side(exp_spec, thresholds=thresholds, summarize=found, spans=exp_spans)
    else:
        base = compare.load_side(base_spec, thresholds=thresholds, summarize=summarize)
        exp = compare.load_side(exp_spec, thresholds=thresholds, summarize=summarize)
    return compare.compare(base, exp, thresholds), exp


def _both_sides_at_once(
    base_spec: str, exp_spec: str, thresholds: Thresholds, summaries: CachedSummaries | None
) -> tuple[tuple[list[Span], list[Span]], Callable[[Span], SpanResult]] | None:
    """Both sides' spans and a ``summarize(span)`` that answers from their summaries,
    computed at once on every core (``store/parallel_summaries.py``); None when either
    side does not resolve (the sequential path then says why, base first) or when the
    files are too few or too small for worker processes to pay (the sequential path
    then reads them one by one)."""
    from tb_kineto_insights.store import parallel_summaries as ps

    try:
        base_spans = compare.resolve_side(base_spec)
        exp_spans = compare.resolve_side(exp_spec)
    except (ValueError, LogdirError):
        return None
    spans = base_spans + exp_spans
    total = sum(ps.estimated_json_bytes(s) for s in spans)
    if not ps.worker_count(total, len(spans)):
        return None
    if summaries is not None:
        results = list(summaries.summarize_all(spans))
    else:
        from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

        settings = ps.Settings(DEFAULT_MAX_JSON_BYTES, thresholds)
        results = [r for r, _ in ps.summarize_spans([ps.FileTask(s) for s in spans], settings)]
    by_span = {id(span): result for span, result in zip(spans, results, strict=True)}
    return (base_spans, exp_spans), lambda span: by_span[id(span)]
