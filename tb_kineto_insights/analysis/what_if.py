"""What a fix would give: the replay service the rules ask, and ``summary.what_if``.

Every rule that recommends a fix says what the fix changes in the step's dependency
graph (a :class:`~.replay.Change`: host time of a class removed, a wait removed, some
kernels shorter, launch costs gone) and asks :meth:`WhatIf.prediction` for the step
time that gives: the graph replayed with the change, against the same graph replayed
unchanged (which gives back the measured steps: ``replay_error_fraction``). The
prediction's saving is the diagnosis' ``impact_fraction``: one source of truth for the
cost a card states, the rank of its fix and the What-if section. Without a graph (no
step markers, no runtime calls on the step's threads) a rule keeps its own formula and
the prediction says ``"estimate"``.

The What-if section ranks the fixes by predicted step time and replays the top fixes
*together* (their changes joined: :meth:`~.replay.Change.plus`), so "with bf16 as well"
is a replay, not a sum of savings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis.replay import Change, Replay, identity_error, replay
from tb_kineto_insights.analysis.step_graph import LAUNCH, StepGraph
from tb_kineto_insights.analysis.step_windows import GPU_WORK_KINDS
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.analysis.units import fmt_duration_us
from tb_kineto_insights.schema.diagnoses import Diagnosis, FixPrediction
from tb_kineto_insights.schema.what_if import WhatIfCombined, WhatIfFix, WhatIfPanel

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

#: Fixes replayed together in ``what_if.combined`` (the largest savings).
COMBINED_TOP = 3


@dataclass
class WhatIf:
    """The replay service of one span (module docstring). ``kernel_groups``: the
    efficiency panel's op groups, ``(op, shapes, dtype)`` → their kernel rows (what the
    efficiency rules change)."""

    index: TraceIndex
    graph: StepGraph
    actual: Replay
    actual_step_us: float
    kernel_groups: dict[tuple[str, str, str], I64] = field(default_factory=dict)
    #: the change behind each prediction made, by diagnosis id (for the combined replay)
    changes: dict[str, Change] = field(default_factory=dict)

    @classmethod
    def of(
        cls, index: TraceIndex, graph: StepGraph | None, kernel_groups: dict | None = None
    ) -> WhatIf | None:
        """The service for ``index``'s graph; None without a graph."""
        if graph is None or graph.n_steps == 0:
            return None
        actual = replay(graph)
        steps = index.steps
        step_us = float(steps.dur_ns.mean()) / 1000.0 if len(steps) else 0.0
        if step_us <= 0:
            return None
        return cls(index, graph, actual, step_us, dict(kernel_groups or {}))

    @property
    def replay_error(self) -> float:
        """|unchanged replay − measured| ÷ measured mean step."""
        return identity_error(self.graph, self.actual)

    def predict_us(self, change: Change) -> float:
        """The mean steady step (µs) with ``change``: the measured mean scaled by the
        changed replay over the unchanged one (the graph's small error cancels)."""
        base = self.actual.mean_step_ns
        new = replay(self.graph, change).mean_step_ns
        return self.actual_step_us * new / base if base > 0 else self.actual_step_us

    def prediction(self, diagnosis_id: str, change: Change) -> FixPrediction:
        """The diagnosis' :class:`FixPrediction` for ``change`` (kept for the combined
        replay under ``diagnosis_id``)."""
        self.changes[diagnosis_id] = change
        return prediction_of(change.label, "replay", self.actual_step_us, self.predict_us(change))

    # ---------------------------------------------------------------- selections

    def ops_of_rows(self, kind: str, rows: npt.ArrayLike) -> Mask:
        """Per GPU operation of the graph: whether it is one of ``rows`` of table ``kind``
        (a kernel, memcpy or memset table)."""
        g = self.graph
        t = GPU_WORK_KINDS.index(kind)
        wanted = np.zeros(len(self.index.trace.tables[kind]), dtype=np.bool_)
        wanted[np.asarray(rows, dtype=np.int64)] = True
        out = np.zeros(g.op_start.size, dtype=np.bool_)
        sel = g.op_table == t
        out[sel] = wanted[g.op_row[sel]]
        return out

    def ops_where_kernel_name(self, predicate: object) -> Mask:
        """Per GPU operation: a kernel whose name satisfies ``predicate`` (a function of
        the name, cached on the index)."""
        g = self.graph
        kernels = self.index.trace.kernels
        by_name = self.index.name_class(predicate)  # type: ignore[arg-type]
        out = np.zeros(g.op_start.size, dtype=np.bool_)
        sel = g.op_table == 0
        out[sel] = by_name[kernels.name[g.op_row[sel]]]
        return out

    def launch_events_of(self, ops: Mask) -> Mask:
        """Per chain event: a launch call that launched one of ``ops``."""
        g = self.graph
        out = np.zeros(g.gap.size, dtype=np.bool_)
        launcher = g.op_launcher[ops & (g.op_launcher >= 0)]
        out[launcher] = True
        return out & (g.kind == LAUNCH)

    def events_where(self, predicate: object) -> Mask:
        """Per chain event: a runtime call whose name satisfies ``predicate``."""
        g = self.graph
        by_name = self.index.name_class(predicate)  # type: ignore[arg-type]
        out = np.zeros(g.gap.size, dtype=np.bool_)
        call = g.name >= 0
        out[call] = by_name[g.name[call]]
        return out


