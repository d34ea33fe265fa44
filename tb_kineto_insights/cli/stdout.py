"""The command's standard output: a failure to write it (a full disk, a quota, ``EIO``)
is :class:`OutputError`, which ``cli.main`` says in one line, not a traceback; a closed
pipe (``report ... | head``) ends the command quietly (:func:`discard_stdout`)."""

from __future__ import annotations

import os
import sys
from typing import TextIO


class OutputError(OSError):
    """Writing the command's standard output failed (its cause: the ``OSError``)."""


class Output:
    """Standard output whose write errors (a full disk, a quota, ``EIO``; not a closed
    pipe, which ends the command quietly) are :class:`OutputError`, which ``cli.main.main``
    reports in one line. Everything else is ``out``'s."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        try:
            return self._out.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.errno, exc.strerror) from exc

    def flush(self) -> None:
        try:
            self._out.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.errno, exc.strerror) from exc

    def __getattr__(self, name: str) -> object:
        return getattr(self._out, name)


def discard_stdout() -> None:
    """Point file descriptor 1 at the null device, so that the interpreter's last flush
    of what is still buffered does not fail again at exit (nothing to do for a stdout
    that is no file, e.g. a test's capture)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass
