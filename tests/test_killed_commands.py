"""No process or semaphore outlives a command: ``report`` or ``window`` killed by SIGKILL
(an OOM kill) in the middle of a parallel read leaves no process and no named
semaphore (the attack run found 4 processes with PPID 1 living for 54 minutes, and the
pool's semaphores in ``/dev/shm``). The read is held in the middle by a decode pool
whose first tasks sleep (as ``test_worker_death.py`` holds a load), so it is certainly
running when the kill comes; the pool's semaphore names are written down by the same
hook, so the check is about this command's, not another test's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, wait_until
from test_worker_death import semaphores_left, session_members, write_plain_trace

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

#: Loaded by every process of the command (``PYTHONPATH``): reads go parallel, the
#: decode pool's first tasks sleep for an hour, and "held" and its semaphores' names
#: (those still in /dev/shm) are written down.
HOOK = """
import os
names = os.environ.get("KINETO_TEST_POOL_NAMES")
if names:
    import time
    from tb_kineto_insights.trace import parallel

    parallel.PARALLEL_MIN_JSON_BYTES = 0
    parallel.PIECE_BYTES = 0
    _start_pool = parallel.start_pool

    def _held_pool(workers, *args, **kwargs):
        pool = _start_pool(workers, *args, **kwargs)
        found = []
        for queue in (pool._call_queue, pool._result_queue):
            for value in vars(queue).values():
                semlock = getattr(value, "_semlock", None)
                if semlock is not None and semlock.name is not None:  # None: unlinked
                    found.append(semlock.name)
        for _ in range(workers):  # the input under test: a read held in the middle
            pool.submit(time.sleep, 3600)
        with open(names, "w") as fh:
            fh.write("\\n".join(["held", *found]))
        return pool

    parallel.start_pool = _held_pool
"""


@pytest.fixture
def hooked(tmp_path: Path) -> Iterator[dict[str, str]]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOOK)
    old = os.environ.get("PYTHONPATH", "")
    yield {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), str(REPO), old) if p),
        "KINETO_INSIGHTS_READ_WORKERS": "2",
        "KINETO_TEST_POOL_NAMES": str(tmp_path / "names"),
    }


@pytest.mark.parametrize("command", ["report", "window"])
@pytest.mark.parametrize("victim", ["started", "command"])
def test_sigkill_mid_read_leaves_no_process_and_no_semaphore(
    tmp_path: Path, hooked: dict[str, str], command: str, victim: str
) -> None:
    """SIGKILL of the process the user started (the time budget's watchdog) or of the
    command itself (what the OOM killer picks: the large one), while its decode pool
    reads: within 10 s no process of its session is left, and none of the pool's
    semaphores."""
    trace = write_plain_trace(tmp_path / "logs" / "big.1.pt.trace.json", 40, 1500)
    args = [str(trace), "--timeout", "600"]
    if command == "window":
        args += ["--step", "1", "--out", str(tmp_path / "w.json")]
    else:
        args += ["--cache", "none"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tb_kineto_insights.cli", command, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=hooked,
        start_new_session=True,
    )
    names_file = Path(hooked["KINETO_TEST_POOL_NAMES"])
    # report forks its one large file's workers ahead (no forkserver: 4 processes, the
    # watchdog, the command and 2 workers); a forked pool's semaphores are unlinked when
    # made (its workers inherit them), a forkserver pool's (window) are in /dev/shm
    forked = command == "report"
    try:
        wait_until(
            lambda: (
                names_file.exists()
                and names_file.read_text()
                and len(session_members(proc.pid)) >= (4 if forked else 5)
            ),
            60,
            lambda: f"the read held with its pool: {session_members(proc.pid)}",
        )
        names = names_file.read_text().split()[1:]  # after "held"
        assert bool(names) != forked and semaphores_left(names) == names
        target = proc.pid
        if victim == "command":
            from tb_kineto_insights.trace.processes import descendants

            target = descendants(proc.pid)[0]  # the command, forked off its watchdog
        os.kill(target, signal.SIGKILL)
        wait_until(lambda: session_members(proc.pid) == [], 10, "no process of the session")
        wait_until(lambda: semaphores_left(names) == [], 10, "no semaphore of the pool")
    finally:
        for pid in session_members(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)
