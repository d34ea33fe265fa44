"""The command line ``tb-kineto-insights``: report, diff, check, index, doctor.

``main`` parses the arguments (it imports only what its parser needs, so ``--version``
and ``--help`` start fast); ``report`` builds and renders the report of runs;
``index`` precomputes a log directory's summaries (locally or on Dask);
``doctor`` checks an installation; ``json_output`` writes strict JSON.

May import every other subpackage (it is the top layer, beside ``serve``).
"""
