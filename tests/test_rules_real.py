"""The tests of ``test_rules.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec
import pytest
from conftest import SAMPLE_LOGS

from tb_kineto_insights.analysis.efficiency import efficiency_summary
from tb_kineto_insights.analysis.rules import DIAGNOSIS_IDS, RULES, area_diagnoses, diagnose
from tb_kineto_insights.analysis.rules.base import PANEL_TYPES, RunInput, SpanInput
from tb_kineto_insights.analysis.run_view import run_summary
from tb_kineto_insights.analysis.step_graph import build_step_graph
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import TraceIndex, build_index
from tb_kineto_insights.analysis.what_if import WhatIf
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace


class _Recording:
    """Thresholds that remember which fields were read."""

    def __init__(self, th: Thresholds) -> None:
        self._th = th
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self._th, name)


@cache
def _span(path: str) -> tuple[TraceIndex, Summary]:
    trace = read_trace(path)
    return build_index(trace), summarize_trace(trace)


@cache
def _what_if(path: str) -> WhatIf | None:
    """The replay service the summary's rules asked (as ``summary._summarize`` makes it)."""
    index = _span(path)[0]
    groups: dict[tuple[str, str, str], Any] = {}
    efficiency_summary(index, DEFAULT_THRESHOLDS, groups)
    return WhatIf.of(index, build_step_graph(index), groups)


def _panels(summary: Summary) -> dict[str, msgspec.Struct]:
    return {name: getattr(summary, name) for name in PANEL_TYPES}


def _sample_traces() -> list[str]:
    return sorted(str(next(p.glob("*.json.gz"))) for p in SAMPLE_LOGS.iterdir() if p.is_dir())


@pytest.mark.slow
def test_each_rule_reads_only_the_thresholds_it_declares() -> None:
    """Every span-level check, run on one span of every sample run with thresholds that
    record what is read, reads only its declared fields; every rule raises only its own
    id; the evaluation through the rules equals the summary's diagnoses."""
    read: dict[str, set[str]] = {r.id: set() for r in RULES}
    fired: set[str] = set()
    for path in _sample_traces():
        index, summary = _span(path)
        service = _what_if(path)
        panels = _panels(summary)
        raised = []
        for rule in RULES:
            if rule.check is None or any(panels.get(p) is None for p in rule.panels):
                continue
            recording = _Recording(DEFAULT_THRESHOLDS)
            inp = SpanInput(index, panels, recording, list(raised), service)  # type: ignore[arg-type]
            found = rule.check(inp)
            read[rule.id] |= recording.read
            if found is not None:
                assert found.id == rule.id
                raised.append(found)
                fired.add(rule.id)
        ids = [d.id for d in diagnose(index, panels, what_if=service)]
        assert ids == [d.id for d in summary.diagnoses], path
    for rule in RULES:
        assert read[rule.id] <= set(rule.thresholds), (
            rule.id,
            read[rule.id] - set(rule.thresholds),
        )
    # the samples exercise most rules; those they cannot (no sample has them) are named
    assert fired >= set(DIAGNOSIS_IDS) - {
        "communication_straggler",  # run-level only
        "memory_near_capacity",
        "no_step_markers",
        "trace_cuda_launch_blocking",
        "trace_data_loss",
        "trace_profiler_overhead",
        "trace_too_few_steps",
        "trace_unequal_steps",
        "trace_warmup_step",  # the samples' long first steps carry a GPU backlog instead
        "pageable_memcpy",
    }, sorted(set(DIAGNOSIS_IDS) - fired)


@pytest.mark.slow
def test_run_rules_read_only_their_thresholds() -> None:
    """The run-level checks on the 2-rank straggler sample: they raise the straggler and
    the waiting rank's exposed communication, reading only their declared thresholds."""
    folder = SAMPLE_LOGS / "ddp2_straggler"
    workers = []
    for path in sorted(folder.glob("*.json.gz")):
        workers.append((path.name.split(".")[0], _span(str(path))[1]))
    run = run_summary(workers)
    found = []
    for rule in RULES:
        if rule.run_check is None:
            continue
        recording = _Recording(DEFAULT_THRESHOLDS)
        for d in rule.run_check(RunInput(run, workers, recording)):  # type: ignore[arg-type]
            assert d.id == rule.id
            found.append(d.id)
        assert recording.read <= set(rule.thresholds), (rule.id, recording.read)
    assert "communication_straggler" in found and "exposed_communication" in found


def test_a_rule_without_its_panels_is_not_evaluated() -> None:
    """A rule whose panel is left out is not evaluated: diagnose() with only the
    ``memory`` panel of a summary gives exactly its memory rules' diagnoses."""
    path = next((SAMPLE_LOGS / "memory_leak").glob("*.json.gz"))
    index, summary = _span(str(path))
    only_memory = diagnose(index, {"memory": summary.memory})
    assert [d.id for d in only_memory] == ["memory_growth"]
    assert [d.id for d in area_diagnoses("memory", {"memory": summary.memory})] == ["memory_growth"]
