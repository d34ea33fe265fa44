"""Shape of one step's timeline (``/timeline``): filled by
``analysis.timeline.step_timelines``, stored per step in the cache beside the summary
(:class:`TimelineStore`).

Columnar: a lane's events are parallel arrays of equal length, names interned in the
step's ``names``, classes in its ``classes``. Times of events are ``offset_us``: µs after
the step window's start (``TimelineStep.start_us``), negative for a host range that began
before it.
"""

from __future__ import annotations

import msgspec

from tb_kineto_insights.schema._base import Out


class TimelineLane(Out, frozen=True, kw_only=True):
    """One lane: a GPU stream (``kind`` ``gpu_stream``: ``device``, ``stream``), a host
    thread that launches GPU work (``host_thread``: ``pid``, ``tid``), a thread that only
    loads data (``dataloader_thread``), a device's idle band (``idle``: ``device``;
    class = the idle cause, as in ``summary.idle``), or the Python frames of a
    ``host_thread`` (``python_frames``: ``pid``, ``tid``; only when the trace has
    ``python_function`` events: per event the thread's innermost user frame, as
    ``analysis.python_frames`` folds library frames, class ``python_frame``), or the
    steady step's critical path (``critical_path``: the pieces of
    ``summary.critical_path``, disjoint, class ``path:<class>`` with ``host`` for a run
    of host events, a GPU piece named by its kernel; none in a left-out window).

    Columns, all of length n: ``name`` (index into ``TimelineStep.names``; -1 for a
    merged block of several names), ``offset_us``, ``dur_us``, ``event_class`` (index into
    ``TimelineStep.classes``), ``count`` (1 for an event; the number of events a merged
    block stands for), ``correlation`` (kernel ↔ runtime call id, -1 when none or a
    block), ``depth`` (host lanes: 0 a top-level op, 1 an op inside it, 2 a runtime call;
    0 elsewhere)."""

    kind: str
    label: str
    device: int | None = None
    stream: int | None = None
    pid: int | None = None
    tid: int | None = None
    name: list[int]
    offset_us: list[float]
    dur_us: list[float]
    event_class: list[int]
    count: list[int]
    correlation: list[int]
    depth: list[int]
    shape: list[int] = msgspec.field(default_factory=list)


class TimelineStep(Out, frozen=True, kw_only=True):
    """The timeline of one step window (``analysis.step_windows``' windows: the ones every
    per-step figure uses, and those left out of them): ``step`` (N of
    ``ProfilerStep#N``; 0 for the pseudo-step),
    ``start_us`` / ``end_us`` (µs from the trace's origin, as ``idle.largest_gaps[].
    start_us``), ``trace_start_ns`` (the window's start on the trace's own clock, ns: the
    file's ``ts`` × 1000, what Perfetto UI's ``visStart`` takes), ``duration_us``;
    ``kernel_count`` (the kernels whose start lies in the
    window: ``kernels.per_step[].count``), ``idle_us`` per device (the idle band's total:
    ``idle.devices[].per_step[].idle_us``), ``names``, ``classes`` and ``shapes`` (the interned
    strings the lanes index), ``block_us`` (merged blocks: runs of events each shorter
    than this, see ``Thresholds.timeline_block_us``; 0 when nothing was merged), and the
    ``lanes``: GPU streams, host threads, data-loading threads, idle bands;
    ``left_out``: why this window is not a steady-state step (``summary.steps.left_out
    [].reason``: its events are shown, its figures counted nowhere), None for a
    steady-state step."""

    step: int
    start_us: float
    end_us: float
    trace_start_ns: int
    duration_us: float
    kernel_count: int
    idle_us: dict[str, float]
    names: list[str]
    classes: list[str]
    block_us: float
    lanes: list[TimelineLane]
    shapes: list[str] = msgspec.field(default_factory=list)
    left_out: str | None = None


class TimelineStore(Out, frozen=True, kw_only=True):
    """What the cache keeps beside a summary: per step (``steps``: the step numbers, in
    window order), its :class:`TimelineStep` packed and zlib-compressed (``blobs``), so
    that one step is served without decoding the others; ``names``: the event names
    every step refers to, interned once for the whole trace (zlib-compressed msgpack
    list of strings; empty for a store without steps); ``shapes``: the ops' input shapes
    the steps refer to, likewise."""

    steps: list[int]
    blobs: list[bytes] = msgspec.field(default_factory=list)
    names: bytes = b""
    shapes: bytes = b""
