"""Worker processes that read traces: one load at a time each, killed on a deadline.

A worker is a plain ``python -c`` child of this interpreter (``sys.executable``) that
reads pickled :class:`LoadTask` frames on its standard input and answers
:class:`LoadOutcome` frames (a cache entry, or what went wrong) on its standard output; it
is reused for the next file and exits when idle. :class:`WorkerSlot` owns one such process:
it starts it, waits for it to be ready (its own start-up is not part of a load's
deadline), sends one task and waits for the answer until the task's deadline
(:class:`LoadDeadline`), past which it kills the process (busy, stuck or stopped with
``SIGSTOP`` alike) and the load is an error of kind ``timeout``. A process that dies
(killed for memory) fails only the task it was running.

A worker is its own session and process group, together with the decode processes of a
parallel read (``trace/parallel.py``) that it starts: the group is killed at once at the
deadline, when the worker dies, and when the loader stops it; the decode processes get
no copy of the worker's pipes (:func:`_private_pipes`), so the loader sees EOF as soon
as the worker dies, and a watch thread also polls the worker's exit. A worker whose
parent dies (TensorBoard killed or stopped by SIGTERM) kills its group
(:func:`_die_with_parent`). The same watch caps a load's memory (:class:`LoadMemoryCap`):
when the resident memory of the worker and its decode processes passes the cap, the
group is killed and the load is an error of kind ``memory`` naming the cap; the other
slots' loads go on, and the next load gets a fresh worker.

Why not a library pool: ``concurrent.futures.ProcessPoolExecutor`` cannot cancel a
running task, and a worker killed under it breaks the whole pool (``BrokenProcessPool``
for every pending future); ``loky``'s reusable executor has the same unit of failure
(``kill_workers`` / ``TerminatedWorkerError`` take down every worker) and is not a
dependency. Both also start workers with ``multiprocessing`` (spawn/forkserver), which
re-imports ``__main__`` in the child: a program that embeds TensorBoard without an
``if __name__ == "__main__"`` guard would start itself again. What is needed here is
one process per slot that can be killed alone, on a per-task deadline, with the loads
of the other slots going on: about 200 lines of ``subprocess`` and pipes.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import math
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.timeline_format import encode_store
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.store.cache import DiskCache, Identity, entry_bytes
from tb_kineto_insights.store.cached_summaries import changed_while_read
from tb_kineto_insights.store.settings import seconds_from_env
from tb_kineto_insights.summary import (
    FAILED_INTERNAL,
    FAILED_IO,
    FAILED_TRACE,
    SPAN_ERRORS,
    SpanFailed,
    span_failed,
)
from tb_kineto_insights.trace.confine import Rule, confined
from tb_kineto_insights.trace.processes import descendants, group_members, kill_all
from tb_kineto_insights.trace.source import ProgressCallback, reading_progress

logger = logging.getLogger(__name__)

#: Environment variable: how many worker processes load traces (0: a thread instead).
WORKERS_ENV = "KINETO_INSIGHTS_WORKERS"
#: At most this many worker processes by default: one per usable core up to this (each
#: worker holds one parsed trace at a time).
DEFAULT_WORKERS = 4
#: Environment variables: a load's deadline, base seconds and seconds per MiB of file.
LOAD_TIMEOUT_ENV = "KINETO_INSIGHTS_LOAD_TIMEOUT_S"
LOAD_TIMEOUT_PER_MIB_ENV = "KINETO_INSIGHTS_LOAD_TIMEOUT_S_PER_MIB"
DEFAULT_LOAD_TIMEOUT_S = 120.0
DEFAULT_LOAD_TIMEOUT_S_PER_MIB = 2.0
MIB = 1024**2

#: Error kinds: ``trace`` (the reader's TraceError about the file's content: the file is
#: bad, remembered on disk until it changes), ``io`` (the file could not be opened or
#: read, or was refused: missing, permission, storage error, outside the log directory),
#: ``internal`` (a bug in the analysis), ``worker`` (the worker process died, e.g. killed
#: for memory) and ``timeout`` (the load passed its deadline and its worker was killed);
#: all but ``trace`` are kept in memory only and retried when the span is asked for again.
ERROR_TRACE, ERROR_INTERNAL, ERROR_WORKER = FAILED_TRACE, FAILED_INTERNAL, "worker"
ERROR_IO, ERROR_TIMEOUT = FAILED_IO, "timeout"
#: ... and ``memory``: the load's worker passed its memory cap and was killed (kept in
#: memory only and retried after the back-off, as ``timeout``).
ERROR_MEMORY = "memory"

#: Environment variable: a load's memory cap, MiB of resident memory of its worker
#: process and decode processes together; 0: no cap.
LOAD_MAX_RSS_ENV = "KINETO_INSIGHTS_LOAD_MAX_RSS_MIB"
#: Default cap: this share of the machine's physical memory for one load.
DEFAULT_LOAD_MAX_RSS_FRACTION = 0.5


def default_workers() -> int:
    """One worker process per usable core (``sched_getaffinity``), at most
    :data:`DEFAULT_WORKERS`."""
    from tb_kineto_insights.trace.parallel import usable_cores

    return max(1, min(DEFAULT_WORKERS, usable_cores()))


def workers_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``KINETO_INSIGHTS_WORKERS`` as an integer ≥ 0; the default (one per core, at most
    4) when unset, and with a warning when it is not such an integer."""
    raw = (os.environ if environ is None else environ).get(WORKERS_ENV)
    if raw is None or not raw.strip():
        return default_workers()
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        logger.warning(
            "%s=%r is not a whole number >= 0; using %d", WORKERS_ENV, raw, default_workers()
        )
        return default_workers()
    return value


