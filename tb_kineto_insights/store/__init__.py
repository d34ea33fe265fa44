"""The cache: summaries kept by content identity, so that nobody re-parses a trace that a
teammate already read.

Takes a span's identity (path, size, mtime, content id) and the analysis settings, and
gives the cached :class:`~tb_kineto_insights.schema.Summary` or computes and stores it.
``cache`` (entries, keys, disk cache), ``backends`` (local folder and fsspec stores),
``content_id`` (file identity from head and tail bytes), ``cached_summaries`` (the
command line's summarise-through-the-cache), ``settings`` (environment variables of the
cache and timeouts).

May import: ``summary``, ``analysis`` (thresholds), ``logdir``, ``trace``, ``schema``;
never ``compare``, ``serve`` or ``cli``.
"""
