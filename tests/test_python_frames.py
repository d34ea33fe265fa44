"""Python frames during GPU idle (``analysis.python_frames``, ``idle.devices[].python_frames``):
exact numbers on tiny hand-written traces (nested frames, library frames folded into the
nearest user frame, frames straddling a gap's edge, several threads), the diagnoses that
name them, and a trace without stacks that stays as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.analysis.idle import idle_summary
from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.python_frames import (
    FrameIndex,
    is_user_frame,
    overlap_pieces,
    short_frame,
)
from tb_kineto_insights.analysis.rules import diagnose
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.analysis.trace_quality import trace_quality_summary
from tb_kineto_insights.trace.reader import read_trace

MAIN = "/home/u/train.py(5): main"
STEP = "/home/u/train.py(20): train_step"
LOG = "/home/u/train.py(40): log_metrics"
SLEEP = "<built-in function sleep>"
TORCH = "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py(1751): _call_impl"
LOOP = "/home/u/worker.py(3): loop"


def py(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "python_function",
        "name": name,
        "pid": 100,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"Python thread": tid},
    }


def launch(ts: float, dur: float, corr: int, tid: int = 1, name: str = "cudaLaunchKernel"):  # type: ignore[no-untyped-def]
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 100,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def step(n: int, ts: float, dur: float) -> dict[str, Any]:
    return cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


#: Step 1 = [0, 100): K1 [10, 20), K2 [60, 70) launched by tid 1, K3 [95, 100) launched
#: by tid 2. Gaps (µs): [0, 10), [20, 60), [70, 95). Frames of tid 1: main [0, 100) >
#: train_step [1, 58) > log_metrics [15, 52) (straddles the gap start 20) > sleep
#: [22, 50) (built-in: folded into log_metrics); train_step > torch _call_impl [53, 57)
#: (library: folded into train_step). tid 2: loop [0, 100), whose frames must not leak
#: into tid 1's gaps.
EVENTS = [
    step(1, 0, 100),
    py(MAIN, 0, 100),
    py(STEP, 1, 57),
    py(LOG, 15, 37),
    py(SLEEP, 22, 28),
    py(TORCH, 53, 4),
    py(LOOP, 0, 100, tid=2),
    launch(2, 2, 1),
    kernel("K1", 10, 10, corr=1),
    launch(55, 2, 2),
    kernel("K2", 60, 10, corr=2),
    launch(90, 2, 3, tid=2),
    kernel("K3", 95, 5, corr=3),
]


def _index(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json"):  # type: ignore[no-untyped-def]
    return build_index(read_trace(str(write_trace(tmp_path / name, events))))


def test_user_frame_rule() -> None:
    assert is_user_frame(LOG) and is_user_frame("train.py(42): log_metrics")
    assert is_user_frame(r"C:\work\train.py(7): step")
    for lib in (
        SLEEP,
        TORCH,
        "torch/nn/modules/module.py(1751): _call_impl",
        "/usr/lib/python3.12/threading.py(1012): run",
        "/usr/lib64/python3.9/json/__init__.py(3): dumps",
        r"C:\Python312\Lib\threading.py(1012): run",
        "/opt/conda/lib/python3.11/dist-packages/numpy/core/x.py(9): f",
        "<frozen importlib._bootstrap>(1): _load",
        "nn.Module: Linear_0",
    ):
        assert not is_user_frame(lib), lib
    assert short_frame(LOG) == "train.py(40): log_metrics"
    assert short_frame(SLEEP) == SLEEP


def test_overlap_pieces_exact() -> None:
    a = (np.array([0, 10, 30]), np.array([5, 20, 40]))
    b = (np.array([3, 12, 18, 40]), np.array([11, 15, 35, 50]))
    s, e, ai, bi = overlap_pieces(*a, *b)
    assert list(zip(s.tolist(), e.tolist(), ai.tolist(), bi.tolist(), strict=True)) == [
        (3, 5, 0, 0),
        (10, 11, 1, 0),
        (12, 15, 1, 1),
        (18, 20, 1, 2),
        (30, 35, 2, 2),
    ]


def test_timeline_folds_library_frames(tmp_path: Path) -> None:
    idx = _index(tmp_path, EVENTS)
    frames = FrameIndex(idx.trace)
    tl = frames.timeline((100, 1), np.array([0]), np.array([2**62]))
    names = idx.trace.names
    got = [
        ((s - idx.origin_ns) / 1000, (e - idx.origin_ns) / 1000, names[frames.stacks[k][-1]])
        for s, e, k in zip(tl.start_ns.tolist(), tl.end_ns.tolist(), tl.stack.tolist(), strict=True)
    ]
    assert got == [
        (0.0, 1.0, MAIN),
        (1.0, 15.0, STEP),
        (15.0, 52.0, LOG),
        (52.0, 58.0, STEP),
        (58.0, 100.0, MAIN),
    ]
    log_stack = next(st for st in frames.stacks if names[st[-1]] == LOG)
    assert [names[n] for n in log_stack] == [MAIN, STEP, LOG]


def test_idle_frames_exact(tmp_path: Path) -> None:
    """Gap [0,10) (tid 1): main 1 + train_step 9. Gap [20,60) (tid 1): log_metrics
    [20,52) = 32 (the sleep folded in, the part before the gap left out), train_step
    [52,58) = 6 (torch folded in; [55,57) of it launching), main [58,60) = 2. Gap
    [70,95) (tid 2): loop 25, none of tid 1's frames."""
    idx = _index(tmp_path, EVENTS)
    idle = idle_summary(idx)
    assert idle.python_stacks
    (dev,) = idle.devices
    assert dev.idle_us == 75.0 and dev.python_idle_us == 75.0
    frames = {f.frame: f for f in dev.python_frames}
    assert [f.frame for f in dev.python_frames] == [LOG, LOOP, STEP, MAIN]
    assert {k: f.idle_us for k, f in frames.items()} == {
        LOG: 32.0,
        LOOP: 25.0,
        STEP: 15.0,
        MAIN: 3.0,
    }
    assert frames[LOG].causes_us == {"host_untraced": 32.0}
    assert frames[STEP].causes_us == {"launching": 4.0, "host_untraced": 11.0}
    assert frames[LOG].per_step_us == [32.0] and frames[LOG].idle_us_per_step == 32.0
    assert frames[LOG].fraction_of_idle == pytest.approx(32 / 75)
    assert frames[LOG].fraction_of_step_time == pytest.approx(32 / 100)
    assert [(c.callers, c.idle_us) for c in frames[LOG].callers] == [([STEP, MAIN], 32.0)]
    assert [(c.callers, c.idle_us) for c in frames[LOOP].callers] == [([], 25.0)]
    gaps = {g.offset_us: g for g in dev.largest_gaps}
    assert gaps[20.0].python_frame == LOG
    assert gaps[70.0].python_frame == LOOP
    assert gaps[0.0].python_frame == STEP


