"""A time budget for every command that reads something (``report``, ``diff``,
``check``, ``history``, ``index``, ``window``, ``doctor``), as the plugin has for each
load: a pathological input ends the command with a message instead of running for
ever.

``--timeout SECONDS`` sets it (``0``: none); by default it is
:data:`DEFAULT_TIMEOUT_S` plus :data:`DEFAULT_TIMEOUT_S_PER_MIB` seconds per MiB of the
input's stored bytes (the trace files under the paths given; compressed size for
gzip), the defaults of the plugin's per-load deadline
(``service.worker_pool.LoadDeadline``): a wide margin over real reads (tens of MiB of
stored file per second), so only a pathological input reaches it. An input whose size is
unknown (an fsspec URL) gets the base alone.

Past the budget a watchdog prints what ran out to standard error, kills the
command's child processes (decode workers of a parallel read, a local Dask cluster of
``index``) and ends the process with :data:`EXIT_TIMEOUT` (124, as ``timeout(1)``): a
Python thread cannot be stopped from outside, and a read in C code (a regex, a decode)
would not see an exception, so the process itself ends.

The console script's watchdog is a process (:meth:`Budget.supervise`,
``supervisor.py``): the command is forked off it before anything else starts, and it
needs nothing of the command (no GIL), so the budget holds within 50 ms whatever the
command is doing. Where there is no ``fork`` (or for a call of ``main(argv)`` from
Python), the watchdog is a daemon thread (:meth:`Budget.start`), and before it starts,
while the command forks its worker processes (``fork`` of a process that runs a second
thread is unsafe: ``store/parallel_summaries.py``, ``prestart``), the same deadline is
kept by ``SIGALRM`` (:meth:`Budget.by_signal`), which needs no thread; both need the
command to let go of the GIL.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

#: Seconds every command may take, whatever its input (the plugin's default base).
DEFAULT_TIMEOUT_S = 120.0
#: Seconds more per MiB of stored input (the plugin's default per MiB).
DEFAULT_TIMEOUT_S_PER_MIB = 2.0
#: Exit status of a command stopped by its budget (as ``timeout(1)``).
EXIT_TIMEOUT = 124
#: Entries looked at while sizing a folder, at most (then the size found so far counts).
MAX_SIZED_ENTRIES = 200_000
_MIB = 1024**2
_URL_MARK = "://"


def _path_of(arg: str) -> str | None:
    """The local path an argument names (``LOGDIR:RUN`` sides: the log directory), or
    None for a URL or a path that does not exist."""
    if _URL_MARK in arg:
        return None
    if os.path.exists(arg):
        return arg
    head, sep, _ = arg.rpartition(":")
    if sep and head and os.path.exists(head):
        return head
    return None


def input_bytes(args: Iterable[str]) -> int | None:
    """Stored bytes of the files under the local paths ``args`` (a file: its size; a
    folder: the files under it, walked iteratively, at most :data:`MAX_SIZED_ENTRIES`
    entries; what cannot be listed counts 0); None when no argument is a local path."""
    total, seen, any_local = 0, 0, False
    for arg in args:
        path = _path_of(arg)
        if path is None:
            continue
        any_local = True
        stack = [path]
        while stack and seen < MAX_SIZED_ENTRIES:
            current = stack.pop()
            with contextlib.suppress(OSError):
                if not os.path.isdir(current):
                    total += os.stat(current).st_size
                    seen += 1
                    continue
                with os.scandir(current) as entries:
                    for entry in entries:
                        seen += 1
                        with contextlib.suppress(OSError):
                            if entry.is_dir(follow_symlinks=False):
                                stack.append(entry.path)
                            elif entry.is_file():
                                total += entry.stat().st_size
    return total if any_local else None


def default_timeout_s(args: Iterable[str]) -> float:
    """:data:`DEFAULT_TIMEOUT_S` + :data:`DEFAULT_TIMEOUT_S_PER_MIB` x MiB of
    :func:`input_bytes` (0 MiB when unknown)."""
    size = input_bytes(args) or 0
    return DEFAULT_TIMEOUT_S + DEFAULT_TIMEOUT_S_PER_MIB * size / _MIB


def timeout_arg(text: str) -> float:
    """``--timeout``'s type: a finite number of seconds >= 0 (0: no budget)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        import argparse

        raise argparse.ArgumentTypeError(f"not a finite number of seconds >= 0: {text!r}")
    return value