@dataclass(frozen=True)
class LoadDeadline:
    """How long one load in a worker process may take: ``base_s + per_mib_s × (stored
    file size in MiB)`` seconds (compressed size for gzip). Past it the worker process
    is killed (also when it is stopped, ``SIGSTOP``, or stuck) and replaced, and the
    span is an error of kind ``timeout`` that a request retries after the
    loader's back-off (``service/loader.py``).

    The defaults (120 s + 2 s per MiB) leave a wide margin over real loads: a clean
    trace reads at tens of MiB of stored file per second, and a pathological input (a
    625 KB gzip of 27.7 MB of JSON) is to read within 3x of a clean file of the same
    size. A total of 0 or less means no deadline.
    """

    base_s: float = DEFAULT_LOAD_TIMEOUT_S
    per_mib_s: float = DEFAULT_LOAD_TIMEOUT_S_PER_MIB

    def for_size(self, size_bytes: int) -> float | None:
        """The deadline in seconds for a file of ``size_bytes``, or None (no deadline)."""
        total = self.base_s + self.per_mib_s * max(0, size_bytes) / MIB
        return total if math.isfinite(total) and total > 0 else None


def load_deadline_from_env(environ: Mapping[str, str] | None = None) -> LoadDeadline:
    """``KINETO_INSIGHTS_LOAD_TIMEOUT_S`` and ``KINETO_INSIGHTS_LOAD_TIMEOUT_S_PER_MIB``
    (finite numbers >= 0; each defaults, with a warning when it is not such a number)."""
    env = os.environ if environ is None else environ
    return LoadDeadline(
        seconds_from_env(env, LOAD_TIMEOUT_ENV, DEFAULT_LOAD_TIMEOUT_S),
        seconds_from_env(env, LOAD_TIMEOUT_PER_MIB_ENV, DEFAULT_LOAD_TIMEOUT_S_PER_MIB),
    )


