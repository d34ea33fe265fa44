"""Typed errors raised while reading a trace file.

Every message names the file and says what was wrong, so the CLI and the plugin can
show it as is. The plugin maps these to an error entry for one span and keeps serving
every other run.
"""

from __future__ import annotations


class TraceError(Exception):
    """Base class: a trace file could not be read.

    Attributes:
        path: the file (local path or fsspec URL) as discovery named it.
        offset: byte offset in the *uncompressed* JSON where the problem was found,
            or ``None`` when it does not apply (missing file, I/O error).
    """

    def __init__(self, path: str, problem: str, offset: int | None = None) -> None:
        self.path = path
        self.problem = problem
        self.offset = offset
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{path}: {problem}{where}")


class TraceFormatError(TraceError):
    """The file is not a readable Kineto trace: not JSON, truncated, bad gzip, wrong root."""


class TraceTooLargeError(TraceError):
    """Decompressing the file would exceed the configured byte cap (a gzip bomb, or a
    trace larger than this installation is set up to read)."""


class SummarySchemaError(TraceError):
    """The analysis of the file gave a summary that does not fit its schema (an odd
    value in the trace, such as 1e300, reached it): never cached or served as a summary."""


class TraceIOError(TraceError):
    """The file could not be opened or read (missing, permission denied, storage error)."""
