"""The evidence formatter on every diagnosis of ``sample_logs/``: ``report --format
markdown`` writes no evidence value as a bare number that should carry a unit (the tab's
cards: ``tests/browser/test_tab_first_use.py``), and a title's numbers are its evidence
values rounded further, never more precise than the evidence shows them. Unit tests:
``test_evidence_units.py``."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
from conftest import SAMPLE_LOGS, as_json
from test_evidence_units import raw_numbers
from test_title_numbers import _FRAME_LINE, _NUMBER, _SHAPES

from tb_kineto_insights.analysis.evidence_units import evidence_texts
from tb_kineto_insights.cli.main import build_report, main

#: ``| key | value |`` rows of a Markdown evidence table.
_ROW = re.compile(r"^\s*\| (?!---)([^|]+?) \| (.+) \|$")


@functools.cache
def _diagnoses() -> list[dict[str, Any]]:
    report = as_json(build_report(str(SAMPLE_LOGS)))
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("id"), str) and "evidence" in value and "title" in value:
                found.append(value)
                return
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(report)
    return found


def test_markdown_evidence_carries_units(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(SAMPLE_LOGS), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    rows = [(m.group(1), m.group(2)) for m in map(_ROW.match, out.splitlines()) if m]
    assert len(rows) > 300  # the evidence of every diagnosis of sample_logs
    bad = [(key, text, raw) for key, text in rows if (raw := raw_numbers(key, text))]
    assert bad == []


def _numbers(text: str) -> list[tuple[float, str, int]]:
    """``(value, unit, decimals)`` of each number in ``text`` (as test_title_numbers
    reads them)."""
    text = _SHAPES.sub("[]", _FRAME_LINE.sub(".py()", text))
    out = []
    for m in _NUMBER.finditer(text):
        digits = m.group(1)
        out.append(
            (
                float(digits.replace(",", "")),
                m.group(2) or "",
                len(digits.split(".")[1]) if "." in digits else 0,
            )
        )
    return out


def title_against_evidence(title: str, evidence: dict[str, Any]) -> list[str]:
    """Title numbers that no evidence value, as the formatter writes it, shows in the same
    unit with as many decimals or more and within the two roundings (half a unit of the
    title's last digit and of the evidence's)."""
    shown = [n for _, text in evidence_texts(evidence) for n in _numbers(text)]
    missing = []
    for value, unit, decimals in _numbers(title):
        ok = any(
            u == unit
            and d >= decimals
            and abs(v - value) <= 0.5 * 10**-decimals + 0.5 * 10**-d + 1e-9
            for v, u, d in shown
        )
        if not ok:
            missing.append(f"{value:g} {unit}".strip())
    return missing


def test_titles_round_as_their_evidence() -> None:
    diagnoses = _diagnoses()
    assert len(diagnoses) > 50
    bad = {
        (d["id"], d["title"]): miss
        for d in diagnoses
        if (miss := title_against_evidence(d["title"], d["evidence"]))
    }
    assert bad == {}


def test_the_old_rounding_is_caught() -> None:
    """The issue's case: "cv 0.59" in the title, "0.6" in the evidence."""
    assert title_against_evidence("(coefficient of variation 0.59)", {"step_cv": 0.5923}) == []
    assert _numbers("0.6") == [(0.6, "", 1)]
    shown_less_precise = title_against_evidence("cv 0.59", {"n": 0.6})
    assert shown_less_precise == ["0.59"]
