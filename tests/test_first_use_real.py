"""The tests of ``test_first_use.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SAMPLE_LOGS, as_json, require_dir

from tb_kineto_insights.cli.main import main
from tb_kineto_insights.compare import before_after as compare
from tb_kineto_insights.schema import DiffDocument


def test_report_on_the_ddp_sample_names_its_run_ddp(capsys: pytest.CaptureFixture[str]) -> None:
    ddp = require_dir(SAMPLE_LOGS, "sample_logs/") / "ddp"
    assert main(["report", str(ddp)]) == 0
    text = capsys.readouterr().out
    assert "== run ddp\n" in text
    assert "ddp/rank0/1795950492927038015" in text
    assert "== run .\n" not in text and "./rank0" not in text


@pytest.fixture(scope="module")
def sample_diffs() -> dict[str, DiffDocument]:
    logs = require_dir(SAMPLE_LOGS, "sample_logs/")

    def pair(a: str, b: str) -> DiffDocument:
        return compare.compare(compare.load_side(str(logs / a)), compare.load_side(str(logs / b)))

    return {
        "loader": pair("dataloader_workers0", "dataloader_workers4"),
        "compile": pair("transformer_eager", "transformer_compile"),
    }


def test_dataloader_workers_diff_moves_the_transforms_out(
    sample_diffs: dict[str, dict[str, Any]],
) -> None:
    """workers0 → workers4: the data transforms (aten::stack, aten::cat, …) leave the
    traced process for the DataLoader workers: 'moved out', no 'improved'."""
    doc = as_json(sample_diffs["loader"])
    removed = {r["name"]: r for r in doc["ops"]["removed"]}
    assert {"aten::stack", "aten::cat", "aten::mkldnn_convolution"} <= set(removed)
    assert {r["status"] for r in removed.values()} == {"moved_out"}
    assert {r["time_us_per_step"]["verdict"] for r in removed.values()} == {"moved out"}
    # measured: aten::stack 11.45 ms /step in workers0
    assert 9_000 < removed["aten::stack"]["time_us_per_step"]["base"] < 14_000
    util = {m["key"]: m for m in doc["metrics"]}["gpu_utilization_fraction"]
    # the ratio of totals, as `report` prints it (34.8 %, not the 35.1 % mean of ratios)
    assert util["base"] == pytest.approx(0.348, abs=0.002)
    assert "CPU ops removed, or moved out of the traced threads" in compare.diff_text(
        sample_diffs["loader"]
    )


def test_compile_diff_lists_triton_kernels_as_added(
    sample_diffs: dict[str, dict[str, Any]],
) -> None:
    """transformer_eager → transformer_compile: the Triton kernels are new, not
    'regressed'; the eager layer-norm kernels are removed, not 'improved'."""
    doc = as_json(sample_diffs["compile"])
    added = doc["kernels"]["added"]
    triton = [r for r in added if r["name"].startswith("triton_")]
    assert len(triton) >= 5
    assert {r["status"] for r in added} == {"added"}
    assert {r["time_us_per_step"]["verdict"] for r in added} == {"added"}
    removed = doc["kernels"]["removed"]
    assert any("layer_norm" in r["name"] for r in removed)
    assert {r["status"] for r in removed} == {"removed"}  # kernels never 'move out'
    assert not any(
        r["verdict"] in ("improved", "regressed") and r["name"].startswith("triton_")
        for r in doc["largest_changes"]
    )
