"""Durations and sizes as text, for every string the Python side writes (CLI report,
``diff``, ``check``, diagnosis titles and evidence).

Rules (the tab's ``frontend/src/format.ts`` follows the same ones):

- a duration, given in µs, is written in the unit that fits its size: below 1 ms in
  µs (``"812.4 µs"``), below 1 s in ms (``"23.09 ms"``), else in s (``"1.50 s"``);
  the sign is kept (``"-2.50 ms"``);
- a size, given in bytes, is written in IEC units (1 KiB = 1024 B): B below 1 KiB,
  then KiB, MiB, GiB, TiB (``"1.5 MiB"`` for 1,572,864 bytes). Never SI (MB = 10^6 B):
  the tab writes MiB, and the CUDA caching allocator rounds to powers of two.

``None`` and non-finite values are written ``"-"``.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "TerminalLines",
    "fmt_bytes",
    "fmt_duration_us",
    "terminal_safe",
    "terminal_safe_line",
]

_IEC = ("KiB", "MiB", "GiB", "TiB")


def fmt_duration_us(us: float | None, digits: int = 2) -> str:
    """A duration (µs) in µs below 1 ms, in ms below 1 s, else in s.

    ``digits``: decimals in ms and s; µs get one decimal fewer (at least 0), so
    ``fmt_duration_us(23092.0) == "23.09 ms"``, ``fmt_duration_us(812.44) == "812.4 µs"``,
    ``fmt_duration_us(1_500_000) == "1.50 s"``. None/NaN/inf → ``"-"``.
    """
    if us is None or not math.isfinite(us):
        return "-"
    size = abs(us)
    if size < 1e3:
        return f"{us:.{max(digits - 1, 0)}f} µs"
    if size < 1e6:
        return f"{us / 1e3:.{digits}f} ms"
    return f"{us / 1e6:.{digits}f} s"


def fmt_bytes(n: float | None, digits: int = 1) -> str:
    """A size (bytes) in IEC units: ``"512 B"``, ``"1.5 KiB"``, ``"23.0 MiB"``,
    ``"1.2 GiB"``; negative sizes (a change) keep their sign. None/NaN/inf → ``"-"``."""
    if n is None or not math.isfinite(n):
        return "-"
    size = abs(n)
    if size < 1024:
        return f"{n:.0f} B"
    value, unit = n / 1024, _IEC[0]
    for next_unit in _IEC[1:]:
        if abs(value) < 1024:
            break
        value, unit = value / 1024, next_unit
    return f"{value:.{digits}f} {unit}"


#: Characters a terminal or CI log acts on, never printed raw from a trace: C0 controls
#: (ESC starts colour, cursor and OSC title/hyperlink sequences; CR and newline forge
#: lines), DEL, C1 controls, and the bidirectional overrides/isolates (a right-to-left
#: override shows text reversed).
_TERMINAL_ESCAPES = {
    **{c: f"\\x{c:02x}" for c in range(0x20) if c not in (0x09,)},
    0x7F: "\\x7f",
    **{c: f"\\x{c:02x}" for c in range(0x80, 0xA0)},
    **{c: f"\\u{c:04x}" for c in (0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))},
}


def terminal_safe(text: str) -> str:
    """``text`` with every control character a terminal acts on written as an escape
    (``\\x1b``, ``\\n``-as-``\\x0a``, ``\\u202e``); tabs and printable text unchanged.
    For names from a trace printed in report/diff/check text (an ESC, OSC or RLO
    sequence or a newline in a kernel name would otherwise forge lines in a terminal or
    CI log)."""
    return text.translate(_TERMINAL_ESCAPES)


def terminal_safe_line(text: str) -> str:
    """:func:`terminal_safe` of one output line (or block of lines written at once), the
    newlines at its start and end kept: they are the writer's own line structure, not
    text from a trace."""
    lead = len(text) - len(text.lstrip("\n"))
    if lead == len(text):
        return text
    end = len(text.rstrip("\n"))
    return text[:lead] + terminal_safe(text[lead:end]) + text[end:]


class TerminalLines:
    """A text stream wrapper for line-oriented output: in each ``write``, newlines at
    the start and end are kept (the writer's own line structure) and every other
    control character, newlines inside included, is escaped (:func:`terminal_safe`)."""

    def __init__(self, out: Any) -> None:
        self._out = out

    def write(self, text: str) -> int:
        return int(self._out.write(terminal_safe_line(text)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._out, name)
