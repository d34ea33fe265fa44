"""Settings read from environment variables, one parsing rule for all of them."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

#: The shared summary cache's folder or URL (the TensorBoard plugin's cache; the command
#: line's default when ``--cache`` is not given). Here, not in ``cache.py``, so that the
#: command line reads it without importing the cache machinery.
CACHE_DIR_ENV = "KINETO_INSIGHTS_CACHE_DIR"


def cli_cache_location(flag: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The cache the command line uses: ``flag`` (``--cache``), else
    ``KINETO_INSIGHTS_CACHE_DIR``, else None (no cache); ``none`` (any case) is None."""
    env = os.environ if environ is None else environ
    raw = flag if flag is not None and flag.strip() else env.get(CACHE_DIR_ENV)
    if raw is None or not raw.strip() or raw.strip().lower() == "none":
        return None
    raw = raw.strip()
    return raw if "://" in raw or "::" in raw else os.path.expanduser(raw)


def seconds_from_env(env: Mapping[str, str], name: str, default: float) -> float:
    """Seconds from ``env[name]``: a finite number >= 0. ``default`` when the variable is
    unset or blank, and also (with a warning naming the variable) when it is not such a
    number. Raises nothing."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        import logging  # here: at the top every start-up would pay it, for a rare warning

        logging.getLogger(__name__).warning(
            "%s=%r is not a number of seconds >= 0; using %s", name, raw, default
        )
        return default
    return value