def test_sync_then_blocking_call(tmp_path: Path) -> None:
    """``loss.item()`` in train_step returns as K1 ends (20): the gap [20, 60) belongs to
    host_sync; after the sync the host spends [21, 52) in log_metrics, a frame other
    than the one that synchronised (train_step): 31 µs after the sync, the diagnosis names it and
    advises logging every N steps or off the training thread."""
    events = [e for e in EVENTS if e.get("tid") != 2 and e["name"] != "K3"]
    events = [e for e in events if e["name"] not in (LOG, SLEEP)]
    events += [
        cpu("aten::item", 12, 8),
        launch(13, 7, 99, name="cudaStreamSynchronize"),
        py(LOG, 21, 31),
        py(SLEEP, 22, 28),
    ]
    idx = _index(tmp_path, events)
    idle = idle_summary(idx)
    (dev,) = idle.devices
    assert dev.sync_opened_gaps == 1
    frames = {f.frame: f for f in dev.python_frames}
    assert frames[LOG].idle_us == 31.0 and frames[LOG].causes_us == {"host_sync": 31.0}
    assert frames[LOG].after_sync_us == 31.0
    # train_step made the sync: its [20, 21) and [52, 58) are not "after"; main's [58, 60) is
    assert frames[STEP].after_sync_us == 0.0 and frames[MAIN].after_sync_us == 2.0
    panels = {"steps": steps_summary(idx), "idle": idle}
    found = {d.id: d for d in diagnose(idx, panels)}
    sync = found["gpu_idle_host_sync"]
    assert (
        "; after the sync the host was in train.py(40): log_metrics (31 µs per step)" in sync.title
    )
    assert sync.evidence["python_frames"][0]["frame"] == LOG
    assert sync.evidence["python_frames"][0]["idle_us_per_step"] == 31.0
    assert sync.evidence["python_frames"][0]["after_sync_us_per_step"] == 31.0
    assert "every N steps" in sync.recommendation
    assert "off the training thread" in sync.recommendation
    assert "with_stack" not in sync.recommendation


def test_untraced_names_frame_and_no_stack_advice(tmp_path: Path) -> None:
    idx = _index(tmp_path, EVENTS)
    health = idx.trace.health.panel(trace_quality_summary(idx))
    panels = {"steps": steps_summary(idx), "idle": idle_summary(idx), "health": health}
    found = {d.id: d for d in diagnose(idx, panels)}
    untraced = found["gpu_idle_host_untraced"]
    assert "train.py(40): log_metrics" in untraced.title
    assert untraced.evidence["python_frames"][0] == {
        "frame": LOG,
        "idle_us_per_step": 32.0,
        "fraction_of_cause": pytest.approx(32 / untraced.evidence["idle_us"]),
        "after_sync_us_per_step": 0.0,
        "launches_gpu_work": False,
    }
    # log_metrics holds 32 of 69 µs, under python_frame_dominant_fraction: named, not "the" cost
    assert "named in the title" in untraced.recommendation
    th = Thresholds().replace(python_frame_dominant_fraction=0.4)
    found = {d.id: d for d in diagnose(idx, panels, th)}
    advice = found["gpu_idle_host_untraced"].recommendation
    assert "spends 32 µs per step in " + LOG in advice and "every N steps" in advice
    assert "with_stack" not in untraced.recommendation
    assert "py-spy" not in untraced.recommendation


