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

import dataclasses
import gzip
import os
import zlib
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tb_kineto_insights.analysis.timeline_format import decode_store, find_step, load_step
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.logdir.discovery import EMPTY_PATHS, Span, broken_link, is_broken_link
from tb_kineto_insights.schema.timeline import TimelineStep
from tb_kineto_insights.service.errors import Busy, Damaged, InvalidRequest, NotFound, Unreadable
from tb_kineto_insights.service.loader import SpanStatus
from tb_kineto_insights.service.output_files import local_file, same_file, write_output
from tb_kineto_insights.service.window_cuts import CutFile, WindowBody, cut_one, cut_ranks
from tb_kineto_insights.service.worker_pool import (
    ERROR_IO,
    ERROR_MEMORY,
    ERROR_TIMEOUT,
    ERROR_TRACE,
    ERROR_WORKER,
)
from tb_kineto_insights.service.workspace import Workspace
from tb_kineto_insights.store.cache import Identity
from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES, BlockReader
from tb_kineto_insights.trace.window import (
    WindowCut,
    WindowIndex,
    check_offset_us,
    check_window_holds_events,
    window_bounds,
)
from tb_kineto_insights.trace.window import parse_offset_us as parse_offset_us


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
            raise NotFound(f"no step {step} in this span; its step numbers: {steps}")
        return load_step(store, position)
    except (ValueError, zlib.error) as exc:  # a damaged store: a bug or a bad disk
        raise Damaged(f"the stored timeline of this span is damaged ({exc})") from exc


def _cut_file(
    workspace: Workspace,
    span: Span,
    doc: TimelineStep,
    start_us: float | None,
    end_us: float | None,
) -> tuple[Identity, CutFile]:
    """The file of ``span`` and the window of ``doc``'s step (± 10 %, or
    ``start_us``/``end_us`` µs after its start) to cut from it, opened under the same
    rule as a load.

    Raises:
        InvalidRequest: one of ``start_us``/``end_us`` alone, or an empty range.
    """
    step_ns = round(doc.duration_us * 1000)
    window = window_bounds(doc.trace_start_ns, step_ns, start_us, end_us)
    if window is None and start_us is not None and end_us is not None:
        raise InvalidRequest(f"end_us {end_us:g} is not after start_us {start_us:g}")
    if window is None:
        raise InvalidRequest("give both start_us and end_us (end after start), or neither")
    ident = workspace.request_identity(span)
    part = CutFile(
        ident.path,
        ident.root,
        ident.file_identity(),
        window[0],
        window[1],
        span.path,
        doc.step,
        doc.trace_start_ns,
    )
    return ident, part


def _in_worker(workspace: Workspace, ident: Identity, call: Any, args: tuple[Any, ...]) -> Any:
    """``call(*args)`` run as a load of ``ident`` runs (``SummaryLoader.run_call``: a
    worker process, the load's deadline and memory cap); its value.

    Raises:
        Unreadable: the file cannot be cut (its error).
        Busy: past the deadline or the memory cap, or the worker died.
        RuntimeError: a bug (its message), which the plugin answers with a 500.
    """
    outcome = workspace.loader.run_call(ident, call, args, "window's cut")
    if outcome.kind is None:
        return outcome.value
    message = outcome.message or "the window could not be cut"
    if outcome.kind in (ERROR_TRACE, ERROR_IO):
        raise Unreadable(message)
    if outcome.kind in (ERROR_TIMEOUT, ERROR_MEMORY, ERROR_WORKER):
        raise Busy(message)
    raise RuntimeError(message)


