"""What a trace lost to damage: a file cut short, and which panels' input went with it.

Kineto writes a trace in this order: the CPU side (ops, annotations, runtime calls,
``[memory]`` events, ``ProfilerStep#N`` markers), then the GPU activities (kernels,
copies, memsets), then ``deviceProperties`` / ``distributedInfo``. A file cut short (a
job killed while writing, a copy still in progress) therefore keeps its first events and
loses the rest, and the reader's damage report (``health.damage``) says at which byte the
readable JSON ends.

Definitions (:func:`lost_data`):

* ``file_ends_at_byte``: the offset of the first damaged region that ends the file
  (``file ends early``, ``gzip stream ends early``, ``corrupt gzip``; a bad CRC or length
  at the very end lost nothing and does not count); ``None`` when the file is whole;
* ``launches`` / ``launches_without_gpu_event``: runtime launch calls (kernel, copy,
  memset launches with a correlation id) and those whose GPU event is not in the trace;
* ``gpu_events_set_aside``: GPU events that were read from a file cut inside its GPU
  section but cover no step whole (the cut fell in the first step's GPU work, so every
  step lost some of it: ``analysis.trace_index.build_index`` sets them aside; a step's GPU
  numbers read from part of its work would call the rest idle);
* ``gpu_events_lost``: the file ends early, not one usable GPU event survived (none was
  read, or those read were set aside), and the trace was recorded with a GPU (launch
  calls, ``deviceProperties`` or a ``cupti_version`` in the header): every panel built
  on GPU events (kernels, idle, utilization) has no input, and says so instead of "not
  recorded";
* ``incomplete_steps``: with a cut file that kept no GPU event, every step: the cut lies
  in the host section, whose events Kineto does not write in time order (CPU ops,
  ``[memory]`` events and step markers interleave), so no step can be shown complete and
  per-step memory levels (growth, leak) must not be judged. A cut inside the GPU section
  leaves the host section whole; the steps whose GPU work it lost are left out already
  (``health.steps_without_gpu_data``), or, when that is every step, the GPU events are
  set aside;
* ``lost``: what is missing, in words, for Trace health.
"""

from __future__ import annotations

import numpy as np

from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.trace_index import GPU_WORK_KINDS, TraceIndex
from tb_kineto_insights.schema.health import LostData
from tb_kineto_insights.trace import model as m

_ENDS = ("file ends early", "gzip stream ends early", "corrupt gzip")


def file_ends_at_byte(index: TraceIndex) -> int | None:
    """Offset at which the readable JSON ends, when the file was cut short (module
    docstring), else ``None``."""
    for d in index.trace.health.damage:
        problem = str(d.get("problem", ""))
        if problem.startswith(_ENDS) and "check" not in problem:
            return int(d["offset"])
    return None


def where_file_ends(
    end: int, *, compressed: bool, file_bytes: int, corrupt: bool, gzip_whole: bool = False
) -> str:
    """Where a file cut short ends, in words (lower case), saying which bytes count.

    Args:
        end: ``file_ends_at_byte``, a byte of the *inflated* JSON for gzip.
        compressed: the file is gzip (``health.compressed``).
        file_bytes: the stored file's size (``health.file_bytes``).
        corrupt: the gzip data is corrupt (not merely cut short).
        gzip_whole: the gzip data is whole (it ends where it should, ``gzip -t``
            passes): the JSON was cut before it was compressed.

    Returns:
        ``"the file ends at byte N"`` for plain JSON; for gzip ``"the gzip file ends at
        byte F (compressed; its JSON breaks at byte N, inflated)"`` when the stream ends
        early, ``"the gzip data is corrupt (its JSON breaks at byte N, inflated; the
        compressed file has F bytes)"`` when it is corrupt, ``"the JSON inside the gzip
        file ends early, at byte N (inflated; the gzip data itself is whole)"`` when
        ``gzip_whole``. (An inflated offset given as the file's byte would point past
        the end of a cut file, and a whole gzip does not "end at byte F": the words
        say which bytes count.)
    """
    if not compressed:
        return f"the file ends at byte {end:,}"
    if gzip_whole:
        return (
            f"the JSON inside the gzip file ends early, at byte {end:,} (inflated; "
            "the gzip data itself is whole)"
        )
    if corrupt:
        return (
            f"the gzip data is corrupt (its JSON breaks at byte {end:,}, inflated; "
            f"the compressed file has {file_bytes:,} bytes)"
        )
    return (
        f"the gzip file ends at byte {file_bytes:,} (compressed; its JSON breaks "
        f"at byte {end:,}, inflated)"
    )


