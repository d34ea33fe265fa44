"""The replay, the critical path and the what-if predictions on tiny hand-written traces
whose answers are worked out by hand in each test's docstring (times in µs)."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis.critical_path import critical_path_summary
from tb_kineto_insights.analysis.replay import Change, identity_error, replay
from tb_kineto_insights.analysis.step_graph import build_step_graph
from tb_kineto_insights.analysis.timeline_format import (
    UNPACK,
    store_names,
    store_shapes,
    unpack_step,
)
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.summary import summarize_trace, summarize_trace_with_timeline
from tb_kineto_insights.trace.reader import read_trace


def rt(name: str, ts: float, dur: float, corr: int = -1) -> dict[str, Any]:
    event = cpu(name, ts, dur, cat="cuda_runtime")
    if corr >= 0:
        event["args"] = {"correlation": corr}
    return event


def _dataloader_steps() -> list[dict[str, Any]]:
    """Two host-bound steps of 100: a DataLoader fetch [0, 60), a launch at 62 (2 long)
    whose 20 µs kernel starts 3 after it (65-85), then 36 of untraced host time."""
    events: list[dict[str, Any]] = []
    for i in range(2):
        t = 100.0 * i
        events += [
            cpu(f"ProfilerStep#{i + 1}", t, 100, cat="user_annotation"),
            cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 60),
            rt("cudaLaunchKernel", t + 62, 2, corr=i + 1),
            kernel("k", t + 65, 20, corr=i + 1),
        ]
    return events


def _summary(tmp_path: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    return as_json(summarize_trace(read_trace(str(write_trace(tmp_path / "t.json", events)))))


def test_unchanged_replay_gives_back_the_measured_windows(tmp_path: Path) -> None:
    index = build_index(read_trace(str(write_trace(tmp_path / "t.json", _dataloader_steps()))))
    graph = build_step_graph(index)
    assert graph is not None
    r = replay(graph)
    assert r.window_start.tolist() == graph.window_start.tolist() == [0, 100_000]
    assert r.window_end.tolist() == graph.window_end.tolist() == [100_000, 200_000]
    assert r.op_start.tolist() == [65_000, 165_000]
    assert identity_error(graph, r) == 0.0
    # the gap before each launch call: 60 of DataLoader, 2 untraced
    launch = np.flatnonzero(graph.kind == 1)
    assert graph.gap_class["data_loading"][launch].tolist() == [60_000, 60_000]
    assert graph.gap_class["untraced"][launch].tolist() == [2_000, 2_000]


def test_dataloader_removed_gives_the_step_without_its_fetch(tmp_path: Path) -> None:
    """Without the 60 µs fetch each step is 40: the launch at 2, its kernel 5-25, the
    ProfilerStep end at 2 + 2 + 36 = 40 (the host's 36 untraced µs after the launch
    stay). Saving 60 %, replayed; the What-if section lists it."""
    s = _summary(tmp_path, _dataloader_steps())
    [d] = [d for d in s["diagnoses"] if d["id"] == "gpu_idle_dataloader"]
    p = d["prediction"]
    assert (p["method"], p["actual_step_us"], p["predicted_step_us"]) == ("replay", 100.0, 40.0)
    assert (p["speedup"], p["saving_fraction"]) == (2.5, 0.6)
    assert d["impact_fraction"] == 0.6 and d["severity"] == "high"
    w = s["what_if"]
    assert w["actual_step_us"] == 100.0 and w["replay_error_fraction"] == 0.0
    assert [(f["diagnosis"], f["predicted_step_us"]) for f in w["fixes"]][0] == (
        "gpu_idle_dataloader",
        40.0,
    )


def test_critical_path_of_a_host_bound_step(tmp_path: Path) -> None:
    """Each 100 µs step ends with its ProfilerStep range on the host (the kernel ends at
    85): the path is all host: 60 DataLoader, 2 + 36 untraced, the launch call's 2."""
    s = _summary(tmp_path, _dataloader_steps())
    cp = s["critical_path"]
    assert cp["mean_length_us"] == 100.0
    assert cp["mean_by_class_us"] == {"data_loading": 60.0, "untraced": 38.0, "launch": 2.0}
    assert cp["fraction_by_class"]["data_loading"] == 0.6
    assert [st["length_us"] for st in cp["steps"]] == [100.0, 100.0]


def _sync_step() -> list[dict[str, Any]]:
    """One GPU-bound step [0, 112): kernel A (launched at 5) runs 10-90; the host waits in
    cudaDeviceSynchronize [7, 92) for it (2 µs after its end), launches B at 95, B runs
    100-110; the ProfilerStep ends at 112. A second step the same, 112 later."""
    events: list[dict[str, Any]] = []
    for i in range(2):
        t = 112.0 * i
        events += [
            cpu(f"ProfilerStep#{i + 1}", t, 112, cat="user_annotation"),
            rt("cudaLaunchKernel", t + 5, 2, corr=10 * i + 1),
            kernel("A", t + 10, 80, corr=10 * i + 1),
            rt("cudaDeviceSynchronize", t + 7, 85),
            rt("cudaLaunchKernel", t + 95, 2, corr=10 * i + 2),
            kernel("B", t + 100, 10, corr=10 * i + 2),
        ]
    return events


def test_a_sync_waits_for_the_kernel_it_ended_after(tmp_path: Path) -> None:
    index = build_index(read_trace(str(write_trace(tmp_path / "t.json", _sync_step()))))
    graph = build_step_graph(index)
    assert graph is not None
    sync = np.flatnonzero(graph.kind == 2)
    assert graph.awaited[sync].tolist() == [0, 2]  # kernel A of each step
    assert graph.own[sync].tolist() == [2_000, 2_000]  # 92 - 90: after the wait
    assert replay(graph).window_end.tolist() == [112_000, 224_000]


