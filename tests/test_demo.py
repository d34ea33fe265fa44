"""Issue 48 §3: ``make demo`` prints its address only once TensorBoard answers it (last,
framed), and the PyTorch Profiler tab beside ours loads a bounded number of runs at a
time, its finished loader processes reaped."""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, cpu, kernel, write_trace

sys.path.insert(0, str(REPO / "scripts"))

import demo  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _SlowTab(http.server.BaseHTTPRequestHandler):
    """TensorBoard's page answers at once; our tab's runs only after ``ready_at``."""

    ready_at = 0.0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        late = self.path == demo.ROUTES[-1] and time.monotonic() < self.ready_at
        self.send_response(503 if late else 200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_tab() -> Iterator[tuple[int, type[_SlowTab]]]:
    handler = type("Handler", (_SlowTab,), {"ready_at": time.monotonic() + 1.0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()


class _Child:
    """Stands for TensorBoard's process: running until told to stop."""

    returncode: int | None = None

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args = args

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.returncode = 0
        return 0

    def send_signal(self, sig: int) -> None:
        self.returncode = 0

    def kill(self) -> None:
        self.returncode = -9


def test_the_address_is_printed_only_once_every_route_answers(
    slow_tab: tuple[int, type[_SlowTab]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """TensorBoard's page answers before our tab's runs do: the address waits for both
    (it was echoed before TensorBoard started: about 50 s of 'connection refused' on
    sample_logs), then comes last, framed, with the seconds it took."""
    port, handler = slow_tab
    printed_at: list[float] = []
    real_print = print

    def stamped(*args: object, **kwargs: object) -> None:
        printed_at.append(time.monotonic())
        real_print(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(demo.subprocess, "Popen", _Child)
    monkeypatch.setattr(demo, "print", stamped, raising=False)
    assert not demo.answers(f"http://127.0.0.1:{port}")
    assert demo.run("logs", "127.0.0.1", port, 2) == 0
    out = capsys.readouterr().out
    address = f"http://127.0.0.1:{port}/#kineto_insights"
    assert address in out and printed_at and min(printed_at) >= handler.ready_at
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[0].startswith("=") and lines[-1].startswith("=")
    assert f"ready:  {address}" in lines[1] and re.search(r"answered after \d+ s", out)


def test_a_child_that_stops_before_answering_is_said_and_no_address_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Dead(_Child):
        returncode = 2

    monkeypatch.setattr(demo.subprocess, "Popen", Dead)
    assert demo.run("logs", "127.0.0.1", _free_port(), 2) == 2
    out, err = capsys.readouterr()
    assert "kineto_insights" not in out and "stopped (exit 2) before it answered" in err


def test_profiler_loaders_run_at_most_limit_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The PyTorch Profiler tab starts one thread per run, all at once (51 loaders on 2
    cores for sample_logs); bounded, at most ``limit`` load together and all still load."""
    running, most, loaded = [0], [0], []
    lock = threading.Lock()

    class Plugin:
        def _load_run(self, run_dir: str) -> None:
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.02)
            with lock:
                running[0] -= 1
                loaded.append(run_dir)

    package = types.ModuleType("torch_tb_profiler")
    module = types.ModuleType("torch_tb_profiler.plugin")
    module.TorchProfilerPlugin = Plugin  # type: ignore[attr-defined]
    package.plugin = module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch_tb_profiler", package)
    monkeypatch.setitem(sys.modules, "torch_tb_profiler.plugin", module)
    assert demo.bound_profiler_loaders(2)
    plugin = Plugin()
    threads = [threading.Thread(target=plugin._load_run, args=(f"run{i}",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 2 and sorted(loaded) == sorted(f"run{i}" for i in range(12))


def test_without_the_profiler_tab_nothing_is_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_tb_profiler", None)
    assert demo.bound_profiler_loaders(2) is False


def test_make_demo_runs_the_script_that_waits() -> None:
    dry = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "-n", "demo", "VENV=/nonexistent/v"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    last = [line for line in dry.splitlines() if line.strip()][-1]
    assert "scripts/demo.py --logdir sample_logs" in last and "--profiler-loaders 2" in last
    assert 'echo "Open' not in dry


def test_the_printed_address_answers_the_moment_it_is_printed(tmp_path: Path) -> None:
    """The real thing: scripts/demo.py starts TensorBoard on a small log directory; the
    line with the address is read, and the address is asked at once."""
    run = tmp_path / "logs" / "one"
    run.mkdir(parents=True)
    events = [cpu(f"ProfilerStep#{i}", 100.0 * i, 90.0, cat="user_annotation") for i in (1, 2, 3)]
    events += [kernel("k", 100.0 * i + 10, 50.0) for i in (1, 2, 3)]
    write_trace(run / "w.1.pt.trace.json", events)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "--logdir", str(tmp_path / "logs")]
        + ["--port", str(port), "--", "--kineto_insights_cache_dir", str(tmp_path / "c")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            if "is ready:" in line:
                break
            assert time.monotonic() < deadline
        else:
            pytest.fail("no address printed")
        address = line.split("ready:", 1)[1].strip()
        with urllib.request.urlopen(address.split("#")[0], timeout=5) as response:
            assert response.status == 200
        base = address.split("/#")[0]
        with urllib.request.urlopen(base + demo.ROUTES[-1], timeout=5) as response:
            assert response.status == 200
        # stopped by SIGTERM, it stops TensorBoard too (its child was once left running)
        proc.terminate()
        proc.wait(timeout=30)
        with pytest.raises(OSError):
            urllib.request.urlopen(base + "/", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
