"""What the host was doing: the one table of host-activity causes.

Every panel that says what the host did while the GPU waited reads this table: the idle
panel (each idle moment's cause, :mod:`.idle`), the timeline (each host range's class,
:mod:`.timeline`), the Python frames (idle time per frame and cause, :mod:`.python_frames`)
and the lead-up of collectives (:mod:`.lead_up`), through the cause columns that index
:data:`CAUSES`.

A cause is matched by the name of a traced range on the host thread: a CPU op or user
annotation, or a CUDA/HIP runtime call. **Priority**: a moment (idle) or a range
(timeline) takes the first cause of :data:`CAUSES` that matches; ``host_untraced`` and
``nothing_recorded`` match no range: they are what is left of an idle moment when no
traced range covers it (inside a host ``ProfilerStep`` range, or outside every one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.group_sums import distinct_pairs
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.trace import model as m

#: The host tables a cause can match rows of: ops and annotations.
OPS: tuple[str, ...] = (m.CPU_OP, m.USER_ANNOTATION)
#: ... runtime calls.
RUNTIME: tuple[str, ...] = (m.RUNTIME,)


def _any_name(name: str) -> bool:
    """Every runtime call is a launch-side call (``launching``)."""
    return True


@dataclass(frozen=True)
class HostCause:
    """One cause: its ``name`` (the JSON key), ``words`` (``summary.idle.cause_labels``),
    the tab's ``label`` and ``definition``, and which rows it matches: the tables
    (``kinds``) and the name ``predicate`` (None: no row, the untraced remainder)."""

    name: str
    words: str
    label: str
    definition: str
    kinds: tuple[str, ...] = ()
    predicate: Callable[[str], bool] | None = None


#: The causes in priority order (module docstring).
CAUSES: tuple[HostCause, ...] = (
    HostCause(
        "compiling",
        "torch.compile compiling",
        "Compiling",
        "The launching host thread was inside torch.compile's compilation (Dynamo tracing, "
        "AOTAutograd, Inductor codegen, Triton autotuning) while the GPU waited; a gap "
        "opened by a sync or an allocation inside it belongs here too.",
        OPS,
        nm.is_compile,
    ),
    HostCause(
        "data_loading",
        "data loading",
        "Data loading",
        "The launching host thread was inside enumerate(DataLoader) / DataPipe while the "
        "GPU waited.",
        OPS,
        nm.is_dataloader,
    ),
    HostCause(
        "host_sync",
        "host synchronization",
        "Host sync",
        "The gap opened as a host synchronisation returned (cudaDeviceSynchronize, .item() "
        "of a GPU tensor, synchronous copy), or the host was synchronising; .item() of a "
        "CPU tensor (no runtime sync call inside it) is no sync.",
        OPS + RUNTIME,
        nm.is_sync,
    ),
    HostCause(
        "allocator",
        "device memory allocation calls (cudaMalloc / cudaFree)",
        "Memory allocation calls",
        "The gap opened while the host was in cudaMalloc / cudaFree (cudaFree synchronises "
        "the device: the caching allocator released its cache, e.g. torch.cuda.empty_cache()), "
        "or the host was in such a call.",
        RUNTIME,
        nm.is_allocator_call,
    ),
    HostCause(
        "optimizer_step",
        "the optimizer step",
        "Optimizer step",
        "The host was running the optimizer step (Optimizer.step) while the GPU waited.",
        OPS,
        nm.is_optimizer,
    ),
    HostCause(
        "launching",
        "kernel launch calls",
        "Kernel launching",
        "The host was inside CUDA runtime calls (launching kernels) while the GPU waited.",
        RUNTIME,
        _any_name,
    ),
    HostCause(
        "cpu_ops",
        "other CPU ops",
        "Other CPU ops",
        "The host was running other CPU ops while the GPU waited.",
        OPS,
        nm.is_not_step_marker,
    ),
    HostCause(
        "graph_replay",
        "waiting inside a CUDA graph replay",
        "Inside a CUDA graph replay",
        "The GPU waited between two kernels of one CUDA graph replay (cudaGraphLaunch): on "
        "the graph's own dependencies (another stream's work, an event), not on the host.",
    ),
    HostCause(
        "host_untraced",
        "host busy outside traced ops (untraced Python, sleep, I/O)",
        "Host busy, untraced",
        "Inside a host ProfilerStep, but no traced op or runtime call on the launching "
        "thread: untraced Python, a sleep, I/O (profile with with_stack=True or py-spy to "
        "see what).",
    ),
    HostCause(
        "nothing_recorded",
        "nothing recorded on the launching thread",
        "Nothing recorded",
        "No op was recorded on the launching thread while the GPU waited, outside every "
        "host ProfilerStep range (or in a trace without step markers).",
    ),
)
#: The cause names, in priority order.
CAUSE_NAMES: tuple[str, ...] = tuple(c.name for c in CAUSES)
#: The causes read from traced ranges, in priority order.
TRACED: tuple[HostCause, ...] = tuple(c for c in CAUSES if c.predicate is not None)
#: Their names.
TRACED_NAMES: tuple[str, ...] = tuple(c.name for c in TRACED)
#: What each cause means, in words (``summary.idle.cause_labels``).
CAUSE_WORDS: dict[str, str] = {c.name: c.words for c in CAUSES}
#: The (pid, tid) of no thread.
NO_THREAD = (-(2**62), -(2**62))


def rows_of(index: TraceIndex, cause: HostCause, kind: str) -> npt.NDArray[np.bool_]:
    """Per row of table ``kind``: whether ``cause`` matches it (its name satisfies the
    cause's predicate and the cause reads that table); all False otherwise. An op that
    reads a value to the host (``aten::item``, ``aten::_local_scalar_dense``,
    ``aten::nonzero``) is a ``host_sync`` only when it waits for the GPU: a runtime sync
    call on its thread lies inside it (:func:`waits_for_gpu`); ``.item()`` of a CPU
    tensor (an optimizer's step count) waits for nothing."""
    if cause.predicate is None or kind not in cause.kinds:
        return np.zeros(len(index.trace.tables[kind]), dtype=np.bool_)
    rows = index.rows_where(kind, cause.predicate)
    if cause.name == "host_sync" and kind in OPS:
        rows &= waits_for_gpu(index, kind, rows)
    return rows


def waits_for_gpu(
    index: TraceIndex, kind: str, rows: npt.NDArray[np.bool_]
) -> npt.NDArray[np.bool_]:
    """Per row of host table ``kind``: True unless it is one of ``rows`` and no runtime
    sync call (:func:`~tb_kineto_insights.analysis.names.is_sync`: ``cudaStreamSynchronize``,
    a synchronous copy…) starts inside it on its thread. A trace without runtime calls
    cannot tell: every row is True there."""
    out = np.ones(len(rows), dtype=np.bool_)
    rt = index.trace.runtime
    if not rows.any() or len(rt) == 0:
        return out
    table = index.trace.tables[kind]
    syncs = index.rows_where(m.RUNTIME, nm.is_sync)
    cand = np.flatnonzero(rows)
    out[cand] = False
    if not syncs.any():
        return out
    sp, st_, ss = rt.pid[syncs], rt.tid[syncs], rt.start_ns[syncs]
    for p, t in distinct_pairs(table.pid[cand], table.tid[cand]):
        mine = cand[(table.pid[cand] == p) & (table.tid[cand] == t)]
        starts = np.sort(ss[(sp == p) & (st_ == t)])
        first = np.searchsorted(starts, table.start_ns[mine], side="left")
        out[mine] = np.searchsorted(starts, table.end_ns[mine], side="left") > first
    return out


def first_cause(index: TraceIndex, kind: str) -> npt.NDArray[np.int64]:
    """Per row of table ``kind`` (a host table), the position in :data:`CAUSES` of the
    first cause that matches it (its class on the timeline); -1 for a row no cause
    matches (a ``ProfilerStep#N`` marker)."""
    out = np.full(len(index.trace.tables[kind]), -1, dtype=np.int64)
    for position in range(len(CAUSES) - 1, -1, -1):  # lowest priority first: the first wins
        out[rows_of(index, CAUSES[position], kind)] = position
    return out


def step_thread_of(index: TraceIndex) -> tuple[int, int]:
    """The *step thread*: the (pid, tid) of the first ``ProfilerStep#N`` marker (a user
    annotation), else the thread with the most runtime calls, else :data:`NO_THREAD`."""
    t = index.trace.tables[m.USER_ANNOTATION]
    marks = index.rows_where(m.USER_ANNOTATION, nm.is_step_marker)
    if marks.any():
        r = int(np.nonzero(marks)[0][0])
        return int(t.pid[r]), int(t.tid[r])
    rt = index.trace.runtime
    if len(rt):
        pairs, counts = np.unique(np.stack([rt.pid, rt.tid], axis=1), axis=0, return_counts=True)
        best = pairs[int(np.argmax(counts))]
        return int(best[0]), int(best[1])
    return NO_THREAD
