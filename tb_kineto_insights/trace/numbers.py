"""Exact nanoseconds from JSON number literals, vectorised (no ``Decimal`` per event).

Kineto writes epoch-scale timestamps in µs with ns digits (``1712195495519689.047``):
19 significant digits, more than a float64 keeps (about 16). The reader keeps each
literal as it was written (``msgspec.Raw``) and this module turns a list of them into
``int64`` ns in numpy:

* the literals are joined with ``,`` into one byte string and viewed as ``uint8``;
* a literal is *simple* when it matches ``-?[0-9]{1,16}(\\.[0-9]+)?`` (what Kineto
  writes); its value in ns is ``sign · (Σ digit · 10^(e + 3))`` over its digits, where
  ``e`` is the digit's power of ten in µs and digits with ``e + 3 < 0`` (below 1 ns)
  are dropped, i.e. the value is truncated toward zero, exactly as
  ``int(Decimal(text).scaleb(3))`` (the reader's previous definition). The sum is taken
  in ``uint64`` (16 integer digits + 3 fraction digits < 10^19 < 2^64);
* any other literal (exponent, string, ``null``, more than 16 integer digits) is
  returned as *odd*: the caller converts those few one by one.

Check by hand: ``b"12.3456"`` → 12 345 ns; ``b"-0.0019"`` → -1 ns; ``b"7"`` → 7 000 ns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_COMMA = ord(",")
_DOT = ord(".")
_MINUS = ord("-")
_ZERO = ord("0")
#: Most integer digits a simple literal may have (10^16 µs · 1000 < 2^64 ns).
MAX_INT_DIGITS = 16
_POW10 = np.array([10**k for k in range(20)], dtype=np.uint64)


def parse_us_literals_to_ns(
    literals: Sequence[bytes | memoryview | object],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """JSON number literals in µs → ns, truncated toward zero.

    Args:
        literals: ``n`` byte strings (or ``msgspec.Raw``), each one JSON value as written;
            an empty one means "absent".

    Returns:
        ``(ns, empty, odd)``: ``ns`` int64 (n,) — the value for simple literals, 0 for
        the others and for values of 2^63 ns or more (also flagged in ``odd``);
        ``empty`` bool (n,) — the literal is empty; ``odd`` bool (n,) — not a simple
        literal (see the module docstring), to be converted by the caller.

    Raises:
        Nothing for any input bytes.
    """
    n = len(literals)
    if n == 0:
        empty0 = np.zeros(0, dtype=np.bool_)
        return np.zeros(0, dtype=np.int64), empty0, empty0.copy()
    joined = b",".join(literals) + b","  # type: ignore[arg-type]
    buf = np.frombuffer(joined, dtype=np.uint8)
    ends = np.flatnonzero(buf == _COMMA)
    if len(ends) != n:  # a literal holds a comma (a string): convert all one by one
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.bool_), np.ones(n, np.bool_)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts
    empty = lengths == 0
    # token index of every byte (separators belong to the token they end)
    tok = np.repeat(np.arange(n, dtype=np.int64), lengths + 1)
    is_digit = (buf >= _ZERO) & (buf <= _ZERO + 9)
    is_dot = buf == _DOT
    is_minus = buf == _MINUS
    is_comma = buf == _COMMA
    negative = ~empty & (buf[np.minimum(starts, len(buf) - 1)] == _MINUS)
    bad = ~(is_digit | is_dot | is_comma | is_minus)
    bad_per_tok = np.bincount(tok, weights=bad, minlength=n) > 0
    # a minus sign is allowed only as the first byte
    minus_ok = np.zeros(len(buf), dtype=np.bool_)
    minus_ok[starts[negative]] = True
    bad_minus = np.bincount(tok, weights=is_minus & ~minus_ok, minlength=n) > 0
    dots = np.bincount(tok, weights=is_dot, minlength=n)
    # position of the dot in each token (its end when there is none)
    dot_pos = ends.copy()
    dot_at = np.flatnonzero(is_dot)
    if len(dot_at):
        # the first dot of each token (tokens with two dots are odd anyway)
        first = np.ones(len(dot_at), dtype=np.bool_)
        first[1:] = tok[dot_at[1:]] != tok[dot_at[:-1]]
        dot_pos[tok[dot_at[first]]] = dot_at[first]
    int_start = starts + negative
    int_digits = dot_pos - int_start
    frac_digits = np.where(dots > 0, ends - dot_pos - 1, 0)
    odd = ~empty & (
        bad_per_tok
        | bad_minus
        | (dots > 1)
        | (int_digits < 1)
        | (int_digits > MAX_INT_DIGITS)
        | ((dots > 0) & (frac_digits < 1))
    )
    # power of ten (in ns) of every digit byte: int digits 3 + (dot - 1 - pos),
    # fraction digits 2 - (pos - dot - 1); below 0 is under 1 ns and dropped
    pos = np.arange(len(buf), dtype=np.int64)
    tok_dot = dot_pos[tok]
    exp = np.where(pos < tok_dot, tok_dot - 1 - pos + 3, 2 - (pos - tok_dot - 1))
    use = is_digit & (exp >= 0) & ~odd[tok]
    digits = (buf[use] - _ZERO).astype(np.uint64)
    contrib = digits * _POW10[exp[use]]
    total = np.zeros(n, dtype=np.uint64)
    # exact uint64 sums per token: segment sums via cumulative sums (wrap-free:
    # every partial sum within one token is < 10^19 < 2^64, and the differences of
    # the running sum modulo 2^64 are exact)
    run = np.cumsum(contrib, dtype=np.uint64)
    token_of_use = tok[use]
    if len(token_of_use):
        last = np.flatnonzero(np.r_[token_of_use[1:] != token_of_use[:-1], True])
        ends_sum = run[last]
        prev = np.zeros(len(last), dtype=np.uint64)
        prev[1:] = ends_sum[:-1]
        total[token_of_use[last]] = ends_sum - prev
    too_big = total >= np.uint64(2**63)
    odd |= too_big
    ns = np.where(too_big | odd, np.uint64(0), total).astype(np.int64)
    ns = np.where(negative, -ns, ns)
    return ns, empty, odd
