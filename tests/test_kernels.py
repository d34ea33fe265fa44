"""Kernel density (analysis/kernels.py): exact numbers on tiny hand-written traces, and
sanity plus independent recounts on real traces.
Real traces: ``test_kernels_real.py``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.analysis.kernels import (
    HISTOGRAM_EDGES_US,
    LAUNCH_BOUND_DENOMINATOR,
    NO_KERNELS_NOTE,
    NO_LINKS_NOTE,
    duration_histogram,
    innermost_ops,
    kernels_summary,
)
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.schema.kernels import HistogramBin, KernelsPanel
from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.reader import read_trace


def step(n: int, ts: float, dur: float) -> dict[str, Any]:
    return cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


def launch(ts: float, dur: float, corr: int, name: str = "cudaLaunchKernel") -> dict[str, Any]:
    event = cpu(name, ts, dur, cat="cuda_runtime")
    event["args"] = {"correlation": corr}
    return event


def summarize(tmp_path: Path, events: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    """The kernels panel of a tiny trace, as built-ins (the JSON a front end reads)."""
    trace = read_trace(str(write_trace(tmp_path / "t.json", events)))
    summary = kernels_summary(build_index(trace), **kw)
    assert isinstance(summary, KernelsPanel)
    plain: dict[str, Any] = msgspec.to_builtins(summary)
    assert_plain_json(plain)
    return plain


def assert_plain_json(value: Any) -> None:
    """Only plain JSON types (no numpy scalars: ``to_builtins`` refuses them), no NaN/inf,
    string keys; a Struct is checked as the built-ins it encodes to."""
    if isinstance(value, msgspec.Struct):
        value = msgspec.to_builtins(value)
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str
            assert_plain_json(item)
    elif isinstance(value, list):
        for item in value:
            assert_plain_json(item)
    elif isinstance(value, float):
        assert math.isfinite(value)
    else:
        assert value is None or type(value) in (str, int, bool), (type(value), value)
    json.dumps(value, allow_nan=False)


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in rows}


# --- a small trace exercising every metric ------------------------------------------
#
# step 1 (cpu 0..100): gemm<float> 20 µs (s7) overlapping add<float> 4 µs (s8),
#   add<double> 5 µs, an NCCL kernel 12 µs on device 1
# step 2 (cpu 100..200): one cudaGraphLaunch (corr 4) -> graphk_a 2, graphk_b 3,
#   gemm<half> 30 µs; add<float> 4 µs with a launch of exactly 4 µs
# after the steps: a 7 µs kernel with no launch call (corr 99)
BASIC: list[dict[str, Any]] = [
    step(1, 0, 100),
    step(2, 100, 100),
    launch(2, 5, 1),
    launch(8, 6, 2),
    launch(20, 3, 3),
    launch(30, 2, 6),
    launch(110, 10, 4, "cudaGraphLaunch"),
    launch(150, 4, 5),
    kernel("void gemm<float>(float*, int)", 10, 20, stream=7, corr=1),
    kernel("void add<float>(float*, int)", 15, 4, stream=8, corr=2),
    kernel("void add<double>(double*, int)", 40, 5, stream=7, corr=3),
    kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 50, 12, device=1, corr=6),
    kernel("graphk_a", 120, 2, corr=4),
    kernel("graphk_b", 123, 3, corr=4),
    kernel("void gemm<half>(half*, int)", 127, 30, corr=4),
    kernel("void add<float>(float*, int)", 160, 4, corr=5),
    kernel("stray_kernel", 500, 7, corr=99),
]


def test_counts_steps_and_short_share(tmp_path: Path) -> None:
    s = summarize(tmp_path, BASIC)
    assert s["count"] == 9
    assert s["count_in_steps"] == 8
    assert s["outside_steps"] == {"count": 1, "time_us": 7.0}
    assert s["per_step"] == [
        {"number": 1, "count": 4, "time_us": 41.0, "short_count": 2},  # overlap summed
        {"number": 2, "count": 4, "time_us": 39.0, "short_count": 3},
    ]
    assert s["mean_per_step"] == 4.0
    assert s["short_threshold_us"] == 10.0
    # the graph-launched kernels count like any other: 5 short of 8 in steps
    assert s["short_count_fraction"] == 5 / 8
    assert s["short_time_fraction"] == (4 + 5 + 2 + 3 + 4) / 80
    assert s["graph_launched_count"] == 3
    assert s["devices"] == {
        "0": {"count": 7, "time_us": 68.0, "short_count_fraction": 5 / 7},
        "1": {"count": 1, "time_us": 12.0, "short_count_fraction": 0.0},
    }
    assert any("1 of 9 kernels have no launch call" in n for n in s["notes"])
    assert any(n.startswith("3 kernels launched by CUDA graph") for n in s["notes"])
    assert any(n.startswith("1 kernel started outside every step") for n in s["notes"])


def test_launch_bound_share_excludes_graph_launches(tmp_path: Path) -> None:
    launch_stats = summarize(tmp_path, BASIC)["launch"]
    assert launch_stats == {
        "mean_launch_us": (5 + 6 + 3 + 2 + 10 + 4) / 6,  # the graph launch is a launch call
        "launch_count": 6,
        # add<float> (4 < 6) only: gemm 20 > 5, add<double> 5 > 3, nccl 12 > 2, and the
        # last add<float> equals its 4 µs launch (not shorter); graph kernels excluded
        "one_to_one_count": 5,
        "launch_bound_count": 1,
        "launch_bound_fraction": 0.2,
        "launch_bound_denominator": LAUNCH_BOUND_DENOMINATOR,
        "unlinked_kernels": 1,
        # one replay (10 µs of host time) launching 3 kernels in the steps
        "graph_launches": 1,
        "graph_launch_host_us": 10.0,
        "graph_kernels": 3,
    }


def test_histogram_bins_on_trace(tmp_path: Path) -> None:
    hist = summarize(tmp_path, BASIC)["duration_histogram"]
    assert [(r["lo_us"], r["hi_us"]) for r in hist] == [
        (float(lo), None if math.isinf(hi) else float(hi))
        for lo, hi in zip(HISTOGRAM_EDGES_US[:-1], HISTOGRAM_EDGES_US[1:], strict=True)
    ]
    nonzero = {(r["lo_us"], r["count"], r["time_us"]) for r in hist if r["count"]}
    assert nonzero == {(2.0, 4, 13.0), (5.0, 1, 5.0), (10.0, 1, 12.0), (20.0, 2, 50.0)}


def test_histogram_edges_exact() -> None:
    us = 1000
    dur = np.array(
        [0, 999, 1 * us, 1999, 2 * us, 9999, 10 * us, 9_999_999, 10_000 * us, 50_000 * us],
        dtype=np.int64,
    )
    hist = duration_histogram(dur)
    counts = [r.count for r in hist]
    assert counts == [2, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 2]
    assert hist[-1] == HistogramBin(lo_us=10000.0, hi_us=None, count=2, time_us=60_000.0)
    assert hist[0].time_us == 0.999
    assert sum(r.count for r in duration_histogram(np.zeros(0, dtype=np.int64))) == 0


def test_top_kernels_fold_template_instantiations(tmp_path: Path) -> None:
    s = summarize(tmp_path, BASIC)
    top_count = s["top_by_count"]
    assert [r["name"] for r in top_count] == [
        "add<…>",  # add<float> ×2 and add<double> fold into one row
        "gemm<…>",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",  # count ties broken by time
        "graphk_b",
        "graphk_a",
    ]
    assert [r["name"] for r in s["top_by_time"]][:3] == [
        "gemm<…>",
        "add<…>",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    ]
    rows = by_name(top_count)
    assert rows["add<…>"] == {
        "name": "add<…>",
        "full_name": "void add<float>(float*, int)",  # the most frequent instantiation
        "count": 3,
        "time_us": 13.0,
        "mean_us": 13.0 / 3,
        "short_fraction": 1.0,
        "is_communication": False,
    }
    assert rows["gemm<…>"]["count"] == 2 and rows["gemm<…>"]["time_us"] == 50.0
    assert rows["gemm<…>"]["short_fraction"] == 0.0
    assert rows["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]["is_communication"] is True
    assert "stray_kernel" not in rows  # outside every step

    two = summarize(tmp_path, BASIC, thresholds=Thresholds(top_kernels=2))
    assert [r["name"] for r in two["top_by_count"]] == ["add<…>", "gemm<…>"]


# --- fusion candidates ---------------------------------------------------------------


def fusion_events() -> list[dict[str, Any]]:
    """Step 1: four times ka, kb, kc (2 µs each) then a 12 µs kernel, each repetition
    issued inside ``aten::softmax`` (itself inside ``aten::outer``; a closed
    ``aten::empty`` starts with it); a device-1 kernel and a short NCCL kernel on
    another stream interleaved (neither may break the run); then ka, kb at the end of
    the step. Step 2 starts with kc then a long kernel: the run must break at the step
    boundary. Step 2 also holds kd, ke, kf twice (below fusion_min_repeats)."""
    events = [step(1, 0, 170), step(2, 170, 100), cpu("aten::outer", 0.5, 160)]
    corr = 0

    def issue(
        name: str, launch_ts: float, gpu_ts: float, dur: float, device: int = 0, stream: int = 7
    ) -> None:
        nonlocal corr
        corr += 1
        events.append(launch(launch_ts, 0.5, corr))
        events.append(kernel(name, gpu_ts, dur, device=device, stream=stream, corr=corr))

    for i in range(4):
        base = 40 * i
        events.append(cpu("aten::softmax", base + 1, 29))
        events.append(cpu("aten::empty", base + 1, 0.5))
        issue("ka", base + 2, base + 10, 2)
        issue("kb", base + 4, base + 13, 2)
        issue("other_device", base + 5, base + 14, 1, device=1)
        issue("ncclDevKernel_SendRecv(ncclDevComm*)", base + 5.5, base + 15, 1, stream=9)
        issue("kc", base + 6, base + 16, 2)
        issue("long_kernel", base + 8, base + 19, 12)
    issue("ka", 160, 162, 2)
    issue("kb", 161, 165, 2)
    # step 2
    issue("kc", 171, 172, 2)
    issue("long_kernel", 172, 176, 12)
    for i in range(2):
        base = 190 + 20 * i
        issue("kd", base, base + 1, 1)
        issue("ke", base + 1, base + 3, 1)
        issue("kf", base + 2, base + 5, 1)
        issue("long_kernel", base + 3, base + 7, 12)
    return events


def test_fusion_candidates_exact(tmp_path: Path) -> None:
    s = summarize(tmp_path, fusion_events())
    assert s["fusion_candidates"] == [
        {
            "kernels": ["ka", "kb", "kc"],
            "length": 3,
            "truncated": False,
            "occurrences": 4,  # not 5: ka, kb | kc spans a step boundary
            "per_step": 2.0,  # 4 occurrences / 2 steps
            "total_time_us": 24.0,
            "cpu_op": "aten::softmax",  # innermost open op, not the closed aten::empty
        }
    ]
    twice = summarize(tmp_path, fusion_events(), thresholds=Thresholds(fusion_min_repeats=2))
    assert [c["kernels"] for c in twice["fusion_candidates"]] == [
        ["ka", "kb", "kc"],
        ["kd", "ke", "kf"],
    ]
    assert twice["fusion_candidates"][1]["cpu_op"] is None  # no CPU op around its launch
    assert twice["fusion_candidates"][1]["total_time_us"] == 6.0


def test_fusion_long_run_grouped_whole_and_truncated(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    corr = 0
    for n in range(3):  # three steps, each one run of 20 short kernels then a long one
        t0 = 1000 * n
        events.append(step(n + 1, t0, 900))
        events.append(cpu("Optimizer.step", t0 + 1, 800))
        for i in range(21):
            corr += 1
            name, dur = ("long_kernel", 50) if i == 20 else (f"k{i % 2}", 1)
            events.append(launch(t0 + 2 + i, 0.5, corr))
            events.append(kernel(name, t0 + 30 + 2 * i, dur, corr=corr))
    (cand,) = summarize(tmp_path, events)["fusion_candidates"]
    assert cand["length"] == 20 and cand["truncated"] is True
    assert cand["kernels"] == ["k0", "k1"] * 8
    assert cand["occurrences"] == 3 and cand["per_step"] == 1.0
    assert cand["total_time_us"] == 60.0
    assert cand["cpu_op"] == "Optimizer.step"


# --- missing data --------------------------------------------------------------------


def test_no_kernels(tmp_path: Path) -> None:
    s = summarize(tmp_path, [step(1, 0, 10), cpu("aten::add", 1, 2)])
    assert s["count"] == 0 and s["count_in_steps"] == 0
    assert s["notes"] == [NO_KERNELS_NOTE]
    assert s["short_count_fraction"] is None and s["short_time_fraction"] is None
    assert s["launch"]["launch_bound_fraction"] is None
    assert s["launch"]["mean_launch_us"] is None
    assert s["top_by_count"] == [] and s["fusion_candidates"] == [] and s["devices"] == {}
    assert s["per_step"] == [{"number": 1, "count": 0, "time_us": 0.0, "short_count": 0}]


def test_no_correlation_ids(tmp_path: Path) -> None:
    events = [step(1, 0, 100), launch(1, 5, 1)]
    for i in range(3):
        k = kernel("k", 10 + 5 * i, 2)
        del k["args"]["correlation"]
        events.append(k)
    s = summarize(tmp_path, events)
    assert NO_LINKS_NOTE in s["notes"]
    assert s["launch"]["unlinked_kernels"] == 3
    assert s["launch"]["one_to_one_count"] == 0
    assert s["launch"]["launch_bound_fraction"] is None
    assert s["short_count_fraction"] == 1.0


def test_no_step_markers(tmp_path: Path) -> None:
    s = summarize(tmp_path, [launch(1, 5, 1), kernel("k", 10, 2, corr=1)])
    assert s["count"] == s["count_in_steps"] == 1
    assert s["per_step"] == [{"number": 0, "count": 1, "time_us": 2.0, "short_count": 1}]
    assert any("no ProfilerStep markers" in n for n in s["notes"])


# --- innermost CPU op: against brute force --------------------------------------------


def _nested(
    rng: np.random.Generator, lo: int, hi: int, depth: int, out: list[tuple[int, int]]
) -> None:
    """Append properly nested random intervals inside ``[lo, hi]`` to ``out``."""
    t = lo
    while t < hi and depth < 5:
        a = int(rng.integers(t, hi))
        b = int(rng.integers(a, hi + 1))
        out.append((a, b))
        if b - a > 2:
            _nested(rng, a, b, depth + 1, out)
        t = b + int(rng.integers(0, 3))


def test_innermost_ops_matches_brute_force() -> None:
    rng = np.random.default_rng(7)
    spans: list[tuple[int, int]] = []
    tids: list[int] = []
    for thread in (1, 2):
        before = len(spans)
        _nested(rng, 0, 5000, 0, spans)
        tids += [thread] * (len(spans) - before)
    order = rng.permutation(len(spans))  # the function must not rely on input order
    start = np.array([spans[i][0] for i in order], dtype=np.int64)
    end = np.array([spans[i][1] for i in order], dtype=np.int64)
    tid = np.array([tids[i] for i in order], dtype=np.int64)
    table = m.EventTable(
        name=np.zeros(start.size, dtype=np.int32),
        start_ns=start,
        dur_ns=end - start,
        pid=np.full(start.size, 100, dtype=np.int64),
        tid=tid,
    )
    q_t = rng.integers(-5, 5005, size=3000).astype(np.int64)
    q_tid = rng.integers(1, 4, size=3000).astype(np.int64)  # thread 3 has no ops
    got = innermost_ops(table, np.full(3000, 100, dtype=np.int64), q_tid, q_t)
    for t, th, row in zip(q_t.tolist(), q_tid.tolist(), got.tolist(), strict=True):
        holders = [
            j
            for j in range(start.size)
            if tid[j] == th and start[j] <= t < end[j]  # half-open
        ]
        if not holders:
            assert row == -1
            continue
        # innermost: latest start, then shortest
        best = min(holders, key=lambda j: (-int(start[j]), int(end[j] - start[j])))
        assert row >= 0
        assert (start[row], end[row]) == (start[best], end[best])


# --- real traces -----------------------------------------------------------------------


def test_thread_start_order_equals_the_four_key_lexsort() -> None:
    """``innermost_ops``' row order (pid, tid, start, -dur, row), built from the table's
    start order, is exactly ``np.lexsort((-dur, start, tid, pid))``: with equal starts,
    several threads, huge tids, and a table that is not start-sorted."""
    from tb_kineto_insights.analysis.kernels import _thread_start_order

    rng = np.random.default_rng(9)
    for it in range(400):
        n = int(rng.integers(0, 50))
        start = rng.integers(0, 15, n).astype(np.int64)
        if it % 4:
            start = np.sort(start)
        table = m.EventTable(
            name=np.zeros(n, dtype=np.int32),
            start_ns=start,
            dur_ns=rng.integers(0, 6, n).astype(np.int64),
            pid=rng.integers(-2, 2 if it % 3 else -1, n).astype(np.int64),
            tid=rng.integers(0, 3 if it % 2 else 1, n).astype(np.int64)
            * (2**40 if it % 5 == 0 else 1),
        )
        want = np.lexsort((-table.dur_ns, table.start_ns, table.tid, table.pid))
        assert _thread_start_order(table).tolist() == want.tolist()


def test_device_start_order_equals_lexsort() -> None:
    from tb_kineto_insights.analysis.kernels import _device_start_order

    rng = np.random.default_rng(17)
    for it in range(400):
        n = int(rng.integers(0, 40))
        start = rng.integers(0, 12, n).astype(np.int64)
        if it % 4:
            start = np.sort(start)
        device = rng.integers(-1, 3 if it % 3 else 0, n).astype(np.int64)
        want = np.lexsort((start, device))
        assert _device_start_order(start, device).tolist() == want.tolist()
