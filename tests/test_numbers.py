"""trace/numbers.py: exact ns from JSON number literals, vectorised."""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path

import msgspec
import numpy as np

from tb_kineto_insights.trace.numbers import _parse_joined, parse_us_literals_to_ns
from tb_kineto_insights.trace.reader import read_trace


def test_hand_checked_values() -> None:
    literals = [
        b"12.3456",  # 12 345.6 ns, truncated
        b"-0.0019",  # -1.9 ns → -1 (toward zero, as int(Decimal))
        b"7",
        b"",  # absent
        b"1712195495519689.047",  # epoch µs with ns digits: more than a float64 holds
        b"9223372036854775.807",  # 2^63 - 1 ns: the largest that fits
        b"9223372036854775.808",  # 2^63 ns: does not fit → odd
        b"-0",
        b"0.9999999",
    ]
    ns, empty, odd = parse_us_literals_to_ns(literals)
    assert ns.dtype == np.int64
    assert ns.tolist() == [12345, -1, 7000, 0, 1712195495519689047, 2**63 - 1, 0, 0, 999]
    assert empty.tolist() == [False, False, False, True, False, False, False, False, False]
    assert odd.tolist() == [False, False, False, False, False, False, True, False, False]


def test_odd_literals_are_left_to_the_caller() -> None:
    literals = [b"null", b"1e5", b'"12"', b"99999999999999999", b"true", b"5", b"-", b"1.2.3"]
    ns, empty, odd = parse_us_literals_to_ns(literals)
    assert odd.tolist() == [True, True, True, True, True, False, True, True]
    assert ns[5] == 5000 and not empty.any()
    # a string holding a comma cannot be split: everything goes one by one
    _, _, odd = parse_us_literals_to_ns([b"1", b'"a,b"'])
    assert odd.all()


def test_equals_decimal_on_random_literals() -> None:
    """Bit-identical to the reader's previous definition, int(Decimal(ts).scaleb(3))."""
    rng = random.Random(14)
    literals = []
    for _ in range(20_000):
        whole = rng.randint(0, 10 ** rng.randint(1, 16) - 1)
        digits = rng.randint(0, 7)
        text = str(whole) + (
            "." + "".join(rng.choice("0123456789") for _ in range(digits)) if digits else ""
        )
        literals.append(("-" if rng.random() < 0.3 else "").encode() + text.encode())
    raws = [msgspec.Raw(x) for x in literals]  # as the reader hands them over
    ns, empty, odd = parse_us_literals_to_ns(raws)
    expected = [int(Decimal(x.decode()).scaleb(3)) for x in literals]
    assert not empty.any()
    for got, is_odd, want in zip(ns.tolist(), odd.tolist(), expected, strict=True):
        if is_odd:
            assert abs(want) >= 2**63
        else:
            assert got == want
    assert parse_us_literals_to_ns([])[0].shape == (0,)


def test_reader_exact_mode_mixed_literals(tmp_path: Path) -> None:
    """Exact mode (epoch µs with ns digits): plain literals go the vectorised way, odd
    ones (exponent, string, null) one by one, with the same values as before."""
    base = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 1.0}
    events = [
        {**base, "name": "a", "ts": Decimal("1712195495519689.047")},
        {**base, "name": "b", "ts": Decimal("1.712195495519690E+15")},
        {**base, "name": "c", "ts": "1712195495519691.5"},
        {**base, "name": "d", "ts": None},
        {**base, "name": "e", "ts": Decimal("9300000000000000.5")},  # beyond int64 ns
    ]
    path = tmp_path / "t.json"
    path.write_bytes(msgspec.json.Encoder(decimal_format="number").encode({"traceEvents": events}))
    trace = read_trace(str(path))
    assert trace.health.exact_ns_timestamps
    ops = trace.tables["cpu_op"]
    got = {trace.names[n]: int(t) for n, t in zip(ops.name, ops.start_ns, strict=True)}
    assert got == {"a": 1712195495519689047, "b": 1712195495519690000, "c": 1712195495519691500}
    assert trace.health.skipped == {"missing_ts": 1}
    assert trace.health.quarantined == {"ts_out_of_range": 1}


