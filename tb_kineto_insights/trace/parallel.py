"""Decode pieces of one large trace in worker processes.

Why processes, not threads: msgspec's decode holds the GIL (two threads gain nothing
over one: ``benchmarks/RESULTS.md``, "Threads"), and so does building the numpy columns
of a piece (many small numpy and ``map`` calls), so threads cannot share that work.
Worker processes each decode a whole piece (a few MiB of ``traceEvents``) into a local
:class:`~tb_kineto_insights.trace.columns.Builder` (local name ids, counts, columns)
and send it back pickled; the parent merges the pieces in file order
(``Builder.merge``: one ``np.take`` per name column), so the result is the same, bit
for bit, as the serial read.

When (:func:`plan_read`, from exact inputs: :class:`Machine`): only for a file of at
least :data:`PARALLEL_MIN_JSON_BYTES` uncompressed bytes (a local gzip file's ``ISIZE``
trailer, else :data:`GZIP_RATIO_ESTIMATE` times its stored size), only with at least two
usable CPUs (the affinity mask, bounded by the cgroup CPU quota), only while other
processes take fewer of them (:func:`load_now`: their runnable tasks now, not the
trailing load average), and only when the measured cost model (:class:`ReadCosts`:
the workers' start, the parent's and the workers' CPU per MB, against one process's)
predicts the parallel read faster on the CPUs free now, by a margin: on a 2-core
machine workers forked ahead (:data:`FORKED_COSTS`) pay back from a few tens of MB,
workers from a forkserver (:data:`DEFAULT_COSTS`) only from a few hundred.
``KINETO_INSIGHTS_READ_WORKERS`` overrides the CPUs, the load and the model (the
variable sets the number of cores a read may use). Workers are started from a
``forkserver`` (``spawn`` where there is none): the parent already runs a helper
thread (the gzip inflate), and ``fork`` of a threaded process is unsafe; the one
exception is a pool forked ahead, while the process still runs one thread, for a command
that reads a log directory or one large file (:func:`prestart_pool`): its workers share
the parent's imports, so their start costs a fork, not an interpreter's imports
(:data:`FORKED_COSTS` against :data:`DEFAULT_COSTS`). A process
that cannot start children (a daemonic ``multiprocessing`` worker) and any
``multiprocessing`` child read serially. The plugin's loader reads in ``python -c``
processes started with ``subprocess`` (not daemonic), so a large file read there uses
workers too. As with any use of ``multiprocessing``, a script that reads a large
trace must guard its top level with ``if __name__ == "__main__":`` (each worker imports
the main module), or set ``KINETO_INSIGHTS_READ_WORKERS=1``. Unguarded, each worker
would run the whole script again; so a worker that reaches a read while it imports the
main module raises (:func:`_refuse_while_bootstrapping`), and the parent reads serially
and logs why.

Where the time goes: most of the parent's CPU during the read is the gzip inflate; the
rest is cutting, sending and merging. ``Input Dims`` come back as one text blob per
piece (:mod:`~tb_kineto_insights.trace.rowjson`) and the merge runs no Python per row:
unpickled nested lists, re-keyed row by row, would be most of the parent's other work.
The workers' decode (msgspec and the columns) is nearly all of the work, so two workers
on two cores, with the parent mostly waiting, stays the choice. ``isal``
inflates faster than zlib, but it has no ``decompressobj.copy()`` (the damage bisection
of :mod:`.source` needs it) and may cut its output differently (block boundaries decide
piece cuts, hence salvage regions), so it is not used.

Start-up: the forkserver is a fresh interpreter that imports numpy, msgspec and the
reader before it forks the first worker, and each worker then imports its main module
(the console script: ``cli``); a read that starts the pool itself leaves the parent's
inflate running alone until the workers take their first pieces. Hence:

- ``cli`` imports only what its parser needs (the workers' import of it is cheap),
  and the server preloads it with the reader when the parent has loaded it;
- the command line calls :func:`warm_up` before it imports the analysis, so the server
  starts while the parent imports;
- until a worker has decoded a piece, the parent decodes pieces itself once
  :data:`IN_FLIGHT_PER_WORKER` pieces per worker wait (a read without a warm-up, e.g.
  a library call, does not idle while the workers start); once one has, the parent
  only cuts, sends and merges, since on 2 cores a third decoder only takes time from
  the two workers. Pieces decoded in the parent are merged in file order like the
  workers' (the same :func:`~tb_kineto_insights.trace.reader.build_pieces`), so the
  result is still the serial read's, bit for bit;
- at the end of the input, the last group of blocks (up to :data:`PIECE_BYTES`) is
  decoded in the parent while the workers finish, instead of serially after every
  piece is merged;
- the server also preloads ``numpy.ma``: numpy >= 2.3 imports it at the first plain
  ``np.unique``, which the timestamp parser of every worker calls.

A read may also be given a pool it does not own (``read_trace(pool=, workers=)``): the
files of a log directory read at once share one pool, so that a large file's pieces and
the other files' work never take more processes than cores
(``store/parallel_summaries.py``).

A worker's time between pieces (receiving a piece, sending its columns back, waiting for
a core) is outside its busy time; what may be gained next is there (larger pieces, fewer
messages) and in the decode itself. The timelines and CPU times behind this design are
in ``benchmarks/RESULTS.md`` (``benchmarks/bench_parallel_read.py`` for wall time and
peak RSS).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Executor

# multiprocessing and concurrent.futures.process are imported where a pool is considered
# (read_workers past the size test, start_pool): imported here, they would add to every
# start-up (benchmarks/RESULTS.md), and a file under PARALLEL_MIN_JSON_BYTES never needs
# them.

#: Smallest (estimated) uncompressed JSON size read with worker processes: below it the
#: workers' start is not paid back. The mid-size public traces, where workers forced on
#: did not pay back, compress better than :data:`GZIP_RATIO_ESTIMATE`, so they are
#: estimated under it and read serially; the figures are in ``benchmarks/RESULTS.md``.
PARALLEL_MIN_JSON_BYTES = 32 * 1024 * 1024
#: A gzip trace is estimated at this many times its stored size: below what Kineto JSON
#: compresses by (the ratios measured are in ``benchmarks/RESULTS.md``), since a low
#: guess only makes a mid-size file read serially.
GZIP_RATIO_ESTIMATE = 8
#: Uncompressed bytes sent to a worker at a time (whole blocks, cut at the last event
#: boundary): fewer, larger pieces spend less of the parent's time on messages.
PIECE_BYTES = 4 * 1024 * 1024
#: The start of workers forked ahead (:data:`FORKED_COSTS`), as MB of serial read: the
#: fork itself takes milliseconds; this is the first pieces' latency (a worker waits for
#: the parent's first inflated piece) and the last piece's (``benchmarks/RESULTS.md``).
FORKED_START_MB = 8.0
#: Pieces sent to each worker and not yet decoded before the parent, while no worker
#: has decoded a piece yet, decodes the next piece itself.
IN_FLIGHT_PER_WORKER = 2
#: Pieces held per worker (sent to workers or decoded by the parent, not yet merged)
#: before the parent waits for the oldest, while no worker has decoded a piece (after
#: that: :data:`IN_FLIGHT_PER_WORKER`): bounds memory, and the work thrown away when a
#: piece fails in a worker (every later piece is then read again serially).
HELD_PER_WORKER = 4
#: Environment variable: the number of cores one read may use (``1``: serial).
WORKERS_ENV = "KINETO_INSIGHTS_READ_WORKERS"


#: cgroup v2's CPU limit of this process's group (``"max 100000"`` or ``"QUOTA PERIOD"``).
CGROUP_V2_CPU_MAX = "/sys/fs/cgroup/cpu.max"
#: cgroup v1's quota and period (microseconds; quota ``-1``: no limit).
CGROUP_V1_QUOTA = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
CGROUP_V1_PERIOD = "/sys/fs/cgroup/cpu/cpu.cfs_period_us"


class Machine:
    """What the machine can give a read now: the inputs of :func:`plan_read`.

    Attributes:
        affinity: CPUs this process may run on (``os.sched_getaffinity``), at least 1.
        quota: the cgroup's CPU quota in CPUs (``0.5``: half of one CPU's time); ``None``
            when there is none.
        load: the CPUs other processes take now (:func:`load_now`: their runnable
            tasks), ``0.0`` on an idle machine.
        env: ``$KINETO_INSIGHTS_READ_WORKERS`` as a number of cores (``None``: unset;
            a value that is not a number counts as 1; at most :data:`MAX_ENV_CORES`).
        env_text: the variable's text where ``env`` is not it (``"abc"``), else ``None``.

    A plain class: each dataclass adds to every start-up (``benchmarks/RESULTS.md``).
    """

    __slots__ = ("affinity", "env", "env_text", "load", "quota")

    def __init__(
        self,
        affinity: int,
        quota: float | None = None,
        load: float = 0.0,
        env: int | None = None,
        env_text: str | None = None,
    ) -> None:
        self.affinity = affinity
        self.quota = quota
        self.load = load
        self.env = env
        self.env_text = env_text

    def __repr__(self) -> str:
        fields = ("affinity", "quota", "load", "env", "env_text")
        return "Machine(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in fields) + ")"


class ReadCosts:
    """The per-piece cost model of a parallel read, in units of one serial read of one MB
    of JSON (so the model holds on a faster or slower core alike).

    A serial read costs ``json_mb`` units. A parallel read with ``w`` workers on ``e``
    free CPUs costs ``start_mb + json_mb * max(parent_per_mb, worker_per_mb / w,
    (parent_per_mb + worker_per_mb) / e)``: the workers' start and the first pieces'
    latency, then whichever of the parent (inflate, cut, send, merge), the workers
    (decode, columns, pickling) or the CPUs' capacity binds. Parallel is chosen only
    when it is predicted at least ``margin`` faster. Figures: ``benchmarks/RESULTS.md``
    (``benchmarks/bench_read_model.py`` measures the CPU ratios).

    Attributes:
        parent_per_mb: the parent's CPU per MB in a parallel read, over the serial
            read's CPU per MB.
        worker_per_mb: all workers' CPU per MB, over the serial read's CPU per MB.
        start_mb: the start (server, workers' imports) and the wait for the first
            pieces, as MB of serial read.
        margin: the predicted gain required (0.1: parallel must be predicted at least
            10 % faster).
    """

    __slots__ = ("margin", "parent_per_mb", "start_mb", "worker_per_mb")

    def __init__(
        self,
        parent_per_mb: float = 0.37,
        worker_per_mb: float = 1.05,
        start_mb: float = 62.0,
        margin: float = 0.10,
    ) -> None:
        self.parent_per_mb = parent_per_mb
        self.worker_per_mb = worker_per_mb
        self.start_mb = start_mb
        self.margin = margin


#: Workers started from the forkserver (a fresh interpreter importing numpy, msgspec and
#: the reader first): the start is most of a second on a small machine.
DEFAULT_COSTS = ReadCosts()
#: Workers forked from this process ahead of the read (:func:`prestart_pool`), where they
#: share its imports: the start is the fork and the first pieces' latency only.
FORKED_COSTS = ReadCosts(start_mb=FORKED_START_MB)


class ReadPlan:
    """A read's choice: ``workers`` decode processes (0: serial) and why, in words."""

    __slots__ = ("reason", "workers")

    def __init__(self, workers: int, reason: str) -> None:
        self.workers = workers
        self.reason = reason

    def __repr__(self) -> str:
        return f"ReadPlan(workers={self.workers}, reason={self.reason!r})"


def _cgroup_quota() -> float | None:
    """The cgroup CPU quota in CPUs (v2 ``cpu.max``, else v1 ``cfs_quota_us``), ``None``
    when there is none or it cannot be read. Raises nothing."""
    try:
        with open(CGROUP_V2_CPU_MAX, encoding="ascii") as fh:
            quota, _, period = fh.read().strip().partition(" ")
        if quota == "max":
            return None
        return int(quota) / int(period or "100000")
    except (OSError, ValueError, ZeroDivisionError):
        pass
    try:
        with open(CGROUP_V1_QUOTA, encoding="ascii") as fh:
            q = int(fh.read().strip())
        with open(CGROUP_V1_PERIOD, encoding="ascii") as fh:
            per = int(fh.read().strip())
        return q / per if q > 0 and per > 0 else None
    except (OSError, ValueError):
        return None


#: The kernel's counts of runnable tasks (4th field: ``running/total``).
PROC_LOADAVG = "/proc/loadavg"
#: This process's threads (``/proc/self/task/TID/stat``: the state after the name).
PROC_SELF_TASKS = "/proc/self/task"
#: Samples of the runnable count taken by :func:`load_now` (their median is the load).
LOAD_SAMPLES = 5


def _running_threads_here() -> int:
    """Threads of this process in state ``R`` (running or runnable), at least 1 (the
    calling thread). Raises ``OSError`` where ``/proc`` has no task list."""
    running = 0
    for tid in os.listdir(PROC_SELF_TASKS):
        try:
            with open(f"{PROC_SELF_TASKS}/{tid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # the thread ended
            continue
        end = stat.rfind(b")")  # the name may hold spaces and ")"
        running += stat[end + 2 : end + 3] == b"R"
    return max(1, running)


def _running_elsewhere() -> int:
    """Runnable tasks of other processes now: the kernel's running count
    (``/proc/loadavg``) less this process's running threads. Raises ``OSError`` or
    ``ValueError`` where ``/proc`` cannot say."""
    with open(PROC_LOADAVG, "rb") as fh:
        running = int(fh.read().split()[3].split(b"/")[0])
    return max(0, running - _running_threads_here())


def load_now() -> float:
    """The CPUs other processes take now: the median of :data:`LOAD_SAMPLES` counts of
    their runnable tasks (:func:`_running_elsewhere`, about 1 ms apart); where ``/proc``
    cannot say, the 1-minute load average (``os.getloadavg``; ``0.0`` where the system
    has none). Raises nothing.

    Not the load average alone: it trails by a minute, so it still holds the work of a
    command that just ended (the previous ``report`` of a script, a test run) and misses
    one that just started. A count is the machine's, not the CPUs of this process's
    affinity (a pinned process is charged with the others' work): it errs towards one
    process."""
    import time

    try:
        counts = []
        for i in range(LOAD_SAMPLES):
            if i:
                time.sleep(0.001)
            counts.append(_running_elsewhere())
        return float(sorted(counts)[LOAD_SAMPLES // 2])
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


#: Most cores ``$KINETO_INSIGHTS_READ_WORKERS`` may ask for: a process each, and more
#: processes than CPUs only take turns (``=1000`` forked 1,000 workers on 2 CPUs and
#: took 8x the time; ``=2147483648`` overflowed a semaphore's C int).
MAX_ENV_CORES = 64


def env_cores() -> int | None:
    """``$KINETO_INSIGHTS_READ_WORKERS`` as cores: ``None`` unset or empty, 1 when it is
    not a number, at most :data:`MAX_ENV_CORES`."""
    env = os.environ.get(WORKERS_ENV, "").strip()
    if not env:
        return None
    try:
        return min(int(env), MAX_ENV_CORES)
    except ValueError:
        return 1


def machine_now() -> Machine:
    """This process's :class:`Machine` now (affinity, cgroup quota, load, the variable).
    Raises nothing."""
    try:
        affinity = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        affinity = max(1, os.cpu_count() or 1)
    env, text = env_cores(), os.environ.get(WORKERS_ENV, "").strip()[:40]
    shown = text if env is not None and text != str(env) else None
    return Machine(affinity, _cgroup_quota(), load_now(), env, shown)


def cpus_of(machine: Machine) -> float:
    """CPUs ``machine`` lets this process use: its affinity, bounded by the cgroup quota
    (may be fractional, ``0.5``)."""
    cpus = float(machine.affinity)
    if machine.quota is not None:
        cpus = min(cpus, machine.quota)
    return cpus


def usable_cores() -> int:
    """Whole CPUs this process may use (affinity, bounded by the cgroup quota), at
    least 1."""
    return max(1, int(cpus_of(machine_now())))


def pool_cores(machine: Machine) -> tuple[int, str]:
    """Cores a pool of worker processes may use for ``machine`` (0: start none) and why.

    ``$KINETO_INSIGHTS_READ_WORKERS`` set: that many (``<= 1``: none), the user's word.
    Otherwise the whole usable CPUs (:func:`cpus_of`), none when fewer than 2 or when the
    load is at least the usable CPUs (the other cores are taken: workers would
    only add their start and transfers to this command's CPU)."""
    if machine.env is not None:
        text = machine.env_text
        said = f"{WORKERS_ENV}={machine.env}" + (f" (set to {text!r})" if text else "")
        if machine.env < 2:
            return 0, f"{said}: one process"
        return machine.env, said
    cpus = cpus_of(machine)
    if cpus < 2:
        quota = f" (cgroup quota {machine.quota:g} CPU)" if machine.quota is not None else ""
        return 0, f"{cpus:g} usable CPU{quota}: one process"
    if machine.load >= cpus:
        return 0, f"load {machine.load:.1f} >= {cpus:g} usable CPUs: one process"
    return int(cpus), f"{int(cpus)} usable CPUs, load {machine.load:.1f}"


def _small_file_plan(json_bytes: int) -> ReadPlan | None:
    """One process for a file under :data:`PARALLEL_MIN_JSON_BYTES`, whatever the machine
    (``None``: not such a file)."""
    if json_bytes >= PARALLEL_MIN_JSON_BYTES:
        return None
    return ReadPlan(0, f"a file under {PARALLEL_MIN_JSON_BYTES / 1e6:.0f} MB of JSON: one process")


def plan_read(json_bytes: int, machine: Machine, costs: ReadCosts = DEFAULT_COSTS) -> ReadPlan:
    """Worker processes for a read of ``json_bytes`` (estimated) uncompressed bytes on
    ``machine``, with the reason: serial unless :func:`pool_cores` allows a pool, the
    file is at least :data:`PARALLEL_MIN_JSON_BYTES`, and, without
    ``$KINETO_INSIGHTS_READ_WORKERS``, the cost model ``costs`` predicts the parallel
    read at least ``costs.margin`` faster than one process on the CPUs free now
    (usable CPUs less the load, at least 1). Pure: no system call."""
    if small := _small_file_plan(json_bytes):
        return small
    cores, why = pool_cores(machine)
    mb = json_bytes / 1e6
    if not cores:
        return ReadPlan(0, f"{mb:.0f} MB, {why}")
    if machine.env is not None:
        return ReadPlan(cores, f"{why}: {cores} workers")
    free = max(1.0, min(float(cores), cpus_of(machine) - machine.load))
    per_mb = max(
        costs.parent_per_mb,
        costs.worker_per_mb / cores,
        (costs.parent_per_mb + costs.worker_per_mb) / free,
    )
    ratio = (costs.start_mb + mb * per_mb) / mb
    said = (
        f"{why}: {cores} workers would read {mb:.0f} MB in {ratio:.2f}x the time of one "
        f"process ({free:.1f} CPUs free)"
    )
    if ratio * (1.0 + costs.margin) >= 1.0:
        return ReadPlan(0, f"{said}: one process")
    return ReadPlan(cores, f"{said}: {cores} workers")


#: The reasons of this process's choices so far (:func:`plan_for`, :func:`pool_workers`),
#: in order, each once: what ``report --verbose`` and ``doctor`` print.
DECISIONS: list[str] = []


def note(reason: str) -> None:
    """Add ``reason`` to :data:`DECISIONS` unless it is there."""
    if reason not in DECISIONS:
        DECISIONS.append(reason)


#: :func:`warm_up`'s plan (estimated size, plan), the next :func:`plan_for`'s: made anew
#: it could differ (the load moved) and leave the pool forked for it unused.
_warm_plan: tuple[int, ReadPlan] | None = None


def plan_for(estimated_json_bytes: int, requested: int | None = None) -> ReadPlan:
    """:func:`plan_read` for this process now (:func:`machine_now`), with
    ``requested`` (``read_trace(workers=...)``) winning when given: ``<= 1`` serial,
    ``n >= 2`` ``n`` workers whatever the size (tests force small files through the
    workers this way); and serial in a process that cannot have children (a daemonic
    ``multiprocessing`` process or any ``multiprocessing`` child). The first call after
    :func:`warm_up`, for a file of the size it planned for, returns its plan. Raises
    ``RuntimeError`` in a worker that imports the main module
    (:func:`_refuse_while_bootstrapping`)."""
    global _warm_plan
    _refuse_while_bootstrapping()
    if requested is not None:
        return ReadPlan(requested if requested >= 2 else 0, f"workers={requested} requested")
    warm, _warm_plan = _warm_plan, None
    if warm is not None and warm[0] == estimated_json_bytes:
        return warm[1]  # the warm-up's plan for this file, said once
    # not for a small file: the load takes 4 ms, the costs import multiprocessing
    plan = _small_file_plan(estimated_json_bytes) or plan_read(
        estimated_json_bytes, machine_now(), costs_now()
    )
    if plan.workers:
        import multiprocessing as mp

        if mp.current_process().daemon:  # daemonic processes cannot have children
            plan = ReadPlan(0, "a daemonic process cannot have children: one process")
        elif mp.parent_process() is not None:  # a multiprocessing child: never nest pools
            plan = ReadPlan(0, "a worker process: one process")
    note(f"read: {plan.reason}")
    return plan


def costs_now() -> ReadCosts:
    """The cost model of a read started here now: :data:`FORKED_COSTS` where a pool forked
    ahead waits or workers may be forked now (:func:`can_fork_now`), else
    :data:`DEFAULT_COSTS` (the forkserver's start). Raises nothing."""
    return FORKED_COSTS if _prestarted is not None or can_fork_now() else DEFAULT_COSTS


def can_fork_now() -> bool:
    """Whether worker processes may be forked from this process now: the system has
    ``fork`` and this process runs one thread (``fork`` of a threaded process may leave a
    lock held in the child for ever). Raises nothing."""
    import threading

    if threading.active_count() != 1 or not hasattr(os, "fork"):
        return False
    import multiprocessing as mp

    return "fork" in mp.get_all_start_methods()


def read_workers(estimated_json_bytes: int, requested: int | None = None) -> int:
    """Worker processes for a read of about ``estimated_json_bytes`` uncompressed bytes;
    0 = read serially (:func:`plan_for`, which says why)."""
    return plan_for(estimated_json_bytes, requested).workers


def pool_workers() -> int:
    """Cores a pool of whole-file work may use in this process now (0: none): the
    :func:`pool_cores` of :func:`machine_now`, and none in a process that cannot have
    children (:func:`plan_for`'s rules)."""
    _refuse_while_bootstrapping()
    cores, why = pool_cores(machine_now())
    if cores:
        import multiprocessing as mp

        if mp.current_process().daemon or mp.parent_process() is not None:
            cores, why = 0, "a worker process: no pool"
    note(f"pool: {why}")
    return cores


#: Largest ratio of a gzip member's uncompressed to stored size (deflate's limit, about
#: 1032:1): an ``ISIZE`` trailer beyond it is not the size (a file over 4 GiB wraps it).
MAX_DEFLATE_RATIO = 1032


def estimate_json_bytes(path: str) -> int:
    """Uncompressed bytes of the local file ``path``: a gzip file's ``ISIZE`` trailer
    (its size modulo 4 GiB) when plausible, else :data:`GZIP_RATIO_ESTIMATE` times its
    stored size; a plain file's size; 0 when it cannot be read (or is no regular file: a
    fifo's open would block). Raises nothing."""
    import stat

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return 0
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if fh.read(2) != b"\x1f\x8b":
                return size
            if size >= 20:
                fh.seek(-4, os.SEEK_END)
                isize = int.from_bytes(fh.read(4), "little")
                if size <= isize <= size * MAX_DEFLATE_RATIO:
                    return isize
    except OSError:
        return 0
    return size * GZIP_RATIO_ESTIMATE


#: Raised in a worker process that reads a large trace while it imports the main module.
BOOTSTRAP_MESSAGE = (
    "tb_kineto_insights: a trace is being read while a decode worker process imports the "
    'main script: guard the script\'s top level with `if __name__ == "__main__":` (the '
    "workers import the main module, as with any multiprocessing), or set "
    f"{WORKERS_ENV}=1. The read goes on serially in the parent process."
)


def _refuse_while_bootstrapping() -> None:
    """Raise ``RuntimeError`` (:data:`BOOTSTRAP_MESSAGE`) in a worker process that is still
    importing the main module: an unguarded script that reads a large trace would
    otherwise run whole again in every decode worker. The worker then fails at its start,
    the pool breaks, and the parent reads serially (``reader._collect``), so the caller
    gets the right result, this message on stderr and the time of a serial read.
    ``_inheriting`` is the flag multiprocessing itself tests for its own bootstrapping
    error (``multiprocessing.process``); multiprocessing is looked up, not imported: a
    process that never imported it is no worker."""
    mp = sys.modules.get("multiprocessing")
    if mp is not None and getattr(mp.current_process(), "_inheriting", False):
        raise RuntimeError(BOOTSTRAP_MESSAGE)


def _context(preload: tuple[str, ...] = ()) -> Any:
    """The multiprocessing context of the decode workers: ``forkserver`` (its server
    preloads the reader, and the command line when it is loaded, so that a worker forked
    from it only imports its main module, which is then already loaded), else
    ``spawn``. ``preload``: more modules for the server to import when it starts here
    (the analysis, for a pool that summarises whole files: ``store/parallel_summaries.py``);
    a server already running keeps what it preloaded."""
    import multiprocessing as mp

    extra = [name for name in preload if name]
    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx: Any = mp.get_context(method)
    if method == "forkserver":
        # the reader (and cli, which the console script, the workers' main module,
        # imports), not the main module itself (the default), so that an unguarded
        # script does not run in the server, where no bootstrapping flag stops it
        # and numpy.ma (numpy >= 2.3 imports it at the first plain np.unique, which
        # every worker's timestamp parser calls: imported there, each worker pays it)
        names = ["tb_kineto_insights.trace.reader", "numpy.ma"]
        if "tb_kineto_insights.cli.main" in sys.modules:
            names.append("tb_kineto_insights.cli.main")
        ctx.set_forkserver_preload([*names, *extra])
    return ctx


def start_server() -> None:
    """Start the forkserver (with what :func:`_context` set it to preload) unless it
    runs, with SIGINT ignored while it is spawned when this is the main thread: the
    server inherits the ignored SIGINT (Python installs its KeyboardInterrupt handler
    only over the default one), so a Ctrl-C while it imports its preload does not
    print a traceback of it under the command's "interrupted" (the command ends its
    workers itself: ``cli/budget.py``). A Ctrl-C within the spawn's few milliseconds
    is lost. Raises what ``ensure_running`` raises."""
    import signal
    import threading
    from multiprocessing import forkserver

    from tb_kineto_insights.trace.processes import quiet_tracker

    quiet_tracker()  # the server starts the resource tracker: see trace/processes.py
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        forkserver.ensure_running()
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


#: The pool :func:`prestart_pool` forked ahead (its number of processes, the pool), for
#: the next :func:`start_pool` of that size.
_prestarted: tuple[int, Executor] | None = None


def _forked_worker_start(parent: int, names: tuple[str, ...]) -> None:
    """A forked worker's first work. It ends with its parent (``parent``, the command):
    on Linux ``PR_SET_PDEATHSIG`` (``prctl(2)``) sends it SIGKILL when the parent dies,
    as a worker blocked on its task queue never notices otherwise and would keep the
    command's standard output and error open (a reader of them waited for ever); it
    ignores Ctrl-C, which the command handles for it (``cli/budget.py``:
    ``stop_on_interrupt``), and ends silently on ``SIGTERM``; then it imports ``names``
    (as the forkserver preloads them; :func:`prestart_pool` may have imported them
    before the fork already)."""
    import importlib
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # not the command's handler (it prints "terminated" and ends the command): a
    # SIGTERM to the process group printed it once per process
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        import contextlib
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl
            os._exit(1)
    for name in names:
        importlib.import_module(name)


def _import_before_fork(names: tuple[str, ...]) -> bool:
    """Import ``names`` here and move every object so far out of the collector's reach
    (``gc.freeze``), before a fork: the workers then share the imports' pages with this
    process instead of importing again: less memory for the process tree and one import
    of the analysis less (``benchmarks/RESULTS.md``).
    The freeze is what the ``gc`` documentation advises before a fork: a collection in a
    worker would otherwise write to every object's header and copy its page. This
    process imports these modules anyway: it analyses files too.

    Only when the imports start no thread: numpy's OpenBLAS starts its threads at import
    unless ``OPENBLAS_NUM_THREADS=1`` (the command line sets it, unless the user set
    another value), and a fork beside a running thread may leave a lock held in the
    child. Returns whether it imported; when not, each worker imports after the fork."""
    if "numpy" not in sys.modules and os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        return False
    import gc
    import importlib

    for name in names:
        importlib.import_module(name)
    gc.freeze()
    return True


def prestart_pool(workers: int, preload: tuple[str, ...] = ()) -> bool:
    """Import the reader, ``numpy.ma`` and ``preload`` here (when that starts no thread:
    :func:`_import_before_fork`) and then fork ``workers`` worker processes, which share
    those imports, for the next :func:`start_pool` asking for ``workers`` processes;
    returns whether it did.
    Raises nothing.

    For a command that is about to read the files of a log directory at once
    (:func:`tb_kineto_insights.store.parallel_summaries.prestart`), or one large file
    (:func:`warm_up`).
    Against :func:`warm_up_server`, a forked pool has no server process and no
    ``multiprocessing`` resource tracker, two processes less in the tree's memory
    (``benchmarks/RESULTS.md``).
    Only where ``fork`` is safe: a system that has it, and a process that runs one
    thread (``fork`` of a threaded process may leave a lock held in the child for ever),
    so a command calls it before any thread starts (the command line: before its time
    budget's watchdog, ``cli/budget.py``); and only with more than one usable core and
    worker processes allowed (:func:`read_workers`)."""
    global _prestarted
    release_prestarted()
    try:
        if workers < 1 or not pool_workers():
            return False
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        if not can_fork_now():
            return False
        names = ("tb_kineto_insights.trace.reader", "numpy.ma", *preload)
        _import_before_fork(names)
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=mp.get_context("fork"),
            initializer=_forked_worker_start,
            initargs=(os.getpid(), names),
        )
        # the first task forks every worker, here, from this one thread (a pool of the
        # fork context starts all its processes at its first task, before its own thread)
        pool.submit(int)
    except (OSError, ValueError, RuntimeError, AssertionError, ImportError):
        return False
    _prestarted = (workers, pool)
    return True


def release_prestarted() -> None:
    """Shut down a pool :func:`prestart_pool` forked that no :func:`start_pool` took
    (its workers end after their imports). Raises nothing."""
    global _prestarted
    if _prestarted is not None:
        _, pool = _prestarted
        _prestarted = None
        pool.shutdown(wait=False, cancel_futures=True)


def start_pool(workers: int, preload: tuple[str, ...] = ()) -> Executor | None:
    """A process pool of ``workers``: the one :func:`prestart_pool` forked when it has that
    many processes, else a new one (forkserver, else spawn); ``None`` when worker
    processes cannot be started here (the read is then serial). ``preload``: as
    :func:`_context`. A pool forked ahead of another size is shut down. Its workers end
    with this process, however it ends (:func:`~.processes.watch_owner`), and its
    semaphores are unlinked then by the resource tracker (:mod:`.processes`)."""
    global _prestarted
    from concurrent.futures import ProcessPoolExecutor

    if _prestarted is not None and _prestarted[0] == workers:
        pool, _prestarted = _prestarted[1], None
        return pool
    release_prestarted()
    from tb_kineto_insights.trace.processes import quiet_tracker, watch_owner

    try:
        ctx = _context(preload)
        quiet_tracker()
        if ctx.get_start_method() == "forkserver":
            start_server()  # here, not from the thread that first submits
        # each worker ends when this process does (a SIGKILL too): trace/processes.py
        return ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=watch_owner,
            initargs=(os.getpid(),),
        )
    except (OSError, ValueError, RuntimeError, AssertionError):
        return None


def warm_up_server(preload: tuple[str, ...] = ()) -> bool:
    """Start the forkserver now (with ``preload``, as :func:`_context`) when this process
    may have worker processes and more than one core; returns whether it did. For a
    command that will read several files at once (a log directory): the server's start
    overlaps the parent's imports and discovery. Raises nothing."""
    try:
        if not pool_workers():
            return False
        ctx = _context(preload)
        if ctx.get_start_method() != "forkserver":
            return False
        start_server()
    except (OSError, ValueError, RuntimeError, AssertionError):
        return False
    return True


def warm_up(path: str) -> bool:
    """Start the read's workers now when a read of the local file ``path`` will use worker
    processes (:func:`read_workers` of its estimated size); returns whether it did.

    Forked from this process (:func:`prestart_pool`) while it runs one thread: they
    share its imports, and the read that follows takes them (:func:`start_pool`). Else
    the forkserver: a fresh interpreter that imports numpy, msgspec and the reader before
    it can fork a worker, a large part of a second on a small machine, during which a
    read that starts it waits for its first worker (a timeline of a GPT ``report`` is in
    ``benchmarks/RESULTS.md``). The command line calls this before it imports the
    analysis, so that the server's start overlaps the parent's own imports. The read of
    the file takes this plan (:data:`_warm_plan`) unless no pool was forked here. Raises
    nothing: a file that cannot be read or a server that cannot start only means no
    warm-up."""
    estimated = estimate_json_bytes(path)
    if not estimated:  # not a regular file (a folder: the pool's business), or unreadable
        return False
    global _warm_plan
    try:
        _warm_plan = (estimated, plan_for(estimated))
        workers = _warm_plan[1].workers
        if not workers:
            return False
        if prestart_pool(workers):  # forked here: no server to start
            return True
        _warm_plan = None  # none forked: the read plans again, at the server's costs
        ctx = _context()
        if ctx.get_start_method() != "forkserver":
            return False
        start_server()
    except (OSError, ValueError, RuntimeError, AssertionError):
        return False
    return True
