"""Settings read from environment variables, one parsing rule for all of them."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

logger = logging.getLogger(__name__)


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
        logger.warning("%s=%r is not a number of seconds >= 0; using %s", name, raw, default)
        return default
    return value