def physical_memory_bytes() -> int | None:
    """The machine's physical memory (``sysconf``), None where it cannot be read."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class LoadMemoryCap:
    """How much memory one load in a worker process may hold: ``max_rss_mib`` MiB of
    resident memory of the worker and its decode processes together (summed, so pages
    a fork shares count once per process: a cap, not an accounting); 0 or less: none.

    Why: a trace that makes a worker grow (a 2 GB-JSON trace takes a worker to several
    GB: ``benchmarks/RESULTS.md``) must fail alone, with an error that names
    the cap, before the kernel's OOM killer picks a process, which may be TensorBoard.
    The default, :data:`DEFAULT_LOAD_MAX_RSS_FRACTION` of physical memory, stops only
    loads that would starve the machine; set it lower on a shared host.
    """

    max_rss_mib: float = 0.0

    @property
    def max_rss_bytes(self) -> int | None:
        """The cap in bytes, or None (no cap)."""
        if not math.isfinite(self.max_rss_mib) or self.max_rss_mib <= 0:
            return None
        return int(self.max_rss_mib * MIB)


def default_load_memory_cap() -> LoadMemoryCap:
    """:data:`DEFAULT_LOAD_MAX_RSS_FRACTION` of physical memory (none where unknown)."""
    total = physical_memory_bytes()
    return LoadMemoryCap(0.0 if not total else total * DEFAULT_LOAD_MAX_RSS_FRACTION / MIB)


def load_memory_cap_from_env(environ: Mapping[str, str] | None = None) -> LoadMemoryCap:
    """``KINETO_INSIGHTS_LOAD_MAX_RSS_MIB`` (a finite number >= 0, 0: no cap); the
    default (:func:`default_load_memory_cap`) when unset, with a warning when it is
    not such a number."""
    env = os.environ if environ is None else environ
    raw = env.get(LOAD_MAX_RSS_ENV)
    if raw is None or not raw.strip():
        return default_load_memory_cap()
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        default = default_load_memory_cap()
        logger.warning(
            "%s=%r is not a number of MiB >= 0; using %.0f",
            LOAD_MAX_RSS_ENV,
            raw,
            default.max_rss_mib,
        )
        return default
    return LoadMemoryCap(value)


def _rss_bytes(pid: int) -> int:
    """Resident memory of one process (``/proc/PID/statm``), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and every process below it (a load worker and the
    forkserver, resource tracker and pool of its parallel read), summed, in bytes; 0
    without ``/proc``."""
    return sum(_rss_bytes(p) for p in [pid, *descendants(pid)])


# --------------------------------------------------------------------------- one load


@dataclass(frozen=True)
class LoadTask:
    """One span to load into the cache: the file, the analysis settings, where the cache
    is, and the deadline and memory cap the load runs under (sent pickled to a worker
    process)."""

    ident: Identity
    max_json_bytes: int
    thresholds: Thresholds
    settings: str
    cache_folder: str | None  # the cache's location: a path or an fsspec URL
    summarize: Callable[..., Any]
    deadline_s: float | None = None  # seconds the load may take (worker processes)
    key: str | None = None  # the entry key (computed once, by the loading thread)
    max_rss_bytes: int | None = None  # memory the load may hold (worker processes)
    # cores the read may use for decode processes (the loader's one budget); None: any
    read_workers: int | None = None


@dataclass(frozen=True)
class LoadOutcome:
    """What one load produced: ``data`` is a cache entry (summary or reader error);
    otherwise ``kind`` and ``message`` say what went wrong."""

    data: bytes | None
    kind: str | None
    message: str | None
    elapsed_s: float
    cache_warning: str | None = None
    from_cache: bool = False  # another process had stored it meanwhile: nothing parsed


def _summarize_confined(task: LoadTask) -> Any:
    """``task.summarize`` of the file, which must still lie inside ``ident.root`` and be
    the file discovery listed when it is opened (see ``trace/confine.py``)."""
    ident = task.ident
    call = functools.partial(
        _within_read_budget,
        task.read_workers,
        task.summarize,
        ident.path,
        max_json_bytes=task.max_json_bytes,
        thresholds=task.thresholds,
    )
    if not ident.root:
        return call()
    with confined(ident.path, Rule(ident.root, ident.file_identity())):
        return call()


def _within_read_budget(
    read_workers: int | None, summarize: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """``summarize(*args, **kwargs)`` with ``$KINETO_INSIGHTS_READ_WORKERS`` (the cores one
    read may use, ``trace/parallel.py``) at most ``read_workers`` meanwhile: a worker
    process's large read starts no more decode processes than the loader's budget gives
    it (a worker process reads one file at a time, so the variable is its own)."""
    if read_workers is None:
        return summarize(*args, **kwargs)
    from tb_kineto_insights.trace.parallel import WORKERS_ENV as READ_WORKERS_ENV

    before = os.environ.get(READ_WORKERS_ENV)
    allowed = read_workers
    if before is not None and before.strip():
        with contextlib.suppress(ValueError):
            allowed = min(allowed, int(before))
    os.environ[READ_WORKERS_ENV] = str(max(1, allowed))
    try:
        return summarize(*args, **kwargs)
    finally:
        if before is None:
            os.environ.pop(READ_WORKERS_ENV, None)
        else:
            os.environ[READ_WORKERS_ENV] = before


def _run_task(task: LoadTask, progress: ProgressCallback | None = None) -> LoadOutcome:
    """Read and analyse one file, store the result on disk; never raises. Only verdicts
    about the file's content are stored: an I/O error (missing file, permission, storage
    error, a refused open) is answered but not stored, so the next request retries.
    ``progress(bytes_read, file_bytes)`` is told how much of the stored file is read
    (see ``trace/source.py``)."""
    started = time.perf_counter()
    failed: SpanFailed | None = None
    if task.cache_folder is not None and task.key is not None:
        # Another process sharing the cache may have finished it since it was queued.
        with contextlib.suppress(Exception):
            done = DiskCache(task.cache_folder, task.settings).load_entry(task.ident, task.key)
            if done is not None:
                return LoadOutcome(done, None, None, time.perf_counter() - started, from_cache=True)
    try:
        timeline: bytes | None = None
        try:
            with reading_progress(progress):
                summary = _summarize_confined(task)
            if isinstance(summary, tuple):  # (summary, timeline store)
                summary, store = summary
                timeline = encode_store(store)
        except SPAN_ERRORS as exc:
            failed = span_failed(exc, task.ident.path)
            if not failed.cacheable:  # an I/O error or a bug: answered, not stored
                return _failed_outcome(failed, task, time.perf_counter() - started)
            summary = None
        elapsed = time.perf_counter() - started
        changed = changed_while_read(task.ident)
        if changed is not None:
            return LoadOutcome(None, ERROR_IO, changed, elapsed)
        data = entry_bytes(
            task.ident,
            task.settings,
            summary=summary,
            error=failed,
            elapsed_s=elapsed,
            key=task.key,
            timeline=timeline,
        )
    except Exception as exc:  # a bug in the analysis or the cache, or out of memory
        return _failed_outcome(
            span_failed(exc, task.ident.path), task, time.perf_counter() - started
        )
    warning = None
    if task.cache_folder is not None:
        try:
            DiskCache(task.cache_folder, task.settings).store_entry(
                task.ident,
                data,
                is_error=failed is not None,
                key=task.key,
                summary=summary if isinstance(summary, Summary) else None,
            )
        except (OSError, ValueError, ImportError) as exc:
            warning = f"cannot write the cache folder {task.cache_folder}: {exc}"
    return LoadOutcome(data, None, None, elapsed, warning)


def _execute(task: Any, progress: ProgressCallback | None) -> Any:
    """Run one task of a worker: a :class:`LoadTask`, or any task with an ``execute``
    method (``worker_calls.CallTask``: a function under a load's deadline and memory
    cap), which must never raise."""
    execute = getattr(task, "execute", None)
    return _run_task(task, progress) if execute is None else execute(progress)


def _failure(task: Any, kind: str, message: str, elapsed_s: float) -> Any:
    """The outcome of a task that did not finish in its worker (died, past its deadline
    or memory cap): the task's own kind of outcome (``task.failed``), else a
    :class:`LoadOutcome`."""
    failed = getattr(task, "failed", None)
    if failed is not None:
        return failed(kind, message, elapsed_s)
    return LoadOutcome(None, kind, message, elapsed_s)


def _failed_outcome(failed: SpanFailed, task: LoadTask, elapsed_s: float) -> LoadOutcome:
    """The outcome of a load that failed and is not stored (called while its exception
    is handled); a bug in the analysis is logged with its traceback."""
    if failed.kind == ERROR_INTERNAL:
        logger.exception("Kineto Insights: analysing %s failed", task.ident.path)
    return LoadOutcome(None, failed.kind, failed.message, elapsed_s)


_FRAME = struct.Struct("<Q")
#: The command a worker process runs (``python -c``): no ``__main__`` re-import, no
#: ``if __name__ == "__main__"`` needed in whatever program embeds TensorBoard.
_WORKER_CODE = "from tb_kineto_insights.service.worker_pool import worker_main; worker_main()"


def _write_frame(out: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_FRAME.pack(len(data)) + data)
    out.flush()


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = stream.read(size)
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_frame(stream: IO[bytes]) -> Any:
    (size,) = _FRAME.unpack(_read_exact(stream, _FRAME.size))
    return pickle.loads(_read_exact(stream, size))


#: The first frame a worker process writes, once it has imported everything.
_READY = "ready"
#: A worker's progress frame: ``(_PROGRESS, bytes_read, file_bytes)``, before the answer.
_PROGRESS = "progress"
#: Seconds between two progress frames of one load (the last one is always sent).
PROGRESS_INTERVAL_S = 0.1
#: Seconds a new worker process may take to start (import numpy, msgspec, ...).
WORKER_START_TIMEOUT_S = 120.0


def worker_main() -> None:
    """Body of a worker process: reads tasks (pickled, length-prefixed) from standard
    input, answers each on standard output, until standard input closes or a ``None``
    task arrives. Anything the analysis prints goes to standard error."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    tasks, answers = _private_pipes()
    _die_with_parent()
    # The reader and the analysis (what a task's ``summarize`` names), imported before
    # READY: the store does not import them, and their import must not count against
    # the first load's deadline.
    import tb_kineto_insights.summary  # noqa: F401

    try:
        _write_frame(answers, _READY)  # imports done: load deadlines start from here
    except OSError:
        return
    lock = threading.Lock()  # progress frames come from the reader's gunzip thread
    last = [0.0]

    def tell_progress(bytes_read: int, file_bytes: int) -> None:
        now = time.monotonic()
        if bytes_read < file_bytes and now - last[0] < PROGRESS_INTERVAL_S:
            return
        last[0] = now
        with lock, contextlib.suppress(OSError, ValueError):
            _write_frame(answers, (_PROGRESS, bytes_read, file_bytes))

    while True:
        try:
            task = _read_frame(tasks)
        except (EOFError, OSError, pickle.UnpicklingError):
            return
        if task is None:
            return
        outcome = _execute(task, tell_progress)
        try:
            with lock:
                _write_frame(answers, outcome)
        except OSError:
            return


