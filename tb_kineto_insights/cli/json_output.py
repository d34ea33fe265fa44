"""The CLI's JSON documents (``report``/``diff --format json``), encoded by msgspec.

msgspec encodes (Structs and built-ins alike) and indents (one space) in C; NaN and
±inf become ``null`` (strict JSON). Numbers are spelled as msgspec spells them
(msgspec 0.23.0: ``1e-7``, ``0.00001``; Python's ``json`` wrote ``1e-07``, ``1e-05``:
the same values; the spelling depends on msgspec's version, the values do not). The
text is kept ASCII, as ``json``'s ``ensure_ascii`` wrote it, so a terminal or a file
opened in any encoding takes it: characters from U+0080 up become ``\\uXXXX``
escapes (a surrogate pair beyond U+FFFF) through an ``encode("ascii")`` error handler,
which runs Python only for the non-ASCII runs; DEL (U+007F) is escaped by a replace.
Control characters below U+0020 are escaped by msgspec already.

msgspec encodes a report several times faster than ``json.dumps`` (figures in
``benchmarks/RESULTS.md``).

A document msgspec cannot encode (a lone surrogate in a string, a type it does not
know) falls back to the stdlib encoder.
"""

from __future__ import annotations

import codecs
import math
from typing import Any, TextIO

import msgspec

__all__ = ["dumps_json", "write_json"]

_ERRORS = "tb_kineto_insights.json_ensure_ascii"


def _escape_non_ascii(error: UnicodeError) -> tuple[str, int]:
    """``encode`` error handler: the run of non-ASCII characters as ``\\uXXXX``
    escapes (a surrogate pair beyond U+FFFF; a lone surrogate as itself), as
    ``json.dumps(ensure_ascii=True)``. In C: the run as UTF-16 code units, four
    lowercase hex digits each (a run of 5 million characters took 1.8 s one character
    at a time in Python)."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    units = error.object[error.start : error.end].encode("utf-16-be", "surrogatepass")
    return "\\u" + units.hex(":", 2).replace(":", "\\u"), error.end


codecs.register_error(_ERRORS, _escape_non_ascii)


def _enc_hook(obj: Any) -> Any:
    """Subclasses of float/int/str (``numpy.float64``, a ``str`` enum) as their base type,
    as ``json`` writes them."""
    for base in (float, int, str):
        if isinstance(obj, base):
            return base(obj)
    raise NotImplementedError(type(obj).__name__)


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


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
    ASCII JSON text without a final newline; NaN and ±inf written as ``null``. The same
    values as ``json.dumps(doc_with_nan_as_none, indent=1, allow_nan=False)``.

    Raises:
        TypeError, ValueError: ``doc`` holds something neither msgspec nor ``json`` can
            encode (as ``json.dumps`` raises).
    """
    try:
        data = msgspec.json.format(_ENCODER.encode(doc), indent=1)
    except (msgspec.EncodeError, TypeError, ValueError, UnicodeEncodeError, OverflowError):
        import json  # only here (a lone surrogate): 3-5 ms of every start-up otherwise

        return json.dumps(
            _clean(msgspec.to_builtins(doc, enc_hook=_enc_hook)), indent=1, allow_nan=False
        )
    if b"\x7f" in data:  # DEL: ASCII, but json escapes it; only ever inside a string
        data = data.replace(b"\x7f", b"\\u007f")
    if data.isascii():
        return data.decode("ascii")
    # one pass in C; the handler runs once per run of non-ASCII characters. 13-30 ms
    # for the 7.5 MB report of sample_logs (2,847 runs); a regex search for the runs
    # (the code of issue 34's round 2) took 100-170 ms: ``benchmarks/RESULTS.md``
    return data.decode("utf-8").encode("ascii", _ERRORS).decode("ascii")


def write_json(doc: Any, out: TextIO) -> None:
    """Write :func:`dumps_json` of ``doc`` and a newline to ``out``."""
    out.write(dumps_json(doc))
    out.write("\n")
