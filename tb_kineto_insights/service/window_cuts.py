"""The plugin's window cuts as they run in a worker process (``worker_calls.py``): a
span's window, or the windows of one step of every rank merged, cut from the files and
encoded there, so that TensorBoard's own process receives the answer's bytes only.

Each file is opened under the rule a load opens it under (``trace/confine.py``: inside
its log directory, the very file discovery listed). The functions are module-level (a
worker unpickles them by name) and raise what the cut raises
(:class:`~tb_kineto_insights.trace.errors.TraceError`: the call's outcome is then of
kind ``trace`` or ``io``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import msgspec

from tb_kineto_insights.trace.confine import Rule, confined
from tb_kineto_insights.trace.window import WindowCut, check_window_holds_events, cut_window
from tb_kineto_insights.trace.window_merge import merge_windows

__all__ = ["CutFile", "WindowBody", "cut_one", "cut_ranks"]


@dataclass(frozen=True)
class CutFile:
    """One file's window: ``path`` opened under ``root`` and ``file_identity`` (the
    load's rule; ``root`` ``""``: none), the window ``[start_ns, end_ns)``, and for the
    message of a window that holds no event, the name shown (``shown``), the step and
    its start (ns)."""

    path: str
    root: str
    file_identity: tuple[int, int, int, int] | None
    start_ns: int
    end_ns: int
    shown: str
    step: int
    step_start_ns: int


@dataclass(frozen=True)
class WindowBody:
    """A cut window as the plugin sends it: the trace's JSON (``body``), the window
    (ns), the events moved to sibling tracks, and for merged ranks the ranks merged."""

    body: bytes
    start_ns: int
    end_ns: int
    moved: int = 0
    ranks: list[str] = field(default_factory=list)


def _cut(part: CutFile) -> WindowCut:
    opened = (
        confined(part.path, Rule(part.root, part.file_identity))
        if part.root
        else contextlib.nullcontext()
    )
    with opened:
        return cut_window(part.path, part.start_ns, part.end_ns)


def cut_one(part: CutFile) -> WindowBody:
    """One span's window (a window that holds no event is refused).

    Raises:
        TraceError: the file cannot be cut, or the window holds no event (the message
            says where the trace's events lie).
    """
    cut = _cut(part)
    check_window_holds_events(cut, part.shown, part.step_start_ns, part.step)
    body = msgspec.json.encode(cut.document)
    return WindowBody(body, cut.start_ns, cut.end_ns, cut.moved)


def cut_ranks(parts: list[tuple[str, CutFile]]) -> WindowBody:
    """The windows of ``parts`` (``(rank label, file)``, in rank order) merged into one
    trace (``trace/window_merge.py``); refused when no rank's window holds an event (one
    quiet rank is merged as it is).

    Raises:
        TraceError: as :func:`cut_one`.
    """
    cuts = [(label, _cut(part)) for label, part in parts]
    if not any(cut.timed for _, cut in cuts):
        first = parts[0][1]
        check_window_holds_events(cuts[0][1], first.shown, first.step_start_ns, first.step)
    body = msgspec.json.encode(merge_windows(cuts))
    first_cut = cuts[0][1]
    return WindowBody(body, first_cut.start_ns, first_cut.end_ns, ranks=[n for n, _ in parts])