def _private_pipes() -> tuple[IO[bytes], IO[bytes]]:
    """The task and answer pipes as private, non-inheritable copies; file descriptors 0
    and 1 become ``/dev/null`` and standard error.

    Why: the decode processes of a parallel read (``trace/parallel.py``: a forkserver,
    its resource tracker and the pool) inherit descriptors 0-2 of this process. Holding
    the loader's pipes, they would keep its read open after this process died, so the
    loader would never see EOF and the span would stay ``loading``. ``os.dup`` makes
    non-inheritable copies (PEP 446), which no child gets."""
    tasks = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    with contextlib.suppress(OSError):
        sys.stdin.close()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # anything printed goes to standard error
    sys.stdin = open(os.devnull)  # noqa: SIM115 (lives as long as the process)
    sys.stdout = sys.stderr  # keep the answer channel clean
    return tasks, answers


def _kill_own_group(signum: int, frame: Any) -> None:
    """SIGTERM in a worker process: kill its whole process group (itself and its decode
    processes) at once, but the resource tracker, which then unlinks the pool's
    semaphores and exits (``trace/processes.py``); only when it leads that group (the
    loader starts it so), never the group of whoever started it otherwise."""
    me = os.getpid()
    if os.getpgid(0) == me:
        members = [p for p in group_members(me) if p != me]
        if members:
            kill_all(members)
        else:  # no /proc: the whole group
            os.killpg(0, signal.SIGKILL)
    os.kill(me, signal.SIGKILL)


