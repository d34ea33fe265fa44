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

from typing import TextIO

from tb_kineto_insights.analysis.units import TerminalLines
from tb_kineto_insights.service.windows import (
    check_window_paths,
    cut_file_windows,
    write_window_file,
)
from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES
from tb_kineto_insights.trace.window import WindowCut
from tb_kineto_insights.trace.window_merge import merge_windows


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
    names are written with their control characters escaped. The output is written
    atomically (an older file there stays whole when the new one cannot be written), and
    a damaged trace is cut as the reader reads it (a line says what was lost)."""
    out, err = TerminalLines(out), TerminalLines(err)  # type: ignore[assignment]
    paths = [paths] if isinstance(paths, str) else list(paths)
    try:
        check_window_paths(paths, out_path)
        cuts = cut_file_windows(paths, step, start_us, end_us, max_json_bytes)
    except (TraceError, ValueError, OSError) as exc:
        err.write(f"error: {exc}\n")
        return 2
    try:
        document = cuts[0][1].document if len(cuts) == 1 else merge_windows(cuts)
        size = write_window_file(document, out_path)
    except OSError as exc:  # the older file at out_path, if any, is left as it was
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
    for label, cut in cuts:
        if cut.damage or cut.stream_damage:
            who = f"{label}: " if len(cuts) > 1 else ""
            err.write(f"{out_path}: {who}{damage_note(cut)}\n")
    out.write(f"{out_path}: {size} bytes\n")
    return 0


def damage_note(cut: WindowCut) -> str:
    """What the cut of a damaged file read around, in one line."""
    parts = []
    if cut.damage:
        parts.append(
            f"{len(cut.damage)} damaged region(s) of the trace skipped as the reader skips "
            f"them ({cut.lost_events} events lost; the first at byte {cut.damage[0].offset}: "
            f"{cut.damage[0].problem})"
        )
    if cut.stream_damage is not None:
        parts.append(
            f"the gzip stream breaks off at byte {cut.stream_damage[0]} "
            f"({cut.stream_damage[1]}): cut up to there"
        )
    return "warning: " + "; ".join(parts)
