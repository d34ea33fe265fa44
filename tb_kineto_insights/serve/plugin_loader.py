"""TensorBoard entry point (``tensorboard_plugins`` in setup.py): a light loader.

TensorBoard imports every entry point at start-up, so this module imports only
TensorBoard's ``base_plugin`` at top level. The plugin and its heavy dependencies
(numpy, msgspec, fsspec, the trace reader) are imported inside :meth:`load`; when that
fails (a missing or broken dependency), the loader logs a warning with the reason and
returns ``None``, which TensorBoard 2.x treats as "plugin not available"
(``TensorBoardWSGIApp`` skips loaders that return ``None``), so TensorBoard itself and
every other plugin keep working.

The loader also adds the plugin's command-line flags to ``tensorboard`` (each one
overrides its environment variable; unset, the environment variable or the default
applies):

- ``--kineto_insights_cache_dir DIR``: summary cache folder, a local or NFS path or an
  fsspec URL such as ``s3://bucket/cache`` (``none``: memory only); environment
  ``KINETO_INSIGHTS_CACHE_DIR``, default ``~/.cache/tb-kineto-insights``. Entries are
  keyed on the trace's content, so teammates (and ``report --cache``) share them.
- ``--kineto_insights_workers N``: worker processes loading traces (0: a thread);
  environment ``KINETO_INSIGHTS_WORKERS``, default one per core, at most 4.
- ``--kineto_insights_rescan_s S``: seconds between re-scans of the log directory;
  environment ``KINETO_INSIGHTS_RESCAN_S``, default 30.
- ``--kineto_insights_load_timeout_s S`` and ``--kineto_insights_load_timeout_s_per_mib
  S``: a load in a worker process is killed (and the span answers an error that a
  request retries after a back-off: ``KINETO_INSIGHTS_RETRY_BACKOFF_S``, default 30 s,
  doubled at each failure in a row) after ``S + S_per_mib × file size in MiB`` seconds;
  environment ``KINETO_INSIGHTS_LOAD_TIMEOUT_S`` / ``KINETO_INSIGHTS_LOAD_TIMEOUT_S_PER_MIB``,
  default 120 and 2; both 0: no deadline.
- ``--kineto_insights_retry_backoff_s S``: seconds before a file whose load timed out,
  passed its memory cap or killed its worker is read again (doubled at each failure in
  a row, at most 900); environment ``KINETO_INSIGHTS_RETRY_BACKOFF_S``, default 30.
- ``--kineto_insights_cache_key_file FILE``: a key shared by the cache folder's users;
  its files are then sealed with an HMAC and one written without the key is computed
  again (``store/seal.py`` states the trust model); environment
  ``KINETO_INSIGHTS_CACHE_KEY_FILE``, default none.
- ``--kineto_insights_load_max_rss_mib MIB``: a load whose worker process (with its
  decode processes) holds more resident memory is stopped, and the span answers an
  error naming the cap; environment ``KINETO_INSIGHTS_LOAD_MAX_RSS_MIB``, default half
  the machine's memory; 0: no cap.
"""

from __future__ import annotations

import argparse
import logging
import math
from typing import Any

from tensorboard.plugins import base_plugin

__all__ = ["KinetoInsightsLoader"]

logger = logging.getLogger(__name__)


