"""The view across runs (compare/across_runs.py, the plugin's ``/across_runs``): the
ranking (the CLI's order of diagnoses applied to each run's worst), the filter and the
pages, on hand-made headline records; the route on tiny traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import wait_until
from test_history import DAY_NS, T0, headline, tiny_trace
from test_plugin import _close_plugins, make_app, strict_json, url  # noqa: F401
from werkzeug.test import Client

from tb_kineto_insights.compare.across_runs import page_of, rank_runs
from tb_kineto_insights.compare.history import RunHeadlines
from tb_kineto_insights.schema.history import AcrossRunsPage, HeadlineDiagnosis, SpanHeadline
from tb_kineto_insights.serve.plugin import PRELOAD_ENV


def with_diagnoses(h: SpanHeadline, *found: tuple[str, str, float]) -> SpanHeadline:
    return msgspec.structs.replace(
        h,
        diagnoses=[
            HeadlineDiagnosis(id=i, severity=sev, impact_fraction=imp, title=f"{i} title")
            for i, sev, imp in found
        ],
    )


def run(name: str, *workers: SpanHeadline) -> RunHeadlines:
    return RunHeadlines(name, {f"rank{k}": h for k, h in enumerate(workers)})


RUNS = [
    run("quiet_fast", headline(100)),
    run("quiet_slow", headline(300)),
    run("low_one", with_diagnoses(headline(100), ("pageable_copies", "low", 0.5))),
    run("medium_small", with_diagnoses(headline(100), ("small_kernel_flood", "medium", 0.05))),
    run(
        "medium_big",
        with_diagnoses(headline(100), ("gpu_idle_dataloader", "medium", 0.40)),
        with_diagnoses(headline(250), ("memory_growth", "low", 0.0)),
    ),
    run(
        "high_two",
        with_diagnoses(
            headline(200), ("memory_growth", "high", 0.0), ("small_kernel_flood", "low", 0.2)
        ),
    ),
    run("high_one", with_diagnoses(headline(200), ("memory_growth", "high", 0.0))),
]


def test_runs_are_ranked_by_their_worst_diagnosis_as_report_orders_them() -> None:
    rows = rank_runs(
        RUNS, {"broken": "error (trace): /l/broken/w.json: not JSON", "new": "loading"}
    )
    assert [(r.position, r.run, r.state) for r in rows] == [
        (1, "high_two", "ready"),  # high; more diagnoses than high_one
        (2, "high_one", "ready"),
        (3, "medium_big", "ready"),  # medium 40 % before medium 5 %
        (4, "medium_small", "ready"),
        (5, "low_one", "ready"),
        (6, "quiet_slow", "ready"),  # no diagnosis: longest step first
        (7, "quiet_fast", "ready"),
        (8, "new", "loading"),
        (9, "broken", "error"),
    ]
    big = rows[2]
    # two ranks: the slowest rank's step time, every rank's diagnoses, most severe first
    assert (big.ranks, big.median_step_us) == (2, 250.0)
    assert big.diagnosis_ids == ["gpu_idle_dataloader", "memory_growth"]
    assert [d.severity for d in big.diagnoses] == ["medium", "low"]
    assert rows[0].diagnosis_ids == ["memory_growth", "small_kernel_flood"]
    assert rows[8].error == "error (trace): /l/broken/w.json: not JSON"
    assert rows[7].median_step_us is None and rows[7].error is None


def test_at_most_three_diagnoses_shown_all_counted() -> None:
    many = with_diagnoses(headline(100), *[(f"d{i}", "medium", i / 10) for i in range(5)])
    (row,) = rank_runs([run("r", many)])
    assert [d.id for d in row.diagnoses] == ["d4", "d3", "d2"]
    assert row.diagnosis_ids == ["d4", "d3", "d2", "d1", "d0"]


def test_filter_and_pages() -> None:
    rows = rank_runs(RUNS)
    page = page_of(rows, "", 0, 3)
    assert (page.total, page.matched, page.loading) == (7, 7, 0)
    assert [r.run for r in page.rows] == ["high_two", "high_one", "medium_big"]
    assert [r.position for r in page_of(rows, "", 3, 3).rows] == [4, 5, 6]
    assert [r.run for r in page_of(rows, "", 6, 3).rows] == ["quiet_fast"]
    # words in the name or a diagnosis id (any of them, not only the three shown)
    growth = page_of(rows, "MEMORY_growth", 0, 50)
    assert [r.run for r in growth.rows] == ["high_two", "high_one", "medium_big"]
    assert [r.position for r in growth.rows] == [1, 2, 3]  # the place in the whole ranking
    assert [r.run for r in page_of(rows, "flood medium", 0, 50).rows] == ["medium_small"]
    assert page_of(rows, "nothing-like-this", 0, 50).matched == 0
    with pytest.raises(ValueError):
        page_of(rows, "", -1, 3)
    with pytest.raises(ValueError):
        page_of(rows, "", 0, 0)


def test_time_lost_per_step_is_the_costliest_diagnosis_share_of_the_step() -> None:
    rows = {r.run: r for r in rank_runs(RUNS)}
    # medium_big: 40 % of its slowest rank's 250 µs step (not 40 % + 0 %)
    assert rows["medium_big"].time_lost_fraction == 0.40
    assert rows["medium_big"].time_lost_us_per_step == pytest.approx(100.0)
    assert rows["high_two"].time_lost_us_per_step == pytest.approx(40.0)  # max(0, 20 %)
    assert rows["quiet_slow"].time_lost_fraction is None
    assert rows["quiet_slow"].time_lost_us_per_step is None


def test_other_orders_and_the_severity_filter() -> None:
    """All runs could not be sorted: by time lost per step (most first), step time
    (longest first), GPU utilization (lowest first), reversed; runs without numbers
    stay last; ``position`` is the place in that order."""
    rows = rank_runs(RUNS, {"new": "loading"})
    lost = page_of(rows, "", 0, 50, sort="lost")
    assert [r.run for r in lost.rows] == [
        "medium_big",  # 40 % of 250 µs: 100 µs/step
        "low_one",  # 50
        "high_two",  # 40
        "medium_small",  # 5
        "high_one",  # 0, then the runs without a diagnosis, in the ranking's order
        "quiet_slow",
        "quiet_fast",
        "new",  # still being read: last
    ]
    assert [r.position for r in lost.rows] == list(range(1, 9))
    assert (lost.sort, lost.reverse) == ("lost", False)
    step = page_of(rows, "", 0, 50, sort="step")
    assert [r.run for r in step.rows][:2] == ["quiet_slow", "medium_big"]  # 300, 250 µs
    up = page_of(rows, "", 0, 50, sort="step", reverse=True)
    assert [r.run for r in up.rows][:4] == ["medium_small", "low_one", "quiet_fast", "high_two"]
    assert [r.run for r in up.rows][-1] == "new"
    worst_last = page_of(rows, "", 0, 50, reverse=True)
    assert [r.run for r in worst_last.rows][0] == "quiet_fast"
    # severity: at least this severe (typing "high" in the filter matched nothing)
    high = page_of(rows, "", 0, 50, severity="high")
    assert [r.run for r in high.rows] == ["high_two", "high_one"]
    medium = page_of(rows, "", 0, 50, severity="medium")
    assert [r.run for r in medium.rows] == ["high_two", "high_one", "medium_big", "medium_small"]
    assert [r.run for r in page_of(rows, "", 0, 50, severity="none").rows] == [
        "quiet_slow",
        "quiet_fast",
    ]
    assert [r.run for r in page_of(rows, "HIGH", 0, 50).rows] == ["high_two", "high_one"]
    with pytest.raises(ValueError, match="sort must be one of worst, lost, step, util"):
        page_of(rows, "", 0, 50, sort="name")
    with pytest.raises(ValueError, match="severity must be one of high, medium, low, info"):
        page_of(rows, "", 0, 50, severity="HIGH")


def test_across_runs_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRELOAD_ENV, "0")
    logdir = tmp_path / "logs"
    # kernels fill half of each step of both
    tiny_trace(logdir / "exp_0" / "w.1.pt.trace.json", 2000.0, T0)
    tiny_trace(logdir / "exp_1" / "w.1.pt.trace.json", 200.0, T0 + DAY_NS)
    bad = logdir / "exp_2" / "w.1.pt.trace.json"
    bad.parent.mkdir()
    bad.write_text("{")
    client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(tmp_path / "cache")))

    def loaded() -> Any:
        doc = strict_json(client.get(url("across_runs")))
        assert [r["state"] for r in doc["rows"]].count("loading") == doc["loading"]
        return doc if doc["loading"] == 0 else None

    doc = wait_until(loaded, 60, "no run loading in /across_runs", interval=0.2)
    page = msgspec.json.decode(msgspec.json.encode(doc), type=AcrossRunsPage)
    assert page.schema == "tb_kineto_insights.across_runs/1"
    assert (page.total, page.matched, page.offset, page.limit) == (3, 3, 0, 50)
    states = {r.run: r.state for r in page.rows}
    assert states == {"exp_0": "ready", "exp_1": "ready", "exp_2": "error"}
    assert page.rows[-1].run == "exp_2" and str(bad) in (page.rows[-1].error or "")
    by_run = {r.run: r for r in page.rows}
    assert by_run["exp_0"].median_step_us == 2000.0 and by_run["exp_1"].median_step_us == 200.0
    assert by_run["exp_1"].gpu_utilization_fraction == pytest.approx(0.5)
    one = strict_json(client.get(url("across_runs", q="exp_1", limit="1")))
    assert [r["run"] for r in one["rows"]] == ["exp_1"] and one["matched"] == 1
    for bad_args in (
        {"limit": "0"},
        {"limit": "501"},
        {"offset": "-1"},
        {"offset": "x"},
        {"sort": "name"},
        {"reverse": "yes"},
        {"severity": "loud"},
    ):
        assert client.get(url("across_runs", **bad_args)).status_code == 400
    slow_first = strict_json(client.get(url("across_runs", sort="step")))
    assert [r["run"] for r in slow_first["rows"]] == ["exp_0", "exp_1", "exp_2"]
    fast_first = strict_json(client.get(url("across_runs", sort="step", reverse="1")))
    assert [r["run"] for r in fast_first["rows"]] == ["exp_1", "exp_0", "exp_2"]
    assert (fast_first["sort"], fast_first["reverse"]) == ("step", True)
