"""``analysis/evidence_units.py``: the unit of an evidence key from its name (a table of
patterns, the exceptions first), and the one way each unit is written; the tab writes
the same (``frontend/src/evidence.ts``): both check every case of
``frontend/test/evidence_cases.json``. Real traces: ``test_evidence_units_real.py``."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from conftest import REPO

from tb_kineto_insights.analysis.evidence_units import (
    evidence_texts,
    format_evidence,
    format_scalar,
    unit_of,
)

EVIDENCE_CASES = REPO / "frontend" / "test" / "evidence_cases.json"


def _cases() -> list[tuple[str, Any, str]]:
    return [tuple(c) for c in json.loads(EVIDENCE_CASES.read_text(encoding="utf-8"))]


def test_every_case_is_written_as_the_file_says() -> None:
    cases = _cases()
    assert len(cases) > 200
    wrong = [(k, v, t, format_evidence(k, v)) for k, v, t in cases if format_evidence(k, v) != t]
    assert wrong == []


@pytest.mark.parametrize(
    ("key", "unit"),
    [
        ("idle_us_per_step", ("us", True)),
        ("idle_us", ("us", False)),
        ("kernels_per_step", ("count", True)),  # a thing named per step is counted
        ("kernels", ("name", False)),
        ("classes", ("us", True)),
        ("launches_per_step_excess", ("count", True)),
        ("cost_fraction_of_step_time", ("fraction", False)),
        ("share_of_step", ("fraction", False)),
        ("estimated_step_speedup_bf16", ("times", False)),
        ("first_step_ratio", ("times", False)),
        ("fp32_peak_flops_per_s", ("flop_rate", False)),
        ("busbw_gbps", ("gbps", False)),
        ("steps_to_capacity", ("steps", False)),
        ("op_steps", ("step", False)),
        ("steps", ("count", False)),
        ("step_cv", ("coefficient", False)),
        ("p_value", ("fraction", False)),
        # what a rule added later names by the convention needs no entry
        ("new_rule_wait_us_per_step", ("us", True)),
        ("new_rule_saving_fraction", ("fraction", False)),
        ("new_rule_peak_bytes", ("bytes", False)),
        ("new_rule_thing_count", ("count", False)),
    ],
)
def test_the_unit_is_read_from_the_key(key: str, unit: tuple[str, bool]) -> None:
    assert unit_of(key) == unit


def test_scalars_carry_their_unit_and_round_as_titles() -> None:
    assert format_scalar("us", 73077.36) == "73.08 ms"  # the title: "73.1 ms"
    assert format_scalar("fraction", 0.6448) == "64.5 %"  # the title: "64 %"
    assert format_scalar("fraction", 0.7085) == "70.9 %"  # markdown said 0.7085
    assert format_scalar("flop_rate", 51_266_003_676_574.0) == "51.3 TFLOP/s"
    assert format_scalar("times", 2.8) == "2.80×"
    assert format_scalar("coefficient", 0.5923) == "0.59"  # the title: "0.59", was "0.6"
    assert format_scalar("count", 1400, per_step=True) == "1,400/step"
    assert format_scalar("us", float("nan")) == "n/a"
    assert format_scalar("text", "host_untraced") == "host untraced"
    assert format_scalar("name", "triton_poi_fused_0") == "triton_poi_fused_0"


def test_evidence_texts_leave_out_empty_values_and_spread_a_cause() -> None:
    evidence = {
        "idle_us_per_step": 2470.0,
        "kernels": [],
        "nothing": None,
        # every collective kind unsized: an empty row in the tab (hta_sampled_2ranks)
        "busbw_gbps": {"all_gather": None, "all_reduce": None},
        "cause": {"us_per_step": 18562.7, "share_of_delay": 0.95, "top": [], "label": "x"},
    }
    assert evidence_texts(evidence) == [
        ("idle_us_per_step", "2.47 ms/step"),
        ("cause.us_per_step", "18.56 ms/step"),
        ("cause.share_of_delay", "95.0 %"),
        ("cause.label", "x"),
    ]


# --------------------------------------------------------------------------- raw numbers

_BARE = re.compile(r"[\u2212+-]?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")
_WHOLE = re.compile(r"[\u2212+-]?\d[\d,]*")
_FIELD = re.compile(r"([A-Za-z_][\w.]*) (.+)")


def raw_numbers(key: str, text: str) -> list[str]:
    """The bare numbers (no unit) in ``text``, an evidence value shown for ``key``, that
    should have one: any but a whole count or id and a dimensionless statistic (r², a
    coefficient of variation). Values of a mapping (``a: 1, b: 2``) are judged by
    ``key``; fields of a record (``t_us 1.50 ms, step #2``, records split by ``<br>`` or
    ``; ``) by their own name."""
    unit = unit_of(key.rpartition(".")[2])[0]
    if unit in ("name", "text"):  # shapes, names and words: their digits are no figures
        return []
    bad: list[str] = []
    for atom in re.split(r",\s|;\s|<br>|:\s", text):
        atom = atom.strip()
        field = _FIELD.fullmatch(atom)
        own_unit, value = (unit, atom)
        if field and not _BARE.fullmatch(atom):
            own_unit, value = unit_of(field.group(1))[0], field.group(2)
        if not _BARE.fullmatch(value) or own_unit in ("name", "text"):
            continue
        if own_unit == "coefficient" or (own_unit in ("count", "id") and _WHOLE.fullmatch(value)):
            continue
        bad.append(atom)
    return bad


def test_raw_numbers_are_found_where_a_unit_is_due() -> None:
    """What the issue saw: markdown's ``5.127e+13`` and ``0.7085``, the tab's "2.8"
    (no ×) and a flop rate written as a count."""
    assert raw_numbers("achieved_flops_per_s", "5.127e+13") == ["5.127e+13"]
    assert raw_numbers("share_of_step", "0.7085") == ["0.7085"]
    assert raw_numbers("estimated_step_speedup_bf16", "2.8") == ["2.8"]
    assert raw_numbers("fp32_peak_flops_per_s", "67,000,000,000,000") == ["67,000,000,000,000"]
    assert raw_numbers("syncs_per_step_mean", "215.25") == ["215.25"]
    assert raw_numbers("largest", "t_us 1500.0, step #2<br>t_us 1.50 ms") == ["t_us 1500.0"]
    # a count, an id, a statistic, and numbers with their unit are fine
    assert raw_numbers("launches", "1,400") == []
    assert raw_numbers("rank", "1") == []
    assert raw_numbers("r2", "1.00") == []
    assert raw_numbers("events_per_step", "#2: 3, #3: 4") == []
    assert raw_numbers("calls_per_step", "cudaMalloc: 12/step") == []
    assert raw_numbers("shapes", "[[32, 64], []]") == []
    assert raw_numbers("groups", "op aten::mm, shapes [[32, 64]]") == []
    # every case from a real diagnosis passes (the made-up counts with a fraction do not)
    made_up = ("foo_count", "unknown_key")
    assert [(k, t) for k, _, t in _cases() if raw_numbers(k, t) and k not in made_up] == []
    assert sorted({k for k, _, t in _cases() if raw_numbers(k, t)}) == sorted(made_up)
