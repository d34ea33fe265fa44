"""``analysis/rules/``: one record per diagnosis id, and the record tells the truth about
what its rule reads (thresholds, panels, the rules it comes after)."""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from typing import Any

import msgspec
import pytest
from conftest import H200X2, REPO, SAMPLE_LOGS, SHARED_TRACES, require_dir

from tb_kineto_insights.analysis.rules import (
    DIAGNOSIS_IDS,
    RULES,
    RULES_BY_ID,
    area_diagnoses,
    diagnose,
    sort_diagnoses,
)
from tb_kineto_insights.analysis.rules.base import (
    AREAS,
    PANEL_TYPES,
    RunInput,
    SpanInput,
    make_diagnosis,
)
from tb_kineto_insights.analysis.run_view import run_summary
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import TraceIndex, build_index
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace

FIELDS = {f.name for f in dataclasses.fields(Thresholds)}


#: The ids the design notes list as stable (DESIGN.md, Diagnoses): never removed or
#: renamed; a rule added since needs no change here.
STABLE_IDS = frozenset(
    {
        "small_kernel_flood",
        "gpu_idle_dataloader",
        "gpu_idle_host_sync",
        "low_gpu_utilization",
        "pageable_memcpy",
        "exposed_communication",
        "communication_straggler",
        "memory_growth",
        "memory_fragmentation",
        "memory_near_capacity",
        "no_step_markers",
        "trace_data_loss",
        "trace_cuda_launch_blocking",
        "trace_too_few_steps",
        "trace_warmup_step",
        "trace_unequal_steps",
        "trace_profiler_overhead",
        "gpu_idle_host_untraced",
        "matmul_without_tensor_cores",
        "low_kernel_efficiency",
        "optimizer_step_bound",
        "allocator_churn",
        "cudnn_autotune_in_step",
    }
)


def test_every_id_has_one_complete_record() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids)) == len(DIAGNOSIS_IDS)
    assert set(ids) >= STABLE_IDS, STABLE_IDS - set(ids)
    for position, rule in enumerate(RULES):
        assert rule.area in AREAS, rule.id
        assert rule.label.strip() and rule.definition.strip(), rule.id
        assert rule.check is not None or rule.run_check is not None, rule.id
        assert (rule.moment is None or rule.check is not None) and (
            rule.run_moment is None or rule.run_check is not None
        ), rule.id
        assert set(rule.panels) <= set(PANEL_TYPES), rule.id
        assert set(rule.thresholds) <= FIELDS, (rule.id, set(rule.thresholds) - FIELDS)
        earlier = {r.id for r in RULES[:position]}
        assert set(rule.after) <= earlier, f"{rule.id} must come after {rule.after}"
    assert RULES_BY_ID["low_gpu_utilization"].after  # it reads the claims of the others


def test_make_diagnosis_refuses_an_id_without_a_rule() -> None:
    with pytest.raises(ValueError, match="unregistered diagnosis id 'no_such_rule'"):
        make_diagnosis("no_such_rule", "low", "t", {}, "r", "steps")
    with pytest.raises(ValueError, match="unknown severity"):
        make_diagnosis("memory_growth", "urgent", "t", {}, "r", "memory")


def test_generated_labels_follow_the_rules() -> None:
    """docs/schema/labels.json (from which the tab's labels and the glossary's table are
    generated) lists every rule, in order, with its label and definition."""
    labels = json.loads((REPO / "docs" / "schema" / "labels.json").read_text())
    assert [d["id"] for d in labels["diagnoses"]] == list(DIAGNOSIS_IDS)
    assert labels["diagnoses"][0]["label"] == RULES[0].label
    glossary = (REPO / "docs" / "glossary.md").read_text()
    for rule in RULES:
        assert f"| `{rule.id}` | {rule.area} | **{rule.label}**" in glossary


