"""The choice of worker processes for a read (``trace/parallel.py``: :func:`plan_read`,
:func:`pool_cores`, the machine's inputs), from exact inputs: affinity, cgroup quota,
load, ``$KINETO_INSIGHTS_READ_WORKERS``, the file's size and the cost model."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tb_kineto_insights.trace import parallel
from tb_kineto_insights.trace.parallel import Machine, ReadCosts, plan_read, pool_cores

MB = 10**6
BIG = 1000 * MB  # a 1 GB trace: the default model's break-even on 2 idle cores is below
#: A model where workers cost nothing to start and the pieces nothing to send: parallel
#: wins on any large file with 2 free CPUs.
FREE_PARALLEL = ReadCosts(parent_per_mb=0.1, worker_per_mb=1.0, start_mb=0.0, margin=0.1)


def test_one_cpu_of_affinity_reads_serially() -> None:
    plan = plan_read(BIG, Machine(affinity=1), FREE_PARALLEL)
    assert plan.workers == 0
    assert "1 usable CPU" in plan.reason


def test_a_quota_of_half_a_cpu_reads_serially() -> None:
    plan = plan_read(BIG, Machine(affinity=16, quota=0.5), FREE_PARALLEL)
    assert plan.workers == 0
    assert "cgroup quota 0.5 CPU" in plan.reason


def test_the_quota_bounds_the_workers() -> None:
    assert plan_read(BIG, Machine(affinity=16, quota=2.5), FREE_PARALLEL).workers == 2


@pytest.mark.parametrize("load", [2.0, 2.5, 8.0])
def test_a_load_of_the_usable_cpus_or_more_reads_serially(load: float) -> None:
    plan = plan_read(BIG, Machine(affinity=2, load=load), FREE_PARALLEL)
    assert plan.workers == 0
    assert f"load {load:.1f} >= 2 usable CPUs" in plan.reason


def test_a_small_file_reads_serially_on_an_idle_machine() -> None:
    small = parallel.PARALLEL_MIN_JSON_BYTES - 1
    plan = plan_read(small, Machine(affinity=16), FREE_PARALLEL)
    assert plan.workers == 0
    assert "under" in plan.reason


def test_a_big_file_on_an_idle_two_core_reads_in_parallel_when_the_model_wins() -> None:
    plan = plan_read(BIG, Machine(affinity=2, load=0.0), FREE_PARALLEL)
    assert plan.workers == 2
    assert "2 workers" in plan.reason


def test_a_big_file_on_an_idle_two_core_reads_serially_when_the_model_loses() -> None:
    """Workers that cost 1.2x the serial CPU per MB cannot win on 2 cores once the
    parent's share is counted: (0.3 + 0.9) / 2 = 0.6, plus a start of 400 MB: serial."""
    costly = ReadCosts(parent_per_mb=0.3, worker_per_mb=0.9, start_mb=400.0, margin=0.1)
    plan = plan_read(BIG, Machine(affinity=2), costly)
    assert plan.workers == 0
    assert "in 1.00x the time of one process" in plan.reason


def test_the_default_model_on_an_idle_two_core() -> None:
    """The measured model (benchmarks/RESULTS.md, issue 46): the 88 MB GPT trace reads in
    one process, a 1 GB trace with 2 workers."""
    idle = Machine(affinity=2, load=0.0)
    assert plan_read(88 * MB, idle).workers == 0
    assert plan_read(BIG, idle).workers == 2


def test_workers_forked_ahead_pay_back_where_a_forkserver_does_not() -> None:
    """Forked ahead (``FORKED_COSTS``: they share the parent's imports) the workers' start
    is the first pieces' latency only, so the 88 MB GPT trace reads with 2 workers on an
    idle 2-core, where a forkserver's start (``DEFAULT_COSTS``) keeps it in one process;
    a file of a few pieces stays serial either way, and so does any loaded machine."""
    idle = Machine(affinity=2, load=0.0)
    assert plan_read(88 * MB, idle, parallel.DEFAULT_COSTS).workers == 0
    assert plan_read(88 * MB, idle, parallel.FORKED_COSTS).workers == 2
    assert plan_read(34 * MB, idle, parallel.FORKED_COSTS).workers == 0
    assert plan_read(BIG, Machine(affinity=2, load=1.0), parallel.FORKED_COSTS).workers == 0


