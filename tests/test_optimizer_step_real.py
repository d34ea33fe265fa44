"""The tests of ``test_optimizer_step.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import json
from typing import Any

from conftest import REPO, as_json

from tb_kineto_insights.summary import summarize_file


def _recorded(run: str) -> dict[str, Any]:
    (path,) = (REPO / "sample_logs" / run).glob("*.pt.trace.json.gz")
    return as_json(summarize_file(str(path)))


def test_recorded_per_param_adam_fires_within_a_quarter_of_its_measured_cost() -> None:
    """``optimizer_per_param`` (Adam foreach=False, 200 tensors): the claimed share is
    within 25 % of the cost measured against each twin on the same profiled steps
    (1 − twin's step / this step, ``verdicts.costs``), and the twins stay quiet."""
    info = json.loads((REPO / "sample_logs" / "recording_info.json").read_text())
    costs = info["verdicts"]["costs"]
    s = _recorded("optimizer_per_param")
    bound = next(d for d in s["diagnoses"] if d["id"] == "optimizer_step_bound")
    assert bound["evidence"]["mode"] == "per_parameter"
    assert bound["evidence"]["kernels_per_step"] == 1400.0  # 7 kernels × 200 tensors
    for twin in ("optimizer_foreach", "optimizer_fused"):
        measured = costs[f"optimizer_per_param-{twin}"]["profiled_cost_fraction"]
        assert abs(bound["impact_fraction"] - measured) <= 0.25 * measured
        quiet = _recorded(twin)
        assert "optimizer_step_bound" not in {d["id"] for d in quiet["diagnoses"]}
        assert quiet["idle"]["devices"][0]["optimizer"]["mode"] == twin.split("_")[1]