def prediction_of(fix: str, method: str, actual_us: float, predicted_us: float) -> FixPrediction:
    """A :class:`FixPrediction` from the actual and predicted mean step (µs)."""
    predicted = max(predicted_us, 0.0)
    return FixPrediction(
        fix=fix,
        method=method,
        actual_step_us=round(actual_us, 3),
        predicted_step_us=round(predicted, 3),
        speedup=round(actual_us / predicted, 3) if predicted > 0 else 0.0,
        saving_fraction=round(1.0 - predicted / actual_us, 4) if actual_us > 0 else 0.0,
    )


def estimate(fix: str, actual_us: float | None, saving_fraction: float) -> FixPrediction | None:
    """A prediction from a rule's own formula (no graph to replay): ``"estimate"``."""
    if not actual_us:
        return None
    return prediction_of(fix, "estimate", actual_us, actual_us * (1.0 - saving_fraction))


def what_if_summary(
    diagnoses: list[Diagnosis], service: WhatIf | None, actual_step_us: float | None
) -> WhatIfPanel:
    """``summary.what_if`` (module docstring): the fixes of ``diagnoses`` that carry a
    prediction, fastest predicted step first, and the top :data:`COMBINED_TOP` replayed
    fixes together."""
    fixes = [
        WhatIfFix(
            diagnosis=d.id,
            fix=d.prediction.fix,
            method=d.prediction.method,
            predicted_step_us=d.prediction.predicted_step_us,
            speedup=d.prediction.speedup,
            saving_fraction=d.prediction.saving_fraction,
            moment=d.moment,
        )
        for d in diagnoses
        if not isinstance(d.prediction, msgspec.UnsetType)
    ]
    fixes.sort(key=lambda f: (f.predicted_step_us, f.diagnosis))
    notes: list[str] = []
    combined = None
    if service is None:
        notes.append(
            "No dependency graph to replay (no ProfilerStep markers, or no runtime calls on "
            "the step's threads): predictions are the rules' own estimates."
        )
    else:
        top = [f for f in fixes if f.method == "replay" and f.saving_fraction > 0]
        top = top[:COMBINED_TOP]
        if len(top) >= 2:
            change = service.changes[top[0].diagnosis]
            for f in top[1:]:
                change = change.plus(service.changes[f.diagnosis])
            predicted = service.predict_us(change)
            p = prediction_of(change.label, "replay", service.actual_step_us, predicted)
            combined = WhatIfCombined(
                diagnoses=[f.diagnosis for f in top],
                predicted_step_us=p.predicted_step_us,
                speedup=p.speedup,
                saving_fraction=p.saving_fraction,
            )
    return WhatIfPanel(
        actual_step_us=round(actual_step_us, 3) if actual_step_us else None,
        replay_error_fraction=round(service.replay_error, 4) if service is not None else None,
        fixes=fixes,
        combined=combined,
        notes=notes,
    )


def fix_line(label: str, actual_us: float | None, predicted_us: float, speedup: float) -> str:
    """``"<label>: 83.7 ms → 26.0 ms per step (3.22x)"``: the one wording of a
    prediction for ``report``, markdown and the diff."""
    return (
        f"{label}: {fmt_duration_us(actual_us)} → {fmt_duration_us(predicted_us)} per step "
        f"({speedup:.2f}x)"
    )


def what_if_lines(panel: WhatIfPanel) -> list[str]:
    """The What-if section as lines of text (module docstring): each fix, fastest
    first, then the top fixes together; empty without a fix."""
    if not panel.fixes:
        return []
    out = [
        fix_line(f"{f.diagnosis} ({f.fix}" + (", estimated)" if f.method != "replay" else ")"),
                 panel.actual_step_us, f.predicted_step_us, f.speedup)
        for f in panel.fixes
    ]  # fmt: skip
    c = panel.combined
    if c is not None:
        out.append(fix_line("together: " + " + ".join(c.diagnoses), panel.actual_step_us,
                            c.predicted_step_us, c.speedup))  # fmt: skip
    return out
