"""The tests of ``test_check.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import as_json

from tb_kineto_insights.cli.main import EXIT_OK, EXIT_REGRESSION, main
from tb_kineto_insights.compare import before_after as compare


def test_straggler_run_fails_check(h200x2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ddp_straggler (rank 1 sleeps before its backward: recording_info.json): the run-level
    diagnosis fails the check; one rank's trace alone has no view across ranks."""
    run = str(h200x2 / "ddp_straggler")
    assert main(["check", run, run, "--fail-on", "communication_straggler"]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "FAIL: diagnosis communication_straggler present in" in out
    assert "(all ranks)" in out and "Rank 1" in out
    rank0 = next((h200x2 / "ddp_straggler").glob("rank0.*.pt.trace.json.gz"))
    args = ["check", str(rank0), str(rank0), "--fail-on", "communication_straggler"]
    assert main(args) == EXIT_OK
    # balanced runs: no straggler, so the same gate passes
    for balanced in ("ddp_default", "ddp_tuned"):
        side = str(h200x2 / balanced)
        assert main(["check", side, side, "--fail-on", "communication_straggler"]) == EXIT_OK
    assert "OK: no limit crossed" in capsys.readouterr().out


def test_run_level_diagnoses_in_gained_lost(h200x2: Path) -> None:
    """One rank alone (no view across ranks) → the whole run: the straggler appears, as a
    run-level diagnosis; the other way round it disappears."""
    run = h200x2 / "ddp_straggler"
    rank0 = next(run.glob("rank0.*.pt.trace.json.gz"))
    one, both = compare.load_side(str(rank0)), compare.load_side(str(run))
    doc = compare.compare(one, both)
    assert "communication_straggler" in doc.diagnoses.appeared
    found = as_json(doc.diagnoses.found.exp)
    runs = [f for f in found if f["scope"] == "run"]
    assert sorted(f["id"] for f in runs) == ["communication_straggler", "exposed_communication"]
    assert {f["where"] for f in runs} == {"all ranks"}
    # rank 0's own exposed_communication is restated across ranks (as waiting): left out
    spans = [(f["id"], f["where"].partition("/")[0]) for f in found if f["scope"] == "span"]
    assert ("exposed_communication", "rank0") not in spans
    back = compare.compare(both, one)
    assert "communication_straggler" in back.diagnoses.disappeared
    assert "communication_straggler" in compare.diff_text(doc)
