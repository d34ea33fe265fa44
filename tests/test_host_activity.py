"""``analysis/host_activity.py``: the one table of host-activity causes, which the idle
panel, the timeline, the Python frames and the lead-up of collectives read."""

from __future__ import annotations

from pathlib import Path

from conftest import cpu, write_trace
from test_analysis import launch, step

from tb_kineto_insights.analysis import timeline_format as timeline
from tb_kineto_insights.analysis.host_activity import (
    CAUSE_NAMES,
    CAUSE_WORDS,
    CAUSES,
    NO_THREAD,
    TRACED_NAMES,
    first_cause,
    step_thread_of,
)
from tb_kineto_insights.analysis.idle import idle_summary
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.reader import read_trace


def test_each_host_range_takes_the_first_cause_that_matches_it(tmp_path: Path) -> None:
    events = [
        step(1, 0, 100),  # the marker itself: no cause
        cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 10),
        cpu("aten::item", 10, 5),  # waits for the GPU: a runtime sync inside it
        launch(11, 2, 2, name="cudaStreamSynchronize"),
        cpu("Optimizer.step#Adam.step", 20, 10, cat="user_annotation"),
        cpu("aten::_local_scalar_dense", 32, 2),  # of a CPU tensor: no sync inside
        cpu("aten::linear", 40, 5),
        launch(50, 1, 1),
        launch(54, 1, 3, name="cudaFree"),
        launch(56, 1, 4, name="hipMalloc"),
        cpu("dynamo", 60, 20),  # torch.compile compiling
        cpu("Torch-Compiled Region: 0/0", 85, 5),  # running compiled code
    ]
    index = build_index(read_trace(str(write_trace(tmp_path / "t.json", events))))
    names = index.trace.names

    def classes(kind: str) -> dict[str, str | None]:
        table = index.trace.tables[kind]
        found = first_cause(index, kind)
        return {
            names[int(table.name[i])]: CAUSE_NAMES[int(c)] if c >= 0 else None
            for i, c in enumerate(found.tolist())
        }

    assert classes(m.CPU_OP) == {
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__": "data_loading",
        "aten::item": "host_sync",
        "aten::_local_scalar_dense": "cpu_ops",
        "aten::linear": "cpu_ops",
        "dynamo": "compiling",
        "Torch-Compiled Region: 0/0": "cpu_ops",
    }
    assert classes(m.USER_ANNOTATION) == {
        "ProfilerStep#1": None,
        "Optimizer.step#Adam.step": "optimizer_step",
    }
    assert classes(m.RUNTIME) == {
        "cudaLaunchKernel": "launching",
        "cudaStreamSynchronize": "host_sync",
        "cudaFree": "allocator",
        "hipMalloc": "allocator",
    }
    assert step_thread_of(index) == (100, 1)


def test_the_panels_read_the_one_table(tmp_path: Path) -> None:
    """The idle panel's causes and words, the timeline's host classes and idle classes are
    the table's, in its order."""
    assert tuple(c.name for c in CAUSES) == CAUSE_NAMES
    # the traced causes first; then the graph's own waits and the untraced remainders
    assert CAUSE_NAMES[:-3] == TRACED_NAMES
    assert CAUSE_NAMES[-3:] == ("graph_replay", "host_untraced", "nothing_recorded")
    assert timeline.HOST_CLASSES == TRACED_NAMES
    assert [c for c in timeline.CLASSES if c.startswith("idle:")] == [
        f"idle:{c}" for c in CAUSE_NAMES
    ]
    events = [step(1, 0, 100), launch(5, 2, 1)]
    index = build_index(read_trace(str(write_trace(tmp_path / "t.json", events))))
    panel = idle_summary(index)
    assert panel.cause_order == list(CAUSE_NAMES)
    assert panel.cause_labels == CAUSE_WORDS


def test_no_thread_without_markers_or_runtime_calls(tmp_path: Path) -> None:
    events = [cpu("aten::linear", 0, 5)]
    index = build_index(read_trace(str(write_trace(tmp_path / "t.json", events))))
    assert step_thread_of(index) == NO_THREAD
