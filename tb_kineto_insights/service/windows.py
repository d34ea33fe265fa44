"""A step's timeline and windows cut from the trace, as the plugin serves them and the
``window`` command writes them.

A step's timeline comes from the span's stored per-step timelines (the cache entry's
``timeline``, :mod:`~tb_kineto_insights.analysis.timeline_format`), loaded as its summary
is. A window is cut from the file itself (:mod:`~tb_kineto_insights.trace.window`): the
step window with 10 % of its length on each side, or ``[start_us, end_us)`` µs after its
start, the file opened under the same rule as a load (inside the log directory, the file
discovery listed). "Open ranks" cuts the same step of every worker of a run and merges
the windows into one trace.

The command line cuts from trace files it is given (:func:`cut_file_windows`): the step
window found by reading the file once (the read also notes where the events lie,
:class:`~tb_kineto_insights.trace.window.WindowIndex`, and the cut reads back only the
pieces of the JSON that meet the window), each file's own.
"""

from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass, field

import msgspec

from tb_kineto_insights.analysis.timeline_format import decode_store, find_step, load_step
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.logdir.discovery import Span
from tb_kineto_insights.schema.timeline import TimelineStep
from tb_kineto_insights.service.errors import Damaged, InvalidRequest, NotFound, Unreadable
from tb_kineto_insights.service.loader import SpanStatus
from tb_kineto_insights.service.output_files import local_file, same_file, write_output
from tb_kineto_insights.service.workspace import Workspace
from tb_kineto_insights.trace.confine import Rule, confined
from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES, BlockReader
from tb_kineto_insights.trace.window import (
    WindowCut,
    WindowIndex,
    check_offset_us,
    check_window_holds_events,
    cut_window,
    window_bounds,
)
from tb_kineto_insights.trace.window import parse_offset_us as parse_offset_us
from tb_kineto_insights.trace.window_merge import merge_windows


@dataclass(frozen=True)
class NotReady:
    """A span that is not loaded: its status (queued, loading, or its load's error)."""

    status: SpanStatus


def step_timeline(
    workspace: Workspace, span: Span, step: int, wait_s: float
) -> TimelineStep | NotReady:
    """The :class:`TimelineStep` of ``ProfilerStep#step`` from the span's stored
    timelines, loaded as its summary (waiting up to ``wait_s``); else the span's status.

    Raises:
        NotFound: the span has no such step (the message lists its steps), or was stored
            without timelines.
        Damaged: the stored timelines cannot be read.
    """
    status, result = workspace.load(span, wait_s)
    if result is None or result.summary is None:
        return NotReady(status)
    if result.timeline is None:
        raise NotFound("no timeline is stored for this span (summarised without one)")
    try:
        store = decode_store(result.timeline)
        position = find_step(store, step)
        if position is None:
            steps = ", ".join(str(n) for n in store.steps)
            raise NotFound(f"no step {step} in this span; its steps: {steps}")
        return load_step(store, position)
    except (ValueError, zlib.error) as exc:  # a damaged store: a bug or a bad disk
        raise Damaged(f"the stored timeline of this span is damaged ({exc})") from exc


def cut_span_window(
    workspace: Workspace,
    span: Span,
    doc: TimelineStep,
    start_us: float | None,
    end_us: float | None,
    require_events: bool = True,
) -> WindowCut:
    """The window of ``doc``'s step (± 10 %, or ``start_us``/``end_us`` µs after its
    start) cut from ``span``'s file, opened under the same rule as a load.

    Raises:
        InvalidRequest: one of ``start_us``/``end_us`` alone, or an empty range.
        Unreadable: the file cannot be cut, or (with ``require_events``) the window
            holds no event (the message says where the trace's events lie).
    """
    step_ns = round(doc.duration_us * 1000)
    window = window_bounds(doc.trace_start_ns, step_ns, start_us, end_us)
    if window is None and start_us is not None and end_us is not None:
        raise InvalidRequest(f"end_us {end_us:g} is not after start_us {start_us:g}")
    if window is None:
        raise InvalidRequest("give both start_us and end_us (end after start), or neither")
    ident = workspace.request_identity(span)
    try:
        if ident.root:
            with confined(ident.path, Rule(ident.root, ident.file_identity())):
                cut = cut_window(ident.path, *window)
        else:
            cut = cut_window(ident.path, *window)
        if require_events:
            check_window_holds_events(cut, span.path, doc.trace_start_ns, doc.step)
    except TraceError as exc:
        raise Unreadable(str(exc)) from exc
    return cut


@dataclass
class RanksWindow:
    """ "Open ranks": the merged trace (``document``), the workers merged, in rank order
    (``ranks``) and those without the step (``missing``); or ``not_ready``, the status
    of a worker still loading (or whose load failed)."""

    document: dict[str, object] | None = None
    ranks: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    not_ready: NotReady | None = None


