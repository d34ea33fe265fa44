"""Salvage of a damaged piece of ``traceEvents``: keep every event that reads, resume
after the damage, and say where the damage is and what was lost.

Called only on a piece that failed to decode even after ``repair.repair_json``, so clean
files never pay for it.

Definitions (offsets are bytes of the *uncompressed* JSON, as in ``TraceFormatError``):

- a *segment* is the bytes between two candidate event boundaries ``}`` ``,`` ``{``
  (whitespace allowed): one event, unless a boundary lies inside a string or a nested
  object, which then splits one event into several segments;
- the *damage offset* is where the decoder stopped (msgspec's byte offset);
- a *lost unit* is the segment holding the damage offset, together with the segments
  before it that belong to the same event (found by stepping back while the events
  before it do not decode); it counts as **one lost event** and ``bytes`` lost.

Algorithm, on ``buf`` = ``[`` + events + ``]``:

1. decode from the current segment to the end in one go (in place: the byte before the
   segment, a ``,`` or blank, is overwritten by ``[`` and restored; nothing is copied);
2. a syntax error at offset X: keep the events before the lost unit holding X (stepping
   back at most :data:`MAX_STEP_BACK` segments), try the unit alone through
   ``repair_one`` (deep repair), else record it lost; continue after it at step 1;
3. "trailing characters": an array closed early. On the last segment of the final
   piece this is the real end of ``traceEvents``: the bytes after the ``]`` are handed
   back as the *trailer* (root keys such as ``traceName``); elsewhere the rest of the
   segment is lost (a stray ``]``);
4. "truncated" (no offset: a bracket or quote never closed): segment by segment for the
   rest of the piece; a truncated segment is decoded together with the following ones
   (group width doubling up to :data:`MAX_GROUP_SEGMENTS`); a group that never closes
   loses its first segment ("unbalanced"). At the end of a piece that is not the last,
   the open group is handed back as *leftover* (the next block may close it); at the end
   of the file it is lost ("file ends early, inside an event").

Each byte is decoded a bounded number of times (steps 1 and 2 at most twice plus
:data:`MAX_STEP_BACK` retries per damage, step 4 at most ``2 x`` per group), so the
work is linear in the piece.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

#: Candidate boundary between two events.
BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
#: Segments tried as the start of a damaged event before giving up on the ones before.
MAX_STEP_BACK = 8
#: Widest group of segments decoded together while looking for a bracket that closes.
MAX_GROUP_SEGMENTS = 64
#: Times per piece the one-go decode is retried after segment-by-segment mode.
MAX_FAST_RETRIES = 4
_OFFSET = re.compile(r"\(byte (\d+)\)")
_WS = b" \t\r\n"

OK, SYNTAX, TRAILING, TRUNCATED = range(4)
#: Problem recorded for the partial event at the end of a truncated file.
TRUNCATED_AT_END = "file ends early, inside an event (truncated JSON; was it still being written?)"


@dataclass
class Damage:
    """One damaged region. Offsets are bytes of the uncompressed JSON.

    Attributes:
        offset: where the decoder stopped.
        start: first byte lost.
        bytes: bytes lost (``start`` .. ``start + bytes``).
        events: events lost (a lost unit counts as one; see the module docstring).
        problem: the decoder's message (never bytes of the file), or ``unbalanced
            bracket or quote`` / ``file ends early, inside an event …``.
    """

    offset: int
    start: int
    bytes: int
    events: int
    problem: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (keys as the attributes)."""
        return {
            "offset": self.offset,
            "start": self.start,
            "bytes": self.bytes,
            "events": self.events,
            "problem": self.problem,
        }


@dataclass
class Salvaged:
    """What :func:`salvage_events` kept.

    Attributes:
        events: decoded events, in file order.
        damage: damaged regions.
        leftover: index in ``buf`` where undecided bytes start (a non-final piece whose
            last event is cut short), else ``None``.
        trailer: index in ``buf`` just after the ``]`` that closed ``traceEvents`` (the
            root keys that follow start there), else ``None``.
    """

    events: list[Any] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)
    leftover: int | None = None
    trailer: int | None = None


