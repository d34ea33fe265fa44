"""Many-rank runs built from two real rank traces (``../shared/traces/h200x2``), for the
1,024-rank benchmark (``bench_ranks.py``) and tests (``tests/test_many_ranks.py``).

A real two-rank run is summarised once (the panels the view across ranks reads:
``health``, ``steps``, ``communication``); its two rank summaries are then copied to
``n`` ranks, each copy renamed (``distributed_info.rank`` / ``world_size``, worker
``rank<N>``) and its collective sequence jittered: every collective's start and end move
by a seeded uniform offset in ``[0, jitter_us]`` µs (end never before start). Nothing is
re-read: this is what the plugin does from cached per-rank summaries.

- :func:`balanced_run`: ``ddp_default``'s rank 0 and rank 1 alternately (no straggler).
- :func:`straggler_run`: ``ddp_straggler``'s rank 0 (it waits ≈ 20 ms/step in its
  collectives for rank 1) for every rank but one, which is rank 1 (it sleeps 20 ms per
  step before ``backward()``, see that run's ``recording_info.json``): one straggler
  among ``n``.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tb_kineto_insights.analysis.communication import communication_summary
from tb_kineto_insights.analysis.context import build_index
from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.trace_quality import trace_quality_summary
from tb_kineto_insights.trace.reader import read_trace

REPO = Path(__file__).resolve().parents[1]
H200X2 = REPO.parent / "shared" / "traces" / "h200x2"


@functools.cache
def real_rank_summaries(run_dir: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rank 0 and rank 1 summaries (``health``, ``steps``, ``communication``) of a
    two-rank run folder, in rank order.

    Raises:
        ValueError: the folder does not hold exactly two ``*.pt.trace.json.gz`` files.
    """
    files = sorted(Path(run_dir).glob("*.pt.trace.json.gz"))
    if len(files) != 2:
        raise ValueError(f"{run_dir}: expected 2 rank traces, found {len(files)}")
    out = []
    for path in files:
        trace = read_trace(str(path))
        index = build_index(trace)
        out.append(
            msgspec.to_builtins(
                {
                    "health": trace.health.panel(trace_quality_summary(index)),
                    "steps": steps_summary(index),
                    "communication": communication_summary(index),
                }
            )
        )
    out.sort(key=lambda s: s["health"]["distributed_info"]["rank"])
    return out[0], out[1]


def jittered(
    summary: dict[str, Any], rank: int, world_size: int, rng: np.random.Generator, jitter_us: float
) -> dict[str, Any]:
    """A copy of one rank summary renamed to ``rank`` of ``world_size``, each collective's
    ``start_ns``/``end_ns`` (and ``start_us``) moved by the same uniform offset in
    ``[0, jitter_us]`` µs and its end by another (never before its start)."""
    out = {
        "health": copy.deepcopy(summary["health"]),
        "steps": summary["steps"],  # read only by the view: shared
        "communication": dict(summary["communication"]),
    }
    info = out["health"].setdefault("distributed_info", {})
    info["rank"], info["world_size"] = rank, world_size
    sequence = summary["communication"].get("sequence") or []
    n = len(sequence)
    shift = (rng.random(n) * jitter_us * 1000.0).astype(np.int64).tolist()
    shift_end = (rng.random(n) * jitter_us * 1000.0).astype(np.int64).tolist()
    new_sequence = []
    for entry, ds, de in zip(sequence, shift, shift_end, strict=True):
        e = dict(entry)
        start = int(entry["start_ns"]) + ds
        e["start_ns"] = start
        e["start_us"] = start / 1000.0
        e["end_ns"] = max(start, int(entry["end_ns"]) + de)
        new_sequence.append(e)
    out["communication"]["sequence"] = new_sequence
    return out


def many_ranks(
    sources: list[dict[str, Any]], n: int, seed: int = 0, jitter_us: float = 50.0
) -> list[tuple[str, dict[str, Any]]]:
    """``n`` ``(worker name, summary)`` pairs: rank ``r`` copies ``sources[r]`` (a list
    of length ``n``, entries may repeat), jittered (:func:`jittered`)."""
    rng = np.random.default_rng(seed)
    return [(f"rank{r}", jittered(sources[r], r, n, rng, jitter_us)) for r in range(n)]


def balanced_run(n: int, seed: int = 0, jitter_us: float = 50.0) -> list[tuple[str, Any]]:
    """``n`` ranks from ``ddp_default`` (rank 0 / rank 1 alternately): no straggler."""
    r0, r1 = real_rank_summaries(str(H200X2 / "ddp_default"))
    return many_ranks([r0 if r % 2 == 0 else r1 for r in range(n)], n, seed, jitter_us)


def straggler_run(
    n: int, straggler: int, seed: int = 0, jitter_us: float = 50.0
) -> list[tuple[str, Any]]:
    """``n`` ranks from ``ddp_straggler``: rank ``straggler`` is its rank 1 (20 ms sleep
    per step), every other rank its rank 0 (waits for it)."""
    r0, r1 = real_rank_summaries(str(H200X2 / "ddp_straggler"))
    return many_ranks([r1 if r == straggler else r0 for r in range(n)], n, seed, jitter_us)
