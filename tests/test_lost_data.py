"""A trace file cut short (a job killed while writing): what was lost is said, panels
whose input went with it say so, verdicts that need complete steps stay silent, and
``trace_data_loss`` is ``high`` when every GPU event is gone. Here a tiny trace written
as Kineto writes it (the host section, then the GPU section); a real trace cut at several
points: ``test_lost_data_real.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel

from tb_kineto_insights.summary import summarize_file


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