#: ``prctl`` option: the signal a process gets when its parent (thread) exits.
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask for SIGTERM when the parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``) and make
    SIGTERM kill this worker's process group: TensorBoard killed by any means (SIGKILL,
    SIGTERM without ``atexit``) leaves no worker or decode process behind. The parent
    is the loader thread that started the process (a slot thread, which lives until the
    loader closes, after it has stopped its worker). Elsewhere a no-op."""
    signal.signal(signal.SIGTERM, _kill_own_group)
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() == 1:  # the parent died before the request: do as it would
        _kill_own_group(signal.SIGTERM, None)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group of a worker process (started as its own session, so the
    group is the worker and every decode process under it), then the worker itself;
    the group's resource tracker is spared: it unlinks the pool's named semaphores once
    the others are gone, then exits (``trace/processes.py``; killed, it left 5 in
    ``/dev/shm`` per killed load). The group id is the worker's pid, which Linux does
    not reuse while any member of the group lives, so this is safe also after the
    worker died."""
    members = group_members(proc.pid)
    if members:
        kill_all(members)
    else:  # no /proc: the whole group
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()


def _child_env() -> dict[str, str]:
    """The worker's environment: this one, with this package importable."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    paths = [root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


_LIVE_SLOTS: weakref.WeakSet[WorkerSlot] = weakref.WeakSet()


@atexit.register
def _stop_workers_at_exit() -> None:
    """Worker processes end with the program, even in the middle of a load."""
    for slot in list(_LIVE_SLOTS):
        with contextlib.suppress(Exception):
            slot.stop(kill=True)


def _expire(proc: subprocess.Popen[bytes], expired: threading.Event) -> None:
    """The watchdog's action: the load is over its deadline; kill its worker and its
    decode processes (a stopped process dies too), which ends the pending read with EOF."""
    expired.set()
    kill_group(proc)


#: Seconds between two looks of the watch thread at its worker process.
WATCH_INTERVAL_S = 0.1


class _Watch:
    """Watches one load's worker process from a thread: at the deadline (``deadline_s``
    seconds from the start, None: none) it kills the worker's process group
    (:func:`_expire`); when the resident memory of the worker and its children passes
    ``max_rss_bytes`` (None: no cap) it kills the group too and keeps the size seen in
    ``over_rss_bytes``; when the worker exits before that (killed by hand or by the
    kernel for memory) it kills what is left of its group. Either way every process
    that could hold the answer pipe dies, so the pending read ends with EOF (a decode
    process the worker started may hold the pipe after the worker's own exit): the
    loader does not rely on EOF alone."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        deadline_s: float | None,
        max_rss_bytes: int | None = None,
    ) -> None:
        self.proc = proc
        self.expired = threading.Event()
        self.over_rss_bytes: int | None = None
        self._max_rss_bytes = max_rss_bytes
        self._done = threading.Event()
        self._end = None if deadline_s is None else time.monotonic() + deadline_s
        self._thread = threading.Thread(target=self._run, name="kineto-insights-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(WATCH_INTERVAL_S):
            if self.proc.poll() is not None:
                kill_group(self.proc)
                return
            if self._end is not None and time.monotonic() >= self._end:
                _expire(self.proc, self.expired)
                return
            if self._max_rss_bytes is not None:
                rss = tree_rss_bytes(self.proc.pid)
                if rss > self._max_rss_bytes:
                    self.over_rss_bytes = rss
                    kill_group(self.proc)
                    return

    def cancel(self) -> None:
        self._done.set()


def _await_ready(proc: subprocess.Popen[bytes]) -> None:
    """Wait for a new worker's ready frame, killing it after WORKER_START_TIMEOUT_S.

    Raises:
        EOFError: the process died or did not start in time.
    """
    expired = threading.Event()
    watchdog = threading.Timer(WORKER_START_TIMEOUT_S, _expire, args=(proc, expired))
    watchdog.daemon = True
    watchdog.start()
    try:
        if proc.stdout is None or _read_frame(proc.stdout) != _READY:
            raise EOFError("the worker process did not start properly")
    except EOFError:
        if expired.is_set():
            raise EOFError(
                f"the worker process did not start within {WORKER_START_TIMEOUT_S:g} s"
            ) from None
        raise
    finally:
        watchdog.cancel()


def _memory_message(task: LoadTask, rss_bytes: int) -> str:
    cap = task.max_rss_bytes or 0
    what = getattr(task, "what", "load")
    used_mib = math.ceil(rss_bytes / MIB)  # up: never "used 400, over its cap of 400"
    return (
        f"{task.ident.path}: the {what} used {used_mib:,} MiB of memory, over its "
        f"cap of {cap / MIB:,.0f} MiB (--kineto_insights_load_max_rss_mib); its worker "
        "process was stopped and replaced, other loads go on"
    )


def _timeout_message(task: LoadTask, elapsed_s: float) -> str:
    return (
        f"{task.ident.path}: the {getattr(task, 'what', 'load')} did not finish within its "
        "deadline of "
        f"{task.deadline_s:.1f} s ({elapsed_s:.1f} s elapsed); its worker process was "
        "stopped and replaced; ask again to retry (the deadline is "
        f"--kineto_insights_load_timeout_s + --kineto_insights_load_timeout_s_per_mib "
        f"x {task.ident.size_bytes / MIB:.2f} MiB)"
    )


class WorkerSlot:
    """One place where a file is read: a worker process (``python -c``), reused until
    idle or dead, or (``use_process=False``) the calling thread itself."""

    def __init__(self, use_process: bool) -> None:
        self._use_process = use_process
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        _LIVE_SLOTS.add(self)

    def run(self, task: Any, progress: ProgressCallback | None = None) -> Any:
        """Run one load (a :class:`LoadTask`: returns a :class:`LoadOutcome`) or call
        (``worker_calls.CallTask``: its ``outcome_type``); in a worker process, killed
        when ``task.deadline_s`` passes or ``task.max_rss_bytes`` is held (a load in this
        thread cannot be stopped: no deadline there). ``progress`` is called with
        ``(bytes_read, file_bytes)`` of the stored file while it is read."""
        if not self._use_process:
            return _execute(task, progress)
        started = time.perf_counter()
        proc = None
        watch: _Watch | None = None
        try:
            proc = self._ensure_process()
            if proc.stdin is None or proc.stdout is None:
                raise OSError("the worker process has no pipes")
            started = time.perf_counter()  # a new process's start-up is not the file's
            watch = _Watch(proc, task.deadline_s, task.max_rss_bytes)
            _write_frame(proc.stdin, task)
            outcome = _read_frame(proc.stdout)  # EOF when the process dies or is killed
            while isinstance(outcome, tuple) and outcome[:1] == (_PROGRESS,):
                if progress is not None:
                    progress(int(outcome[1]), int(outcome[2]))
                outcome = _read_frame(proc.stdout)
            if isinstance(outcome, getattr(task, "outcome_type", LoadOutcome)):
                return outcome
            raise EOFError(f"unexpected answer {type(outcome).__name__}")
        except (EOFError, OSError, pickle.PickleError, struct.error) as exc:
            code = None
            if proc is not None:
                if proc.poll() is not None:  # dead: its decode processes go with it
                    kill_group(proc)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = proc.wait(timeout=1.0)
            self.stop(kill=True)
            elapsed = time.perf_counter() - started
            if watch is not None and watch.expired.is_set():
                return _failure(task, ERROR_TIMEOUT, _timeout_message(task, elapsed), elapsed)
            if watch is not None and watch.over_rss_bytes is not None:
                message = _memory_message(task, watch.over_rss_bytes)
                return _failure(task, ERROR_MEMORY, message, elapsed)
            reason = f"exit code {code}" if code is not None else str(exc)
            hint = " (killed: out of memory?)" if code is not None and code < 0 else ""
            return _failure(
                task,
                ERROR_WORKER,
                f"{task.ident.path}: the worker process reading it died ({reason}){hint}",
                elapsed,
            )
        finally:
            if watch is not None:
                watch.cancel()

    def _ensure_process(self) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return self._proc
        self.stop(kill=True)
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_CODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_child_env(),
            start_new_session=True,  # its own process group: killed with its decoders
        )
        with self._lock:
            self._proc = proc
        _await_ready(proc)
        return proc

    @property
    def pid(self) -> int | None:
        with self._lock:
            proc = self._proc
        return None if proc is None or proc.poll() is not None else proc.pid

    def stop(self, kill: bool = False) -> None:
        """End the worker process: politely (close its input) or, with ``kill``, at once
        (a load in progress is abandoned)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        if kill:
            kill_group(proc)
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.wait(timeout=5.0)
        kill_group(proc)  # decode processes left by a worker that exited on its own
        with contextlib.suppress(OSError):
            if proc.stdout is not None:
                proc.stdout.close()
