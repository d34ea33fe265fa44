"""Tracks for the complete events of one (pid, tid) of a window cut, so that every
track nests (what Perfetto's JSON importer needs: it drops an event that starts inside
another and ends after it).

The rule (:func:`lay_out`): in order of start (longer first on a tie, then file
order), each event goes on the first track (0: its own, k > 0: the k-th sibling) where
it nests: every range still open there at its start (end > start) ends at or after its
end. Ranges are half-open ``[start, end)`` ns; a range that ends where the next starts
is closed by then.

Cost: n log n in events, whatever their overlaps. The ranges open on one track nest, so
their ends, innermost last, never increase: the innermost is the one that closes first.
One heap of every open range by end closes them as the starts go by (each range is
closed once), and a max-tree over the tracks holds each track's innermost open end
(+inf when none is open): the first track where an event nests is the leftmost whose
value is at least the event's end, found in log(tracks) steps. (Scanning the tracks
for every event was quadratic: 16,000 partially overlapping events on one thread, a
staircase, each needing a track of its own, took 23 s.)
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import Any

import msgspec

from tb_kineto_insights.trace.window_events import Head, ns_of

__all__ = ["lay_out", "partial_overlaps"]

#: The value of a track with no open range: any event nests there.
_FREE = float("inf")
#: The value of a slot of the tree beyond the last track: no event goes there.
_NONE = float("-inf")


class _MaxTree:
    """A value per track (index 0, 1, ...), with the leftmost track whose value is at
    least a bound found in log(tracks) steps. Grows by doubling."""

    def __init__(self) -> None:
        self.size = 1
        self.tree: list[float] = [_NONE, _NONE]
        self.count = 0

    def _grow(self) -> None:
        old = self.tree[self.size : self.size + self.count]
        self.size *= 2
        self.tree = [_NONE] * (2 * self.size)
        self.tree[self.size : self.size + len(old)] = old
        for node in range(self.size - 1, 0, -1):
            self.tree[node] = max(self.tree[2 * node], self.tree[2 * node + 1])

    def append(self, value: float) -> int:
        """A new track with ``value``; returns its index."""
        if self.count == self.size:
            self._grow()
        self.count += 1
        self.set(self.count - 1, value)
        return self.count - 1

    def set(self, index: int, value: float) -> None:
        tree = self.tree
        node = index + self.size
        tree[node] = value
        node >>= 1
        while node:
            left, right = tree[2 * node], tree[2 * node + 1]
            tree[node] = left if left >= right else right
            node >>= 1

    def leftmost_at_least(self, bound: float) -> int | None:
        """The first track whose value is >= ``bound``, or None."""
        tree = self.tree
        if tree[1] < bound:
            return None
        node = 1
        while node < self.size:
            node *= 2
            if tree[node] < bound:
                node += 1
        return node - self.size


def lay_out(ranges: list[tuple[int, int, int]]) -> dict[int, int]:
    """Per position (the third element of each ``(start, end, position)``), the track
    of its event: 0 its own, k > 0 the k-th sibling (module docstring). n log n."""
    tracks: list[list[int]] = []  # per track, the ends of its open ranges, innermost last
    values = _MaxTree()
    open_ends: list[tuple[int, int]] = []  # (end, track) of every open range
    out: dict[int, int] = {}
    for start, end, position in sorted(ranges, key=lambda r: (r[0], -r[1], r[2])):
        while open_ends and open_ends[0][0] <= start:
            _, track = heapq.heappop(open_ends)
            stack = tracks[track]
            stack.pop()  # the track's innermost range: it ends first
            values.set(track, stack[-1] if stack else _FREE)
        found = values.leftmost_at_least(end)
        if found is None:
            tracks.append([end])
            found = values.append(end)
        else:
            tracks[found].append(end)
            values.set(found, end)
        heapq.heappush(open_ends, (end, found))
        out[position] = found
    return out


class _Events(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = msgspec.field(default_factory=list)  # noqa: N815


_DOC = msgspec.json.Decoder(_Events)
_HEAD = msgspec.json.Decoder(Head)


def _key(value: Any) -> Any:
    return repr(value) if isinstance(value, (list, dict)) else value


def partial_overlaps(data: bytes) -> int:
    """How many complete events of a JSON trace (``data``: its bytes, uncompressed)
    start inside an earlier one on their (pid, tid) track and end after it, what
    Perfetto's JSON importer drops: the check for a cut window (timestamps exact, as the
    cut reads them)."""
    tracks: dict[tuple[Any, Any], list[tuple[int, int]]] = defaultdict(list)
    for raw in _DOC.decode(data).traceEvents:
        try:
            head = _HEAD.decode(raw)
        except msgspec.ValidationError:
            continue
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
