"""Repair of JSON damage seen in real Kineto traces.

Only called on a chunk that failed to decode, so clean files never pay for it.
Repairs, each counted by kind:

- bare ``NaN``, ``Infinity``, ``inf``, ``-inf``, ``nan`` and ``N/A`` tokens where a
  value is expected → ``null`` (the field then reads as missing);
- a backslash inside a string that starts no valid JSON escape (Windows paths such as
  ``C:\\work\\x.py`` written unescaped) → an escaped backslash;
- control characters inside strings (raw tabs or newlines) → their escapes;
- bytes that are not UTF-8 (a name in a legacy encoding) → U+FFFD.

The scanner walks strings and bare tokens with one regular expression, so a ``NaN``
inside a string is left alone.
"""

from __future__ import annotations

import re
from collections import Counter

# A JSON string (lenient: any backslash pair), or a bare word that is not a JSON literal.
_TOKEN = re.compile(
    rb'"(?:[^"\\]|\\.)*"'  # string
    rb"|(?<![\w.])(-?(?:NaN|nan|Infinity|infinity|inf|Inf|INF)|N/A)(?![\w.])"
)
#: Any bare token this module repairs (a cheap test before the string-aware pass).
_BARE_HINT = re.compile(rb"(?<![\w.])-?(?:NaN|nan|Infinity|infinity|inf|Inf|INF|N/A)(?![\w.])")
#: A run of valid escapes (group 1) ending in a backslash that starts no valid escape.
#: Outside strings a backslash is never valid JSON, so no string context is needed, and
#: the lookbehind makes every match start at the beginning of a run of backslashes.
_LONE_BACKSLASH = re.compile(
    rb'(?<!\\)((?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*)\\(?!["\\/bfnrt]|u[0-9a-fA-F]{4})'
)
_CONTROL = re.compile(rb"[\x00-\x1f]")
#: Control characters that are never valid JSON, not even between tokens.
_CONTROL_NOT_WS = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")

_TOKEN_KIND = {b"N/A": "na_token"}


def _fix_string(s: bytes, counts: Counter[str]) -> bytes:
    if _CONTROL.search(s):

        def ctl(m: re.Match[bytes]) -> bytes:
            counts["control_character"] += 1
            return b"\\u%04x" % m.group(0)[0]

        s = _CONTROL.sub(ctl, s)
    return s


def repair_json(data: bytes | bytearray, deep: bool = False) -> tuple[bytes, Counter[str]]:
    """Return ``(repaired bytes, repairs per kind)``; the input is not modified.

    Linear in ``len(data)``: invalid UTF-8 and lone backslashes are fixed by C-level
    passes (no Python call per string); the string-aware pass (a Python call per string)
    runs only when the data holds a bare token or a control character that is never
    valid JSON, or, with ``deep=True``, any raw tab or newline (these are valid between
    tokens, so only a caller whose first repair did not decode asks for it).

    Raises nothing: damage it does not know is left for the decoder to report.
    """
    counts: Counter[str] = Counter()
    raw = bytes(data)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        counts["invalid_utf8"] += text.count("\ufffd")
        raw = text.encode("utf-8")
    if b"\\" in raw:
        raw, lone = _LONE_BACKSLASH.subn(rb"\1\\\\", raw)
        if lone:
            counts["lone_backslash"] += lone
    control = _CONTROL if deep else _CONTROL_NOT_WS
    if not (_BARE_HINT.search(raw) or control.search(raw)):
        return raw, counts

    def sub(m: re.Match[bytes]) -> bytes:
        token = m.group(1)
        if token is None:
            return _fix_string(m.group(0), counts)
        kind = _TOKEN_KIND.get(token)
        if kind is None:
            kind = "nan_token" if b"nan" in token.lower() else "inf_token"
        counts[kind] += 1
        return b"null"

    return _TOKEN.sub(sub, raw), counts
