"""Forged but schema-valid cache content (issue 47, item 10): what fits the schema and
the checksum but no analysis can produce is refused on decode (named), and what passes
the checks cannot crash the diff or the run view with an untyped error."""

from __future__ import annotations

import copy
import random
from types import SimpleNamespace
from typing import Any

import msgspec
from conftest import fuzzer_module, real_summary

from tb_kineto_insights import schema
from tb_kineto_insights.compare.diff import diff
from tb_kineto_insights.compare.diff_efficiency import _efficiency_groups
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.store.checked import summary_problem
from tb_kineto_insights.summary import summarize_run


def _summary(doc: dict[str, Any]) -> Summary:
    return schema.summary_decoder().decode(msgspec.json.encode(doc))


def test_a_table_claiming_more_steps_than_the_span_is_refused() -> None:
    doc = real_summary()
    assert summary_problem(_summary(doc)) is None
    forged = copy.deepcopy(doc)
    forged["tables"]["kernels"]["steps"] = 3 * 10**7  # the diff padded every row: 9 s
    problem = summary_problem(_summary(forged))
    assert problem is not None and "tables.kernels.steps = 30000000 is out of range" in problem


def test_a_table_row_of_the_wrong_length_is_refused() -> None:
    doc = real_summary()
    rows = doc["tables"]["kernels"]["rows"]
    assert rows, "the tiny trace has kernels"
    rows[0]["per_step_time_us"] = rows[0]["per_step_time_us"] * 3
    problem = summary_problem(_summary(doc))
    assert problem is not None and "tables.kernels.rows[0] holds" in problem


def test_a_time_that_rounds_to_zero_seconds_is_no_division_by_zero() -> None:
    """``5e-324`` µs is > 0 but 0.0 s: the achieved FLOP/s divided by it."""
    row = SimpleNamespace(
        op="aten::mm",
        shapes="[[2, 2], [2, 2]]",
        dtype="float",
        time_us_per_step=5e-324,
        flops_per_call=1e12,
        calls_per_step=1,
        roof_fraction=None,
    )
    side = [("w/1", SimpleNamespace(efficiency=SimpleNamespace(rows=[row])))]
    pooled = _efficiency_groups(side)  # type: ignore[arg-type]
    assert [v["achieved_flops_per_s"] for v in pooled.values()] == [None]


def test_forged_numbers_give_no_untyped_error() -> None:
    """A seeded structure-aware fuzz: 1 to 3 numbers of a real summary set to hostile
    values; what the checks pass goes through the diff both ways and the run view:
    a ValueError (the input's problem) at most."""
    doc = real_summary()
    base = _summary(doc)
    rng = random.Random(47)
    untyped: list[str] = []
    for _ in range(300):
        forged = copy.deepcopy(doc)
        fuzzer_module().forge_numbers(forged, rng)  # 1-3 numbers set to hostile values
        try:
            summary = _summary(forged)
        except msgspec.ValidationError:
            continue
        if summary_problem(summary) is not None:
            continue
        try:
            diff([("a/1", base)], [("b/1", summary)])
            diff([("b/1", summary)], [("a/1", base)])
            msgspec.json.encode(summarize_run([("w0", base), ("w1", summary)]))
        except ValueError:
            continue
        except Exception as exc:  # noqa: BLE001 (collected: the assertion names them)
            untyped.append(f"{type(exc).__name__}: {exc}")
    assert untyped == []
