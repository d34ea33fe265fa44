"""The shape of a diagnosis rule and of what it produces.

A **diagnosis** is a :class:`~tb_kineto_insights.schema.diagnoses.Diagnosis` (DESIGN.md,
Diagnoses): a stable ``id`` (add, never rename), a ``severity`` from
:data:`SEVERITY_ORDER`, a one-line ``title`` generated from its evidence, the
``evidence`` numbers that triggered it, a concrete ``recommendation``, the summary
``panel`` with the details, and ``impact_fraction``, the share of step time at stake (0
when none is, e.g. memory).

A **rule** (:class:`Rule`) is the one record of a diagnosis id: what it reads (panels,
thresholds, the outcome of the rules it comes after), how it is evaluated on one span
(:class:`SpanInput`) and, for the view across ranks, on a run, where it can be seen on
the timeline (its moment), the label and glossary definition front ends show, and the
fix it recommends. A rule that recommends a fix states what the fix changes in the
step's dependency graph and asks the replay for the step it gives
(:func:`fix_prediction`, :mod:`~tb_kineto_insights.analysis.what_if`): that prediction is
its ``impact_fraction`` and its ``prediction``. :mod:`tb_kineto_insights.analysis.rules`
lists every rule once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.units import fmt_duration_us
from tb_kineto_insights.schema.communication import CommunicationPanel
from tb_kineto_insights.schema.diagnoses import Diagnosis, FixPrediction, Moment
from tb_kineto_insights.schema.efficiency import EfficiencyPanel
from tb_kineto_insights.schema.health import HealthPanel
from tb_kineto_insights.schema.idle import IdleDevice, IdlePanel
from tb_kineto_insights.schema.kernels import KernelsPanel
from tb_kineto_insights.schema.memory import MemoryPanel
from tb_kineto_insights.schema.steps import StepsPanel

if TYPE_CHECKING:
    from tb_kineto_insights.analysis.replay import Change
    from tb_kineto_insights.analysis.trace_index import TraceIndex
    from tb_kineto_insights.analysis.what_if import WhatIf

#: Severities, most severe first (the order every list of diagnoses is sorted in).
SEVERITY_ORDER: tuple[str, ...] = ("high", "medium", "low", "info")
#: The areas rules are grouped in (one module of ``analysis/rules/`` each), in the order
#: the glossary lists them.
AREAS: tuple[str, ...] = (
    "idle",
    "kernels",
    "transfers",
    "communication",
    "memory",
    "efficiency",
    "trace",
)
#: The thresholds :func:`severity_for_impact` reads: every rule whose severity follows
#: its impact declares them.
IMPACT_THRESHOLDS: tuple[str, ...] = (
    "min_impact_fraction",
    "impact_medium_fraction",
    "impact_high_fraction",
)
#: The panels :func:`~tb_kineto_insights.analysis.rules.diagnose` may be given, by name.
PANEL_TYPES: dict[str, type[msgspec.Struct]] = {
    "steps": StepsPanel,
    "kernels": KernelsPanel,
    "idle": IdlePanel,
    "communication": CommunicationPanel,
    "memory": MemoryPanel,
    "efficiency": EfficiencyPanel,
    "health": HealthPanel,
}

_P = TypeVar("_P", bound=msgspec.Struct)


@dataclass
class SpanInput:
    """What a span-level rule reads: the trace index, the panels (name → Struct; a panel
    left out is None), the thresholds and the diagnoses raised so far by the rules listed
    before it (:attr:`Rule.after` names those whose outcome it reads)."""

    index: TraceIndex
    panels: Mapping[str, msgspec.Struct]
    th: Thresholds
    raised: list[Diagnosis] = field(default_factory=list)
    #: the replay service (None without a dependency graph: rules keep their formula)
    what_if: WhatIf | None = None

    def _panel(self, key: str, struct_type: type[_P]) -> _P | None:
        panel = self.panels.get(key)
        return panel if isinstance(panel, struct_type) else None

    @property
    def steps(self) -> StepsPanel | None:
        return self._panel("steps", StepsPanel)

    @property
    def kernels(self) -> KernelsPanel | None:
        return self._panel("kernels", KernelsPanel)

    @property
    def idle(self) -> IdlePanel | None:
        return self._panel("idle", IdlePanel)

    @property
    def communication(self) -> CommunicationPanel | None:
        return self._panel("communication", CommunicationPanel)

    @property
    def memory(self) -> MemoryPanel | None:
        return self._panel("memory", MemoryPanel)

    @property
    def efficiency(self) -> EfficiencyPanel | None:
        return self._panel("efficiency", EfficiencyPanel)

    @property
    def health(self) -> HealthPanel | None:
        return self._panel("health", HealthPanel)

    def was_raised(self, id_: str) -> bool:
        """Whether a rule listed before this one raised ``id_``."""
        return any(d.id == id_ for d in self.raised)


@dataclass(frozen=True)
class RunInput:
    """What a run-level rule reads: the view across ranks before its diagnoses (the
    dict of :func:`~tb_kineto_insights.analysis.run_view.run_summary`), the
    ``(worker, span summary)`` pairs it was made from, and the thresholds."""

    run: Mapping[str, Any]
    workers: Sequence[tuple[str, Any]]
    th: Thresholds


#: A span-level check: the diagnosis it raises on one span, or None.
SpanCheck = Callable[[SpanInput], "Diagnosis | None"]
#: Where a span-level diagnosis can be seen on the span's timeline, or None.
SpanMoment = Callable[[Diagnosis, SpanInput], "Moment | None"]
#: A run-level check: the diagnoses it raises on the view across ranks (several: one
#: per rank for some).
RunCheck = Callable[[RunInput], "list[Diagnosis]"]
#: Where a run-level diagnosis can be seen, on one rank's timeline (``Moment.worker``).
RunMoment = Callable[[Diagnosis, RunInput], "Moment | None"]


@dataclass(frozen=True)
class Fix:
    """The fix a rule recommends, named in a few words (``"foreach or fused
    optimizer"``); the rule's ``recommendation`` text says how. The transformation
    that predicts its effect on the step belongs here too."""

    label: str


@dataclass(frozen=True)
class Rule:
    """The one record of a diagnosis id (module docstring).

    ``panels``: the summary panels it needs; without one of them the rule is not
    evaluated. ``thresholds``: the :class:`~.thresholds.Thresholds` fields it reads
    (``tests/test_rules.py`` checks them). ``check`` / ``moment``: its span-level
    evaluation and moment; ``run_check`` / ``run_moment``: the same across ranks.
    ``after``: ids whose outcome it reads (``SpanInput.raised``), listed before it in
    ``RULES``. ``exclusive``: when it holds for the raised diagnosis, that diagnosis is
    the only one reported (nothing usable is left to diagnose). ``run_replaces_span``:
    its run-level diagnosis of a rank replaces that rank's span-level one (measured
    across ranks, not estimated). ``idle_cause``: the idle cause (``analysis/idle.py``)
    whose time it claims: ``low_gpu_utilization`` does not count that time again.
    ``label`` / ``definition``: the tab's name for it and
    the glossary's entry (``docs/schema/labels.json`` and ``docs/glossary.md`` are
    generated from them: ``make schema``). ``fix``: the fix it recommends."""

    id: str
    area: str
    label: str
    definition: str
    panels: tuple[str, ...] = ()
    thresholds: tuple[str, ...] = ()
    check: SpanCheck | None = None
    moment: SpanMoment | None = None
    run_check: RunCheck | None = None
    run_moment: RunMoment | None = None
    after: tuple[str, ...] = ()
    exclusive: Callable[[Diagnosis], bool] | None = None
    run_replaces_span: bool = False
    idle_cause: str | None = None
    fix: Fix | None = None


def severity_for_impact(impact_fraction: float, th: Thresholds) -> str | None:
    """Severity of a diagnosis from what it costs: its ``impact_fraction`` (share of step
    time it explains, 0..1). ``None`` below ``th.min_impact_fraction`` (raise nothing),
    ``low`` below ``th.impact_medium_fraction``, ``medium`` below
    ``th.impact_high_fraction``, else ``high``."""
    if not impact_fraction >= th.min_impact_fraction:  # also catches NaN
        return None
    if impact_fraction >= th.impact_high_fraction:
        return "high"
    if impact_fraction >= th.impact_medium_fraction:
        return "medium"
    return "low"


def make_diagnosis(
    id_: str,
    severity: str,
    title: str,
    evidence: dict[str, Any],
    recommendation: str,
    panel: str,
    impact_fraction: float = 0.0,
    prediction: FixPrediction | None = None,
) -> Diagnosis:
    """One :class:`~tb_kineto_insights.schema.diagnoses.Diagnosis` (module docstring);
    ``prediction``: the step its fix gives (:func:`fix_prediction`).

    Raises:
        ValueError: ``severity`` is not one of :data:`SEVERITY_ORDER`, or ``id_`` has no
            rule (``analysis/rules/__init__.py`` ``RULES``).
    """
    if severity not in SEVERITY_ORDER:
        raise ValueError(f"unknown severity {severity!r}")
    from tb_kineto_insights.analysis.rules import RULES_BY_ID  # the list imports this module

    if id_ not in RULES_BY_ID:
        raise ValueError(f"unregistered diagnosis id {id_!r}: add its rule to RULES")
    return Diagnosis(
        id=id_,
        severity=severity,
        title=title,
        evidence=evidence,
        recommendation=recommendation,
        panel=panel,
        impact_fraction=impact_fraction,
        prediction=msgspec.UNSET if prediction is None else prediction,
    )


def fix_prediction(
    inp: SpanInput,
    id_: str,
    fix: str,
    change: Callable[[WhatIf], Change | None],
    formula_saving: float,
) -> FixPrediction | None:
    """The step time diagnosis ``id_``'s fix would give: the step's graph replayed with
    ``change(service)`` (labelled ``fix``), or, without a graph or a change, the rule's
    own ``formula_saving`` (share of the step) as an ``"estimate"``; None without a
    step time. Its ``saving_fraction`` is the diagnosis' ``impact_fraction``."""
    from tb_kineto_insights.analysis.what_if import estimate  # the service imports rules

    service = inp.what_if
    if service is not None:
        found = change(service)
        if found is not None:
            return service.prediction(id_, dataclasses.replace(found, label=fix))
    steps = inp.steps
    return estimate(fix, steps.mean_step_us if steps is not None else None, formula_saving)


def pct(x: float) -> str:
    """A share as a whole percentage for a title: ``"64 %"``."""
    return f"{100 * x:.0f} %"


def duration(us: float) -> str:
    """A duration for a title (:func:`~tb_kineto_insights.analysis.units.fmt_duration_us`:
    µs below 1 ms, ms below 1 s, else s; one decimal in ms and s)."""
    return fmt_duration_us(us, 1)


def main_idle(idle: IdlePanel | None) -> IdleDevice | None:
    """The idle panel's entry of its main device (:meth:`IdlePanel.main_entry`), or
    None."""
    return idle.main_entry() if idle is not None else None
