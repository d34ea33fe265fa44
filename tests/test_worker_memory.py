"""Issue 32: a load's memory is capped. The worker process of a load (with its decode
processes) is watched; past the cap its group is killed and the span answers an error
of kind ``memory`` that names the cap, while other loads go on and the next load gets
a fresh worker. The input that makes a worker grow: a file named ``grow*`` whose
summarise function allocates (resident) memory until it is stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from test_worker_death import ident_of, session_members, write_plain_trace

from tb_kineto_insights.serve.plugin import _ERROR_CODES
from tb_kineto_insights.service.loader import SummaryLoader
from tb_kineto_insights.service.worker_pool import (
    LoadDeadline,
    LoadMemoryCap,
    load_memory_cap_from_env,
    tree_rss_bytes,
)

TESTS = Path(__file__).resolve().parent
MIB = 1024**2
#: The cap of these tests: above a worker's own ~100-200 MiB (numpy, msgspec, the
#: analysis), far below what a ``grow*`` file takes.
CAP_MIB = 400

pytestmark = pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")


def growing(path: str, **kwargs: Any) -> Any:
    """Runs in a load worker: a file named ``grow*`` holds 16 MiB more (written, so
    resident) every 50 ms, up to 2 GiB, before it is summarised; others as usual."""
    from tb_kineto_insights.summary import summarize_file

    if Path(path).name.startswith("grow"):
        held = []
        for _ in range(128):
            held.append(b"\x01" * (16 * MIB))
            time.sleep(0.05)  # the input under test: a load that grows at a known pace
    return summarize_file(path, **kwargs)


@pytest.fixture
def capped_loader(monkeypatch: pytest.MonkeyPatch) -> Iterator[SummaryLoader]:
    old = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(TESTS), old) if p))
    loader = SummaryLoader(
        cache=None,
        workers=2,
        summarize=growing,
        deadline=LoadDeadline(60.0, 0.0),
        memory_cap=LoadMemoryCap(CAP_MIB),
        retry_backoff_s=30.0,
    )
    yield loader
    loader.close()


def test_a_load_over_its_memory_cap_fails_alone(
    tmp_path: Path, capped_loader: SummaryLoader
) -> None:
    good = ident_of(write_plain_trace(tmp_path / "logs" / "good.1.pt.trace.json", 3, 2))
    status, result = capped_loader.get(good, wait_s=60)  # under the cap: no false alarm
    assert status.state == "ready" and result is not None, status
    grow = ident_of(write_plain_trace(tmp_path / "logs" / "grow.1.pt.trace.json", 3, 2))
    other = ident_of(write_plain_trace(tmp_path / "logs" / "other.1.pt.trace.json", 4, 2))
    capped_loader.request(grow)
    capped_loader.request(other)
    status, _ = capped_loader.get(grow, wait_s=60)
    assert status.state == "error" and status.error_kind == "memory", status
    assert _ERROR_CODES["memory"] == 503
    message = status.error or ""
    assert message.startswith(f"{grow.path}: the load used ")
    assert f"over its cap of {CAP_MIB} MiB (--kineto_insights_load_max_rss_mib)" in message
    used_mib = float(message.split("the load used ")[1].split(" MiB")[0].replace(",", ""))
    assert CAP_MIB < used_mib < CAP_MIB + 300  # stopped within a few 16 MiB steps
    assert "asking again within 30 s answers this error" in message  # the back-off
    # the other file, read meanwhile in the other slot, and a later one are fine
    status, result = capped_loader.get(other, wait_s=60)
    assert status.state == "ready" and result is not None, status
    later = ident_of(write_plain_trace(tmp_path / "logs" / "later.1.pt.trace.json", 5, 2))
    status, result = capped_loader.get(later, wait_s=60)
    assert status.state == "ready" and result is not None, status
    assert capped_loader.status(grow).error_kind == "memory"  # not read again at once


def test_the_killed_worker_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(TESTS), old) if p))
    loader = SummaryLoader(
        cache=None, workers=1, summarize=growing, memory_cap=LoadMemoryCap(CAP_MIB)
    )
    try:
        warm = ident_of(write_plain_trace(tmp_path / "logs" / "warm.1.pt.trace.json", 2, 2))
        assert loader.get(warm, wait_s=60)[0].state == "ready"
        (worker,) = loader.worker_pids  # the one worker, which reads the next file too
        grow = ident_of(write_plain_trace(tmp_path / "logs" / "grow.1.pt.trace.json", 3, 2))
        status, _ = loader.get(grow, wait_s=60)
        assert status.error_kind == "memory", status
        # within 2 s the worker and its session are gone
        wait_until(lambda: session_members(worker) == [], 2.0, "no process of the worker's session")
    finally:
        loader.close()


def test_tree_rss_counts_the_children() -> None:
    """The watch sums the worker and the processes below it (a parallel read's decode
    processes): a child holding 200 MiB adds about 200 MiB."""
    # the child holds its memory (sleeping) until it is killed
    before = tree_rss_bytes(os.getpid())
    assert before > 10 * MIB
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; x = b'1' * (200 << 20); print(1, flush=True);"
         " time.sleep(60)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"1"
        grown = tree_rss_bytes(os.getpid()) - before
        assert 200 * MIB <= grown < 260 * MIB
    finally:
        child.kill()
        child.wait()
    assert tree_rss_bytes(2**22 + 12345) == 0  # no such process


def test_the_cap_from_the_environment(caplog: pytest.LogCaptureFixture) -> None:
    assert load_memory_cap_from_env({"KINETO_INSIGHTS_LOAD_MAX_RSS_MIB": "300"}).max_rss_bytes == (
        300 * MIB
    )
    assert load_memory_cap_from_env({"KINETO_INSIGHTS_LOAD_MAX_RSS_MIB": "0"}).max_rss_bytes is None
    default = load_memory_cap_from_env({})
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert default.max_rss_bytes == int(total / 2 / MIB * MIB)
    assert load_memory_cap_from_env({"KINETO_INSIGHTS_LOAD_MAX_RSS_MIB": "lots"}) == default
    assert "KINETO_INSIGHTS_LOAD_MAX_RSS_MIB='lots' is not a number of MiB" in caplog.text
