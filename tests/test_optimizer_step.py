"""``optimizer_step_bound`` and the idle panel's ``optimizer`` / ``cpu_ops_top``: exact
numbers on tiny traces, and the known answers on the recorded pairs of
``sample_logs`` (``optimizer_per_param`` / ``optimizer_foreach`` / ``optimizer_fused``,
``scripts/record_verdicts.py``; measured costs in ``recording_info.json`` →
``verdicts.costs``). Real traces: ``test_optimizer_step_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis.idle_costs import optimizer_mode
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace


def launch(ts: float, dur: float, corr: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 100,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def _per_param_loop(kernel_name: str = "vectorized_elementwise_kernel") -> list[dict[str, Any]]:
    """250 ops ``aten::add_`` [b, b+9) (b = 10 i), each launching a 3 µs kernel at
    [b+5, b+7) that runs [b+9, b+12): a 7 µs gap before every kernel (the first gap
    [0, 9)). Ops 50..249 lie in ``Optimizer.step#Adam.step`` [500, 2500). The step's CPU
    range is [0, 2500), its window [0, 2502)."""
    events: list[dict[str, Any]] = [
        cpu("ProfilerStep#1", 0, 2500, cat="user_annotation"),
        cpu("Optimizer.step#Adam.step", 500, 2000, cat="user_annotation"),
    ]
    for i in range(250):
        b = 10 * i
        events += [
            cpu("aten::add_", b, 9),
            launch(b + 5, 2, i + 1),
            kernel(kernel_name, b + 9, 3, corr=i + 1),
        ]
    return events


def _summary(tmp_path: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    trace = read_trace(str(write_trace(tmp_path / "t.json", events)))
    return as_json(summarize_trace(trace))


def test_optimizer_cost_exact_and_not_counted_twice(tmp_path: Path) -> None:
    """Optimizer idle: the 200 gaps of 7 µs before kernels 50..249 (the thread is in
    Optimizer.step); its GPU work: those 200 kernels × 3 µs. Impact (1400 + 600) / 2502.
    small_kernel_flood keeps only what lies outside the optimizer: the first gap (9 µs),
    49 gaps × 7 µs and 50 kernels × 3 µs = 502 µs; low_gpu_utilization has nothing left."""
    s = _summary(tmp_path, _per_param_loop())
    (dev,) = s["idle"]["devices"]
    opt = dev["optimizer"]
    assert opt["idle_us"] == 1400.0 and opt["busy_us"] == 600.0 and opt["cost_us"] == 2000.0
    assert opt["cost_fraction_of_step_time"] == pytest.approx(2000 / 2502)
    assert opt["kernels_per_step"] == 200.0 and opt["ranges_per_step"] == 1.0
    assert opt["mode"] == "per_parameter" and opt["host_us"] == 2000.0
    assert opt["launch_bound_idle_us"] == 1400.0 and opt["launch_bound_kernel_us"] == 600.0
    assert opt["top_kernels"] == [
        {"name": "vectorized_elementwise_kernel", "count_per_step": 200.0, "us_per_step": 600.0}
    ]
    by_id = {d["id"]: d for d in s["diagnoses"]}
    assert set(by_id) == {"optimizer_step_bound", "small_kernel_flood", "trace_too_few_steps"}
    bound = by_id["optimizer_step_bound"]
    assert bound["severity"] == "high"
    assert bound["evidence"]["cost_fraction_of_step_time"] == pytest.approx(2000 / 2502)
    # its fix replayed (a fused optimizer: 5 % of its host time and launch calls left,
    # its kernels' work kept): kernels 0-49 still run at the host's pace, the last one
    # ending at 502; then the host issues the optimizer's 200 kernels faster than the
    # GPU runs them: 502 + 200 × 3 = 1102 of 2502 µs
    assert bound["prediction"]["predicted_step_us"] == 1102.0
    assert bound["impact_fraction"] == round(1 - 1102 / 2502, 4)
    assert bound["evidence"]["mode"] == "per_parameter"
    assert "one parameter at a time, 200 kernels per step" in bound["title"]
    assert "foreach=True" in bound["recommendation"]
    flood = by_id["small_kernel_flood"]
    assert flood["evidence"]["launch_bound_cost_fraction_of_step_time"] == pytest.approx(502 / 2502)
    assert flood["evidence"]["optimizer_step_cost_left_out_us"] == 2000.0
    assert "outside the optimizer step" in flood["title"]
    # its fix replayed (CUDA graphs outside the optimizer: the add_ dispatch and launch
    # calls of kernels 0-49 gone, the 1 µs of untraced time between ops kept): kernels
    # 0-49 run back to back by 150; the optimizer's launches, 10 µs apart from 55, catch
    # up with the GPU at its 14th kernel and set the pace: the last kernel, launched at
    # 2045, ends at 2052
    assert flood["prediction"]["predicted_step_us"] == 2052.0
    # together (replayed at once): every kernel issued faster than it runs: 250 × 3 µs
    combined = s["what_if"]["combined"]
    assert combined["diagnoses"] == ["optimizer_step_bound", "small_kernel_flood"]
    assert combined["predicted_step_us"] == 750.0


def test_foreach_optimizer_needs_a_larger_share(tmp_path: Path) -> None:
    """The same loop with ``multi_tensor_apply`` kernels: mode foreach; its idle share
    (1400 / 2502 = 56 %) passes optimizer_tuned_idle_min_fraction (30 %): raised, with the
    advice for a foreach optimizer. Without the optimizer range nothing is raised and
    small_kernel_flood keeps the whole cost."""
    s = _summary(tmp_path, _per_param_loop("multi_tensor_apply_kernel<Functor>"))
    bound = next(d for d in s["diagnoses"] if d["id"] == "optimizer_step_bound")
    assert bound["evidence"]["mode"] == "foreach"
    assert "fused=True" in bound["recommendation"]
    plain = [e for e in _per_param_loop() if not e["name"].startswith("Optimizer.")]
    s = _summary(tmp_path, plain)
    assert "optimizer_step_bound" not in {d["id"] for d in s["diagnoses"]}
    flood = next(d for d in s["diagnoses"] if d["id"] == "small_kernel_flood")
    assert flood["evidence"]["launch_bound_cost_fraction_of_step_time"] == pytest.approx(1.0)
    # replayed without the dispatch: 250 kernels of 3 µs back to back
    assert flood["prediction"]["predicted_step_us"] == 750.0


def test_gpu_bound_optimizer_is_quiet(tmp_path: Path) -> None:
    """Optimizer.step [0, 20) launches two 500 µs kernels: the GPU idles only [0, 8) of
    a 1008 µs window (0.8 %, under optimizer_idle_min_fraction): no optimizer_step_bound,
    though the optimizer's work is 99 % of the step."""
    events = [
        cpu("ProfilerStep#1", 0, 30, cat="user_annotation"),
        cpu("Optimizer.step#Adam.step", 0, 20, cat="user_annotation"),
        launch(5, 2, 1),
        launch(10, 2, 2),
        kernel("multi_tensor_apply_kernel<FusedAdamMathFunctor>", 8, 500, corr=1),
        kernel("multi_tensor_apply_kernel<FusedAdamMathFunctor>", 508, 500, corr=2),
    ]
    s = _summary(tmp_path, events)
    opt = s["idle"]["devices"][0]["optimizer"]
    assert opt["mode"] == "fused" and opt["idle_us"] == 8.0 and opt["busy_us"] == 1000.0
    assert "optimizer_step_bound" not in {d["id"] for d in s["diagnoses"]}


