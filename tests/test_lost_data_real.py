"""A real trace cut short (``test_lost_data.py``'s subject): ``sample_logs/memory_leak``
(16 MiB/step leak, known answer) cut at several points in ``tmp_path``. In its file (this
Kineto) the host section (CPU ops, ``[memory]`` events, step markers; not in time order)
comes first, then kernels and runtime calls. ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, as_json

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
