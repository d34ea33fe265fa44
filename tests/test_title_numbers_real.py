"""The tests of ``test_title_numbers.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from conftest import CASES, H200X2, SAMPLE_LOGS, SHARED_TRACES, as_json
from test_title_numbers import unmatched_numbers

from tb_kineto_insights.analysis.rules import DIAGNOSIS_IDS
from tb_kineto_insights.cli.main import build_report


def _roots() -> list[Path]:
    roots = [SAMPLE_LOGS]
    roots += (
        sorted(p for p in SHARED_TRACES.iterdir() if p.is_dir()) if SHARED_TRACES.is_dir() else []
    )
    roots += sorted(p for p in H200X2.iterdir() if p.is_dir()) if H200X2.is_dir() else []
    roots += sorted(p for p in CASES.iterdir() if p.is_dir()) if CASES.is_dir() else []
    return roots


def _diagnoses(value: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(value, dict):
        if isinstance(value.get("id"), str) and "title" in value and "evidence" in value:
            return [(where, value)]
        for key, item in value.items():
            out += _diagnoses(item, f"{where}/{key}" if key in ("run", "worker", "span") else where)
    elif isinstance(value, list):
        for item in value:
            label = where
            if isinstance(item, dict):
                label = (
                    "/".join(str(item[k]) for k in ("run", "worker", "span") if k in item) or where
                )
                label = f"{where}/{label}" if label != where else where
            out += _diagnoses(item, label)
    return out


@functools.cache
def _all_diagnoses() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    by_id: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for root in _roots():
        try:
            report = as_json(build_report(str(root)))
        except Exception as exc:  # a folder with nothing readable: no diagnosis to check
            if "no trace" in str(exc).lower() or "nothing" in str(exc).lower():
                continue
            raise
        for where, diag in _diagnoses(report, root.name):
            by_id.setdefault(diag["id"], []).append((where, diag))
    return by_id


@pytest.mark.parametrize("diagnosis_id", DIAGNOSIS_IDS)
def test_title_numbers_are_evidence(diagnosis_id: str) -> None:
    if not SAMPLE_LOGS.is_dir():
        pytest.skip("sample_logs/ not found")
    found = _all_diagnoses().get(diagnosis_id, [])
    if not found:
        pytest.skip(f"no trace of sample_logs/ or ../shared raises {diagnosis_id}")
    bad = [
        f"{where}: {missing} in {diag['title']!r}"
        for where, diag in found
        if (missing := unmatched_numbers(diag["title"], diag["evidence"] or {}))
    ]
    assert bad == [], "\n".join(bad)
