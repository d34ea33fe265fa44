"""Reading: one trace file → :class:`Trace` (typed columnar event tables + health)."""

from tb_kineto_insights.trace.errors import (
    TraceError,
    TraceFormatError,
    TraceIOError,
    TraceTooLargeError,
)

__all__ = ["TraceError", "TraceFormatError", "TraceIOError", "TraceTooLargeError"]
