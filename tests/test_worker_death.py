"""Issue 32 §1: a load worker that dies during a parallel read takes its decode
processes with it, and the loader sees it at once.

The reproduction was an 87 MB plain-JSON trace read with a forkserver pool inside the
load worker, under a 0.5 s deadline: the pool's processes held the loader's pipe, so
the span stayed ``loading`` long past the deadline, the slot was lost and 4 processes
survived. Here the parallel path is forced on an 8 MB file through the size threshold
(``PARALLEL_MIN_JSON_BYTES = 0``), and the pool's two processes are first given a task
that sleeps, so that the read is certainly in progress, waiting on its decode
processes, when the worker is killed (SIGKILL), stopped (SIGSTOP) or runs past its
deadline.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until

from tb_kineto_insights.serve.plugin import _ERROR_CODES
from tb_kineto_insights.service.loader import SummaryLoader
from tb_kineto_insights.service.worker_pool import LoadDeadline
from tb_kineto_insights.store.cache import Identity

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def stuck_in_parallel_read(path: str, **kwargs: Any) -> Any:
    """Runs in a load worker: a file named ``stuck*`` is read with 2 decode processes
    (forced by the size threshold) whose first tasks sleep for an hour, so the read
    waits on them; other files are summarised as usual."""
    from tb_kineto_insights.summary import summarize_file
    from tb_kineto_insights.trace import parallel

    if Path(path).name.startswith("stuck"):
        parallel.PARALLEL_MIN_JSON_BYTES = 0
        parallel.PIECE_BYTES = 0  # one block a piece: several pieces go to the pool
        os.environ[parallel.WORKERS_ENV] = "2"
        start_pool = parallel.start_pool

        def sleeping_pool(workers: int) -> Any:
            pool = start_pool(workers)
            assert pool is not None
            for _ in range(workers):  # the input under test: decode processes that hang
                pool.submit(time.sleep, 3600)
            names = os.environ.get("KINETO_TEST_POOL_NAMES")
            if names:  # the pool's named semaphores, for the test to look for (whole)
                Path(names + ".part").write_text("\n".join(pool_semaphores(pool)))
                os.replace(names + ".part", names)
            return pool

        parallel.start_pool = sleeping_pool
    return summarize_file(path, **kwargs)


def pool_semaphores(pool: Any) -> list[str]:
    """The names of a process pool's named semaphores (its queues' locks: private
    attributes of ``concurrent.futures``, read by tests only)."""
    found = []
    for queue in (pool._call_queue, pool._result_queue):
        for value in vars(queue).values():
            semlock = getattr(value, "_semlock", None)
            if semlock is not None:
                found.append(semlock.name)
    return found


def semaphores_left(names: list[str]) -> list[str]:
    """Those of the named POSIX semaphores (``/mp-...``) still in ``/dev/shm``."""
    return [n for n in names if Path("/dev/shm", "sem." + n.lstrip("/")).exists()]


def write_plain_trace(path: Path, steps: int, kernels_per_step: int) -> Path:
    """A plain-JSON trace of ``steps`` steps of 1000 us with many short kernels."""
    events: list[dict[str, Any]] = []
    for n in range(1, steps + 1):
        ts = 1000.0 + (n - 1) * 1000.0
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1,
             "tid": 1, "ts": ts, "dur": 1000.0}
        )  # fmt: skip
        for k in range(kernels_per_step):
            events.append(
                {"ph": "X", "cat": "kernel", "name": f"kernel_{k % 7}", "pid": 0, "tid": 7,
                 "ts": ts + 10.0 + k * 0.5, "dur": 0.25,
                 "args": {"device": 0, "stream": 7, "correlation": n * 100000 + k}}
            )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def ident_of(path: Path) -> Identity:
    st = path.stat()
    return Identity(
        str(path),
        st.st_size,
        st.st_mtime,
        device=st.st_dev,
        inode=st.st_ino,
        mtime_ns=st.st_mtime_ns,
        root=str(path.parent.resolve()),
    )


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            members.append(int(stat.parent.name))
    return members


@pytest.fixture
def stuck_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SummaryLoader]:
    old = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(TESTS), old) if p))
    monkeypatch.setenv("KINETO_TEST_POOL_NAMES", str(tmp_path / "pool-semaphores"))
    loader = SummaryLoader(
        cache=None, workers=1, summarize=stuck_in_parallel_read, deadline=LoadDeadline(3.0, 0.0)
    )
    warm = ident_of(write_plain_trace(tmp_path / "logs" / "warm.1.pt.trace.json", 2, 2))
    assert loader.get(warm, wait_s=60)[0].state == "ready"  # a worker is up and ready
    yield loader
    loader.close()


def start_stuck_read(tmp_path: Path, loader: SummaryLoader) -> tuple[Identity, int]:
    """Queue the stuck file; return its identity and the worker's pid once the worker
    has its decode processes (forkserver, resource tracker, 2 pool processes) and has
    written their semaphores' names (when ``KINETO_TEST_POOL_NAMES`` asks for them)."""
    names = os.environ.get("KINETO_TEST_POOL_NAMES")
    stuck = ident_of(write_plain_trace(tmp_path / "logs" / "stuck.1.pt.trace.json", 40, 1500))
    assert stuck.size_bytes > 6 * 1024**2  # several 1 MiB blocks: pieces for the pool
    loader.request(stuck)

    def reading() -> bool:
        pids = loader.worker_pids
        return bool(
            pids
            and loader.status(stuck).state == "loading"
            and len(session_members(pids[0])) >= 4
            and (not names or Path(names).exists())
        )

    wait_until(
        reading,
        60,
        lambda: f"the worker's decode processes: {loader.worker_pids}, {loader.status(stuck)}",
    )
    return stuck, loader.worker_pids[0]