def classify(exc: msgspec.DecodeError) -> tuple[int, int | None]:
    """``(kind, offset)`` of a msgspec decode error: ``TRUNCATED`` (no offset), else
    ``TRAILING``/``SYNTAX`` with the byte offset it gives (``None`` for errors without
    one, such as invalid UTF-8)."""
    text = str(exc)
    if "truncated" in text:
        return TRUNCATED, None
    match = _OFFSET.search(text)
    offset = int(match.group(1)) if match else None
    return (TRAILING if "trailing characters" in text else SYNTAX), offset


def salvage_events(
    buf: bytearray,
    origin: int,
    final: bool,
    decode_list: Callable[[memoryview], list[Any]],
    repair_one: Callable[[bytes], list[Any] | None],
) -> Salvaged:
    """Decode the events of ``buf`` (``[`` + events + ``]``), keeping all that read.

    Args:
        buf: the piece; modified in place while decoding and restored before return.
        origin: file offset of ``buf[1]``.
        final: the piece ends the file (an unclosed event at its end is lost, not
            handed back, and a ``]`` in its last segment ends ``traceEvents``).
        decode_list: decodes a JSON array of events; raises ``msgspec.DecodeError`` on
            bad JSON (type errors are the callee's business).
        repair_one: tries one lost unit, ``[`` + segments + ``]``, after deep repair;
            returns its events or ``None``.

    Returns:
        :class:`Salvaged`.
    """
    return _Salvager(buf, origin, final, decode_list, repair_one).run()