def test_matrix_path_equals_bytewise_path_on_mixed_literals() -> None:
    """The per-length matrix parse gives exactly the byte-wise parse's (ns, empty, odd)
    on 30,000 literals of every shape: Kineto's, short, long fractions (> 40 bytes),
    signs, exponents, junk bytes and empty ones, in one call."""
    rng = random.Random(1414)
    junk = "0123456789" * 5 + '.-+eE nul"x'
    literals = []
    for _ in range(30_000):
        r = rng.random()
        if r < 0.5:
            text = f"17121954955{rng.randint(0, 99_999):05d}.{rng.randint(0, 999):03d}"
        elif r < 0.8:
            whole = rng.randint(0, 10 ** rng.randint(1, 18) - 1)
            frac = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 8)))
            text = ("-" if rng.random() < 0.3 else "") + str(whole) + ("." + frac if frac else "")
        elif r < 0.85:
            text = str(rng.randint(0, 10**16)) + "." + "7" * rng.randint(30, 60)
        else:
            text = "".join(rng.choice(junk) for _ in range(rng.randint(0, 24)))
        literals.append(msgspec.Raw(text.encode()))
    got = parse_us_literals_to_ns(literals)
    want = _parse_joined(literals)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        assert np.array_equal(g, w)
    ns, empty, odd = got
    assert 20_000 < int((~odd & ~empty).sum()) < 30_000  # most are simple: the test bites
    for lit, value, is_odd, is_empty in zip(literals, ns.tolist(), odd, empty, strict=True):
        if not (is_odd or is_empty):
            assert value == int(Decimal(bytes(lit).decode()).scaleb(3))


def test_one_format_with_different_dot_columns() -> None:
    """Literals of one length whose dot sits in different columns (one matrix, several
    weight rows), with a sign and without."""
    ns, empty, odd = parse_us_literals_to_ns([b"1234.5", b"12.345", b"-1.2345", b"123456"])
    assert ns.tolist() == [1_234_500, 12_345, -1_234, 123_456_000]
    assert not odd.any() and not empty.any()


def test_one_format_batches_equal_decimal_and_the_bytewise_path() -> None:
    """Batches in one plain format (the fast whole-matrix path: same integer and
    fraction digit counts, no sign) for every shape from 1 to 17 integer digits and 0
    to 6 fraction digits, 24,000+ literals, equal int(Decimal(ts).scaleb(3)); a batch
    with one spoiled row (sign, second dot, exponent, a space) leaves the fast path
    and still equals the byte-wise parse."""
    rng = random.Random(2314)
    checked = 0
    for int_digits in range(1, 18):
        for frac_digits in range(0, 7):
            texts = []
            for _ in range(200):
                whole = "".join(rng.choice("0123456789") for _ in range(int_digits))
                frac = "".join(rng.choice("0123456789") for _ in range(frac_digits))
                texts.append(whole + ("." + frac if frac_digits else ""))
            raws = [msgspec.Raw(t.encode()) for t in texts]
            ns, empty, odd = parse_us_literals_to_ns(raws)
            assert not empty.any()
            for text, value, is_odd in zip(texts, ns.tolist(), odd.tolist(), strict=True):
                want = int(Decimal(text).scaleb(3))
                if int_digits > 16 or abs(want) >= 2**63:
                    assert is_odd and value == 0
                else:
                    assert not is_odd and value == want
                    checked += 1
            spoiled = list(texts)
            at = rng.randrange(len(spoiled))
            spoiled[at] = rng.choice(["-", " ", "e", "."]) + spoiled[at][1:]
            raws = [msgspec.Raw(t.encode()) for t in spoiled]
            for g, w in zip(parse_us_literals_to_ns(raws), _parse_joined(raws), strict=True):
                assert np.array_equal(g, w)
    assert checked >= 20_000


def test_kineto_literals_one_format() -> None:
    """Kineto's ``ts`` shape (13 integer, 3 fraction digits), hand-checked."""
    ns, empty, odd = parse_us_literals_to_ns(
        [b"5225059340331.845", b"5225059340367.542", b"0000000000001.001"]
    )
    assert ns.tolist() == [5_225_059_340_331_845, 5_225_059_340_367_542, 1_001]
    assert not odd.any() and not empty.any()
