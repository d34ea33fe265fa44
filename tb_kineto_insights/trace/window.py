"""A window of a trace file, cut from the file itself, for Perfetto UI or chrome://tracing.

:func:`cut_window` keeps, as they are in the file, every event of the window
``[start_ns, end_ns)`` on the trace's own clock:

* complete events (``ph`` ``X``) that overlap it (``ts < end`` and ``ts + dur > start``;
  a zero-length one when its ``ts`` lies in the window);
* every other event with a ``ts`` in the window (instants, counters, ``[memory]``
  events, flow ends, ``B``/``E`` halves);
* every metadata event (``ph`` ``M``: process and thread names, sort indices), and every
  top-level key other than ``traceEvents`` (``deviceProperties``, ``distributedInfo``,
  ``baseTimeNanoseconds``, …).

Partial overlaps: on one (pid, tid) track, complete events must nest; Perfetto's JSON
importer drops an event that starts inside another and ends after it (google/perfetto
#4280: kernels missing from PyTorch traces; ``with_stack=True`` traces have such
overlaps). So the kept complete events of each track are laid out, in order of start
(longer first on a tie), on the track itself or on sibling tracks: an event goes on the
first of them where it nests (the ranges still open there at its start all end at or
after its end). A sibling track gets a new integer ``tid`` (above every tid of the file)
and a ``thread_name`` that says so: ``"<name> (partially overlapping events, moved from
tid <tid>)"``. No event is dropped or changed but for its ``tid``.

Timestamps are compared exactly, in integer ns parsed from the JSON text (a float µs
near 1.8e15 cannot hold the ns digits).
"""

from __future__ import annotations

import gzip
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

from tb_kineto_insights.trace.errors import TraceFormatError
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES, BlockReader


class _Root(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = msgspec.field(default_factory=list)  # noqa: N815


class _Head(msgspec.Struct):
    """The fields of an event the cut needs; the rest stays in the raw text."""

    ph: Any = ""
    ts: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    dur: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    pid: Any = None
    tid: Any = None
    cat: Any = None
    name: Any = None


_ROOT = msgspec.json.Decoder(_Root)
_HEAD = msgspec.json.Decoder(_Head)
_OTHER_KEYS = msgspec.json.Decoder(dict[str, msgspec.Raw])

#: Categories of GPU kernels (Kineto's old and new names).
KERNEL_CATEGORIES = frozenset({"kernel", "Kernel"})


def ns_of(raw: msgspec.Raw) -> int | None:
    """A JSON number of µs (the text of ``ts`` or ``dur``) as integer ns, exact for
    decimals; None when absent (``null``) or not a finite number (``"N/A"``, ``NaN``)."""
    text = bytes(raw).strip().strip(b'"')
    try:
        value = Decimal(text.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError):
        return None
    if not value.is_finite():
        return None
    return int((value * 1000).to_integral_value())


@dataclass
class WindowCut:
    """What :func:`cut_window` produced.

    Attributes:
        document: the cut trace as built-ins and raw event texts (write it with
            :func:`write_window`): ``{"traceEvents": [...], <other top-level keys>}``.
        start_ns, end_ns: the window on the trace's clock (ns).
        events: events kept (metadata included; sibling-track names not counted).
        kernels: kernel events kept (``cat`` ``kernel``/``Kernel``).
        moved: complete events moved to a sibling track.
        sibling_tracks: ``(pid, tid, new tid)`` of each sibling track made.
    """

    document: dict[str, Any]
    start_ns: int
    end_ns: int
    events: int = 0
    kernels: int = 0
    moved: int = 0
    sibling_tracks: list[tuple[Any, Any, int]] = field(default_factory=list)


#: Share of the step window added on each side of a default window.
DEFAULT_MARGIN_FRACTION = 0.10


def window_bounds(
    step_start_ns: int, step_ns: int, start_us: float | None, end_us: float | None
) -> tuple[int, int] | None:
    """The window to cut, ns on the trace's clock, for a step window starting at
    ``step_start_ns`` and ``step_ns`` long: ``[start_us, end_us)`` µs after its start
    when both are given, else the step with :data:`DEFAULT_MARGIN_FRACTION` of its
    length on each side. None when only one of them is given, or ``end_us <= start_us``."""
    if start_us is None and end_us is None:
        margin = int(step_ns * DEFAULT_MARGIN_FRACTION)
        return step_start_ns - margin, step_start_ns + step_ns + margin
    if start_us is None or end_us is None or end_us <= start_us:
        return None
    return step_start_ns + round(start_us * 1000), step_start_ns + round(end_us * 1000)


def _key(value: Any) -> Any:
    """A pid or tid as a dict key (lists and dicts, which no trace should have, as
    their JSON text)."""
    return value if isinstance(value, (int, float, str)) or value is None else repr(value)


def _read_bytes(path: str, max_json_bytes: int) -> bytes:
    reader = BlockReader(path, max_json_bytes)
    data = b"".join(reader)
    if reader.stream_damage is not None:
        offset, problem = reader.stream_damage
        raise TraceFormatError(path, f"cannot cut a window of a damaged file: {problem}", offset)
    return data


def cut_window(
    path: str, start_ns: int, end_ns: int, *, max_json_bytes: int = DEFAULT_MAX_JSON_BYTES
) -> WindowCut:
    """The events of ``[start_ns, end_ns)`` (ns on the trace's clock) of the trace file
    ``path``, partial overlaps moved to sibling tracks (module docstring).

    Raises:
        TraceIOError: the file cannot be opened or read.
        TraceTooLargeError: its JSON is larger than ``max_json_bytes``.
        TraceFormatError: not a JSON trace (object with ``traceEvents``, or an array of
            events), damaged (truncated gzip, a malformed event), or an empty window.
    """
    if end_ns <= start_ns:
        raise TraceFormatError(path, f"empty window [{start_ns}, {end_ns}) ns")
    data = _read_bytes(path, max_json_bytes)
    try:
        if data.lstrip()[:1] == b"[":
            events = msgspec.json.decode(data, type=list[msgspec.Raw])
            others: dict[str, msgspec.Raw] = {}
        else:
            events = _ROOT.decode(data).traceEvents
            others = {k: v for k, v in _OTHER_KEYS.decode(data).items() if k != "traceEvents"}
    except msgspec.DecodeError as exc:
        raise TraceFormatError(path, f"not a readable JSON trace ({exc})") from exc
    except msgspec.ValidationError as exc:
        raise TraceFormatError(path, f"not a Kineto trace ({exc})") from exc
    kept: list[msgspec.Raw | dict[str, Any]] = []
    complete: dict[tuple[Any, Any], list[tuple[int, int, int]]] = defaultdict(list)
    thread_names: dict[tuple[Any, Any], str] = {}
    max_tid = 0
    kernels = 0
    for raw in events:
        try:
            head = _HEAD.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue  # an event the reader would skip too (not an object, odd types)
        if isinstance(head.tid, int) and not isinstance(head.tid, bool):
            max_tid = max(max_tid, head.tid)
        if head.ph == "M":
            kept.append(raw)
            if head.name == "thread_name":
                label = msgspec.json.decode(raw).get("args", {}).get("name")
                if isinstance(label, str):
                    thread_names[(_key(head.pid), _key(head.tid))] = label
            continue
        ts = ns_of(head.ts)
        if ts is None:
            continue
        if head.ph == "X":
            dur = max(0, ns_of(head.dur) or 0)
            inside = ts < end_ns and (ts + dur > start_ns or (dur == 0 and ts >= start_ns))
            if not inside:
                continue
            complete[(_key(head.pid), _key(head.tid))].append((ts, ts + dur, len(kept)))
            if head.cat in KERNEL_CATEGORIES:
                kernels += 1
        elif not start_ns <= ts < end_ns:
            continue
        kept.append(raw)
    cut = WindowCut({}, start_ns, end_ns, events=len(kept), kernels=kernels)
    next_tid = max_tid + 1
    names: list[dict[str, Any]] = []
    for (pid, tid), ranges in complete.items():
        lanes = _lay_out(ranges)
        siblings: dict[int, int] = {}
        for position, lane in lanes.items():
            if lane == 0:
                continue
            if lane not in siblings:
                siblings[lane] = next_tid
                cut.sibling_tracks.append((pid, tid, next_tid))
                base = thread_names.get((pid, tid)) or f"thread {tid}"
                names.append(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": pid,
                        "tid": next_tid,
                        "args": {
                            "name": f"{base} (partially overlapping events, moved from tid {tid})"
                        },
                    }
                )
                next_tid += 1
            event = msgspec.json.decode(kept[position])  # type: ignore[arg-type]
            event["tid"] = siblings[lane]
            kept[position] = event
            cut.moved += 1
    cut.document = {
        **{k: v for k, v in others.items()},
        "traceEvents": [*kept, *names],
    }
    return cut


