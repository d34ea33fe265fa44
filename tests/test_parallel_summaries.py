"""The files of a log directory read at once (issue 34): the same summaries, to the byte,
as the serial path, in file order, one broken file reported with its error while the
others still come; what goes piece by piece and how files are batched.

Correctness only: how fast it is, is a benchmark (``benchmarks/compare_peers.py
--logdir``, figures in ``benchmarks/RESULTS.md``), never a test.

Real traces: ``test_parallel_summaries_real.py``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import python_child

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.cli.main import main
from tb_kineto_insights.store import parallel_summaries as ps
from tb_kineto_insights.trace import parallel

MIB = 1024 * 1024


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Forces worker processes on (two, whatever this machine's cores) and records each
    pool started for whole files (None: it could not start)."""
    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    monkeypatch.setattr(
        parallel, "machine_now", lambda: parallel.Machine(affinity=2, env=parallel.env_cores())
    )
    started: list[Any] = []
    real = parallel.start_pool

    def recording(workers: int, preload: tuple[str, ...] = ()) -> Any:
        pool = real(workers, preload)
        if preload:
            started.append(pool)
        return pool

    monkeypatch.setattr(parallel, "start_pool", recording)
    return started


def test_json_report_of_unreadable_files_lists_them_in_report_order(
    tmp_path: Path,
    pools: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nothing readable, the largest file last in the report's order (so done first):
    ``report --format json`` lists each file's reason in the report's order, as the
    text format does (attack run: the order the runs were done, the largest first)."""
    monkeypatch.setattr(ps, "MIN_PARALLEL_JSON_BYTES", 0)
    files = []
    for name, size in (("a", 1), ("b", 2), ("c", 3)):
        path = tmp_path / "logs" / name / "w.1.pt.trace.json"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x" * (size * MIB))
        files.append(path)
    reasons = [
        f"{p}: TraceFormatError: not a JSON trace (does not start with '{{' or '[') at byte 0\n"
        for p in files
    ]
    root = str(tmp_path / "logs")
    assert main(["report", root, "--format", "json", "--cache", "none"]) == 2
    assert len(pools) == 1 and pools[0] is not None
    json_err = capsys.readouterr().err
    assert json_err == "error: no trace could be read; the reasons, per file, follow\n" + "".join(
        reasons
    )
    assert main(["report", root, "--cache", "none"]) == 2
    assert capsys.readouterr().err == json_err


@pytest.mark.parametrize(
    ("sizes", "workers", "here", "batches"),
    [
        # one file larger than its share of two cores: piece by piece, here
        ([10 * MIB, 100 * MIB, 20 * MIB], 2, [1], [[2], [0]]),
        # two large files of about the same size: each whole in one process
        ([60 * MIB, 55 * MIB, 5 * MIB], 2, [], [[0], [1], [2]]),
        # under PARALLEL_MIN_JSON_BYTES (32 MiB): never piece by piece
        ([30 * MIB, 1 * MIB], 2, [], [[0], [1]]),
        # the two largest each dominate what is left after them
        ([200 * MIB, 10 * MIB, 100 * MIB], 2, [0, 2], [[1]]),
        # small files share a batch of up to 8 MiB while much is left, largest first,
        # ties in file order; a batch holds at most a quarter (2 cores, BATCH_GUIDE 2)
        # of the JSON still to batch
        (
            [3 * MIB] * 3 + [4 * MIB] + [1 * MIB] * 30,
            2,
            [],
            [[3, 0, 1], [2, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15], [16, 17, 18, 19, 20]]
            + [[21, 22, 23, 24], [25, 26, 27], [28, 29], [30], [31], [32], [33]],
        ),
        # a little JSON in all: one file each
        ([3 * MIB, 3 * MIB, 4 * MIB, 1 * MIB], 2, [], [[2], [0], [1], [3]]),
    ],
)
def test_plan(sizes: list[int], workers: int, here: list[int], batches: list[list[int]]) -> None:
    assert ps.plan(sizes, workers) == (here, batches)


def test_batches_shrink_to_single_files_at_the_end() -> None:
    """Guided batches: 40 files of 1 MiB on 2 cores give batches of at most 8 MiB and
    at most a quarter of what is left, so the last ones (which decide when both
    processes finish) are single files; on 4 cores the first batch is 40 / 8 = 5."""
    _, batches = ps.plan([1 * MIB] * 40, 2)
    assert [len(b) for b in batches] == [8, 8, 6, 5, 4, 3, 2, 1, 1, 1, 1]
    assert [i for b in batches for i in b] == list(range(40))
    _, batches = ps.plan([1 * MIB] * 40, 4)
    assert [len(b) for b in batches][:3] == [5, 5, 4]


def test_few_or_small_files_are_read_serially(monkeypatch: pytest.MonkeyPatch) -> None:
    """No pool for one file, for little JSON in all, or with one core."""
    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    monkeypatch.setattr(
        parallel, "machine_now", lambda: parallel.Machine(affinity=2, env=parallel.env_cores())
    )
    assert ps.worker_count(500 * MIB, 1) == 0
    assert ps.worker_count(ps.MIN_PARALLEL_JSON_BYTES - 1, 10) == 0
    assert ps.worker_count(ps.MIN_PARALLEL_JSON_BYTES, 10) == 2
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    assert ps.worker_count(500 * MIB, 10) == 0


# ----------------------------------------------------------------- the plugin's loader


def _ident(path: str, size: int) -> Any:
    from tb_kineto_insights.store.cache import Identity

    return Identity(path, size, 1.0, content=path)


def test_loader_preloads_largest_first_and_shares_one_budget_of_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Preloading takes the largest file first (a request still goes before any
    preload, smallest first); each load's read gets the cores the loads already running
    leave (at least 1): 4 cores, then 3, then 2 while the first three load."""
    from tb_kineto_insights.service import loader as loader_module

    monkeypatch.setattr(parallel, "usable_cores", lambda: 4)
    loader = loader_module.SummaryLoader(cache=None, workers=3)
    try:
        with loader._cv:  # the slots' threads wait on it: nothing is taken meanwhile
            for name, size in (("small", 10), ("big", 1000), ("mid", 100)):
                loader._enqueue_locked(_ident(name, size), loader_module.PRIORITY_PRELOAD)
            loader._enqueue_locked(_ident("asked", 5000), loader_module.PRIORITY_REQUEST)
            tasks = [loader._pop_task_locked() for _ in range(4)]
            assert [t.ident.path for t in tasks if t] == ["asked", "big", "mid", "small"]
            assert [t.read_workers for t in tasks if t] == [4, 3, 2, 1]
            for t in tasks:  # done: not loading any more
                assert t is not None
                loader._states[t.ident] = loader_module.READY
    finally:
        loader.close()
    threaded = loader_module.SummaryLoader(cache=None, workers=0)
    try:
        assert threaded._read_budget(0) is None  # in this process: the reader decides
    finally:
        threaded.close()


def test_a_load_reads_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker process's read sees ``KINETO_INSIGHTS_READ_WORKERS`` at most its
    budget during the load (a lower value the user set stays), and as before after."""
    from tb_kineto_insights.service.worker_pool import _within_read_budget

    def seen() -> str | None:
        return os.environ.get(parallel.WORKERS_ENV)

    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    assert _within_read_budget(3, seen) == "3"
    assert _within_read_budget(0, seen) == "1"
    assert _within_read_budget(None, seen) is None
    assert seen() is None
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    assert _within_read_budget(3, seen) == "2"
    assert _within_read_budget(1, seen) == "1"
    assert seen() == "2"


def test_a_batch_runs_under_the_callers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool's worker comes from a forkserver that may have started under an older
    environment (a long-lived process): each batch first takes the caller's environment
    as it was when the call began (storage endpoints and credentials)."""
    monkeypatch.setenv("KINETO_INSIGHTS_TEST_MARK", "caller")
    settings = ps.Settings(8 << 30, DEFAULT_THRESHOLDS)
    monkeypatch.setenv("KINETO_INSIGHTS_TEST_MARK", "stale")
    monkeypatch.setenv("KINETO_INSIGHTS_TEST_STALE_ONLY", "1")
    assert ps.summarize_batch([], settings) == []
    assert os.environ["KINETO_INSIGHTS_TEST_MARK"] == "caller"
    assert "KINETO_INSIGHTS_TEST_STALE_ONLY" not in os.environ


def test_the_feeder_and_this_process_never_take_the_same_batch() -> None:
    """While the feeder thread sends a batch, this process taking the next one gets the
    next one: every batch is sent or taken, once (a batch read by both while another
    was skipped left ``report`` waiting for it forever)."""
    from concurrent.futures import Future

    taken: list[Any] = []

    class Pool:  # sends nothing: this process takes a batch during each send
        def submit(self, fn: Any, *args: Any) -> Future[Any]:
            taken.append(feeder.take_next())
            done: Future[Any] = Future()
            done.set_result([])
            return done

    batches = [ps._Batch([i]) for i in range(6)]
    feeder = ps._Feeder(Pool(), batches, [None] * 6, ps.Settings(1, DEFAULT_THRESHOLDS))  # type: ignore[arg-type, list-item]
    feeder.set_limit(1)
    feeder.start()
    with feeder.cond:
        assert feeder.cond.wait_for(
            lambda: feeder.next_batch == 6 and all(b.future or b in taken for b in batches),
            timeout=30,
        )
    feeder.stop()
    sent = [b for b in batches if b.future is not None]
    assert sorted(b.indices[0] for b in sent) == [0, 2, 4]
    assert sorted(b.indices[0] for b in taken if b is not None) == [1, 3, 5]


# ------------------------------------------- the pool forked ahead (prestart, issue 34)


def _child(code: str, workers: str = "2") -> list[str]:
    """``code`` run in a fresh interpreter of one thread (a test process may run more),
    with ``KINETO_INSIGHTS_READ_WORKERS=workers`` and ``OPENBLAS_NUM_THREADS=1`` (as the
    command line sets it): the lines it printed."""
    head = "import os, sys\nfrom tb_kineto_insights.trace import parallel\n"
    proc = python_child(head + code, {parallel.WORKERS_ENV: workers, "OPENBLAS_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_a_pool_forked_ahead_is_this_processs_child_and_is_taken_once() -> None:
    """prestart_pool imports the analysis here, freezes the collector's objects and
    then forks its workers from this process (a worker's parent is this process, not a
    forkserver; it shares the imports); the next start_pool of that size takes it, and
    the one after gets a new pool (from the forkserver)."""
    out = _child(
        "import gc\n"
        "def probe(): return os.getppid(), 'tb_kineto_insights.summary' in sys.modules\n"
        "print('tb_kineto_insights.summary' in sys.modules, gc.get_freeze_count() > 0)\n"
        "assert parallel.prestart_pool(1, ('tb_kineto_insights.summary',))\n"
        "print('tb_kineto_insights.summary' in sys.modules, gc.get_freeze_count() > 0)\n"
        "pool = parallel.start_pool(1)\n"
        "parent, imported = pool.submit(probe).result()\n"
        "print(parent == os.getpid(), imported)\n"
        "again = parallel.start_pool(1)\n"
        "print(again is pool, again.submit(os.getppid).result() == os.getpid())\n"
        "pool.shutdown(); again.shutdown()\n"
    )
    assert out == ["False", "False", "True", "True", "True", "True", "False", "False"]


def test_the_analysis_is_imported_after_the_fork_when_blas_would_start_threads() -> None:
    """With ``OPENBLAS_NUM_THREADS`` other than 1 (numpy's OpenBLAS would start threads
    at import) prestart_pool forks first and each worker imports, as before issue 34's
    round 3; with 1 (what the command line sets) this process imports first."""
    code = (
        "import gc\n"
        "def probe(): return 'tb_kineto_insights.summary' in sys.modules\n"
        "assert parallel.prestart_pool(1, ('tb_kineto_insights.summary',))\n"
        "print('numpy' in sys.modules, 'tb_kineto_insights.summary' in sys.modules)\n"
        "pool = parallel.start_pool(1)\n"
        "print(pool.submit(probe).result())\n"
        "pool.shutdown()\n"
    )
    head = "import os, sys\nfrom tb_kineto_insights.trace import parallel\n"
    for blas, here in (("4", "False"), ("1", "True")):
        env = {parallel.WORKERS_ENV: "2", "OPENBLAS_NUM_THREADS": blas}
        proc = python_child(head + code, env)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [here, here, "True"], (blas, proc.stdout)


def test_no_pool_is_forked_beside_a_thread_nor_on_one_core() -> None:
    """fork of a process running another thread may leave a lock held for ever in the
    child: then, and with one core, nothing is forked."""
    out = _child(
        "import threading\n"
        "done = threading.Event()\n"
        "t = threading.Thread(target=done.wait); t.start()\n"
        "print(parallel.prestart_pool(1), parallel._prestarted)\n"
        "done.set()\n"
    )
    assert out == ["False", "None"]
    assert _child("print(parallel.prestart_pool(1))", workers="1") == ["False"]


def test_a_pool_forked_ahead_of_another_size_is_released() -> None:
    out = _child(
        "assert parallel.prestart_pool(1)\n"
        "ahead = parallel._prestarted[1]\n"
        "pool = parallel.start_pool(2)\n"
        "print(pool is ahead, parallel._prestarted)\n"
        "try:\n"
        "    ahead.submit(int)\n"
        "except RuntimeError:\n"
        "    print('released')\n"
        "pool.shutdown()\n"
    )
    assert out == ["False", "None", "released"]


@pytest.mark.parametrize(
    ("workers", "piece_by_piece", "batches", "size"),
    [
        (2, False, 12, 1),
        (999, False, 12, 11),
        (16, False, 4, 3),
        (4, True, 12, 4),
        (2, False, 1, 1),
    ],
)
def test_pool_size(workers: int, piece_by_piece: bool, batches: int, size: int) -> None:
    """One process per core while a file goes piece by piece; else one fewer, and no
    more than the batches left once this process took its first."""
    assert ps.pool_size(workers, piece_by_piece, batches) == size
