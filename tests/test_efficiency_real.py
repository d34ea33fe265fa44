"""The tests of ``test_efficiency.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, require_dir
from test_efficiency import F32

from tb_kineto_insights.analysis.efficiency import launching_op
from tb_kineto_insights.analysis.efficiency_cost import op_work
from tb_kineto_insights.analysis.enclosing_op import innermost_op
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.compare.before_after import diff_text
from tb_kineto_insights.compare.diff import diff
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace.reader import read_trace

SAMPLES = REPO / "sample_logs"


def _summary(run: str) -> Any:
    folder = require_dir(SAMPLES / run, f"sample_logs/{run}")
    return summarize_file(str(next(folder.glob("*.pt.trace.json.gz"))))


def _info(run: str) -> dict[str, Any]:
    info = json.loads((SAMPLES / "recording_info.json").read_text(encoding="utf-8"))
    runs: dict[str, Any] = info["efficiency"]["runs"]
    return runs[run]  # type: ignore[no-any-return]


def _ids(summary: Any) -> set[str]:
    return {d.id for d in summary.diagnoses}


def test_fp32_mlp_every_gemm_kernel_attributed_and_verdict() -> None:
    s = _summary("eff_mlp_fp32")
    gemm_rows = [r for r in s.efficiency.rows if r.category == "matmul"]
    assert {r.op for r in gemm_rows} == {"aten::mm", "aten::addmm"}
    assert all(r.cuda_cores and r.unit == "fp32" for r in gemm_rows)
    # every GEMM kernel of the trace sits in an mm/addmm row: their time equals the
    # trace's total time in GEMM-named kernels
    gemm_us = sum(r.time_us_per_step for r in gemm_rows)
    trace = read_trace(str(next((SAMPLES / "eff_mlp_fp32").glob("*.gz"))))
    k = trace.kernels
    is_gemm = np.array(["gemm" in trace.names[i].lower() for i in k.name])
    named = float(k.dur_ns[is_gemm].sum()) / 1000.0 / s.efficiency.steps
    assert is_gemm.sum() == sum(r.calls_per_step for r in gemm_rows) * s.efficiency.steps
    assert gemm_us == pytest.approx(named, rel=1e-3)
    d = next(d for d in s.diagnoses if d.id == "matmul_without_tensor_cores")
    assert d.impact_fraction >= 0.8 and d.severity == "high"
    # estimated fp32 → bf16 step ratio within 1.5x of the measured one (CUDA events)
    measured = _info("eff_mlp_fp32")["step_ms"] / _info("eff_mlp_bf16")["step_ms"]
    estimated = d.evidence["estimated_step_speedup_bf16"]
    assert measured / 1.5 <= estimated <= measured * 1.5


@pytest.mark.parametrize(
    "run", ["eff_mlp_tf32", "eff_mlp_bf16", "eff_gemm_aligned", "eff_conv_bf16"]
)
def test_tensor_core_runs_are_quiet(run: str) -> None:
    s = _summary(run)
    assert not {"matmul_without_tensor_cores", "low_kernel_efficiency"} & _ids(s)
    rows = [r for r in s.efficiency.rows if r.category in ("matmul", "conv")]
    assert rows and all(not r.cuda_cores and (r.roof_fraction or 0) > 0.5 for r in rows)


def test_odd_gemm_low_efficiency_skinny_memory_bound() -> None:
    odd = _summary("eff_gemm_odd")
    d = next(d for d in odd.diagnoses if d.id == "low_kernel_efficiency")
    assert d.severity == "high" and 0.5 <= d.impact_fraction <= 0.9
    assert "multiple of 8" in (d.evidence["groups"][0]["reason"] or "")
    skinny = _summary("eff_gemm_skinny")
    row = skinny.efficiency.rows[0]
    assert row.bound == "memory" and 0.6 <= (row.roof_fraction or 0) <= 1.0
    assert "low_kernel_efficiency" not in _ids(skinny)


@pytest.mark.parametrize(
    ("run", "op"),
    [
        ("eff_mlp_fp32", "aten::addmm"),
        ("eff_mlp_tf32", "aten::addmm"),
        ("eff_gemm_aligned", "aten::mm"),
        ("eff_gemm_odd", "aten::mm"),
        ("eff_gemm_skinny", "aten::mm"),
        ("eff_conv_bf16", "aten::cudnn_convolution"),
    ],
)
def test_achieved_rate_within_15_percent_of_event_timed(run: str, op: str) -> None:
    """The event-timed op of each run (``recording_info.json``) against our row of the
    same op and shapes. (``eff_mlp_bf16`` is left out: its event-timed ``F.linear`` under
    autocast also times the two casts to bf16, which the trace shows as ``aten::copy_``.)"""
    timed = _info(run)["event_timed"]
    s = _summary(run)
    rows = [
        r for r in s.efficiency.rows if r.op == op and r.flops_per_call == timed["flops_per_call"]
    ]
    assert len(rows) == 1
    ours = rows[0].achieved_flops_per_s or 0.0
    assert ours == pytest.approx(timed["tflops_per_s"] * 1e12, rel=0.15)


def test_launch_bound_and_compiled_runs_stay_quiet() -> None:
    for run in ("transformer_eager", "transformer_compile"):
        s = _summary(run)
        found = [
            d
            for d in s.diagnoses
            if d.id in ("matmul_without_tensor_cores", "low_kernel_efficiency")
        ]
        assert all(d.severity not in ("high", "medium") for d in found), run


@pytest.mark.parametrize(
    "run", ["transformer_eager", "transformer_compile", "eff_mlp_fp32", "shared:ddp_default"]
)
def test_external_id_names_the_innermost_launching_op(run: str, h200x2: Path) -> None:
    """The fast path of launching_op (the kernel's External id) gives, for every kernel,
    the op the definition gives: correlation → runtime call → innermost op."""
    if run.startswith("shared:"):
        path = next((h200x2 / run.removeprefix("shared:")).glob("rank0*.json.gz"))
    else:
        path = next((SAMPLES / run).glob("*.json.gz"))
    trace = read_trace(str(path))
    index = build_index(trace)
    rows = np.arange(len(trace.kernels), dtype=np.int64)
    fast = launching_op(index, rows)
    launch = index.launch_row["kernel"]
    ok = launch >= 0
    rt = trace.runtime
    slow = innermost_op(
        trace.cpu_ops, rt.pid[launch[ok]], rt.tid[launch[ok]], rt.start_ns[launch[ok]]
    )
    assert ok.sum() > 100 and (slow >= 0).all()
    assert np.array_equal(fast[ok], slow)


def test_diff_rows_match_op_groups_across_dtypes() -> None:
    """fp32 MLP → the same under bf16 autocast: the mm group (same op and shapes) is
    one row, fp32 → bf16, its TFLOP/s before → after; the verdict is lost."""
    base, exp = _summary("eff_mlp_fp32"), _summary("eff_mlp_bf16")
    doc = diff([("w", base)], [("w", exp)])
    mm = next(r for r in doc.efficiency if r.op == "aten::mm")
    assert (mm.base_dtype, mm.exp_dtype) == ("fp32", "bf16")
    b_row = next(r for r in base.efficiency.rows if r.op == "aten::mm")
    e_row = next(r for r in exp.efficiency.rows if r.op == "aten::mm")
    assert mm.base_achieved_flops_per_s == pytest.approx(b_row.achieved_flops_per_s)
    assert mm.exp_achieved_flops_per_s == pytest.approx(e_row.achieved_flops_per_s)
    assert mm.exp_time_us_per_step == e_row.time_us_per_step
    assert "matmul_without_tensor_cores" in doc.diagnoses.disappeared
    text = diff_text(doc)
    assert "fp32 -> bf16  aten::mm" in text and "[improved]" in text


def test_torch_writes_no_flops_arg_and_its_own_count_equals_ours() -> None:
    """``with_flops=True`` on torch 2.11 (the recordings' torch): no event of any trace
    carries a ``flops`` (or Inductor's ``kernel_flop``) arg, so the formulas are what
    counts. The profiler's own count (``FunctionEvent.flops``, kept by
    ``record_efficiency.py`` under ``profiler_flops``) equals our formula for every
    ``mm``/``addmm`` and, for ``conv2d``, our count of the ``cudnn_convolution`` it
    launches with the same input and weight shapes."""
    runs = {k: v for k, v in _all_info().items() if "trace_flops_args" in v}
    assert len(runs) >= 11
    gemms = convs = 0
    for run, rec in runs.items():
        args = rec["trace_flops_args"]
        assert args["events_with_flops_arg"] == 0 and args["events_with_kernel_flop_arg"] == 0
        assert "flops" not in args["cpu_op_arg_keys"] and "Input Dims" in args["cpu_op_arg_keys"]
        summary = None
        for e in rec["profiler_flops"]:
            shapes = e["input_shapes"]
            if e["op"] in ("aten::mm", "aten::addmm"):
                work = op_work(e["op"], shapes, [F32] * len(shapes))
                assert work is not None and work.flops == e["flops_per_call"], (run, e)
                gemms += 1
            elif e["op"] == "aten::conv2d":
                summary = summary or _summary(run)
                for r in summary.efficiency.rows:
                    if r.op == "aten::cudnn_convolution" and json.loads(r.shapes)[:2] == shapes[:2]:
                        assert r.flops_per_call == e["flops_per_call"], (run, e)
                        convs += 1
    assert gemms >= 40 and convs >= 35


def _all_info() -> dict[str, Any]:
    info = json.loads((SAMPLES / "recording_info.json").read_text(encoding="utf-8"))
    runs: dict[str, Any] = info["efficiency"]["runs"]
    return runs


def _diag(summary: Any, diag_id: str) -> Any:
    return next((d for d in summary.diagnoses if d.id == diag_id), None)


# -- attention on real recordings ----------------------------------------------------------


def test_sdpa_flops_attribution_and_verdicts() -> None:
    """Flash (causal) and memory-efficient (not causal) SDPA, bf16, forward + backward:
    each kernel sits in its attention op's row; our FLOPs are torch.utils.flop_counter's
    (which counts the whole square: half of it when causal) and the forward's rate is
    within 15 % of the event-timed one. The flash run (what attention reaches on this
    GPU) gets no efficiency verdict; the memory-efficient one is claimed at the flash
    rate, not more than the flash backend's time on the same work would save."""
    flash, eff = _summary("eff_sdpa_flash_bf16"), _summary("eff_sdpa_efficient_bf16")
    runs = {"eff_sdpa_flash_bf16": (flash, 0.5), "eff_sdpa_efficient_bf16": (eff, 1.0)}
    attention_us = {}
    for run, (s, causal_share) in runs.items():
        counter = _info(run)["flop_counter"]["forward_backward"]["by_op"]
        fwd_count = next(v for k, v in counter.items() if not k.endswith("_backward"))
        bwd_count = next(v for k, v in counter.items() if k.endswith("_backward"))
        rows = {r.op: r for r in s.efficiency.rows if r.category == "attention"}
        fwd = next(r for op, r in rows.items() if not op.endswith("_backward"))
        bwd = next(r for op, r in rows.items() if op.endswith("_backward"))
        assert fwd.flops_per_call == fwd_count * causal_share
        assert bwd.flops_per_call == bwd_count * causal_share
        assert fwd.calls_per_step == bwd.calls_per_step == 1.0
        timed = _info(run)["event_timed"]
        assert fwd.achieved_flops_per_s == pytest.approx(timed["tflops_per_s"] * 1e12, rel=0.15)
        attention_us[run] = fwd.time_us_per_step + bwd.time_us_per_step
        # every attention kernel of the trace is in these two rows
        trace = read_trace(str(next((SAMPLES / run).glob("*.gz"))))
        k = trace.kernels
        names = [trace.names[i].lower() for i in k.name]
        is_attn = np.array(["flash" in n or "fmha" in n or "attention" in n for n in names])
        assert is_attn.sum() > 0
        covered = float(k.dur_ns[is_attn].sum()) / 1000.0 / s.efficiency.steps
        assert attention_us[run] == pytest.approx(covered, rel=1e-3)
    assert not {"low_kernel_efficiency", "matmul_without_tensor_cores"} & _ids(flash)
    d = _diag(eff, "low_kernel_efficiency")
    assert d is not None and d.evidence["groups"][0]["op"] == "aten::_efficient_attention_backward"
    assert "flash backend" in d.recommendation and "Pad matmul dims" not in d.recommendation
    claimed_us = d.impact_fraction * eff.steps.mean_step_us
    # the flash backend on the non-causal work: twice its causal kernels' time
    flash_us = attention_us["eff_sdpa_efficient_bf16"] - 2 * attention_us["eff_sdpa_flash_bf16"]
    assert 0.5 * flash_us <= claimed_us <= 1.2 * flash_us


# -- DDP ------------------------------------------------------------------------------------


def test_ddp_fp32_gemms_off_the_critical_path_and_tensor_core_runs_quiet(h200x2: Path) -> None:
    """The residual MLP of the shared h200x2 DDP runs, recorded at world size 1: in fp32
    (TF32 off) its GEMMs run on CUDA cores, but the profiled steps are set by the host
    (CPU ops on the critical path outweigh GPU compute several times: DDP's host path,
    4 ms in c10d::allreduce_ alone), so replayed on tensor cores the step does not
    shorten: no matmul_without_tensor_cores. With TF32 or bf16 autocast the GEMMs run on
    tensor cores and neither efficiency verdict fires. The shared fp32 DDP runs with
    default buckets: the same (the host, and on the straggler run the wait, set the
    pace); with tuned buckets the GEMMs are on the path and the verdict fires."""
    fp32 = _summary("eff_ddp_fp32")
    assert _diag(fp32, "matmul_without_tensor_cores") is None
    assert any(r.cuda_cores for r in fp32.efficiency.rows if r.category == "matmul")
    path = fp32.critical_path.mean_by_class_us
    assert path["cpu_ops"] >= 5 * path.get("compute", 0.0)
    for run in ("eff_ddp_tf32", "eff_ddp_bf16"):
        s = _summary(run)
        assert not {"matmul_without_tensor_cores", "low_kernel_efficiency"} & _ids(s), run
        gemm = [r for r in s.efficiency.rows if r.category == "matmul"]
        assert len(gemm) >= 5 and not any(r.cuda_cores for r in gemm), run
        # all but the tiny classifier head (N = 16: a cutlass::Kernel2 of unknown unit)
        on_tensor = sum(r.time_us_per_step for r in gemm if (r.unit or "").endswith("_tensor"))
        assert on_tensor >= 0.99 * sum(r.time_us_per_step for r in gemm), run
    for run in ("ddp_default", "ddp_straggler"):
        for path_ in sorted((h200x2 / run).glob("rank*.json.gz")):
            s = summarize_file(str(path_))
            assert _diag(s, "matmul_without_tensor_cores") is None, path_.name
            assert any(r.cuda_cores for r in s.efficiency.rows), path_.name
    # ddp_tuned (4 large buckets): its GEMMs are on the critical path, replayed on
    # tensor cores its steps shorten by 5-25 % (rank 1: 7 %, rank 0: 19 %)
    for path_ in sorted((h200x2 / "ddp_tuned").glob("rank*.json.gz")):
        d = _diag(summarize_file(str(path_)), "matmul_without_tensor_cores")
        assert d is not None and 0.05 <= d.impact_fraction <= 0.25, path_.name


# -- convolutions: the claim against channels_last ------------------------------------------


@pytest.mark.parametrize("model", ["cnn", "resnet"])
def test_conv_claim_does_not_overstate_channels_last(model: str) -> None:
    """low_kernel_efficiency on NCHW fp32 convolutions claims no more than channels_last
    wins (CUDA-event step times of the same model, recorded beside it): the claimed
    share of the step ≤ 1.2 × the measured one. channels_last (fp32 or bf16) is quiet."""
    nchw = _summary(f"eff_{model}_fp32_nchw")
    d = _diag(nchw, "low_kernel_efficiency")
    assert d is not None and "channels_last" in d.recommendation
    assert "NCHW" in (d.evidence["groups"][0]["reason"] or "")
    measured = (
        1.0 - _info(f"eff_{model}_fp32_cl")["step_ms"] / _info(f"eff_{model}_fp32_nchw")["step_ms"]
    )
    assert 0.0 < d.impact_fraction <= 1.2 * measured
    for run in (f"eff_{model}_fp32_cl", f"eff_{model}_bf16_cl"):
        assert not {"low_kernel_efficiency", "matmul_without_tensor_cores"} & _ids(_summary(run))


@pytest.mark.parametrize(("run", "model"), [("cudnn_autotune_fixed", "cnn"),
                                            ("dataloader_workers4", "resnet")])  # fmt: skip
def test_shared_conv_runs_claim_within_channels_last(run: str, model: str) -> None:
    """The runs the conv claim was questioned on (same models, recorded with their own
    settings) claim no more than channels_last measures on that model."""
    d = _diag(_summary(run), "low_kernel_efficiency")
    assert d is not None
    measured = (
        1.0 - _info(f"eff_{model}_fp32_cl")["step_ms"] / _info(f"eff_{model}_fp32_nchw")["step_ms"]
    )
    assert d.impact_fraction <= 1.2 * measured


def test_diff_efficiency_verdicts_on_real_pair_and_self_diff() -> None:
    """fp32 MLP → bf16 autocast: the run's matmul TFLOP/s and tensor-core share improve
    beyond the step-to-step noise, each GEMM group improves; a self-diff changes
    nothing: every efficiency row and metric is unchanged (or not judged)."""
    base, exp = _summary("eff_mlp_fp32"), _summary("eff_mlp_bf16")
    doc = diff([("w", base)], [("w", exp)])
    rows = {m.key: m for m in doc.metrics}
    rate = rows["efficiency.matmul_tflops_per_s"]
    assert rate.verdict == "improved" and rate.stderr is not None
    assert 45 <= rate.base <= 60 and 750 <= rate.exp <= 900
    share = rows["efficiency.tensor_core_time_fraction"]
    assert (share.base, share.exp, share.verdict) == (0.0, 1.0, "improved")
    assert {r.verdict for r in doc.efficiency if r.op in ("aten::mm", "aten::addmm")} == {
        "improved"
    }
    back = diff([("w", exp)], [("w", base)])
    assert {m.key: m.verdict for m in back.metrics}["efficiency.matmul_tflops_per_s"] == (
        "regressed"
    )
    same = diff([("w", base)], [("w", base)])
    assert {m.verdict for m in same.metrics if m.key.startswith("efficiency.")} == {"unchanged"}
    assert {r.verdict for r in same.efficiency} <= {"unchanged", "not judged"}
    assert any(r.verdict == "unchanged" for r in same.efficiency)
