"""Shape of ``diff``: filled by ``compare.diff.diff``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET, UnsetType

from tb_kineto_insights.schema._base import Out
from tb_kineto_insights.schema.communication import BucketSize


class DiffSide(Out, frozen=True, kw_only=True):
    """``diff.base`` / ``diff.exp``: the side's label and its ``worker/span`` names."""

    label: str
    workers: list[str]


class GainedStraggler(Out, frozen=True, kw_only=True):
    """``diff.headline.straggler_gained``: a straggler the experiment has and the base
    has not (or not on that rank): its ``rank`` and ``worker``, what it costs the others
    (``delay_us_per_step``, ``share_of_step``), why it is late (``cause``: the cause
    class's words, ``cause_us_per_step``: its excess over the median rank; null when no
    traced class explains it), and ``title``, the experiment's diagnosis title."""

    rank: int
    worker: str
    delay_us_per_step: float | None
    share_of_step: float | None
    cause: str | None
    cause_us_per_step: float | None
    title: str


class GainedDiagnosis(Out, frozen=True, kw_only=True):
    """``diff.headline.gained[]``: a high or medium diagnosis the experiment has and the
    base has not (by id), with its severity and title on the experiment."""

    id: str
    severity: str
    title: str


class Headline(Out, frozen=True, kw_only=True):
    """``diff.headline``: step time before → after, ``speedup`` (base / exp), the step
    time's ``verdict``, the high/medium diagnoses the experiment gained (``gained``), the
    whole story in one line (``text``: "1.10x faster, but memory_growth (high)
    appeared"), and a straggler the experiment gained (``straggler_gained``, null when
    none)."""

    base_step_us: float
    exp_step_us: float
    speedup: float | None
    change_fraction: float | None
    verdict: str
    gained: list[GainedDiagnosis]
    text: str
    straggler_gained: GainedStraggler | None = None


class SidePair(Out, frozen=True, kw_only=True):
    """``diff.metrics[].basis``
    (also ``diff.communication.busbw_basis{}``)."""

    base: str
    exp: str


class ByRankPair(Out, frozen=True, kw_only=True):
    """``diff.metrics[].by_rank``."""

    base: dict[str, float]
    exp: dict[str, float]


class DdpBucketStats(Out, frozen=True, kw_only=True):
    """``diff.communication.ddp_buckets.base``
    (also ``diff.communication.ddp_buckets.exp``)."""

    count: int
    count_per_step: float | None
    median_bytes: float
    min_bytes: int
    max_bytes: int
    distinct_count: int
    sizes: list[BucketSize]


class DdpBucketsPair(Out, frozen=True, kw_only=True):
    """``diff.communication.ddp_buckets``."""

    base: DdpBucketStats | None
    exp: DdpBucketStats | None


class DiffCommunication(Out, frozen=True, kw_only=True):
    """``diff.communication``."""

    ddp_buckets: DdpBucketsPair
    busbw_basis: dict[str, SidePair]
    rank_rows_from: str


class Change(Out, frozen=True, kw_only=True):
    """One judged value before → after (``analysis.diff_rules.judge``): ``time_us_per_step``
    and ``count_per_step`` of a :class:`DiffRow`, ``step_time_us`` of a
    :class:`DiffRankRow`. ``change_fraction``: delta / |base| (None when base is 0);
    ``base_noise``/``exp_noise``: step-to-step standard deviations; ``stderr``: None when
    not judged by per-step samples; ``min_delta``: the smallest delta that matters."""

    base: float
    exp: float
    delta: float
    change_fraction: float | None
    base_noise: float
    exp_noise: float
    stderr: float | None
    base_n: int
    exp_n: int
    min_delta: float
    verdict: str


class _MetricRow(Change, frozen=True, kw_only=True):
    """The fields of :data:`DiffMetric`, declared once: a subclass of :class:`Change`
    lists them after the Change's fields; :data:`DiffMetric` is built from them in the
    order of the row's JSON."""

    key: str
    label: str
    unit: str
    better: str
    basis: SidePair | UnsetType = UNSET
    note: str | UnsetType = UNSET
    by_rank: ByRankPair | UnsetType = UNSET


def _in_json_order() -> type[msgspec.Struct]:
    """:class:`_MetricRow` with ``key``, ``label``, ``unit``, ``better`` first, then the
    :class:`Change`'s fields, then ``basis``, ``note``, ``by_rank``: the order in which
    the diff writes a metric row."""
    fields = {f.name: f for f in msgspec.structs.fields(_MetricRow)}
    head = ("key", "label", "unit", "better")
    order = [*head, *Change.__struct_fields__]
    order += [name for name in _MetricRow.__struct_fields__ if name not in order]
    spec = [
        (n, fields[n].type)
        if fields[n].default is msgspec.NODEFAULT
        else (n, fields[n].type, fields[n].default)
        for n in order
    ]
    return msgspec.defstruct(
        "DiffMetric",
        spec,
        bases=(Out,),
        module=__name__,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
    )


if TYPE_CHECKING:
    DiffMetric = _MetricRow
else:
    DiffMetric = _in_json_order()
    DiffMetric.__doc__ = (
        "One row of ``diff.metrics``: a :class:`Change` of one metric (``key``, ``label``,\n"
        "``unit``, which direction is ``better``); the communication rows\n"
        "(``analysis.diff_comm``) carry ``basis`` (what each side's value is computed from)\n"
        "and, when not judged, a ``note`` saying why; ``by_rank``: rank → value per side."
    )


