"""``--group-by REGEX`` (``history``, ``check --against-history``) and the plugin's
``/history?group_by=``: a regex the user gives, run on every run name.

It runs on RE2 (``google-re2``), an engine without backtracking: a search takes time
linear in the name whatever the pattern, in bounded memory, without recursion.
Python's ``re`` backtracks: ``(a+)+b`` on a long run of ``a`` takes time that
doubles with each more character, while holding the GIL (every other route of TensorBoard
waited); ``a{99999999999}`` raised ``OverflowError`` and 1,000 nested groups
``RecursionError``. RE2 compiles the first as a literal, refuses the second with
the reason (too many groups), as any pattern it cannot take.

Syntax: RE2's, which is Python's ``re`` without backreferences (``\\1``,
``(?P=name)``) and lookaround (``(?=``, ``(?<=``); ``\\d``, ``\\w`` and ``\\s`` are
ASCII classes. A pattern longer than :data:`MAX_PATTERN_CHARS` characters, one RE2
cannot compile within :data:`MAX_PROGRAM_BYTES`, one that compiles to more than
:data:`MAX_PROGRAM_SIZE` instructions, or one with more than :data:`MAX_GROUPS`
capturing groups is a ``ValueError`` that says why: a 400 in the
plugin, exit 2 on the command line. Linear is not cheap: where RE2's DFA gives up
(``(.*){1000}``: 10,004 instructions) a search costs time in proportion to the
instructions times the name's length, and the pattern runs on every run name; the
instruction and group bounds keep that to milliseconds a name.

A run name that is not UTF-8 (its bad bytes held as lone surrogates, as ``os.scandir``
gives them) is matched as it is shown: each bad byte as ``\\xNN``; any other lone
surrogate as ``\\uNNNN``. A pattern holding such a byte (a command line in a locale
that is not UTF-8) matches that shown text: its ``\xff`` byte matches a name's (outside
a character class, where it stands for the characters of its RE2 text).
"""

from __future__ import annotations

import functools
from typing import Any

from tb_kineto_insights.logdir.names import escaped_name

__all__ = [
    "MAX_PATTERN_CHARS",
    "MAX_PROGRAM_BYTES",
    "MAX_GROUPS",
    "MAX_PROGRAM_SIZE",
    "as_shown",
    "group_key",
    "group_pattern",
]

#: Longest ``group_by`` pattern, in characters (a grouping regex is a few dozen).
MAX_PATTERN_CHARS = 4096
#: Memory RE2 may use for one compiled pattern (its ``max_mem``; RE2's default is 8 MiB):
#: room for :data:`MAX_PROGRAM_SIZE` instructions and the DFA's cache, and RE2 stops a
#: compile that outgrows it (``\\pN{1000}``, 233,004 instructions) at once instead of
#: finishing it.
MAX_PROGRAM_BYTES = 1 << 20
#: Most RE2 instructions (``programsize``) of a pattern: a grouping regex has tens
#: (``^(\\w+)_\\d+``: 10); ``(.*){100}`` has 1,004 and 1,000 nested groups 2,005. A
#: search costs up to about this many steps per character of a run name ...
MAX_PROGRAM_SIZE = 1000
#: ... times the capturing groups it tracks (every one, though only the first names the
#: series: the figures are in ``benchmarks/RESULTS.md``). A grouping regex has one.
MAX_GROUPS = 9


def _error_text(exc: Exception) -> str:
    """RE2's reason (its messages are bytes)."""
    reason = exc.args[0] if exc.args else exc
    return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)


@functools.lru_cache(maxsize=64)
def group_pattern(group_by: str) -> Any:
    """The compiled RE2 pattern of ``group_by`` (cached: a history compiles it once).

    Raises:
        ValueError: too long, or RE2 cannot compile it (its reason in the message:
            ``missing ]``, ``invalid repetition size``, ``invalid escape sequence: \\1``
            for a backreference, ``pattern too large``), more than
            :data:`MAX_GROUPS` capturing groups or :data:`MAX_PROGRAM_SIZE`
            instructions.
        ImportError: ``google-re2`` is not installed (a dependency of the package).
    """
    if len(group_by) > MAX_PATTERN_CHARS:
        raise ValueError(
            f"--group-by is {len(group_by):,} characters long; at most {MAX_PATTERN_CHARS:,}"
        )
    import re2

    group_by = as_shown(group_by, literal=True)
    options = re2.Options()
    options.log_errors = False  # the reason goes into the ValueError, not to stderr
    options.max_mem = MAX_PROGRAM_BYTES
    try:
        compiled = re2.compile(group_by, options)
    except re2.error as exc:
        raise ValueError(
            f"--group-by {group_by[:80]!r} is not a regex RE2 takes: {_error_text(exc)} "
            "(RE2 syntax: Python's re without backreferences and lookaround)"
        ) from None
    if compiled.groups > MAX_GROUPS:
        raise ValueError(
            f"--group-by {group_by[:80]!r} has {compiled.groups:,} capturing groups; at "
            f"most {MAX_GROUPS} (the series is the first group's text: write the others "
            "as (?:...))"
        )
    if compiled.programsize > MAX_PROGRAM_SIZE:
        raise ValueError(
            f"--group-by {group_by[:80]!r} compiles to {compiled.programsize:,} RE2 "
            f"instructions; at most {MAX_PROGRAM_SIZE:,} (it runs on every run name, in "
            "time that grows with them: repeat less)"
        )
    return compiled


def as_shown(text: str, literal: bool = False) -> str:
    """``text`` as it is shown (module docstring): a run name as ``/runs`` lists it
    (:func:`~tb_kineto_insights.logdir.names.escaped_name`: a byte that is not UTF-8 as
    ``\\xNN``); with ``literal``, a pattern as RE2 syntax that matches that text (the
    backslash escaped, each such byte in a non-capturing group, ``\\uNNNN`` for any other
    lone surrogate)."""
    if not literal:
        return escaped_name(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    out = []
    for ch in text:  # in a group: a quantifier after it repeats the byte, not its last digit
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"(?:\\\\x{code - 0xDC00:02x})")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"(?:\\\\u{code:04x})")
        else:
            out.append(ch)
    return "".join(out)


def group_key(group_by: str, name: str) -> str | None:
    """The series a run named ``name`` joins under ``group_by``: the first group of the
    first match, else the whole match; None when the pattern does not match, or matches
    empty (the run is then a series of its own).

    Raises:
        ValueError: as :func:`group_pattern`.
    """
    pattern = group_pattern(group_by)
    m = pattern.search(as_shown(name))
    if m is None:
        return None
    key = (m.group(1) if pattern.groups else None) or m.group(0)
    return key or None
