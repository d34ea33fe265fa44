"""What a new user does first, in a real browser over a real ``tensorboard`` on a copy of
sample_logs/ (``test_tab.py``'s server, browser and pages): every Largest-gaps row opens a
window that downloads and that Perfetto UI (a stand-in on loopback) receives whole.

Skipped, with the reason, when Playwright or Chromium is missing (see test_tab.py)."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import cpu, kernel, wait_until, write_trace
from test_tab import (  # noqa: F401  (fixtures: server, browser, open_page; autouse skip)
    TALL,
    TIMEOUT_MS,
    Server,
    _browser_tools,
    _tail,
    _timeline_shown,
    browser,
    hash_of,
    open_page,
    server,
    tab,
    tensorboard_process,
    wait_panels,
)


def _largest_gaps(tb: Server, run: str) -> list[dict[str, Any]]:
    worker, span = tb.span_of(run)
    _, idle = tb.get("summary", run=run, worker=worker, span=span, panel="idle")
    device = next(d for d in idle["devices"] if d["device"] == idle["main_device"])
    return [g for g in device["largest_gaps"] if isinstance(g.get("step"), int)]


@pytest.mark.parametrize("run", ["dataloader_workers0", "transformer_eager"])
def test_every_largest_gap_downloads_and_reaches_perfetto(  # noqa: F811
    server: Server,  # noqa: F811
    open_page: Any,  # noqa: F811
    run: str,
) -> None:
    """Each "Largest gaps" row of the Idle panel opens the timeline at its gap; the shown
    window then downloads (HTTP 200, a Chrome trace with events) and "Open in Perfetto"
    posts the same bytes to the Perfetto stand-in, whose size the status line states.
    Before, 3 of 10 rows on dataloader_workers0 and 5 of 10 on transformer_eager failed
    with HTTP 400 (the window's bounds went out as a float's text, 13 decimals), and the
    status said 0.0 MB (the size read after the buffer was transferred)."""
    gaps = _largest_gaps(server, run)
    assert len(gaps) >= 5
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("idle", "timeline"))
    _timeline_shown(frame)
    rows = frame.locator("#ki-panel-idle button.gap-open")
    assert rows.count() == len(gaps)
    for i, gap in enumerate(gaps):
        rows.nth(i).click()
        start, end = gap["offset_us"], gap["offset_us"] + gap["length_us"]
        frame.wait_for_function(
            "([a, b]) => { const m = document.querySelector('#ki-timeline-chart')?.dataset.mark;"
            " if (!m) return false; const [x, y] = m.split('~').map(Number);"
            " return Math.abs(x - a) < 1e-3 && Math.abs(y - b) < 1e-3; }",
            arg=[start, end],
            timeout=TIMEOUT_MS,
        )
        _timeline_shown(frame, gap["step"])
        href = frame.get_attribute("#ki-timeline-download", "href") or ""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(href).query)
        for bound in ("start_us", "end_us"):  # rounded to the ns: at most 3 decimals
            text = query[bound][0]
            assert len(text.partition(".")[2]) <= 3, (i, text)
        with page.expect_download(timeout=TIMEOUT_MS) as download_info:
            frame.click("#ki-timeline-download")
        download = download_info.value
        assert download.failure() is None, (i, gap, download.failure())
        data = Path(download.path()).read_bytes()
        doc = json.loads(data)
        assert any(e.get("ph") == "X" for e in doc["traceEvents"]), (i, gap)
        with page.context.expect_page(timeout=TIMEOUT_MS) as popup_info:
            frame.click("#ki-timeline-perfetto")
        popup = popup_info.value
        popup.wait_for_function("() => window.__got !== null", timeout=TIMEOUT_MS)
        got = popup.evaluate("() => window.__got")
        assert got["bytes"] == len(data), (i, gap)
        frame.wait_for_function(
            "() => document.querySelector('#ki-timeline-perfetto-status')?.dataset.bytes",
            timeout=TIMEOUT_MS,
        )
        status = frame.locator("#ki-timeline-perfetto-status")
        assert status.get_attribute("data-bytes") == str(len(data))
        assert status.inner_text().startswith("Sent to Perfetto UI (") and "(0 B)" not in (
            status.inner_text()
        )
        popup.close()
        frame.evaluate(
            "() => { const s = document.querySelector('#ki-timeline-perfetto-status');"
            " s.textContent = ''; delete s.dataset.bytes; }"
        )


_EVIDENCE_JS = """() => [
  ...[...document.querySelectorAll('#ki-panel-diagnoses dd[data-key]:not(.evidence-records)')]
    .map(n => [n.dataset.key, n.textContent]),
  ...[...document.querySelectorAll('#ki-panel-diagnoses .evidence-table [data-key]')]
    .map(n => [n.dataset.key, n.textContent]),
]"""


def test_no_evidence_value_on_a_card_is_a_bare_number(
    server: Server,  # noqa: F811
    open_page: Any,  # noqa: F811
) -> None:
    """Every diagnosis card of every sample run (each worker of a run of several, and its
    view across ranks): no evidence value is a bare number that should carry a unit
    (``test_evidence_units.raw_numbers``: "51,266,003,676,574" for a FLOP rate, "2.8" for
    a speedup were shown)."""
    from test_evidence_units import raw_numbers

    page = open_page("#kineto_insights", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("runs",))
    bad: list[tuple[str, str, str]] = []
    seen = 0
    for entry in server.runs["runs"]:
        run = entry["run"]
        workers = [w["worker"] for w in entry["workers"]]
        views = [(f"ki_run={run}", run)]
        if len(workers) > 1:
            views += [(f"ki_run={run}&ki_worker={w}", w) for w in workers]
        for query, name in views:
            # the address bar changed under the page (no reload of TensorBoard)
            page.evaluate("(q) => { location.hash = `kineto_insights&${q}`; }", query)
            frame.wait_for_function(
                "(name) => { const m = document.querySelector('#ki-main');"
                " const d = document.querySelector('#ki-panel-diagnoses');"
                " return m && m.dataset.view.includes(JSON.stringify(name)) && d"
                " && d.dataset.state && d.dataset.state !== 'loading'; }",
                arg=name,
                timeout=TIMEOUT_MS,
            )
            for key, text in frame.evaluate(_EVIDENCE_JS):
                seen += 1
                bad += [(query, key, raw) for raw in raw_numbers(key, text)]
    assert seen > 300
    assert bad == []


def _listed(frame: Any, want: list[str]) -> None:
    """Until the All runs table lists exactly ``want`` (the rows of one page)."""
    frame.wait_for_function(
        "(want) => JSON.stringify([...document.querySelectorAll('#ki-panel-runs .run-link')]"
        ".map(n => n.textContent)) === JSON.stringify(want)",
        arg=want,
        timeout=TIMEOUT_MS,
    )


def test_all_runs_sort_by_a_column_filter_by_severity_and_keep_it_in_the_url(
    server: Server,  # noqa: F811
    open_page: Any,  # noqa: F811
) -> None:
    """Clicking a header did nothing, "HIGH" matched nothing, the impact showed on hover
    only: now the Time lost /step header orders the runs by it (a second click reverses
    it), the severity filter keeps the runs with a high diagnosis, the order and filter
    ride in the address bar and survive a reload, and a single page has no pager."""
    page = open_page("#kineto_insights", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("runs",))
    assert frame.locator("#ki-runs-next").count() == 1  # 70 runs: more than a page of 50
    _, lost = server.get("across_runs", sort="lost", limit="50")
    frame.click('#ki-panel-runs th button[data-sort="lost"]')
    _listed(frame, [r["run"] for r in lost["rows"]])
    state = hash_of(page)
    assert state["ki_sort"] == "lost" and "ki_reverse" not in state
    first = lost["rows"][0]
    assert first["time_lost_us_per_step"] >= lost["rows"][1]["time_lost_us_per_step"]
    header = frame.locator('#ki-panel-runs th[aria-sort="descending"]')
    assert header.inner_text().startswith("Time lost /step")
    cell = frame.locator("#ki-panel-runs table.grid tbody tr").first.locator("td").nth(3)
    assert re.fullmatch(r"[\d.,]+ (µs|ms|s) \(\d+ %\)", cell.inner_text()), cell.inner_text()
    # the impact of each top diagnosis is on the line, not only on hover
    assert "%" in frame.locator("#ki-panel-runs .top-diagnosis").first.inner_text()
    _, up = server.get("across_runs", sort="lost", reverse="1", limit="50")
    frame.click('#ki-panel-runs th button[data-sort="lost"]')
    _listed(frame, [r["run"] for r in up["rows"]])
    assert hash_of(page)["ki_reverse"] == "1"
    frame.select_option("#ki-runs-severity", "high")
    _, high = server.get("across_runs", sort="lost", reverse="1", severity="high", limit="50")
    assert 0 < high["matched"] <= 50
    _listed(frame, [r["run"] for r in high["rows"]])
    badges = frame.locator("#ki-panel-runs tbody tr td:nth-child(3) .badge").all_inner_texts()
    assert badges and {b.lower() for b in badges} == {"high"}
    # one page: no pager that looks live
    assert frame.locator("#ki-runs-next").count() == 0
    assert frame.locator("#ki-runs-prev").count() == 0
    assert hash_of(page)["ki_severity"] == "high"
    # a reload (or a shared link) shows the same
    page.reload()
    frame = tab(page)
    wait_panels(frame, ("runs",))
    _listed(frame, [r["run"] for r in high["rows"]])
    assert frame.locator("#ki-runs-severity").input_value() == "high"


def _view(frame: Any) -> str:
    frame.wait_for_function(
        "() => { const p = [...document.querySelectorAll('[id^=ki-panel-]')];"
        " return p.length && p.every(x => x.dataset.state && x.dataset.state !== 'loading'); }",
        timeout=TIMEOUT_MS,
    )
    return str(frame.evaluate("() => document.querySelector('#ki-main').dataset.view"))


def test_back_and_forward_walk_through_the_views(
    open_page: Any,  # noqa: F811
) -> None:
    """Mode switches replaced the history entry: Back from History landed three clicks
    earlier. Now each view is an entry: All runs → a run → History → Compare runs, then
    Back three times and Forward once."""
    page = open_page("#kineto_insights", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("runs",))
    runs_view = _view(frame)
    frame.locator('#ki-panel-runs .run-link[data-run="dataloader_workers0"]').click()
    run_view = _view(frame)
    assert '"dataloader_workers0"' in run_view
    frame.click("#ki-mode-history")
    history_view = _view(frame)
    assert history_view == '["history"]'
    frame.click("#ki-mode-diff")
    diff_view = _view(frame)
    assert diff_view.startswith('["diff"')
    expected = [history_view, run_view, runs_view]
    for want in expected:
        page.go_back()
        frame.wait_for_function(
            "(want) => document.querySelector('#ki-main')?.dataset.view === want",
            arg=want,
            timeout=TIMEOUT_MS,
        )
        assert _view(frame) == want
    assert hash_of(page)["ki_mode"] == "runs"
    page.go_forward()
    frame.wait_for_function(
        "(want) => document.querySelector('#ki-main')?.dataset.view === want",
        arg=run_view,
        timeout=TIMEOUT_MS,
    )
    assert frame.locator("#ki-mode-run.active").count() == 1


def test_history_folds_lone_runs_filters_and_fits_the_panel(
    server: Server,  # noqa: F811
    open_page: Any,  # noqa: F811
) -> None:
    """History on sample_logs was one chart per run ("1 runs", ~16,000 px tall, "every
    run is within the level's noise" for one run), its change table ran off the panel:
    now the lone runs share one table, a filter narrows the series, the change table
    fits the panel, and counts say "1 run"."""
    page = open_page("#kineto_insights&ki_mode=history", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("history",))
    _, doc = server.get("history")
    multi = [s["name"] for s in doc["series"] if len(s["runs"]) > 1]
    alone = [s for s in doc["series"] if len(s["runs"]) == 1]
    assert len(alone) > 20 and multi
    text = frame.locator("#ki-panel-history").inner_text()
    assert " 1 runs" not in text and "1 change points" not in text
    assert frame.locator("#ki-panel-history .chart canvas").count() == len(multi)
    assert frame.locator("#ki-history-alone tbody tr").count() == len(alone)
    # the change table fits the panel, on a laptop's width too: its buttons are on
    # screen, nothing runs off
    page.set_viewport_size({"width": 900, "height": TALL})
    fits = frame.evaluate(
        "() => [...document.querySelectorAll('#ki-panel-history table.history-changes')]"
        ".map(t => t.getBoundingClientRect().right <="
        " document.querySelector('#ki-panel-history').getBoundingClientRect().right + 0.5)"
    )
    assert fits and all(fits), fits
    # the filter: series and run names
    frame.fill("#ki-history-filter", "nightly")
    frame.wait_for_function(
        "() => document.querySelectorAll('#ki-panel-history .history-series').length === 1",
        timeout=TIMEOUT_MS,
    )
    heads = frame.locator("#ki-panel-history h3").all_inner_texts()
    assert [h.split(" — ")[0] for h in heads] == ["nightly"]
    assert hash_of(page)["ki_hq"] == "nightly"
    assert frame.evaluate("() => document.activeElement.id") == "ki-history-filter"
    frame.fill("#ki-history-filter", "dataloader_workers0")
    frame.wait_for_function(
        "() => document.querySelectorAll('#ki-history-alone tbody tr').length === 1",
        timeout=TIMEOUT_MS,
    )
    assert "Runs without a series — 1 run" in frame.locator("#ki-history-alone h3").inner_text()


def _tiny_trace(path: Path) -> None:
    events: list[dict[str, Any]] = []
    for step in range(3):
        t0 = 1000.0 + step * 1000.0
        events.append(cpu(f"ProfilerStep#{step + 1}", t0, 900.0, cat="user_annotation"))
        events.append(kernel("k", t0 + 50, 100.0, corr=step + 1))
    write_trace(path, events)
    old = time.time() - 3600  # not a file still being written
    os.utime(path, (old, old))


def _answers(base: str, proc: Any, log_path: Path) -> None:
    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"tensorboard exited:\n{_tail(log_path)}")
        try:
            with urllib.request.urlopen(f"{base}/data/plugins_listing", timeout=10):
                return True
        except OSError:
            return False

    wait_until(up, 90, lambda: f"tensorboard to start:\n{_tail(log_path)}", interval=0.5)


def test_symlinked_run_folders(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    """A folder of links to runs elsewhere: without the setting, the page said "skipped 1
    path: a symlink … outside the log directory" and, under it, "No PyTorch profiler
    traces yet"; now it says no trace could be read and points at that line. With
    ``--kineto_insights_follow_symlinks`` naming the runs' folder, the linked run is
    listed and read, and a link leaving every allowed root is still named."""
    runs = tmp_path / "runs"
    _tiny_trace(runs / "exp" / "worker0.1700000000000.pt.trace.json")
    _tiny_trace(tmp_path / "secret" / "x" / "worker0.1700000000000.pt.trace.json")
    alone = tmp_path / "alone"
    for folder in (alone, tmp_path / "tb1", tmp_path / "tb2"):
        folder.mkdir()
    (alone / "exp").symlink_to(runs / "exp", target_is_directory=True)
    with tensorboard_process(alone, tmp_path / "tb1") as (base, proc, log_path):
        _answers(base, proc, log_path)
        page = browser.new_page()
        try:
            page.goto(f"{base}/#kineto_insights")
            frame = tab(page)
            empty = frame.wait_for_selector(".state.empty .logdir", timeout=TIMEOUT_MS)
            text = frame.locator(".state.empty").inner_text()
            banner = frame.locator(".banner").inner_text()
            assert "skipped 1 path(s)" in banner and "KINETO_INSIGHTS_FOLLOW_SYMLINKS" in banner
            assert "No trace could be read in" in text and "yet" not in text.split(".")[0]
            assert "the line above says what was skipped" in text
            assert empty.inner_text() == os.path.realpath(alone)
        finally:
            page.close()
    compare = tmp_path / "compare"
    compare.mkdir()
    (compare / "exp").symlink_to(runs / "exp", target_is_directory=True)
    (compare / "leak").symlink_to(tmp_path / "secret" / "x", target_is_directory=True)
    flags = ("--kineto_insights_follow_symlinks", str(runs))
    with tensorboard_process(compare, tmp_path / "tb2", *flags) as (base, proc, log_path):
        _answers(base, proc, log_path)
        page = browser.new_page()
        try:
            page.goto(f"{base}/#kineto_insights")
            frame = tab(page)
            wait_panels(frame, ("runs",))
            frame.wait_for_function(
                "() => !document.querySelector('#ki-panel-runs').innerText.includes('reading')",
                timeout=TIMEOUT_MS,
            )
            assert frame.locator("#ki-panel-runs .run-link").all_inner_texts() == ["exp"]
            banner = frame.locator(".banner").inner_text()
            assert "leak" in banner and "every folder to follow, not entered" in banner
            frame.locator("#ki-panel-runs .run-link").click()
            wait_panels(frame, ("diagnoses", "overview"))
            assert frame.get_attribute("#ki-panel-overview", "data-state") == "ready"
        finally:
            page.close()


def test_smaller_items_card_actions_apart_and_no_memory_device_of_a_few_bytes(
    server: Server,  # noqa: F811
    open_page: Any,  # noqa: F811
) -> None:
    """Issue 48 §10: a card's action links stand apart ("See Idle gaps →See it on the
    timeline →" read as one); memory_leak's memory panel offers no "CPU — peak 8 B" (its
    CPU device is named in a line, and with one device left there is no list)."""
    page = open_page("#kineto_insights&ki_run=dataloader_workers0", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses",))
    gaps = frame.evaluate(
        """() => [...document.querySelectorAll('.diagnosis-actions')].flatMap(box => {
          const r = [...box.querySelectorAll('button')].map(b => b.getBoundingClientRect());
          return r.slice(1).filter((b, i) => Math.abs(b.top - r[i].top) < 2)
            .map((b, i) => b.left - r[i].right);
        })"""
    )
    assert gaps and min(gaps) >= 8, gaps
    page.evaluate("() => { location.hash = 'kineto_insights&ki_run=memory_leak'; }")
    frame.wait_for_selector(
        "#ki-panel-memory[data-state]:not([data-state=loading]) .memory-small-devices",
        timeout=TIMEOUT_MS,
    )
    panel = frame.locator("#ki-panel-memory")
    assert panel.locator(".device-select").count() == 0
    note = panel.locator(".memory-small-devices").inner_text()
    assert "CPU (8 B)" in note, note
    assert "CUDA:0" in panel.inner_text()


@pytest.mark.parametrize("run", ["dataloader_workers0", "transformer_eager"])
def test_timeline_lane_labels_are_not_cut(
    server: Server,  # noqa: F811
    open_page: Any,  # noqa: F811
    run: str,
) -> None:
    """Issue 48 §10: the timeline's lane labels had 158 px ("thread 453 (pt_autogra…"):
    each label of the step drawn, measured in the labels' font, fits the room the chart
    gives them."""
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    shown = _timeline_shown(frame)
    worker, span = server.span_of(run)
    _, doc = server.get("timeline", run=run, worker=worker, span=span, step=shown["step"])
    labels = [lane["label"] for lane in doc["lanes"]]
    widths = frame.evaluate(
        """(labels) => { const c = document.createElement('canvas').getContext('2d');
          c.font = '12px sans-serif'; return labels.map(l => c.measureText(l).width); }""",
        labels,
    )
    room = float(shown["labelPx"])
    assert max(widths) > 150, labels  # a thread label longer than the old room
    assert [lab for lab, w in zip(labels, widths, strict=True) if w > room] == []
