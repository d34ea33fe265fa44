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

Cost: one stable sort per thread; a Python loop over the thread's *candidate* frames
(user frames and outermost frames, library calls never) overlapping the idle gaps;
the intersection with the idle pieces is numpy (:func:`overlap_pieces`).
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

    def _stack(self, frames: Sequence[int]) -> int:
        key = tuple(frames)
        sid = self._stack_id.get(key)
        if sid is None:
            sid = len(self.stacks)
            self.stacks.append(key)
            self._stack_id[key] = sid
        return sid

    def timeline(self, thread: tuple[int, int], lo_ns: int, hi_ns: int) -> FrameTimeline:
        """The frame pieces of ``thread`` inside ``[lo_ns, hi_ns)`` (see
        :class:`FrameTimeline`); frames that lie wholly outside are skipped (cost)."""
        rows = self._rows.get(thread)
        empty = np.zeros(0, dtype=np.int64)
        if rows is None:
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
        cand = (self._user[name] | root) & (e > lo_ns) & (s < hi_ns)
        user = self._user[name][cand]
        s, e, name = s[cand].tolist(), e[cand].tolist(), name[cand].tolist()
        out_s: list[int] = []
        out_e: list[int] = []
        out_k: list[int] = []
        # open frames: (end_ns, name id, is user), outermost first
        open_: list[tuple[int, int, bool]] = []
        sid = -1  # the stack id of the open frames (valid while open_ is not empty)
        cur = 0

        def emit(upto: int) -> None:
            if upto > cur:
                out_s.append(cur)
                out_e.append(upto)
                out_k.append(sid)

        def stack_id() -> int:
            users = [n for _, n, u in open_ if u]
            return self._stack(users if users else [open_[0][1]])

        for i, start in enumerate(s):
            while open_ and open_[-1][0] <= start:
                end = open_[-1][0]
                emit(end)
                cur = end
                open_.pop()
                if open_:
                    sid = stack_id()
            if open_:
                emit(start)
            cur = start
            end = e[i] if not open_ else min(e[i], open_[-1][0])
            open_.append((end, name[i], bool(user[i])))
            sid = stack_id()
        while open_:
            end = open_[-1][0]
            emit(end)
            cur = end
            open_.pop()
            if open_:
                sid = stack_id()
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


class IdlePieces(NamedTuple):
    """Idle time split by launching-thread frame: per piece its length (``dur_ns``), idle
    cause (``cause``, a column of :data:`.idle.CAUSES`), frame stack (``stack``, an id of
    :attr:`FrameIndex.stacks`), gap (``gap``, index in the device's gaps) and whether it
    lies in a sync-opened gap in another stack than the one open as the gap opened
    (``after_sync``)."""

    dur_ns: np.ndarray
    cause: np.ndarray
    stack: np.ndarray
    gap: np.ndarray
    after_sync: np.ndarray

    @staticmethod
    def concat(parts: list[IdlePieces]) -> IdlePieces:
        """The pieces of several threads as one."""
        if not parts:
            z = np.zeros(0, dtype=np.int64)
            return IdlePieces(z, z, z, z, np.zeros(0, dtype=np.bool_))
        return IdlePieces(*(np.concatenate([p[k] for p in parts]) for k in range(5)))


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
) -> IdlePieces:
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
        The pieces (:class:`IdlePieces`); idle in no recorded frame is left out.
    """
    empty = IdlePieces.concat([])
    if idle_start_ns.size == 0 or gaps.size == 0:
        return empty
    tl = frames.timeline(thread, int(gap_start_ns[gaps[0]]), int(gap_end_ns[gaps[-1]]))
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
    return IdlePieces(e - s, cause, stack, gap, after)


def frame_summaries(
    frames: FrameIndex,
    pieces: IdlePieces,
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
    frame_of_stack = np.array([st[-1] for st in frames.stacks], dtype=np.int64)
    frame = frame_of_stack[pieces.stack]
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


def gap_frame(frames: FrameIndex, pieces: IdlePieces, gap: int) -> str | None:
    """The frame holding most of gap ``gap``'s idle (ties: the earlier stack), else
    ``None`` when no recorded frame covers any of it."""
    sel = pieces.gap == gap
    if not sel.any():
        return None
    frame_of_stack = np.array([frames.stacks[int(s)][-1] for s in pieces.stack[sel]])
    uniq, inv = np.unique(frame_of_stack, return_inverse=True)
    t = np.bincount(inv, weights=pieces.dur_ns[sel])
    return frames.trace.names[int(uniq[int(np.argmax(t))])]
