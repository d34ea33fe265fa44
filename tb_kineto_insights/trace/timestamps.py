"""Trace timestamps (µs, JSON numbers) → ``int64`` ns, exact to the digit.

Every converter here returns three arrays of one length: the ns (0 where unusable), a
*missing* mask (no ``ts``, ``null``) and an *out-of-range* mask (|ts| at or beyond
:data:`MAX_TS_US`, not finite, not a number: the caller quarantines those). A literal is
truncated toward zero, as ``int(Decimal(ts).scaleb(3))``; a float is converted by
:func:`us_to_ns`.

Epoch-scale timestamps with ns digits (``1712195495519689.047``) have more digits than a
float64 keeps, so when the first piece shows them (:data:`EXACT_TS`), ``ts`` is kept as
its literal text (``msgspec.Raw``) for the whole file (exact mode) and converted per
piece, vectorised, by :func:`~tb_kineto_insights.trace.numbers.parse_us_literals_to_ns`
(:func:`literals_ns`); a literal that is not a plain number is converted one by one as a
``Decimal``.
"""

from __future__ import annotations

import re
from decimal import Decimal, DecimalException
from typing import Any

import msgspec
import numpy as np

from tb_kineto_insights.trace.numbers import parse_us_literals_to_ns

#: Timestamps at or beyond this (µs) do not fit int64 ns (2^63 ns ≈ 9.2·10^15 µs).
MAX_TS_US = 9.2e15
#: A ``ts`` of 13 or more integer digits with a fraction: its ns digits do not fit a
#: float64, so a file whose first piece holds one is read in exact mode.
EXACT_TS = re.compile(rb'"ts"\s*:\s*-?\d{13,}\.\d')
#: |ns| at or beyond this is out of range (:data:`MAX_TS_US` in ns, exactly).
_MAX_TS_NS = 9_200_000_000_000_000_000
_decimal_ts_decoder = msgspec.json.Decoder(Decimal | None)


def _raw_decimal(raw: Any) -> Decimal | None:
    """A literal that is not a plain number (``null``, exponent, string) → ``Decimal``
    as the typed exact decoder reads it. Raises ``msgspec.ValidationError`` when it is
    not a number at all (the piece is then decoded with ``ts`` as a ``Decimal`` per
    event, :func:`~.decode.decode_typed`)."""
    if not len(raw):
        return None
    try:
        return _decimal_ts_decoder.decode(raw)
    except DecimalException:  # an exponent past decimal's limits: out of range
        return Decimal("Infinity")


def literals_ns(literals: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ts`` literals (``msgspec.Raw``, all of them) → (int64 ns, missing mask,
    out-of-range mask) as :meth:`~.columns.Builder._ts_ns`: plain numbers vectorised
    (:func:`~tb_kineto_insights.trace.numbers.parse_us_literals_to_ns`), the odd ones
    (exponent, string, ``null``) one by one as a ``Decimal``. Raises
    ``msgspec.ValidationError`` when an odd literal is not a number at all."""
    ns, missing, odd = parse_us_literals_to_ns(literals)
    huge = np.abs(ns) >= _MAX_TS_NS
    if huge.any():
        ns = np.where(huge, 0, ns)
        huge &= ~odd
    else:
        huge = np.zeros(len(ns), dtype=np.bool_)
    for i in np.flatnonzero(odd).tolist():
        ns[i], missing[i], huge[i] = _decimal_ns(_raw_decimal(literals[i]))
    return ns, missing, huge


def decimals_ns(values: list[Decimal | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``Decimal`` µs values (``None``: absent) → (int64 ns, missing mask, out-of-range
    mask), as :func:`_decimal_ns` of each: their text parsed vectorised as the literals
    of a piece are (a small file is decoded whole, its ``ts`` as ``Decimal``; one by one
    they would be a sizeable share of such a file's time: ``benchmarks/RESULTS.md``),
    the odd ones (exponent, NaN, past the
    int64 ns range) one by one."""
    texts = [b"" if v is None else str(v).encode() for v in values]
    ns, missing, odd = parse_us_literals_to_ns(texts)
    odd |= np.abs(ns) >= _MAX_TS_NS  # near the int64 ns range: the one-by-one rule decides
    huge = np.zeros(len(ns), dtype=np.bool_)
    for i in np.flatnonzero(odd).tolist():
        ns[i], missing[i], huge[i] = _decimal_ns(values[i])
    return ns, missing, huge


def _decimal_ns(v: Decimal | None) -> tuple[int, bool, bool]:
    """One ``Decimal`` µs value → (ns, missing, out of range): the rule the vectorised
    parse follows, applied to the values it leaves (odd, or near the int64 ns range)."""
    if v is None:
        return 0, True, False
    try:  # (abs and scaleb apply the context: 1e999999999999999999 overflows there)
        if not (v.is_finite() and abs(v) < MAX_TS_US):
            return 0, False, True
        return int(v.scaleb(3)), False, False
    except DecimalException:
        return 0, False, True


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """float µs → int64 ns, exact to the ns wherever the float holds the ns digits
    (|t| < 2^43 µs): integer and fractional parts are converted separately."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)
