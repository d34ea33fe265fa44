"""One span's summary as the plugin serves it: the whole summary's JSON or one panel's,
once its load is done, else its load state.
"""

from __future__ import annotations

from tb_kineto_insights.logdir.discovery import Span
from tb_kineto_insights.service.errors import InvalidRequest, NotFound
from tb_kineto_insights.service.loader import SpanStatus
from tb_kineto_insights.service.workspace import Workspace
from tb_kineto_insights.summary import PANELS


def check_panel(panel: str | None) -> None:
    """Raises InvalidRequest when ``panel`` is not one of the summary's panels
    (:data:`~tb_kineto_insights.summary.PANELS`); None (the whole summary) is."""
    if panel is not None and panel not in PANELS:
        raise InvalidRequest(f"unknown panel {panel!r}; one of: {', '.join(PANELS)}")


def summary_answer(
    workspace: Workspace, span: Span, panel: str | None, wait_s: float
) -> bytes | SpanStatus:
    """The span's summary JSON (or only ``panel``'s), waiting up to ``wait_s`` for its
    load; else its status (queued, loading, or the load's error).

    Raises:
        InvalidRequest: an unknown panel.
        NotFound: the panel is absent from this summary.
    """
    check_panel(panel)
    status, result = workspace.load(span, wait_s)
    if result is None or result.summary is None:
        return status
    if panel is None:
        return result.summary
    body = result.panels.get(panel)
    if body is None:
        raise NotFound(f"the summary of this span has no panel {panel!r}")
    return body
