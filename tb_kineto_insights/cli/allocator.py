"""glibc ``malloc`` settings for a command that reads traces: fewer page faults.

Reading a trace allocates and frees buffers of a few MiB over and over (inflated
blocks, pieces of JSON, columns). glibc serves an allocation above its mmap threshold
(128 KiB at start, raised as such blocks are freed) with a fresh ``mmap`` and gives it
back on ``free``, and it returns free memory at the top of its heap to the system past
its trim threshold: each new buffer is then faulted in again, a page at a time, zeroed
by the kernel. With the thresholds below, a ``report`` of ``sample_logs`` takes about
half the minor page faults and system time; the price is the free memory each process
keeps, a few MB more at the tree's peak. A larger trim threshold keeps more memory for
no fewer faults, a smaller one gives more faults. Figures in ``benchmarks/RESULTS.md``.

The settings are those of ``mallopt(3)`` (``M_MMAP_THRESHOLD``, ``M_TRIM_THRESHOLD``),
the same as the environment variables ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_``; a user who set either (or a ``glibc.malloc`` tunable in
``GLIBC_TUNABLES``) keeps theirs.
Worker processes forked afterwards inherit them.
"""

from __future__ import annotations

import os
import sys

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "tune_allocator"]

#: Allocations up to this size come from the heap (reused after ``free``), not ``mmap``.
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
#: Free memory at the top of the heap kept for reuse, at most, before it is returned.
TRIM_THRESHOLD_BYTES = 6 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def tune_allocator() -> bool:
    """Set glibc's mmap and trim thresholds (:data:`MMAP_THRESHOLD_BYTES`,
    :data:`TRIM_THRESHOLD_BYTES`) for this process; returns whether both were set.
    Nothing is done off Linux, without glibc's ``mallopt`` (musl, macOS), or when the
    environment sets the allocator already. Raises nothing."""
    users = [os.environ.get(v, "") for v in _USER_SETTINGS]
    if not sys.platform.startswith("linux") or any(users[:2]) or "glibc.malloc." in users[2]:
        return False
    try:
        if os.confstr("CS_GNU_LIBC_VERSION") is None:  # musl's mallopt does nothing
            return False
        import ctypes  # numpy imports it anyway: no cost to a command that reads a trace

        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        mallopt.restype = ctypes.c_int
        return bool(
            mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
            and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
        )
    except (ImportError, OSError, AttributeError, ValueError):
        return False
