"""Issue 16: every panel builder returns its ``schema`` Struct, ``diagnose`` reads them,
and ``summarize_trace`` builds the :class:`Summary` from them; encoded, that Summary is
byte for byte the summary every consumer reads, and decodes back to an equal Struct.
Real traces: ``test_panel_structs_real.py``."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.rules import diagnose
from tb_kineto_insights.analysis.rules.base import make_diagnosis
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.schema import SUMMARY_DECODER
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace

MIB = 1024 * 1024


def test_unnamed_device_type_round_trips(tmp_path: Path) -> None:
    """A ``[memory]`` event of ``Device Type`` 42 (no name in c10::DeviceType) gives
    ``device_type_name`` null: the Summary accepts it (the Struct said ``str``, so the
    cache's decoder dropped such a summary), and a named type keeps its name."""
    events = [cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"), kernel("k", 10, 5)]
    for ts, dtype in ((20, 42), (30, 1)):
        args = {"Device Type": dtype, "Device Id": 0, "Bytes": MIB, "Addr": ts}
        args |= {"Total Allocated": MIB, "Total Reserved": 2 * MIB}
        events.append({"ph": "i", "s": "t", "name": "[memory]", "pid": 100, "tid": 1,
                       "ts": ts, "args": args})  # fmt: skip
    summary = summarize_trace(read_trace(str(write_trace(tmp_path / "m.json", events))))
    decoded = SUMMARY_DECODER.decode(msgspec.json.encode(summary))
    names = {d.device: d.device_type_name for d in decoded.memory.devices}
    assert names == {"CUDA:0": "CUDA", "type 42:0": None}


def test_diagnose_refuses_a_panel_that_is_not_its_struct(tmp_path: Path) -> None:
    events = [cpu("ProfilerStep#1", 0, 100, cat="user_annotation"), kernel("k", 10, 5)]
    index = build_index(read_trace(str(write_trace(tmp_path / "t.json", events))))
    steps = steps_summary(index)
    assert diagnose(index, {"steps": steps}) == []  # a panel left out raises nothing
    with pytest.raises(TypeError, match="panel 'steps' is a dict, expected StepsPanel"):
        diagnose(index, {"steps": msgspec.to_builtins(steps)})
    with pytest.raises(TypeError, match="panel 'idle' is a StepsPanel, expected IdlePanel"):
        diagnose(index, {"steps": steps, "idle": steps})


def test_make_diagnosis_is_a_diagnosis() -> None:
    d = make_diagnosis("no_step_markers", "medium", "t", {"steps": 0}, "r", "steps", 0.25)
    assert d == Diagnosis(
        id="no_step_markers",
        severity="medium",
        title="t",
        evidence={"steps": 0},
        recommendation="r",
        panel="steps",
        impact_fraction=0.25,
    )
    with pytest.raises(ValueError, match="unknown severity"):
        make_diagnosis("no_step_markers", "urgent", "t", {}, "r", "steps")
    with pytest.raises(ValueError, match="unregistered diagnosis id"):
        make_diagnosis("made_up", "low", "t", {}, "r", "steps")
