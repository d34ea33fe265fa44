"""Broken timestamps: events far outside the trace's own span, and GPU work that runs
over the next event on its stream. Applied by the reader to every trace it returns.

**Far outside** (reason ``ts_far_outside_trace``). Sort the start times of every event
the reader kept (duration events, ``[memory]`` events, flows) and split them wherever
two consecutive starts are more than :data:`FAR_GAP_MIN_US` apart. The group holding
the most events is the trace; a neighbouring group joins it while the gap between them
is at most ``max(FAR_GAP_MIN_US, FAR_GAP_SPAN_FACTOR x`` the span of the trace so far
``)``. Every event outside the result is quarantined: left out of every table and
counted in ``TraceHealth.quarantined`` (by reason) and ``quarantined_by_kind`` (by reader
kind). So ``ts 0`` in a trace at 5·10⁹ µs (83 minutes away from a 40 ms trace) goes; a
CPU op a few seconds before the first step, or a 20-minute pause in a 3-hour profile,
stays. A trace whose events all lie within :data:`FAR_GAP_MIN_US` of each other is never
touched.

**Stream overlap**. Work on one (device, stream) runs in order: kernels, memcpys and
memsets there do not overlap. An event whose end passes the next event's start on the
same device and stream is clipped to end there (``dur = next start - start``). Health
counts the clipped events, the time removed, and how many of them ran past the *end* of
the next event (``overran_whole_events``: a duration no GPU can produce, such as one
kernel's 1.6 s running over the next 54; partial overlaps of a few µs are seen on real
Hopper traces, e.g. programmatic dependent launch, and are clipped but not data loss).
"""

from __future__ import annotations

import numpy as np

from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.rowjson import renumber_rows

#: Smallest gap (µs) between start times that can separate a broken timestamp from the
#: trace: 5 minutes.
FAR_GAP_MIN_US = 300e6
#: A gap up to this many times the span of the trace so far still joins the trace.
FAR_GAP_SPAN_FACTOR = 10.0
#: Reason recorded for events far outside the trace's span.
FAR_REASON = "ts_far_outside_trace"
#: GPU work kinds that serialise on a stream.
STREAM_KINDS: tuple[str, ...] = (m.KERNEL, m.MEMCPY, m.MEMSET)


def trace_window_ns(starts: list[np.ndarray]) -> tuple[int, int] | None:
    """The trace's own span ``[lo, hi]`` (int ns, inclusive) from arrays of start times
    (int64 ns, any order), per the module docstring; ``None`` when there are no events
    or nothing lies far outside (then nothing is to be quarantined)."""
    parts = [s for s in starts if s.size]
    if not parts:
        return None
    min_gap = int(FAR_GAP_MIN_US * 1000)
    # no two starts further apart than min_gap: no break (the sort of every start, a
    # cost on a large trace, is left for traces that may have one)
    if max(int(s.max()) for s in parts) - min(int(s.min()) for s in parts) <= min_gap:
        return None
    ts = np.sort(np.concatenate(parts), kind="stable")
    breaks = np.nonzero(np.diff(ts) > min_gap)[0]
    if breaks.size == 0:
        return None
    first = np.concatenate(([0], breaks + 1))
    last = np.concatenate((breaks, [ts.size - 1]))
    counts = last - first + 1
    main = int(np.argmax(counts))
    lo_i, hi_i = main, main
    while True:
        span = int(ts[last[hi_i]] - ts[first[lo_i]])
        limit = max(min_gap, FAR_GAP_SPAN_FACTOR * span)
        if lo_i > 0 and ts[first[lo_i]] - ts[last[lo_i - 1]] <= limit:
            lo_i -= 1
        elif hi_i < counts.size - 1 and ts[first[hi_i + 1]] - ts[last[hi_i]] <= limit:
            hi_i += 1
        else:
            break
    return int(ts[first[lo_i]]), int(ts[last[hi_i]])


def take_rows(table: m.EventTable, keep: np.ndarray) -> m.EventTable:
    """The rows of ``table`` where ``keep`` (bool, length n) is true, sparse columns
    (``comm``, ``input_dims``, ``input_types``, ``concrete_inputs``, ``flops``) renumbered."""
    new_row = np.cumsum(keep) - 1
    return m.EventTable(
        name=table.name[keep],
        start_ns=table.start_ns[keep],
        dur_ns=table.dur_ns[keep],
        pid=table.pid[keep],
        tid=table.tid[keep],
        device=table.device[keep],
        stream=table.stream[keep],
        correlation=table.correlation[keep],
        external_id=table.external_id[keep],
        comm={int(new_row[r]): c for r, c in table.comm.items() if keep[r]},
        input_dims=renumber_rows(table.input_dims, new_row, keep),
        input_types=renumber_rows(table.input_types, new_row, keep),
        concrete_inputs=renumber_rows(table.concrete_inputs, new_row, keep),
        flops=renumber_rows(table.flops, new_row, keep),
    )