def _kill_children() -> None:
    """SIGKILL this process's descendants (children of children too: a forkserver's
    workers are this process's grandchildren), all listed before any is killed (a killed
    parent orphans them), but the resource trackers, which unlink the pools' named
    semaphores once the others are gone and then exit (``trace/processes.py``). Raises
    nothing."""
    from tb_kineto_insights.trace.processes import descendants, kill_all

    kill_all(descendants(os.getpid()))


def _seconds_text(seconds: float) -> str:
    """``1.5`` → ``"1.5"``, ``0.004`` → ``"0.004"`` (one decimal hid a tiny budget as 0.0)."""
    return f"{seconds:.1f}" if seconds >= 0.1 else f"{seconds:.2g}"


def expiry_message(command: str, seconds: float, how: str) -> str:
    """What a command past its budget says on standard error (one line)."""
    return (
        f"error: {command} did not finish within its time budget of "
        f"{_seconds_text(seconds)} s ({how}); stopped. Give --timeout SECONDS for more "
        "(0: no limit)\n"
    )


def _expire(command: str, seconds: float, how: str, err: TextIO) -> None:
    """Say what ran out, kill the children and end the process with exit 124. Nothing
    buffered for standard output is flushed: a command writes its document only once its
    work is done (:class:`OutputEndsBudget`), so what is buffered there is never a whole
    document (a cut JSON report came out before)."""
    with contextlib.suppress(Exception):
        err.write(expiry_message(command, seconds, how))
        err.flush()
    _kill_children()
    os._exit(EXIT_TIMEOUT)


#: Exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130


#: Exit status of a command stopped by SIGTERM (128 + 15).
EXIT_TERMINATED = 143


def stop_on_interrupt(err: TextIO) -> None:
    """From now on Ctrl-C (``SIGINT``) and ``SIGTERM`` end the command at once:
    ``interrupted`` / ``terminated`` on ``err``, its child processes killed, exit
    :data:`EXIT_INTERRUPTED` / :data:`EXIT_TERMINATED`. Before, Ctrl-C printed a
    ``KeyboardInterrupt`` traceback from the command and from each worker process, after
    the command waited for its workers' current files, and ``SIGTERM`` to the command
    alone left its forkserver and workers running, holding its standard output open.
    For the console script (the main thread; elsewhere nothing changes). Raises nothing."""
    import signal

    # One ending whatever arrives: a terminal's Ctrl-C reaches the command twice (from
    # its process group and passed on by the watchdog, ``cli/supervisor.py``), and
    # Python runs a handler again, inside the first, for a signal that came meanwhile.
    # A lock's non-blocking acquire is one C call: no handler runs in its middle.
    once = threading.Lock()

    def ending(word: str, code: int) -> Any:
        def handler(*_: object) -> None:
            if not once.acquire(blocking=False):
                return  # the first handler is ending the command
            with contextlib.suppress(Exception):
                err.write(f"{word}\n")
                err.flush()
            # a signal during the start-up's import of trace/processes.py finds it half
            # made (ImportError): no child is started before it is whole
            with contextlib.suppress(Exception):
                _kill_children()
            os._exit(code)

        return handler

    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGINT, ending("interrupted", EXIT_INTERRUPTED))
        signal.signal(signal.SIGTERM, ending("terminated", EXIT_TERMINATED))


