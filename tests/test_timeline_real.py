"""The tests of ``test_timeline.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from conftest import SAMPLE_LOGS
from test_timeline import _events, _timelines

from tb_kineto_insights.analysis.idle import idle_summary
from tb_kineto_insights.analysis.kernels import kernels_summary
from tb_kineto_insights.analysis.timeline import step_timelines, timeline_store
from tb_kineto_insights.analysis.timeline_format import (
    UNPACK,
    encode_store,
    store_names,
    store_shapes,
    unpack_step,
)
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.summary import summarize_file_with_timeline
from tb_kineto_insights.trace.reader import read_trace


def test_real_traces_kernel_counts_and_idle_band_match_the_panels() -> None:
    paths = sorted(SAMPLE_LOGS.glob("*/*.pt.trace.json.gz"))
    if not paths:
        pytest.skip("no sample_logs")
    for path in paths[:8]:
        index = build_index(read_trace(str(path)))
        pieces: dict[int, Any] = {}
        idle = idle_summary(index, pieces=pieces)
        kernels = kernels_summary(index)
        shown = step_timelines(index, pieces)
        # the windows left out of the steady-state steps are shown too, marked
        left = {w.number: w.reason for w in index.left_out_steps}
        assert {d.step: d.left_out for d in shown if d.left_out} == left
        docs = [d for d in shown if d.left_out is None]
        assert [d.step for d in docs] == [s.number for s in kernels.per_step]
        for doc, per_step in zip(docs, kernels.per_step, strict=True):
            assert doc.kernel_count == per_step.count > 0, path
            counted = sum(
                n
                for lane in doc.lanes
                if lane.kind == "gpu_stream"
                for n, c in zip(lane.count, lane.event_class, strict=True)
                if doc.classes[c] in ("compute", "communication")
            )
            assert counted == per_step.count
        for dev in idle.devices:
            for doc, per_step in zip(docs, dev.per_step, strict=True):
                band = sum(
                    sum(lane.dur_us)
                    for lane in doc.lanes
                    if lane.kind == "idle" and lane.device == dev.device
                )
                assert band == pytest.approx(per_step.idle_us, abs=1e-6)
                assert doc.idle_us.get(str(dev.device), 0.0) == pytest.approx(per_step.idle_us)
        assert any(lane.kind == "host_thread" for doc in docs for lane in doc.lanes), path


def test_python_frames_lane_on_the_blocking_recording() -> None:
    """sample_logs/stacks_blocking_log: log_metrics blocks ~12 ms after .item() in every
    step; the frames lane of the launching thread holds it, in every step."""
    path = next((SAMPLE_LOGS / "stacks_blocking_log").rglob("*.pt.trace.json*"))
    _, docs = _timelines(path)
    assert docs
    for doc in docs:
        (lane,) = [lane for lane in doc.lanes if lane.kind == "python_frames"]
        log = [
            d
            for n, _, d, *_ in _events(doc, lane)
            if n is not None and n.endswith("record_stacks.py(57): log_metrics")
        ]
        assert log and 10_000 <= max(log) <= 20_000, (doc.step, log)


#: sample trace → the most its store may be, as a fraction of its gzip size; the store
#: before byte-planed, gap-coded columns and names interned per store took 0.167, 0.172,
#: 0.243 and 0.315 of these (issue 28 asks for 0.10 on a 1 GB trace: GPT's is 0.099,
#: benchmarks/RESULTS.md; these small traces carry more fixed cost per step).
STORE_FRACTION_MAX = {
    "transformer_eager": 0.12,
    "ddp2_straggler": 0.12,
    "optimizer_per_param": 0.16,
    "cudnn_autotune_varying": 0.22,
}


def test_store_of_real_traces_against_their_gzip() -> None:
    """Issue 28: the timeline store against the trace's gzip size, on sample traces."""
    paths = [
        p
        for p in sorted(SAMPLE_LOGS.glob("*/*.pt.trace.json.gz"))
        if p.parent.name in STORE_FRACTION_MAX
    ]
    if not paths:
        pytest.skip("no sample_logs")
    for path in paths:
        index = build_index(read_trace(str(path)))
        pieces: dict[int, Any] = {}
        idle_summary(index, pieces=pieces)
        size = len(encode_store(timeline_store(index, pieces)))
        assert 0 < size <= STORE_FRACTION_MAX[path.parent.name] * path.stat().st_size, path


@pytest.mark.parametrize("run", ["ddp", "allocator_cached", "dataloader_workers0", "eff_mlp_fp32"])
def test_the_critical_path_lane_holds_each_steady_steps_path(run: str) -> None:
    """Issue 44 §2: each steady step's critical-path lane is disjoint and holds the
    step's path: its total is the path's length to 0.1 % (ddp's blocking copies end a
    few µs after their calls on the host's clock: the overlap is shown once;
    allocator_cached's path starts 1.8 µs into the window, at its stream's earlier
    work), never more."""
    [path] = sorted((SAMPLE_LOGS / run).glob("*.pt.trace.json.gz"))
    summary, store = summarize_file_with_timeline(str(path))
    lengths = {s.number: s.length_us for s in summary.critical_path.steps}
    names, shapes = store_names(store), store_shapes(store)
    seen = 0
    for blob in store.blobs:
        doc = unpack_step(UNPACK.decode(zlib.decompress(blob)), names, shapes)
        lanes = [lane for lane in doc.lanes if lane.kind == "critical_path"]
        if doc.step not in lengths or doc.left_out is not None:
            continue
        [lane] = lanes
        ends = [o + d for o, d in zip(lane.offset_us, lane.dur_us, strict=True)]
        assert all(b >= a - 1e-6 for a, b in zip(ends, lane.offset_us[1:], strict=False))
        total = sum(lane.dur_us)
        assert 0.999 * lengths[doc.step] <= total <= lengths[doc.step] + 1e-3, (run, doc.step)
        seen += 1
    assert seen == len(lengths) >= 3
