"""Issue 30's landing view across runs, in a real browser over a real ``tensorboard``: a
log directory of 2,000 runs whose headline records are in the cache (synthetic records,
as ``index`` or an earlier ``history`` leaves them; no trace is read), opened at
``#kineto_insights``: the runs ranked worst first are on screen within 2 s of the tab's
page starting (the issue's requirement, measured on the page's own clock), filterable,
paged, and a click opens the run.

Skipped, with the reason, when Playwright or Chromium is missing (see test_tab.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import wait_until
from test_tab import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PREFIX,
    TIMEOUT_MS,
    _missing,
    hash_of,
    tab,
    tensorboard_process,
)

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.cli.history import collect_runs
from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.schema.history import HeadlineDiagnosis, SpanHeadline
from tb_kineto_insights.store.cache import DiskCache, settings_fingerprint
from tb_kineto_insights.store.cached_summaries import CachedSummaries, identity_of
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

RUNS = 2000
#: The issue's bound on showing the ranked list, s.
LIST_WITHIN_S = 2.0
T0_NS = 1_795_000_000 * 10**9


@pytest.fixture(scope="module", autouse=True)
def _browser_tools() -> None:
    reason = _missing()
    if reason:
        if os.environ.get("KINETO_INSIGHTS_REQUIRE_SHARED") == "1":
            pytest.fail(reason + " (KINETO_INSIGHTS_REQUIRE_SHARED=1)")
        pytest.skip(reason)


def diagnoses_of(i: int) -> list[tuple[str, str, float]]:
    """The planted diagnoses of run ``i``: job_00777 and job_01500 high (90 %, 50 %),
    every 7th run a medium one of (i mod 100) %, the others none."""
    if i == 777:
        return [("memory_growth", "high", 0.9)]
    if i == 1500:
        return [("gpu_idle_dataloader", "high", 0.5)]
    if i % 7 == 0:
        return [("small_kernel_flood", "medium", (i % 100) / 100)]
    return []


def headline(path: str, i: int) -> SpanHeadline:
    mean_us = 1000.0 + i  # ties in severity and impact: the longer step first
    return SpanHeadline(
        path=path,
        size_bytes=0,
        mtime=0.0,
        start_ns=T0_NS + i,
        rank=0,
        world_size=8 if i % 2 else 1,
        gpu_model="NVIDIA H200",
        steps=10,
        median_step_us=mean_us,
        mean_step_us=mean_us,
        std_step_us=0.01 * mean_us,
        gpu_utilization_fraction=0.5 + (i % 50) / 100,
        breakdown_us={"kernel": mean_us / 2},
        memory_peak_allocated_bytes=1 << 30,
        memory_peak_reserved_bytes=1 << 31,
        memory_growth_bytes_per_step=0.0,
        diagnoses=[
            HeadlineDiagnosis(id=d, severity=s, impact_fraction=f, title=f"{d} in run {i}")
            for d, s, f in diagnoses_of(i)
        ],
        facts={},
        fact_sources={},
        label=None,
        preset=None,
        git_commit=None,
        torch_version=None,
        cuda_version=None,
    )


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("across").resolve()
    logdir, cache_dir = root / "logs", root / "cache"
    old = time.time() - 3600
    for i in range(RUNS):
        trace = logdir / f"job_{i:05d}" / "w.1.pt.trace.json"
        trace.parent.mkdir(parents=True)
        trace.write_text('{"traceEvents": []}')
        os.utime(trace, (old, old))
    # the cache as the summaries would have left it: a headline per listed file, then
    # the log directory's headline index (what a `history` run writes)
    cache = DiskCache(cache_dir, settings_fingerprint(DEFAULT_MAX_JSON_BYTES, DEFAULT_THRESHOLDS))
    for run in discover(str(logdir)):
        span = run.workers[0].spans[0]
        i = int(run.name.split("_")[1])
        ident = identity_of(span)
        cache.store_headline(ident, f"synthetic-{i}", headline(span.path, i))
    summaries = CachedSummaries(str(cache_dir))
    runs, skipped = collect_runs(discover(str(logdir)), summaries, str(logdir))
    assert len(runs) == RUNS and skipped == {} and summaries.parsed == 0
    previous = os.environ.get("KINETO_INSIGHTS_PRELOAD")
    os.environ["KINETO_INSIGHTS_PRELOAD"] = "0"  # no trace is read: all from the cache
    try:
        with tensorboard_process(logdir, root) as (base, proc, log_path):
            _wait_for_scan(base, proc, log_path)
            yield base, logdir
    finally:
        if previous is None:
            os.environ.pop("KINETO_INSIGHTS_PRELOAD", None)
        else:
            os.environ["KINETO_INSIGHTS_PRELOAD"] = previous


def _wait_for_scan(base: str, proc: Any, log_path: Path) -> None:
    _wait_for_runs(base, proc, log_path, RUNS)


def _wait_for_runs(base: str, proc: Any, log_path: Path, count: int) -> None:
    """Until the plugin's first scan has listed ``count`` runs (fails after 180 s)."""
    import urllib.request

    def scanned() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"tensorboard exited: {log_path.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}{PREFIX}/runs", timeout=60) as r:
                runs = msgspec.json.decode(r.read())
        except OSError:
            return False
        return len(runs["runs"]) == count and not runs["scanning"]

    wait_until(scanned, 180, f"the first scan of {count:,} runs to end", interval=0.5)


