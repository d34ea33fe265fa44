"""Every diagnosis, one rule each: the only list of diagnosis ids.

:data:`RULES` holds one :class:`~tb_kineto_insights.analysis.rules.base.Rule` per stable
id (DESIGN.md: add ids, never rename), each defined in the module of its area
(``idle``, ``kernels``, ``transfers``, ``communication``, ``memory``, ``efficiency``,
``trace``). Everything else is derived from it: :data:`DIAGNOSIS_IDS`, the span-level
:func:`diagnose` (with each diagnosis's moment), the run-level :func:`diagnose_run`,
the labels the tab shows and the glossary's table (``make schema`` writes
``docs/schema/labels.json`` and the glossary section from it).

Rules are evaluated in :data:`RULES` order; a rule that reads another's outcome lists it
in ``after`` and comes after it. Diagnoses are reported most severe first, then by
impact (the share of step time at stake), then in :data:`RULES` order.
``docs/adding_a_diagnosis.md`` says how to add one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import msgspec

from tb_kineto_insights.analysis.rules import (
    communication,
    efficiency,
    idle,
    kernels,
    memory,
    trace,
    transfers,
)
from tb_kineto_insights.analysis.rules.base import (
    PANEL_TYPES,
    SEVERITY_ORDER,
    Rule,
    RunInput,
    SpanInput,
)
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.schema.diagnoses import Diagnosis, Moment

if TYPE_CHECKING:
    from tb_kineto_insights.analysis.trace_index import TraceIndex
    from tb_kineto_insights.analysis.what_if import WhatIf

__all__ = [
    "DIAGNOSIS_IDS",
    "RULES",
    "RULES_BY_ID",
    "SEVERITY_ORDER",
    "area_diagnoses",
    "diagnose",
    "diagnose_run",
    "moment_of",
    "sort_diagnoses",
    "straggler_superseded",
]

#: Every rule, in the order they are evaluated (and listed among equals).
RULES: tuple[Rule, ...] = (
    idle.OPTIMIZER_STEP_BOUND,
    kernels.SMALL_KERNEL_FLOOD,
    idle.GPU_IDLE_DATALOADER,
    idle.GPU_IDLE_HOST_SYNC,
    idle.GPU_IDLE_HOST_UNTRACED,
    idle.ALLOCATOR_CHURN,
    idle.CUDNN_AUTOTUNE_IN_STEP,
    transfers.PAGEABLE_MEMCPY,
    trace.NO_STEP_MARKERS,
    trace.TRACE_DATA_LOSS,
    idle.LOW_GPU_UTILIZATION,
    communication.COMMUNICATION_STRAGGLER,
    communication.EXPOSED_COMMUNICATION,
    memory.MEMORY_GROWTH,
    memory.MEMORY_FRAGMENTATION,
    memory.MEMORY_NEAR_CAPACITY,
    efficiency.MATMUL_WITHOUT_TENSOR_CORES,
    efficiency.LOW_KERNEL_EFFICIENCY,
    trace.TRACE_CUDA_LAUNCH_BLOCKING,
    trace.TRACE_TOO_FEW_STEPS,
    trace.TRACE_WARMUP_STEP,
    trace.TRACE_UNEQUAL_STEPS,
    trace.TRACE_PROFILER_OVERHEAD,
)
#: Rule of each id.
RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
#: Every diagnosis id the analysis can emit (stable: add, never rename).
DIAGNOSIS_IDS: tuple[str, ...] = tuple(RULES_BY_ID)
_POSITION = {r.id: i for i, r in enumerate(RULES)}


def sort_diagnoses(found: Sequence[Diagnosis]) -> list[Diagnosis]:
    """Most severe first, then by impact (share of step time at stake), then in
    :data:`RULES` order (a stable sort: equal diagnoses keep their order)."""
    return sorted(
        found,
        key=lambda d: (
            SEVERITY_ORDER.index(d.severity),
            -d.impact_fraction,
            _POSITION.get(d.id, len(RULES)),
        ),
    )


def _checked_panels(panels: Mapping[str, msgspec.Struct]) -> None:
    """Raises TypeError when a panel is not the Struct of its name."""
    for key, panel in panels.items():
        expected = PANEL_TYPES.get(key)
        if panel is not None and expected is not None and not isinstance(panel, expected):
            raise TypeError(
                f"diagnose: panel {key!r} is a {type(panel).__name__}, expected {expected.__name__}"
            )


def diagnose(
    index: TraceIndex,
    panels: Mapping[str, msgspec.Struct],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    what_if: WhatIf | None = None,
) -> list[Diagnosis]:
    """Diagnoses for one trace from its panels, each with its moment when it has one,
    most severe first, then by impact (share of step time at stake). ``what_if``: the
    replay service the rules that recommend a fix ask for its step
    (:mod:`~tb_kineto_insights.analysis.what_if`; without it they estimate).

    ``panels``: panel name → its Struct (``steps`` :class:`StepsPanel`, ``kernels``
    :class:`KernelsPanel`, ``idle`` :class:`IdlePanel`, ``communication``
    :class:`CommunicationPanel`, ``memory`` :class:`MemoryPanel`, ``health``
    :class:`HealthPanel`, ``efficiency`` :class:`EfficiencyPanel`); a panel left out
    raises none of the diagnoses whose rule needs it.

    Raises:
        TypeError: a panel is not the Struct of its name.
    """
    _checked_panels(panels)
    inp = SpanInput(index, panels, thresholds, what_if=what_if)
    for rule in RULES:
        if rule.check is None or any(panels.get(p) is None for p in rule.panels):
            continue
        found = rule.check(inp)
        if found is None:
            continue
        if rule.exclusive is not None and rule.exclusive(found):
            return [found]
        inp.raised.append(found)
    out = []
    for d in inp.raised:
        rule = RULES_BY_ID[d.id]
        moment = rule.moment(d, inp) if rule.moment is not None else None
        out.append(d if moment is None else msgspec.structs.replace(d, moment=moment))
    return sort_diagnoses(out)


def moment_of(
    d: Diagnosis,
    index: TraceIndex,
    panels: Mapping[str, msgspec.Struct],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> Moment | None:
    """The moment of one span-level diagnosis (its rule's ``moment``), or None when it
    has none or its rule points at nothing in a step window."""
    rule = RULES_BY_ID.get(d.id)
    if rule is None or rule.moment is None:
        return None
    return rule.moment(d, SpanInput(index, panels, thresholds))


#: Areas whose span-level checks read the trace index (not only panels).
_AREAS_READING_THE_INDEX = frozenset({"idle", "transfers"})


def area_diagnoses(
    area: str,
    panels: Mapping[str, msgspec.Struct],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    index: TraceIndex | None = None,
) -> list[Diagnosis]:
    """The span-level diagnoses of one area's rules alone (``"memory"``,
    ``"communication"``, ``"trace"``, ``"efficiency"``…), in :data:`RULES` order,
    without moments; a rule sees only the diagnoses of its area raised before it. What
    a panel's own tests check; :func:`diagnose` is the analysis.

    Raises:
        ValueError: ``area`` is unknown, or reads the trace index and ``index`` is None.
    """
    if area not in {r.area for r in RULES}:
        raise ValueError(f"unknown area {area!r}")
    if index is None and area in _AREAS_READING_THE_INDEX:
        raise ValueError(f"the rules of area {area!r} read the trace index: pass index=")
    _checked_panels(panels)
    inp = SpanInput(cast("TraceIndex", index), panels, thresholds)
    for rule in RULES:
        if rule.area != area or rule.check is None:
            continue
        if any(panels.get(p) is None for p in rule.panels):
            continue
        found = rule.check(inp)
        if found is not None:
            inp.raised.append(found)
    return list(inp.raised)


def diagnose_run(
    run: Mapping[str, Any],
    workers: Sequence[tuple[str, Any]],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    """The diagnoses of the view across ranks (``run``: the dict of
    :func:`~tb_kineto_insights.analysis.run_view.run_summary`; ``workers``: the
    ``(worker, span summary)`` pairs it was made from), each with its moment on one
    rank's timeline, in :data:`RULES` order."""
    inp = RunInput(run, workers, thresholds)
    out = []
    for rule in RULES:
        if rule.run_check is None:
            continue
        for d in rule.run_check(inp):
            moment = rule.run_moment(d, inp) if rule.run_moment is not None else None
            out.append(d if moment is None else msgspec.structs.replace(d, moment=moment))
    return out


def straggler_superseded(d: Diagnosis) -> str | None:
    """For a run-level ``communication_straggler``: the span-level diagnosis of the
    straggler rank that claims the same cause (the rule whose ``idle_cause`` is the
    straggler's cause class: host untraced, data loading, a sync, the optimizer step,
    the allocator), which the straggler's measure across ranks replaces (what fixing it
    gives the job is the straggler's prediction, not the rank's own); None otherwise."""
    if d.id != "communication_straggler" or d.panel != "run":
        return None
    cause = d.evidence.get("cause") or {}
    klass = cause.get("class") if isinstance(cause, dict) else None
    return next((r.id for r in RULES if klass and r.idle_cause == klass), None)


def replaces_span_diagnosis(d: Diagnosis) -> bool:
    """Whether a run-level diagnosis replaces its rank's span-level one of the same id
    (its rule's ``run_replaces_span``)."""
    rule = RULES_BY_ID.get(d.id)
    return rule is not None and rule.run_replaces_span and d.panel == "run"