def assert_clean_end(
    loader: SummaryLoader, tmp_path: Path, stuck: Identity, worker: int, kinds: set[str]
) -> SummaryLoader:
    status = loader.status(stuck)  # (get would queue it again: such errors are retried)
    assert status.state == "error" and status.error_kind in kinds, status
    assert _ERROR_CODES[status.error_kind] == 503  # what /summary answers
    # within 2 s no decode process left, and none of the pool's named semaphores (the
    # resource tracker, spared by the kill, unlinks them: 5 were left per killed load)
    wait_until(lambda: session_members(worker) == [], 2.0, "no process of the worker's session")
    names = (tmp_path / "pool-semaphores").read_text().split()
    assert names
    wait_until(lambda: semaphores_left(names) == [], 2.0, "no semaphore of the pool")
    good = ident_of(write_plain_trace(tmp_path / "logs" / "good.1.pt.trace.json", 3, 2))
    status, result = loader.get(good, wait_s=60)  # the slot is back
    assert status.state == "ready" and result is not None, status
    assert json.loads(result.panels["steps"])["count"] == 3
    return loader


def test_worker_killed_during_a_parallel_read(tmp_path: Path, stuck_loader: SummaryLoader) -> None:
    stuck, worker = start_stuck_read(tmp_path, stuck_loader)
    killed = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    status, _ = stuck_loader.get(stuck, wait_s=10)
    assert time.monotonic() - killed < 2.0, status
    assert status.error_kind == "worker" and "died" in (status.error or ""), status
    assert_clean_end(stuck_loader, tmp_path, stuck, worker, {"worker"})


def loading_for_s(loader: SummaryLoader, ident: Identity) -> float:
    """Seconds the load of ``ident`` has run (the loader's clock, from when the task
    was taken: at least the worker's own, since the worker is already up)."""
    progress = loader.status(ident).progress
    assert progress is not None
    return float(progress["elapsed_s"] or 0.0)


@pytest.mark.parametrize("stop", [False, True], ids=["running", "sigstop"])
def test_parallel_read_past_its_deadline(
    tmp_path: Path, stuck_loader: SummaryLoader, stop: bool
) -> None:
    """The load ends with ``timeout`` (503) within its deadline (3 s) + 2 s, whether the
    worker runs (waiting on its decode processes) or is stopped."""
    stuck, worker = start_stuck_read(tmp_path, stuck_loader)
    if stop:
        os.kill(worker, signal.SIGSTOP)
    at, already = time.monotonic(), loading_for_s(stuck_loader, stuck)
    status, _ = stuck_loader.get(stuck, wait_s=20)
    assert already + time.monotonic() - at < 3.0 + 2.0, status
    assert status.error_kind == "timeout" and "deadline of 3.0 s" in (status.error or ""), status
    assert_clean_end(stuck_loader, tmp_path, stuck, worker, {"timeout"})


