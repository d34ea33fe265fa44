"""The same collective matched across ranks, and what each matched collective says:
skew, wait, lateness, transfer, the exposed part of each, the last rank and the delay it
causes, accumulated per rank, per step and per kind (:func:`match_collectives`), for
the view across ranks (:mod:`.run_view`).

Input: each rank's ``communication.sequence`` (every collective with its start, end,
message size and the exposed pieces of it, ns on the trace's own clock).

- matching: within a process group, the same collective on every rank that takes part
  in that group (every worker with a collective of that group). With ``Seq`` args on
  every worker the key is ``(process group, Seq)``. Otherwise it is ``(process group,
  kind, step number, k)``: the k-th collective of that kind and group within that
  ``ProfilerStep``. Kind and step are part of the key because ranks of one job
  interleave collectives of different groups differently when the trace does not say
  which group a kernel belongs to (seen in hta's ``sampled_2ranks``), and profiling
  windows of two ranks need not start at the same collective. A collective missing on
  a rank of its group is unmatched and counts in nothing below.

Words, each with one meaning (JSON keys and CLI text use them so):

- a rank *arrives* at a matched collective when its kernel starts (``s_r``); the
  collective's *latest start* ``L`` = max over ranks of ``s_r``, its *earliest end*
  ``E`` = min over ranks of the kernel ends ``e_r``.
- **skew** (of one matched collective) = ``L − min s_r``.
- **wait** (of a rank, in one matched collective) = ``L − s_r``: the time its kernel
  spins until the last rank arrives.
- **lateness** (of a rank, in one matched collective) = ``s_r − min s``.
- **transfer** time (of one matched collective) = ``max(0, E − L)``: the time all ranks
  are inside the collective, the only part that moves data at full speed. A rank's own
  transfer time is ``max(0, e_r − L)``, so a rank's collective time = its wait + its
  transfer.
- **exposed** wait / transfer (of a rank): the part of that rank's exposed
  communication time (communication not hidden by its own compute, from
  ``sequence[].exposed_ns``) inside ``[s_r, L)`` / ``[L, e_r)``; collectives that are not
  matched count in neither.
- the **last** rank of a matched collective: the unique rank with ``s_r = L`` when the
  skew is > 0; the **delay** it causes = ``L −`` the second-latest start (how much
  earlier everyone else could have started without it).
- per step, each rank's lateness and delay are those of
  :func:`.straggler.step_lateness`.

Bandwidth (:func:`kind_rows`): per kind, algorithm bandwidth = Σ size / Σ transfer time
over its matched collectives (bytes-weighted, so one slow tiny collective does not
dominate), size = the larger of input and output message (nccl-tests); bus bandwidth =
algorithm bandwidth × :func:`.collectives.bus_bandwidth_factor` (``Group size``, else
the ranks matched); the same value for every rank (``busbw_basis``:
``matched_transfer``). GB/s are 1e9 bytes per second.

Cost: every sequence is read once into flat columns (:class:`_Columns`); a matched
collective is a row of entry ids and each K × M quantity one numpy gather.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from tb_kineto_insights.analysis import collectives as co
from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.schema.communication import CollectiveCall

#: Matched collectives listed in ``largest_skews``.
LARGEST_SKEWS = 20
#: Ranks listed in one ``largest_skews`` entry's ``start_offsets_us`` (the latest ones and
#: the earliest): bounds that listing at thousands of ranks.
LARGEST_SKEW_RANKS = 16


class Matched:
    """Accumulators of :func:`match_collectives` (ns; per worker index; per step key)."""

    def __init__(self, n: int) -> None:
        self.matched_of = [0] * n
        self.last_count = [0] * n
        self.wait_ns = [0] * n
        self.lateness_ns = [0] * n
        #: per worker, summed over matched collectives inside steps: wait, transfer,
        #: exposed wait, exposed transfer
        self.in_step_ns = np.zeros((n, 4), dtype=np.int64)
        self.step_delay: list[dict[Any, int]] = [{} for _ in range(n)]
        #: per worker, per step key: its lateness (:func:`.straggler.step_lateness`)
        self.step_late: list[dict[Any, int]] = [{} for _ in range(n)]
        #: per worker, per step key: the matched collective where it caused the largest
        #: delay in that step, ``(delay ns, worker indexes, their entries)``
        self.late_at: list[dict[Any, tuple[int, list[int], list[CollectiveCall]]]] = [
            {} for _ in range(n)
        ]
        #: per worker, per step key (matched collectives inside steps): how many it was
        #: in, how many it was the unique last to, and what the others waited for it
        #: there, summed over those collectives (each collective: the mean over the other
        #: ranks of their wait, and of its exposed part; ns) — the per-collective
        #: straggler test (:mod:`.straggler_collectives`)
        self.step_collectives: list[dict[Any, int]] = [{} for _ in range(n)]
        self.step_last: list[dict[Any, int]] = [{} for _ in range(n)]
        self.waited_for_ns: list[dict[Any, float]] = [{} for _ in range(n)]
        self.exposed_waited_for_ns: list[dict[Any, float]] = [{} for _ in range(n)]
        #: per worker, every matched collective inside a step where it was the unique
        #: last: ``(step key, worker indexes, their entries)``
        self.last_at: list[list[tuple[Any, list[int], list[CollectiveCall]]]] = [
            [] for _ in range(n)
        ]
        self.step_keys: list[Any] = []
        self.skews: list[float] = []
        self.transfers: list[float] = []
        self.per_kind: dict[str, list[tuple[int | None, int, int | None]]] = {}
        self.largest: list[dict[str, Any]] = []
        self.groups: list[dict[str, Any]] = []
        self.kind_mismatches = 0
        self.unmatched_total = 0
        self.notes: list[str] = []


class _Columns:
    """Every worker's sequence as flat columns (entry order, workers one after another;
    ns), read in one pass: a matched collective is then a row of global entry ids and
    every K × M quantity a numpy gather, not a dict lookup per rank.

    ``index[i]``: worker ``i``'s matching key → global entry id (first entry wins a
    duplicate key); ``mode``: 0 = no exposed time, 1 = exposed pieces (``piece_*``,
    offsets from the entry's start), 2 = ``exposed`` ns split in proportion to time.
    """

    def __init__(self, sequences: list[list[CollectiveCall]], by_seq: bool) -> None:
        self.index: list[dict[tuple[Any, ...], int]] = []
        self.entries: list[CollectiveCall] = []
        start: list[int] = []
        end: list[int] = []
        mode: list[int] = []
        exposed: list[int] = []
        kind: list[Any] = []
        size: list[int] = []
        group: list[int] = []
        step: list[Any] = []
        piece_of: list[int] = []  # entries with exposed pieces
        piece_lists: list[list[list[int]]] = []  # their pieces ([from, to] ns)
        for sequence in sequences:
            keyed: dict[tuple[Any, ...], int] = {}
            nth: dict[tuple[Any, ...], int] = {}
            for entry in sequence:
                pg = entry.pg
                if by_seq:
                    key: tuple[Any, ...] = (pg, entry.seq)
                else:
                    grp = (pg, entry.kind, entry.step)
                    k = nth.get(grp, 0)
                    nth[grp] = k + 1
                    key = (*grp, k)
                if key in keyed:
                    continue
                g = len(self.entries)
                keyed[key] = g
                self.entries.append(entry)
                start.append(entry.start_ns)
                end.append(entry.end_ns)
                pieces = entry.exposed_ns
                if pieces is None and not entry.exposed_us:
                    mode.append(0)
                    exposed.append(0)
                elif isinstance(pieces, list):
                    mode.append(1)
                    exposed.append(0)
                    if pieces:
                        piece_of.append(g)
                        piece_lists.append(pieces)
                else:
                    mode.append(2)
                    exposed.append(round(entry.exposed_us * 1000.0))
                kind.append(entry.kind)
                v = entry.size_bytes
                size.append(v if v is not None else -1)
                v = entry.group_size
                group.append(v if v is not None else -1)
                step.append(entry.step)
            self.index.append(keyed)
        i64 = np.int64
        self.start = np.array(start, dtype=i64)
        self.end = np.array(end, dtype=i64)
        self.mode = np.array(mode, dtype=np.int8)
        self.exposed = np.array(exposed, dtype=i64)
        codes: dict[Any, int] = {}
        self.kind_code = np.array([codes.setdefault(k, len(codes)) for k in kind], dtype=i64)
        self.size = np.array(size, dtype=i64)
        self.has_size = np.array([e.size_bytes is not None for e in self.entries])
        self.group = np.array(group, dtype=i64)
        self.has_group = np.array([e.group_size is not None for e in self.entries])
        self.step = step
        self.has_step = np.array([s is not None for s in step], dtype=bool)
        counts = np.array([len(p) for p in piece_lists], dtype=i64)
        flat = np.fromiter(
            itertools.chain.from_iterable(itertools.chain.from_iterable(piece_lists)),
            dtype=i64,
            count=2 * int(counts.sum()),
        )
        self.piece_entry = np.repeat(np.array(piece_of, dtype=i64), counts)
        self.piece_a, self.piece_b = flat[0::2], flat[1::2]


def match_collectives(
    sequences: list[list[CollectiveCall]], by_seq: bool, rank_list: list[int]
) -> Matched:
    """Match the collectives of ``sequences`` (one per worker, in worker order; each
    worker's rank in ``rank_list``) across the ranks of each process group (module
    docstring), keyed by ``Seq`` when ``by_seq`` else by (kind, step, k). Returns the
    :class:`Matched` accumulators (ns): per worker index its matched, last and wait
    totals, per step its lateness and delay, per kind its sizes and transfer times, the
    :data:`LARGEST_SKEWS` largest skews (each listing at most
    :data:`LARGEST_SKEW_RANKS` ranks' start offsets in µs), the process groups and
    notes. Never raises on odd input: what cannot be matched is counted as
    unmatched."""
    n = len(sequences)
    m = Matched(n)
    cols = _Columns(sequences, by_seq)
    pgs_of = [{key[0] for key in k} for k in cols.index]
    pgs = sorted(set().union(*pgs_of)) if pgs_of else []
    step_keys: set[Any] = set()
    largest: list[tuple[float, dict[str, Any], Any, list[int]]] = []
    for pg in pgs:
        members = [i for i, p in enumerate(pgs_of) if pg in p]
        all_keys = sorted(
            {key for i in members for key in cols.index[i] if key[0] == pg},
            key=lambda key: tuple((x is None, str(type(x)), x) for x in key),
        )
        gids: list[list[int]] = []
        unmatched = 0
        indexes = [cols.index[i] for i in members]
        for key in all_keys:
            row = [ix.get(key, -1) for ix in indexes]
            if len(members) < 2 or -1 in row:
                unmatched += 1
                continue
            gids.append(row)
        if gids:
            gid = np.array(gids, dtype=np.int64)
            _group(m, members, gid, cols, rank_list, pg, step_keys, largest)
        m.unmatched_total += unmatched
        m.groups.append(
            {
                "pg": pg,
                "ranks": sorted(rank_list[i] for i in members),
                "matched": len(gids),
                "unmatched": unmatched,
            }
        )
    m.step_keys = sorted(step_keys, key=lambda s: (str(type(s)), s))
    largest.sort(key=lambda t: -t[0])
    for _, item, starts, members in largest[:LARGEST_SKEWS]:
        offsets = starts - starts.min()
        listed: list[int] = list(range(len(members)))
        if len(members) > LARGEST_SKEW_RANKS:
            # the latest ranks (largest offsets; ties: rank order) and the earliest one
            order = np.lexsort((np.array([rank_list[i] for i in members]), -offsets))
            listed = sorted({*order[: LARGEST_SKEW_RANKS - 1].tolist(), int(np.argmin(offsets))})
        item["start_offsets_us"] = {
            str(rank_list[members[j]]): int(offsets[j]) / 1000.0 for j in listed
        }
        item["ranks_not_listed"] = len(members) - len(listed)
        m.largest.append(item)
    if m.unmatched_total and m.skews:
        m.notes.append(
            f"{m.unmatched_total} collectives were not found on every rank of their process "
            "group and are left out of the skew, the wait and the transfer."
        )
    if m.kind_mismatches:
        m.notes.append(
            f"{m.kind_mismatches} matched collectives have different kinds on different ranks."
        )
    return m


def _first_valid(valid: Any) -> tuple[Any, Any]:
    """Per row of a K × M bool matrix: (any valid, column of the first valid)."""
    return valid.any(axis=1), np.argmax(valid, axis=1)


def _group(
    m: Matched,
    members: list[int],
    gid: Any,
    cols: _Columns,
    rank_list: list[int],
    pg: str,
    step_keys: set[Any],
    largest: list[tuple[float, dict[str, Any], Any, list[int]]],
) -> None:
    """Account the matched collectives of one process group: ``gid[k, j]`` is the global
    entry id (:class:`_Columns`) of worker ``members[j]``'s entry of the k-th matched
    collective (arrays are K × M, ns)."""
    k_rows = np.arange(gid.shape[0])
    start = cols.start[gid]
    end = np.maximum(cols.end[gid], start)
    latest, earliest = start.max(axis=1), start.min(axis=1)
    skew = latest - earliest
    transfer = np.maximum(0, end.min(axis=1) - latest)
    wait = latest[:, None] - start
    own_transfer = np.maximum(0, end - latest[:, None])
    at_latest = start == latest[:, None]
    unique_last = (skew > 0) & (at_latest.sum(axis=1) == 1)
    last_j = np.argmax(start, axis=1)
    exp_wait, exp_transfer = _exposed_matrix(cols, gid, start, end, latest)
    has_step, step_col = _first_valid(cols.has_step[gid])
    steps = [cols.step[int(gid[k, step_col[k]])] if has_step[k] else None for k in k_rows.tolist()]
    m.skews.extend((skew / 1000.0).tolist())
    m.transfers.extend((transfer / 1000.0).tolist())
    for j, i in enumerate(members):
        m.matched_of[i] += gid.shape[0]
        m.wait_ns[i] += int(wait[:, j].sum())
        m.lateness_ns[i] += int((start[:, j] - earliest).sum())
        m.last_count[i] += int((unique_last & (last_j == j)).sum())
    in_step = [k for k, s in enumerate(steps) if s is not None]
    local_steps = list({steps[k] for k in in_step})
    column = {step: c for c, step in enumerate(local_steps)}
    step_index = np.array([column[s] if s is not None else -1 for s in steps], dtype=np.int64)
    late_ms, delay_ms = st.step_lateness(start, step_index, len(local_steps))
    n_others = max(len(members) - 1, 1)
    others_wait = wait.sum(axis=1) / n_others  # the last rank's own wait is 0
    others_exposed = (exp_wait.sum(axis=1) - exp_wait[k_rows, last_j]) / n_others
    for c, step in enumerate(local_steps):
        step_keys.add(step)
        sel = np.flatnonzero(step_index == c)
        for col, values in enumerate((wait, own_transfer, exp_wait, exp_transfer)):
            m.in_step_ns[members, col] += values[sel].sum(axis=0)
        last_sel = sel[unique_last[sel]]
        for j, i in enumerate(members):
            m.step_collectives[i][step] = m.step_collectives[i].get(step, 0) + int(sel.size)
            mine = last_sel[last_j[last_sel] == j]
            if mine.size:
                m.step_last[i][step] = m.step_last[i].get(step, 0) + int(mine.size)
                m.waited_for_ns[i][step] = m.waited_for_ns[i].get(step, 0.0) + float(
                    others_wait[mine].sum()
                )
                m.exposed_waited_for_ns[i][step] = m.exposed_waited_for_ns[i].get(
                    step, 0.0
                ) + float(others_exposed[mine].sum())
        for j, i in enumerate(members):
            value = int(late_ms[j, c])
            if value >= 0:
                lates = m.step_late[i]
                lates[step] = max(lates.get(step, 0), value)
            caused = int(delay_ms[j, c])
            if caused > 0:
                delays = m.step_delay[i]
                delays[step] = max(delays.get(step, 0), caused)
    # per rank and step, the collective where it caused the largest delay (its late one)
    if len(members) >= 2:
        second = np.sort(start, axis=1)[:, -2]
        gap_l = (latest - second).tolist()
        last_l = last_j.tolist()
        for k in np.flatnonzero(unique_last).tolist():
            step = steps[k]
            if step is None:
                continue
            i = members[last_l[k]]
            m.last_at[i].append((step, members, [cols.entries[g] for g in gid[k].tolist()]))
            best = m.late_at[i].get(step)
            if best is None or gap_l[k] > best[0]:
                row = gid[k].tolist()
                m.late_at[i][step] = (gap_l[k], members, [cols.entries[g] for g in row])
    kind_code = cols.kind_code[gid]
    m.kind_mismatches += int((kind_code != kind_code[:, :1]).any(axis=1).sum())
    # the same collective on every rank: the first rank that says its size and group
    has_size, size_col = _first_valid(cols.has_size[gid])
    has_group, group_col = _first_valid(cols.has_group[gid])
    size = cols.size[gid[k_rows, size_col]].tolist()
    group = cols.group[gid[k_rows, group_col]].tolist()
    n_members = len(members)
    skew_l, transfer_l = skew.tolist(), transfer.tolist()
    for k in k_rows.tolist():
        first = cols.entries[int(gid[k, 0])]
        m.per_kind.setdefault(first.kind, []).append(
            (
                size[k] if has_size[k] else None,
                transfer_l[k],
                group[k] if has_group[k] else n_members,
            )
        )
        item: dict[str, Any] = {
            "pg": pg,
            "kind": first.kind,
            "step": first.step,
            "seq": first.seq,
            "skew_us": skew_l[k] / 1000.0,
            "transfer_us": transfer_l[k] / 1000.0,
            "last_rank": rank_list[members[int(last_j[k])]] if unique_last[k] else None,
        }
        largest.append((skew_l[k] / 1000.0, item, start[k], members))


def _exposed_matrix(cols: _Columns, gid: Any, start: Any, end: Any, latest: Any) -> tuple[Any, Any]:
    """K × M exposed ns inside each rank's wait ``[s, L)`` and transfer ``[L, e)``: the
    exposed pieces cut at ``L − s``; without pieces, ``exposed`` split in proportion to
    the two intervals' lengths (rounded half to even)."""
    cut = latest[:, None] - start
    mode = cols.mode[gid]
    # proportional split (mode 2)
    exposed = np.where(mode == 2, cols.exposed[gid], 0)
    dur = end - start
    inside = np.minimum(np.maximum(cut, 0), dur)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.rint(exposed * inside / np.where(dur > 0, dur, 1)).astype(np.int64)
    exp_wait = np.where(dur > 0, share, 0)
    exp_transfer = exposed - exp_wait
    if cols.piece_entry.size and (mode == 1).any():
        position = np.full(len(cols.entries), -1, dtype=np.int64)
        position[gid.ravel()] = np.arange(gid.size)
        where = position[cols.piece_entry]
        keep = where >= 0
        flat = where[keep]
        a, b = cols.piece_a[keep], cols.piece_b[keep]
        c = cut.ravel()[flat]
        in_wait = np.maximum(0, np.minimum(b, c) - np.minimum(a, c))
        wait_flat = np.zeros(gid.size, dtype=np.int64)
        all_flat = np.zeros(gid.size, dtype=np.int64)
        np.add.at(wait_flat, flat, in_wait)
        np.add.at(all_flat, flat, b - a)
        exp_wait = exp_wait + wait_flat.reshape(gid.shape)
        exp_transfer = exp_transfer + (all_flat - wait_flat).reshape(gid.shape)
    return exp_wait, exp_transfer


def kind_rows(m: Matched, n_steps: int) -> list[dict[str, Any]]:
    """Per collective kind of ``m`` (module docstring, Bandwidth): ``kind``,
    ``matched_count``, ``calls_per_step`` (over ``n_steps`` steps; ``None`` without
    steps), ``median_bytes``, ``total_bytes``, ``median_transfer_us``,
    ``transfer_us_total``, ``algbw_gbps`` and ``busbw_gbps`` (GB/s; ``None`` without
    timed sizes, or a bus factor), ``busbw_basis``, ``group_sizes``; sorted by transfer
    time, largest first."""
    rows: list[dict[str, Any]] = []
    for kind, items in m.per_kind.items():
        sized = [(size, t, g) for size, t, g in items if size is not None]
        timed = [(size, t, g) for size, t, g in sized if t > 0]
        total_bytes = sum(size for size, _, _ in timed)
        total_ns = sum(t for _, t, _ in timed)
        algbw = busbw = None
        if total_ns > 0:
            algbw = total_bytes / total_ns
            factors = [co.bus_bandwidth_factor(kind, g) for _, _, g in timed]
            if all(f is not None for f in factors):
                busbw = sum(size * f for (size, _, _), f in zip(timed, factors, strict=True) if f)
                busbw /= total_ns
        rows.append(
            {
                "kind": kind,
                "matched_count": len(items),
                "calls_per_step": len(items) / n_steps if n_steps else None,
                "median_bytes": float(np.median([s for s, _, _ in sized])) if sized else None,
                "total_bytes": total_bytes,
                "median_transfer_us": float(np.median([t for _, t, _ in items])) / 1000.0,
                "transfer_us_total": sum(t for _, t, _ in items) / 1000.0,
                "algbw_gbps": algbw,
                "busbw_gbps": busbw,
                "busbw_basis": "matched_transfer",
                "group_sizes": sorted({g for _, _, g in items if g is not None}),
            }
        )
    rows.sort(key=lambda r: -float(r["transfer_us_total"]))
    return rows