class KinetoInsightsLoader(base_plugin.TBLoader):
    """Loads :class:`tb_kineto_insights.serve.plugin.KinetoInsightsPlugin` lazily."""

    def define_flags(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("kineto_insights")
        group.add_argument(
            "--kineto_insights_cache_dir",
            metavar="DIR",
            type=str,
            default=None,
            help="Kineto Insights: folder for cached trace summaries, shared by restarts "
            "and by everyone pointed at it, wherever their log directory is mounted: a "
            "local or NFS path, or an fsspec URL such as s3://bucket/cache ('none': "
            "memory only). Default: "
            "$KINETO_INSIGHTS_CACHE_DIR, else ~/.cache/tb-kineto-insights.",
        )
        group.add_argument(
            "--kineto_insights_workers",
            metavar="N",
            type=int,
            default=None,
            help="Kineto Insights: how many worker processes read trace files at once "
            "(0: a thread of the TensorBoard process). Default: $KINETO_INSIGHTS_WORKERS, "
            "else one per core, at most 4.",
        )
        group.add_argument(
            "--kineto_insights_rescan_s",
            metavar="SECONDS",
            type=float,
            default=None,
            help="Kineto Insights: seconds between re-scans of the log directory for new "
            "runs and spans. Default: $KINETO_INSIGHTS_RESCAN_S, else 30.",
        )

        group.add_argument(
            "--kineto_insights_load_timeout_s",
            metavar="SECONDS",
            type=float,
            default=None,
            help="Kineto Insights: base of a trace load's deadline; a load in a worker "
            "process taking longer than this plus --kineto_insights_load_timeout_s_per_mib "
            "x the file's MiB is stopped and reported (asking again retries). Default: "
            "$KINETO_INSIGHTS_LOAD_TIMEOUT_S, else 120.",
        )
        group.add_argument(
            "--kineto_insights_load_timeout_s_per_mib",
            metavar="SECONDS",
            type=float,
            default=None,
            help="Kineto Insights: seconds added to a load's deadline per MiB of the trace "
            "file (compressed size for .gz). Default: "
            "$KINETO_INSIGHTS_LOAD_TIMEOUT_S_PER_MIB, else 2.",
        )

        group.add_argument(
            "--kineto_insights_retry_backoff_s",
            metavar="SECONDS",
            type=float,
            default=None,
            help="Kineto Insights: seconds before a file whose load timed out, passed its "
            "memory cap or killed its worker is read again (doubled at each failure in a "
            "row, at most 900; until then asking answers the error). Default: "
            "$KINETO_INSIGHTS_RETRY_BACKOFF_S, else 30.",
        )
        group.add_argument(
            "--kineto_insights_load_max_rss_mib",
            metavar="MIB",
            type=float,
            default=None,
            help="Kineto Insights: memory cap of one trace load, MiB of resident memory of "
            "its worker process and decode processes together; a load over it is stopped "
            "and reported (0: no cap). Default: $KINETO_INSIGHTS_LOAD_MAX_RSS_MIB, else "
            "half the machine's memory.",
        )

        group.add_argument(
            "--kineto_insights_cache_key_file",
            metavar="FILE",
            type=str,
            default=None,
            help="Kineto Insights: a file holding a key shared by everyone who uses the "
            "cache folder (at least 16 bytes: openssl rand -hex 32 > FILE); cache files "
            "are then sealed with an HMAC of it, and one written without it is recomputed, "
            "never served. Default: $KINETO_INSIGHTS_CACHE_KEY_FILE, else none (anyone "
            "who can write the cache folder can forge its summaries).",
        )

        group.add_argument(
            "--kineto_insights_perfetto_url",
            metavar="URL",
            type=str,
            default=None,
            help="Kineto Insights: Perfetto UI, where 'Open in Perfetto' sends a step's "
            "window (a self-hosted or offline copy). Default: $KINETO_INSIGHTS_PERFETTO_URL, "
            "else https://ui.perfetto.dev.",
        )

        group.add_argument(
            "--kineto_insights_follow_symlinks",
            metavar="DIRS",
            type=str,
            default=None,
            help="Kineto Insights: folders (separated by ':') whose symlinked run folders "
            "and trace files are read; a symlink that leaves the log directory and every "
            "one of them is still refused. Default: $KINETO_INSIGHTS_FOLLOW_SYMLINKS, else "
            "none (symlinks to outside the log directory are not followed).",
        )

    def fix_flags(self, flags: argparse.Namespace) -> None:
        workers = getattr(flags, "kineto_insights_workers", None)
        if workers is not None and workers < 0:
            raise base_plugin.FlagsError("--kineto_insights_workers must be >= 0")
        rescan = getattr(flags, "kineto_insights_rescan_s", None)
        if rescan is not None and (not math.isfinite(rescan) or rescan < 0):
            raise base_plugin.FlagsError("--kineto_insights_rescan_s must be a number >= 0")
        key_file = getattr(flags, "kineto_insights_cache_key_file", None)
        if key_file is not None:
            from tb_kineto_insights.store.seal import CacheKeyError, read_key_file

            try:
                read_key_file(key_file)
            except CacheKeyError as exc:
                raise base_plugin.FlagsError(f"--kineto_insights_cache_key_file: {exc}") from exc
        url = getattr(flags, "kineto_insights_perfetto_url", None)
        if url is not None and not url.startswith(("http://", "https://")):
            raise base_plugin.FlagsError("--kineto_insights_perfetto_url must be an http(s) URL")
        for name in (
            "kineto_insights_load_timeout_s",
            "kineto_insights_load_timeout_s_per_mib",
            "kineto_insights_retry_backoff_s",
            "kineto_insights_load_max_rss_mib",
        ):
            value = getattr(flags, name, None)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise base_plugin.FlagsError(f"--{name} must be a number >= 0")

    def load(self, context: base_plugin.TBContext) -> Any:
        """The plugin instance, or ``None`` (plugin disabled) when it cannot be loaded."""
        try:
            # Heavy dependencies first, so a broken one is named in the warning.
            import fsspec  # noqa: F401
            import msgspec  # noqa: F401
            import numpy  # noqa: F401

            from tb_kineto_insights.serve import plugin
        except Exception as exc:  # ImportError, or any error from a broken dependency
            logger.warning(
                "Kineto Insights plugin disabled: cannot import its dependencies (%s: %s)",
                type(exc).__name__,
                exc,
            )
            return None
        try:
            return plugin.KinetoInsightsPlugin(context)
        except Exception as exc:
            logger.warning(
                "Kineto Insights plugin disabled: cannot start it (%s: %s)",
                type(exc).__name__,
                exc,
            )
            return None
