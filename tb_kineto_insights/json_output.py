"""The CLI's JSON documents (``report``/``diff --format json``), encoded by msgspec.

The text is byte for byte what ``json.dump(doc, out, indent=1, allow_nan=False)``
wrote before, after NaN and ±inf were replaced by ``null``: key order as built,
one-space indentation, ``", "``/``": "`` separators, ``ensure_ascii`` escapes
(``\\u00e9``; ``\\ud83d\\ude00`` beyond the BMP), Python's float repr
(``1e-05``, ``1e+16``). msgspec encodes and indents in C (the stdlib encoder took
0.13 s of a GPT-size report); two spellings of its own are fixed after it, on the
indented text where every number is alone on its line:

- a float with an exponent (msgspec ``1e16``, ``1e-7``) or below 1e-4 in fixed
  notation (msgspec ``0.000045``) is rewritten as ``repr(float(token))`` (the same
  value: both print the shortest round-trip digits; Python ``1e+16``, ``1e-07``,
  ``4.5e-05``);
- characters from U+007F up are escaped as ``json``'s ``ensure_ascii`` does (msgspec
  writes UTF-8). Control characters below U+0020 are already escaped alike.

A document msgspec cannot encode (a lone surrogate in a string, a type it does not
know) falls back to the stdlib encoder, so the output never changes; only its cost.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TextIO

import msgspec

__all__ = ["dumps_json", "write_json"]


#: A scalar line of msgspec's indented output whose number is spelled unlike Python's
#: float repr: optional ``"key": ``, the number, an optional comma.
_ODD_NUMBER_LINE = re.compile(
    rb'^( *(?:"(?:[^"\\\n]|\\.)*": )?)(-?(?:0\.0000[0-9]+|[0-9.]+e-?[0-9]+))(,?)$', re.M
)
#: Cheap test whether any line may need the rewrite above (it may also hit a string).
_MAYBE_ODD_NUMBER = re.compile(rb"[0-9]e|0\.0000[0-9]")
_NON_ASCII_BYTE = re.compile(rb"[\x7f-\xff]")
#: From U+007F up. Written as a negated class: ``[\x7f-\U0010ffff]`` takes 37 ms to
#: compile (the charset optimiser walks the whole range), this one 0.1 ms.
_NON_ASCII_CHAR = re.compile("[^\x00-\x7e]")


def _enc_hook(obj: Any) -> Any:
    """Subclasses of float/int/str (``numpy.float64``, a ``str`` enum) as their base type,
    as ``json`` writes them."""
    for base in (float, int, str):
        if isinstance(obj, base):
            return base(obj)
    raise NotImplementedError(type(obj).__name__)


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def _python_float(match: re.Match[bytes]) -> bytes:
    number = repr(float(match.group(2))).encode()
    return match.group(1) + number + match.group(3)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}"


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
    if _MAYBE_ODD_NUMBER.search(data):
        data = _ODD_NUMBER_LINE.sub(_python_float, data)
    if _NON_ASCII_BYTE.search(data):
        return _NON_ASCII_CHAR.sub(_escape, data.decode())
    return data.decode("ascii")


def write_json(doc: Any, out: TextIO) -> None:
    """Write :func:`dumps_json` of ``doc`` and a newline to ``out``."""
    out.write(dumps_json(doc))
    out.write("\n")
