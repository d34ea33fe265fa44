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
from tb_kineto_insights.service.windows import check_window_paths, cut_file_windows
from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES
from tb_kineto_insights.trace.window import write_document, write_window
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
    names are written with their control characters escaped."""
    out, err = TerminalLines(out), TerminalLines(err)  # type: ignore[assignment]
    paths = [paths] if isinstance(paths, str) else list(paths)
    try:
        check_window_paths(paths, out_path)
        cuts = cut_file_windows(paths, step, start_us, end_us, max_json_bytes)
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
