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
_BAD_ESCAPE = re.compile(rb'\\(?:(["\\/bfnrt])|(u[0-9a-fA-F]{4}))|\\')
_CONTROL = re.compile(rb"[\x00-\x1f]")

_TOKEN_KIND = {b"N/A": "na_token"}


def _fix_string(s: bytes, counts: Counter[str]) -> bytes:
    if b"\\" in s:
        inner = s[1:-1]

        def esc(m: re.Match[bytes]) -> bytes:
            if m.group(1) is not None or m.group(2) is not None:
                return m.group(0)
            counts["lone_backslash"] += 1
            return b"\\\\"

        fixed = _BAD_ESCAPE.sub(esc, inner)
        # A string ending in a lone backslash swallowed its closing quote as `\"`;
        # the lenient string pattern already paired them, nothing more to do here.
        s = b'"' + fixed + b'"'
    if _CONTROL.search(s):

        def ctl(m: re.Match[bytes]) -> bytes:
            counts["control_character"] += 1
            return b"\\u%04x" % m.group(0)[0]

        s = _CONTROL.sub(ctl, s)
    return s


def repair_json(data: bytes | bytearray) -> tuple[bytes, Counter[str]]:
    """Return ``(repaired bytes, repairs per kind)``; the input is not modified.

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
