"""TensorBoard entry point (``tensorboard_plugins`` in setup.py): a light loader.

TensorBoard imports every entry point at start-up, so this module imports only
TensorBoard's ``base_plugin`` at top level. The plugin and its heavy dependencies
(numpy, msgspec, fsspec, the trace reader) are imported inside :meth:`load`; when that
fails (a missing or broken dependency), the loader logs a warning with the reason and
returns ``None``, which TensorBoard 2.x treats as "plugin not available"
(``TensorBoardWSGIApp`` skips loaders that return ``None``), so TensorBoard itself and
every other plugin keep working.
"""

from __future__ import annotations

import logging
from typing import Any

from tensorboard.plugins import base_plugin

__all__ = ["KinetoInsightsLoader"]

logger = logging.getLogger(__name__)


class KinetoInsightsLoader(base_plugin.TBLoader):
    """Loads :class:`tb_kineto_insights.plugin.KinetoInsightsPlugin` lazily."""

    def load(self, context: base_plugin.TBContext) -> Any:
        """The plugin instance, or ``None`` (plugin disabled) when it cannot be loaded."""
        try:
            # Heavy dependencies first, so a broken one is named in the warning.
            import fsspec  # noqa: F401
            import msgspec  # noqa: F401
            import numpy  # noqa: F401

            from tb_kineto_insights import plugin
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
