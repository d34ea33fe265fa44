"""Analysis: pure functions over a :class:`~tb_kineto_insights.trace.model.Trace`.

One module per panel (``overview`` steps, ``kernels``, ``idle``, ``communication``,
``memory``, ``tables``, ``trace_quality``), the shared index (``trace_index``), interval
math (``intervals``), the diagnoses (``rules/``: one rule per diagnosis id), their
thresholds (``thresholds``) and the view across ranks (``run_view``). Each gives its ``schema``
Struct; nothing here does I/O.

May import: ``trace``, ``schema`` and libraries; nothing above.
"""
