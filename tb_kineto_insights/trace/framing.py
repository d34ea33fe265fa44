"""Where the events lie in the bytes of a trace's JSON, found without decoding it.

A trace is a JSON object whose ``traceEvents`` key holds the array of events (or, less
often, that array alone); leading UTF-8 BOM and whitespace are not part of it. The
object's keys before ``traceEvents`` (the head) are read only up to
:data:`MAX_HEAD_BYTES`. Inside the array, an *event boundary* is a ``}`` ``,`` ``{``
(whitespace allowed between): the array can be cut there into pieces that decode on
their own, unless the cut falls inside a string, which only the decode finds out
(the reader and the window cut then wait for more bytes). Nothing here copies a
buffer or decodes JSON.
"""

from __future__ import annotations

import re

#: The ``traceEvents`` key of the root object and the ``[`` that opens its array.
TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
#: Bytes of the root object searched for :data:`TRACE_EVENTS_KEY` before giving up.
MAX_HEAD_BYTES = 256 * 1024 * 1024
#: Longest run of bytes the reader holds without finding the end of an event.
MAX_EVENT_BYTES = 64 * 1024 * 1024
#: JSON whitespace.
WS = b" \t\r\n"
#: What may precede the root: a UTF-8 byte order mark and whitespace.
BOM_AND_WS = b"\xef\xbb\xbf" + WS


def last_event_boundary(buf: bytes | bytearray, limit: int | None = None) -> tuple[int, int] | None:
    """Find the last ``}`` ``,`` ``{`` in ``buf`` whose ``}`` lies before ``limit``
    (default: anywhere): returns (end of the piece after the ``}``, start of the next
    event at the ``{``), or ``None``. Searched in place: no copy of the buffer."""
    n = len(buf)
    pos = n if limit is None else min(limit, n)
    for _ in range(10_000):
        pos = buf.rfind(b"}", 0, pos)
        if pos < 0:
            return None
        j = pos + 1
        while j < n and buf[j] in b" \t\r\n":
            j += 1
        if j < n and buf[j] == 0x2C:  # ","
            j += 1
            while j < n and buf[j] in b" \t\r\n":
                j += 1
            if j < n and buf[j] == 0x7B:  # "{"
                return pos + 1, j
    return None


def not_a_trace(path: str, compressed: bool) -> str:
    """Why a file whose first byte is neither ``{`` nor ``[`` is no trace (one wording
    for every reader of the file: ``report``, ``window``, the plugin): a file named
    ``.gz`` without the gzip magic (``compressed`` false) is "not gzip" (a plain JSON
    file so named is read as it is), any other "not a JSON trace"."""
    if not compressed and path.lower().rstrip("/").endswith(".gz"):
        return (
            "not gzip (named .gz, but it does not start with the gzip magic 1f 8b) "
            "and not a JSON trace either"
        )
    return "not a JSON trace (does not start with '{' or '[')"
