"""Run-to-run diff and the `diff` / `check` commands.
Real traces: ``test_diff_real.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.cli.main import main
from tb_kineto_insights.compare.before_after import SideError, compare, load_side, resolve_side
from tb_kineto_insights.compare.diff import headline_text, judge
from tb_kineto_insights.compare.diff_rules import VERDICTS
from tb_kineto_insights.summary import summarize_file


def _launch(ts: float, corr: int) -> dict[str, Any]:
    event = cpu("cudaLaunchKernel", ts, 2, cat="cuda_runtime")
    event["args"] = {"correlation": corr}
    return event


def _run(folder: Path, b_dur: float, jitter: float = 0.0) -> Path:
    """5 steps of 200 µs; kernels A 10 µs, B ``b_dur`` µs, C 30 µs in each."""
    events: list[dict[str, Any]] = []
    corr = 0
    for s in range(5):
        t0 = 1000.0 + s * 200
        events.append(cpu(f"ProfilerStep#{s + 1}", t0, 200, cat="user_annotation"))
        for name, start, dur in (("A", 10, 10), ("B", 30, b_dur), ("C", 120, 30 + jitter * s)):
            corr += 1
            events.append(_launch(t0 + start - 5, corr))
            events.append(kernel(name, t0 + start, dur, corr=corr))
    return write_trace(folder / "w.1.pt.trace.json", events)


def test_judge_rules() -> None:
    assert judge([1.0, 1.0], [1.0, 1.0], "lower")["verdict"] == "unchanged"
    assert judge([100.0, 100.0], [100.5, 100.5], "lower")["verdict"] == "unchanged"  # < 1 %
    assert judge([100.0, 100.0], [120.0, 120.0], "lower")["verdict"] == "regressed"
    assert judge([100.0, 100.0], [120.0, 120.0], "higher")["verdict"] == "improved"
    noisy = judge([80.0, 120.0, 80.0, 120.0], [90.0, 130.0, 90.0, 130.0], "lower")
    # delta 10 against 2 x sqrt(2 x 23.09^2 / 4) = 32.7: inside the noise
    assert noisy["verdict"] == "within noise"
    assert noisy["stderr"] == pytest.approx((2 * (23.094**2) / 4) ** 0.5, rel=1e-3)
    assert judge([10.0], [10.5], "lower", per_step=False)["verdict"] == "within noise"
    assert judge([10.0], [12.0], "lower", per_step=False)["verdict"] == "regressed"


def test_one_kernel_twice_as_slow(tmp_path: Path) -> None:
    _run(tmp_path / "base", b_dur=20)
    _run(tmp_path / "exp", b_dur=40)
    doc = as_json(compare(load_side(str(tmp_path / "base")), load_side(str(tmp_path / "exp"))))
    changed = doc["kernels"]["changed"]
    assert [r["name"] for r in changed] == ["B"]
    b = changed[0]["time_us_per_step"]
    assert (b["base"], b["exp"], b["verdict"]) == (20.0, 40.0, "regressed")
    assert changed[0]["count_per_step"]["verdict"] == "unchanged"
    assert doc["kernels"]["added"] == [] and doc["kernels"]["removed"] == []
    assert doc["kernels"]["unchanged_count"] == 2
    metrics = {m["key"]: m for m in doc["metrics"]}
    assert metrics["breakdown.kernel_us"]["delta"] == 20.0
    assert metrics["breakdown.kernel_us"]["verdict"] == "regressed"
    assert metrics["kernels_per_step"]["verdict"] == "unchanged"
    assert doc["headline"]["verdict"] == "unchanged"  # the step window is 200 µs either way


def test_identical_runs_are_unchanged_or_within_noise(tmp_path: Path) -> None:
    _run(tmp_path / "a", b_dur=20, jitter=3)
    doc = as_json(compare(load_side(str(tmp_path / "a")), load_side(str(tmp_path / "a"))))
    verdicts = {m["verdict"] for m in doc["metrics"]}
    assert verdicts <= {"unchanged", "within noise"}
    assert doc["kernels"]["changed"] == [] and doc["ops"]["changed"] == []
    assert doc["diagnoses"]["appeared"] == [] and doc["diagnoses"]["disappeared"] == []
    assert doc["headline"]["speedup"] == 1.0


def test_side_specs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path / "logs" / "r1", b_dur=20)
    _run(tmp_path / "logs" / "r2", b_dur=20)
    with pytest.raises(SideError, match="holds 2 runs"):
        resolve_side(str(tmp_path / "logs"))
    assert len(resolve_side(f"{tmp_path / 'logs'}:r2")) == 1
    with pytest.raises(SideError, match="no run named"):
        resolve_side(f"{tmp_path / 'logs'}:r3")
    with pytest.raises(SideError, match="no such file"):
        resolve_side(str(tmp_path / "nothing"))
    single = tmp_path / "logs" / "r1" / "w.1.pt.trace.json"
    assert resolve_side(str(single))[0].path == str(single)
    assert main(["diff", str(tmp_path / "logs"), str(single)]) == 2
    assert "holds 2 runs" in capsys.readouterr().err
    write_trace(tmp_path / "broken" / "w.1.pt.trace.json", text="{")
    assert main(["check", str(tmp_path / "broken"), str(single)]) == 2


def test_check_refuses_unusable_or_ambiguous_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _run(tmp_path / "good", b_dur=20).parent
    bad = tmp_path / "bad"
    events = [
        {**e, "ts": "x"}
        for e in json.loads((good / "w.1.pt.trace.json").read_text())["traceEvents"]
    ]
    write_trace(bad / "w.1.pt.trace.json", events)
    assert main(["check", str(good), str(bad)]) == 2
    assert "no usable events" in capsys.readouterr().err
    assert main(["check", str(good), str(good), "--max-step-time-regression", "5"]) == 2
    assert "ambiguous" in capsys.readouterr().err
    assert main(["check", str(good), str(good), "--max-step-time-regression=-5%"]) == 2
    assert main(["check", str(good), str(good), "--max-step-time-regression", "1"]) == 2
    assert main(["check", str(good), str(good), "--max-step-time-regression", "abc"]) == 2
    assert "expected a percentage" in capsys.readouterr().err
    assert main(["check", str(good), str(good), "--fail-on", "memory_grwoth"]) == 2
    assert "unknown diagnosis id" in capsys.readouterr().err
    assert main(["check", "--fail-on", "memory_growth,no_step_markers", str(good), str(good)]) == 0


def test_small_change_edges_of_the_base() -> None:
    """Under 1 % of the base: unchanged, however clean the samples (zero noise here)."""
    assert judge([100.0, 100.0], [100.9, 100.9], "lower")["verdict"] == "unchanged"
    assert judge([100.0, 100.0], [101.1, 101.1], "lower")["verdict"] == "regressed"
    assert judge([100.0, 100.0], [99.1, 99.1], "lower")["verdict"] == "unchanged"
    assert judge([100.0, 100.0], [98.9, 98.9], "lower")["verdict"] == "improved"
    # a floor in the row's own unit (0.5 % of the step time for a time per step)
    # (19 % of the base but under the floor: a real change, too small for the step)
    assert judge([10.0, 10.0], [11.9, 11.9], "lower", min_abs_delta=2.0)["verdict"] == "negligible"
    assert judge([10.0, 10.0], [12.1, 12.1], "lower", min_abs_delta=2.0)["verdict"] == "regressed"
    # under 1 % of the base stays unchanged, whatever the floor
    assert judge([10.0, 10.0], [10.05, 10.05], "lower", min_abs_delta=2.0)["verdict"] == (
        "unchanged"
    )
    row = judge([10.0, 10.0], [12.1, 12.1], "lower", min_abs_delta=2.0)
    assert row["min_delta"] == 2.0
    custom = DEFAULT_THRESHOLDS.replace(diff_min_change_fraction=0.02)
    assert judge([100.0, 100.0], [101.1, 101.1], "lower", thresholds=custom)["verdict"] == (
        "unchanged"
    )
    assert judge([100.0, 100.0], [102.1, 102.1], "none")["verdict"] == "changed"


@pytest.mark.parametrize(
    ("b_dur", "verdict", "util_verdict"),
    [(20.9, "negligible", "negligible"), (21.1, "regressed", "improved")],
)
def test_small_change_edges_of_the_step(
    tmp_path: Path, b_dur: float, verdict: str, util_verdict: str
) -> None:
    """Steps of 200 µs, so 0.5 % of the step is 1 µs: kernel B 20 → 20.9 µs (+4.5 % of
    its base, zero step-to-step noise) is too small to matter (negligible: over 1 % of
    the row, under 0.5 % of the step); 20 → 21.1 µs is not. GPU
    utilization moves 0.45 pp vs 0.55 pp: the same edge for a share."""
    _run(tmp_path / "base", b_dur=20)
    _run(tmp_path / "exp", b_dur=b_dur)
    doc = as_json(compare(load_side(str(tmp_path / "base")), load_side(str(tmp_path / "exp"))))
    metrics = {m["key"]: m for m in doc["metrics"]}
    kernel_time = metrics["breakdown.kernel_us"]
    assert kernel_time["delta"] == pytest.approx(b_dur - 20)
    assert kernel_time["min_delta"] == pytest.approx(1.0)
    assert kernel_time["verdict"] == verdict
    util = metrics["gpu_utilization_fraction"]
    assert util["delta"] == pytest.approx((b_dur - 20) / 200)
    assert util["verdict"] == util_verdict
    rows = {r["name"]: r for g in ("changed", "added", "removed") for r in doc["kernels"][g]}
    if verdict == "negligible":
        assert "B" not in rows and doc["kernels"]["unchanged_count"] == 3
    else:
        assert rows["B"]["time_us_per_step"]["verdict"] == "regressed"


def test_step_floor_is_a_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--threshold diff_min_step_fraction=0.01`` lifts the floor to 2 µs of a 200 µs step."""
    _run(tmp_path / "base", b_dur=20)
    _run(tmp_path / "exp", b_dur=21.1)
    args = ["diff", str(tmp_path / "base"), str(tmp_path / "exp"), "--format", "json"]
    assert main([*args, "--threshold", "diff_min_step_fraction=0.01"]) == 0
    metrics = {m["key"]: m for m in json.loads(capsys.readouterr().out)["metrics"]}
    assert metrics["breakdown.kernel_us"]["verdict"] == "negligible"
    assert metrics["breakdown.kernel_us"]["min_delta"] == pytest.approx(2.0)


