"""The spans one side of a comparison names (``diff``/``check``): a run folder, a trace
file, or ``LOGDIR:RUN`` (a run of a log directory by its discovered name). A folder
holding several runs must be narrowed with ``LOGDIR:RUN``. Discovery only (no analysis
is imported), so that the command line can plan its worker processes before it imports
the analysis (``store/parallel_summaries.py``: ``prestart``).
"""

from __future__ import annotations

import difflib
import os

from tb_kineto_insights.logdir.discovery import (
    LogdirError,
    Span,
    broken_link,
    discover,
    is_broken_link,
    open_fs,
    span_for_file,
)
from tb_kineto_insights.trace.local_paths import local_path


class SideError(ValueError):
    """A side cannot be used: nothing found, ambiguous, or nothing readable."""


def _exists(spec: str) -> tuple[bool, bool]:
    """(exists, is_file) for a local path or URL.

    Raises:
        LogdirError: a URL whose protocol is unknown or whose fsspec driver is not
            installed (:func:`~.discovery.open_fs`), or whose storage cannot be asked
            (a connection or credentials error): said, not taken for "no such file".
    """
    local = local_path(spec)
    if local is not None:  # what fsspec's local filesystem answers, without importing it
        return os.path.exists(local), os.path.isfile(local)
    fs, path = open_fs(spec, None)  # a URL only: fsspec, a costly import
    try:
        return bool(fs.exists(path)), bool(fs.isfile(path))
    except Exception as exc:  # the driver's errors (connection, credentials), typed
        raise LogdirError(spec, f"cannot reach it: {type(exc).__name__}: {exc}", "side") from exc


def path_hint(path: str) -> str:
    """``"; did you mean PARENT/NAME?"`` for a local ``path`` that does not exist when its
    folder holds a close name (``difflib``, e.g. ``dataloader_worker0`` →
    ``dataloader_workers0``); ``""`` otherwise (URLs, nothing close, and a name that is
    there: a symbolic link in a loop or to nothing is no typo, and it suggested itself)."""
    if "://" in path or os.path.lexists(os.path.normpath(path)):
        return ""
    parent, name = os.path.split(os.path.normpath(path))
    try:
        entries = sorted(os.listdir(parent or "."))
    except OSError:
        return ""
    close = difflib.get_close_matches(name, entries, n=1)
    return f"; did you mean {os.path.join(parent, close[0])}?" if close else ""


def resolve_side(spec: str) -> list[Span]:
    """The spans a side names (see module docstring).

    Raises:
        SideError: nothing found there, or several runs and no ``:RUN``.
        LogdirError: the storage cannot be listed.
    """
    exists, is_file = _exists(spec)
    if is_file:
        return [span_for_file(spec)]
    local = local_path(spec)
    if not exists and local is not None and is_broken_link(local):
        raise SideError(f"{spec}: is {broken_link(local)}")
    if exists:
        runs = discover(spec)
        if not runs:
            raise SideError(f"{spec}: no Kineto trace files found")
        if len(runs) > 1:
            names = ", ".join(r.name for r in runs[:8])
            raise SideError(f"{spec} holds {len(runs)} runs ({names}…): name one as {spec}:RUN")
        run = runs[0]
    else:
        logdir, sep, name = spec.rpartition(":")
        if not sep or not logdir or not _exists(logdir)[0]:
            if local_path(spec) is None:  # a URL: the storage's own error when it has one
                discover(spec)  # (an unreachable host: fsspec's http "exists" says False)
            raise SideError(f"{spec}: no such file, folder, or LOGDIR:RUN{path_hint(spec)}")
        found = discover(logdir)
        run_match = next((r for r in found if r.name == name), None)
        if run_match is None:
            close = difflib.get_close_matches(name, [r.name for r in found], n=1)
            hint = f"; did you mean {logdir}:{close[0]}?" if close else ""
            raise SideError(f"{spec}: log directory {logdir} has no run named {name!r}{hint}")
        run = run_match
    return [s for w in run.workers for s in w.spans]
