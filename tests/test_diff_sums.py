"""The diff's breakdown rows add up to the step-time change, and its idle rows to the
change of idle time: every category of the step breakdown (``other`` included) and every
cause of the Idle panel has a row, on tiny traces (exact) and on every sample pair.
Real traces: ``test_diff_sums_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis.host_activity import CAUSE_NAMES as CAUSES
from tb_kineto_insights.analysis.overview import BREAKDOWN_ORDER
from tb_kineto_insights.compare.before_after import compare, load_side


def _rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["key"]: m for m in doc["metrics"]}


def _check_sums(doc: dict[str, Any], base: Path, exp: Path) -> None:
    rows = _rows(doc)
    step = rows["step_time_us"]
    breakdown = [rows[f"breakdown.{c}_us"] for c in BREAKDOWN_ORDER]
    # every category's row, on both sides: the sums are of the same steps' numbers
    assert sum(r["base"] for r in breakdown) == pytest.approx(step["base"], rel=1e-6, abs=0.01)
    assert sum(r["exp"] for r in breakdown) == pytest.approx(step["exp"], rel=1e-6, abs=0.01)
    assert sum(r["delta"] for r in breakdown) == pytest.approx(step["delta"], rel=1e-6, abs=0.02)
    idle_rows = [rows[f"idle.{c}_us"] for c in CAUSES]

    def mean_idle(side: Path) -> float:
        values = []
        for _, s in load_side(str(side)).summaries:
            dev = next(d for d in s.idle.devices if d.device == s.idle.main_device)
            values += [x.idle_us for x in dev.per_step]
        return sum(values) / len(values)

    b_idle, e_idle = mean_idle(base), mean_idle(exp)
    assert sum(r["base"] for r in idle_rows) == pytest.approx(b_idle, rel=1e-6, abs=0.01)
    assert sum(r["delta"] for r in idle_rows) == pytest.approx(e_idle - b_idle, rel=1e-6, abs=0.02)


def _steps(folder: Path, gap_us: float) -> Path:
    """3 steps of 100 + ``gap_us`` µs: a 40 µs kernel from 10 µs in, nothing recorded
    on the host after the launch (the rest of the step is ``other``)."""
    events: list[dict[str, Any]] = []
    for n in range(3):
        t0 = 1000.0 + n * 1000.0
        events.append(cpu(f"ProfilerStep#{n + 1}", t0, 100.0 + gap_us, cat="user_annotation"))
        launch = cpu("cudaLaunchKernel", t0 + 5.0, 2.0, cat="cuda_runtime")
        launch["args"] = {"correlation": n + 1}
        events.append(launch)
        events.append(kernel("k", t0 + 10.0, 40.0, corr=n + 1))
    return write_trace(folder / "w.1.pt.trace.json", events)


def test_other_row_holds_unrecorded_time_exact(tmp_path: Path) -> None:
    _steps(tmp_path / "base", 0.0)
    _steps(tmp_path / "exp", 300.0)
    doc = as_json(compare(load_side(str(tmp_path / "base")), load_side(str(tmp_path / "exp"))))
    rows = _rows(doc)
    assert rows["step_time_us"]["delta"] == pytest.approx(300.0)
    # the whole change is time where nothing was recorded: the "other" row holds it
    assert rows["breakdown.other_us"]["base"] == pytest.approx(100.0 - 40.0 - 2.0)
    assert rows["breakdown.other_us"]["delta"] == pytest.approx(300.0)
    assert rows["breakdown.kernel_us"]["delta"] == pytest.approx(0.0)
    assert rows["breakdown.other_us"]["verdict"] == "regressed"
    # and the GPU idles meanwhile with nothing open on the launching thread
    assert rows["idle.nothing_recorded_us"]["delta"] + rows["idle.host_untraced_us"][
        "delta"
    ] == pytest.approx(300.0)
    _check_sums(doc, tmp_path / "base", tmp_path / "exp")


def test_unchanged_runs_sum_to_zero(tmp_path: Path) -> None:
    _steps(tmp_path / "base", 50.0)
    _steps(tmp_path / "exp", 50.0)
    doc = as_json(compare(load_side(str(tmp_path / "base")), load_side(str(tmp_path / "exp"))))
    assert all(
        m["delta"] == 0 for m in doc["metrics"] if m["key"].startswith(("breakdown.", "idle."))
    )
    _check_sums(doc, tmp_path / "base", tmp_path / "exp")