@pytest.mark.parametrize(
    ("names", "per_range", "mode"),
    [
        ([], 0.0, "none"),
        (["void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float>>"], 1, "fused"),
        (
            ["multi_tensor_apply_kernel<BinaryOpListAlphaFunctor>"] * 3 + ["elementwise"],
            4,
            "foreach",
        ),
        (["triton_poi_fused_add_0", "triton_red_1"], 2, "compiled"),
        (["triton_poi_add_0", "triton_red_1", "elementwise"], 3, "compiled"),
        (["vectorized_elementwise_kernel"] * 7, 7, "per_parameter"),
        (["vectorized_elementwise_kernel"], 1, "none"),
    ],
)
def test_optimizer_mode(names: list[str], per_range: float, mode: str) -> None:
    assert optimizer_mode(names, per_range) == mode
    # the same kernels given as distinct names and their counts
    distinct = sorted(set(names))
    counts = [names.count(n) for n in distinct]
    assert optimizer_mode(distinct, per_range, counts) == mode


def test_optimizer_mode_weighs_each_name_by_its_kernels() -> None:
    """Inductor kernels are the majority by count, not by distinct name."""
    names = ["triton_poi_add_0", "vectorized_elementwise_kernel"]
    assert optimizer_mode(names, 4, [3, 1]) == "compiled"
    assert optimizer_mode(names, 4, [1, 3]) == "per_parameter"
    assert optimizer_mode(names, 4, [1, 2]) == "per_parameter"
    assert optimizer_mode(names, 4, [1, 1]) == "compiled"
