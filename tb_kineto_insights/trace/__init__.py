"""Reading: one trace file → :class:`~tb_kineto_insights.trace.model.Trace` (typed
columnar event tables + health).

Takes a path or URL (local, gzip, fsspec), gives a ``Trace``; damage is repaired or
salvaged and reported in ``TraceHealth``, and what cannot be read raises a typed
:class:`TraceError` naming the file. ``source`` opens and inflates, ``confine`` keeps
opened files inside their log directory, ``local_paths`` tells local paths from URLs,
``reader`` makes the pass over a file (``framing`` finds the events in its bytes,
``decode`` decodes pieces of them, ``columns`` turns them into columns, ``assemble``
gives the ``Trace``; ``parallel`` spreads a big file over worker processes),
``model`` defines the tables, ``window`` cuts a window of a file.

May import: ``schema`` (the health Structs) and libraries; nothing else of the package.
"""

from tb_kineto_insights.trace.errors import (
    TraceError,
    TraceFormatError,
    TraceIOError,
    TraceTooLargeError,
)

__all__ = ["TraceError", "TraceFormatError", "TraceIOError", "TraceTooLargeError"]
