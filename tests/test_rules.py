"""``analysis/rules/``: one record per diagnosis id, and the record tells the truth about
what its rule reads (thresholds, panels, the rules it comes after).
Real traces: ``test_rules_real.py``."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import REPO

from tb_kineto_insights.analysis.rules import (
    DIAGNOSIS_IDS,
    RULES,
    RULES_BY_ID,
    area_diagnoses,
    sort_diagnoses,
)
from tb_kineto_insights.analysis.rules.base import (
    AREAS,
    PANEL_TYPES,
    make_diagnosis,
)
from tb_kineto_insights.analysis.thresholds import Thresholds

FIELDS = {f.name for f in dataclasses.fields(Thresholds)}


def test_every_id_has_one_complete_record() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids)) == len(DIAGNOSIS_IDS) == 25
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
