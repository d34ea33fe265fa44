"""Discovery: log directories → runs → workers → spans (one trace file each).

Takes log-directory locations (local folders, NFS, fsspec URLs such as ``s3://``) and
gives :class:`~tb_kineto_insights.logdir.discovery.Run` /
:class:`~tb_kineto_insights.logdir.discovery.Span` records (``discovery``), and watches
local folders for new traces (``watch``). It opens a file only to look at its head, and
knows nothing of analysis.

May import: ``trace`` (its confined file access and local-path helpers) and the standard
library; nothing above.
"""
