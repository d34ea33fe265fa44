"""``window TRACE --step N [--start-us A --end-us B] --out FILE.json.gz``: one step's
window of a trace, cut from the file, for Perfetto UI or chrome://tracing.

The step window is the one every per-step figure uses (``analysis.trace_index``: the CPU
``ProfilerStep#N`` range extended to the end of the GPU work it launched). Without
``--start-us``/``--end-us`` the cut is that window with 10 % of its length added on each
side; with them, ``[A, B)`` µs after the window's start (the timeline's ``offset_us``,
and the ``ki_window`` of the tab's address bar). The cut itself is
:func:`tb_kineto_insights.trace.window.cut_window`: every event of the window kept as in
the file, partially overlapping complete events moved to named sibling tracks.

The file is read once: the read that finds the step window also notes where the events
lie (:class:`~tb_kineto_insights.trace.window.WindowIndex`), and the cut reads back only
the pieces of the JSON that meet the window (and those with metadata) from the
inflater's checkpoints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TextIO

import msgspec

from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.analysis.units import TerminalLines
from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.local_paths import local_path
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES, BlockReader
from tb_kineto_insights.trace.window import (
    WindowCut,
    WindowIndex,
    check_offset_us,
    check_window_holds_events,
    window_bounds,
    write_document,
    write_window,
)
from tb_kineto_insights.trace.window_merge import merge_windows


@dataclass(frozen=True)
class StepWindow:
    """A step's window on the trace's clock (ns)."""

    number: int
    start_ns: int
    end_ns: int


def step_window(
    path: str,
    step: int,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    where: WindowIndex | None = None,
) -> StepWindow:
    """The window of step ``step`` (N of ``ProfilerStep#N``; 0: the pseudo-step of a
    trace without markers) of the trace file. ``where``: a
    :class:`~tb_kineto_insights.trace.window.WindowIndex` filled by the same read (its
    ``source`` is the read's).

    Raises:
        TraceError: the file cannot be read, or it has no such step (the message lists
            its steps).
    """
    if where is None:
        trace = read_trace(path, max_json_bytes=max_json_bytes)
    else:
        trace = read_trace(
            path, max_json_bytes=max_json_bytes, source=where.source, on_block=where.block
        )
    index = build_index(trace)
    del trace
    numbers = [int(n) for n in index.steps.number]
    if step not in numbers:
        listed = ", ".join(str(n) for n in numbers) or "none"
        raise TraceError(path, f"no step {step}; its steps: {listed}")
    i = numbers.index(step)
    return StepWindow(step, int(index.steps.start_ns[i]), int(index.steps.end_ns[i]))


def window_of_step(
    path: str,
    step: int,
    start_us: float | None = None,
    end_us: float | None = None,
    *,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
) -> WindowCut:
    """Cut step ``step``'s window (module docstring) from the trace file.

    Raises:
        TraceError: as :func:`step_window` and :func:`~..trace.window.cut_window`, and
            a window that holds no event (outside the trace: the message says where
            the trace's events lie, relative to the step).
        ValueError: only one of ``start_us``/``end_us`` given, ``end_us <= start_us``, or
            one is not finite or past ``WINDOW_OFFSET_LIMIT_US`` (the message names the
            option and the limit).
    """
    cut, step_start_ns = _cut_step(path, step, start_us, end_us, max_json_bytes)
    check_window_holds_events(cut, path, step_start_ns, step)
    return cut


def _cut_step(
    path: str, step: int, start_us: float | None, end_us: float | None, max_json_bytes: int
) -> tuple[WindowCut, int]:
    """:func:`window_of_step`, empty or not, and the step window's start (ns)."""
    options = ("--start-us", "--end-us")
    for value, option in zip((start_us, end_us), options, strict=True):
        if value is not None:
            check_offset_us(value, option)  # before the file is read
    if (start_us is None) != (end_us is None):
        raise ValueError("give both --start-us and --end-us (the end after the start), or neither")
    if start_us is not None and end_us is not None and end_us <= start_us:
        raise ValueError(f"--end-us {end_us:g} is not after --start-us {start_us:g}")
    where = WindowIndex(BlockReader(path, max_json_bytes, checkpoints=True))
    w = step_window(path, step, max_json_bytes, where)
    bounds = window_bounds(w.start_ns, w.end_ns - w.start_ns, start_us, end_us, options)
    if bounds is None:  # cannot happen: the arguments were checked above
        raise ValueError("give both --start-us and --end-us (the end after the start), or neither")
    return where.cut(*bounds), w.start_ns


def rank_label(path: str, cut_document: dict[str, object], fallback: str) -> str:
    """A rank's label in a merged window: ``rank N`` from the trace's ``distributedInfo``
    when it says, else ``fallback`` (the file's worker name)."""
    info = cut_document.get("distributedInfo")
    if isinstance(info, msgspec.Raw):
        try:
            info = msgspec.json.decode(info)
        except msgspec.DecodeError:
            info = None
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return f"rank {info['rank']}"
    return fallback


def _same_file(a: str, b: str) -> bool:
    """Whether two local paths name one file (after symbolic links, or ``os.path.samefile``
    when both exist: a hard link too)."""
    try:
        if os.path.samefile(a, b):
            return True
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def check_window_paths(paths: list[str], out_path: str) -> None:
    """Refuse what would lose data or merge a rank with itself, before any file is read:
    a trace given twice (the same file by any name), and an ``--out`` that is one of the
    traces (it would be overwritten by its own cut) or a directory. URLs are compared as
    written.

    Raises:
        ValueError: the message names the duplicate trace or ``--out`` and the problem.
    """
    seen: dict[str, str] = {}
    for path in paths:
        key = local_path(path)
        real = os.path.realpath(key) if key is not None else path
        for other_real, other in seen.items():
            if real == other_real or (
                key is not None and local_path(other) is not None and _same_file(key, other_real)
            ):
                raise ValueError(
                    f"{path}: the same trace file is given twice (also as {other}); "
                    "give each rank's file once"
                )
        seen[real] = path
    out_local = local_path(out_path)
    if out_local is None:
        return
    if os.path.isdir(out_local):
        raise ValueError(f"--out {out_path}: is a directory; give a file name (.json or .json.gz)")
    for path in paths:
        key = local_path(path)
        if key is not None and _same_file(out_local, key):
            raise ValueError(
                f"--out {out_path}: is the input trace {path}; writing the window there "
                "would overwrite the trace: give another file name"
            )


def run_window(
    paths: str | list[str],
    step: int,
    out_path: str,
    start_us: float | None,
    end_us: float | None,
    out: TextIO,
    err: TextIO,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
) -> int:
    """The ``window`` command: 0 written (a line says what), 2 on an unreadable trace, a
    missing step, a bad range, a window that holds no event (in any of the ``paths``),
    an ``--out`` that is an input or cannot be written (the message says which). Several
    ``paths`` (the ranks of a run): each one's window of step ``step`` (its own step
    window), merged (:func:`~tb_kineto_insights.trace.window_merge.merge_windows`). Paths and
    names are written with their control characters escaped."""
    out, err = TerminalLines(out), TerminalLines(err)  # type: ignore[assignment]
    paths = [paths] if isinstance(paths, str) else list(paths)
    cuts: list[tuple[str, WindowCut]] = []
    starts: list[int] = []
    try:
        check_window_paths(paths, out_path)
        for path in paths:
            cut, step_start_ns = _cut_step(path, step, start_us, end_us, max_json_bytes)
            worker = os.path.basename(path).split(".")[0] or path
            cuts.append((rank_label(path, cut.document, worker), cut))
            starts.append(step_start_ns)
        if not any(cut.timed for _, cut in cuts):  # one rank may be quiet; all: refuse
            check_window_holds_events(cuts[0][1], paths[0], starts[0], step)
    except (TraceError, ValueError, OSError) as exc:
        err.write(f"error: {exc}\n")
        return 2
    try:
        if len(cuts) == 1:
            size = write_window(cuts[0][1], out_path)
        else:
            size = write_document(merge_windows(cuts), out_path)
    except OSError as exc:
        err.write(f"error: --out {out_path}: cannot be written: {exc.strerror or exc}\n")
        return 2
    for label, cut in cuts:
        moved = (
            f"; {cut.moved} partially overlapping events moved to {len(cut.sibling_tracks)} "
            "sibling tracks"
            if cut.moved
            else ""
        )
        who = f"{label}: " if len(cuts) > 1 else ""
        out.write(
            f"{out_path}: {who}step {step}, ts {cut.start_ns / 1000:.3f} to "
            f"{cut.end_ns / 1000:.3f} µs ({(cut.end_ns - cut.start_ns) / 1000:.3f} µs): "
            f"{cut.events} events, {cut.kernels} kernels{moved}\n"
        )
    out.write(f"{out_path}: {size} bytes\n")
    return 0
