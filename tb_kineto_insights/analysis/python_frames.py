"""The host's Python frames during GPU idle: which user function the GPU waited for.

With ``torch.profiler.profile(with_stack=True)`` a trace holds ``python_function``
ranges: the Python call stack of each host thread over time, one range per call,
named as Kineto names them, ``path/file.py(42): function`` (the line is the function's
first line), ``<built-in method …>`` for C functions, ``nn.Module: Linear_0`` for
module calls.

Definitions (DESIGN.md, Metric definitions, Idle gap):

* A frame is **user code** when its name has Kineto's ``FILE(LINE): FUNCTION`` form and
  ``FILE`` is not library code: not under ``site-packages`` or ``dist-packages``, not in
  a ``torch`` package folder (``torch/…``, ``…/torch/…``), not in the Python standard
  library (``…/lib/python3.N/…``, ``…/lib64/python3.N/…``, ``…\\Lib\\…``), not a
  ``<frozen …>`` or ``<string>`` module. Kineto strips the ``sys.path`` folder a file
  was imported from (``typing.py(2154): cast``, ``numpy/_core/_methods.py(73): …``,
  ``train.py(42): log_metrics``), so a *relative* path is library code when its first
  part is a standard-library module (``sys.stdlib_module_names``) or one of
  :data:`LIBRARY_PACKAGES`. Everything else (``<built-in …>``, ``nn.Module: …``,
  library files) is **library** code.
* **Folding**: time inside a library frame belongs to the nearest user frame that
  encloses it (``time.sleep`` called by ``log_metrics`` is ``log_metrics``' time; a
  ``torch`` function called by ``train_step`` is ``train_step``'s). A library frame with
  no user frame around it stands for itself when it is the outermost frame of its
  thread (a thread started by ``threading``), so no stretch of recorded Python is lost.
* The **frame at a moment** on a thread: the innermost user frame open then, after
  folding; its **callers**: the user frames around it, nearest first.
* The idle of a gap goes to the frames of the gap's *launching thread* (see
  :mod:`.idle`): each idle nanosecond to the frame open on that thread at that moment,
  and to the idle cause of that moment; a moment in no recorded frame goes to no frame.

Frames on one thread are nested (a call stack). Ranges that overlap without nesting
(damaged or truncated traces) are clipped to the range around them.

Cost: only the thread's *candidate* frames (user frames and outermost frames, library
calls never) that overlap its idle gaps are placed, in numpy (:meth:`FrameIndex._nested`:
two sorts and a few ``searchsorted`` over their start and end events; stacks interned
once per distinct (parent stack, frame) pair of each depth); the plain-Python sweep
(:meth:`FrameIndex._sweep`) runs only for frames that overlap without nesting. The
intersection with the idle pieces is numpy too (:func:`overlap_pieces`). Measured by
``benchmarks/bench_python_frames.py`` (``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from tb_kineto_insights.schema.idle import PythonCallers, PythonFrame
from tb_kineto_insights.trace import model as m

_FRAME = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<func>.+)$")
_LIBRARY_PATH = re.compile(
    r"(^|[/\\])(site-packages|dist-packages|torch)[/\\]"
    r"|(^|[/\\])lib(64)?[/\\]python\d+(\.\d+)?[/\\]"
    r"|(^|[/\\])Lib[/\\]"
    r"|^<"
)
#: Top-level packages read as library code when a frame's path starts with them (Kineto
#: strips the ``sys.path`` folder a file was imported from, so ``site-packages/`` is
#: usually gone: ``numpy/_core/_methods.py(73): _count_reduce_items``). The Python
#: standard library's own names come from ``sys.stdlib_module_names``.
LIBRARY_PACKAGES: frozenset[str] = frozenset(
    {
        "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "functorch",
        "triton", "numpy", "scipy", "pandas", "PIL", "cv2", "sklearn", "transformers",
        "accelerate", "datasets", "tokenizers", "safetensors", "huggingface_hub",
        "deepspeed", "lightning", "pytorch_lightning", "lightning_fabric", "timm", "apex",
        "einops", "tqdm", "wandb", "mlflow", "tensorboard", "tensorboardX", "fsspec",
        "pyarrow", "requests", "urllib3", "yaml", "setuptools", "pkg_resources",
        "typing_extensions", "importlib_metadata",
    }
)  # fmt: skip
_STDLIB: frozenset[str] = frozenset(sys.stdlib_module_names)


def _top_module(file: str) -> str:
    first = re.split(r"[/\\]", file, maxsplit=1)[0]
    return first[:-3] if first.endswith(".py") else first


def is_user_frame(name: str) -> bool:
    """Whether a ``python_function`` name is user code (module docstring's rule).

    >>> is_user_frame("train.py(42): log_metrics")
    True
    >>> is_user_frame("typing.py(2154): cast")
    False
    >>> is_user_frame("<built-in function sleep>")
    False
    """
    match = _FRAME.match(name)
    if match is None:
        return False
    file = match.group("file")
    if _LIBRARY_PATH.search(file) is not None:
        return False
    if file.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[/\\]", file):
        return True  # an absolute path outside the library folders above
    top = _top_module(file)
    return top not in _STDLIB and top not in LIBRARY_PACKAGES


def short_frame(name: str) -> str:
    """A frame name with its folder dropped: ``/a/b/train.py(42): log_metrics`` →
    ``train.py(42): log_metrics`` (names not of the ``FILE(LINE): FUNCTION`` form are
    returned as they are)."""
    match = _FRAME.match(name)
    if match is None:
        return name
    file = re.split(r"[/\\]", match.group("file"))[-1]
    return f"{file}({match.group('line')}): {match.group('func')}"


class FrameTimeline(NamedTuple):
    """One thread's Python frames over time: disjoint, sorted pieces ``[start_ns,
    end_ns)`` (int64), each with ``stack``, an index into the list of stacks of the
    :class:`FrameIndex` that made it (a stack: name ids of user frames, outermost
    first; see the module docstring)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    stack: np.ndarray