def test_a_partial_load_leaves_fewer_free_cpus() -> None:
    """One CPU of 2 taken: the parallel read's CPU (parent + workers) all lands on the
    one left, never faster than serial."""
    plan = plan_read(BIG, Machine(affinity=2, load=1.0), FREE_PARALLEL)
    assert plan.workers == 0
    assert "(1.0 CPUs free)" in plan.reason


def test_the_variable_is_the_users_word() -> None:
    """``$KINETO_INSIGHTS_READ_WORKERS``: 1 is serial whatever the machine; n >= 2 is n
    workers for a file over the size floor, whatever the load or the model."""
    costly = ReadCosts(start_mb=10**9)
    assert plan_read(BIG, Machine(affinity=16, env=1), FREE_PARALLEL).workers == 0
    assert plan_read(BIG, Machine(affinity=2, load=9.0, env=4), costly).workers == 4
    small = parallel.PARALLEL_MIN_JSON_BYTES - 1
    assert plan_read(small, Machine(affinity=2, env=4), FREE_PARALLEL).workers == 0


def test_pool_cores() -> None:
    assert pool_cores(Machine(affinity=4, load=1.0))[0] == 4
    assert pool_cores(Machine(affinity=4, load=4.0))[0] == 0
    assert pool_cores(Machine(affinity=1))[0] == 0
    assert pool_cores(Machine(affinity=8, quota=1.5))[0] == 0
    assert pool_cores(Machine(affinity=8, quota=3.9))[0] == 3
    assert pool_cores(Machine(affinity=2, load=5.0, env=3))[0] == 3


def _point_cgroup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, v2: str | None) -> None:
    monkeypatch.setattr(parallel, "CGROUP_V1_QUOTA", str(tmp_path / "absent_quota"))
    monkeypatch.setattr(parallel, "CGROUP_V1_PERIOD", str(tmp_path / "absent_period"))
    target = tmp_path / "cpu.max"
    if v2 is not None:
        target.write_text(v2)
    monkeypatch.setattr(parallel, "CGROUP_V2_CPU_MAX", str(target))


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("50000 100000\n", 0.5), ("200000 100000\n", 2.0), ("max 100000\n", None), (None, None)],
)
def test_cgroup_v2_quota(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str | None, cpus: float | None
) -> None:
    _point_cgroup(monkeypatch, tmp_path, text)
    assert parallel._cgroup_quota() == cpus


@pytest.mark.parametrize(("quota", "cpus"), [("150000", 1.5), ("-1", None), ("junk", None)])
def test_cgroup_v1_quota(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, quota: str, cpus: float | None
) -> None:
    _point_cgroup(monkeypatch, tmp_path, None)
    (tmp_path / "q").write_text(quota + "\n")
    (tmp_path / "p").write_text("100000\n")
    monkeypatch.setattr(parallel, "CGROUP_V1_QUOTA", str(tmp_path / "q"))
    monkeypatch.setattr(parallel, "CGROUP_V1_PERIOD", str(tmp_path / "p"))
    assert parallel._cgroup_quota() == cpus