class _Salvager:
    def __init__(
        self,
        buf: bytearray,
        origin: int,
        final: bool,
        decode_list: Callable[[memoryview], list[Any]],
        repair_one: Callable[[bytes], list[Any] | None],
    ) -> None:
        self.buf = buf
        self.origin = origin
        self.final = final
        self.decode_list = decode_list
        self.repair_one = repair_one
        last = len(buf) - 1
        self.starts = [1]
        self.ends: list[int] = []
        for m in BOUNDARY.finditer(buf, 1, last):
            self.ends.append(m.start() + 1)
            self.starts.append(m.end() - 1)
        self.ends.append(last)
        self.out = Salvaged()
        self.message = ""

    # -- helpers --------------------------------------------------------------------
    def _file(self, index: int) -> int:
        return self.origin + index - 1

    def _try(self, i: int, j: int) -> tuple[int, int | None, list[Any]]:
        """Decode segments ``i..j`` as one array, in place."""
        buf = self.buf
        a, b = self.starts[i] - 1, self.ends[j]
        saved_a, saved_b = buf[a], buf[b]
        buf[a], buf[b] = 0x5B, 0x5D  # "[", "]"
        view = memoryview(buf)
        try:
            return OK, None, self.decode_list(view[a : b + 1])
        except msgspec.DecodeError as exc:
            kind, offset = classify(exc)
            self.message = str(exc).split(" (byte")[0]
            if kind == SYNTAX and offset is not None and b == len(buf) - 1 and a + offset >= b:
                # stopped at the closing bracket added after the data: it ends inside
                # an event (``{"ph"]`` reads as "expected ':'")
                return TRUNCATED, None, []
            return kind, (None if offset is None else a + offset), []
        finally:
            view.release()
            buf[a], buf[b] = saved_a, saved_b

    def _segment_of(self, index: int, lo: int) -> int:
        return max(lo, bisect.bisect_right(self.starts, index) - 1)

    def _lose(self, i: int, j: int, offset: int, problem: str) -> None:
        self._lose_range(self.starts[i], self.ends[j], offset, problem)

    def _keep_before(self, i: int, k: int) -> int | None:
        """Keep segments ``i..k-1``, stepping back while they do not decode (a boundary
        inside the damaged event); returns the first segment of the damaged unit, or
        ``None`` when no prefix within :data:`MAX_STEP_BACK` segments decodes."""
        kk = k
        for step in range(MAX_STEP_BACK):
            if kk <= i:
                return i
            status, _, events = self._try(i, kk - 1)
            if status == OK:
                self.out.events.extend(events)
                return kk
            # a bracket or quote opened in i..k-1 never closes: when it opened in the
            # first half, stepping back from k cannot help (a stray "[": each step
            # would decode the whole piece again)
            if (
                step == 0
                and status == TRUNCATED
                and k - i > 2 * MAX_STEP_BACK
                and self._try(i, i + (k - i) // 2)[0] != OK
            ):
                return None
            kk -= 1
        return None

    def _damaged(self, i: int, k: int, offset: int, problem: str) -> bool:
        """Segments ``i..k``: damage at ``offset`` in segment ``k``. Returns False (and
        keeps nothing) when the segments before the damage do not decode either."""
        kk = self._keep_before(i, k)
        if kk is None:
            return False
        a, b = self.starts[kk], self.ends[k]
        unit = b"[" + bytes(self.buf[a:b]) + b"]"
        events = self.repair_one(unit)
        if events is not None:
            self.out.events.extend(events)
        else:
            self._lose(kk, k, offset, problem)
        return True

    def _trailing(self, i: int, x: int) -> int:
        """An array closed at the last ``]`` before ``x``: keep its events; returns the
        next segment to read (``len(starts)`` when the trailer was handed back)."""
        buf = self.buf
        a = self.starts[i] - 1
        end = x - 1
        while end > a and buf[end - 1] in _WS:
            end -= 1
        saved = buf[a]
        buf[a] = 0x5B
        view = memoryview(buf)
        try:
            self.out.events.extend(self.decode_list(view[a:end]))
        except msgspec.DecodeError:
            pass  # cannot happen: the decoder read this prefix; lost with the rest below
        finally:
            view.release()
            buf[a] = saved
        k = self._segment_of(end - 1, i)
        if self.final and k == len(self.starts) - 1:
            self.out.trailer = end
            return len(self.starts)
        self._lose_range(end, self.ends[k], x - 1, "stray ']' closes traceEvents early")
        return k + 1

    def _lose_range(self, start: int, end: int, offset: int, problem: str) -> None:
        self.out.damage.append(
            Damage(self._file(offset), self._file(start), max(end - start, 0), 1, problem)
        )

    # -- the loop -----------------------------------------------------------------
    def run(self) -> Salvaged:
        n = len(self.starts)
        i = 0
        fast = True
        retries = 0
        while i < n:
            if fast:
                status, x, events = self._try(i, n - 1)
                if status == OK:
                    self.out.events.extend(events)
                    break
                if status == TRUNCATED or x is None:
                    fast = False
                    continue
                if status == TRAILING:
                    i = self._trailing(i, x)
                    continue
                k = self._segment_of(x, i)
                if self._damaged(i, k, x, self.message):
                    i = k + 1
                else:  # the damage broke the structure before it: one segment at a time
                    fast = False
                continue
            i, lost = self._group(i, n)
            if lost and retries < MAX_FAST_RETRIES:
                retries += 1
                fast = True
        return self.out

    def _group(self, i: int, n: int) -> tuple[int, bool]:
        """Segment-by-segment step from ``i``: returns (next segment, whether a
        segment was lost)."""
        j = i
        while True:
            status, x, events = self._try(i, j)
            if status == OK:
                self.out.events.extend(events)
                return j + 1, False
            if status == TRAILING and x is not None:
                return self._trailing(i, x), True
            if status == SYNTAX:
                message = self.message
                k = j if x is None else self._segment_of(x, i)
                if self._damaged(i, k, self.starts[i] if x is None else x, message):
                    return k + 1, True
                self._lose(i, i, self.starts[i], "unbalanced bracket or quote")
                return i + 1, True
            if j == n - 1:
                if not self.final:
                    self.out.leftover = self.starts[i]
                    return n, False
                if i == n - 1:
                    self._lose(
                        i,
                        j,
                        self.starts[i],
                        TRUNCATED_AT_END,
                    )
                    return n, True
                self._lose(i, i, self.starts[i], "unbalanced bracket or quote")
                return i + 1, True
            if j - i + 1 >= MAX_GROUP_SEGMENTS:
                self._lose(i, i, self.starts[i], "unbalanced bracket or quote")
                return i + 1, True
            j = min(n - 1, i + 2 * (j - i + 1) - 1)