def _with_world_size(folder: Path, world_size: int | None) -> Path:
    path = _run(folder, b_dur=20)
    if world_size is not None:
        doc = json.loads(path.read_text())
        doc["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": world_size}
        path.write_text(json.dumps(doc))
    return path


def test_world_size_warning_only_when_both_sides_know_it(tmp_path: Path) -> None:
    """A trace without distributedInfo says nothing about its world size: no
    "different world sizes: ['1'] vs ['None']" (seen on diff sample_logs/ddp
    sample_logs/capture_light); two known, different sizes still warn."""
    one = load_side(str(_with_world_size(tmp_path / "one", 1).parent))
    unknown = load_side(str(_with_world_size(tmp_path / "unknown", None).parent))
    four = load_side(str(_with_world_size(tmp_path / "four", 4).parent))
    for base, exp in ((one, unknown), (unknown, one)):
        assert not [w for w in compare(base, exp).warnings if "world size" in w]
    assert [w for w in compare(one, four).warnings if "world size" in w] == [
        "different world sizes: ['1'] vs ['4']"
    ]


def test_headline_text() -> None:
    gained = [{"id": "memory_growth", "severity": "high", "title": "t"}]
    assert headline_text(1.1, "improved", gained) == (
        "1.10x faster, but memory_growth (high) appeared"
    )
    assert headline_text(0.8, "regressed", gained) == (
        "1.25x slower, and memory_growth (high) appeared"
    )
    assert headline_text(1.02, "within noise", []) == "step time within noise (1.02x)"
    assert headline_text(1.0, "unchanged", []) == "step time unchanged"