HOST_SCRIPT = """
import sys, time
from pathlib import Path
import test_worker_death as t
from tb_kineto_insights.service.loader import SummaryLoader
loader = SummaryLoader(cache=None, workers=1, summarize=t.stuck_in_parallel_read)
stuck, worker = t.start_stuck_read(Path(sys.argv[1]), loader)
print(worker, flush=True)
time.sleep(3600)  # the input under test: the host runs on until it is killed
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_host_killed_during_a_parallel_read_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int
) -> None:
    """The program that holds the loader (TensorBoard) dies, by SIGKILL or by SIGTERM
    (which runs no ``atexit``), in the middle of a parallel read: within 2 s no worker or
    decode process is left (the worker's parent-death signal kills its group)."""
    import subprocess
    import sys

    old = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(TESTS), old) if p))
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert host.stdout is not None
        worker = int(host.stdout.readline())
        assert len(session_members(worker)) >= 4
        host.send_signal(sig)
        host.wait(timeout=10)
        # within 2 s no worker or decode process left
        wait_until(lambda: session_members(worker) == [], 2.0, "no process of the worker's session")
    finally:
        host.kill()
        host.wait()


#: Loaded in every process of the TensorBoard below (``PYTHONPATH``): when
#: ``KINETO_TEST_STUCK_READ`` is set, reads go parallel and the decode pool's first tasks
#: sleep for an hour, as :func:`stuck_in_parallel_read` arranges inside one worker.
STUCK_SITECUSTOMIZE = """
import os
if os.environ.get("KINETO_TEST_STUCK_READ") == "1":
    import time
    from tb_kineto_insights.trace import parallel

    parallel.PARALLEL_MIN_JSON_BYTES = 0
    parallel.PIECE_BYTES = 0
    os.environ[parallel.WORKERS_ENV] = "2"
    _start_pool = parallel.start_pool

    def _sleeping_pool(workers):
        pool = _start_pool(workers)
        for _ in range(workers):  # the input under test: decode processes that hang
            pool.submit(time.sleep, 3600)
        return pool

    parallel.start_pool = _sleeping_pool
"""


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in children.read_text().split()]
        except OSError:
            continue
    return out


def test_real_tensorboard_exits_on_sigterm_during_a_parallel_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32 §1's last fault, on a real ``tensorboard`` process: SIGTERM while its
    load worker waits on its decode processes. TensorBoard exits within 2 s, and within
    2 s more no worker or decode process of its is left."""
    from test_plugin import TENSORBOARD, running_tensorboard, tail

    if TENSORBOARD is None:
        pytest.skip("needs the tensorboard executable")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STUCK_SITECUSTOMIZE)
    old = os.environ.get("PYTHONPATH", "")
    root = str(TESTS.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), root, old) if p))
    monkeypatch.setenv("KINETO_TEST_STUCK_READ", "1")
    logdir = tmp_path / "logs"
    write_plain_trace(logdir / "run" / "stuck.1.pt.trace.json", 40, 1500)
    log_path = tmp_path / "tensorboard.log"
    procs: list[Any] = []
    with running_tensorboard(
        logdir, log_path, tmp_path / "cache", "30", "--kineto_insights_workers", "1", procs=procs
    ):
        (tb,) = procs
        workers = wait_until(  # the preload starts the read
            lambda: [pid for pid in _children(tb.pid) if len(session_members(pid)) >= 4],
            90,
            lambda: f"a worker with its decode processes:\n{tail(log_path)}",
            interval=0.1,
        )
        (worker,) = workers
        tb.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        tb.wait(timeout=10)
        assert time.monotonic() - sent < 2.0, tail(log_path)
        wait_until(
            lambda: session_members(worker) == [],
            2.0,
            lambda: f"no process of the worker's session:\n{tail(log_path)}",
        )
