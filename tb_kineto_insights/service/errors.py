"""What a service call raises when it cannot answer, by kind; each front door says it its
own way (the plugin as an HTTP status, the command line as a message and an exit code).
"""

from __future__ import annotations


class ServiceError(Exception):
    """A question the service cannot answer; ``message`` says why (names the run, span
    or file)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(ServiceError):
    """The question itself is malformed (a bad parameter, an empty range)."""


class NotFound(ServiceError):
    """No such run, worker, span, step or panel."""


class Unreadable(ServiceError):
    """The trace (or every trace of a side or run) cannot be read or cut."""


class Damaged(ServiceError):
    """Something this tool stored is damaged (a timeline store): a bug or a bad disk."""


class NotAvailable(ServiceError):
    """The service has no function for this question (a hook set to None)."""


class Busy(ServiceError):
    """The work did not finish in its worker process: past its deadline or memory cap,
    or the process died; asking again may succeed."""
