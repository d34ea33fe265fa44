"""The processes a read starts, and how they end with their owner.

A large read decodes on worker processes (:mod:`.parallel`): a ``multiprocessing``
pool, started from a forkserver (with its resource tracker) or forked. Every one of
them must end with the command or the TensorBoard load that started them, however that
ends (a ``SIGKILL`` from the OOM killer included), and leave no named semaphore in
``/dev/shm``:

- **Pool workers watch their owner** (:func:`watch_owner`, a pool's initializer): a
  worker blocked on its task queue never notices that the process that fed it died (it
  holds the queue's write end itself), so a daemon thread waits on the owner's pidfd
  (``pidfd_open``, Linux 5.3; a poll of ``kill(pid, 0)`` elsewhere) and ends the worker
  when the owner is gone. Once the workers are gone the forkserver sees end-of-file on
  its pipe and exits, and so does the resource tracker.
- **The resource tracker is spared** by every kill here (:func:`kill_all`): the
  ``multiprocessing`` semaphores of a pool started from a forkserver are named
  (``/dev/shm/sem.mp-*``) and registered with the tracker, which unlinks those still
  registered once every process that holds its pipe has exited. Killed with the
  others, it would leave them for ever (5 per killed pool). Its warning about them
  ("leaked semaphore objects to clean up") is turned off (:func:`quiet_tracker`): the
  clean-up is the expected end of a killed read.

Linux only where it says so (``/proc``, ``prctl``, ``pidfd_open``); elsewhere what can
be done is done and the rest is a no-op.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

__all__ = [
    "descendants",
    "die_with_parent",
    "group_members",
    "is_resource_tracker",
    "kill_all",
    "quiet_tracker",
    "watch_owner",
]

#: ``prctl`` options (``linux/prctl.h``).
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: What the resource tracker runs (``multiprocessing.resource_tracker``'s command line).
_TRACKER_MARK = b"multiprocessing.resource_tracker"
#: The warning filter that turns the tracker's leak warning off (passed on to it: the
#: tracker is started with this process's ``-W`` options).
_QUIET = "ignore::UserWarning:multiprocessing.resource_tracker"
#: Seconds between two looks at the owner where there is no pidfd.
OWNER_POLL_S = 0.5


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)`` on Linux; whether it was done."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Get ``sig`` when the parent (thread) exits (Linux ``PR_SET_PDEATHSIG``); when the
    parent died before, act at once: end with ``sig``'s default action."""
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, int(sig))
    if parent == 1 or os.getppid() != parent:
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)


def quiet_tracker() -> None:
    """Turn off the resource tracker's leak warning for the tracker this process starts
    (module docstring): its ``-W`` options are this process's ``sys.warnoptions``."""
    if _QUIET not in sys.warnoptions:
        sys.warnoptions.append(_QUIET)


def _owner_gone(owner: int) -> None:
    """Block until process ``owner`` has exited, then end this process (no clean-up:
    its owner, who would read its results, is gone)."""
    fd = None
    with contextlib.suppress(OSError, AttributeError):
        fd = os.pidfd_open(owner)
    if fd is not None:
        import select

        with contextlib.suppress(OSError):
            select.select([fd], [], [])
    else:
        while True:
            try:
                os.kill(owner, 0)
            except ProcessLookupError:
                break
            except OSError:
                pass
            time.sleep(OWNER_POLL_S)
    os._exit(1)


def watch_owner(owner: int) -> None:
    """End this process when ``owner`` exits (module docstring): a daemon thread waits
    for it. For a pool worker's initializer; at once when ``owner`` is already gone."""
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        os._exit(1)
    except OSError:
        pass
    threading.Thread(
        target=_owner_gone, args=(owner,), name="kineto-insights-owner", daemon=True
    ).start()


def _children(pid: int) -> list[int]:
    """The children of ``pid`` (``/proc/PID/task/TID/children`` of each thread)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children of children too), parents first; empty
    without ``/proc``. Iterative: a tree of any depth."""
    out: list[int] = []
    seen = {pid}
    todo = [pid]
    while todo:
        for child in _children(todo.pop()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                todo.append(child)
    return out


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` (``/proc/PID/stat``'s fifth field)."""
    out: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


def is_resource_tracker(pid: int) -> bool:
    """Whether ``pid`` runs ``multiprocessing``'s resource tracker (its command line)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return _TRACKER_MARK in fh.read()
    except OSError:
        return False


def kill_all(pids: list[int], *, spare_trackers: bool = True) -> list[int]:
    """SIGKILL every process of ``pids`` but, with ``spare_trackers``, the resource
    trackers (module docstring: they end by themselves once the others have, and unlink
    the semaphores). Returns the trackers spared. Raises nothing."""
    spared = [p for p in pids if spare_trackers and is_resource_tracker(p)]
    for pid in pids:
        if pid not in spared:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    return spared


def wait_gone(pids: list[int], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``pids`` to exit (reaping those that are this
    process's children); whether they all did."""
    end = time.monotonic() + timeout_s
    left = list(pids)
    while left:
        still = []
        for pid in left:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            try:
                os.kill(pid, 0)
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                        continue  # a zombie (another's child): gone
                still.append(pid)
            except (OSError, IndexError):
                continue
        left = still
        if not left or time.monotonic() >= end:
            break
        time.sleep(0.02)
    return not left
