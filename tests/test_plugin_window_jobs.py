"""``/window`` runs like a load: cut in a worker process under the load's deadline and
memory cap (a 503 past either, TensorBoard's own memory untouched), and once for
concurrent identical requests (the attack run: 4 concurrent cuts of a 300 MB-JSON trace
inside TensorBoard took it from 99 to 5,759 MiB)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from test_plugin import (  # noqa: F401
    WAIT,
    _close_plugins,
    logdir,
    make_app,
    strict_json,
    the_plugin,
    timeline_url,
    url,
    window_url,
)
from werkzeug.test import Client

from tb_kineto_insights.serve.plugin import PRELOAD_ENV
from tb_kineto_insights.service import windows

TESTS = Path(__file__).resolve().parent

#: Loaded by every worker process (``PYTHONPATH``): ``KINETO_TEST_CUT`` makes the window
#: cut hang (``sleep``) or hold memory (``memory``), loads untouched.
HOOK = """
import os
how = os.environ.get("KINETO_TEST_CUT")
if how:
    import time
    from tb_kineto_insights.service import window_cuts

    def _cut(*args, **kwargs):  # the input under test: a cut that never ends or grows
        if how == "memory":
            held = b"x" * (1500 << 20)
            time.sleep(120)
        time.sleep(3600)

    window_cuts.cut_window = _cut
"""


def _hooked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, how: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOOK)
    old = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), old) if p))
    monkeypatch.setenv("KINETO_TEST_CUT", how)
    monkeypatch.setenv(PRELOAD_ENV, "0")


def test_the_cut_runs_in_a_worker_process(
    logdir: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TensorBoard's process never cuts: with a cut here that fails, the answer is still
    the window (cut in the worker)."""
    from tb_kineto_insights.service import window_cuts

    def not_here(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a window was cut in TensorBoard's own process")

    monkeypatch.setattr(window_cuts, "cut_window", not_here)
    monkeypatch.setenv(PRELOAD_ENV, "0")
    client = Client(
        make_app(logdir, "--kineto_insights_cache_dir", str(tmp_path / "c"), workers="1")
    )
    assert client.get(timeline_url("2", wait=WAIT)).status_code == 200
    response = client.get(window_url("2"))
    assert response.status_code == 200, response.get_data(as_text=True)
    assert any(e.get("name") == "ProfilerStep#2" for e in strict_json(response)["traceEvents"])


@pytest.mark.parametrize(
    ("how", "flags", "words"),
    [
        ("sleep", ["--kineto_insights_load_timeout_s", "3"], "did not finish within its deadline"),
        ("memory", ["--kineto_insights_load_max_rss_mib", "700"], "over its cap of 700 MiB"),
    ],
)
def test_a_cut_past_its_deadline_or_memory_cap_is_503(
    logdir: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    flags: list[str],
    words: str,
) -> None:
    """The cut's worker is killed past the load's deadline or memory cap: a 503 naming
    it, and the plugin goes on (the next load is served)."""
    _hooked(monkeypatch, tmp_path, how)
    flags = [*flags, "--kineto_insights_load_timeout_s_per_mib", "0"]
    app = make_app(logdir, "--kineto_insights_cache_dir", str(tmp_path / "c"), *flags, workers="1")
    client = Client(app)
    assert client.get(timeline_url("2", wait=WAIT)).status_code == 200
    response = client.get(window_url("2"))
    assert response.status_code == 503, response.get_data(as_text=True)
    error = strict_json(response)["error"]
    assert "the window's cut" in error and words in error
    assert client.get(url("runs")).status_code == 200
    assert client.get(timeline_url("1", wait=WAIT)).status_code == 200


def test_concurrent_identical_windows_are_cut_once(
    logdir: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four concurrent requests for the same window wait for one cut and get the same
    bytes; the window is then kept (a fifth request cuts nothing)."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(tmp_path / "c")))
    assert client.get(timeline_url("2", wait=WAIT)).status_code == 200
    plugin = the_plugin()
    joined = threading.Semaphore(0)
    cuts: list[int] = []

    class Running(dict):  # type: ignore[type-arg]
        """The answers being made: a look-up that finds one is a request that waits."""

        def get(self, key: Any, default: Any = None) -> Any:
            found = super().get(key, default)
            if found is not None:
                joined.release()
            return found

    real_cut = windows.cut_one

    def slow_cut(*args: Any) -> Any:
        cuts.append(1)
        if len(cuts) == 1:
            for _ in range(3):  # until the three other requests wait for this cut
                assert joined.acquire(timeout=60)
        return real_cut(*args)

    monkeypatch.setattr(windows, "cut_one", slow_cut)
    plugin.workspace.answers._flights = Running()
    bodies: list[tuple[int, bytes]] = []

    def ask() -> None:
        response = Client(client.application).get(window_url("2"))
        bodies.append((response.status_code, response.get_data()))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [code for code, _ in bodies] == [200] * 4
    assert len({body for _, body in bodies}) == 1 and len(cuts) == 1
    assert client.get(window_url("2")).get_data() == bodies[0][1] and len(cuts) == 1
    # another window is another cut
    assert client.get(window_url("2", start_us="0", end_us="10")).status_code == 200
    assert len(cuts) == 2
