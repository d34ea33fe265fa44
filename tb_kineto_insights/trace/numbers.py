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

How: the literals are joined once with ``,`` (``b",".join``, no per-literal ``len``);
the ``n - 1`` commas give every literal's bounds (a count other than ``n - 1`` means a
string holding a comma: all are odd). When all have one length ``L`` (Kineto writes one
format) the rows of ``L + 1`` bytes are a strided view of the joined bytes, and when
they also share one plain shape (no sign, the dot in one column) each value is one
dot product of the digits with the weights ``10^(e + 3)`` (:func:`_parse_one_format`,
3 whole-matrix numpy calls). Otherwise the literals of each length are one ``(k, L)``
``uint8`` matrix, transposed so that each column is contiguous, and the checks and the
sum run column by column (:func:`_parse_matrix`); literals longer than
:data:`MAX_MATRIX_CHARS` (many fraction digits) take the byte-wise path over the joined
bytes (:func:`_parse_joined`).

The timestamp stage as the reader runs it is several times faster this way than with
per-literal ``len`` and ``isinstance``, ``b"".join`` and a column-wise matrix
(``benchmarks/bench_decode_pieces.py``; figures in ``benchmarks/RESULTS.md``).

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
#: Literals up to this many bytes are parsed as a (rows, length) matrix per length;
#: longer ones (many fraction digits, rare) byte by byte over the joined bytes.
MAX_MATRIX_CHARS = 40


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
        literal (see the module docstring), to be converted by the caller. When any
        literal holds a comma (a string), every literal is flagged ``odd``.

    Raises:
        Nothing for any input bytes.
    """
    n = len(literals)
    if n == 0:
        empty0 = np.zeros(0, dtype=np.bool_)
        return np.zeros(0, dtype=np.int64), empty0, empty0.copy()
    # one join; the n - 1 commas give every literal's bounds (no per-literal len())
    joined = b",".join(literals)  # type: ignore[arg-type]
    buf = np.frombuffer(joined, dtype=np.uint8)
    commas = np.flatnonzero(buf == _COMMA)
    if len(commas) != n - 1:  # a string holding a comma: all one by one, as always
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.bool_), np.ones(n, np.bool_)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = commas + 1
    lengths = np.empty(n, dtype=np.int64)
    lengths[:-1] = commas
    lengths[-1] = len(buf)
    lengths -= starts
    width = int(lengths[0])
    if 0 < width <= MAX_MATRIX_CHARS and bool((lengths == width).all()):
        # one length (Kineto's usual case): the rows of width + 1 bytes (literal and
        # comma) are a strided view of the joined bytes, no gather
        rows_view = np.frombuffer(joined + b",", dtype=np.uint8).reshape(n, width + 1)
        ns, odd = _parse_matrix(rows_view[:, :width])
        return ns, np.zeros(n, dtype=np.bool_), odd
    ns = np.zeros(n, dtype=np.int64)
    empty = lengths == 0
    odd = np.zeros(n, dtype=np.bool_)
    for w in np.flatnonzero(np.bincount(lengths)).tolist():
        if w == 0:
            continue
        rows = np.flatnonzero(lengths == w)
        if w > MAX_MATRIX_CHARS:  # long literals (rare): the byte-wise path
            ns[rows], _, odd[rows] = _parse_joined([literals[i] for i in rows.tolist()])
            continue
        ns[rows], odd[rows] = _parse_matrix(buf[starts[rows][:, None] + np.arange(w)])
    return ns, empty, odd


def _parse_matrix(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Literals of one length ``L``, one per row of ``matrix`` (uint8, (k, L), no empty
    ones) → ``(ns, odd)`` as :func:`parse_us_literals_to_ns`.

    Per row: ``dot`` = column of the ``.`` (``L`` when none), and the digit in column
    ``c`` is worth ``10^(dot + 2 - c)`` ns left of the dot and ``10^(dot + 3 - c)`` ns
    right of it; digits worth less than 1 ns are dropped (truncation toward zero).
    Columns are worked on one at a time (the matrix transposed: each column
    contiguous), which is what makes this fast for ``L`` of about 20. Rows that all
    share one plain format take :func:`_parse_one_format` instead."""
    one_format = _parse_one_format(matrix)
    if one_format is not None:
        return one_format
    k, width = matrix.shape
    cols = np.ascontiguousarray(matrix.T)  # (L, k)
    digit = cols - np.uint8(_ZERO)  # wraps around for bytes below "0": not < 10
    is_digit = digit < 10
    is_dot = cols == _DOT
    dots = np.count_nonzero(is_dot, axis=0)
    has_dot = dots > 0
    negative = cols[0] == _MINUS
    col = np.arange(width)
    # with one dot: its column; with none: L (with several: odd anyway)
    dot_col = np.full(k, width, dtype=np.int64)
    for c in range(width - 1, -1, -1):  # the first dot wins (several: odd anyway)
        dot_col[is_dot[c]] = c
    int_digits = dot_col - negative
    frac_digits = np.where(has_dot, width - dot_col - 1, 0)
    odd = (
        (width - np.count_nonzero(is_digit, axis=0) != dots + negative)  # digits, a dot, a sign
        | (dots > 1)
        | (int_digits < 1)
        | (int_digits > MAX_INT_DIGITS)
        | (has_dot & (frac_digits < 1))
    )
    # exact: a simple literal's sum is < 10^19 < 2^64 (16 integer + 3 ns digits)
    total = np.zeros(k, dtype=np.uint64)
    digit = np.where(is_digit, digit, np.uint8(0))  # a sign or a dot adds nothing
    dots_at = np.unique(dot_col[~odd]) if odd.any() else np.unique(dot_col)
    for d in dots_at.tolist():  # usually one: Kineto writes one format
        rows = None if len(dots_at) == 1 else (dot_col == d)
        exp = d + 2 - col + (col > d)
        for c in np.flatnonzero((exp >= 0) & (col != d)).tolist():
            term = digit[c].astype(np.uint64) * _POW10[exp[c]]
            total += term if rows is None else np.where(rows, term, np.uint64(0))
    too_big = total >= np.uint64(2**63)
    odd |= too_big
    ns = np.where(odd, np.uint64(0), total).astype(np.int64)
    return np.where(negative, -ns, ns), odd


