"""The tests of ``test_analysis.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

from conftest import as_json


def test_trace_data_loss_on_real_trace(shared_traces: Path) -> None:
    from tb_kineto_insights.summary import summarize_file

    s = as_json(summarize_file(str(shared_traces / "hta_nccl_a100" / "nccl_data.json.gz")))
    loss = next(d for d in s["diagnoses"] if d["id"] == "trace_data_loss")
    assert loss["evidence"]["kineto_record_counts"]["Out-of-range"] == 4181
