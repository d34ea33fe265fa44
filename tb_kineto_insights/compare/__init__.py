"""Comparison: two summaries (or two sides of several spans) → a diff document.

``diff`` aligns a base and an experiment step-normalised and gives the
:class:`~tb_kineto_insights.schema.DiffDocument` (``tb_kineto_insights.diff/1``);
``diff_rules`` holds the noise rule that decides a verdict; ``diff_comm`` the
communication rows; ``diff_tables`` the kernel and CPU-op tables; ``diff_efficiency``
the efficiency rows (op groups by op and shapes); ``comparability`` what makes two runs
hard to compare (GPU, world size, versions, profiler settings); ``before_after``
resolves ``BASE``/``EXP`` arguments to spans and renders the diff as text (the façade
of ``diff`` and ``check``).

May import: ``summary``, ``analysis``, ``logdir``, ``trace``, ``schema``; never
``store``, ``serve`` or ``cli``.
"""