def test_sort_breaks_ties_in_rules_order() -> None:
    a = make_diagnosis("trace_unequal_steps", "low", "t", {}, "r", "health")
    b = make_diagnosis("memory_growth", "low", "t", {}, "r", "memory")
    c = make_diagnosis("gpu_idle_host_sync", "low", "t", {}, "r", "idle", 0.06)
    assert [d.id for d in sort_diagnoses([a, b, c])] == [
        "gpu_idle_host_sync",  # larger impact first
        "memory_growth",  # then RULES order
        "trace_unequal_steps",
    ]


def test_area_diagnoses_needs_the_index_where_the_area_reads_it() -> None:
    with pytest.raises(ValueError, match="read the trace index"):
        area_diagnoses("idle", {})
    with pytest.raises(ValueError, match="unknown area"):
        area_diagnoses("gpu", {})
    assert area_diagnoses("memory", {}) == []  # no panel: no rule runs


# ------------------------------------------------------------------ real traces


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


def _panels(summary: Summary) -> dict[str, msgspec.Struct]:
    return {name: getattr(summary, name) for name in PANEL_TYPES}


def _sample_traces() -> list[str]:
    """One trace of every run of ``sample_logs/`` and of ``../shared``'s traces."""
    folders = [p for p in SAMPLE_LOGS.iterdir() if p.is_dir()]
    for top in (H200X2, SHARED_TRACES):
        if top.is_dir():
            folders += [p for p in top.iterdir() if p.is_dir()]
    found = []
    for folder in sorted(folders):
        files = sorted(p for p in folder.rglob("*.json*") if p.name != "recording_info.json")
        if files:
            found.append(str(files[0]))
    return found


@pytest.mark.slow
def test_each_rule_reads_only_the_thresholds_it_declares() -> None:
    """Every span-level check, run on one span of every run of sample_logs and
    ../shared with thresholds that record what is read, reads only its declared fields;
    every rule raises only its own id; the evaluation through the rules equals the
    summary's diagnoses."""
    require_dir(SHARED_TRACES, "../shared/traces/public")
    read: dict[str, set[str]] = {r.id: set() for r in RULES}
    fired: set[str] = set()
    for path in _sample_traces():
        index, summary = _span(path)
        panels = _panels(summary)
        raised = []
        for rule in RULES:
            if rule.check is None or any(panels.get(p) is None for p in rule.panels):
                continue
            recording = _Recording(DEFAULT_THRESHOLDS)
            inp = SpanInput(index, panels, recording, list(raised))  # type: ignore[arg-type]
            found = rule.check(inp)
            read[rule.id] |= recording.read
            if found is not None:
                assert found.id == rule.id
                raised.append(found)
                fired.add(rule.id)
        assert [d.id for d in diagnose(index, panels)] == [d.id for d in summary.diagnoses], path
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


def test_rules_module_list_is_the_only_place_an_id_is_written() -> None:
    """No module outside analysis/rules/ (and the list generated from it) names
    diagnosis ids in a tuple or dict of ids (the drift the rules replace): the package's
    other modules mention ids only in prose."""
    package = REPO / "tb_kineto_insights"
    listed = []
    for path in package.rglob("*.py"):
        if "rules" in path.parts or path.name == "rule_ids.py":  # the list; generated
            continue
        text = path.read_text(encoding="utf-8")
        count = sum(text.count(f'"{i}"') for i in DIAGNOSIS_IDS)
        if count >= 3:
            listed.append((str(path.relative_to(REPO)), count))
    assert listed == []


def test_a_rule_without_its_panels_is_not_evaluated() -> None:
    """A rule whose panel is left out is not evaluated: diagnose() with only the
    ``memory`` panel of a summary gives exactly its memory rules' diagnoses."""
    path = next((SAMPLE_LOGS / "memory_leak").glob("*.json.gz"))
    index, summary = _span(str(path))
    only_memory = diagnose(index, {"memory": summary.memory})
    assert [d.id for d in only_memory] == ["memory_growth"]
    assert [d.id for d in area_diagnoses("memory", {"memory": summary.memory})] == ["memory_growth"]
