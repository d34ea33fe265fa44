"""The watchdog process of a command's time budget (``--timeout``, ``budget.py``).

The console script forks once, before any thread or worker process starts
(:func:`fork_watched`): the child runs the command; the parent, the process the user
started, only watches it (:func:`watch`), so the budget holds whatever the command is
doing, a long C call that keeps the GIL included (a thread of the command, or a
``SIGALRM`` handler, would wait for it: ``check --against-history --timeout 5``
stopped only after 15.8 s when a regex held it). The watchdog:

- past the deadline says so on standard error, kills the command and every process
  below it (but the ``multiprocessing`` resource tracker, which unlinks the decode
  pool's semaphores once the others are gone: ``trace/processes.py``), and exits with
  124, as ``timeout(1)``; it looks every :data:`POLL_S` seconds;
- is told when the command starts writing its document (``Budget.cancel`` over a pipe,
  answered), after which the budget never fires: the document is written whole or not
  at all (exit 124 before the first byte);
- passes ``SIGINT``, ``SIGTERM`` and ``SIGHUP`` on to the command (which says
  ``interrupted``/``terminated`` and ends its workers: ``budget.stop_on_interrupt``),
  and exits as the command did (its exit code, or its signal);
- adopts what the command leaves behind (Linux ``PR_SET_CHILD_SUBREAPER``) and ends it
  before exiting, waiting (at most :data:`TRACKER_WAIT_S`) for resource trackers to
  clean up: no process or semaphore outlives the command.

The command dies with its watchdog (``PR_SET_PDEATHSIG``): a ``SIGKILL`` of the process
the user started (an OOM kill) ends the command, whose decode workers end with it
(``trace/processes.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import NoReturn

from tb_kineto_insights.trace.processes import (
    PR_SET_CHILD_SUBREAPER,
    descendants,
    die_with_parent,
    kill_all,
    prctl,
    wait_gone,
)

__all__ = ["POLL_S", "TRACKER_WAIT_S", "fork_watched", "watch"]

#: Seconds between two looks of the watchdog at the command and its deadline.
POLL_S = 0.05
#: Seconds the watchdog waits for resource trackers to unlink semaphores and exit.
TRACKER_WAIT_S = 5.0
#: Exit status of a command stopped by its budget (as ``timeout(1)``).
EXIT_TIMEOUT = 124
#: Signals the watchdog passes on to the command.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def fork_watched(deadline: float, message: str) -> tuple[int, int] | None:
    """Fork the command off a watchdog: in the child (the command) return ``(ask,
    answer)``, the pipe ends to tell the watchdog that the budget is over
    (``Budget.cancel``); the parent becomes the watchdog (:func:`watch`, never returns).
    None when the fork fails (the caller then watches the budget itself).

    ``deadline``: ``time.monotonic()`` seconds; ``message``: what to say past it."""
    for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
        with contextlib.suppress(Exception):
            stream.flush()
    ask_r, ask_w = os.pipe()
    answer_r, answer_w = os.pipe()
    # Ctrl-C or SIGTERM to the group while this forks reaches both processes: held until
    # the watchdog passes them on (:func:`watch`) and the command has its own handler,
    # else the watchdog, still running the command's handler, said it too and exited
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in (ask_r, ask_w, answer_r, answer_w):
            os.close(fd)
        return None
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(ask_r)
        os.close(answer_w)
        die_with_parent()  # a SIGKILL of the watchdog ends the command too
        return ask_w, answer_r
    os.close(ask_w)
    os.close(answer_r)
    watch(pid, deadline, message, ask_r, answer_w, mask)


def _forward(child: int) -> None:
    def handler(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.kill(child, signum)

    for sig in FORWARDED:
        signal.signal(sig, handler)


def watch(
    child: int,
    deadline: float,
    message: str,
    ask: int,
    answer: int,
    mask: set[int | signal.Signals] | None = None,
) -> NoReturn:
    """The watchdog's loop over the command ``child`` (module docstring): exits with the
    command's status, or 124 past ``deadline`` unless the command said (on ``ask``, a
    byte answered on ``answer``) that its work is done. ``mask``: the signal mask to set
    once the forwarding handlers are in place (:func:`fork_watched` blocks them)."""
    import select

    prctl(PR_SET_CHILD_SUBREAPER, 1)
    _forward(child)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    cancelled, listening = False, True
    status = 0
    while True:
        try:
            done, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            break
        if done:
            break
        now = time.monotonic()
        if not cancelled and now >= deadline:
            _expire(child, message)
        wait = POLL_S if cancelled else min(POLL_S, max(0.0, deadline - now))
        ready = select.select([ask] if listening else [], [], [], wait)[0]
        if ready:
            data = os.read(ask, 16)
            if not data:
                listening = False
            elif not cancelled:
                cancelled = True
                with contextlib.suppress(OSError):
                    os.write(answer, b"k")
    _end_left_behind()
    _exit_as(os.waitstatus_to_exitcode(status))


def _expire(child: int, message: str) -> NoReturn:
    """The budget is spent: say so, kill the command and what is below it, exit 124."""
    with contextlib.suppress(OSError):
        os.write(2, message.encode("utf-8", "replace"))
    kill_all([*descendants(child), child])  # listed before any dies: none is orphaned
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(child, 0)
    _end_left_behind()
    os._exit(EXIT_TIMEOUT)


def _end_left_behind() -> None:
    """Kill what the command left (adopted here) but resource trackers, then wait for
    those to unlink their semaphores and exit (at most :data:`TRACKER_WAIT_S`)."""
    trackers = kill_all(descendants(os.getpid()))
    wait_gone(descendants(os.getpid()), 1.0)
    if trackers:
        wait_gone(trackers, TRACKER_WAIT_S)
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _exit_as(code: int) -> NoReturn:
    """End as the command ended: its exit code, or its signal (then 128 + it)."""
    if code < 0:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(128 - code)
    os._exit(code)