def _preprocess_run(folder: Path, on_step_thread: int, elsewhere_us: float, where: int) -> Path:
    """5 steps of 1000 µs. The step thread (tid 1) runs ``on_step_thread`` × 200 µs of
    ``aten::conv2d`` (the preprocessing) and 100 µs of ``aten::linear``; the autograd
    engine's thread (tid 2) runs 100 µs of backward; thread ``where`` runs one
    ``aten::conv2d`` of ``elsewhere_us`` per step (none when 0)."""
    events: list[dict[str, Any]] = []
    for i in range(5):
        t0 = 1000.0 * i
        events.append(cpu(f"ProfilerStep#{i + 1}", t0, 1000, cat="user_annotation"))
        for k in range(on_step_thread):
            events.append(cpu("aten::conv2d", t0 + 10 + 210 * k, 200))
        events.append(cpu("aten::linear", t0 + 500, 100))
        events.append(cpu("autograd::engine::evaluate_function: MmBackward0", t0 + 650, 100, tid=2))
        if elsewhere_us:
            events.append(cpu("aten::conv2d", t0 + 20, elsewhere_us, tid=where))
    return write_trace(folder / "w.1.pt.trace.json", events)


def _conv_row(tmp_path: Path, base: tuple[int, float, int], exp: tuple[int, float, int]) -> Any:
    _preprocess_run(tmp_path / "base", *base)
    _preprocess_run(tmp_path / "exp", *exp)
    doc = as_json(compare(load_side(str(tmp_path / "base")), load_side(str(tmp_path / "exp"))))
    rows = doc["ops"]["changed"]
    return next((r for r in rows if r["name"] == "aten::conv2d"), None), rows


