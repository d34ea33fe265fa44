"""What a file or folder name says to discovery: the worker and span id in a trace file's
name, whether a name is one to read or to pass over (hidden), and the natural order of
run and worker names (``rank2`` before ``rank10``).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "escaped_name",
    "is_hidden",
    "looks_like_trace",
    "natural_key",
    "odd_worker_name",
    "parse_span_index",
    "parse_trace_name",
    "run_key",
]

_NAMED_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json")
_JSON_SUFFIXES = (".json.gz", ".json")
_DIGITS = re.compile(r"[0-9]+")
_NATURAL_SPLIT = re.compile(r"([0-9]+)")
_SKIPPED_DIRS = frozenset({"__pycache__"})


def _strip_suffix(name: str, suffixes: tuple[str, ...]) -> str | None:
    """``name`` without the first matching suffix (case-insensitive), else ``None``."""
    lower = name.lower()
    for suffix in suffixes:
        if lower.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def escaped_name(text: str) -> str:
    """A file or folder name as a run or worker name: valid UTF-8 as it is; the bytes
    that are not UTF-8 (Python's ``surrogateescape``: ``os.scandir`` gives ``b"\\xff"`` as
    U+DCFF) written as ``\\xff``. The name is then the same in ``/runs`` and in the
    URL that asks for it: shown with U+FFFD, such a run would be listed but answer 404.
    The file's path is kept as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # another lone surrogate: as Python escapes it
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
        return raw.decode("utf-8", "backslashreplace")
    return text


def parse_trace_name(filename: str) -> tuple[str, str] | None:
    """``(worker, span)`` for ``<worker>[.<timestamp>].pt.trace.json[.gz]``, else None."""
    base = _strip_suffix(filename, _NAMED_SUFFIXES)
    if base is None:
        return None
    worker, dot, stamp = base.rpartition(".")
    if dot and worker and _DIGITS.fullmatch(stamp):
        return worker, stamp
    return base, "0"


def odd_worker_name(filename: str) -> str | None:
    """Worker name for another ``*.json[.gz]`` file (to be sniffed), else None."""
    base = _strip_suffix(filename, _JSON_SUFFIXES)
    if base is None:
        return None
    if base.lower().endswith(".pt.trace") and len(base) > len(".pt.trace"):
        base = base[: -len(".pt.trace")]
    return base


def natural_key(name: str) -> tuple[tuple[tuple[int, int, str], ...], str]:
    """Sort key: digit runs compare as numbers, text case-insensitively; ties by name."""
    parts: list[tuple[int, int, str]] = []
    for part in _NATURAL_SPLIT.split(name):
        if not part:
            continue
        if _DIGITS.fullmatch(part):
            parts.append((0, int(part), ""))
        else:
            parts.append((1, 0, part.casefold()))
    return tuple(parts), name


def run_key(name: str) -> tuple[int, tuple[Any, ...]]:
    """Runs: ``"."`` first, then natural order folder by folder."""
    if name == ".":
        return 0, ()
    return 1, tuple(natural_key(part) for part in name.split("/"))


_SPAN_INDEX = re.compile(r"-?[0-9]+")


def parse_span_index(text: str) -> int:
    """A span index as a query gives it: ASCII digits with an optional leading ``-``
    (``-1`` = the latest span). ``int()`` alone would also take ``1_0``, ``+3``, `` 3``
    and non-ASCII digits such as ``٣``.

    Raises:
        ValueError: anything else.
    """
    if not _SPAN_INDEX.fullmatch(text):
        raise ValueError(f"not a whole number in ASCII digits: {text!r}")
    return int(text)


def is_hidden(part: str) -> bool:
    """Whether a folder or file name is passed over: hidden (``.`` first) or
    ``__pycache__``."""
    return part.startswith(".") or part in _SKIPPED_DIRS


def looks_like_trace(filename: str) -> bool:
    """Whether discovery would read a file of this name (named, or ``*.json[.gz]`` to
    sniff)."""
    return parse_trace_name(filename) is not None or odd_worker_name(filename) is not None
