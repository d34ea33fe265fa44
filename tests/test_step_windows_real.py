"""Steady-state steps on the real host-ahead recordings of ``sample_logs``."""

from __future__ import annotations

from conftest import REPO

from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.trace.reader import read_trace


def test_real_host_ahead_runs_keep_their_steady_period() -> None:
    """``memory_fixed_async`` and ``stacks_healthy``: GPU-bound loops whose host runs
    ahead; the first window carries the unprofiled steps' GPU work (15.1 and 10.6 ms),
    the others are the GPU's period (15.12 ms in-process for the first)."""
    for run, backlog_ms, period_ms in (
        ("memory_fixed_async", (14.0, 16.0), (15.0, 15.3)),
        ("stacks_healthy", (9.5, 11.5), (10.5, 11.6)),
    ):
        [path] = sorted((REPO / "sample_logs" / run).glob("*.pt.trace.json.gz"))
        index = build_index(read_trace(str(path)))
        [left] = index.left_out_steps
        assert left.reason == "gpu_backlog"
        assert backlog_ms[0] <= left.backlog_ns / 1e6 <= backlog_ms[1]
        period = index.steps.dur_ns / 1e6
        assert len(period) == 4
        assert period_ms[0] <= period.min() and period.max() <= period_ms[1]
