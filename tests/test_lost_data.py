"""A trace file cut short (a job killed while writing): what was lost is said, panels
whose input went with it say so, verdicts that need complete steps stay silent, and
``trace_data_loss`` is ``high`` when every GPU event is gone. On a real trace
(``sample_logs/memory_leak``: 16 MiB/step leak, known answer) cut at several points in
``tmp_path``. In its file (this Kineto) the host section (CPU ops, ``[memory]`` events,
step markers; not in time order) comes first, then kernels and runtime calls."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, as_json, cpu, kernel

from tb_kineto_insights.summary import summarize_file

(LEAK,) = (REPO / "sample_logs" / "memory_leak").glob("*.pt.trace.json.gz")
RAW = gzip.decompress(LEAK.read_bytes())
#: First byte of the GPU section: the first ``"cat": "kernel"`` event.
GPU_START = RAW.index(b'"cat": "kernel"')


def _cut(tmp_path: Path, n: int) -> dict[str, Any]:
    path = tmp_path / f"cut_{n}.pt.trace.json"
    path.write_bytes(RAW[:n])
    return as_json(summarize_file(str(path)))


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.9])
def test_cut_in_the_host_section_loses_every_gpu_event(tmp_path: Path, fraction: float) -> None:
    n = int(GPU_START * fraction)
    s = _cut(tmp_path, n)
    lost = s["health"]["trace_quality"]["lost"]
    end = lost["file_ends_at_byte"]
    assert end is not None and n - 2000 < end <= n  # the last, partial event is dropped
    assert lost["gpu_events_lost"] is True
    assert any(x.startswith("all GPU events") for x in lost["lost"])
    # Trace health lists the damaged region with its byte offset and what it lost
    (region,) = s["health"]["damage"]
    assert region["offset"] == end and region["problem"].startswith("file ends early")
    note = f"GPU events lost: the file ends at byte {end:,}"
    assert s["kernels"]["notes"][0].startswith(note)
    assert s["idle"]["notes"][0].startswith(note)
    loss = next(d for d in s["diagnoses"] if d["id"] == "trace_data_loss")
    assert loss["severity"] == "high"
    assert loss["evidence"]["file_ends_at_byte"] == end
    assert f"ends at byte {end:,}, before its GPU events" in loss["title"]
    # no step is complete: no growth is judged (the leak's known answer cannot be read)
    ids = {d["id"] for d in s["diagnoses"]}
    assert "memory_growth" not in ids
    for dev in s["memory"]["devices"]:
        assert dev["growth"]["steady"] is False
        assert any(f"ends at byte {end:,}" in note for note in dev["notes"])


@pytest.mark.parametrize("into_gpu", [0.3, 0.9])
def test_cut_in_the_gpu_section_keeps_the_host_verdicts(tmp_path: Path, into_gpu: float) -> None:
    """The host section is whole: the leak is still found (16 MiB/step, exactly), the
    loss is medium and names the byte where the file ends."""
    n = GPU_START + int((len(RAW) - GPU_START) * into_gpu)
    s = _cut(tmp_path, n)
    lost = s["health"]["trace_quality"]["lost"]
    assert lost["gpu_events_lost"] is False and lost["incomplete_steps"] == []
    end = lost["file_ends_at_byte"]
    assert end is not None and end <= n
    growth = next(d for d in s["diagnoses"] if d["id"] == "memory_growth")
    assert growth["evidence"]["bytes_per_step"] == 16 * 1024 * 1024
    loss = next(d for d in s["diagnoses"] if d["id"] == "trace_data_loss")
    assert loss["severity"] == "medium"
    assert f"ends at byte {end:,}" in loss["title"]
    assert s["kernels"]["notes"] == [] or not s["kernels"]["notes"][0].startswith("GPU events lost")
    # the steps whose launches or GPU events were cut off are left out of the step
    # panels: the cut trace gets the whole file's diagnoses, the loss, and (one step left
    # of five) too few steps
    early = into_gpu == 0.3
    assert s["health"]["steps_without_gpu_data"] == ([3, 4, 5, 6] if early else [6])
    whole = _cut_ids(tmp_path, len(RAW))
    extra = {"trace_data_loss"} | ({"trace_too_few_steps"} if early else set())
    assert {d["id"] for d in s["diagnoses"]} == whole | extra


def _cut_ids(tmp_path: Path, n: int) -> set[str]:
    return {d["id"] for d in _cut(tmp_path, n)["diagnoses"]}


def test_whole_file_loses_nothing(tmp_path: Path) -> None:
    s = _cut(tmp_path, len(RAW))
    lost = s["health"]["trace_quality"]["lost"]
    assert lost["file_ends_at_byte"] is None and lost["lost"] == []
    assert lost["gpu_events_lost"] is False
    assert "trace_data_loss" not in {d["id"] for d in s["diagnoses"]}


def _impacts_fit(s: dict[str, Any]) -> bool:
    return sum(d["impact_fraction"] for d in s["diagnoses"]) <= 1.0 + 1e-9


@pytest.mark.parametrize("into_gpu", [0.01, 0.1, 0.2])
def test_cut_in_the_first_steps_gpu_events_sets_them_aside(tmp_path: Path, into_gpu: float) -> None:
    """A cut early in the GPU section (in the autograd thread's block, before the main
    thread's: every step lost GPU work) used to keep every step and read the missing
    kernels as idle (gpu_idle_host_untraced high, low_gpu_utilization). Now the GPU
    events read are set aside: the GPU panels say they were lost, the loss is high, and
    only the host section's verdict (the 16 MiB/step leak) is left."""
    n = GPU_START + int((len(RAW) - GPU_START) * into_gpu)
    s = _cut(tmp_path, n)
    lost = s["health"]["trace_quality"]["lost"]
    end = lost["file_ends_at_byte"]
    assert end is not None and GPU_START < end <= n
    assert lost["gpu_events_lost"] is True and lost["gpu_events_set_aside"] > 0
    assert lost["launches_without_gpu_event"] == lost["launches"] > 0
    assert lost["incomplete_steps"] == []  # the host section before the cut is whole
    aside = lost["gpu_events_set_aside"]
    assert any(
        x.startswith(f"part of the GPU events of every step: the {aside} read")
        for x in lost["lost"]
    )
    note = f"GPU events lost: the file ends at byte {end:,}, inside its GPU events"
    assert s["kernels"]["notes"][0].startswith(note)
    assert s["idle"]["notes"][0].startswith(note)
    assert s["idle"]["devices"] == []
    assert [x["number"] for x in s["steps"]["steps"]] == [2, 3, 4, 5, 6]
    found = {d["id"]: d for d in s["diagnoses"]}
    assert set(found) == {"memory_growth", "trace_data_loss"}
    assert found["memory_growth"]["evidence"]["bytes_per_step"] == 16 * 1024 * 1024
    loss = found["trace_data_loss"]
    assert loss["severity"] == "high" and loss["evidence"]["gpu_events_set_aside"] == aside
    assert f"ends at byte {end:,}, inside its GPU events" in loss["title"]
    assert _impacts_fit(s)


(NO_CACHING,) = (REPO / "sample_logs" / "allocator_no_caching").glob("*.pt.trace.json.gz")
RAW_NC = gzip.decompress(NO_CACHING.read_bytes())
GPU_START_NC = RAW_NC.index(b'"cat": "kernel"')


@pytest.mark.parametrize(
    ("into_gpu", "kept"),
    [(0.01, None), (0.2, None), (0.5, None), (0.9, [2, 3, 4])],
)
def test_cut_allocator_churn_trace_raises_nothing_false(
    tmp_path: Path, into_gpu: float, kept: list[int] | None
) -> None:
    """``sample_logs/allocator_no_caching`` (whole: allocator_churn only) cut at four
    points of its GPU section. Up to half way every step lost GPU work (the main
    thread's block follows the autograd thread's): GPU events set aside, only the loss
    (high). At 90 % the steps before the cut are whole: their allocator churn is still
    found, within 10 % of the whole file's claim."""
    n = GPU_START_NC + int((len(RAW_NC) - GPU_START_NC) * into_gpu)
    path = tmp_path / "cut.pt.trace.json"
    path.write_bytes(RAW_NC[:n])
    s = as_json(summarize_file(str(path)))
    whole = as_json(summarize_file(str(NO_CACHING)))
    found = {d["id"]: d for d in s["diagnoses"]}
    lost = s["health"]["trace_quality"]["lost"]
    if kept is None:
        assert lost["gpu_events_set_aside"] > 0 and lost["gpu_events_lost"] is True
        assert set(found) == {"trace_data_loss"}
        assert found["trace_data_loss"]["severity"] == "high"
    else:
        assert lost["gpu_events_set_aside"] == 0 and lost["gpu_events_lost"] is False
        assert [x["number"] for x in s["steps"]["steps"]] == kept
        assert s["health"]["steps_without_gpu_data"] == [5]
        assert set(found) == {"allocator_churn", "trace_data_loss"}
        claim = next(d for d in whole["diagnoses"] if d["id"] == "allocator_churn")
        assert found["allocator_churn"]["impact_fraction"] == pytest.approx(
            claim["impact_fraction"], rel=0.10
        )
        assert found["trace_data_loss"]["severity"] == "medium"
    assert _impacts_fit(s)


def _two_thread_trace() -> tuple[bytes, dict[str, int]]:
    """Three 100 µs steps; the main thread (tid 1) launches K_f at s+10, the autograd
    thread (tid 2, an ``autograd::engine::evaluate_function`` op) K_b at s+50; each
    kernel runs 30 µs. Written as Kineto writes: the host section, then the GPU section
    as one block per thread (tid 2's runtime calls and kernels, then tid 1's). Returns
    the JSON bytes and the byte offset of each block event's start, by label."""
    host: list[dict[str, Any]] = []
    blocks: dict[int, list[tuple[str, dict[str, Any]]]] = {1: [], 2: []}
    for i in range(3):
        s = 100.0 * i
        host.append(cpu(f"ProfilerStep#{i + 1}", s, 100, cat="user_annotation"))
        host.append(cpu("aten::mm", s + 5, 10))
        host.append(cpu("autograd::engine::evaluate_function: MmBackward0", s + 45, 10, tid=2))
        for tid, at, corr in ((1, 10, 10 + i), (2, 50, 20 + i)):
            call = {
                "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100,
                "tid": tid, "ts": s + at, "dur": 2, "args": {"correlation": corr},
            }  # fmt: skip
            blocks[tid].append((f"rt{tid}.{i + 1}", call))
            blocks[tid].append((f"k{tid}.{i + 1}", kernel(f"K{tid}", s + at + 5, 30, corr=corr)))
    ordered = [("", e) for e in host] + blocks[2] + blocks[1]
    text = '{"traceEvents": ['
    offsets: dict[str, int] = {}
    for j, (label, e) in enumerate(ordered):
        if j:
            text += ", "
        if label:
            offsets[label] = len(text.encode())
        text += json.dumps(e)
    text += "]}"
    return text.encode(), offsets


@pytest.mark.parametrize(
    ("cut_before", "steps_left", "set_aside"),
    [
        ("k2.2", None, 1),  # in the autograd block: the main thread's calls are all lost
        ("rt1.3", [1], 0),  # in the main thread's block, after its step-2 kernel: 2, 3 cut
        # (its last kept launch, at 110 µs, is inside step 2)
        ("k1.3", [1, 2], 0),  # step 3's launch kept, its kernel lost
    ],
)
def test_cut_by_thread_blocks_exact(
    tmp_path: Path, cut_before: str, steps_left: list[int] | None, set_aside: int
) -> None:
    """Which steps a cut leaves whole, per thread block: a cut inside the autograd
    thread's block loses every main-thread launch (every step lost work: the one GPU
    event read is set aside); a cut in the main thread's block keeps the steps that
    end before its last kept launch and whose launches all kept their kernels."""
    raw, at = _two_thread_trace()
    path = tmp_path / "cut.pt.trace.json"
    path.write_bytes(raw[: at[cut_before] + 10])  # inside that event: it is lost
    s = as_json(summarize_file(str(path)))
    path.write_bytes(raw)
    whole = {d["id"] for d in as_json(summarize_file(str(path)))["diagnoses"]}
    lost = s["health"]["trace_quality"]["lost"]
    assert lost["gpu_events_set_aside"] == set_aside
    numbers = [x["number"] for x in s["steps"]["steps"]]
    if steps_left is None:
        assert lost["gpu_events_lost"] is True and numbers == [1, 2, 3]
        assert s["health"]["steps_without_gpu_data"] == []
    else:
        assert lost["gpu_events_lost"] is False and numbers == steps_left
        assert s["health"]["steps_without_gpu_data"] == [
            n for n in (1, 2, 3) if n not in steps_left
        ]
    # nothing the whole file does not say, beside the loss and the few steps left
    assert {d["id"] for d in s["diagnoses"]} <= whole | {"trace_data_loss", "trace_too_few_steps"}
