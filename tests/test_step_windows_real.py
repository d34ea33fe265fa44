"""Steady-state steps on the real host-ahead recordings of ``sample_logs``."""

from __future__ import annotations

import pytest
from conftest import REPO, as_json

from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.cli.main import EXIT_OK, EXIT_REGRESSION, main
from tb_kineto_insights.summary import summarize_file
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


def test_the_diff_and_check_stand_on_the_steady_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 44's must-hold: ``empty_cache_removed``'s host runs ahead (its first window
    carries a GPU backlog, left out), ``empty_cache_every_step`` syncs in every step and
    is 2.4 % slower unprofiled (64.82 against 63.30 ms, README): the diff says "slower"
    on the steady steps (63.28 → 65.14 ms, 2.9 %), and ``check`` fails it at a 2 % limit
    and passes it at 5 %."""
    base = str(REPO / "sample_logs" / "empty_cache_removed")
    exp = str(REPO / "sample_logs" / "empty_cache_every_step")
    assert main(["diff", base, exp]) == EXIT_OK
    out = capsys.readouterr().out
    assert "step time 63.28 ms -> 65.14 ms  (1.03x slower)  [regressed]" in out
    assert main(["check", base, exp, "--max-step-time-regression", "2%"]) == EXIT_REGRESSION
    assert "step time regressed 2.9 %" in capsys.readouterr().out
    assert main(["check", base, exp, "--max-step-time-regression", "5%"]) == EXIT_OK


def test_a_backlog_run_reads_as_its_steady_steps() -> None:
    """``backlog_mlp_fp32``: fp32 GEMMs off tensor cores, the host ahead; the first
    window (the unprofiled steps' GPU backlog) is left out, the fp32 GEMMs are nearly
    the whole steady step (125.4 ms, as unprofiled), and no warm-up note blames the
    profiler."""
    [path] = sorted((REPO / "sample_logs" / "backlog_mlp_fp32").glob("*.pt.trace.json.gz"))
    s = as_json(summarize_file(str(path)))
    assert [w["reason"] for w in s["steps"]["left_out"]] == ["gpu_backlog"]
    assert 124_000 <= s["steps"]["mean_step_us"] <= 127_000
    ids = [d["id"] for d in s["diagnoses"]]
    assert "trace_warmup_step" not in ids
    [d] = [d for d in s["diagnoses"] if d["id"] == "matmul_without_tensor_cores"]
    assert d["evidence"]["share_of_step"] >= 0.9
    # the replayed fix against the bf16 run (10.91 ms unprofiled, 11.08 profiled)
    assert 10_500 <= d["prediction"]["predicted_step_us"] <= 12_000