class DiffRow(Out, frozen=True, kw_only=True):
    """One kernel or op name in ``diff.kernels`` / ``diff.ops`` (``changed``, ``added``,
    ``removed``, and ``diff.kernels.communication``). ``status``: ``added`` /
    ``removed`` / ``moved_out`` for a name only one side has (no verdict: its
    ``verdict`` says the same), ``not judged`` for a communication row (NCCL time
    includes waiting for other ranks); ``note`` says why where there is one."""

    name: str
    time_us_per_step: Change
    count_per_step: Change
    delta_time_us_per_step: float
    status: str | UnsetType = UNSET
    note: str | UnsetType = UNSET


class DiffOps(Out, frozen=True, kw_only=True):
    """``diff.ops``: op names whose time per step changed (beyond noise, and enough to
    matter), appeared or disappeared, largest change first; ``unchanged_count``: the
    others."""

    changed: list[DiffRow]
    added: list[DiffRow]
    removed: list[DiffRow]
    unchanged_count: int


class DiffKernels(DiffOps, frozen=True, kw_only=True):
    """``diff.kernels``: as :class:`DiffOps`, for kernel names, plus ``communication``:
    the NCCL/RCCL kernels, whose time includes waiting for other ranks (not judged)."""

    communication: list[DiffRow]


class FoundDiagnosis(Out, frozen=True, kw_only=True):
    """``diff.diagnoses.found.base[]``
    (also ``diff.diagnoses.found.exp[]``)."""

    id: str
    severity: str
    title: str
    impact_fraction: float
    scope: str
    where: str
    fix: str | None = None
    predicted_step_us: float | None = None


class PredictionCheck(Out, frozen=True, kw_only=True):
    """``diff.diagnoses.predictions[]``: a diagnosis of the base that the experiment no
    longer has, whose fix the base predicted: the prediction beside the measurement.
    ``fix``, ``base_step_us`` (the base's mean steady step), ``predicted_step_us`` (the
    base's prediction for the fix, the slowest span's), ``measured_step_us`` (the
    experiment's mean steady step, the headline's), ``error_fraction`` = predicted ÷
    measured − 1, ``text``: that in one line."""

    id: str
    fix: str
    base_step_us: float
    predicted_step_us: float
    measured_step_us: float
    error_fraction: float
    text: str


class FoundDiagnoses(Out, frozen=True, kw_only=True):
    """``diff.diagnoses.found``."""

    base: list[FoundDiagnosis]
    exp: list[FoundDiagnosis]


class DiffDiagnoses(Out, frozen=True, kw_only=True):
    """``diff.diagnoses``: the ids that appeared, disappeared and were kept, every
    diagnosis found on each side, and ``predictions``: each disappeared diagnosis whose
    fix the base predicted, checked against the experiment's step (the loop
    profile → fix → profile again, closed)."""

    appeared: list[str]
    disappeared: list[str]
    kept: list[str]
    found: FoundDiagnoses
    predictions: list[PredictionCheck] = []


class DiffRankRow(Out, frozen=True, kw_only=True):
    """``diff.per_rank[]``."""

    rank: int
    step_time_us: Change


class LargestChange(Out, frozen=True, kw_only=True):
    """``diff.largest_changes[]``."""

    what: str
    name: str
    delta_us_per_step: float
    verdict: str


class ComparabilityItem(Out, frozen=True, kw_only=True):
    """One unlike-for-like recording difference between the sides
    (``analysis.comparability``): the ``field`` (a setting, version, GPU, ``env.NAME``),
    each side's value (``base``, ``new``: as recorded, a sorted list when a side's
    workers disagree), ``why`` it matters, and its ``source`` (``metadata`` written by
    ``tb_kineto_insights.capture``, or ``trace``)."""

    field: str
    base: Any
    new: Any
    why: str
    source: str


class DiffEfficiencyRow(Out, frozen=True, kw_only=True):
    """One op group (op + input shapes) of ``diff.efficiency[]`` (``compare.diff``): its
    dtype, kernel time per step, achieved FLOP/s (``None`` for memory ops) and
    ``roof_fraction`` on each side (``None`` on a side without it: the op ran in another
    shape, or that side has no efficiency panel). ``verdict`` of the achieved FLOP/s
    (``compare.diff.efficiency_rows``): a summary keeps one value per group, not one per
    step, so the single-value rule (10 %), ``negligible`` when the group's time moves
    less than 0.5 % of the base step, ``added``/``removed``, ``not judged`` for memory
    ops. The run-wide rates (achieved TFLOP/s, tensor-core share) are metric rows judged
    against the step-to-step noise."""

    op: str
    shapes: str
    base_dtype: str | None
    exp_dtype: str | None
    base_time_us_per_step: float | None
    exp_time_us_per_step: float | None
    base_achieved_flops_per_s: float | None
    exp_achieved_flops_per_s: float | None
    base_roof_fraction: float | None
    exp_roof_fraction: float | None
    verdict: str = "not judged"


class DiffDocument(Out, frozen=True, kw_only=True):
    """``tb_kineto_insights.diff/1`` (``compare.diff.diff``): two sides (one or
    more span summaries each) compared: the headline step time, metric rows judged
    against step-to-step noise (``noise_rule``), kernel and op tables, diagnoses that
    appeared/disappeared, per-rank step time, the largest changes, kernel efficiency per op
    group (``efficiency``), ``warnings``."""

    schema: str
    base: DiffSide
    exp: DiffSide
    headline: Headline
    warnings: list[str]
    comparability: list[ComparabilityItem]
    metrics: list[DiffMetric]
    communication: DiffCommunication
    kernels: DiffKernels
    ops: DiffOps
    diagnoses: DiffDiagnoses
    per_rank: list[DiffRankRow]
    largest_changes: list[LargestChange]
    efficiency: list[DiffEfficiencyRow]
    noise_rule: str
