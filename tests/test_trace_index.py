"""``analysis/trace_index.py``'s vocabulary: which step a time belongs to, a mean per
step, and the main device, each one rule for every panel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import kernel, write_trace
from test_analysis import launch, step

from tb_kineto_insights.analysis.trace_index import StepWindows, build_index
from tb_kineto_insights.trace.reader import read_trace


def _index(tmp_path: Path, events: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    return build_index(read_trace(str(write_trace(tmp_path / "t.json", events))))


def test_step_of_and_per_step(tmp_path: Path) -> None:
    events = [step(1, 0, 100), step(2, 100, 50), launch(5, 1, 1), kernel("k", 10, 5)]
    index = _index(tmp_path, events)
    steps = index.steps
    origin = int(steps.start_ns[0])
    at = np.array([0, 99_999, 100_000, 149_999, 150_000, -1], dtype=np.int64) + origin
    assert steps.step_of(at).tolist() == [0, 0, 1, 1, -1, -1]
    assert steps.per_step(300.0) == 150.0 == steps.mean_per_step(300.0)
    host = index.host_steps
    assert host.host_step_of(np.array([origin + 120_000])).tolist() == [1]


def test_per_step_without_steps_is_none() -> None:
    none = np.zeros(0, dtype=np.int64)
    empty = StepWindows(none, none, none, none, none, has_markers=True)
    assert len(empty) == 0 and empty.per_step(10.0) is None and empty.mean_per_step(0.0) == 0.0
    assert empty.step_of(np.array([5], dtype=np.int64)).tolist() == [-1]


def test_main_device_is_the_busiest_in_the_steps_lowest_id_on_ties(tmp_path: Path) -> None:
    """GPU 1 runs more kernel time overall (a long kernel outside the steps), GPU 0 more
    inside them: GPU 0 is the main device; equal busy time: the lower id."""
    events = [
        step(1, 0, 100),
        kernel("a", 10, 50, device=0, corr=1),
        kernel("b", 20, 20, device=1, corr=2),
        kernel("c", 500, 400, device=1, corr=3),
    ]
    index = _index(tmp_path, events)
    assert index.busy_in_steps_ns(0) == 50_000 and index.busy_in_steps_ns(1) == 20_000
    assert index.main_device == 0
    tie = [step(1, 0, 100), kernel("a", 10, 20, device=3), kernel("b", 40, 20, device=2)]
    assert _index(tmp_path, tie).main_device == 2
    assert _index(tmp_path, [step(1, 0, 100)]).main_device is None
