"""Shape of ``summary``: filled by ``summary.summarize_trace``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out
from tb_kineto_insights.schema.communication import CommunicationPanel
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.efficiency import EfficiencyPanel
from tb_kineto_insights.schema.health import HealthPanel
from tb_kineto_insights.schema.idle import IdlePanel
from tb_kineto_insights.schema.kernels import KernelsPanel
from tb_kineto_insights.schema.memory import MemoryPanel
from tb_kineto_insights.schema.steps import StepsPanel
from tb_kineto_insights.schema.tables import TablesPanel
from tb_kineto_insights.schema.what_if import CriticalPathPanel, WhatIfPanel


class Summary(Out, frozen=True, kw_only=True):
    """One span's summary (``summary.summarize_trace``): one key per panel, in
    ``summary.PANELS`` order. Times are µs from the trace's own clock, shares are in
    [0, 1]."""

    diagnoses: list[Diagnosis]
    what_if: WhatIfPanel
    steps: StepsPanel
    critical_path: CriticalPathPanel
    kernels: KernelsPanel
    idle: IdlePanel
    communication: CommunicationPanel
    memory: MemoryPanel
    efficiency: EfficiencyPanel
    health: HealthPanel
    tables: TablesPanel
