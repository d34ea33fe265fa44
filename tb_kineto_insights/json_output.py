"""The CLI's JSON documents (``report``/``diff --format json``), encoded by msgspec.

The text is byte for byte what ``json.dump(doc, out, indent=1, allow_nan=False)``
wrote before, after NaN and ±inf were replaced by ``null``: key order as built,
one-space indentation, ``", "``/``": "`` separators, ``ensure_ascii`` escapes
(``\\u00e9``; ``\\ud83d\\ude00`` beyond the BMP), Python's float repr
(``1e-05``, ``1e+16``). msgspec encodes and indents in C; two spellings of its own
are fixed after it, on the indented text, where every number is alone on its line:

- a float with an exponent (msgspec ``1e16``, ``1e-7``) or below 1e-4 in fixed
  notation (msgspec ``0.000045``) is rewritten as ``repr(float(token))`` (the same
  value: both print the shortest round-trip digits; Python ``1e+16``, ``1e-07``,
  ``4.5e-05``). Candidates are found by literal searches (``e<digits>`` at a line's
  end, ``0.0000``), each line then checked in full: a character-class regex over the
  whole text ran at 35 MB/s, the literal scans at 300+ MB/s;
- characters from U+0080 up are escaped as ``json``'s ``ensure_ascii`` does (msgspec
  writes UTF-8) by an ``encode("ascii")`` error handler, which calls Python only for
  the non-ASCII runs; DEL (U+007F, which ``json`` escapes too) by a replace. Control
  characters below U+0020 are already escaped alike.

Measured (CPU, best of 5, on the shared 2-core development machine at load 5-8):
transformer_eager's report (370 KB of JSON) 74 ms with ``json.dumps`` against 9 ms
here; df_index_resolver's (1.4 MB, 120 non-ASCII characters) 314 ms against 39 ms.
The first version, whole-text regexes for both fixes, took 19 and 73 ms.

A document msgspec cannot encode (a lone surrogate in a string, a type it does not
know) falls back to the stdlib encoder, so the output never changes; only its cost.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from typing import Any, TextIO

import msgspec

__all__ = ["dumps_json", "write_json"]

#: A scalar line of msgspec's indented output whose number is spelled unlike Python's
#: float repr: optional ``"key": ``, the number, an optional comma.
_ODD_NUMBER_LINE = re.compile(
    rb'( *(?:"(?:[^"\\\n]|\\.)*": )?)(-?(?:0\.0000[0-9]+|[0-9.]+e-?[0-9]+))(,?)'
)
#: An exponent ending a line (a literal first character: a fast scan).
_EXPONENT_AT_LINE_END = re.compile(rb"e-?[0-9]+,?$", re.M)
_ERRORS = "tb_kineto_insights.json_ensure_ascii"


def _escape_non_ascii(error: UnicodeError) -> tuple[str, int]:
    """``encode`` error handler: the run of non-ASCII characters as ``\\uXXXX``
    escapes (a surrogate pair beyond U+FFFF), as ``json.dumps(ensure_ascii=True)``."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    out = []
    for char in error.object[error.start : error.end]:
        code = ord(char)
        if code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            code -= 0x10000
            out.append(f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}")
    return "".join(out), error.end


codecs.register_error(_ERRORS, _escape_non_ascii)


def _enc_hook(obj: Any) -> Any:
    """Subclasses of float/int/str (``numpy.float64``, a ``str`` enum) as their base type,
    as ``json`` writes them."""
    for base in (float, int, str):
        if isinstance(obj, base):
            return base(obj)
    raise NotImplementedError(type(obj).__name__)


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def _line_at(data: bytes, pos: int) -> tuple[int, int]:
    start = data.rfind(b"\n", 0, pos) + 1
    end = data.find(b"\n", pos)
    return start, len(data) if end == -1 else end


def _python_floats(data: bytes) -> bytes:
    """``data`` with every number msgspec spells unlike ``float.__repr__`` respelled."""
    lines = {_line_at(data, m.start()) for m in _EXPONENT_AT_LINE_END.finditer(data)}
    pos = data.find(b"0.0000")
    while pos != -1:
        lines.add(_line_at(data, pos))
        pos = data.find(b"0.0000", pos + 6)
    if not lines:
        return data
    pieces = []
    done = 0
    for start, end in sorted(lines):
        match = _ODD_NUMBER_LINE.fullmatch(data, start, end)
        if match is None:  # the hit was inside a string
            continue
        number = repr(float(match.group(2))).encode()
        pieces += [data[done:start], match.group(1), number, match.group(3)]
        done = end
    pieces.append(data[done:])
    return b"".join(pieces)


def _clean(value: Any) -> Any:
    """NaN/inf → None, recursively (the stdlib fallback only)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def dumps_json(doc: Any) -> str:
    """``doc`` (built-in containers and scalars; msgspec Structs too) as indented, strict,
    ASCII JSON text without a final newline; NaN and ±inf written as ``null``. Same text
    as ``json.dumps(doc_with_nan_as_none, indent=1, allow_nan=False)``.

    Raises:
        TypeError, ValueError: ``doc`` holds something neither msgspec nor ``json`` can
            encode (as ``json.dumps`` raises).
    """
    try:
        data = msgspec.json.format(_ENCODER.encode(doc), indent=1)
    except (msgspec.EncodeError, TypeError, ValueError, UnicodeEncodeError, OverflowError):
        return json.dumps(_clean(doc), indent=1, allow_nan=False)
    data = _python_floats(data)
    if b"\x7f" in data:  # DEL: ASCII, but json escapes it; only ever inside a string
        data = data.replace(b"\x7f", b"\\u007f")
    if not data.isascii():
        data = data.decode().encode("ascii", _ERRORS)
    return data.decode("ascii")


def write_json(doc: Any, out: TextIO) -> None:
    """Write :func:`dumps_json` of ``doc`` and a newline to ``out``."""
    out.write(dumps_json(doc))
    out.write("\n")
