"""The tests of ``test_trace_quality.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SAMPLE_LOGS, as_json
from test_trace_quality import _ids

from tb_kineto_insights.summary import summarize_file


def _summary_of(run: str) -> dict[str, Any]:
    files = sorted((SAMPLE_LOGS / run).glob("*.pt.trace.json.gz"))
    assert files, f"no trace in sample_logs/{run}"
    return as_json(summarize_file(str(files[0])))


def test_real_blocking_recording_gets_the_diagnosis() -> None:
    s = _summary_of("capture_blocking")
    q = s["health"]["trace_quality"]["launch_blocking"]
    assert q["launches"] >= 20
    assert q["fraction"] >= 0.9
    assert "trace_cuda_launch_blocking" in _ids(s)


@pytest.mark.parametrize("run", ["capture_light", "capture_full", "memory_fixed_async"])
def test_real_healthy_recordings_have_no_blocking(run: str) -> None:
    s = _summary_of(run)
    q = s["health"]["trace_quality"]["launch_blocking"]
    assert q["launches"] >= 20
    assert q["fraction"] < 0.5
    assert "trace_cuda_launch_blocking" not in _ids(s)
