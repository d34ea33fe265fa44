"""Issue 17 §10: one rule for durations and sizes in every string the Python side
writes (µs below 1 ms, ms below 1 s, else s; sizes in IEC units as the tab)."""

from __future__ import annotations

import math

import pytest

from tb_kineto_insights.analysis.units import fmt_bytes, fmt_duration_us, terminal_safe_line


@pytest.mark.parametrize(
    ("us", "text"),
    [
        (23092.0, "23.09 ms"),  # `check` used to print "23092.0 µs"
        (812.44, "812.4 µs"),
        (999.94, "999.9 µs"),
        (1000.0, "1.00 ms"),
        (999_994.0, "999.99 ms"),
        (1_000_000.0, "1.00 s"),
        (1_500_000.0, "1.50 s"),
        (0.0, "0.0 µs"),
        (-2500.0, "-2.50 ms"),
        (-72_990.0, "-72.99 ms"),
        (None, "-"),
        (math.nan, "-"),
        (math.inf, "-"),
    ],
)
def test_duration_in_the_unit_that_fits(us: float | None, text: str) -> None:
    assert fmt_duration_us(us) == text


def test_duration_digits() -> None:
    assert fmt_duration_us(877.0, 1) == "877 µs"
    assert fmt_duration_us(73_077.36, 1) == "73.1 ms"
    assert fmt_duration_us(1_599_700.0, 1) == "1.6 s"


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (1_572_864, "1.5 MiB"),
        (33_554_432, "32.0 MiB"),  # was "33.6 MB" in the report, "32 MiB" in the tab
        (3.7 * 2**30, "3.7 GiB"),
        (2**40, "1.0 TiB"),
        (-1_572_864, "-1.5 MiB"),
        (None, "-"),
        (math.nan, "-"),
    ],
)
def test_sizes_in_iec_units(n: float | None, text: str) -> None:
    assert fmt_bytes(n) == text
    assert "MB" not in fmt_bytes(n) and "kB" not in fmt_bytes(n)


def test_terminal_safe_line_keeps_the_writers_newlines_only() -> None:
    """A section written as ``"\\nLargest changes"`` keeps its blank line (the diff text
    printed ``\\x0aLargest changes`` before); a newline or ESC inside is escaped."""
    assert terminal_safe_line("\nLargest changes:\n") == "\nLargest changes:\n"
    assert terminal_safe_line("\n\n") == "\n\n"
    assert terminal_safe_line("\nk\x1b[2Jx\ny\n") == "\nk\\x1b[2Jx\\x0ay\n"
