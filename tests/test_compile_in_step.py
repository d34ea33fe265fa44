"""``compile_in_step`` and the ``compiling`` idle cause: exact numbers on tiny traces.
Real traces: ``test_compile_in_step_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace
from test_analysis import launch, step

from tb_kineto_insights.analysis.compile_events import compile_facts
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace


def _compiled_fn(ts: float, dims: list[Any]) -> dict[str, Any]:
    ev = cpu("CompiledFunction", ts, 5)
    ev["args"] = {"Input Dims": dims, "Input type": ["float"] * len(dims)}
    return ev


def _steps(compiling: set[int], n: int = 3) -> list[dict[str, Any]]:
    """``n`` steps of 1000 µs: K1 [10, 20) launched at [2, 4); in the steps of
    ``compiling`` Dynamo compiles [30, 830) (``dynamo`` with its ``compile_id=0/k``
    annotation, a sync inside it at [500, 510)), then the compiled graph runs
    (``CompiledFunction`` with input dims [8, 100 + k]) and K2 [900, 950) launched at
    [880, 882); elsewhere K2 runs right after K1."""
    events: list[dict[str, Any]] = []
    for k in range(n):
        b = 1000.0 * k
        events += [step(k + 1, b, 1000), launch(b + 2, 2, 10 * k + 1)]
        events.append(kernel("K1", b + 10, 10, corr=10 * k + 1))
        if k in compiling:
            events += [
                cpu("dynamo", b + 30, 800),
                cpu(f"dynamo_data: compile_id=0/{k}", b + 31, 1, cat="user_annotation"),
                cpu("compile_fx_inner (dynamo_timed)", b + 100, 600),
                cpu("aten::item", b + 495, 20),
                launch(b + 500, 10, 9000 + k, name="cudaStreamSynchronize"),
                _compiled_fn(b + 850, [[8, 100 + k], [16]]),
                launch(b + 880, 2, 10 * k + 2),
                kernel("K2", b + 900, 50, corr=10 * k + 2),
            ]
        else:
            events += [launch(b + 12, 2, 10 * k + 2), kernel("K2", b + 20, 50, corr=10 * k + 2)]
    return events


def _summary(tmp_path: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    return as_json(summarize_trace(read_trace(str(write_trace(tmp_path / "t.json", events)))))


def test_compile_in_every_step_is_named_with_its_shapes(tmp_path: Path) -> None:
    """Compiling in all 3 steps: the gap [20, 900) of each step is 880 µs, 870 of them
    while the host compiles ([30, 830): the sync inside the compile is the compile's,
    not a host sync) and 50 launching after it: ``compiling`` 800 µs a step (80 %),
    high; 3 compiles (0/0 … 0/2), 3 distinct input shapes ([8, 100] … [8, 102])."""
    s = _summary(tmp_path, _steps({0, 1, 2}))
    dev = s["idle"]["devices"][0]
    assert dev["causes"]["compiling"]["us"] == pytest.approx(3 * 800.0)
    assert dev["causes"]["host_sync"]["us"] == 0.0 and dev["sync_opened_gaps"] == 0
    d = next(d for d in s["diagnoses"] if d["id"] == "compile_in_step")
    assert d["severity"] == "high" and d["impact_fraction"] == pytest.approx(0.8)
    assert d["evidence"]["compile_ids"] == ["0/0", "0/1", "0/2"]
    assert d["evidence"]["compiles"] == 3 and d["evidence"]["steps_compiling"] == 3
    assert d["evidence"]["compile_host_us_per_step"] == pytest.approx(800.0)
    assert d["evidence"]["distinct_input_shapes"] == 3
    assert d["evidence"]["varying_inputs"] == {"0": [[8, 100], [8, 101], [8, 102]]}
    assert "3 compiles (0/0 … 0/2) in 3 of 3 steps" in d["title"]
    assert "3 distinct input shapes ([8, 100] … [8, 102])" in d["title"]
    assert "mark_dynamic" in d["recommendation"]
    ids = {x["id"] for x in s["diagnoses"]}
    assert "gpu_idle_host_sync" not in ids and "low_gpu_utilization" not in ids


def test_one_compile_in_a_longer_profile_is_warm_up(tmp_path: Path) -> None:
    """A compile in the first of 3 steps only: a one-off (the warm-up that
    ``trace_warmup_step`` names), not a steady cost: no ``compile_in_step``; the idle
    is still the ``compiling`` cause's."""
    events = _steps({0})
    facts = compile_facts(build_index(read_trace(str(write_trace(tmp_path / "f.json", events)))))
    assert facts.steps_compiling == 1 and facts.compile_ids == ["0/0"]
    s = _summary(tmp_path, events)
    assert s["idle"]["devices"][0]["causes"]["compiling"]["us"] == pytest.approx(800.0)
    assert "compile_in_step" not in {d["id"] for d in s["diagnoses"]}


def test_no_compile_no_compiling(tmp_path: Path) -> None:
    s = _summary(tmp_path, _steps(set()))
    assert s["idle"]["devices"][0]["causes"]["compiling"]["us"] == 0.0
    assert "compile_in_step" not in {d["id"] for d in s["diagnoses"]}