def _where(index: TraceIndex, end: int) -> str:
    """:func:`where_file_ends` for the trace of ``index``."""
    health = index.trace.health
    corrupt = any(
        str(d.get("problem", "")).startswith("corrupt gzip") and int(d.get("offset", -1)) == end
        for d in health.damage
    )
    stream_ended = any(
        str(d.get("problem", "")).startswith(("gzip stream ends early", "corrupt gzip"))
        for d in health.damage
    )
    return where_file_ends(
        end,
        compressed=health.compressed,
        file_bytes=health.file_bytes,
        corrupt=corrupt,
        gzip_whole=not stream_ended,
    )


def lost_data(index: TraceIndex) -> LostData:
    """:class:`~tb_kineto_insights.schema.health.LostData` of the trace (module
    docstring)."""
    trace = index.trace
    end = file_ends_at_byte(index)
    rt = trace.runtime
    launch = index.rows_where(m.RUNTIME, nm.is_launch) & (rt.correlation >= 0)
    linked = np.zeros(len(rt), dtype=np.bool_)
    gpu_events = 0
    for kind in GPU_WORK_KINDS:
        rows = index.launch_row[kind]
        gpu_events += int(rows.size)
        linked[rows[rows >= 0]] = True
    launches = int(launch.sum())
    orphan = int((launch & ~linked).sum())
    health = trace.health
    recorded_gpu = (
        launches > 0 or bool(health.device_properties) or "cupti_version" in health.metadata
    )
    set_aside = index.gpu_events_set_aside
    gpu_lost = end is not None and gpu_events == 0 and recorded_gpu
    incomplete: list[int] = []
    if end is not None and gpu_events == 0 and not set_aside and index.steps.has_markers:
        incomplete = [int(n) for n in index.steps.number]
    lost: list[str] = []
    if end is not None:
        lost.append(f"every event written after byte {end:,}")
        if gpu_lost and set_aside:
            lost.append(
                f"part of the GPU events of every step: the {set_aside} read cover no "
                "step whole and are not used"
            )
        elif gpu_lost:
            lost.append(f"all GPU events ({_launches_words(launches)})")
        elif orphan:
            lost.append(f"the GPU events of {orphan} of {launches} launch calls")
        if not index.steps.has_markers:
            lost.append("the ProfilerStep markers")
        if not health.device_properties:
            lost.append("deviceProperties (written after the events)")
        if incomplete:
            lost.append(
                "the host events of step(s) "
                + ", ".join(f"#{n}" for n in incomplete)
                + " after the cut"
            )
    return LostData(
        file_ends_at_byte=end,
        launches=launches,
        launches_without_gpu_event=orphan,
        gpu_events_set_aside=set_aside,
        gpu_events_lost=gpu_lost,
        incomplete_steps=incomplete,
        lost=lost,
    )


def file_end_note(index: TraceIndex, end: int) -> str:
    """``"the file ends at byte N"`` or its gzip form (:func:`where_file_ends`) for the
    trace of ``index``."""
    return _where(index, end)


def gpu_lost_note(index: TraceIndex) -> str | None:
    """The note a panel built on GPU events shows when they were all lost to a cut file
    (``"GPU events lost: the file ends at byte N …"``), else ``None``."""
    found = lost_data(index)
    if not found.gpu_events_lost or found.file_ends_at_byte is None:
        return None
    if found.gpu_events_set_aside:
        return (
            f"GPU events lost: the file ends at byte {found.file_ends_at_byte:,}, inside "
            f"its GPU events, and every step lost some of them (the "
            f"{found.gpu_events_set_aside} read are not used; see Trace health)"
        )
    return (
        f"GPU events lost: {_where(index, found.file_ends_at_byte)}, before its "
        f"GPU events ({_launches_words(found.launches)}; see Trace health)"
    )


def _launches_words(launches: int) -> str:
    if launches:
        return f"{launches} launch calls have no kernel, copy or memset"
    return "the launch calls were cut off too"