def _lay_out(ranges: list[tuple[int, int, int]]) -> dict[int, int]:
    """Per kept position, the track (0: its own; k > 0: the k-th sibling) where each
    complete event of one (pid, tid) nests: in order of start, longer first on a tie,
    the first track whose ranges open at its start all end at or after its end."""
    stacks: list[list[int]] = []  # per track, the ends of the ranges open there
    out: dict[int, int] = {}
    for start, end, position in sorted(ranges, key=lambda r: (r[0], -r[1], r[2])):
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                out[position] = lane
                break
        else:
            stacks.append([end])
            out[position] = len(stacks) - 1
    return out


def partial_overlaps(data: bytes) -> int:
    """How many complete events of a JSON trace (``data``: its bytes, uncompressed)
    start inside an earlier one on their (pid, tid) track and end after it, what
    Perfetto's JSON importer drops: the check for a cut window (timestamps exact, as in
    :func:`cut_window`)."""
    tracks: dict[tuple[Any, Any], list[tuple[int, int]]] = defaultdict(list)
    for raw in _ROOT.decode(data).traceEvents:
        head = _HEAD.decode(raw)
        ts = ns_of(head.ts)
        if head.ph == "X" and ts is not None:
            tracks[(_key(head.pid), _key(head.tid))].append((ts, ts + max(0, ns_of(head.dur) or 0)))
    bad = 0
    for ranges in tracks.values():
        stack: list[int] = []
        for start, end in sorted(ranges, key=lambda r: (r[0], -r[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            if stack and stack[-1] < end:
                bad += 1
                continue
            stack.append(end)
    return bad


def write_window(cut: WindowCut, out_path: str) -> int:
    """Write the cut trace as JSON, gzip-compressed when ``out_path`` ends with ``.gz``;
    returns the bytes written. Raises OSError when the file cannot be written."""
    data = msgspec.json.encode(cut.document)
    if out_path.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6)
    with open(out_path, "wb") as f:
        f.write(data)
    return len(data)
