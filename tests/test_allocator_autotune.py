"""``allocator_churn`` and ``cudnn_autotune_in_step``: exact numbers on tiny traces, and
the known answers on the recorded pairs of ``sample_logs`` (``allocator_empty_cache`` /
``allocator_cached``, ``cudnn_autotune_varying`` / ``cudnn_autotune_fixed``, recorded by
``scripts/record_verdicts.py``; measured costs in ``recording_info.json`` → ``verdicts``).
Real traces: ``test_allocator_autotune_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis.names import is_allocator_call
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace


def rt(name: str, ts: float, dur: float, corr: int = 0) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 100,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def _summary(tmp_path: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    trace = read_trace(str(write_trace(tmp_path / "t.json", events)))
    return as_json(summarize_trace(trace))


def _churn(free_dur: float = 40.0, malloc_dur: float = 10.0) -> list[dict[str, Any]]:
    """Step [0, 200): K1 launched at [5, 7) runs [10, 50); the host is in cudaFree
    [40, 40 + free_dur) when the GPU runs dry at 50, then in cudaMalloc [85, 85 +
    malloc_dur); K2 launched at [100, 102) runs [105, 190)."""
    return [
        cpu("ProfilerStep#1", 0, 200, cat="user_annotation"),
        rt("cudaLaunchKernel", 5, 2, 1),
        kernel("K1", 10, 40, corr=1),
        rt("cudaFree", 40, free_dur),
        rt("cudaMalloc", 85, malloc_dur),
        rt("cudaLaunchKernel", 100, 2, 2),
        kernel("K2", 105, 85, corr=2),
    ]


def test_allocator_churn_exact(tmp_path: Path) -> None:
    """The gap [50, 105) opens inside cudaFree: all 55 µs are ``allocator`` idle, 27.5 %
    of the 200 µs step; one call of each kind per step, 50 µs of host time. Its fix,
    replayed: without the two calls (40 + 10 µs) the host reaches K2's launch at 50, K2
    runs 55-140 and the ProfilerStep's end (98 µs after that launch ended) comes at 150:
    150 of 200 µs, a 25 % saving (medium)."""
    s = _summary(tmp_path, _churn())
    dev = s["idle"]["devices"][0]
    assert dev["causes"]["allocator"]["us"] == 55.0
    churn = next(d for d in s["diagnoses"] if d["id"] == "allocator_churn")
    assert churn["severity"] == "medium"
    assert churn["impact_fraction"] == 0.25
    assert churn["prediction"]["predicted_step_us"] == 150.0
    assert churn["evidence"]["calls_per_step"] == {"cudaFree": 1.0, "cudaMalloc": 1.0}
    assert churn["evidence"]["host_us_per_step"] == 50.0
    # every figure of the title per step (issue 48 §10: a total read as per step)
    assert "(1 cudaFree, 1 cudaMalloc and 50 µs of host time per step)" in churn["title"]
    assert "empty_cache" in churn["recommendation"]
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" in churn["recommendation"]
    # no other diagnosis claims that idle again
    assert sum(d["impact_fraction"] for d in s["diagnoses"]) <= 1.0


def test_allocator_call_that_does_not_open_a_gap_costs_only_its_overlap(tmp_path: Path) -> None:
    """cudaFree returns at 45, before the GPU runs dry: the gap [50, 105) opens outside
    any allocator call; only the 4 µs of cudaMalloc [85, 89) inside it are ``allocator``
    idle (2 % of the step): under the 5 % bar, but the cache released memory in the step
    (the cudaFree): low allocator_churn from the information floor
    (``allocator_churn_min_fraction``, 1 %) up, at its replayed saving (without the two
    calls, 5 + 4 µs of host time, the host launches K2 9 µs earlier: 191 of 200 µs,
    4.5 %); nothing with that floor at 5 %."""
    s = _summary(tmp_path, _churn(free_dur=5.0, malloc_dur=4.0))
    assert s["idle"]["devices"][0]["causes"]["allocator"]["us"] == 4.0
    churn = next(d for d in s["diagnoses"] if d["id"] == "allocator_churn")
    assert churn["severity"] == "low" and churn["impact_fraction"] == pytest.approx(9 / 200)
    assert churn["prediction"]["predicted_step_us"] == 191.0
    assert churn["evidence"]["release_steps"] == [1]
    assert "the cache released memory in 1 of 1 steps" in churn["title"]
    trace = read_trace(str(write_trace(tmp_path / "t.json", _churn(free_dur=5.0, malloc_dur=4.0))))
    floor = DEFAULT_THRESHOLDS.replace(allocator_churn_min_fraction=0.05)
    ids = {d.id for d in summarize_trace(trace, floor).diagnoses}
    assert "allocator_churn" not in ids


def test_allocator_idle_without_a_release_stays_under_the_bar(tmp_path: Path) -> None:
    """The same 4 µs in cudaMalloc (2 % of the step) with no cudaFree in the step: new
    segments, no release (what fragmentation costs, not churn): no allocator_churn
    under the 5 % bar."""
    events = [e for e in _churn(free_dur=5.0, malloc_dur=4.0) if e["name"] != "cudaFree"]
    s = _summary(tmp_path, events)
    assert s["idle"]["devices"][0]["causes"]["allocator"]["us"] == 4.0
    assert "allocator_churn" not in {d["id"] for d in s["diagnoses"]}


@pytest.mark.parametrize(
    ("name", "yes"),
    [
        ("cudaFree", True),
        ("cudaMalloc", True),
        ("cudaMalloc_v3020", True),
        ("cuMemAlloc_v2", True),
        ("cuMemFree_v2", True),
        ("hipMalloc", True),
        ("hipFree", True),
        ("cudaMallocAsync", False),
        ("cudaFreeHost", False),
        ("cudaMallocHost", False),
    ],
)
def test_is_allocator_call(name: str, yes: bool) -> None:
    assert is_allocator_call(name) is yes


def _conv_steps(sync_steps: tuple[int, ...], sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Three 1000 µs steps at s = 0, 1000, 2000. Each: aten::conv2d [s, s+600) around
    aten::convolution [s+1, s+599) (Input Dims [[8, 3, H, H], [16, 3, 3, 3]], H from
    ``sizes``); two kernels launched from it run [s+20, s+120) and [s+210, s+310); in the
    steps of ``sync_steps`` the host waits for each (cudaEventSynchronize [s+120, s+125)
    and [s+310, s+315)). Then aten::relu [s+600, s+605) launches a kernel [s+610, s+990)."""
    events: list[dict[str, Any]] = []
    corr = 0
    for i in range(3):
        s = 1000.0 * i
        conv = cpu("aten::convolution", s + 1, 598)
        conv["args"] = {"Input Dims": [[8, 3, sizes[i], sizes[i]], [16, 3, 3, 3]]}
        events += [cpu(f"ProfilerStep#{i + 1}", s, 1000, cat="user_annotation")]
        events += [cpu("aten::conv2d", s, 600), conv]
        for at, k in ((10, 20), (200, 210)):
            corr += 1
            events += [
                rt("cudaLaunchKernel", s + at, 2, corr),
                kernel("trial", s + k, 100, corr=corr),
            ]
        if i in sync_steps:
            events += [
                rt("cudaEventSynchronize", s + 120, 5),
                rt("cudaEventSynchronize", s + 310, 5),
            ]
        corr += 1
        events += [
            cpu("aten::relu", s + 600, 5),
            rt("cudaLaunchKernel", s + 601, 2, corr),
            kernel("relu_kernel", s + 610, 380, corr=corr),
        ]
    return events


