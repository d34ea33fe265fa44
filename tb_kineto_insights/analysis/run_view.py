"""Run-level view across the workers of one run (one worker per rank): step time and
communication per rank, and the same collective matched across ranks to find who
arrives last.

Input: ``(worker name, span summary)`` pairs, each summary holding ``health``
(``distributed_info``), ``steps`` and ``communication``
(:func:`.communication.communication_summary`).

- rank: ``distributedInfo.rank``; if any worker lacks it, or two workers claim the same
  rank, the worker order (0, 1, …) is used for every worker, with a note.
- matching: within a process group, the same collective on every rank that takes part
  in that group (every worker with a collective of that group). With ``Seq`` args on
  every worker the key is ``(process group, Seq)``. Otherwise it is ``(process group,
  kind, step number, k)``: the k-th collective of that kind and group within that
  ``ProfilerStep``. Kind and step are part of the key because ranks of one job
  interleave collectives of different groups differently when the trace does not say
  which group a kernel belongs to (seen in hta's ``sampled_2ranks``: step 552 runs
  all_to_all, all_to_all, all_reduce on rank 0 but all_to_all, all_reduce, all_to_all
  on rank 1), and profiling windows of two ranks need not start at the same collective.
- per matched collective: start skew = latest − earliest kernel start among the ranks;
  the rank with the latest start (unique, skew > 0) arrived last; every other rank
  waited ``latest − its start`` for it (``wait_us``, summed per rank); a rank's
  lateness is ``its start − earliest``.
- straggler candidate: the rank that arrives last most often; ``last_fraction`` is its
  share of the matched collectives it takes part in.

Start times are each trace's own clock: ranks on different hosts carry any clock offset
between the hosts into the skew.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds

#: Matched collectives listed in ``largest_skews``.
LARGEST_SKEWS = 20


def _rank_of(summary: dict[str, Any]) -> tuple[int | None, int | None]:
    info = (summary.get("health") or {}).get("distributed_info") or {}
    rank, world = info.get("rank"), info.get("world_size")
    return (
        rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
        world if isinstance(world, int) and not isinstance(world, bool) else None,
    )


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {
            "count": 0,
            "mean_us": None,
            "median_us": None,
            "p90_us": None,
            "max_us": None,
            "total_us": 0.0,
        }
    arr = np.asarray(values, dtype=np.float64)
    return {
        "count": int(arr.size),
        "mean_us": float(arr.mean()),
        "median_us": float(np.median(arr)),
        "p90_us": float(np.percentile(arr, 90)),
        "max_us": float(arr.max()),
        "total_us": float(arr.sum()),
    }


def _start_ns(entry: dict[str, Any]) -> int:
    """Start in ns: the exact ``start_ns`` when present (a float µs on an epoch clock
    keeps only about a quarter µs), else ``start_us``."""
    ns = entry.get("start_ns")
    return ns if isinstance(ns, int) else round(float(entry["start_us"]) * 1000.0)


def _keys(sequence: list[dict[str, Any]], by_seq: bool) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Matching key → entry, for one worker's sequence (first entry wins a duplicate)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    nth: Counter[tuple[Any, ...]] = Counter()
    for entry in sequence:
        pg = str(entry.get("pg", "0"))
        if by_seq:
            key: tuple[Any, ...] = (pg, entry.get("seq"))
        else:
            group = (pg, entry.get("kind"), entry.get("step"))
            key = (*group, nth[group])
            nth[group] += 1
        out.setdefault(key, entry)
    return out


def run_summary(workers: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The run-level view (see the module docstring).

    Keys: ``worker_count``; ``world_size`` (from distributedInfo, if any);
    ``rank_source`` (``distributed_info`` or ``worker_order``); ``match_key``
    (``seq`` or ``kind_step_order``); ``ranks`` (sorted by rank: ``rank``, ``worker``,
    ``step_count``, ``mean_step_us``, ``mean_comm_us``, ``mean_exposed_us``,
    ``exposed_fraction``, ``collective_count``, ``matched_count``, ``last_count``,
    ``last_fraction``, ``wait_us`` (summed), ``mean_wait_us``, ``mean_lateness_us``);
    ``process_groups`` (``pg``, ``ranks``, ``matched``, ``unmatched``); ``matched_count``;
    ``unmatched_count``; ``kind_mismatches``; ``skew_us`` (``count``, ``mean_us``,
    ``median_us``, ``p90_us``, ``max_us``, ``total_us``); ``largest_skews`` (``pg``,
    ``kind``, ``step``, ``skew_us``, ``last_rank``, ``start_offsets_us`` per rank);
    ``steps`` (step numbers common to all workers: per rank ``durations_us`` and
    ``spread_us`` = max − min); ``straggler`` (``rank``, ``worker``, ``last_count``,
    ``last_fraction``, ``matched_count``, ``mean_lateness_us``,
    ``mean_skew_when_last_us``) or ``None``; ``notes``.
    """
    notes: list[str] = []
    infos = [_rank_of(s) for _, s in workers]
    ranks = [r for r, _ in infos]
    if workers and all(r is not None for r in ranks) and len(set(ranks)) == len(ranks):
        rank_list = [int(r) for r in ranks if r is not None]
        rank_source = "distributed_info"
    else:
        rank_list = list(range(len(workers)))
        rank_source = "worker_order"
        if workers and any(r is None for r in ranks):
            notes.append(
                "Some workers have no distributedInfo.rank: ranks are numbered in worker order."
            )
        elif workers:
            notes.append("Two workers claim the same rank: ranks are numbered in worker order.")
    worlds = {w for _, w in infos if w is not None}
    world = max(worlds) if worlds else None
    if world is not None and 1 < len(workers) < world:
        notes.append(
            f"Only {len(workers)} of {world} ranks were profiled: skew and the straggler "
            "are among these ranks only."
        )

    comms = [s.get("communication") or {} for _, s in workers]
    sequences = [list(c.get("sequence") or []) for c in comms]
    by_seq = bool(workers) and all(
        c.get("seq_source") == "args" for c in comms if c.get("sequence")
    )
    by_seq = by_seq and any(c.get("sequence") for c in comms)
    counts = [int(c.get("collective_count") or 0) for c in comms]
    if len(set(counts)) > 1:
        listed = ", ".join(f"rank {r}: {n}" for r, n in sorted(zip(rank_list, counts, strict=True)))
        notes.append(
            f"Workers have different numbers of collectives ({listed}); each keeps its own "
            "numbers, and only collectives found on every rank of their process group are "
            "matched."
        )
    if any(c.get("sequence_truncated") for c in comms):
        notes.append("Some workers list only part of their collectives: matching uses those.")

    keyed = [_keys(seq, by_seq) for seq in sequences]
    pgs = sorted({key[0] for k in keyed for key in k})
    n_workers = len(workers)
    last_count = [0] * n_workers
    matched_of = [0] * n_workers
    wait_us = [0.0] * n_workers
    lateness_us = [0.0] * n_workers
    skew_when_last: list[list[float]] = [[] for _ in range(n_workers)]
    skews: list[float] = []
    largest: list[dict[str, Any]] = []
    groups = []
    kind_mismatches = 0
    unmatched_total = 0
    for pg in pgs:
        members = [i for i, k in enumerate(keyed) if any(key[0] == pg for key in k)]
        all_keys = sorted(
            {key for i in members for key in keyed[i] if key[0] == pg},
            key=lambda key: tuple((x is None, str(type(x)), x) for x in key),
        )
        matched = unmatched = 0
        for key in all_keys:
            entries = [keyed[i].get(key) for i in members]
            if any(e is None for e in entries) or len(members) < 2:
                unmatched += 1
                continue
            matched += 1
            present = [e for e in entries if e is not None]
            if len({e.get("kind") for e in present}) > 1:
                kind_mismatches += 1
            starts_ns = [_start_ns(e) for e in present]
            lo_ns, hi_ns = min(starts_ns), max(starts_ns)
            skew = (hi_ns - lo_ns) / 1000.0
            skews.append(skew)
            latest = [j for j, s in enumerate(starts_ns) if s == hi_ns]
            last = members[latest[0]] if skew > 0 and len(latest) == 1 else None
            for j, i in enumerate(members):
                matched_of[i] += 1
                wait_us[i] += (hi_ns - starts_ns[j]) / 1000.0
                lateness_us[i] += (starts_ns[j] - lo_ns) / 1000.0
            if last is not None:
                last_count[last] += 1
                skew_when_last[last].append(skew)
            largest.append(
                {
                    "pg": pg,
                    "kind": present[0].get("kind"),
                    "step": present[0].get("step"),
                    "seq": present[0].get("seq"),
                    "skew_us": skew,
                    "last_rank": rank_list[last] if last is not None else None,
                    "start_offsets_us": {
                        str(rank_list[i]): (starts_ns[j] - lo_ns) / 1000.0
                        for j, i in enumerate(members)
                    },
                }
            )
        unmatched_total += unmatched
        groups.append(
            {
                "pg": pg,
                "ranks": sorted(rank_list[i] for i in members),
                "matched": matched,
                "unmatched": unmatched,
            }
        )
    largest.sort(key=lambda d: -d["skew_us"])
    if n_workers < 2:
        notes.append("One worker: nothing to match across ranks.")
    elif not skews and any(sequences):
        notes.append("No collective could be matched across ranks.")
    if unmatched_total and skews:
        notes.append(
            f"{unmatched_total} collectives were not found on every rank of their process "
            "group and are left out of the skew."
        )
    if kind_mismatches:
        notes.append(
            f"{kind_mismatches} matched collectives have different kinds on different ranks."
        )
    if n_workers > 1 and skews:
        notes.append(
            "Start times come from each trace's own clock: ranks on different hosts carry "
            "any offset between the host clocks into the skew."
        )

    rows = []
    for i, (name, summary) in enumerate(workers):
        steps = summary.get("steps") or {}
        comm = comms[i]
        rows.append(
            {
                "rank": rank_list[i],
                "worker": name,
                "step_count": steps.get("count"),
                "mean_step_us": steps.get("mean_step_us"),
                "mean_comm_us": comm.get("mean_comm_us"),
                "mean_exposed_us": comm.get("mean_exposed_us"),
                "exposed_fraction": comm.get("exposed_fraction"),
                "collective_count": counts[i],
                "matched_count": matched_of[i],
                "last_count": last_count[i],
                "last_fraction": last_count[i] / matched_of[i] if matched_of[i] else None,
                "wait_us": wait_us[i],
                "mean_wait_us": wait_us[i] / matched_of[i] if matched_of[i] else None,
                "mean_lateness_us": lateness_us[i] / matched_of[i] if matched_of[i] else None,
            }
        )
    straggler = None
    if skews and max(last_count) > 0:
        top = max(range(n_workers), key=lambda i: (last_count[i], lateness_us[i]))
        straggler = {
            "rank": rank_list[top],
            "worker": workers[top][0],
            "last_count": last_count[top],
            "matched_count": matched_of[top],
            "last_fraction": last_count[top] / matched_of[top],
            "mean_lateness_us": lateness_us[top] / matched_of[top],
            "mean_skew_when_last_us": float(np.mean(skew_when_last[top])),
        }
    order = sorted(range(n_workers), key=lambda i: rank_list[i])
    return {
        "worker_count": n_workers,
        "world_size": world,
        "rank_source": rank_source,
        "match_key": "seq" if by_seq else "kind_step_order",
        "ranks": [rows[i] for i in order],
        "process_groups": groups,
        "matched_count": len(skews),
        "unmatched_count": unmatched_total,
        "kind_mismatches": kind_mismatches,
        "skew_us": _stats(skews),
        "largest_skews": largest[:LARGEST_SKEWS],
        "steps": _step_times(workers, rank_list),
        "straggler": straggler,
        "notes": notes,
    }