class FrameIndex:
    """The ``python_function`` ranges of a trace by thread, and the stacks seen.

    ``stacks``: every stack built so far, a tuple of name ids (``Trace.names``),
    outermost first, innermost (the frame) last; :meth:`timeline` numbers stacks into
    this list, so the ids of several threads share one numbering.
    """

    def __init__(self, trace: m.Trace) -> None:
        self.trace = trace
        t = trace.tables[m.PYTHON]
        self.table = t
        self.stacks: list[tuple[int, ...]] = []
        #: per stack id, its innermost frame's name id (``stacks[i][-1]``)
        self.frame_of_stack: list[int] = []
        self._frame_arr = np.zeros(0, dtype=np.int64)
        self._stack_id: dict[tuple[int, ...], int] = {}
        names = trace.names
        used = np.unique(t.name) if len(t) else np.zeros(0, dtype=np.int64)
        user = np.zeros(len(names) if len(names) else 1, dtype=np.bool_)
        for n in used.tolist():
            user[n] = is_user_frame(names[n])
        self._user = user
        if len(t):
            order = np.lexsort((t.tid, t.pid))
            p, q = t.pid[order], t.tid[order]
            change = np.ones(order.size, dtype=np.bool_)
            change[1:] = (p[1:] != p[:-1]) | (q[1:] != q[:-1])
            lo = np.nonzero(change)[0]
            hi = np.append(lo[1:], order.size)
            self._rows = {
                (int(p[a]), int(q[a])): order[a:b]
                for a, b in zip(lo.tolist(), hi.tolist(), strict=True)
            }
        else:
            self._rows = {}

    def __len__(self) -> int:
        return len(self.table)

    def frame_array(self) -> np.ndarray:
        """:attr:`frame_of_stack` as an int64 array (rebuilt only when stacks were
        added since the last call)."""
        if self._frame_arr.size != len(self.frame_of_stack):
            self._frame_arr = np.asarray(self.frame_of_stack, dtype=np.int64)
        return self._frame_arr

    def _child(self, parent: int, name: int) -> int:
        """The id of the stack ``stacks[parent] + (name,)`` (``parent`` -1: ``(name,)``)."""
        key = (parent, name)
        sid = self._stack_id.get(key)
        if sid is None:
            sid = len(self.stacks)
            self.stacks.append((self.stacks[parent] if parent >= 0 else ()) + (name,))
            self.frame_of_stack.append(name)
            self._stack_id[key] = sid
        return sid

    def timeline(
        self, thread: tuple[int, int], within_start_ns: np.ndarray, within_end_ns: np.ndarray
    ) -> FrameTimeline:
        """The frame pieces of ``thread`` (see :class:`FrameTimeline`) that overlap the
        windows ``[within_start_ns, within_end_ns)`` (int64 ns, sorted, disjoint): the
        frames that overlap none are skipped (the frames around a kept frame overlap the
        same window, so every kept piece has its whole stack)."""
        rows = self._rows.get(thread)
        empty = np.zeros(0, dtype=np.int64)
        if rows is None or within_start_ns.size == 0:
            return FrameTimeline(empty, empty, empty)
        t = self.table
        s = t.start_ns[rows]
        e = s + t.dur_ns[rows]
        name = t.name[rows].astype(np.int64)
        order = np.lexsort((-e, s))  # by start, the enclosing (longer) range first
        s, e, name = s[order], e[order], name[order]
        # outermost frames: start at or after every earlier range's end
        prev_end = np.maximum.accumulate(e)
        root = np.ones(s.size, dtype=np.bool_)
        root[1:] = s[1:] >= prev_end[:-1]
        # overlaps a window: the first window ending after the frame starts begins before
        # the frame ends
        w = np.searchsorted(within_end_ns, s, side="right")
        hit = w < within_start_ns.size
        hit[hit] = within_start_ns[w[hit]] < e[hit]
        cand = (self._user[name] | root) & hit & (e > s)
        s, e, name, user = s[cand], e[cand], name[cand], self._user[name][cand]
        fast = self._nested(s, e, name, user)
        return fast if fast is not None else self._sweep(s, e, name, user)

    def _labels(
        self, name: np.ndarray, user: np.ndarray, parent: np.ndarray, depth: np.ndarray
    ) -> np.ndarray:
        """Per frame, the id of its piece's stack (:attr:`stacks`): for a user frame, the
        user frames from the outermost down to it; for an outermost library frame, its
        own name. ``parent``: index of the enclosing candidate frame (-1: none);
        ``depth``: 1 for outermost frames. Stacks are interned once per distinct
        (parent stack, frame name) pair of each depth, level by level."""
        n = name.size
        users = np.full(n, -1, dtype=np.int64)  # id of the user-frame stack (-1: none)
        label = np.full(n, -1, dtype=np.int64)
        by_depth = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[by_depth], np.arange(1, int(depth.max()) + 2))
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            level = by_depth[lo:hi]
            par = parent[level]
            par_users = np.where(par >= 0, users[np.maximum(par, 0)], -1)
            u = user[level]
            lib = level[~u]
            for k in np.unique(name[lib]).tolist():
                label[lib[name[lib] == k]] = self._child(-1, k)
            mine = level[u]
            if mine.size:
                # one int64 key per (parent stack, name) pair: np.unique(axis=0) sorts rows
                # as records, about 10x slower
                width = int(name.max()) + 1
                pair = (par_users[u] + 1) * width + name[mine]
                uniq, inv = np.unique(pair, return_inverse=True)
                sid = np.array(
                    [self._child(int(k // width) - 1, int(k % width)) for k in uniq.tolist()],
                    dtype=np.int64,
                )
                users[mine] = sid[inv.reshape(-1)]
                label[mine] = users[mine]
            users[lib] = -1
        return label

    def _nested(
        self, s: np.ndarray, e: np.ndarray, name: np.ndarray, user: np.ndarray
    ) -> FrameTimeline | None:
        """The pieces of properly nested frames, in numpy (``None`` when some frame ends
        after the frame around it: :meth:`_sweep` clips those). The frames come sorted
        by start, the longer first at equal starts.

        The frames' starts (+1) and ends (-1) in time order (at equal times ends first,
        inner ends first, outer starts first) give the depth after each event; the
        innermost frame open after event ``k`` is the one opened by the last start event
        ``j <= k`` at the same depth, and a frame's parent the innermost one open just
        before its start."""
        n = s.size
        if n == 0:
            z = np.zeros(0, dtype=np.int64)
            return FrameTimeline(z, z, z)
        # merge the starts (already by start, longer first) with the ends (by end, the
        # later start first); at equal times ends come first
        end_order = np.lexsort((-s, e))
        e_sorted = e[end_order]
        idx = np.arange(n)
        pos_start = idx + np.searchsorted(e_sorted, s, side="right")
        pos_end = idx + np.searchsorted(s, e_sorted, side="left")
        t = np.empty(2 * n, dtype=np.int64)
        typ = np.empty(2 * n, dtype=np.int64)
        frame = np.empty(2 * n, dtype=np.int64)
        t[pos_start], t[pos_end] = s, e_sorted
        typ[pos_start], typ[pos_end] = 1, -1
        frame[pos_start], frame[pos_end] = idx, end_order
        depth = np.cumsum(typ)
        starts = pos_start  # increasing
        m = 2 * n + 1
        by_depth = np.argsort(depth[starts], kind="stable")  # then by position
        starts = starts[by_depth]
        keys = depth[starts] * m + starts

        def opener(d: np.ndarray, pos: np.ndarray) -> np.ndarray:
            """Frame opened by the last start event at depth ``d`` at or before ``pos``
            (-1 where none)."""
            q = np.searchsorted(keys, d * m + pos, side="right") - 1
            ok = (q >= 0) & (d > 0)
            ok[ok] = keys[q[ok]] // m == d[ok]
            return np.where(ok, frame[starts[np.maximum(q, 0)]], -1)

        frame_depth = depth[pos_start]
        start_pos = pos_start
        parent = opener(frame_depth - 1, start_pos - 1)
        has = parent >= 0
        if np.any(e[has] > e[parent[has]]):
            return None  # not nested: clip in the sweep
        seg = np.nonzero((depth[:-1] > 0) & (t[1:] > t[:-1]))[0]
        inner = opener(depth[seg], seg)
        label = self._labels(name, user, parent, frame_depth)
        return FrameTimeline(t[seg], t[seg + 1], label[inner])

    def _sweep(
        self, s: np.ndarray, e: np.ndarray, name: np.ndarray, user: np.ndarray
    ) -> FrameTimeline:
        """The pieces by a sweep with a stack of open frames: the reference for
        :meth:`_nested`, and the path for frames that overlap without nesting (each is
        clipped to the end of the frame around it)."""
        out_s: list[int] = []
        out_e: list[int] = []
        out_k: list[int] = []
        # the open frames, outermost first: end, stack id of the piece (label), and id of
        # the stack of user frames alone (-1: none)
        open_end: list[int] = []
        open_label: list[int] = []
        open_user: list[int] = []
        cur = 0
        for start, end, n, is_user in zip(
            s.tolist(), e.tolist(), name.tolist(), user.tolist(), strict=True
        ):
            while open_end and open_end[-1] <= start:
                stop = open_end.pop()
                label = open_label.pop()
                open_user.pop()
                if stop > cur:
                    out_s.append(cur)
                    out_e.append(stop)
                    out_k.append(label)
                    cur = stop
            if open_end and start > cur:
                out_s.append(cur)
                out_e.append(start)
                out_k.append(open_label[-1])
            cur = start
            parent = open_user[-1] if open_user else -1
            if open_end and end > open_end[-1]:
                end = open_end[-1]  # overlapping without nesting: clipped
            if is_user:
                users = self._child(parent, n)
                label = users
            else:  # an outermost library frame (no frame around it)
                users = parent
                label = self._child(-1, n)
            open_end.append(end)
            open_label.append(label)
            open_user.append(users)
        while open_end:
            stop = open_end.pop()
            label = open_label.pop()
            open_user.pop()
            if stop > cur:
                out_s.append(cur)
                out_e.append(stop)
                out_k.append(label)
                cur = stop
        return FrameTimeline(
            np.asarray(out_s, dtype=np.int64),
            np.asarray(out_e, dtype=np.int64),
            np.asarray(out_k, dtype=np.int64),
        )


def overlap_pieces(
    a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every non-empty intersection of an interval of ``a`` with one of ``b``, both
    disjoint and sorted (int64 ns, half-open): ``(start, end, a_index, b_index)``,
    sorted by start."""
    if a_start.size == 0 or b_start.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    lo = np.searchsorted(b_end, a_start, side="right")  # first b ending after a starts
    hi = np.searchsorted(b_start, a_end, side="left")  # first b starting at/after a ends
    counts = np.maximum(hi - lo, 0)
    ai = np.repeat(np.arange(a_start.size), counts)
    first = np.repeat(lo - np.cumsum(counts) + counts, counts)
    bi = first + np.arange(ai.size)
    s = np.maximum(a_start[ai], b_start[bi])
    e = np.minimum(a_end[ai], b_end[bi])
    keep = e > s
    return s[keep], e[keep], ai[keep], bi[keep]


class FramePieces(NamedTuple):
    """Idle time split by launching-thread frame: per piece its length (``dur_ns``), idle
    cause (``cause``, a column of :data:`.host_activity.CAUSES`), frame stack (``stack``, an id of
    :attr:`FrameIndex.stacks`), gap (``gap``, index in the device's gaps) and whether it
    lies in a sync-opened gap in another stack than the one open as the gap opened
    (``after_sync``)."""

    dur_ns: np.ndarray
    cause: np.ndarray
    stack: np.ndarray
    gap: np.ndarray
    after_sync: np.ndarray

    @staticmethod
    def concat(parts: list[FramePieces]) -> FramePieces:
        """The pieces of several threads as one."""
        if not parts:
            z = np.zeros(0, dtype=np.int64)
            return FramePieces(z, z, z, z, np.zeros(0, dtype=np.bool_))
        return FramePieces(*(np.concatenate([p[k] for p in parts]) for k in range(5)))


def thread_pieces(
    frames: FrameIndex,
    thread: tuple[int, int],
    idle_start_ns: np.ndarray,
    idle_end_ns: np.ndarray,
    idle_cause: np.ndarray,
    gap_start_ns: np.ndarray,
    gap_end_ns: np.ndarray,
    gaps: np.ndarray,
    sync_opened: np.ndarray,
) -> FramePieces:
    """The idle of one launching thread split by its Python frames.

    Args:
        frames: the trace's frames.
        thread: (pid, tid) of the launching thread.
        idle_start_ns, idle_end_ns, idle_cause: the thread's idle intervals (int64 ns,
            disjoint, any order) with their cause column.
        gap_start_ns, gap_end_ns: every gap of the device (int64 ns, sorted, disjoint).
        gaps: indices of the gaps this thread launches (ascending).
        sync_opened: per gap of the device, opened by a host synchronization.

    Returns:
        The pieces (:class:`FramePieces`); idle in no recorded frame is left out.
    """
    empty = FramePieces.concat([])
    if idle_start_ns.size == 0 or gaps.size == 0:
        return empty
    tl = frames.timeline(thread, gap_start_ns[gaps], gap_end_ns[gaps])
    if tl.start_ns.size == 0:
        return empty
    order = np.argsort(idle_start_ns, kind="stable")
    s, e, ai, bi = overlap_pieces(idle_start_ns[order], idle_end_ns[order], tl.start_ns, tl.end_ns)
    cause = idle_cause[order][ai]
    stack = tl.stack[bi]
    gap = np.searchsorted(gap_start_ns, s, side="right") - 1
    # the stack open on the thread as each sync-opened gap opened (-1: none recorded)
    opener = np.full(gap_start_ns.size, -1, dtype=np.int64)
    so = gaps[sync_opened[gaps]]
    if so.size:
        j = np.searchsorted(tl.start_ns, gap_start_ns[so], side="right") - 1
        ok = j >= 0
        ok[ok] = tl.end_ns[j[ok]] > gap_start_ns[so][ok]
        opener[so[ok]] = tl.stack[j[ok]]
    after = sync_opened[gap] & (opener[gap] >= 0) & (stack != opener[gap])
    return FramePieces(e - s, cause, stack, gap, after)


def frame_summaries(
    frames: FrameIndex,
    pieces: FramePieces,
    step_of_gap: np.ndarray,
    n_steps: int,
    causes: Sequence[str],
    idle_ns: int,
    total_ns: int,
    listed: int,
    callers_listed: int,
) -> list[PythonFrame]:
    """``idle.devices[].python_frames``: the ``listed`` frames holding the most idle,
    largest first (ties by name), each with its ``callers_listed`` largest call paths.

    Args:
        frames: the trace's frames (names and stacks).
        pieces: the device's idle pieces (:func:`thread_pieces` of every thread).
        step_of_gap: per gap, index of its step (-1: none).
        n_steps: steps analysed (the per-step denominator).
        causes: the idle causes, in the column order of ``pieces.cause``.
        idle_ns, total_ns: the device's idle and summed step time (denominators).
        listed, callers_listed: how many frames and call paths per frame.
    """
    if pieces.dur_ns.size == 0:
        return []
    names = frames.trace.names
    frame = frames.frame_array()[pieces.stack]
    uniq, inv = np.unique(frame, return_inverse=True)
    dur = pieces.dur_ns
    total = np.bincount(inv, weights=dur, minlength=uniq.size)
    order = np.lexsort((uniq, -total))[:listed]
    steps = step_of_gap[pieces.gap]
    out: list[PythonFrame] = []
    for k in order.tolist():
        sel = inv == k
        d = dur[sel]
        idle = int(d.sum())
        by_cause = np.bincount(pieces.cause[sel], weights=d, minlength=len(causes))
        st = steps[sel]
        in_step = st >= 0
        per_step = np.bincount(st[in_step], weights=d[in_step], minlength=n_steps)
        paths, pinv = np.unique(pieces.stack[sel], return_inverse=True)
        path_ns = np.bincount(pinv, weights=d, minlength=paths.size)
        callers = [
            PythonCallers(
                callers=[names[n] for n in reversed(frames.stacks[int(paths[p])][:-1])],
                idle_us=float(path_ns[p]) / 1000.0,
            )
            for p in np.lexsort((paths, -path_ns))[:callers_listed].tolist()
        ]
        out.append(
            PythonFrame(
                frame=names[int(uniq[k])],
                idle_us=idle / 1000.0,
                idle_us_per_step=idle / 1000.0 / n_steps if n_steps else 0.0,
                fraction_of_idle=idle / idle_ns if idle_ns else 0.0,
                fraction_of_step_time=idle / total_ns if total_ns else 0.0,
                causes_us={
                    c: float(by_cause[i]) / 1000.0 for i, c in enumerate(causes) if by_cause[i]
                },
                after_sync_us=int(d[pieces.after_sync[sel]].sum()) / 1000.0,
                per_step_us=[float(v) / 1000.0 for v in per_step[:n_steps]],
                callers=callers,
            )
        )
    return out


def gap_frame(frames: FrameIndex, pieces: FramePieces, gap: int) -> str | None:
    """The frame holding most of gap ``gap``'s idle (ties: the smaller name id), else
    ``None`` when no recorded frame covers any of it."""
    sel = pieces.gap == gap
    if not sel.any():
        return None
    frame = frames.frame_array()[pieces.stack[sel]]
    uniq, inv = np.unique(frame, return_inverse=True)
    t = np.bincount(inv, weights=pieces.dur_ns[sel])
    return frames.trace.names[int(uniq[int(np.argmax(t))])]