def ranks_window(
    workspace: Workspace,
    run_name: str,
    step: int,
    start_us: float | None,
    end_us: float | None,
    wait_s: float,
) -> RanksWindow:
    """Step ``step``'s window of every worker (rank) of run ``run_name``, each its last
    span's, cut as :func:`cut_span_window` cuts one and merged into one trace
    (:func:`~tb_kineto_insights.trace.window_merge.merge_windows`: each rank's processes
    named after its worker). A worker without that step is left out and named in
    ``missing``.

    Raises:
        NotFound: no such run, or no worker has that step.
        InvalidRequest, Unreadable: as :func:`cut_span_window`; Unreadable also when no
            rank's window holds an event.
    """
    run = workspace.run(run_name)
    parts: list[tuple[str, WindowCut]] = []
    first: tuple[Span, TimelineStep] | None = None
    missing: list[str] = []
    for worker in run.workers:
        if not worker.spans:
            continue
        span = worker.spans[-1]
        try:
            doc = step_timeline(workspace, span, step, wait_s)
        except NotFound:
            missing.append(worker.name)
            continue
        if isinstance(doc, NotReady):
            return RanksWindow(not_ready=doc)  # still loading, or the load's error
        parts.append((worker.name, cut_span_window(workspace, span, doc, start_us, end_us, False)))
        first = first or (span, doc)
    if not parts or first is None:
        raise NotFound(f"no worker of run {run.name!r} has that step")
    if not any(cut.timed for _, cut in parts):  # one rank may be quiet; all: refuse
        try:
            check_window_holds_events(
                parts[0][1], first[0].path, first[1].trace_start_ns, first[1].step
            )
        except TraceError as exc:
            raise Unreadable(str(exc)) from exc
    return RanksWindow(merge_windows(parts), [n for n, _ in parts], missing)


# --------------------------------------------------------------------------- files


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


def check_window_paths(paths: list[str], out_path: str) -> None:
    """Refuse what would lose data or merge a rank with itself, before any file is read:
    a trace given twice (the same file by any name), and an ``--out`` that is one of the
    traces (it would be replaced by its own cut) or a directory. Names are compared as
    the files they name (``service/output_files.py``: ``(st_dev, st_ino)`` of a local
    file, whatever path, link or ``file://``/``local://`` URL names it).

    Raises:
        ValueError: the message names the duplicate trace or ``--out`` and the problem.
    """
    for i, path in enumerate(paths):
        for other in paths[:i]:
            if path == other or same_file(path, other):
                raise ValueError(
                    f"{path}: the same trace file is given twice (also as {other}); "
                    "give each rank's file once"
                )
    out_local = local_file(out_path)
    if out_local is not None and os.path.isdir(out_local):
        raise ValueError(f"--out {out_path}: is a directory; give a file name (.json or .json.gz)")
    for path in paths:
        if same_file(out_path, path):
            raise ValueError(
                f"--out {out_path}: is the input trace {path}; writing the window there "
                "would overwrite the trace: give another file name"
            )


def window_file_bytes(document: dict[str, object], out_path: str) -> bytes:
    """A cut (or merged) trace document as the bytes of ``out_path``: JSON, gzip-compressed
    when the name ends with ``.gz``."""
    data = msgspec.json.encode(document)
    return gzip.compress(data, compresslevel=6) if out_path.endswith(".gz") else data


def write_window_file(document: dict[str, object], out_path: str) -> int:
    """Write a cut trace document to ``out_path`` (a path or URL) atomically
    (:func:`~.output_files.write_output`: the older file stays when it cannot be
    written); returns the bytes written.

    Raises:
        OSError: it cannot be written.
    """
    data = window_file_bytes(document, out_path)
    write_output(out_path, data)
    return len(data)


def cut_file_windows(
    paths: list[str],
    step: int,
    start_us: float | None,
    end_us: float | None,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
) -> list[tuple[str, WindowCut]]:
    """Step ``step``'s window of each trace file (the ranks of a run, or one), each its
    own step window, labelled by its rank (:func:`rank_label`). The paths are checked
    first by the caller (:func:`check_window_paths`: no file given twice).

    Raises:
        TraceError: a file cannot be read or has no such step, or no file's window holds
            an event (one quiet rank is merged as it is).
        ValueError: as :func:`window_of_step`.
    """
    cuts: list[tuple[str, WindowCut]] = []
    starts: list[int] = []
    for path in paths:
        cut, step_start_ns = _cut_step(path, step, start_us, end_us, max_json_bytes)
        worker = os.path.basename(path).split(".")[0] or path
        cuts.append((rank_label(path, cut.document, worker), cut))
        starts.append(step_start_ns)
    if not any(cut.timed for _, cut in cuts):  # one rank may be quiet; all: refuse
        check_window_holds_events(cuts[0][1], paths[0], starts[0], step)
    return cuts
