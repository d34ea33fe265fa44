"""Every run in ``sample_logs/`` and ``../shared`` gets exactly the diagnoses that
``sample_logs/README.md`` ("Expected diagnoses") lists for it, and no others.

The README's table is the single place where the known answer of each real trace is
written down with its reason; this test reads it, so the two cannot drift apart. A
diagnosis counts when any span of the run, or the run view across ranks, raises it.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SHARED, as_json, require_dir

from tb_kineto_insights.cli.main import build_report

README = REPO / "sample_logs" / "README.md"
_ROW = re.compile(r"^\|\s*`(?P<run>[^`]+)`\s*\|(?P<ids>[^|]*)\|")
_ID = re.compile(r"`([a-z_]+)`")


def _expected() -> list[tuple[str, frozenset[str]]]:
    """``(run path, ids)`` rows of the README's "Expected diagnoses" table; a run path
    starting with ``shared/`` lies under ``../shared``, any other under the repository."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Expected diagnoses", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        match = _ROW.match(line)
        if match is None or match["run"] == "run":
            continue
        rows.append((match["run"], frozenset(_ID.findall(match["ids"]))))
    return rows


ROWS = _expected()


def _path(run: str) -> Path:
    if run.startswith("shared/"):
        require_dir(SHARED, "../shared")
        return SHARED / run.removeprefix("shared/")
    return REPO / run


def test_table_covers_every_run() -> None:
    """Every run folder of sample_logs and of ../shared's traces and cases has a row."""
    listed = {run for run, _ in ROWS}
    runs = {f"sample_logs/{p.name}" for p in (REPO / "sample_logs").iterdir() if p.is_dir()}
    if SHARED.is_dir():
        for top in ("traces/public", "traces/h200x2", "cases"):
            for p in (SHARED / top).iterdir():
                if p.is_dir() and p.name != "fuzz":
                    runs.add(f"shared/{top}/{p.name}")
    assert runs - listed == set(), "runs without a row in sample_logs/README.md"
    assert listed - runs == set(), "rows for runs that do not exist"


@functools.cache
def _facts(
    run: str,
) -> tuple[list[list[dict[str, Any]]], frozenset[str], list[dict[str, Any]]]:
    """The diagnoses of every span summary and view across ranks of ``run``, the names
    of the CPU ops its spans ran off the step's threads (``tables.ops_elsewhere``) and
    every span's ``what_if`` (cached: the tests below read them; only these are kept)."""
    report = as_json(build_report(str(_path(run))))
    out = []
    elsewhere: set[str] = set()
    what_ifs = []
    for r in report["runs"]:
        for worker in r["workers"]:
            summaries = [span.get("summary", {}) for span in worker["spans"]]
            out += [s.get("diagnoses", []) for s in summaries]
            what_ifs += [s["what_if"] for s in summaries if "what_if" in s]
            for s in summaries:
                rows = s.get("tables", {}).get("ops_elsewhere", {}).get("rows", [])
                elsewhere.update(row["name"] for row in rows)
        out.append((r.get("run_summary") or {}).get("diagnoses", []))
    return out, frozenset(elsewhere), what_ifs


def _what_ifs(run: str) -> list[dict[str, Any]]:
    """The ``what_if`` section of every span summary of ``run``."""
    return _facts(run)[2]


def _diagnoses(run: str) -> list[list[dict[str, Any]]]:
    return _facts(run)[0]


@pytest.mark.parametrize(("run", "ids"), ROWS, ids=[r for r, _ in ROWS])
def test_run_gets_exactly_the_listed_diagnoses(run: str, ids: frozenset[str]) -> None:
    found = {d["id"] for diagnoses in _diagnoses(run) for d in diagnoses}
    assert found == set(ids)


@pytest.mark.parametrize("run", [r for r, _ in ROWS])
def test_each_impact_is_a_share_of_the_step_and_fixes_combine_by_replay(run: str) -> None:
    """Each diagnosis' ``impact_fraction`` is the share of the step its fix saves
    (replayed: fixes overlap, so impacts do not add up); it lies in [0, 1], equals its
    prediction's saving, and the top fixes replayed together save at least as much as
    the best of them alone, and no more than the whole step."""
    for diagnoses in _diagnoses(run):
        for d in diagnoses:
            assert 0.0 <= d["impact_fraction"] <= 1.0, (d["id"], d["impact_fraction"])
            p = d.get("prediction")
            if p is not None:
                assert d["impact_fraction"] == pytest.approx(p["saving_fraction"], abs=1e-4)
    for w in _what_ifs(run):
        combined = w.get("combined")
        if combined:
            best = max(
                f["saving_fraction"] for f in w["fixes"] if f["diagnosis"] in combined["diagnoses"]
            )
            assert best - 0.01 <= combined["saving_fraction"] <= 1.0, (combined, w["fixes"])


@pytest.mark.parametrize("run", [r for r, _ in ROWS])
def test_ops_off_the_step_threads_only_where_work_runs_beside_the_step(run: str) -> None:
    """``tables.ops_elsewhere`` (what the diff's "moved partly" reads for work moved to
    another thread) is empty in every real trace but the one that preprocesses on a
    prefetch thread (and one public trace whose marker sits under another pid): backward
    on the autograd engine's threads is the step's own work, so no GPU training run
    here has CPU ops "elsewhere"."""
    names = _facts(run)[1]
    if run == "sample_logs/moved_preprocess_thread":
        assert "aten::conv2d" in names
    elif run == "shared/traces/public/hta_triton":
        # its one ProfilerStep marker is written under another pid (3100453) than every
        # op (1670242): those ops are off the marker's thread, as the definition says
        assert names == {
            "Torch-Compiled Region: 0/0",
            "triton_poi_fused_add_cos_sin_0",
            "TorchDynamo Cache Lookup",
        }
    else:
        assert names == frozenset(), names
