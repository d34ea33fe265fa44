"""Many-rank runs built from two real rank traces (``../shared/traces/h200x2``), for the
1,024-rank benchmark (``bench_ranks.py``) and tests (``tests/test_many_ranks.py``).

A real two-rank run is summarised once (``Summary`` Structs; the view across ranks reads
their ``health``, ``steps`` and ``communication``); its two rank summaries are then copied to
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

import functools
from pathlib import Path
from typing import Any

import numpy as np
from msgspec.structs import replace

from tb_kineto_insights.schema import Summary
from tb_kineto_insights.summary import summarize_file

REPO = Path(__file__).resolve().parents[1]
H200X2 = REPO.parent / "shared" / "traces" / "h200x2"


@functools.cache
def real_rank_summaries(run_dir: str) -> tuple[Summary, Summary]:
    """The rank 0 and rank 1 summaries of a two-rank run folder, in rank order.

    Raises:
        ValueError: the folder does not hold exactly two ``*.pt.trace.json.gz`` files.
    """
    files = sorted(Path(run_dir).glob("*.pt.trace.json.gz"))
    if len(files) != 2:
        raise ValueError(f"{run_dir}: expected 2 rank traces, found {len(files)}")
    out = [summarize_file(str(path)) for path in files]
    out.sort(key=lambda s: (s.health.distributed_info or {})["rank"])
    return out[0], out[1]


def jittered(
    summary: Summary, rank: int, world_size: int, rng: np.random.Generator, jitter_us: float
) -> Summary:
    """A copy of one rank summary renamed to ``rank`` of ``world_size``, each collective's
    ``start_ns``/``end_ns`` (and ``start_us``) moved by the same uniform offset in
    ``[0, jitter_us]`` µs and its end by another (never before its start). Panels the
    view across ranks does not change are shared with ``summary`` (Structs are frozen)."""
    info = {**(summary.health.distributed_info or {}), "rank": rank, "world_size": world_size}
    sequence = summary.communication.sequence
    n = len(sequence)
    shift = (rng.random(n) * jitter_us * 1000.0).astype(np.int64).tolist()
    shift_end = (rng.random(n) * jitter_us * 1000.0).astype(np.int64).tolist()
    new_sequence = []
    for entry, ds, de in zip(sequence, shift, shift_end, strict=True):
        start = entry.start_ns + ds
        end = max(start, entry.end_ns + de)
        new_sequence.append(replace(entry, start_ns=start, start_us=start / 1000.0, end_ns=end))
    return replace(
        summary,
        health=replace(summary.health, distributed_info=info),
        communication=replace(summary.communication, sequence=new_sequence),
    )


def many_ranks(
    sources: list[Summary], n: int, seed: int = 0, jitter_us: float = 50.0
) -> list[tuple[str, Summary]]:
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
