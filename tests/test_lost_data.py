"""A trace file cut short (a job killed while writing): what was lost is said, panels
whose input went with it say so, verdicts that need complete steps stay silent, and
``trace_data_loss`` is ``high`` when every GPU event is gone. On a real trace
(``sample_logs/memory_leak``: 16 MiB/step leak, known answer) cut at several points in
``tmp_path``. In its file (this Kineto) the host section (CPU ops, ``[memory]`` events,
step markers; not in time order) comes first, then kernels and runtime calls."""

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
