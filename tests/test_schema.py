"""The typed schema (tb_kineto_insights/schema): every real summary fits it and encodes
back to the same bytes; docs/schema/*.json and frontend/src/types.ts are generated from
it and current; the cache drops an entry that does not fit it and computes it again.
Real traces: ``test_schema_real.py``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import (
    REPO,
    as_json,
    cpu,
    kernel,
    pair,
    write_trace,
)

from tb_kineto_insights import schema
from tb_kineto_insights.logdir.discovery import span_for_file
from tb_kineto_insights.store.cache import entry_bytes
from tb_kineto_insights.store.cached_summaries import CachedSummaries, identity_of
from tb_kineto_insights.summary import PANELS, SpanOk, summarize_file, summarize_span

FRONTEND = REPO / "frontend"


# --------------------------------------------------------------------- round trip


def _tiny(tmp_path: Path, name: str = "t.json", steps: int = 3) -> Path:
    events: list[dict[str, Any]] = []
    for n in range(steps):
        t0 = 1000.0 + n * 1000.0
        events.append(cpu(f"ProfilerStep#{n + 1}", t0, 1000.0, cat="user_annotation"))
        events.append(kernel("gemm", t0 + 100.0, 400.0, corr=n + 1))
    return write_trace(tmp_path / name, events)


def _memory(ts: float, alloc: int, total: int, reserved: int, addr: int) -> dict[str, Any]:
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "name": "[memory]",
        "pid": 100,
        "tid": 1,
        "ts": ts,
        "s": "t",
        "args": {
            "Bytes": alloc,
            "Total Allocated": total,
            "Total Reserved": reserved,
            "Device Type": 1,
            "Device Id": 0,
            "Addr": addr,
        },
    }


def _step(n: int, t0: float, dur: float = 1000.0) -> dict[str, Any]:
    return cpu(f"ProfilerStep#{n}", t0, dur, cat="user_annotation")


#: Degenerate traces whose summaries hold the nulls and empty lists real traces rarely
#: show: no events, one kernel, CPU only, steps without GPU work, memory events alone,
#: one collective without its group, one step only.
EDGE_TRACES: dict[str, list[dict[str, Any]]] = {
    "empty": [],
    "one_kernel": [kernel("k", 10.0, 5.0)],
    "cpu_only": [cpu("aten::mm", 0.0, 100.0)],
    "steps_without_gpu": [_step(1, 0.0), _step(2, 1000.0), cpu("aten::mm", 10.0, 50.0)],
    "memory_only": [_memory(5.0, 100, 100, 200, 1)],
    "memory_in_steps": [
        _step(1, 0.0),
        _step(2, 1000.0),
        _memory(5.0, 100, 100, 2048, 1),
        _memory(1005.0, 100, 200, 2048, 2),
        _memory(1500.0, -100, 100, 2048, 1),
    ],
    "one_collective": [
        _step(1, 0.0),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 100.0, 300.0),
        kernel("gemm", 500.0, 200.0, corr=2),
    ],
    "one_step": [_step(1, 0.0), kernel("gemm", 100.0, 200.0)],
}


@pytest.mark.parametrize("name", sorted(EDGE_TRACES))
def test_degenerate_summaries_fit_the_schema(tmp_path: Path, name: str) -> None:
    result = summarize_span(str(write_trace(tmp_path / "t.json", EDGE_TRACES[name])))
    assert isinstance(result, SpanOk), result
    assert isinstance(schema.validate_summary(as_json(result.summary)), schema.Summary)


def test_a_summary_that_lacks_a_panel_or_has_a_wrong_type_does_not_validate(
    tmp_path: Path,
) -> None:
    good = as_json(summarize_file(str(_tiny(tmp_path))))
    assert list(good) == list(PANELS)
    assert schema.validate_summary(good).steps.count == 3
    missing = {k: v for k, v in good.items() if k != "idle"}
    with pytest.raises(msgspec.ValidationError, match="idle"):
        schema.validate_summary(missing)
    wrong = json.loads(json.dumps(good))
    wrong["steps"]["count"] = "3"
    with pytest.raises(msgspec.ValidationError, match=r"\$\.steps\.count"):
        schema.validate_summary(wrong)


# --------------------------------------------------------------------- cache


def test_cache_entry_that_does_not_fit_the_schema_is_dropped_and_recomputed(
    tmp_path: Path,
) -> None:
    path = _tiny(tmp_path / "logs")
    summaries = CachedSummaries(str(tmp_path / "cache"))
    span = span_for_file(str(path))
    first, error = pair(summaries.summarize(span))
    assert error is None and first is not None and summaries.parsed == 1
    again, _ = pair(summaries.summarize(span))
    assert again == first and summaries.from_cache == 1 and summaries.parsed == 1
    # An entry with a valid checksum and key whose summary does not fit the Struct
    # (what other code, or a hand edit, could leave under the same key).
    assert summaries.cache is not None
    ident = identity_of(span)
    key = summaries.cache.key(ident)
    bad = as_json(first)
    bad["steps"]["mean_step_us"] = "fast"
    summaries.cache.store_entry(
        ident, entry_bytes(ident, summaries.settings, summary=bad, key=key), is_error=False
    )
    third, _ = pair(summaries.summarize(span))
    assert third == first  # recomputed, not served
    assert summaries.parsed == 2 and summaries.from_cache == 1
    fourth, _ = pair(summaries.summarize(span))  # the recomputed entry was written back
    assert fourth == first and summaries.from_cache == 2 and summaries.parsed == 2


def test_schema_fingerprint_is_part_of_the_cache_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tb_kineto_insights.store import cache as cache_module

    path = _tiny(tmp_path)
    ident = identity_of(span_for_file(str(path)))
    before = cache_module.entry_key(ident, "s")
    monkeypatch.setattr(cache_module, "SCHEMA_FINGERPRINT", "0" * 64)
    assert cache_module.entry_key(ident, "s") != before
    assert len(schema.SCHEMA_FINGERPRINT) == 64


# --------------------------------------------------------------------- generated files


def test_docs_schema_is_current() -> None:
    """docs/schema/*.json is what scripts/gen_schema.py writes from the Structs and the
    diagnosis rules now, and so is the glossary's table of diagnosis ids."""
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_schema.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr
    names = sorted(p.name for p in (REPO / "docs" / "schema").glob("*.json"))
    assert names == sorted([*schema.json_schemas(), "labels.json"])
    summary = json.loads((REPO / "docs" / "schema" / "summary.schema.json").read_text())
    assert summary["$ref"] == "#/$defs/Summary"
    assert summary["$defs"]["Summary"]["required"] == list(PANELS)


def test_docs_api_links_the_schema_instead_of_restating_it() -> None:
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    for name in schema.json_schemas():
        assert f"schema/{name}" in text


def test_frontend_types_are_generated_from_the_schema() -> None:
    """frontend/src/types.ts is what frontend/gen_types.mjs writes from docs/schema."""
    node = shutil.which("node")
    if node is None or not (FRONTEND / "node_modules" / "json-schema-to-typescript").is_dir():
        reason = "node or frontend/node_modules missing: run `make frontend-test` (npm ci)"
        if os.environ.get("KINETO_INSIGHTS_REQUIRE_SHARED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    run = subprocess.run(
        [node, "gen_types.mjs", "--check"], cwd=FRONTEND, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    text = (FRONTEND / "src" / "types.ts").read_text(encoding="utf-8")
    assert text.startswith("// Generated by frontend/gen_types.mjs")
    # optional exactly where the schema says a key can be absent
    assert "export interface Summary {" in text and "  diagnoses: Diagnosis[];" in text


def test_diff_metric_fields_are_in_the_order_of_its_json() -> None:
    """A diff metric row's JSON starts with what the row is (key, label, unit, better),
    then the Change's fields, then the optional basis/note/by_rank: the Struct lists its
    fields in that order, so encoding it gives the row as the diff always wrote it."""
    from tb_kineto_insights.schema.diff import Change, DiffMetric

    head, tail = ("key", "label", "unit", "better"), ("basis", "note", "by_rank")
    assert DiffMetric.__struct_fields__ == (*head, *Change.__struct_fields__, *tail)
    change = {f.name: f.type for f in msgspec.structs.fields(Change)}
    metric = {f.name: f.type for f in msgspec.structs.fields(DiffMetric)}
    assert {k: metric[k] for k in change} == change
    row = DiffMetric(
        key="k",
        label="l",
        unit="µs",
        better="lower",
        **{k: 0 for k in ("base", "exp")},
        delta=0.0,
        change_fraction=None,
        base_noise=0.0,
        exp_noise=0.0,
        stderr=None,
        base_n=1,
        exp_n=1,
        min_delta=0.0,
        verdict="unchanged",
    )
    assert list(msgspec.json.decode(msgspec.json.encode(row))) == [*head, *change]