def test_op_that_moved_to_another_thread_is_moved_partly_exact(tmp_path: Path) -> None:
    """Base: 2 × 200 µs of aten::conv2d per step on the step thread. Exp: 1 there, and one
    of 150 µs on thread 7 (a prefetch thread). Its total 400 → 350 µs/step alone would
    be ``improved``; it moved, so ``moved partly``, and the note gives both places."""
    conv, rows = _conv_row(tmp_path, (2, 0.0, 7), (1, 150.0, 7))
    t = conv["time_us_per_step"]
    assert (t["base"], t["exp"]) == (400.0, 350.0)
    assert conv["status"] == "moved_partly" and t["verdict"] == "moved partly"
    assert conv["note"].startswith(
        "moved off the step's threads: on them 400 → 200 µs/step (2.0 → 1.0 calls), on "
        "other threads of the process (a prefetch thread, a thread pool) 0 → 150 µs/step"
    )
    assert [r["name"] for r in rows] == ["aten::conv2d"]  # nothing else changed
    # the exp's table of ops off the step's threads: the conv2d on thread 7 only (the
    # autograd thread's backward is the step's own work)
    summary = summarize_file(str(tmp_path / "exp" / "w.1.pt.trace.json"))
    (row,) = summary.tables.ops_elsewhere.rows
    assert (row.name, row.per_step_count, row.per_step_time_us) == (
        "aten::conv2d",
        [1] * 5,
        [150.0] * 5,
    )


@pytest.mark.parametrize(
    ("base", "exp"),
    [
        ((2, 0.0, 7), (1, 0.0, 7)),  # shrank on the step thread, appeared nowhere
        ((2, 150.0, 7), (1, 150.0, 7)),  # the other thread's share did not grow
        ((2, 0.0, 2), (1, 150.0, 2)),  # "elsewhere" is the autograd thread: the step's
    ],
    ids=["nowhere-else", "elsewhere-unchanged", "autograd-thread"],
)
def test_op_that_only_shrank_is_improved_not_moved(
    tmp_path: Path, base: tuple[int, float, int], exp: tuple[int, float, int]
) -> None:
    conv, _ = _conv_row(tmp_path, base, exp)
    assert conv["time_us_per_step"]["verdict"] == "improved"
    assert "status" not in conv or conv["status"] != "moved_partly"


def test_judge_takes_extreme_values_without_overflow() -> None:
    """Issue 32 §8: ``(x - mean) ** 2`` raised OverflowError past 1.8e308 (an odd cached
    value such as 1e300); any finite or infinite inputs give a verdict."""
    import itertools

    values = [1e300, -1e300, 1e308, -1e308, 1.0, 0.0, float("inf"), float("nan")]
    for a, b, c, d in itertools.product(values, repeat=4):
        for better in ("lower", "higher", "none"):
            assert judge([a, b], [c, d], better)["verdict"] in VERDICTS
    assert judge([1e300, -1e300], [1.0, 2.0], "lower")["base_noise"] == float("inf")


def test_smallest_tflops_change_that_matters() -> None:
    """Two steps of 1 TFLOP of matmul in 10 ms (100 TFLOP/s): saving a 1 ms floor per
    step needs 1 TFLOP in 9 ms, 111.11 TFLOP/s, a change of 11.11. Numbers whose rate
    underflows to 0 (a forged cache entry: fuzz seed 47052, input 202910) or that can
    save nothing give ``inf``, never a ZeroDivisionError."""
    from types import SimpleNamespace

    from tb_kineto_insights.compare.diff import _matmul_tflops_floor

    def side(flops: float, time_us: float) -> Any:
        step = SimpleNamespace(matmul_flops=flops, matmul_time_us=time_us)
        return [("run", SimpleNamespace(efficiency=SimpleNamespace(per_step=[step, step])))]

    floor = _matmul_tflops_floor(side(1e12, 10_000.0), 1000.0, DEFAULT_THRESHOLDS)
    assert floor == pytest.approx(1e12 / 9e-3 / 1e12 - 100.0, rel=1e-12)  # 11.11
    assert _matmul_tflops_floor(side(1e12, 1000.0), 1000.0, DEFAULT_THRESHOLDS) == float("inf")
    # 2e-300 TFLOP in 2e294 s: a rate of 0 in floats (it divided by it), the floor 0
    assert _matmul_tflops_floor(side(1e-288, 1e300), 1.0, DEFAULT_THRESHOLDS) == 0.0
    assert _matmul_tflops_floor(side(0.0, 10.0), 1.0, DEFAULT_THRESHOLDS) == float("inf")
