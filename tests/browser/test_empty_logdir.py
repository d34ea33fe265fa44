"""An empty log directory in a real TensorBoard and Chromium (issue 30): the tab is listed
from the start (not under INACTIVE), the page names the folder it watches, and a trace
written afterwards shows up without a reload."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import cpu, kernel, wait_until, write_trace
from test_tab import (
    CHROMIUM,
    CHROMIUM_ARGS,
    TIMEOUT_MS,
    _browser_tools,  # noqa: F401  (autouse: skips without Playwright/Chromium)
    _tail,
    tab,
    tensorboard_process,
)


@pytest.fixture(scope="module")
def empty_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    import urllib.request

    root = tmp_path_factory.mktemp("empty")
    logdir = root / "logs"
    logdir.mkdir()
    with tensorboard_process(logdir, root) as (base, proc, log_path):

        def answers() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"tensorboard exited:\n{_tail(log_path)}")
            try:
                with urllib.request.urlopen(f"{base}/data/plugins_listing", timeout=10):
                    return True
            except OSError:
                return False

        wait_until(answers, 90, lambda: f"tensorboard to start:\n{_tail(log_path)}", interval=0.5)
        yield base, logdir


def _trace(path: Path) -> None:
    events: list[dict[str, Any]] = []
    for step in range(3):
        t0 = 1000.0 + step * 1000.0
        events.append(cpu(f"ProfilerStep#{step + 1}", t0, 900.0, cat="user_annotation"))
        events.append(kernel("k", t0 + 50, 100.0, corr=step + 1))
    write_trace(path, events)
    old = time.time() - 3600  # not a file still being written
    os.utime(path, (old, old))


def test_empty_logdir_names_the_folder_and_updates(empty_server: tuple[str, Path]) -> None:
    from playwright.sync_api import sync_playwright

    base, logdir = empty_server
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{base}/#kineto_insights")
            frame = tab(page)  # listed and opened: not under INACTIVE
            empty = frame.wait_for_selector(".state.empty .logdir", timeout=TIMEOUT_MS)
            assert empty.inner_text() == os.path.realpath(logdir)
            assert "updates by itself" in frame.locator(".state.empty").inner_text()
            _trace(logdir / "run_a" / "worker0.1700000000000.pt.trace.json")
            # the landing view (every run ranked) lists it once it is read
            frame.wait_for_selector("#ki-panel-runs .run-link", timeout=TIMEOUT_MS)
            frame.wait_for_function(
                "() => !document.querySelector('#ki-panel-runs').innerText.includes('reading')",
                timeout=TIMEOUT_MS,
            )
            runs = frame.locator("#ki-panel-runs .run-link").all_inner_texts()
            assert runs == ["run_a"]
        finally:
            browser.close()
