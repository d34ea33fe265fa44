"""The tests of ``test_panel_structs.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from tb_kineto_insights.analysis.communication import communication_summary
from tb_kineto_insights.analysis.critical_path import critical_path_summary  # noqa: E402
from tb_kineto_insights.analysis.efficiency import efficiency_summary
from tb_kineto_insights.analysis.idle import idle_summary
from tb_kineto_insights.analysis.kernels import kernels_summary
from tb_kineto_insights.analysis.memory import memory_summary
from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.rules import diagnose
from tb_kineto_insights.analysis.step_graph import build_step_graph  # noqa: E402
from tb_kineto_insights.analysis.tables import tables_summary
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.analysis.trace_quality import trace_quality_summary
from tb_kineto_insights.analysis.what_if import WhatIf, what_if_summary  # noqa: E402
from tb_kineto_insights.schema import SUMMARY_DECODER, Summary
from tb_kineto_insights.schema.communication import CommunicationPanel
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.efficiency import EfficiencyPanel
from tb_kineto_insights.schema.health import HealthPanel, TraceQuality
from tb_kineto_insights.schema.idle import IdlePanel
from tb_kineto_insights.schema.kernels import KernelsPanel
from tb_kineto_insights.schema.memory import MemoryPanel
from tb_kineto_insights.schema.steps import StepsPanel
from tb_kineto_insights.schema.tables import TablesPanel
from tb_kineto_insights.schema.what_if import CriticalPathPanel, WhatIfPanel
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace


def _rank0(h200x2: Path, run: str) -> Path:
    (path,) = sorted((h200x2 / run).glob("rank0*.pt.trace.json.gz"))
    return path


def test_real_trace_panels_are_structs_and_encode_as_the_summary(h200x2: Path) -> None:
    """h200x2 ddp_straggler rank 0 (the waiting rank): each builder returns its Struct,
    the Summary built from them encodes to the very bytes of ``summarize_trace``'s
    summary, decodes back equal, and carries the ``exposed_communication`` Diagnosis
    (12-15.5 ms/step of estimated wait, test_communication)."""
    trace = read_trace(str(_rank0(h200x2, "ddp_straggler")))
    index = build_index(trace)
    # the idle panel's attributed idle of the main GPU feeds each collective's lead-up
    pieces: dict[int, Any] = {}
    kernel_groups: dict[tuple[str, str, str], Any] = {}
    idle = idle_summary(index, pieces=pieces)
    main = idle.main_device
    assert main is not None
    panels: dict[str, Any] = {
        "steps": steps_summary(index),
        "kernels": kernels_summary(index),
        "idle": idle,
        "communication": communication_summary(
            index, lead_up_device=main, lead_up_pieces=pieces[main]
        ),
        "memory": memory_summary(index),
        "efficiency": efficiency_summary(index, kernels_of=kernel_groups),
        "health": trace.health.panel(trace_quality_summary(index)),
    }
    for key, struct_type in (
        ("steps", StepsPanel),
        ("kernels", KernelsPanel),
        ("idle", IdlePanel),
        ("communication", CommunicationPanel),
        ("memory", MemoryPanel),
        ("efficiency", EfficiencyPanel),
        ("health", HealthPanel),
    ):
        assert type(panels[key]) is struct_type, key
    assert type(panels["health"].trace_quality) is TraceQuality
    tables = tables_summary(index)
    assert type(tables) is TablesPanel
    service = WhatIf.of(index, build_step_graph(index), kernel_groups)
    assert service is not None
    found = diagnose(index, panels, what_if=service)
    assert found and all(type(d) is Diagnosis for d in found)
    exposed = next(d for d in found if d.id == "exposed_communication")
    assert 12_000 < exposed.evidence["exposed_wait_estimate_us_per_step"] < 15_500
    path, _ = critical_path_summary(index, service.graph, service.actual)
    assert type(path) is CriticalPathPanel and path.steps
    what_if = what_if_summary(found, service, panels["steps"].mean_step_us)
    assert type(what_if) is WhatIfPanel
    built = Summary(diagnoses=found, tables=tables, critical_path=path, what_if=what_if, **panels)

    encoded = msgspec.json.encode(built)
    assert encoded == msgspec.json.encode(summarize_trace(trace))  # the seam changes nothing
    assert SUMMARY_DECODER.decode(encoded) == built
    # the Struct's numbers are the ones the panels computed
    assert built.steps.count == len(index.steps) > 0
    assert built.communication.has_collectives and built.communication.kinds[0].count > 0
