"""Repair of JSON damage seen in real Kineto traces.

Only called on a chunk that failed to decode, so clean files never pay for it.
Repairs, each counted by kind:

- bare ``NaN``, ``Infinity``, ``inf``, ``-inf``, ``nan`` and ``N/A`` tokens where a
  value is expected → ``null`` (the field then reads as missing);
- a backslash inside a string that starts no valid JSON escape (Windows paths such as
  ``C:\\work\\x.py`` written unescaped) → an escaped backslash;
- control characters inside strings (raw tabs or newlines) → their escapes;
- bytes that are not UTF-8 (a name in a legacy encoding) → U+FFFD.

Lone backslashes and invalid UTF-8 are fixed by array passes that need no string
context; bare tokens and control characters need it, so a regular expression walks
strings and bare tokens (a ``NaN`` inside a string is left alone), with a Python call per
string, but only when the data holds a token word or a control character at all. The
work is linear in the input.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

# A JSON string (lenient: any backslash pair), or a bare word that is not a JSON literal.
_TOKEN = re.compile(
    rb'"(?:[^"\\]|\\.)*"'  # string
    rb"|(?<![\w.])(-?(?:NaN|nan|Infinity|infinity|inf|Inf|INF)|N/A)(?![\w.])"
)
#: Words of the bare tokens this module repairs: a cheap superset test (it also hits
#: ``inference`` in a name) before the exact, string-aware pass.
_BARE_HINT_WORDS = (b"NaN", b"nan", b"Inf", b"inf", b"INF", b"N/A")
_BACKSLASH = 0x5C
#: Bytes that may follow a backslash in a JSON escape (``u`` also needs 4 hex digits).
_ESCAPE_NEXT = np.frombuffer(b'"\\/bfnrt', dtype=np.uint8)
_HEX = np.zeros(256, dtype=np.bool_)
_HEX[np.frombuffer(b"0123456789abcdefABCDEF", dtype=np.uint8)] = True


def _fix_lone_backslashes(raw: bytes) -> tuple[bytes, int]:
    """Escape every backslash that starts no valid JSON escape; returns (bytes, count).

    Escapes read left to right, so in a run of ``L`` backslashes the first ``L - L % 2``
    pair up and, when ``L`` is odd, the last one escapes the next byte: it is *lone*
    unless that byte is one of ``" \\ / b f n r t`` or ``u`` followed by 4 hex digits.
    Outside strings a backslash is never valid JSON, so no string context is needed.
    numpy array passes: linear, no Python call per backslash.
    """
    arr = np.frombuffer(raw, dtype=np.uint8)
    pos = np.flatnonzero(arr == _BACKSLASH)
    if pos.size == 0:
        return raw, 0
    n = arr.size
    brk = np.flatnonzero(np.diff(pos) != 1)
    run_start = pos[np.concatenate(([0], brk + 1))]
    run_end = pos[np.concatenate((brk, [pos.size - 1]))] + 1
    last = run_end[(run_end - run_start) % 2 == 1] - 1
    nxt = np.minimum(last + 1, n - 1)
    c = np.where(last + 1 < n, arr[nxt], 0)
    valid = np.isin(c, _ESCAPE_NEXT)
    is_u = c == ord("u")
    if is_u.any():
        hex4 = np.ones(last.size, dtype=np.bool_)
        for k in range(2, 6):
            at = last + k
            hex4 &= (at < n) & _HEX[arr[np.minimum(at, n - 1)]]
        valid |= is_u & hex4
    lone = last[~valid]
    if lone.size == 0:
        return raw, 0
    return np.insert(arr, lone, _BACKSLASH).tobytes(), int(lone.size)


_CONTROL = re.compile(rb"[\x00-\x1f]")

_TOKEN_KIND = {b"N/A": "na_token"}


def _fix_string(s: bytes, counts: Counter[str]) -> bytes:
    if _CONTROL.search(s):

        def ctl(m: re.Match[bytes]) -> bytes:
            counts["control_character"] += 1
            return b"\\u%04x" % m.group(0)[0]

        s = _CONTROL.sub(ctl, s)
    return s


#: Every repair pass: ``utf8``, ``backslash``, ``token`` (bare NaN/inf/N/A), ``control``.
ALL_PASSES: frozenset[str] = frozenset({"utf8", "backslash", "token", "control"})


def passes_for_error(
    message: str, data: bytes | bytearray | memoryview, index: int | None
) -> frozenset[str]:
    """The repair passes that can fix a decode error: from msgspec's ``message`` and the
    byte at ``index`` in ``data`` (where the decoder stopped). Empty when none can."""
    if "UTF-8" in message:
        return frozenset({"utf8"})
    if "escape" in message:
        return frozenset({"backslash"})
    if index is None or not 0 <= index < len(data) or "invalid character" not in message:
        return frozenset()
    byte = data[index]
    if byte < 0x20:
        return frozenset({"control"})
    if byte in b"NnIi-":
        return frozenset({"token"})
    return frozenset()


def repair_json(
    data: bytes | bytearray | memoryview, passes: frozenset[str] = ALL_PASSES
) -> tuple[bytes, Counter[str]]:
    """Return ``(repaired bytes, repairs per kind)`` after the given ``passes`` (default:
    all); the input is not modified.

    Linear in ``len(data)``: ``utf8`` and ``backslash`` are C-level/array passes; the
    string-aware pass (``token``, ``control``: a Python call per string) runs only when
    the data holds a token word or a control character at all.

    Raises nothing: damage it does not know is left for the decoder to report.
    """
    counts: Counter[str] = Counter()
    raw = bytes(data)
    if "utf8" in passes:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", "replace")
            counts["invalid_utf8"] += text.count("\ufffd")
            raw = text.encode("utf-8")
    if "backslash" in passes:
        raw, lone = _fix_lone_backslashes(raw)
        if lone:
            counts["lone_backslash"] += lone
    tokens = "token" in passes and any(w in raw for w in _BARE_HINT_WORDS)
    control = "control" in passes and bool(_CONTROL.search(raw))
    if not (tokens or control):
        return raw, counts

    def sub(m: re.Match[bytes]) -> bytes:
        token = m.group(1)
        if token is None:
            return _fix_string(m.group(0), counts) if control else m.group(0)
        if not tokens:
            return m.group(0)
        kind = _TOKEN_KIND.get(token)
        if kind is None:
            kind = "nan_token" if b"nan" in token.lower() else "inf_token"
        counts[kind] += 1
        return b"null"

    return _TOKEN.sub(sub, raw), counts
