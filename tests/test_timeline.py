"""Per-step timelines (``analysis.timeline``): exact lanes on the tiny trace of
``test_analysis.py``, the idle band against the idle panel, level of detail and nesting
depth on hand-made cases, and ranges on real traces.
Real traces: ``test_timeline_real.py``."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from conftest import cpu, kernel, write_trace
from test_analysis import MAIN_EVENTS, launch, step

from tb_kineto_insights.analysis.idle import idle_summary
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.timeline import (
    merge_narrow_runs,
    nesting_depth,
    step_timelines,
    timeline_store,
)
from tb_kineto_insights.analysis.timeline_format import (
    PYTHON_CLASS,
    UNPACK,
    correlation_code,
    correlation_decode,
    decode_store,
    encode_store,
    find_step,
    gap_decode,
    load_step,
    narrow,
    store_names,
    unpack_step,
    widen,
)
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.schema.timeline import TimelineLane, TimelineStep
from tb_kineto_insights.trace.reader import read_trace

DEFAULT = Thresholds()


def _timelines(path: Path, thresholds: Thresholds = DEFAULT) -> tuple[Any, list[TimelineStep]]:
    index = build_index(read_trace(str(path)))
    pieces: dict[int, Any] = {}
    idle = idle_summary(index, thresholds, pieces=pieces)
    return (index, idle), step_timelines(index, pieces, thresholds)


def _events(doc: TimelineStep, lane: TimelineLane) -> list[tuple[Any, ...]]:
    """(name, offset_us, dur_us, class, depth, correlation, count) per event."""
    return [
        (
            doc.names[n] if n >= 0 else None,
            o,
            d,
            doc.classes[c],
            depth,
            corr,
            count,
        )
        for n, o, d, c, depth, corr, count in zip(
            lane.name,
            lane.offset_us,
            lane.dur_us,
            lane.event_class,
            lane.depth,
            lane.correlation,
            lane.count,
            strict=True,
        )
    ]


def test_lanes_of_the_tiny_trace_exact(tmp_path: Path) -> None:
    (index, idle), (one, two) = _timelines(write_trace(tmp_path / "w.1.pt.trace.json", MAIN_EVENTS))
    assert (one.step, one.start_us, one.end_us, one.duration_us) == (1, 0.0, 100.0, 100.0)
    assert (two.step, two.start_us, two.end_us) == (2, 100.0, 200.0)
    assert one.kernel_count == 3 and two.kernel_count == 2  # K7 lies in no step
    lanes = {(lane.kind, lane.label): lane for lane in one.lanes}
    assert list(lanes) == [
        ("gpu_stream", "GPU 0 stream 7"),
        ("gpu_stream", "GPU 0 stream 8"),
        ("host_thread", "thread 1"),
        ("idle", "GPU 0 idle"),
    ]
    s7 = lanes[("gpu_stream", "GPU 0 stream 7")]
    assert (s7.device, s7.stream, s7.pid) == (0, 7, None)
    assert _events(one, s7) == [
        ("K1", 40.0, 20.0, "compute", 0, 1, 1),
        ("K3", 80.0, 5.0, "compute", 0, 3, 1),
    ]
    assert _events(one, lanes[("gpu_stream", "GPU 0 stream 8")]) == [
        ("K2", 50.0, 20.0, "compute", 0, 2, 1)
    ]
    host = lanes[("host_thread", "thread 1")]
    assert (host.pid, host.tid) == (100, 1)
    dl = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert _events(one, host) == [
        (dl, 0.0, 30.0, "data_loading", 0, -1, 1),
        ("aten::conv2d", 30.0, 20.0, "cpu_ops", 0, -1, 1),
        ("cudaLaunchKernel", 32.0, 3.0, "launching", 2, 1, 1),
        ("cudaLaunchKernel", 36.0, 2.0, "launching", 2, 2, 1),
        ("Optimizer.step#SGD.step", 70.0, 20.0, "optimizer_step", 0, -1, 1),
        ("cudaLaunchKernel", 72.0, 2.0, "launching", 2, 3, 1),
    ]
    band = _events(one, lanes[("idle", "GPU 0 idle")])
    assert [(n, o, d, c) for n, o, d, c, *_ in band] == [
        ("data_loading", 0.0, 30.0, "idle:data_loading"),
        ("cpu_ops", 30.0, 2.0, "idle:cpu_ops"),
        ("launching", 32.0, 3.0, "idle:launching"),
        ("cpu_ops", 35.0, 1.0, "idle:cpu_ops"),
        ("launching", 36.0, 2.0, "idle:launching"),
        ("cpu_ops", 38.0, 2.0, "idle:cpu_ops"),
        ("optimizer_step", 70.0, 10.0, "idle:optimizer_step"),
        ("optimizer_step", 85.0, 5.0, "idle:optimizer_step"),
        ("host_untraced", 90.0, 10.0, "idle:host_untraced"),
    ]
    # the band is the idle panel, cause by cause
    (dev,) = idle.devices
    for doc, per_step in zip((one, two), dev.per_step, strict=True):
        assert doc.idle_us == {"0": per_step.idle_us}
        band_lane = next(lane for lane in doc.lanes if lane.kind == "idle")
        by_cause: dict[str, float] = {}
        for n, _, d, *_ in _events(doc, band_lane):
            by_cause[n] = by_cause.get(n, 0.0) + d
        assert by_cause == {c: us for c, us in per_step.causes_us.items() if us}
    # step 2: the sync-opened gap is host_sync whole; a host range open across the
    # window start is kept (none here), the step-1 ranges are not
    band2 = _events(two, next(lane for lane in two.lanes if lane.kind == "idle"))
    assert ("host_sync", 40.0, 15.0) in [(n, o, d) for n, o, d, *_ in band2]
    host2 = next(lane for lane in two.lanes if lane.kind == "host_thread")
    assert _events(two, host2)[0][:3] == ("aten::mm", 0.0, 10.0)
    assert ("cudaStreamSynchronize", 18.0, 24.0, "host_sync", 2, 99, 1) in _events(two, host2)


def test_host_lane_two_levels_and_ranges_open_at_the_window_start(tmp_path: Path) -> None:
    events = [
        step(1, 0, 100),
        cpu("outer", 0, 90),
        cpu("mid", 5, 50),
        cpu("deep", 10, 10),  # depth 2: left out
        launch(12, 2, 1),
        kernel("K", 20, 10, corr=1),
        cpu("long", 80, 60),  # open across the step boundary
        step(2, 100, 100),
        launch(150, 2, 2),
        kernel("K", 160, 10, corr=2),
    ]
    _, (one, two) = _timelines(write_trace(tmp_path / "t.json", events))
    host1 = next(lane for lane in one.lanes if lane.kind == "host_thread")
    assert [(n, o, depth) for n, o, _, _, depth, *_ in _events(one, host1)] == [
        ("outer", 0.0, 0),
        ("mid", 5.0, 1),
        ("cudaLaunchKernel", 12.0, 2),
        ("long", 80.0, 1),  # inside outer [0, 90)
    ]
    host2 = next(lane for lane in two.lanes if lane.kind == "host_thread")
    assert [(n, o, d) for n, o, d, *_ in _events(two, host2)] == [
        ("long", -20.0, 60.0),
        ("cudaLaunchKernel", 50.0, 2.0),
    ]


def test_dataloader_thread_lane(tmp_path: Path) -> None:
    dl = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    events = [
        step(1, 0, 100),
        launch(10, 2, 1),
        kernel("K", 20, 10, corr=1),
        cpu(dl, 30, 40, cat="user_annotation", tid=5),
        cpu("pin_memory", 35, 10, tid=5),
        cpu("unrelated", 0, 10, tid=9),  # neither launches nor loads data: no lane
    ]
    _, (one,) = _timelines(write_trace(tmp_path / "t.json", events))
    kinds = [(lane.kind, lane.tid) for lane in one.lanes]
    assert kinds == [
        ("gpu_stream", None),
        ("host_thread", 1),
        ("dataloader_thread", 5),
        ("idle", None),
    ]
    loader = one.lanes[2]
    assert [(n, c, depth) for n, _, _, c, depth, *_ in _events(one, loader)] == [
        (dl, "data_loading", 0),
        ("pin_memory", "cpu_ops", 1),
    ]


def test_runtime_calls_are_classed_as_the_idle_band_names_them(tmp_path: Path) -> None:
    """A cudaFree (allocator), a cudaStreamSynchronize (host sync) and a launch on the
    host lane get the classes the idle band uses for the same time."""
    events = [
        step(1, 0, 100),
        launch(10, 2, 1),
        kernel("K", 20, 10, corr=1),
        cpu("cudaFree", 40, 20, cat="cuda_runtime"),
        cpu("cudaStreamSynchronize", 70, 5, cat="cuda_runtime"),
    ]
    _, (one,) = _timelines(write_trace(tmp_path / "t.json", events))
    host = next(lane for lane in one.lanes if lane.kind == "host_thread")
    assert [(n, c) for n, _, _, c, *_ in _events(one, host)] == [
        ("cudaLaunchKernel", "launching"),
        ("cudaFree", "allocator"),
        ("cudaStreamSynchronize", "host_sync"),
    ]


def test_communication_memcpy_memset_classes(tmp_path: Path) -> None:
    events = [
        step(1, 0, 100),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10, 20, stream=9, corr=1),
        {**kernel("Memcpy HtoD (Pageable -> Device)", 40, 5, corr=2), "cat": "gpu_memcpy"},
        {**kernel("Memset (Device)", 50, 1, corr=3), "cat": "gpu_memset"},
    ]
    _, (one,) = _timelines(write_trace(tmp_path / "t.json", events))
    got = {
        (lane.stream, one.names[n], one.classes[c])
        for lane in one.lanes
        if lane.kind == "gpu_stream"
        for n, c in zip(lane.name, lane.event_class, strict=True)
    }
    assert got == {
        (9, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication"),
        (7, "Memcpy HtoD (Pageable -> Device)", "memcpy"),
        (7, "Memset (Device)", "memset"),
    }
    assert one.kernel_count == 1  # memcpy and memset are not kernels


def test_merge_narrow_runs_exact() -> None:
    s = np.array([0, 2, 4, 10, 30, 31, 100], dtype=np.int64)
    e = np.array([1, 3, 5, 20, 30, 32, 101], dtype=np.int64)
    first, last, count = merge_narrow_runs(s, e, 2)
    # [0,1) [2,3) [4,5) narrow, 1 apart: one block; [10,20) wide; [30,30) and [31,32):
    # a block; [100,101) alone (69 after the previous end)
    assert first.tolist() == [0, 3, 4, 6]
    assert last.tolist() == [2, 3, 5, 6]
    assert count.tolist() == [3, 1, 2, 1]
    # a gap of exactly the threshold separates
    f2, _, c2 = merge_narrow_runs(np.array([0, 3]), np.array([1, 4]), 2)
    assert f2.tolist() == [0, 1] and c2.tolist() == [1, 1]
    none = np.zeros(0, np.int64)
    assert [a.size for a in merge_narrow_runs(none, none, 5)] == [0, 0, 0]


def test_level_of_detail_keeps_the_kernel_count(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = [step(1, 0, 1000)]
    for i in range(30):  # 30 kernels of 0.5 µs, 0.5 µs apart, then one of 100 µs
        events.append(kernel("tiny", 10 + i, 0.5, corr=0))
    events.append(kernel("big", 100, 100, corr=0))
    events.append(kernel("tiny2", 300, 0.5, corr=0))
    path = write_trace(tmp_path / "t.json", events)
    lod = Thresholds().replace(timeline_lod_min_events=10, timeline_block_us=1.0)
    _, (one,) = _timelines(path, lod)
    (lane,) = [lane for lane in one.lanes if lane.kind == "gpu_stream"]
    assert lane.count == [30, 1, 1] and sum(lane.count) == one.kernel_count == 32
    assert lane.offset_us == [10.0, 100.0, 300.0] and lane.dur_us == [29.5, 100.0, 0.5]
    assert one.names[lane.name[0]] == "tiny" and lane.correlation[0] == -1
    assert one.block_us == 1.0
    _, (plain,) = _timelines(path)  # below the default lane size: event by event
    (lane,) = [lane for lane in plain.lanes if lane.kind == "gpu_stream"]
    assert lane.count == [1] * 32 and plain.block_us == 0.0


def test_nesting_depth_exact() -> None:
    s = np.array([0, 0, 5, 10, 10, 20, 50, 50], dtype=np.int64)
    e = np.array([100, 40, 8, 10, 30, 25, 60, 50], dtype=np.int64)
    # 0:[0,100) top; 1:[0,40) in 0; 2:[5,8) in 1; 4:[10,30) in 1; 3:[10,10)
    # zero-length at 4's start: sorts after 4 (longer first), so inside it; 5:[20,25) in
    # 4; 6:[50,60) in 0; 7:[50,50) zero-length, inside 6
    assert nesting_depth(s, e).tolist() == [0, 1, 2, 3, 2, 3, 1, 2]
    shuffled = np.array([7, 2, 5, 0, 3, 6, 1, 4])
    assert nesting_depth(s[shuffled], e[shuffled]).tolist() == [2, 2, 3, 0, 3, 1, 1, 2]
    assert nesting_depth(np.zeros(0, np.int64), np.zeros(0, np.int64)).size == 0


def test_store_round_trip_and_lookup(tmp_path: Path) -> None:
    index = build_index(read_trace(str(write_trace(tmp_path / "w.json", MAIN_EVENTS))))
    pieces: dict[int, Any] = {}
    idle_summary(index, pieces=pieces)
    store = decode_store(encode_store(timeline_store(index, pieces)))
    assert store.steps == [1, 2]
    assert find_step(store, 2) == 1 and find_step(store, 3) is None
    assert load_step(store, 1) == step_timelines(index, pieces)[1]


def test_python_frames_lane_exact(tmp_path: Path) -> None:
    """The launching thread's innermost user frames, library frames folded in, touching
    pieces of one frame merged, a frame across the step boundary in both steps; a thread
    that launches no GPU work gets no frames lane."""
    from test_python_frames import LOG, LOOP, SLEEP, STEP, TORCH, py

    events = [
        *MAIN_EVENTS,
        py(STEP, 0, 95),
        py(TORCH, 10, 10),  # library: folded into train_step
        py(LOG, 40, 10),
        py(SLEEP, 42, 6),  # library: folded into log_metrics
        py(LOG, 50, 10),  # a second call right after: one run with the first
        py(STEP, 98, 32),  # straddles the step boundary at 100
        py(LOOP, 0, 50, tid=2),  # a thread without launches: no lane
    ]
    _, (one, two) = _timelines(write_trace(tmp_path / "w.1.pt.trace.json", events))
    kinds = [(lane.kind, lane.label) for lane in one.lanes]
    assert kinds == [
        ("gpu_stream", "GPU 0 stream 7"),
        ("gpu_stream", "GPU 0 stream 8"),
        ("host_thread", "thread 1"),
        ("python_frames", "thread 1 Python"),
        ("idle", "GPU 0 idle"),
    ]
    lane = one.lanes[3]
    assert (lane.pid, lane.tid) == (100, 1)
    assert _events(one, lane) == [
        (STEP, 0.0, 40.0, "python_frame", 0, -1, 1),
        (LOG, 40.0, 20.0, "python_frame", 0, -1, 1),
        (STEP, 60.0, 35.0, "python_frame", 0, -1, 1),
        (STEP, 98.0, 32.0, "python_frame", 0, -1, 1),
    ]
    (lane2,) = [lane for lane in two.lanes if lane.kind == "python_frames"]
    assert _events(two, lane2) == [(STEP, -2.0, 32.0, "python_frame", 0, -1, 1)]


def test_no_python_frames_lane_without_stacks(tmp_path: Path) -> None:
    _, docs = _timelines(write_trace(tmp_path / "w.1.pt.trace.json", MAIN_EVENTS))
    assert all(lane.kind != "python_frames" for doc in docs for lane in doc.lanes)
    assert all(doc.classes[PYTHON_CLASS] == "python_frame" for doc in docs)


def test_column_codec_exact() -> None:
    """Byte-planed narrow columns, the correlation code and the gap code invert exactly."""
    for values, width in (
        ([0, 0, 0], 0),  # a column of zeros: no bytes
        ([1, -1, 127, -128], 1),
        ([300, -2, 0], 2),
        ([70_000, -5, 1], 4),
        ([2**40, -(2**40), 3], 8),
    ):
        column = np.array(values, dtype=np.int64)
        w, data = narrow(column)
        assert w == width and len(data) == width * column.size
        assert widen(data, w, column.size, 0).tolist() == values
    # byte planes: the low bytes of every value first, then the high bytes
    assert narrow(np.array([0x0102, 0x0304], dtype=np.int64))[1] == b"\x02\x04\x01\x03"
    rising = np.array([-1, 5, -1, 0, 9, 12], dtype=np.int64)
    has, code = correlation_code(rising)
    assert has.tolist() == [0] * 6 and code.tolist() == [-1, 5, -1, 0, 4, 3]
    assert correlation_decode(has, code).tolist() == rising.tolist()
    falling = np.array([9, -1, 5, 5], dtype=np.int64)
    has, code = correlation_code(falling)
    assert has.tolist() == [1, 0, 1, 1] and code.tolist() == [9, -1, -4, 0]
    assert correlation_decode(has, code).tolist() == falling.tolist()
    # gap code: start minus the running maximum end before it; event 2 nests in event 1
    # (ends earlier), so event 3's gap is to event 1's end
    offset = np.array([10, 20, 25, 100], dtype=np.int64)
    dur = np.array([5, 50, 5, 1], dtype=np.int64)
    gap = np.array([10, 5, -45, 30], dtype=np.int64)
    assert gap_decode(gap, dur).tolist() == offset.tolist()
    assert gap_decode(np.array([10, 5, 5]), np.array([5, 50, 1])).tolist() == [10, 20, 75]


def test_store_names_once_and_gap_coded_lanes_exact(tmp_path: Path) -> None:
    """Two steps with the same kernel names: the store holds each name once, each step
    serves the names it uses; offsets, durations and correlations come back to the ns
    (the reader ends a kernel where the next on its stream starts, so gemm is cut at
    inner's start)."""
    events = [
        step(1, 0, 100),
        step(2, 100, 100),
        kernel("gemm", 10, 50, corr=1),
        kernel("inner", 20.001, 5, corr=2),  # inside gemm, on the same stream
        kernel("relu", 80, 3.5, corr=3),
        kernel("gemm", 110, 20, corr=4),
    ]
    path = write_trace(tmp_path / "o.json", events)
    index = build_index(read_trace(str(path)))
    pieces: dict[int, Any] = {}
    idle_summary(index, pieces=pieces)
    store = decode_store(encode_store(timeline_store(index, pieces)))
    names = store_names(store)
    assert sorted(n for n in names if n in ("gemm", "inner", "relu")) == ["gemm", "inner", "relu"]
    assert len(names) == len(set(names))
    one, two = (load_step(store, i) for i in range(2))
    (lane,) = [lane for lane in one.lanes if lane.kind == "gpu_stream"]
    assert [one.names[n] for n in lane.name] == ["gemm", "inner", "relu"]
    assert lane.offset_us == [10.0, 20.001, 80.0] and lane.dur_us == [10.001, 5.0, 3.5]
    assert lane.correlation == [1, 2, 3]
    (lane,) = [lane for lane in two.lanes if lane.kind == "gpu_stream"]
    assert "inner" not in two.names and [two.names[n] for n in lane.name] == ["gemm"]
    assert lane.offset_us == [10.0] and lane.dur_us == [20.0]
    # the idle band: [0,10) and [60,80) of step 1 to the ns
    (idle,) = [lane for lane in one.lanes if lane.kind == "idle"]
    assert sum(idle.dur_us) == pytest.approx(one.idle_us["0"]) and one.idle_us["0"] > 0


def test_damaged_lane_is_a_value_error(tmp_path: Path) -> None:
    index = build_index(read_trace(str(write_trace(tmp_path / "w.json", MAIN_EVENTS))))
    pieces: dict[int, Any] = {}
    idle_summary(index, pieces=pieces)
    store = timeline_store(index, pieces)
    packed = UNPACK.decode(zlib.decompress(store.blobs[0]))
    lane = packed.lanes[0]
    cut = msgspec.structs.replace(lane, columns=lane.columns[:-1])
    with pytest.raises(ValueError, match="column bytes"):
        unpack_step(msgspec.structs.replace(packed, lanes=[cut]), store_names(store))
    with pytest.raises(ValueError, match="widths"):
        bad = msgspec.structs.replace(lane, widths=[3] * len(lane.widths))
        unpack_step(msgspec.structs.replace(packed, lanes=[bad]), store_names(store))


def test_nesting_depth_random_against_the_definition() -> None:
    """The stable-sort path (no equal starts) and the lexsort path (equal starts) against
    a plain-Python count of the earlier ranges still open at each start."""
    rng = np.random.default_rng(3)
    for n, spread in ((60, 10**6), (60, 40), (300, 200)):  # few ties, many ties
        s = rng.integers(0, spread, n)
        e = s + rng.integers(0, 50, n)
        order = sorted(range(n), key=lambda i: (s[i], -(e[i] - s[i])))
        rank = {i: k for k, i in enumerate(order)}
        want = [sum(1 for j in range(n) if rank[j] < rank[i] and e[j] > s[i]) for i in range(n)]
        assert nesting_depth(s, e).tolist() == want


def test_host_lanes_in_100_ns_and_shapes_of_ops(tmp_path: Path) -> None:
    """Host lanes are stored to HOST_QUANTUM_NS, start rounded down and end up (the op
    still holds its runtime call); an op's ``Input Dims`` are its ``shape``, a kernel
    lane carries none."""
    from tb_kineto_insights.analysis.timeline_format import HOST_QUANTUM_NS

    assert HOST_QUANTUM_NS == 100
    mm = cpu("aten::mm", 10.0504, 20.0)  # [10050.4, 30050.4) ns after 0
    mm["args"] = {"Input Dims": [[16, 512], [512, 512]]}
    add = cpu("aten::add", 40, 5)
    add["args"] = {"Input Dims": [[], []]}  # only empty lists: no shape
    events = [step(1, 0, 100), mm, add, launch(12.0, 3.0, 1), kernel("k", 50, 5, corr=1)]
    index = build_index(read_trace(str(write_trace(tmp_path / "w.json", events))))
    pieces: dict[int, Any] = {}
    idle_summary(index, pieces=pieces)
    (doc,) = step_timelines(index, pieces)
    host = next(lane for lane in doc.lanes if lane.kind == "host_thread")
    names = [doc.names[k] for k in host.name]
    i = names.index("aten::mm")
    assert host.offset_us[i] == 10.0 and host.dur_us[i] == pytest.approx(20.1)  # 10.0-30.1
    assert (
        doc.shapes[host.shape[i]] == "[[16,512],[512,512]]"
        or doc.shapes[host.shape[i]].replace(" ", "") == "[[16,512],[512,512]]"
    )
    assert host.shape[names.index("aten::add")] == -1
    assert host.shape[names.index("cudaLaunchKernel")] == -1
    gpu = next(lane for lane in doc.lanes if lane.kind == "gpu_stream")
    assert gpu.shape == [-1] and gpu.offset_us == [50.0]  # exact
    assert len(doc.shapes) == 1