def test_cudnn_autotune_exact(tmp_path: Path) -> None:
    """Tuning in all 3 steps: the conv2d ranges (600 µs each) are 60 % of the step; the
    GPU idles 400 µs of each; new input shapes in every step. The fix, replayed: inside
    the conv2d ranges the host's calls and time go and only the last kernel (100 µs)
    stays; the relu launch comes 1 µs after the range, the relu kernel (380) waits for
    it on the stream: step 1 ends at 10 + 100 + 380 = 490, the next two steps are the
    GPU's 100 + 380 = 480 each: 1450 / 3 = 483.3 µs, a 51.7 % saving (high)."""
    s = _summary(tmp_path, _conv_steps((0, 1, 2), (32, 33, 34)))
    tune = next(d for d in s["diagnoses"] if d["id"] == "cudnn_autotune_in_step")
    assert tune["severity"] == "high" and tune["impact_fraction"] == 0.5167
    assert tune["prediction"]["predicted_step_us"] == 483.333
    assert tune["evidence"]["cost_fraction_of_step_time"] == pytest.approx(0.6)
    ev = tune["evidence"]
    assert ev["tuning_steps"] == 3 and ev["syncs_per_step"] == [2, 2, 2]
    assert ev["idle_us_per_step"] == 400.0 and ev["idle_fraction_of_step_time"] == 0.4
    assert ev["kernels_in_tuning_per_step"] == 2.0
    assert ev["conv_input_shapes_per_step"] == [1, 1, 1]
    assert ev["new_conv_input_shapes_per_step"] == [1, 1, 1]
    assert [o["op"] for o in ev["top_ops"]] == ["aten::conv2d"]
    assert "new input shapes in every step (3 distinct over 3 steps)" in tune["title"]
    assert "benchmark=False" in tune["recommendation"]
    assert sum(d["impact_fraction"] for d in s["diagnoses"]) <= 1.0


@pytest.mark.parametrize(
    ("sync_steps", "sizes"),
    [((), (32, 32, 32)), ((0,), (32, 33, 33))],
    ids=["no-sync", "tuned-once"],
)
def test_cudnn_autotune_quiet(
    tmp_path: Path, sync_steps: tuple[int, ...], sizes: tuple[int, ...]
) -> None:
    """Convolutions that only enqueue work, or a benchmark in one step of three (a new
    shape tuned once): no cudnn_autotune_in_step."""
    s = _summary(tmp_path, _conv_steps(sync_steps, sizes))
    assert "cudnn_autotune_in_step" not in {d["id"] for d in s["diagnoses"]}
