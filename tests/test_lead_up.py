"""What a rank did before each collective (``analysis/lead_up.py``): exact parts on a
tiny one-rank trace, and the real h200x2 ``ddp_straggler`` whose rank 1 sleeps before
``backward()``. Real traces: ``test_lead_up_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.analysis.lead_up import LEAD_UP_PARTS
from tb_kineto_insights.analysis.straggler_cause import straggler_cause
from tb_kineto_insights.summary import summarize_file

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
IDLE_CAUSES = [p for p in LEAD_UP_PARTS if p not in ("gpu_compute", "memcpy", "communication")]


def _runtime(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    ev = cpu(name, ts, dur, cat="cuda_runtime")
    ev["args"] = {"correlation": corr}
    return ev


def _allreduce(ts: float, dur: float, corr: int) -> dict[str, Any]:
    ev = kernel(AR, ts, dur, stream=20, corr=corr)
    ev["args"].update({"Collective name": "allreduce", "Group size": 2})
    return ev


def _trace(tmp_path: Path) -> Any:
    """One step [0, 2000) µs: ``gemm`` [100, 400) launched at 80 (10 µs), a memcpy
    [400, 450) (cudaMemcpyAsync at 390), all-reduce A [700, 1000) launched at 600,
    ``gemm2`` [1100, 1300) launched at 1000, all-reduce B [1400, 1600) launched at 1300."""
    memcpy = kernel("Memcpy HtoD (Pageable -> Device)", 400, 50, corr=2)
    memcpy["cat"] = "gpu_memcpy"
    events = [
        cpu("ProfilerStep#1", 0, 2000, cat="user_annotation"),
        _runtime("cudaLaunchKernel", 80, 10, 1),
        kernel("gemm", 100, 300, corr=1),
        _runtime("cudaMemcpyAsync", 390, 5, 2),
        memcpy,
        _runtime("cudaLaunchKernel", 600, 10, 3),
        _allreduce(700, 300, 3),
        _runtime("cudaLaunchKernel", 1000, 10, 4),
        kernel("gemm2", 1100, 200, corr=4),
        _runtime("cudaLaunchKernel", 1300, 10, 5),
        _allreduce(1400, 200, 5),
    ]
    path = write_trace(tmp_path / "r0.json", events, distributedInfo={"rank": 0, "world_size": 2})
    return summarize_file(str(path))


def test_lead_up_parts_by_hand(tmp_path: Path) -> None:
    a, b = _trace(tmp_path).communication.sequence
    # A: from the step start to 700: gemm 300, memcpy 50, idle 350 ([0, 100), [450, 700))
    up = a.lead_up_us
    assert up["gpu_compute"] == 300.0 and up["memcpy"] == 50.0
    assert sum(up.get(c, 0.0) for c in IDLE_CAUSES) == pytest.approx(350.0)
    assert "communication" not in up
    # the launch call of gemm (80-90); not the memcpy's call, not the all-reduce's
    assert up["launch_api"] == 10.0 and a.lead_up_kernels == 1
    # the disjoint parts fill the window
    assert sum(v for k, v in up.items() if k != "launch_api") == pytest.approx(700.0)
    # B: from A's end (1000) to 1400: gemm2 200, idle 200, gemm2's launch call 10
    up = b.lead_up_us
    assert up["gpu_compute"] == 200.0 and "memcpy" not in up
    assert sum(up.get(c, 0.0) for c in IDLE_CAUSES) == pytest.approx(200.0)
    assert up["launch_api"] == 10.0 and b.lead_up_kernels == 1


def test_first_collective_outside_the_steps_has_no_lead_up(tmp_path: Path) -> None:
    events = [
        _runtime("cudaLaunchKernel", 10, 10, 1),
        _allreduce(50, 100, 1),  # before the step
        cpu("ProfilerStep#1", 200, 1000, cat="user_annotation"),
        _runtime("cudaLaunchKernel", 300, 10, 2),
        kernel("gemm", 320, 100, corr=2),
        _runtime("cudaLaunchKernel", 430, 10, 3),
        _allreduce(500, 100, 3),
    ]
    path = write_trace(tmp_path / "o.json", events, distributedInfo={"rank": 0, "world_size": 2})
    first, second = summarize_file(str(path)).communication.sequence
    assert first.lead_up_us is None and first.lead_up_kernels is None
    # the second runs from the first's end (150): gemm 100 µs in [150, 500)
    assert second.lead_up_us["gpu_compute"] == 100.0
    assert sum(v for k, v in second.lead_up_us.items() if k != "launch_api") == 350.0


def test_without_lead_ups_the_cause_falls_back_to_whole_steps(tmp_path: Path) -> None:
    """No late collectives given (or none with a lead-up): the same classes over whole
    steps, ``basis`` says so."""
    from test_straggler_cause import _rank

    r0, r1 = _rank(tmp_path, 0, 0.0)[1], _rank(tmp_path, 1, 400.0)[1]
    cause = straggler_cause(r1, [r0], 400.0)
    assert cause is not None and cause["basis"] == "whole_step"
    assert cause["late_collectives"] == 0
    assert cause["class"] == "gpu_compute" and cause["us_per_step"] == pytest.approx(400.0)
    assert cause["classes"]["launches"] == 0.0
    no_lead = [(r1.communication.sequence[0], [])]
    assert straggler_cause(r1, [r0], 400.0, late_collectives=no_lead)["basis"] == "whole_step"
