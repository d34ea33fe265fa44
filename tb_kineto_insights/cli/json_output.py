"""The CLI's JSON documents (``report``/``diff --format json``), encoded by msgspec.

msgspec encodes (Structs and built-ins alike) and indents (one space) in C; NaN and
±inf become ``null`` (strict JSON). Numbers are spelled as msgspec spells them
(msgspec 0.23.0: ``1e-7``, ``0.00001``; Python's ``json`` writes ``1e-07``, ``1e-05``:
the same values; the spelling depends on msgspec's version, the values do not). The
text is kept ASCII, as ``json``'s ``ensure_ascii`` writes it, so a terminal or a file
opened in any encoding takes it: characters from U+0080 up become ``\\uXXXX``
escapes (a surrogate pair beyond U+FFFF) through an ``encode("ascii")`` error handler,
which runs Python only for the non-ASCII runs; DEL (U+007F) is escaped by a replace.
Control characters below U+0020 are escaped by msgspec already.

msgspec encodes a report several times faster than ``json.dumps`` (figures in
``benchmarks/RESULTS.md``).

A document msgspec cannot encode (a lone surrogate in a string, a type it does not
know) falls back to the stdlib encoder.

:class:`EncodedItems` builds the same text from a list's items encoded one by one as
they are ready (``report`` encodes each run while other files are still read).
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Iterator
from typing import Any, TextIO

import msgspec

__all__ = ["EncodedItems", "dumps_json", "write_json"]

_ERRORS = "tb_kineto_insights.json_ensure_ascii"


def _escape_non_ascii(error: UnicodeError) -> tuple[str, int]:
    """``encode`` error handler: the run of non-ASCII characters as ``\\uXXXX``
    escapes (a surrogate pair beyond U+FFFF; a lone surrogate as itself), as
    ``json.dumps(ensure_ascii=True)``. In C: the run as UTF-16 code units, four
    lowercase hex digits each (one character at a time in Python, a long run takes
    seconds: ``benchmarks/RESULTS.md``)."""
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
        raw = _ENCODER.encode(doc)
    except _MSGSPEC_CANNOT:
        return _stdlib_dumps(msgspec.to_builtins(doc, enc_hook=_enc_hook))
    return msgspec.json.format(_ascii(raw), indent=1).decode("ascii")


#: What msgspec raises for a document it cannot encode (a lone surrogate in a string, a
#: type it does not know): the stdlib encoder writes it then.
_MSGSPEC_CANNOT = (msgspec.EncodeError, TypeError, ValueError, UnicodeEncodeError, OverflowError)


def _stdlib_dumps(builtins: Any) -> str:
    """``builtins`` as the stdlib writes it: indented, NaN and ±inf as ``null``."""
    import json  # only here (a lone surrogate): every start-up would pay it otherwise

    return json.dumps(_clean(builtins), indent=1, allow_nan=False)


def _ascii(raw: bytes) -> bytes:
    """msgspec's compact UTF-8 JSON ``raw`` as ASCII: DEL and every character from U+0080
    up written as ``\\uXXXX`` escapes (see the module docstring). Done before the
    indentation, which keeps escapes as they are: half the bytes to go through."""
    if b"\x7f" in raw:  # DEL: ASCII, but json escapes it; only ever inside a string
        raw = raw.replace(b"\x7f", b"\\u007f")
    if raw.isascii():
        return raw
    # one pass in C; the handler runs once per run of non-ASCII characters. Before the
    # indentation there are fewer bytes to go through; a regex search for the runs is
    # an order of magnitude slower (Python's ``re`` scans a byte class byte by byte):
    # ``benchmarks/RESULTS.md``
    return raw.decode("utf-8").encode("ascii", _ERRORS)


class EncodedItems:
    """The items of a document's last field, a list, each encoded as soon as it is
    ready and then let go by the caller, for a document built piece by piece:
    ``report --format json`` encodes each run as soon as its files are in, while the
    other files are still being read, and keeps only its JSON. :meth:`dumps`
    joins them into the document's text: the same characters as :func:`dumps_json` of
    the whole document. An item msgspec cannot encode (a lone surrogate) is kept as it
    is, and the document is then written by the stdlib encoder, as :func:`dumps_json`
    writes it."""

    def __init__(self, field: str) -> None:
        self.field = field
        self._encoded: dict[int, bytes] = {}  # compact ASCII JSON
        self._kept: dict[int, Any] = {}  # the items msgspec could not encode

    def add(self, index: int, item: Any) -> None:
        """Encode ``item``, the ``index``-th of the list (added in any order)."""
        try:
            self._encoded[index] = _ascii(_ENCODER.encode(item))
        except _MSGSPEC_CANNOT:
            self._kept[index] = item

    def dumps(self, doc: Any) -> str:
        """:func:`dumps_json` of ``doc`` with the items added as its :attr:`field`
        (:meth:`chunks` joined).

        Raises:
            ValueError: as :meth:`chunks`.
        """
        return "".join(self.chunks(doc))

    def chunks(self, doc: Any) -> Iterator[str]:
        """:meth:`dumps` in pieces, one per item, indented one at a time as they are
        written: less work at the end than joining the compact JSON, indenting it whole
        and decoding it (figures in ``benchmarks/RESULTS.md``).

        Raises:
            ValueError: ``doc``'s :attr:`field` is not its last, or not an empty list;
                the items added are not numbered 0 to n-1 (before the first chunk).
        """
        count = len(self._encoded) + len(self._kept)
        if set(self._encoded).union(self._kept) != set(range(count)):
            raise ValueError(f"{self.field}: items missing among the {count} added")
        if getattr(doc, self.field, None) != []:
            raise ValueError(f"{self.field} is not an empty list in the document")
        try:
            skeleton = msgspec.json.format(_ascii(_ENCODER.encode(doc)), indent=1)
        except _MSGSPEC_CANNOT:
            skeleton = b""
        empty = b'\n "' + self.field.encode() + b'": []\n}'
        if self._kept or not skeleton.endswith(empty):
            yield self._through_stdlib(doc)
            return
        if not count:
            yield skeleton.decode("ascii")
            return
        yield skeleton[: -len(b"[]\n}")].decode("ascii") + "[\n  "
        for i in range(count):
            # indented two levels deep, as inside the document: [[item]] indented, less
            # its first 7 bytes ("[\n [\n  ") and last 5 ("\n ]\n]")
            text = msgspec.json.format(b"[[" + self._encoded[i] + b"]]", indent=1)[7:-5]
            yield (",\n  " if i else "") + text.decode("ascii")
        yield "\n ]\n}"

    def _through_stdlib(self, doc: Any) -> str:
        """The document through the stdlib encoder (an item or the rest could not be
        encoded by msgspec), its items decoded back from their JSON."""
        builtins = msgspec.to_builtins(doc, enc_hook=_enc_hook)
        if not isinstance(builtins, dict) or list(builtins)[-1:] != [self.field]:
            raise ValueError(f"{self.field} is not the document's last field")
        builtins[self.field] = [
            msgspec.json.decode(self._encoded[i])
            if i in self._encoded
            else msgspec.to_builtins(self._kept[i], enc_hook=_enc_hook)
            for i in range(len(self._encoded) + len(self._kept))
        ]
        return _stdlib_dumps(builtins)


def write_json(doc: Any, out: TextIO, items: EncodedItems | None = None) -> None:
    """Write :func:`dumps_json` of ``doc`` and a newline to ``out`` (with ``items``:
    :meth:`EncodedItems.chunks`, the items joined in, the same text)."""
    for chunk in (dumps_json(doc),) if items is None else items.chunks(doc):
        out.write(chunk)
    out.write("\n")
