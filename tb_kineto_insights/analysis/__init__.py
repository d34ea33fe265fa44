"""Analysis: pure functions over a :class:`~tb_kineto_insights.trace.model.Trace`."""