def test_removing_the_wait_lets_the_host_run_ahead(tmp_path: Path) -> None:
    """Without the wait the host passes the sync at 9 and launches B at 12 (its 3 µs gap
    after the sync kept); B still waits for A on the stream: 90-100 (its measured 5 µs
    launch latency is met: ready at 17). The step's host part ends at 12 + 2 + 15 = 29,
    so the window ends with B at 100: 100 of 112 µs. The second step's host runs
    ahead the same way: its A waits for the stream (free at 100), 100-180, B 180-190, so
    the two windows end at 100 and 190: 95 µs a step."""
    index = build_index(read_trace(str(write_trace(tmp_path / "t.json", _sync_step()))))
    graph = build_step_graph(index)
    assert graph is not None
    r = replay(graph, Change(waits_removed=graph.awaited >= 0))
    assert r.op_start.tolist() == [10_000, 90_000, 100_000, 180_000]
    assert r.window_end.tolist() == [100_000, 190_000]
    assert r.mean_step_ns == 95_000.0


def test_kernels_at_half_their_time(tmp_path: Path) -> None:
    """A and B at half their duration, the sync kept: A 10-50, the host wakes 2 µs after
    (52), launches B at 55 (the same 3 µs gap), B 60-65; the host's ProfilerStep ends
    20 after the launch (57 + 15 = 72): the window ends at 72, then 72 + 72."""
    index = build_index(read_trace(str(write_trace(tmp_path / "t.json", _sync_step()))))
    graph = build_step_graph(index)
    assert graph is not None
    r = replay(graph, Change(op_keep=np.full(graph.op_start.size, 0.5)))
    assert r.window_end.tolist() == [72_000, 144_000]
    panel, parts = critical_path_summary(index, graph, replay(graph))
    assert parts is not None
    # the measured path, from the step's end back: the host after the sync (B's launch
    # call 2, untraced 3 before it and 15 after it: 92-112), the sync's 2 after the
    # wait (90-92), kernel A (10-90), A's launch latency (5-10) and the untraced host
    # time before A's launch (0-5); B (100-110) ends before the host does: off the path
    assert panel.mean_length_us == 112.0
    assert panel.mean_by_class_us == {"compute": 80.0, "launch": 7.0, "sync": 2.0, "untraced": 23.0}
    assert [(p.start_ns, p.end_ns, p.klass) for p in parts.step_pieces(graph)[0]] == [
        (92_000, 112_000, "host"),
        (90_000, 92_000, "sync"),
        (10_000, 90_000, "compute"),
        (5_000, 10_000, "launch"),
        (0, 5_000, "host"),
    ]


def test_the_diff_checks_the_prediction_of_a_fix_it_made(tmp_path: Path) -> None:
    """The base waits for its DataLoader (predicted 100 → 40 µs without it); the
    experiment is the same job without the fetch (each step 40 µs: the launch at 2, the
    kernel 5-25, the step's end at 40). The diff puts the prediction beside the
    measurement: 40 against 40, error 0."""
    from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS  # noqa: PLC0415
    from tb_kineto_insights.service.diffs import compare_sides  # noqa: PLC0415

    fast: list[dict[str, Any]] = []
    for i in range(2):
        t = 40.0 * i
        fast += [
            cpu(f"ProfilerStep#{i + 1}", t, 40, cat="user_annotation"),
            rt("cudaLaunchKernel", t + 2, 2, corr=i + 1),
            kernel("k", t + 5, 20, corr=i + 1),
        ]
    base = write_trace(tmp_path / "base" / "w.1.pt.trace.json", _dataloader_steps())
    exp = write_trace(tmp_path / "exp" / "w.1.pt.trace.json", fast)
    doc = as_json(compare_sides(str(base.parent), str(exp.parent), DEFAULT_THRESHOLDS, None)[0])
    assert doc["diagnoses"]["disappeared"] == ["gpu_idle_dataloader"]
    [check] = doc["diagnoses"]["predictions"]
    assert (check["id"], check["base_step_us"], check["predicted_step_us"]) == (
        "gpu_idle_dataloader",
        100.0,
        40.0,
    )
    assert (check["measured_step_us"], check["error_fraction"]) == (40.0, 0.0)
    assert check["text"] == (
        "gpu_idle_dataloader: predicted 100.0 µs → 40.0 µs for the DataLoader's fetch off "
        "the training thread; measured 40.0 µs (+0 %)"
    )


def test_the_timeline_shows_each_steps_critical_path(tmp_path: Path) -> None:
    """The critical-path lane of each step of ``_sync_step``, end to end without a hole:
    the host before the launch [0, 5), the launch call and its latency [5, 10), kernel A
    [10, 90), the sync's own 2 µs after A, the host to the step's end [92, 112)."""
    trace = read_trace(str(write_trace(tmp_path / "t.json", _sync_step())))
    _, store = summarize_trace_with_timeline(trace)
    names = store_names(store)
    for blob in store.blobs:
        step = unpack_step(UNPACK.decode(zlib.decompress(blob)), names, store_shapes(store))
        [lane] = [lane for lane in step.lanes if lane.kind == "critical_path"]
        got = [
            (step.classes[c], step.names[n] if n >= 0 else None, o, d)
            for c, n, o, d in zip(
                lane.event_class, lane.name, lane.offset_us, lane.dur_us, strict=True
            )
        ]
        assert got == [
            ("path:host", None, 0.0, 5.0),
            ("path:launch", None, 5.0, 5.0),
            ("path:compute", "A", 10.0, 80.0),
            ("path:sync", None, 90.0, 2.0),
            ("path:host", None, 92.0, 20.0),
        ]
        assert sum(lane.dur_us) == step.duration_us == 112.0
