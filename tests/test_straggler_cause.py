"""Why is the straggler late (issue 27 §3, ``analysis/straggler_cause.py``): exact numbers
on tiny two-rank traces where one rank runs an extra kernel, and the real
``ddp2_straggler`` whose rank 1 sleeps before ``backward()``.
Real traces: ``test_straggler_cause_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis.straggler_cause import rank_profile, straggler_cause
from tb_kineto_insights.summary import summarize_file, summarize_run

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _runtime(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    ev = cpu(name, ts, dur, cat="cuda_runtime")
    ev["args"] = {"correlation": corr}
    return ev


def _rank(tmp_path: Path, rank: int, extra_us: float, extra_cat: str = "kernel") -> tuple[str, Any]:
    """3 steps of 2000 µs. Each step: ``gemm`` (300 µs from 100 µs into the step), on rank
    1 then ``extra_gemm`` of ``extra_us`` (a ``gpu_memcpy`` named ``Memcpy HtoD`` with
    ``extra_cat="gpu_memcpy"``), then the all-reduce, launched when the GPU work before
    it is done and ending at 1500 µs on both ranks."""
    events: list[dict[str, Any]] = []
    corr = 0
    for j in range(3):
        base = 2000.0 * j
        events.append(cpu(f"ProfilerStep#{j + 1}", base, 2000, cat="user_annotation"))
        extra = "extra_gemm" if extra_cat == "kernel" else "Memcpy HtoD (Pageable -> Device)"
        work = [("gemm", 300.0)] + ([(extra, extra_us)] if extra_us else [])
        t = base + 100.0
        for name, dur in work:
            corr += 1
            events.append(_runtime("cudaLaunchKernel", t - 20, 10, corr))
            ev = kernel(name, t, dur, stream=7, corr=corr)
            if name == extra and extra_cat != "kernel":
                ev["cat"] = extra_cat
            events.append(ev)
            t += dur
        corr += 1
        events.append(_runtime("cudaLaunchKernel", t - 20, 10, corr))
        ev = kernel(AR, t + 10, base + 1500 - t - 10, stream=20, corr=corr)
        ev["args"].update({"Collective name": "allreduce", "Group size": 2})
        events.append(ev)
    path = write_trace(
        tmp_path / f"r{rank}.json", events, distributedInfo={"rank": rank, "world_size": 2}
    )
    return f"r{rank}", summarize_file(str(path))


def test_extra_gpu_kernel_time_is_named_gpu_compute(tmp_path: Path) -> None:
    r0, r1 = _rank(tmp_path, 0, 0.0), _rank(tmp_path, 1, 400.0)
    run = as_json(summarize_run([r0, r1]))
    s = run["straggler"]
    assert s is not None and s["rank"] == 1 and s["delay_us_per_step"] == 400.0
    cause = s["cause"]
    # before each all-reduce (since the previous one, or the step start) rank 1 runs gemm
    # 300 + extra_gemm 400 µs, rank 0 gemm 300 µs: +400 µs, one kernel more
    assert cause["basis"] == "before_late_collectives" and cause["late_collectives"] == 3
    assert cause["class"] == "gpu_compute" and cause["label"] == "GPU compute"
    assert cause["us_per_step"] == pytest.approx(400.0)
    assert cause["straggler_us_per_step"] == pytest.approx(700.0)
    assert cause["median_rank_us_per_step"] == pytest.approx(300.0)
    assert cause["share_of_delay"] == pytest.approx(1.0)
    assert cause["top"] == [{"kind": "kernel", "name": "extra_gemm", "us_per_step": 400.0}]
    assert cause["launches_per_step_excess"] == 1.0 and cause["reference_ranks"] == 1
    # the other parts cancel: the lead-ups differ by the 400 µs of lateness only
    assert sum(cause["classes"].values()) - cause["classes"]["launches"] == pytest.approx(400.0)
    (d,) = [d for d in run["diagnoses"] if d["id"] == "communication_straggler"]
    assert d["title"] == (
        "Rank 1 holds the other ranks back 400.0 µs/step (20 % of their step): GPU compute, "
        "+400.0 µs/step against the median rank before the collectives it is late to, "
        "most in extra_gemm (+400.0 µs/step)"
    )
    assert d["evidence"]["cause"] == cause and d["evidence"]["worker"] == "r1"
    assert "more GPU kernel time" in d["recommendation"]


def test_extra_memcpy_time_is_named_memcpy(tmp_path: Path) -> None:
    """Rank 1 copies 400 µs more per step (a pageable host-to-device memcpy) before its
    all-reduce: the cause is memory copies, +400 µs/step; GPU compute is the same."""
    r0, r1 = _rank(tmp_path, 0, 0.0), _rank(tmp_path, 1, 400.0, "gpu_memcpy")
    run = as_json(summarize_run([r0, r1]))
    s = run["straggler"]
    assert s is not None and s["rank"] == 1 and s["delay_us_per_step"] == 400.0
    cause = s["cause"]
    assert cause["class"] == "memcpy" and cause["us_per_step"] == pytest.approx(400.0)
    assert abs(cause["classes"]["gpu_compute"]) < 1e-9
    (d,) = [d for d in run["diagnoses"] if d["id"] == "communication_straggler"]
    assert "memory copies and sets, +400" in d["title"] and "pin_memory" in d["recommendation"]


def _queued_rank(tmp_path: Path, rank: int, gpu_delay_us: float) -> tuple[str, Any]:
    """3 steps, each a host ``ProfilerStep`` of 450 µs that launches ``gemm`` (300 µs at
    100 µs) and the all-reduce (launched at 380 µs); the all-reduce kernel starts
    ``gpu_delay_us`` after ``gemm`` ends and ends at 1500 µs on both ranks. Nothing on the
    host explains the delay: the host step is over while the GPU waits."""
    events: list[dict[str, Any]] = []
    for j in range(3):
        base = 2000.0 * j
        events.append(cpu(f"ProfilerStep#{j + 1}", base, 450, cat="user_annotation"))
        events.append(_runtime("cudaLaunchKernel", base + 80, 10, 2 * j + 1))
        events.append(kernel("gemm", base + 100, 300, stream=7, corr=2 * j + 1))
        events.append(_runtime("cudaLaunchKernel", base + 380, 10, 2 * j + 2))
        start = base + 410 + gpu_delay_us
        ev = kernel(AR, start, base + 1500 - start, stream=20, corr=2 * j + 2)
        ev["args"].update({"Collective name": "allreduce", "Group size": 2})
        events.append(ev)
    path = write_trace(
        tmp_path / f"q{rank}.json", events, distributedInfo={"rank": rank, "world_size": 2}
    )
    return f"q{rank}", summarize_file(str(path))


def test_lateness_without_a_traced_difference_names_no_cause(tmp_path: Path) -> None:
    """Rank 1's all-reduce starts 400 µs later with the same kernels and its host step
    already over: no class of its traced time explains a quarter of the delay, so no
    cause is named and the title tells the lateness instead (silence beats a guess)."""
    run = as_json(summarize_run([_queued_rank(tmp_path, 0, 0.0), _queued_rank(tmp_path, 1, 400.0)]))
    s = run["straggler"]
    assert s is not None and s["rank"] == 1 and s["delay_us_per_step"] == 400.0
    cause = s["cause"]
    assert cause["class"] is None and cause["label"] is None and cause["top"] == []
    assert all(v < 100.0 for v in cause["classes"].values())
    (d,) = [d for d in run["diagnoses"] if d["id"] == "communication_straggler"]
    assert d["title"].endswith("400.0 µs/step later than the others in 3 steps, last in 3")


def test_no_profiles_no_cause() -> None:
    class Bare:
        pass

    assert rank_profile(Bare()) is None
    assert straggler_cause(Bare(), [Bare()], 100.0) is None


def test_report_text_says_why(tmp_path: Path) -> None:
    import io

    from tb_kineto_insights.cli.report import _write_run_summary
    from tb_kineto_insights.summary import summarize_run as run_view

    buf = io.StringIO()
    _write_run_summary(run_view([_rank(tmp_path, 0, 0.0), _rank(tmp_path, 1, 400.0)]), buf)
    assert (
        "   why: GPU compute, +400.0 µs/step against the median of 1 other rank(s) in the "
        "time before the 3 collectives it is late to (700.0 µs against 300.0 µs, 100 % of "
        "its delay); kernel extra_gemm +400.0 µs/step\n" in buf.getvalue()
    )
    buf = io.StringIO()
    q = [_queued_rank(tmp_path, 0, 0.0), _queued_rank(tmp_path, 1, 400.0)]
    _write_run_summary(run_view(q), buf)
    assert "   why: not in its traced time" in buf.getvalue()


STEP_FRAME = "/home/u/train.py(20): train_step"
LOG_FRAME = "/home/u/train.py(40): log_metrics"


def _py(name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1,
            "ts": ts, "dur": dur, "args": {}}  # fmt: skip


def _host_rank(tmp_path: Path, rank: int, blocked_us: float, stacks: bool) -> tuple[str, Any]:
    """3 steps of 2000 µs: ``gemm`` (300 µs at 100 µs), then the host, in
    ``train_step``, calls ``log_metrics`` (``blocked_us`` µs from 400 µs, a sleep: no
    traced op) and launches the all-reduce 20 µs after it returns; the all-reduce kernel
    starts 30 µs after that launch begins and ends at 1500 µs on both ranks."""
    events: list[dict[str, Any]] = []
    for j in range(3):
        base = 2000.0 * j
        events.append(cpu(f"ProfilerStep#{j + 1}", base, 2000, cat="user_annotation"))
        events.append(_runtime("cudaLaunchKernel", base + 80, 10, 2 * j + 1))
        events.append(kernel("gemm", base + 100, 300, stream=7, corr=2 * j + 1))
        launch = base + 400 + blocked_us + 20
        events.append(_runtime("cudaLaunchKernel", launch, 10, 2 * j + 2))
        ev = kernel(AR, launch + 30, base + 1500 - launch - 30, stream=20, corr=2 * j + 2)
        ev["args"].update({"Collective name": "allreduce", "Group size": 2})
        events.append(ev)
        if stacks:
            events.append(_py(STEP_FRAME, base + 50, 1900))
            if blocked_us:
                events.append(_py(LOG_FRAME, base + 400, blocked_us))
                events.append(_py("<built-in function sleep>", base + 401, blocked_us - 2))
    for ev in events:
        ev["pid"], ev["tid"] = (ev["pid"], ev["tid"]) if ev["cat"] == "kernel" else (1, 1)
    path = write_trace(
        tmp_path / f"h{rank}_{stacks}.json", events, distributedInfo={"rank": rank, "world_size": 2}
    )
    return f"h{rank}", summarize_file(str(path))


def test_host_side_cause_names_the_stragglers_python_frames(tmp_path: Path) -> None:
    """Rank 1 blocks 400 µs per step in ``log_metrics`` before it launches the
    all-reduce: the cause is host time outside traced ops, and with stacks its evidence
    names log_metrics with exactly the 400 µs/step of idle it held; train_step, where both
    ranks spend the same 530 µs/step of that cause (before the launches, after the
    all-reduce), is not named. The title and advice name the frame."""
    run = as_json(
        summarize_run([_host_rank(tmp_path, 0, 0.0, True), _host_rank(tmp_path, 1, 400.0, True)])
    )
    s = run["straggler"]
    assert s is not None and s["rank"] == 1
    cause = s["cause"]
    assert cause["class"] == "host_untraced" and cause["top"] == []
    assert cause["frames"] == [
        {"frame": LOG_FRAME, "us_per_step": 400.0, "straggler_us_per_step": 400.0}
    ]
    (d,) = [d for d in run["diagnoses"] if d["id"] == "communication_straggler"]
    assert d["evidence"]["cause"]["frames"] == cause["frames"]
    assert d["title"].endswith(", in Python train.py(40): log_metrics (+400.0 µs/step)")
    assert "train.py(40): log_metrics (+400.0 µs/step); start there" in d["recommendation"]
    assert "with_stack=True" not in d["recommendation"]


def test_host_side_cause_without_stacks_names_no_frames(tmp_path: Path) -> None:
    """The same ranks without python_function events: same cause, no frames, and the
    advice to record stacks."""
    run = as_json(
        summarize_run([_host_rank(tmp_path, 0, 0.0, False), _host_rank(tmp_path, 1, 400.0, False)])
    )
    cause = run["straggler"]["cause"]
    assert cause["class"] == "host_untraced" and cause["frames"] == []
    (d,) = [d for d in run["diagnoses"] if d["id"] == "communication_straggler"]
    assert "in Python" not in d["title"] and "with_stack=True" in d["recommendation"]


def test_gpu_side_cause_names_no_frames_even_with_stacks(tmp_path: Path) -> None:
    """Extra GPU kernel time is not a host-side cause: no frames, whatever the stacks."""
    r0, r1 = _rank(tmp_path, 0, 0.0), _rank(tmp_path, 1, 400.0)
    cause = as_json(summarize_run([r0, r1]))["straggler"]["cause"]
    assert cause["class"] == "gpu_compute" and cause["frames"] == []


def _launching_rank(
    tmp_path: Path, rank: int, extra: int, extra_gpu_us: float = 0.0
) -> tuple[str, Any]:
    """3 steps of 2000 µs: ``gemm`` (300 µs at 100, launched at 80); then ``extra`` tiny
    kernels, each launched by a 20 µs call back to back from 400 µs and running 15 µs
    from 15 µs into its call; with ``extra_gpu_us``, then ``extra_gemm`` of that long
    (launched by a 10 µs call, starting 15 µs into it); then the all-reduce, launched
    when they are done and starting 30 µs after its launch, ending at 1500 µs on both
    ranks."""
    events: list[dict[str, Any]] = []
    corr = 0
    for j in range(3):
        base = 2000.0 * j
        events.append(cpu(f"ProfilerStep#{j + 1}", base, 2000, cat="user_annotation"))
        corr += 1
        events.append(_runtime("cudaLaunchKernel", base + 80, 10, corr))
        events.append(kernel("gemm", base + 100, 300, corr=corr))
        for i in range(extra):
            corr += 1
            t = base + 400 + 20 * i
            events.append(_runtime("cudaLaunchKernel", t, 20, corr))
            events.append(kernel("tiny_elementwise", t + 15, 15, corr=corr))
        launch = base + 400 + 20 * extra
        if extra_gpu_us:
            corr += 1
            events.append(_runtime("cudaLaunchKernel", launch, 10, corr))
            events.append(kernel("extra_gemm", launch + 15, extra_gpu_us, corr=corr))
            launch += 15 + extra_gpu_us
        corr += 1
        events.append(_runtime("cudaLaunchKernel", launch, 10, corr))
        ev = kernel(AR, launch + 30, base + 1500 - launch - 30, stream=20, corr=corr)
        ev["args"].update({"Collective name": "allreduce", "Group size": 2})
        events.append(ev)
    path = write_trace(
        tmp_path / f"l{rank}.json", events, distributedInfo={"rank": rank, "world_size": 2}
    )
    return f"l{rank}", summarize_file(str(path))


def test_more_kernel_launches_is_named_launches(tmp_path: Path) -> None:
    """Rank 1 launches 40 more tiny kernels per step before its all-reduce, 20 µs of
    launch call each: 800 µs/step late. Before that all-reduce it spends +800 µs/step in
    launch calls, against +600 µs of GPU compute (40 × 15 µs) and +200 µs of GPU idle
    while the host launches: the cause is kernel launches, +40 kernels/step."""
    run = as_json(
        summarize_run([_launching_rank(tmp_path, 0, 0), _launching_rank(tmp_path, 1, 40)])
    )
    s = run["straggler"]
    assert s is not None and s["rank"] == 1 and s["delay_us_per_step"] == 800.0
    cause = s["cause"]
    assert cause["class"] == "launches" and cause["label"] == "kernel launches"
    assert cause["us_per_step"] == pytest.approx(800.0)
    assert cause["classes"]["gpu_compute"] == pytest.approx(600.0)
    assert cause["launches_per_step_excess"] == 40.0 and cause["top"] == []
    (d,) = [d for d in run["diagnoses"] if d["id"] == "communication_straggler"]
    assert d["title"] == (
        "Rank 1 holds the other ranks back 800.0 µs/step (40 % of their step): kernel "
        "launches, +800.0 µs/step against the median rank before the collectives it is "
        "late to (+40 kernels/step)"
    )
    assert "kernel launch calls" in d["recommendation"]


def test_same_launches_name_no_launch_cause(tmp_path: Path) -> None:
    """Both ranks launch the same 20 tiny kernels and rank 1 then runs a 400 µs kernel
    (late by 415 µs): the launches cancel but for that one kernel's call (+10 µs), the
    cause is GPU compute (the negative of the test above)."""
    r0 = _launching_rank(tmp_path, 0, 20)
    r1 = _launching_rank(tmp_path, 1, 20, extra_gpu_us=400.0)
    s = as_json(summarize_run([r0, r1]))["straggler"]
    assert s is not None and s["rank"] == 1 and s["delay_us_per_step"] == 415.0
    cause = s["cause"]
    assert cause["class"] == "gpu_compute" and cause["us_per_step"] == pytest.approx(400.0)
    assert cause["classes"]["launches"] == pytest.approx(10.0)
    assert cause["launches_per_step_excess"] == 1.0
    assert cause["top"][0]["name"] == "extra_gemm"
