"""The service layer: the typed calls both front doors make.

The TensorBoard plugin (``serve/``) and the command line (``cli/``) answer the same
questions: summarise a span, a run's view across ranks with its errors and the spans
still loading, the runs' headlines (history, the view across runs), a report, a diff of
two sides, a window of a trace. Each is one call here, written once; a route parses,
calls and responds, a command parses, calls and formats. Neither decides an analysis
question.

May import: ``compare``, ``store`` and below; nothing above (``serve``, ``cli``).
"""