def span_window(
    workspace: Workspace,
    span: Span,
    step: int,
    start_us: float | None,
    end_us: float | None,
    wait_s: float,
) -> WindowBody | NotReady:
    """``/window``: step ``step``'s window (± 10 %, or ``start_us``/``end_us`` µs after
    its start) cut from ``span``'s file in a worker process (a load's deadline and memory
    cap), made once for every request asking the same at the same time and kept while
    the file does not change (``workspace.answers``); the span's status while it is not
    loaded (the step window comes from its stored timeline).

    Raises:
        NotFound, Damaged: as :func:`step_timeline`.
        InvalidRequest: one of ``start_us``/``end_us`` alone, or an empty range.
        Unreadable: the file cannot be cut, or the window holds no event (the message
            says where the trace's events lie).
        Busy: the cut passed its deadline or memory cap (503).
    """
    ident = workspace.request_identity(span)

    def make() -> tuple[WindowBody | NotReady, int | None]:
        doc = step_timeline(workspace, span, step, wait_s)
        if isinstance(doc, NotReady):
            return doc, None
        _, part = _cut_file(workspace, span, doc, start_us, end_us)
        body: WindowBody = _in_worker(workspace, ident, cut_one, (part,))
        return body, len(body.body)

    return workspace.answers.get(("window", ident, step, start_us, end_us), make, heavy=False)


@dataclass
class RanksWindow:
    """ "Open ranks": the merged trace (``window``: its JSON, the ranks merged in rank
    order) and the workers without the step (``missing``)."""

    window: WindowBody
    missing: list[str] = field(default_factory=list)


def ranks_window(
    workspace: Workspace,
    run_name: str,
    step: int,
    start_us: float | None,
    end_us: float | None,
    wait_s: float,
) -> RanksWindow | NotReady:
    """Step ``step``'s window of every worker (rank) of run ``run_name``, each its last
    span's (the status of one still loading, or whose load failed), cut and merged into
    one trace in a worker process (``window_cuts.cut_ranks``: each rank's processes
    named after its worker), once for concurrent requests. A worker without that step is
    left out and named in ``missing``.

    Raises:
        NotFound: no such run, or no worker has that step.
        InvalidRequest, Unreadable, Busy: as :func:`span_window`; Unreadable also when
            no rank's window holds an event.
    """
    run = workspace.run(run_name)
    spans = [worker.spans[-1] for worker in run.workers if worker.spans]
    idents = tuple(workspace.request_identity(span) for span in spans)

    def make() -> tuple[RanksWindow | NotReady, int | None]:
        parts: list[tuple[str, CutFile]] = []
        missing: list[str] = []
        for span in spans:
            try:
                doc = step_timeline(workspace, span, step, wait_s)
            except NotFound:
                missing.append(span.worker)
                continue
            if isinstance(doc, NotReady):
                return doc, None  # still loading, or its load's error
            parts.append((span.worker, _cut_file(workspace, span, doc, start_us, end_us)[1]))
        if not parts:
            raise NotFound(f"no worker of run {run.name!r} has that step")
        first = next(i for i in idents if i.path == parts[0][1].path)
        total = dataclasses.replace(first, size_bytes=sum(i.size_bytes for i in idents))
        body: WindowBody = _in_worker(workspace, total, cut_ranks, (parts,))
        return RanksWindow(body, missing), len(body.body)

    key = ("window_ranks", run.name, idents, step, start_us, end_us)
    return workspace.answers.get(key, make, heavy=False)


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
        raise TraceError(path, f"no step {step}; its step numbers: {listed}")
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
        ValueError: the message names the duplicate trace or ``--out`` and the problem;
            also for an empty or blank name (:data:`~.discovery.EMPTY_PATHS`: ``''``
            was "file not found", ``file://`` read the working folder, ``' '`` wrote a
            file named so) and a trace that is a broken symbolic link.
    """
    for path in paths:
        if path.strip() in EMPTY_PATHS:
            raise ValueError(f"trace {path!r}: an empty path: name a trace file")
        local = local_file(path)
        if local is not None and is_broken_link(local):
            raise ValueError(f"{path}: is {broken_link(local)}")
    if out_path.strip() in EMPTY_PATHS:
        raise ValueError(f"--out {out_path!r}: an empty path: name the file to write")
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