def quarantine_far_events(
    tables: dict[str, m.EventTable], memory: m.MemoryTable, flows: m.FlowTable
) -> tuple[dict[str, m.EventTable], m.MemoryTable, m.FlowTable, dict[str, int], np.ndarray]:
    """Leave out events far outside the trace's span (module docstring).

    Returns:
        ``(tables, memory, flows, counts, correlations)``: the kept rows, quarantined
        events per reader kind (``kernel``, ``cpu_op``, …, ``memory``, ``flow``; only
        non-zero), and the correlation ids (int64, sorted, unique) of the quarantined
        kernels, memcpys and memsets: their launches are in the trace, their GPU time
        is not.
    """
    none = np.zeros(0, dtype=np.int64)
    window = trace_window_ns([t.start_ns for t in tables.values()] + [memory.ts_ns, flows.ts_ns])
    if window is None:
        return tables, memory, flows, {}, none
    lo, hi = window
    counts: dict[str, int] = {}
    out: dict[str, m.EventTable] = {}
    lost_corr = [none]
    for kind, table in tables.items():
        keep = (table.start_ns >= lo) & (table.start_ns <= hi)
        if keep.all():
            out[kind] = table
            continue
        counts[kind] = int((~keep).sum())
        if kind in STREAM_KINDS:
            corr = table.correlation[~keep]
            lost_corr.append(corr[corr >= 0])
        out[kind] = take_rows(table, keep)
    keep = (memory.ts_ns >= lo) & (memory.ts_ns <= hi)
    if not keep.all():
        counts["memory"] = int((~keep).sum())
        memory = m.MemoryTable(
            **{name: getattr(memory, name)[keep] for name in memory.__dataclass_fields__}
        )
    keep = (flows.ts_ns >= lo) & (flows.ts_ns <= hi)
    if not keep.all():
        counts["flow"] = int((~keep).sum())
        flows = m.FlowTable(
            **{name: getattr(flows, name)[keep] for name in flows.__dataclass_fields__}
        )
    return out, memory, flows, counts, np.unique(np.concatenate(lost_corr))


def clip_stream_overlaps(tables: dict[str, m.EventTable]) -> dict[str, int]:
    """Clip kernels, memcpys and memsets at the next event's start on the same device
    and stream (module docstring); ``dur_ns`` is changed in place.

    Returns:
        ``{"events": clipped events, "removed_ns": time removed (ns),
        "overran_whole_events": clipped events whose end passed the next event's end}``.
    """
    kinds = [k for k in STREAM_KINDS if len(tables[k])]
    result = {"events": 0, "removed_ns": 0, "overran_whole_events": 0}
    if not kinds:
        return result
    kind_of = np.concatenate(
        [np.full(len(tables[k]), i, dtype=np.int64) for i, k in enumerate(kinds)]
    )
    row = np.concatenate([np.arange(len(tables[k]), dtype=np.int64) for k in kinds])
    start = np.concatenate([tables[k].start_ns for k in kinds])
    dur = np.concatenate([tables[k].dur_ns for k in kinds])
    device = np.concatenate([tables[k].device for k in kinds])
    stream = np.concatenate([tables[k].stream for k in kinds])
    order = np.lexsort((dur, start, stream, device))
    start, dur, device, stream = start[order], dur[order], device[order], stream[order]
    end = start + dur
    same = (device[1:] == device[:-1]) & (stream[1:] == stream[:-1])
    over = same & (end[:-1] > start[1:])
    if not over.any():
        return result
    idx = np.nonzero(over)[0]
    removed = end[idx] - start[idx + 1]
    result["events"] = int(idx.size)
    result["removed_ns"] = int(removed.sum())
    result["overran_whole_events"] = int((end[idx] > end[idx + 1]).sum())
    new_dur = start[idx + 1] - start[idx]
    for i, kind in enumerate(kinds):
        sel = kind_of[order[idx]] == i
        if sel.any():
            tables[kind].dur_ns[row[order[idx]][sel]] = new_dur[sel]
    return result
