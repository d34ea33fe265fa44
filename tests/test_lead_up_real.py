"""The tests of ``test_lead_up.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import H200X2

from tb_kineto_insights.summary import summarize_file


def test_ddp_straggler_lead_up_holds_the_sleep() -> None:
    """Before each step's first all-reduce, rank 1's lead-up holds 17.9-19.0 ms of host time
    outside traced ops (its 20 ms sleep), rank 0's ≈ 0.1 ms; the GPU compute before it
    is the same on both (5.6-6.5 ms)."""
    folder = H200X2 / "ddp_straggler"
    if not folder.is_dir():
        pytest.skip("../shared/traces/h200x2 is not there")
    r0, r1 = (summarize_file(str(p)) for p in sorted(folder.glob("rank*.pt.trace.json.gz")))
    firsts = []
    for s in (r0, r1):
        seen: set[Any] = set()
        firsts.append(
            [e for e in s.communication.sequence if not (e.step in seen or seen.add(e.step))]
        )
    for a, b in zip(*firsts, strict=True):
        assert a.lead_up_us["host_untraced"] < 1_000
        assert 17_000 < b.lead_up_us["host_untraced"] < 20_000
        assert abs(a.lead_up_us["gpu_compute"] - b.lead_up_us["gpu_compute"]) < 100
