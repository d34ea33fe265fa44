"""One JSON value of an event → one column value: ids and the optional args.

An id (pid, tid, device, stream, correlation...) becomes an ``int``: an int (or bool)
as it is, a numeric or hex string parsed, any other string interned as a negative number
(``-1 - index`` in the caller's ``strings``), and ``None``, a non-finite float or a
number outside int64 :data:`MISSING_ID`. An optional arg becomes an ``int`` or a
``str``, or ``None`` when it is absent or does not fit.
"""

from __future__ import annotations

import numpy as np

from tb_kineto_insights.trace import model as m

#: Marks a missing pid/tid/device/stream before fallbacks are applied.
MISSING_ID = -(2**62)


def plain_int64s(values: list[object]) -> bool:
    """Whether every value is an ``int`` (not a ``bool``) in int64 range, which
    :func:`as_int` returns as it is (checked in C: one ``map(type)``, ``min``, ``max``)."""
    if not values:
        return True
    if set(map(type, values)) != {int}:
        return False
    return min(values) >= -(2**63) and max(values) < 2**63  # type: ignore[type-var,operator]


def as_int(value: object, strings: dict[str, int]) -> int:
    """One id value → int: ints as is, ``"0x0"``/``"12"`` parsed, other strings interned
    as negative numbers (``-1 - index``), missing → :data:`MISSING_ID`."""
    if value is None:
        return MISSING_ID
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else MISSING_ID
    if isinstance(value, float):
        return int(value) if np.isfinite(value) and abs(value) < 2**63 else MISSING_ID
    text = str(value).strip()
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        return int(float(text))
    except (ValueError, OverflowError):
        pass
    return -1 - strings.setdefault(text, len(strings))


def opt_int(v: object) -> int | None:
    """An args value as an int (``bool``, ``int``, finite ``float``, a numeric string),
    None when it is none of these or does not fit int64 (a 20-digit ``In msg nelems``
    would otherwise overflow the int64 columns)."""
    out: int | None = None
    if isinstance(v, bool):
        out = int(v)
    elif isinstance(v, int):
        out = v
    elif isinstance(v, float) and np.isfinite(v):
        out = int(v)
    elif isinstance(v, str):
        try:
            out = int(v, 0)
        except ValueError:
            return None
    if out is None or not -m.INT64_MAX <= out <= m.INT64_MAX:
        return None
    return out


def opt_str(v: object) -> str | None:
    """An args value as its ``str``; ``None`` stays ``None``."""
    return None if v is None else str(v)
