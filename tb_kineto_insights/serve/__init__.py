"""The TensorBoard plugin: HTTP routes over discovery, the cache and the analysis.

``plugin_loader`` is TensorBoard's entry point (flags, lazy import of the plugin);
``plugin`` the routes (JSON answers, typed errors → 4xx/5xx, static files);
``loader`` the queue of span loads with priorities and states; ``worker_pool`` the
bounded worker processes that read and analyse a trace under a deadline.

May import: ``compare``, ``store``, ``summary``, ``analysis``, ``logdir``, ``trace``,
``schema``; never ``cli``.
"""
