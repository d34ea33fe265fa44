"""The spans the view across ranks compares (:mod:`.run_view`): one span summary per
rank, chosen from a run's workers, and the rank each one says it is.

Definitions:

- rank of a span summary (:func:`rank_of`): ``distributedInfo.rank`` and
  ``world_size`` of its ``health`` panel, each ``None`` where absent or not an integer.
- one span per worker (:func:`run_view_inputs`): ``spans[span_index]``, the latest by
  default; a worker without a span at that index is left out.
- a worker holds several ranks when its spans carry different ranks in overlapping time
  windows, a span's window being its collectives' first start to last end on the
  trace's clock (ns; :func:`_time_range_ns`). Each rank is then its own entry, named
  ``"<worker> (rank N)"``. Spans without collectives have no window and never split a
  worker (there is nothing to match across ranks).

:class:`RunViewSpan` names what the view reads of a summary: ``health``, ``steps`` and
``communication``.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from tb_kineto_insights.schema.communication import CollectiveCall, CommunicationPanel
from tb_kineto_insights.schema.health import HealthPanel
from tb_kineto_insights.schema.steps import StepsPanel
from tb_kineto_insights.trace.model import int_in_range


class RunViewSpan(Protocol):
    """What the view across ranks reads of a span summary: its ``health``, ``steps``
    and ``communication`` panels. A :class:`~tb_kineto_insights.schema.Summary` is one;
    the plugin passes just these three panels at many ranks (``plugin.RUN_VIEW_PANELS``)."""

    @property
    def health(self) -> HealthPanel: ...

    @property
    def steps(self) -> StepsPanel: ...

    @property
    def communication(self) -> CommunicationPanel: ...


_S = TypeVar("_S", bound=RunViewSpan)


def rank_of(summary: RunViewSpan) -> tuple[int | None, int | None]:
    """``(rank, world_size)`` of a span summary's ``distributedInfo``, each ``None``
    where absent or not an integer in range (a bool, a list or an object is not one: the
    metadata is copied from the file as written), as :attr:`~..trace.model.Trace.rank`
    and :attr:`~..trace.model.Trace.world_size` read them."""
    info = summary.health.distributed_info or {}
    return (
        int_in_range(info.get("rank"), 0, 2**31 - 1),
        int_in_range(info.get("world_size"), 1, 2**31 - 1),
    )


def _time_range_ns(summary: RunViewSpan) -> tuple[int, int] | None:
    """First collective start to last collective end on the trace's clock (ns); ``None``
    without collectives (step times in a summary are relative to its first step)."""
    seq = summary.communication.sequence
    if not seq:
        return None
    return _start_ns(seq[0]), max(_end_ns(e) for e in seq)


def run_view_inputs(
    workers: list[tuple[str, list[_S]]], span_index: int = -1
) -> tuple[list[tuple[str, _S]], list[str]]:
    """The ``(name, span summary)`` pairs the view across ranks compares, from each
    worker's readable span summaries (in span order), and notes.

    Normally one span per worker: ``spans[span_index]`` (the latest by default). A
    worker whose spans carry different ``distributedInfo.rank`` values in overlapping
    time windows holds several ranks saved under one worker name (a recipe that names
    every rank's file alike): each rank becomes its own entry, named
    ``"<worker> (rank N)"``, with ``span_index`` taken among that rank's spans. Time
    windows are those of the spans' collectives (first start to last end), so spans
    without collectives are never split (there is nothing to match across ranks).
    Workers without a span at ``span_index`` are left out.
    """
    out: list[tuple[str, _S]] = []
    notes: list[str] = []
    for name, spans in workers:
        by_rank: dict[int, list[_S]] = {}
        for s in spans:
            rank, _ = rank_of(s)
            if rank is not None:
                by_rank.setdefault(rank, []).append(s)
        if len(by_rank) > 1 and _overlapping(by_rank):
            notes.append(
                f"Worker {name!r} holds spans of ranks "
                + ", ".join(str(r) for r in sorted(by_rank))
                + " in the same time window (files of several ranks saved under one "
                "worker name): each rank is treated as its own worker."
            )
            for rank in sorted(by_rank):
                chosen = _pick(by_rank[rank], span_index)
                if chosen is not None:
                    out.append((f"{name} (rank {rank})", chosen))
            continue
        chosen = _pick(spans, span_index)
        if chosen is not None:
            out.append((name, chosen))
    return out, notes


def _pick(spans: list[_S], index: int) -> _S | None:
    try:
        return spans[index]
    except IndexError:
        return None


def _overlapping(by_rank: dict[int, list[_S]]) -> bool:
    """Do spans of two different ranks overlap in time?"""
    ranges = [
        (rank, r)
        for rank, spans in by_rank.items()
        for s in spans
        if (r := _time_range_ns(s)) is not None
    ]
    for i, (rank_a, (a0, a1)) in enumerate(ranges):
        for rank_b, (b0, b1) in ranges[i + 1 :]:
            if rank_a != rank_b and a0 < b1 and b0 < a1:
                return True
    return False


def _start_ns(entry: CollectiveCall) -> int:
    """Start in ns: the exact ``start_ns`` (a float µs on an epoch clock keeps only
    about a quarter µs)."""
    return entry.start_ns


def _end_ns(entry: CollectiveCall) -> int:
    """End in ns: ``end_ns``."""
    return entry.end_ns