class Budget:
    """The time budget of one command: ``seconds`` from its creation (``how``: where the
    figure comes from, for the message). Watch it by :meth:`by_signal` (a ``with``
    block, before any thread starts) and then by :meth:`start` (a daemon thread, for what
    is left); :meth:`cancel` when the command returns."""

    def __init__(self, command: str, seconds: float, how: str, err: TextIO) -> None:
        self.command, self.seconds, self.how, self.err = command, seconds, how, err
        self.deadline = time.monotonic() + seconds
        self.timer: threading.Timer | None = None
        #: (write end to the watchdog process, read end of its answer) once
        #: :meth:`supervise` forked; None while this process watches itself
        self.watchdog: tuple[int, int] | None = None
        # expire and cancel exclude each other: once the message is out the process ends
        # with 124 (unlocked, a command finishing meanwhile could exit 0 after the
        # message), and
        # once cancelled the budget never fires
        self._lock = threading.Lock()
        self._over = False

    def expire(self, *_: object) -> None:
        """Print what ran out, kill the children and end the process (exit 124), unless
        the budget was cancelled."""
        with self._lock:
            if self._over:
                return
            self._over = True
            _expire(self.command, self.seconds, self.how, self.err)  # never returns

    @contextlib.contextmanager
    def by_signal(self) -> Iterator[None]:
        """Within the block, the deadline is kept by ``SIGALRM`` (its handler runs in the
        main thread, which must be this one, and no other thread may run: the signal
        then reaches this one); where there is no ``setitimer`` (Windows) or this is not
        the main thread, by the thread (:meth:`start`) from the block's start."""
        import signal

        if self.watchdog is not None:  # a process watches: nothing to do here
            yield
            return
        if not hasattr(signal, "setitimer") or threading.current_thread() is not (
            threading.main_thread()
        ):
            self.start()
            yield
            return
        previous = signal.signal(signal.SIGALRM, self.expire)
        signal.setitimer(signal.ITIMER_REAL, max(1e-3, self.deadline - time.monotonic()))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def start(self) -> None:
        """Watch what is left of the budget from a daemon thread (once); nothing when a
        process watches it (:meth:`supervise`)."""
        if self.timer is not None or self.watchdog is not None:
            return
        self.timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self.expire)
        self.timer.daemon = True
        self.timer.start()

    def cancel(self) -> None:
        """Stop watching (the command's work is done). Should the budget be expiring at
        that moment, this waits for the process to end (exit 124): the watchdog
        process answers a cancel only when it has not expired, else it kills this one."""
        with self._lock:
            if self._over:
                return
            self._over = True
            if self.timer is not None:
                self.timer.cancel()
            if self.watchdog is not None:
                ask, answer = self.watchdog
                with contextlib.suppress(OSError):
                    os.write(ask, b"c")
                    os.read(answer, 1)  # blocks while the watchdog kills this process

    def supervise(self) -> bool:
        """Hand the budget to a watchdog process: fork; the parent watches (it never
        returns: :func:`.supervisor.watch`) while this process, the child, goes on as
        the command and returns True. False (nothing done) where there is no ``fork``,
        or this process runs another thread (``fork`` of a threaded process is unsafe).

        Why a process: a thread (or a ``SIGALRM`` handler) runs only when the command's
        thread lets go of the GIL, which a long C call (a regex in ``re``, a huge
        decode) does not; a process needs nothing of this one, so the budget holds
        within :data:`.supervisor.POLL_S` whatever the command is doing.
        """
        from tb_kineto_insights.cli import supervisor

        if not hasattr(os, "fork") or threading.active_count() != 1:
            return False
        message = expiry_message(self.command, self.seconds, self.how)
        self.watchdog = supervisor.fork_watched(self.deadline, message)
        return self.watchdog is not None


class OutputEndsBudget:
    """A command's standard output whose first write cancels ``budget``: the budget
    covers the command's work, and a command writes its document once that is done, so
    the document is either written whole (exit 0) or not at all (exit 124), and a slow
    reader of it (a pager) never stops the command. Everything else is ``out``'s."""

    def __init__(self, out: TextIO, budget: Budget) -> None:
        self._out, self._budget = out, budget

    def write(self, text: str) -> int:
        self._budget.cancel()
        return self._out.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._out, name)


def budget_for(
    command: str, timeout_s: float | None, inputs: list[str], err: TextIO
) -> Budget | None:
    """The budget of ``command``, not watched yet: ``timeout_s`` seconds (None: the
    default from ``inputs``; ``<= 0``: no budget, returns None)."""
    if timeout_s is None:
        size = (input_bytes(inputs) or 0) / _MIB
        seconds = DEFAULT_TIMEOUT_S + DEFAULT_TIMEOUT_S_PER_MIB * size
        how = (
            f"default: {DEFAULT_TIMEOUT_S:g} s + {DEFAULT_TIMEOUT_S_PER_MIB:g} s per MiB "
            f"x {size:.1f} MiB of input"
        )
    else:
        seconds, how = timeout_s, "--timeout"
    if not (seconds > 0 and math.isfinite(seconds)):
        return None
    return Budget(command, seconds, how, err)