def _parse_one_format(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_parse_matrix` when every row has the first row's shape: no sign, digits
    only, the dot (if any) in the same column ``d`` with 1 to :data:`MAX_INT_DIGITS`
    digits before it and at least one after it (Kineto writes every ``ts`` so, e.g.
    ``5225059340331.845``). Then the value of every row is one dot product of its
    digits with the weights ``10^(d + 2 - c)`` (``c < d``) and ``10^(d + 3 - c)``
    (``c > d``), weight 0 for the dot and for digits below 1 ns: 3 whole-matrix numpy
    calls instead of a dozen per column. Returns ``None`` when the rows do not all
    have that shape (the caller's column-wise path decides them)."""
    k, width = matrix.shape
    first = matrix[0].tobytes()
    dot = first.find(b".")
    if dot < 0:
        dot = width
    elif dot == width - 1 or not bool((matrix[:, dot] == _DOT).all()):
        return None
    if not 1 <= dot <= MAX_INT_DIGITS:
        return None
    digit = matrix - np.uint8(_ZERO)  # wraps around for bytes below "0": not < 10
    if np.count_nonzero(digit < 10) != k * (width - (dot < width)):
        return None  # a sign, a second dot, an exponent, ...: not this format
    col = np.arange(width)
    exp = dot + 2 - col + (col > dot)
    weights = np.where((exp >= 0) & (col != dot), _POW10[np.maximum(exp, 0)], np.uint64(0))
    # exact: a row's sum is < 10^19 < 2^64 (16 integer + 3 ns digits)
    total = digit.astype(np.uint64) @ weights
    odd = total >= np.uint64(2**63)
    return np.where(odd, np.uint64(0), total).astype(np.int64), odd


def _parse_joined(
    literals: Sequence[bytes | memoryview | object],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The byte-wise pass over the joined literals: the arguments and result of
    :func:`parse_us_literals_to_ns`, which uses it for literals over
    :data:`MAX_MATRIX_CHARS` bytes (and whose tests compare the two)."""
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