def _step_times(workers: list[tuple[str, dict[str, Any]]], ranks: list[int]) -> list[Any]:
    per_worker: list[dict[int, float]] = []
    for _, summary in workers:
        steps = (summary.get("steps") or {}).get("steps") or []
        per_worker.append({int(s["number"]): float(s["duration_us"]) for s in steps})
    if len(per_worker) < 2:
        return []
    common = set.intersection(*(set(d) for d in per_worker))
    out = []
    for number in sorted(common):
        durations = [d[number] for d in per_worker]
        out.append(
            {
                "number": number,
                "durations_us": {str(r): v for r, v in zip(ranks, durations, strict=True)},
                "spread_us": max(durations) - min(durations),
            }
        )
    return out


def run_diagnoses(
    run: dict[str, Any], thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[dict[str, Any]]:
    """``communication_straggler``: one rank arrives last in at least
    ``straggler_last_fraction`` of the matched collectives it takes part in, and it starts
    them on average at least ``straggler_min_skew_us`` after the earliest rank.

    ``impact_fraction``: what the other ranks wait for it per step (their mean summed wait)
    over the mean step time; ``high`` from ``exposed_comm_high_fraction``.
    """
    th = thresholds
    s = run.get("straggler")
    if not s or s.get("last_fraction") is None:
        return []
    if s["last_fraction"] < th.straggler_last_fraction:
        return []
    if (s.get("mean_lateness_us") or 0.0) < th.straggler_min_skew_us:
        return []
    others = [r for r in run.get("ranks", []) if r["rank"] != s["rank"] and r["matched_count"]]
    steps = [r["step_count"] for r in run.get("ranks", []) if r.get("step_count")]
    step_us = [r["mean_step_us"] for r in run.get("ranks", []) if r.get("mean_step_us")]
    wait_per_step = (
        float(np.mean([r["wait_us"] for r in others])) / max(min(steps), 1)
        if others and steps
        else None
    )
    mean_step = float(np.mean(step_us)) if step_us else None
    impact = min(wait_per_step / mean_step, 1.0) if wait_per_step is not None and mean_step else 0.0
    return [
        {
            "id": "communication_straggler",
            "severity": "high" if impact >= th.exposed_comm_high_fraction else "medium",
            "title": (
                f"Rank {s['rank']} reaches {100 * s['last_fraction']:.0f} % of the collectives "
                f"last, {s['mean_lateness_us'] / 1000:.2f} ms after the first rank on average"
            ),
            "evidence": {
                "rank": s["rank"],
                "worker": s["worker"],
                "last_fraction": s["last_fraction"],
                "last_count": s["last_count"],
                "matched_count": s["matched_count"],
                "mean_lateness_us": s["mean_lateness_us"],
                "mean_skew_when_last_us": s["mean_skew_when_last_us"],
                "others_wait_us_per_step": wait_per_step,
                "mean_step_us": mean_step,
                "skew_median_us": (run.get("skew_us") or {}).get("median_us"),
                "ranks_profiled": run.get("worker_count"),
                "world_size": run.get("world_size"),
            },
            "recommendation": (
                f"The other ranks wait in their collectives for rank {s['rank']}. Compare "
                "its step, idle and kernel panels with another rank's: uneven work or data "
                "(unbalanced shards, variable sequence lengths, a slower data path), extra "
                "work on that rank only (logging, evaluation or checkpointing on rank 0), a "
                "slower or throttled GPU (nvidia-smi clocks, temperature, ECC), or host "
                "contention (CPU affinity, NUMA, other processes). If ranks run on different "
                "hosts, rule out clock offset first: the skew should vary across steps."
            ),
            "panel": "run",
            "impact_fraction": impact,
        }
    ]