def test_machine_now_reads_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.WORKERS_ENV, " 3 ")
    now = parallel.machine_now()
    assert (now.env, now.env_text) == (3, None)
    assert pool_cores(now) == (3, "KINETO_INSIGHTS_READ_WORKERS=3")
    monkeypatch.setenv(parallel.WORKERS_ENV, "many")
    now = parallel.machine_now()
    assert (now.env, now.env_text) == (1, "many")
    # the words say what the user set, not only what it counts as
    said = "KINETO_INSIGHTS_READ_WORKERS=1 (set to 'many'): one process"
    assert pool_cores(now) == (0, said)
    # bounded: 2**31 overflowed a semaphore's C int (a traceback), 1000 forked 1000
    for huge in ("1000", "2147483648", "1" + "0" * 20):
        monkeypatch.setenv(parallel.WORKERS_ENV, huge)
        assert parallel.machine_now().env == parallel.MAX_ENV_CORES == 64
    assert pool_cores(parallel.machine_now())[1] == (
        "KINETO_INSIGHTS_READ_WORKERS=64 (set to '100000000000000000000')"
    )
    monkeypatch.setenv(parallel.WORKERS_ENV, "x" * 1000)  # the text is cut short
    assert parallel.machine_now().env_text == "x" * 40
    monkeypatch.delenv(parallel.WORKERS_ENV)
    now = parallel.machine_now()
    assert now.env is None and now.affinity >= 1 and now.load == 0.0  # conftest pins it


def test_estimate_json_bytes(tmp_path: Path) -> None:
    """A gzip file's ISIZE trailer, a plain file's size, 0 for a folder or nothing."""
    body = b'{"traceEvents": []}' * 1000
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(body))
    plain = tmp_path / "t.json"
    plain.write_bytes(body)
    assert parallel.estimate_json_bytes(str(gz)) == len(body)
    assert parallel.estimate_json_bytes(str(plain)) == len(body)
    assert parallel.estimate_json_bytes(str(tmp_path)) == 0
    assert parallel.estimate_json_bytes(str(tmp_path / "missing")) == 0


def test_the_choice_is_recorded_for_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "DECISIONS", [])
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    assert parallel.read_workers(BIG) == 0
    assert parallel.read_workers(BIG) == 0
    assert [f"read: 1000 MB, {parallel.WORKERS_ENV}=1: one process"] == parallel.DECISIONS


