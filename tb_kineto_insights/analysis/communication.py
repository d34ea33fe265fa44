"""``summary.communication``: collective time per step, how much of it compute hides,
message sizes and bandwidth per collective kind, and a per-collective sequence for
matching across ranks (:mod:`.run_view`).

Definitions (DESIGN.md, Metric definitions; denominators named):

- communication kernels: NCCL/RCCL kernels (:func:`.collectives.is_communication_kernel`);
  compute kernels: every other kernel. Copies and memsets are neither.
- per step, from the step windows of :mod:`.trace_index`: ``comm_us`` = length of the union
  of communication kernels in the window; ``exposed_us`` = the part of it where no
  compute kernel runs on the *same device* (per device, then the union over devices);
  ``overlapped_us`` = ``comm_us − exposed_us``. ``comm_fraction`` and
  ``exposed_fraction`` divide by the step's duration.
- a *collective* (one call of communication kernels), its kind, message size, group
  size, process group, ``Seq`` and step: :mod:`.collective_calls`, which defines each.
- waiting, seen from one rank: an NCCL kernel starts when its rank arrives and spins
  until the last rank of the group does, so a rank's kernel time is wait + transfer.
  One trace alone cannot see the other ranks; the *least-wait estimate* takes, for each
  collective, the shortest duration among this rank's collectives of the same kind with
  a message at least as large (a larger message does not transfer faster) as its
  transfer time, and the rest of its duration as wait, at its start. It is exact for a
  rank that sometimes arrives last, and too low a wait for a rank that waits in *every*
  collective (the view across ranks, :mod:`.run_view`, measures both exactly).
- per step: ``wait_estimate_us`` (summed estimated wait of the step's collectives),
  ``exposed_wait_estimate_us`` / ``exposed_transfer_estimate_us`` (the exposed time
  inside each collective's estimated wait / the rest of it). Collectives queue: one that
  starts within :data:`QUEUED_GAP_NS` of the previous one's end (same step) ran behind
  it, so the wait of the first of such a back-to-back chain delayed the whole chain. Up
  to that wait, the chain's exposed transfer time counts as exposed *wait* (without the
  wait the chain would have run that much earlier, under compute): seen on
  ``ddp_straggler`` rank 0, whose first bucket's 19 ms wait hides under backward while
  the 12 buckets queued behind it end up exposed.
- bandwidth (nccl-tests conventions): algorithm bandwidth = Σ size / Σ time over a
  kind's sized collectives, where size is the larger of the input and output message
  (the gathered size for AllGather, the scattered input for ReduceScatter) and time is
  the least-wait estimate of each collective's transfer (``busbw_basis``:
  ``least_wait_estimate``); ``kernel_time_algbw_gbps``/``kernel_time_busbw_gbps`` use
  the kernel time instead (first kernel start to last kernel end: wait included, so a
  lower bound); bus bandwidth = algorithm bandwidth ×
  :func:`.collectives.bus_bandwidth_factor` with ``n`` = ``Group size``, else the
  length of ``Process Group Ranks``, else ``distributedInfo.world_size``. GB/s are 1e9
  bytes per second (bytes per ns).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis import collectives as co
from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis.collective_calls import (
    KIND_FROM,
    Collectives,
    collective_op_count,
    group_collectives,
)
from tb_kineto_insights.analysis.idle import IdlePieces
from tb_kineto_insights.analysis.lead_up import lead_ups
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.schema.communication import (
    BucketHistogram,
    BucketSize,
    CollectiveCall,
    CollectiveKind,
    CommunicationDevice,
    CommunicationPanel,
    CommunicationStep,
    DdpBucketBytes,
)
from tb_kineto_insights.trace import model as m

I64 = npt.NDArray[np.int64]

#: At most this many collectives are listed in ``sequence`` (the first ones in time).
SEQUENCE_LIMIT = 20_000
#: A collective starting at most this long (ns) after the previous one ended, in the
#: same step, was queued behind it: on the h200x2 DDP traces a collective queued on the
#: NCCL stream starts a few µs after the previous one ends, any other hundreds of µs
#: later (figures: benchmarks/RESULTS.md).
QUEUED_GAP_NS = 10_000
#: Exposed pieces listed per collective in ``sequence[].exposed_ns``; a collective whose
#: exposed time is more fragmented lists ``None`` (the run view then splits its
#: ``exposed_us`` in proportion to time).
EXPOSED_PIECES_LIMIT = 64
#: Distinct AllReduce sizes listed in ``ddp_bucket_bytes.sizes`` (most frequent first).
BUCKET_SIZES_LISTED = 50
#: ``ddp_bucket_bytes`` histogram edges in bytes (last bin open-ended).
BUCKET_EDGES_BYTES: tuple[int, ...] = tuple([0] + [1024 * 4**i for i in range(11)])


def _fraction(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def _time_sets(
    index: TraceIndex, comm_rows: npt.NDArray[np.bool_]
) -> tuple[iv.Intervals, iv.Intervals, dict[int, tuple[iv.Intervals, iv.Intervals]]]:
    """(union of communication, union of exposed communication, per device both)."""
    k = index.trace.kernels
    per_device: dict[int, tuple[iv.Intervals, iv.Intervals]] = {}
    for dev in np.unique(k.device[comm_rows]).tolist():
        on = k.device == dev
        c = on & comm_rows
        comp = on & ~comm_rows
        comm = iv.union(k.start_ns[c], k.end_ns[c])
        compute = iv.union(k.start_ns[comp], k.end_ns[comp])
        per_device[int(dev)] = (comm, iv.subtract(comm, compute))
    empty = [np.zeros(0, np.int64)]
    comm_all = iv.union(
        np.concatenate([c[0] for c, _ in per_device.values()] or empty),
        np.concatenate([c[1] for c, _ in per_device.values()] or empty),
    )
    exposed_all = iv.union(
        np.concatenate([e[0] for _, e in per_device.values()] or empty),
        np.concatenate([e[1] for _, e in per_device.values()] or empty),
    )
    return comm_all, exposed_all, per_device


def _bucket_distribution(sizes: I64) -> DdpBucketBytes:
    edges = np.asarray(BUCKET_EDGES_BYTES, dtype=np.int64)
    if sizes.size == 0:
        return DdpBucketBytes(
            count=0,
            total_bytes=0,
            min_bytes=None,
            median_bytes=None,
            max_bytes=None,
            histogram=BucketHistogram(
                edges_bytes=list(BUCKET_EDGES_BYTES), counts=[0] * edges.size
            ),
            distinct_count=0,
            sizes=[],
        )
    bins = np.searchsorted(edges, sizes, side="right") - 1
    counts = np.bincount(bins, minlength=edges.size)
    values, freq = np.unique(sizes, return_counts=True)
    top = np.lexsort((-values, -freq))[:BUCKET_SIZES_LISTED]
    return DdpBucketBytes(
        count=int(sizes.size),
        total_bytes=int(sizes.sum()),
        min_bytes=int(sizes.min()),
        median_bytes=float(np.median(sizes)),
        max_bytes=int(sizes.max()),
        histogram=BucketHistogram(
            edges_bytes=list(BUCKET_EDGES_BYTES),
            counts=[int(c) for c in counts],
        ),
        distinct_count=int(values.size),
        sizes=[BucketSize(bytes=int(values[i]), count=int(freq[i])) for i in top.tolist()],
    )


def _least_wait_ns(c: Collectives) -> I64:
    """Per collective: the least time its transfer can have taken, as seen from this rank
    alone: the shortest duration among this rank's collectives of the same kind whose
    message is at least as large (nccl-tests size; unsized ones: the shortest unsized one
    of the kind). A larger message of the same kind does not transfer faster, so each
    such instance bounds the transfer time from above; the fastest one waited least for
    the other ranks."""
    dur = c.dur_ns
    out = dur.copy()
    size = c.size_bytes
    for code in np.unique(c.kind).tolist():
        sel = np.nonzero(c.kind == code)[0]
        unsized = sel[size[sel] < 0]
        if unsized.size:
            out[unsized] = dur[unsized].min()
        sized = sel[size[sel] >= 0]
        if sized.size == 0:
            continue
        uniq, inverse = np.unique(-size[sized], return_inverse=True)  # largest first
        mins = np.full(uniq.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(mins, inverse.reshape(-1), dur[sized])
        out[sized] = np.minimum.accumulate(mins)[inverse.reshape(-1)]
    return out


def _bandwidth(kind: str, size: I64, group: I64, time_ns: I64) -> tuple[float | None, float | None]:
    """(algbw, busbw) in GB/s = Σ size / Σ time (bytes-weighted), busbw with each
    collective's nccl-tests factor; ``None`` without sized collectives with time, and
    busbw ``None`` when a group size is unknown."""
    total_ns = int(time_ns.sum())
    if size.size == 0 or total_ns <= 0:
        return None, None
    algbw = float(size.sum()) / total_ns
    factors = np.full(size.size, np.nan)
    for n in np.unique(group).tolist():
        f = co.bus_bandwidth_factor(kind, int(n) if n >= 0 else None)
        factors[group == n] = np.nan if f is None else f
    if np.isnan(factors).any():
        return algbw, None
    return algbw, float((size * factors).sum()) / total_ns


def _kind_rows(
    c: Collectives, least_ns: I64, n_steps: int, exposed: iv.Intervals
) -> list[CollectiveKind]:
    rows: list[CollectiveKind] = []
    dur = c.dur_ns
    exposed_ns = iv.overlap_per_window(exposed, c.start_ns, c.end_ns)
    size = c.size_bytes
    for code in np.unique(c.kind).tolist():
        kind = co.KINDS[code]
        sel = c.kind == code
        time_ns = int(dur[sel].sum())
        count = int(sel.sum())
        sized = sel & (size >= 0)
        k_algbw, k_busbw = _bandwidth(kind, size[sized], c.group[sized], dur[sized])
        algbw, busbw = _bandwidth(kind, size[sized], c.group[sized], least_ns[sized])
        in_known = sel & (c.in_bytes >= 0)
        out_known = sel & (c.out_bytes >= 0)
        sources = np.bincount(c.kind_from[sel], minlength=len(KIND_FROM))
        rows.append(
            CollectiveKind(
                kind=kind,
                count=count,
                calls_per_step=int((sel & c.in_step).sum()) / n_steps if n_steps else None,
                kernel_count=int(c.kernels[sel].sum()),
                bytes=int(c.in_bytes[in_known].sum()) if in_known.any() else None,
                out_bytes=int(c.out_bytes[out_known].sum()) if out_known.any() else None,
                sized_count=int(sized.sum()),
                median_bytes=float(np.median(size[sized])) if sized.any() else None,
                time_us=time_ns / 1000.0,
                mean_us=time_ns / 1000.0 / count,
                wait_estimate_us_total=int((dur[sel] - least_ns[sel]).sum()) / 1000.0,
                exposed_us_per_step=(
                    int(exposed_ns[sel & c.in_step].sum()) / 1000.0 / n_steps if n_steps else None
                ),
                algbw_gbps=algbw,
                busbw_gbps=busbw,
                busbw_basis="least_wait_estimate",
                kernel_time_algbw_gbps=k_algbw,
                kernel_time_busbw_gbps=k_busbw,
                group_sizes=sorted(int(n) for n in np.unique(c.group[sel]) if n >= 0),
                kind_from={KIND_FROM[i]: int(v) for i, v in enumerate(sources.tolist()) if v},
            )
        )
    rows.sort(key=lambda r: (-float(r.time_us), co.KINDS.index(r.kind)))
    return rows


def _exposed_pieces(exposed: iv.Intervals, c: Collectives, n: int) -> list[list[list[int]] | None]:
    """For the first ``n`` collectives: the pieces of the rank's exposed communication
    inside ``[start, end)``, as ``[from, to]`` ns offsets from the collective's start;
    ``None`` where there are more than :data:`EXPOSED_PIECES_LIMIT` pieces."""
    es, ee = exposed
    lo = np.searchsorted(ee, c.start_ns[:n], side="right")
    hi = np.searchsorted(es, c.end_ns[:n], side="left")
    out: list[list[list[int]] | None] = []
    for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist(), strict=True)):
        if b - a > EXPOSED_PIECES_LIMIT:
            out.append(None)
            continue
        s0, e0 = int(c.start_ns[i]), int(c.end_ns[i])
        pieces = []
        for ps, pe in zip(es[a:b].tolist(), ee[a:b].tolist(), strict=True):
            ps, pe = max(ps, s0), min(pe, e0)
            if pe > ps:
                pieces.append([ps - s0, pe - s0])
        out.append(pieces)
    return out


def _sequence(
    c: Collectives,
    exposed: iv.Intervals,
    leads: list[tuple[dict[str, float], int] | None] | None = None,
) -> tuple[list[CollectiveCall], str]:
    with_seq = len(c) > 0 and bool(c.has_seq.all())
    nth: Counter[str] = Counter()
    out = []
    n = min(len(c), SEQUENCE_LIMIT)
    starts = c.start_ns[:n].tolist()
    ends = c.end_ns[:n].tolist()
    durs = c.dur_ns[:n].tolist()
    kinds = c.kind[:n].tolist()
    in_bytes = c.in_bytes[:n].tolist()
    sizes = c.size_bytes[:n].tolist()
    groups = c.group[:n].tolist()
    seqs = c.seq[:n].tolist()
    steps = c.step[:n].tolist()
    in_step = c.in_step[:n].tolist()
    exposed_ns = iv.overlap_per_window(exposed, c.start_ns[:n], c.end_ns[:n]).tolist()
    pieces = _exposed_pieces(exposed, c, n)
    for i in range(n):
        pg = c.pg[i]
        k = nth[pg]
        nth[pg] += 1
        out.append(
            CollectiveCall(
                pg=pg,
                seq=seqs[i] if with_seq else k,
                kind=co.KINDS[kinds[i]],
                start_us=starts[i] / 1000.0,
                start_ns=starts[i],
                end_ns=ends[i],
                dur_us=durs[i] / 1000.0,
                bytes=in_bytes[i] if in_bytes[i] >= 0 else None,
                size_bytes=sizes[i] if sizes[i] >= 0 else None,
                group_size=groups[i] if groups[i] > 0 else None,
                step=steps[i] if in_step[i] else None,
                exposed_us=exposed_ns[i] / 1000.0,
                exposed_ns=pieces[i],
                lead_up_us=lead[0] if (lead := leads[i] if leads else None) else None,
                lead_up_kernels=lead[1] if lead else None,
            )
        )
    return out, "args" if with_seq else "order"


def _wait_estimate(
    c: Collectives, least_ns: I64, exposed: iv.Intervals, step_numbers: I64
) -> tuple[I64, I64, I64]:
    """Per step (same order as ``step_numbers``): estimated wait, exposed time inside the
    estimated wait and exposed time inside the rest of the collectives (ns). A
    collective's estimated wait is its time beyond :func:`_least_wait_ns`, taken at its
    start (an NCCL kernel spins from its start until the last rank arrives). In a chain
    of collectives queued back to back (:data:`QUEUED_GAP_NS`), exposed transfer time up
    to the chain head's wait moves from transfer to wait (the module docstring says why);
    it is booked on the head."""
    n = step_numbers.size
    zero = np.zeros(n, dtype=np.int64)
    if len(c) == 0 or n == 0:
        return zero, zero.copy(), zero.copy()
    wait = c.dur_ns - least_ns
    in_wait = iv.overlap_per_window(exposed, c.start_ns, c.start_ns + wait)
    in_coll = iv.overlap_per_window(exposed, c.start_ns, c.end_ns)
    queued = _queued_exposed_wait(c, wait, in_coll - in_wait)
    in_wait = in_wait + queued
    order = np.argsort(step_numbers, kind="stable")
    pos = np.searchsorted(step_numbers[order], c.step)
    pos = np.minimum(pos, n - 1)
    idx = order[pos]
    ok = c.in_step & (step_numbers[idx] == c.step)
    idx, wait, in_wait, in_coll = idx[ok], wait[ok], in_wait[ok], in_coll[ok]
    return (
        np.bincount(idx, weights=wait, minlength=n).astype(np.int64),
        np.bincount(idx, weights=in_wait, minlength=n).astype(np.int64),
        np.bincount(idx, weights=in_coll - in_wait, minlength=n).astype(np.int64),
    )


def _queued_exposed_wait(c: Collectives, wait: I64, exposed_transfer: I64) -> I64:
    """Per collective (sorted by start): the exposed transfer time of the back-to-back
    chain it heads that its own wait accounts for, min(head's wait, the chain's exposed
    transfer); 0 for collectives that do not head a chain of two or more."""
    out = np.zeros(len(c), dtype=np.int64)
    if len(c) < 2:
        return out
    queued = (c.start_ns[1:] - c.end_ns[:-1] <= QUEUED_GAP_NS) & (c.step[1:] == c.step[:-1])
    starts_chain = np.concatenate([[True], ~queued])
    chain = np.cumsum(starts_chain) - 1
    heads = np.flatnonzero(starts_chain)
    sizes = np.bincount(chain)
    chain_exposed = np.bincount(chain, weights=exposed_transfer).astype(np.int64)
    moved = np.minimum(np.maximum(wait[heads], 0), chain_exposed)
    out[heads] = np.where(sizes > 1, moved, 0)
    return out


def communication_summary(
    index: TraceIndex,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    lead_up_device: int | None = None,
    lead_up_pieces: IdlePieces | None = None,
) -> CommunicationPanel:
    """``summary.communication``
    (:class:`~tb_kineto_insights.schema.communication.CommunicationPanel`; see the module
    docstring for every definition).

    Fields: ``has_collectives``; ``kernel_count`` (communication kernels) and
    ``collective_count`` (calls); ``world_size``; per step ``steps`` (``number``,
    ``comm_us``, ``overlapped_us``, ``exposed_us``, ``comm_fraction``,
    ``exposed_fraction``, denominator: the step's duration); totals inside the step
    windows ``total_step_us``, ``comm_us``, ``overlapped_us``, ``exposed_us``,
    ``comm_fraction``/``exposed_fraction`` (of total step time), ``overlap_fraction``
    (of communication time), per-step means ``mean_comm_us``/``mean_overlapped_us``/
    ``mean_exposed_us``, ``comm_outside_steps_us``; ``devices`` (the same per device);
    ``wait_basis`` (``least_wait_estimate``), ``wait_estimate_us_per_step``,
    ``exposed_wait_estimate_us_per_step``, ``exposed_transfer_estimate_us_per_step``,
    ``exposed_wait_estimate_fraction`` (of the exposed time inside collectives);
    ``kinds`` (per kind, most time first: ``kind``, ``count``, ``calls_per_step``
    (collectives in steps ÷ steps), ``kernel_count``, ``bytes`` (input messages, total),
    ``out_bytes``, ``sized_count``, ``median_bytes`` (nccl-tests size per collective),
    ``time_us`` (total), ``mean_us`` (per collective), ``wait_estimate_us_total``,
    ``exposed_us_per_step`` (exposed time inside its collectives), ``algbw_gbps``,
    ``busbw_gbps`` (least-wait estimate, ``busbw_basis``), ``kernel_time_algbw_gbps``,
    ``kernel_time_busbw_gbps`` (bytes ÷ this rank's kernel time, wait included),
    ``group_sizes``, ``kind_from``); ``ddp_bucket_bytes``
    (AllReduce message sizes: ``histogram``, ``sizes`` with counts, min/median/max);
    ``sequence`` (per collective ``pg``, ``seq``, ``kind``, ``start_us`` on the trace's
    clock and the exact ``start_ns``, ``end_ns``, ``dur_us``, ``bytes`` (input),
    ``size_bytes`` (nccl-tests size), ``group_size``, ``step``, ``exposed_us`` and
    ``exposed_ns``: the exposed pieces as ``[from, to]`` ns offsets from its start, or
    ``None`` beyond :data:`EXPOSED_PIECES_LIMIT` pieces, and ``lead_up_us`` /
    ``lead_up_kernels``: what the rank did on ``lead_up_device`` since its previous
    collective, :func:`.lead_up.lead_ups` with the idle panel's ``lead_up_pieces``;
    ``None`` without a device), ``sequence_total``, ``sequence_truncated``,
    ``seq_source`` (``args``: ``Seq``; ``order``: k-th collective of its process group);
    ``collective_ops`` (collective ops recorded on the host); ``notes``.
    """
    del thresholds  # no threshold applies to the panel itself (see the diagnoses)
    trace = index.trace
    steps = index.steps
    comm_mask = _communication_kernels(trace)
    rows = np.nonzero(comm_mask)[0].astype(np.int64)
    colls = group_collectives(index, rows)

    comm_all, exposed_all, per_device = _time_sets(index, comm_mask)
    comm_step = iv.overlap_per_window(comm_all, steps.start_ns, steps.end_ns)
    exposed_step = iv.overlap_per_window(exposed_all, steps.start_ns, steps.end_ns)
    dur = steps.dur_ns
    least_ns = _least_wait_ns(colls)
    wait_step, exp_wait_step, exp_transfer_step = _wait_estimate(
        colls, least_ns, exposed_all, steps.number
    )
    per_step = _step_rows(
        steps.number, dur, comm_step, exposed_step, wait_step, exp_wait_step, exp_transfer_step
    )
    total = steps.total_ns
    comm_total, exposed_total = int(comm_step.sum()), int(exposed_step.sum())
    devices = _device_rows(per_device, steps.start_ns, steps.end_ns, total)

    leads = _lead_ups(index, colls, lead_up_device, lead_up_pieces)
    sequence, seq_source = _sequence(colls, exposed_all, leads)
    exp_wait, exp_transfer = int(exp_wait_step.sum()), int(exp_transfer_step.sum())
    op_count = collective_op_count(index)
    all_reduce = (colls.kind == co.KINDS.index(co.ALL_REDUCE)) & (colls.in_bytes >= 0)
    return CommunicationPanel(
        has_collectives=len(colls) > 0,
        kernel_count=int(rows.size),
        collective_count=len(colls),
        world_size=trace.world_size,
        steps=per_step,
        total_step_us=total / 1000.0,
        comm_us=comm_total / 1000.0,
        overlapped_us=(comm_total - exposed_total) / 1000.0,
        exposed_us=exposed_total / 1000.0,
        comm_fraction=_fraction(comm_total, total),
        exposed_fraction=_fraction(exposed_total, total),
        overlap_fraction=_fraction(comm_total - exposed_total, comm_total),
        mean_comm_us=steps.mean_per_step(comm_total / 1000.0),
        mean_overlapped_us=steps.mean_per_step((comm_total - exposed_total) / 1000.0),
        mean_exposed_us=steps.mean_per_step(exposed_total / 1000.0),
        comm_outside_steps_us=(iv.total(comm_all) - comm_total) / 1000.0,
        wait_basis="least_wait_estimate",
        wait_estimate_us_per_step=steps.mean_per_step(int(wait_step.sum()) / 1000.0),
        exposed_wait_estimate_us_per_step=steps.mean_per_step(exp_wait / 1000.0),
        exposed_transfer_estimate_us_per_step=steps.mean_per_step(exp_transfer / 1000.0),
        exposed_wait_estimate_fraction=_fraction(exp_wait, exp_wait + exp_transfer),
        devices=devices,
        kinds=_kind_rows(colls, least_ns, len(steps), exposed_all),
        ddp_bucket_bytes=_bucket_distribution(colls.in_bytes[all_reduce]),
        sequence=sequence,
        sequence_total=len(colls),
        sequence_truncated=len(colls) > SEQUENCE_LIMIT,
        seq_source=seq_source,
        collective_ops=op_count,
        notes=_notes(trace, colls, op_count),
    )


def _communication_kernels(trace: m.Trace) -> npt.NDArray[np.bool_]:
    """Per kernel row: whether it is a communication kernel (by name, each distinct
    name classified once)."""
    k = trace.kernels
    names = trace.names
    comm_mask = np.zeros(len(k), dtype=np.bool_)
    if len(k):
        uniq, inverse = np.unique(k.name, return_inverse=True)
        is_comm = np.array([co.is_communication_kernel(names[n]) for n in uniq.tolist()])
        comm_mask = is_comm.astype(np.bool_)[inverse.reshape(-1)]
    return comm_mask


def _step_rows(
    number: I64,
    dur: I64,
    comm_step: I64,
    exposed_step: I64,
    wait_step: I64,
    exp_wait_step: I64,
    exp_transfer_step: I64,
) -> list[CommunicationStep]:
    """One row per step from its number, duration and per-step sums (ns)."""
    per_step = []
    for i in range(number.size):
        c, e, d = int(comm_step[i]), int(exposed_step[i]), int(dur[i])
        per_step.append(
            CommunicationStep(
                number=int(number[i]),
                comm_us=c / 1000.0,
                overlapped_us=(c - e) / 1000.0,
                exposed_us=e / 1000.0,
                comm_fraction=_fraction(c, d),
                exposed_fraction=_fraction(e, d),
                wait_estimate_us=int(wait_step[i]) / 1000.0,
                exposed_wait_estimate_us=int(exp_wait_step[i]) / 1000.0,
                exposed_transfer_estimate_us=int(exp_transfer_step[i]) / 1000.0,
            )
        )
    return per_step


def _device_rows(
    per_device: dict[int, tuple[iv.Intervals, iv.Intervals]],
    step_start_ns: I64,
    step_end_ns: I64,
    total: int,
) -> list[CommunicationDevice]:
    """One row per device: its communication and exposed time inside the step windows,
    as fractions of ``total`` (ns, the summed step time)."""
    devices = []
    for dev, (c_set, e_set) in per_device.items():
        c = int(iv.overlap_per_window(c_set, step_start_ns, step_end_ns).sum())
        e = int(iv.overlap_per_window(e_set, step_start_ns, step_end_ns).sum())
        devices.append(
            CommunicationDevice(
                device=dev,
                comm_us=c / 1000.0,
                overlapped_us=(c - e) / 1000.0,
                exposed_us=e / 1000.0,
                comm_fraction=_fraction(c, total),
                exposed_fraction=_fraction(e, total),
            )
        )
    return devices


def _lead_ups(
    index: TraceIndex,
    colls: Collectives,
    lead_up_device: int | None,
    lead_up_pieces: IdlePieces | None,
) -> list[tuple[dict[str, float], int] | None]:
    """:func:`.lead_up.lead_ups` of the collectives listed in ``sequence``."""
    n_listed = min(len(colls), SEQUENCE_LIMIT)
    return lead_ups(
        index,
        lead_up_device,
        lead_up_pieces,
        colls.start_ns[:n_listed],
        colls.end_ns[:n_listed],
    )


def _notes(trace: m.Trace, c: Collectives, op_count: int) -> list[str]:
    notes: list[str] = []
    n = len(c)
    if n == 0:
        if op_count:
            notes.append(
                f"{op_count} collective calls were recorded on the host but no NCCL/RCCL "
                "kernel ran on the GPU (a one-rank group, a CPU backend such as gloo, or "
                "GPU activity was not recorded): no communication time to show."
            )
        else:
            notes.append("No NCCL/RCCL communication kernels in this trace.")
        return notes
    sized = c.size_bytes >= 0
    unsized = int((~sized).sum())
    if unsized:
        notes.append(
            f"{unsized} of {n} collectives have no message size in their args "
            "(In msg nelems × dtype, In msg size) nor in their launching op's: no bytes or "
            "bandwidth for them (newer PyTorch records them on record_param_comms)."
        )
    if (sized & (c.group < 0)).any():
        notes.append(
            "Group size unknown (no Group size / Process Group Ranks args and no "
            "distributedInfo.world_size): bus bandwidth is not computed."
        )
    elif (sized & ~c.group_from_args).any():
        notes.append(
            f"Group size taken from distributedInfo.world_size ({trace.world_size}) where "
            "the args do not say: bus bandwidth assumes every collective spans all ranks."
        )
    differ = c.kind != c.name_kind
    relabelled = Counter(zip(c.name_kind[differ].tolist(), c.kind[differ].tolist(), strict=True))
    for (by_name, kind), count in sorted(relabelled.items()):
        notes.append(
            f"{count} collectives run {co.KINDS[by_name]} kernels but their args or launching "
            f"op say {co.KINDS[kind]} (NCCL runs all_to_all as SendRecv kernels): counted as "
            f"{co.KINDS[kind]}."
        )
    if n > SEQUENCE_LIMIT:
        notes.append(
            f"sequence lists the first {SEQUENCE_LIMIT} of {n} collectives; "
            "cross-rank matching uses only those."
        )
    return notes
