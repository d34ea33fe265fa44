"""What a rank did before each of its collectives: the lead-up window.

For the k-th collective of a rank's ``communication.sequence`` (collectives sorted by
start) the **lead-up** is the window ``[a_k, s_k)`` on the rank's main GPU: from the end
of its previous collective (``a_k`` = the latest end among collectives ``0 … k−1``,
at most ``s_k``; for the first collective, the start of its step; none outside the
steps) to this collective's kernel start ``s_k``, the rank's arrival (:mod:`.run_view`).
When every rank leaves the previous collective together (the collectives of one
process group end together), a rank's lateness at collective ``k`` is exactly how much
longer its lead-up was, and the lead-up's parts say on what.

The window splits into disjoint parts, in this priority order (``lead_up_us``, µs; a
part that is 0 is left out):

- ``gpu_compute``: covered by a kernel that is not communication (NCCL/RCCL);
- ``memcpy``: covered by a memcpy or memset and no compute kernel;
- ``communication``: covered only by communication kernels (another collective on
  another stream);
- the GPU idle time by its host-side cause, as the idle panel attributes it
  (:class:`.idle.IdlePieces`, :data:`.host_activity.CAUSES`: ``host_untraced``, ``data_loading``,
  ``host_sync``, ``optimizer_step``, ``launching``, ``cpu_ops``, ``allocator``,
  ``nothing_recorded``);
- ``unattributed``: the rest (GPU idle outside the step windows, which the idle panel
  does not attribute).

Two more counts of the window, the launch work: ``lead_up_kernels``, the compute kernels
(not communication) that start in it, and ``lead_up_us["launch_api"]``, the host time in
the runtime calls that launched the device's kernels (any thread) inside it. Host time
overlaps GPU time, so ``launch_api`` is not one of the disjoint parts: the parts sum to
the window's length, ``launch_api`` is told beside them.

Real traces: h200x2 ``ddp_straggler`` rank 1 sleeps 20 ms before ``backward()``, so the
lead-up of each step's first all-reduce holds ≈ 20 ms more ``host_untraced`` than rank
0's (``tests/test_lead_up_real.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.host_activity import CAUSE_NAMES
from tb_kineto_insights.analysis.idle import IdlePieces
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.trace import model as m

#: The disjoint parts of a lead-up, in priority order (module docstring).
LEAD_UP_PARTS: tuple[str, ...] = (
    "gpu_compute",
    "memcpy",
    "communication",
    *CAUSE_NAMES,
    "unattributed",
)


def _windows(start_ns: np.ndarray, end_ns: np.ndarray, index: TraceIndex) -> np.ndarray:
    """Per collective (sorted by start), the lead-up's start ``a_k`` (module docstring);
    -1 where there is none (the first collective outside every step)."""
    n = start_ns.size
    a = np.full(n, -1, dtype=np.int64)
    if not n:
        return a
    prev_end = np.maximum.accumulate(end_ns)
    a[1:] = np.minimum(prev_end[:-1], start_ns[1:])
    steps = index.steps
    step_of_first = steps.step_of(start_ns[:1])
    if int(step_of_first[0]) >= 0:
        a[0] = int(steps.start_ns[int(step_of_first[0])])
    return a


def lead_ups(
    index: TraceIndex,
    device: int | None,
    pieces: IdlePieces | None,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
) -> list[tuple[dict[str, float], int] | None]:
    """Per collective (``start_ns``/``end_ns``, int64 ns, sorted by start: the rank's
    sequence), its lead-up on ``device``: ``({part: µs, "launch_api": µs}, compute
    kernels started in it)``, or ``None`` where it has no window or there is no device
    (module docstring). ``pieces``: the idle panel's attributed idle of ``device``
    (``None``: the idle time counts as ``unattributed``)."""
    n = int(start_ns.size)
    if device is None or not n:
        return [None] * n
    trace = index.trace
    a = _windows(start_ns, end_ns, index)
    has = a >= 0
    win_s = np.where(has, a, start_ns).astype(np.int64)
    win_e = start_ns.astype(np.int64)
    k = trace.tables[m.KERNEL]
    on_dev = k.device == device
    comm_mask = index.rows_where(m.KERNEL, nm.is_communication_kernel)
    compute_rows = on_dev & ~comm_mask
    compute = iv.union(k.start_ns[compute_rows], k.end_ns[compute_rows])
    copy_s, copy_e = [], []
    for kind in (m.MEMCPY, m.MEMSET):  # may overlap each other (two streams)
        t = trace.tables[kind]
        sel = t.device == device
        copy_s.append(t.start_ns[sel])
        copy_e.append(t.end_ns[sel])
    memcpy = iv.subtract(iv.union(np.concatenate(copy_s), np.concatenate(copy_e)), compute)
    comm = iv.subtract(
        iv.subtract(
            iv.union(k.start_ns[on_dev & comm_mask], k.end_ns[on_dev & comm_mask]), compute
        ),
        memcpy,
    )
    parts: dict[str, np.ndarray] = {
        "gpu_compute": iv.overlap_per_window(compute, win_s, win_e),
        "memcpy": iv.overlap_per_window(memcpy, win_s, win_e),
        "communication": iv.overlap_per_window(comm, win_s, win_e),
    }
    for code, cause in enumerate(CAUSE_NAMES):
        if pieces is None or not pieces.start_ns.size:
            parts[cause] = np.zeros(n, dtype=np.int64)
            continue
        sel = pieces.cause == code
        cause_set = iv.union(pieces.start_ns[sel], pieces.end_ns[sel])
        parts[cause] = iv.overlap_per_window(cause_set, win_s, win_e)
    length = win_e - win_s
    covered = np.sum(np.stack(list(parts.values())), axis=0)
    parts["unattributed"] = np.maximum(0, length - covered)
    rt = trace.runtime
    launch = index.launch_row[m.KERNEL][compute_rows]
    launch = np.unique(launch[launch >= 0])
    api = (
        iv.union(rt.start_ns[launch], rt.end_ns[launch])
        if launch.size
        else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    )
    launch_api = iv.overlap_per_window(api, win_s, win_e)
    kernel_starts = np.sort(k.start_ns[compute_rows])
    kernels = np.searchsorted(kernel_starts, win_e, side="left") - np.searchsorted(
        kernel_starts, win_s, side="left"
    )
    columns = {key: (values / 1000.0).tolist() for key, values in parts.items()}
    api_us = (launch_api / 1000.0).tolist()
    counts = kernels.tolist()
    out: list[tuple[dict[str, float], int] | None] = []
    for i, ok in enumerate(has.tolist()):
        if not ok:
            out.append(None)
            continue
        record: dict[str, Any] = {key: columns[key][i] for key in LEAD_UP_PARTS if columns[key][i]}
        if api_us[i]:
            record["launch_api"] = api_us[i]
        out.append((record, int(counts[i])))
    return out