def test_without_stacks_nothing_changes(tmp_path: Path) -> None:
    """The same trace without python_function events: no frames, the diagnoses as
    before (the advice to record stacks included); with stacks only the frames and the
    advice differ, never the numbers."""
    bare = [e for e in EVENTS if e["cat"] != "python_function"]
    idx = _index(tmp_path, bare, "bare.json")
    idle = idle_summary(idx)
    assert not idle.python_stacks
    (dev,) = idle.devices
    assert dev.python_frames == [] and dev.python_idle_us == 0.0
    assert all(g.python_frame is None for g in dev.largest_gaps)
    found = {d.id: d for d in diagnose(idx, {"steps": steps_summary(idx), "idle": idle})}
    untraced = found["gpu_idle_host_untraced"]
    assert "python_frames" not in untraced.evidence
    assert "with_stack=True" in untraced.recommendation
    with_stacks = idle_summary(_index(tmp_path, EVENTS))
    assert with_stacks.devices[0].causes == dev.causes
    assert with_stacks.devices[0].per_step == dev.per_step


def test_minor_frames_not_named(tmp_path: Path) -> None:
    """A frame under python_frame_min_fraction of the cause's idle is not named."""
    idx = _index(tmp_path, EVENTS)
    th = Thresholds().replace(python_frame_min_fraction=0.9)
    panels = {"steps": steps_summary(idx), "idle": idle_summary(idx, th)}
    found = {d.id: d for d in diagnose(idx, panels, th)}
    untraced = found["gpu_idle_host_untraced"]
    assert untraced.evidence["python_frames"] == []
    assert "log_metrics" not in untraced.title


def _random_frames(rng: np.random.Generator, tid: int) -> list[dict[str, Any]]:
    """A random call tree: nested python_function ranges on one thread (integer µs),
    names drawn from a few user and library frames (user under library and back)."""
    pool = [MAIN, STEP, LOG, SLEEP, TORCH, "/home/u/model.py(9): forward", "typing.py(3): cast"]
    out: list[dict[str, Any]] = []

    def node(lo: int, hi: int, depth: int) -> None:
        t = lo
        while t < hi and depth < 6:
            a = int(rng.integers(t, hi))
            b = int(rng.integers(a, hi + 1))
            if b > a and rng.random() < 0.8:
                out.append(py(pool[int(rng.integers(len(pool)))], a, b - a, tid=tid))
                node(a, b, depth + 1)
            t = b + int(rng.integers(0, 3))

    node(0, 400, 0)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_nested_matches_the_sweep(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The numpy path (properly nested frames) gives the pieces of the plain-Python sweep,
    stack by stack, on random call trees."""
    rng = np.random.default_rng(seed)
    events = [step(1, 0, 400), *_random_frames(rng, 1)]
    idx = _index(tmp_path, events)
    windows = (np.array([idx.origin_ns]), np.array([idx.origin_ns + 400_000]))

    def resolved(frames: FrameIndex) -> list[tuple[int, int, tuple[str, ...]]]:
        tl = frames.timeline((100, 1), *windows)
        names = idx.trace.names
        return [
            (a, b, tuple(names[n] for n in frames.stacks[k]))
            for a, b, k in zip(
                tl.start_ns.tolist(), tl.end_ns.tolist(), tl.stack.tolist(), strict=True
            )
        ]

    real_nested = FrameIndex._nested
    took: list[bool] = []

    def spy(self: FrameIndex, *a: Any) -> Any:
        out = real_nested(self, *a)
        took.append(out is not None)
        return out

    monkeypatch.setattr(FrameIndex, "_nested", spy)
    fast = resolved(FrameIndex(idx.trace))
    assert took == [True]  # the numpy path ran
    monkeypatch.setattr(FrameIndex, "_nested", lambda self, *a: None)
    assert fast == resolved(FrameIndex(idx.trace))
    assert len(fast) > 0


def test_frames_that_overlap_without_nesting_are_clipped(tmp_path: Path) -> None:
    """A damaged trace: log_metrics [15, 70) ends after train_step [1, 58) around it. It
    is clipped to 58; main holds [58, 100)."""
    events = [step(1, 0, 100), py(MAIN, 0, 100), py(STEP, 1, 57), py(LOG, 15, 55)]
    idx = _index(tmp_path, events)
    frames = FrameIndex(idx.trace)
    tl = frames.timeline((100, 1), np.array([idx.origin_ns]), np.array([idx.origin_ns + 10**9]))
    names = idx.trace.names
    got = [
        ((a - idx.origin_ns) / 1000, (b - idx.origin_ns) / 1000, names[frames.stacks[k][-1]])
        for a, b, k in zip(tl.start_ns.tolist(), tl.end_ns.tolist(), tl.stack.tolist(), strict=True)
    ]
    assert got == [(0.0, 1.0, MAIN), (1.0, 15.0, STEP), (15.0, 58.0, LOG), (58.0, 100.0, MAIN)]