def test_landing_view_ranks_2000_runs_within_2_s(many_runs: tuple[str, Path]) -> None:
    from playwright.sync_api import sync_playwright

    base, _ = many_runs
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1200})
            context.set_default_timeout(TIMEOUT_MS)
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(f"{base}/#kineto_insights")
            frame = tab(page)
            frame.wait_for_selector("#ki-panel-runs[data-state=ready] table.across-runs")
            # ms since the plugin's page started loading (its own clock): index.js,
            # /runs of 2,000 runs, /across_runs and drawing, all included
            shown_ms = frame.evaluate("() => performance.now()")
            print(f"ranked list of {RUNS} runs shown {shown_ms:.0f} ms after the page started")
            assert hash_of(page).get("ki_mode") == "runs"
            rows = frame.locator("#ki-panel-runs table.across-runs tbody tr")
            assert rows.count() == 50
            firsts = [
                frame.locator(
                    f"#ki-panel-runs table.across-runs tbody tr:nth-child({k}) .run-link"
                ).inner_text()
                for k in range(1, 6)
            ]
            # high 90 %, high 50 %, then medium 99 % (three runs: the longest step first)
            assert firsts == ["job_00777", "job_01500", "job_01799", "job_01099", "job_00399"]
            first = rows.nth(0).inner_text()
            assert "memory_growth" in first and "1.78 ms" in first  # 1000 + 777 µs
            count = frame.locator("#ki-runs-count").inner_text()
            assert count == "Runs 1–50 of 2,000 runs, worst first."
            assert shown_ms <= LIST_WITHIN_S * 1000, (
                f"the ranked list took {shown_ms:.0f} ms (load {os.getloadavg()})"
            )

            # the next page continues the ranking
            frame.click("#ki-runs-next")
            frame.wait_for_function(
                "() => document.querySelector('#ki-runs-count')?.textContent"
                " === 'Runs 51–100 of 2,000 runs, worst first.'"
            )
            assert hash_of(page)["ki_offset"] == "50"
            position = frame.locator(
                "#ki-panel-runs table.across-runs tbody tr:first-child td"
            ).first.inner_text()
            assert position == "51"

            # a filter: words in the run name or a diagnosis id
            frame.fill("#ki-runs-filter", "job_0077")
            frame.wait_for_function(
                "() => document.querySelector('#ki-runs-count')?.textContent"
                " === 'Runs 1–10 of 10 matching (of 2,000 runs), worst first.'"
            )
            assert hash_of(page)["ki_q"] == "job_0077"
            links = frame.locator("#ki-panel-runs .run-link").all_inner_texts()
            assert links[0] == "job_00777" and sorted(links) == [f"job_0077{d}" for d in range(10)]
            frame.fill("#ki-runs-filter", "gpu_idle")
            frame.wait_for_function(
                "() => document.querySelector('#ki-runs-count')?.textContent"
                " === 'Runs 1–1 of 1 matching (of 2,000 runs), worst first.'"
            )

            # a click opens the run
            frame.locator("#ki-panel-runs .run-link", has_text="job_01500").click()
            frame.wait_for_function(
                "() => document.querySelector('#ki-main').dataset.view.includes('span')"
            )
            state = hash_of(page)
            assert "ki_mode" not in state and state["ki_run"] == "job_01500"
            assert errors == []
            context.close()
        finally:
            browser.close()


def test_a_straggler_run_shows_reports_diagnosis_and_its_slowest_rank(tmp_path: Path) -> None:
    """Issues 30/31: the row of a two-rank run (``sample_logs/ddp2_straggler``) leads with
    the run-level ``communication_straggler`` ``report`` lists first, marked ``all ranks``,
    and says which rank the step time and GPU utilization come from. The cache and the
    headline index are filled by ``history`` first, so the tab reads no trace."""
    import shutil

    from playwright.sync_api import sync_playwright

    root = tmp_path.resolve()
    logdir = root / "logs"
    samples = Path(__file__).resolve().parents[2] / "sample_logs"
    shutil.copytree(samples / "ddp2_straggler", logdir / "ddp2_straggler")
    summaries = CachedSummaries(str(root / "cache"))
    runs, skipped = collect_runs(discover(str(logdir)), summaries, str(logdir))
    assert skipped == {} and runs[0].run_diagnoses is not None
    previous = os.environ.get("KINETO_INSIGHTS_PRELOAD")
    os.environ["KINETO_INSIGHTS_PRELOAD"] = "0"
    try:
        with (
            tensorboard_process(logdir, root) as (base, proc, log_path),
            sync_playwright() as pw,
        ):
            _wait_for_runs(base, proc, log_path, 1)
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.set_default_timeout(TIMEOUT_MS)
                page.goto(f"{base}/#kineto_insights")
                frame = tab(page)
                frame.wait_for_selector("#ki-panel-runs[data-state=ready] table.across-runs")
                row = frame.locator("#ki-panel-runs table.across-runs tbody tr").first
                text = row.inner_text()
                first = row.locator(".top-diagnosis").first
                assert first.get_attribute("data-diagnosis-id") == "communication_straggler"
                assert "(all ranks)" in first.inner_text()
                assert "Rank 1 holds the other ranks back" in (first.get_attribute("title") or "")
                assert text.count("slowest rank: rank1") == 2  # step time, GPU utilization
                assert "exposed_communication (rank0)" not in text
            finally:
                browser.close()
    finally:
        if previous is None:
            os.environ.pop("KINETO_INSIGHTS_PRELOAD", None)
        else:
            os.environ["KINETO_INSIGHTS_PRELOAD"] = previous