def test_plan_for_prices_the_start_of_the_workers_it_will_get(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``plan_for`` (this process now) prices the start as forked ahead where a pool
    waits or fork is safe here (one thread), else as the forkserver's."""
    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    monkeypatch.setattr(parallel, "machine_now", lambda: Machine(affinity=2, load=0.0))
    monkeypatch.setattr(parallel, "_prestarted", None)
    monkeypatch.setattr(parallel, "can_fork_now", lambda: False)
    assert parallel.plan_for(88 * MB).workers == 0
    monkeypatch.setattr(parallel, "can_fork_now", lambda: True)
    assert parallel.plan_for(88 * MB).workers == 2
    monkeypatch.setattr(parallel, "can_fork_now", lambda: False)
    monkeypatch.setattr(parallel, "_prestarted", (2, object()))
    assert parallel.plan_for(88 * MB).workers == 2


def test_plan_for_a_small_file_asks_nothing_of_the_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file under the minimum is read in one process without sampling the load (5
    samples over 4 ms, paid by every small file of a log directory) or pricing costs;
    a file at the minimum asks the machine."""
    asked: list[str] = []

    def machine() -> Machine:
        asked.append("machine")
        return Machine(affinity=2, load=0.0)

    def costs() -> ReadCosts:
        asked.append("costs")
        return parallel.FORKED_COSTS

    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    monkeypatch.setattr(parallel, "machine_now", machine)
    monkeypatch.setattr(parallel, "costs_now", costs)
    small = parallel.plan_for(parallel.PARALLEL_MIN_JSON_BYTES - 1)
    assert (small.workers, asked) == (0, [])
    assert small.reason == "a file under 34 MB of JSON: one process"
    parallel.plan_for(parallel.PARALLEL_MIN_JSON_BYTES)
    assert asked == ["machine", "costs"]


def test_the_read_takes_the_warm_ups_plan_and_says_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read after ``warm_up`` takes the warm-up's plan for that file: the pool forked
    for it is used and ``--verbose`` says the choice once, though the load moved in
    between; the next read (or one of another size) plans anew."""
    path = tmp_path / "big.pt.trace.json"
    path.write_bytes(b"{}")
    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    monkeypatch.setattr(parallel, "_warm_plan", None)
    monkeypatch.setattr(parallel, "DECISIONS", [])
    monkeypatch.setattr(parallel, "estimate_json_bytes", lambda _: BIG)
    monkeypatch.setattr(parallel, "costs_now", lambda: parallel.FORKED_COSTS)
    monkeypatch.setattr(parallel, "prestart_pool", lambda workers: workers == 2)
    monkeypatch.setattr(parallel, "machine_now", lambda: Machine(affinity=2, load=0.0))
    assert parallel.warm_up(str(path))
    monkeypatch.setattr(parallel, "machine_now", lambda: Machine(affinity=2, load=2.0))
    assert parallel.read_workers(BIG) == 2  # the warm-up's plan, not load 2's
    assert len(parallel.DECISIONS) == 1
    assert parallel.DECISIONS[0].endswith(": 2 workers")
    assert parallel.read_workers(BIG) == 0  # planned anew: load 2 on 2 CPUs
    monkeypatch.setattr(parallel, "machine_now", lambda: Machine(affinity=2, load=0.0))
    assert parallel.warm_up(str(path))
    monkeypatch.setattr(parallel, "machine_now", lambda: Machine(affinity=2, load=2.0))
    assert parallel.read_workers(BIG - 1) == 0  # another file: planned anew
    assert parallel.read_workers(BIG) == 0  # the warm-up's plan went with the first read


#: The real :func:`parallel.load_now` (conftest pins it to 0 for every test).
LOAD_NOW = parallel.load_now


def _fake_proc(tmp_path: Path, loadavg: str, states: list[bytes]) -> tuple[str, str]:
    """A ``/proc/loadavg`` and a ``/proc/self/task`` with one thread per state."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    avg = tmp_path / "loadavg"
    avg.write_text(loadavg)
    tasks = tmp_path / "task"
    for i, state in enumerate(states):
        (tasks / str(100 + i)).mkdir(parents=True)
        # a thread name holding ") R" must not be read as the state
        (tasks / str(100 + i) / "stat").write_bytes(b"%d (py) R x) %s 1 2 3" % (100 + i, state))
    return str(avg), str(tasks)


def test_the_load_is_other_processes_runnable_tasks_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """5 runnable tasks on the machine, 2 of them this process's threads (one sleeps):
    3 elsewhere, whatever the trailing load average says (9.0 here)."""
    avg, tasks = _fake_proc(tmp_path, "9.00 8.00 7.00 5/300 4242\n", [b"R", b"S", b"R"])
    monkeypatch.setattr(parallel, "PROC_LOADAVG", avg)
    monkeypatch.setattr(parallel, "PROC_SELF_TASKS", tasks)
    assert parallel._running_threads_here() == 2
    assert LOAD_NOW() == 3.0
    # only this process runs: an idle machine, although the last minute was busy
    avg, tasks = _fake_proc(tmp_path / "idle", "9.00 8.00 7.00 1/300 4242\n", [b"R"])
    monkeypatch.setattr(parallel, "PROC_LOADAVG", avg)
    monkeypatch.setattr(parallel, "PROC_SELF_TASKS", tasks)
    assert LOAD_NOW() == 0.0
    # no /proc: the 1-minute load average
    monkeypatch.setattr(parallel, "PROC_LOADAVG", str(tmp_path / "missing"))
    monkeypatch.setattr(parallel.os, "getloadavg", lambda: (1.5, 1.0, 0.5))
    assert LOAD_NOW() == 1.5


@pytest.mark.skipif(not Path("/proc/loadavg").exists(), reason="Linux /proc only")
def test_a_busy_process_beside_this_one_counts_as_load() -> None:
    """A process spinning on a CPU is always runnable: at least 1, on any machine."""
    import subprocess
    import sys
    import time

    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # past its start
        assert LOAD_NOW() >= 1.0
    finally:
        spin.kill()
        spin.wait()
