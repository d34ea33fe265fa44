"""Rules of the ``trace`` area: is the trace whole, and does it represent the job?

Two rules read what the reader saw (``health``): ``no_step_markers`` (always ``medium``:
it limits every per-step number; impact 0) and ``trace_data_loss`` (severity from the
share of unusable events and Kineto's own loss reports; its ``impact_fraction`` is that
unusable share; when nothing is usable it is the only diagnosis reported). The others
read ``health.trace_quality`` (:mod:`~tb_kineto_insights.analysis.trace_quality`, whose
docstring defines its measures). ``trace_profiler_overhead`` is a cost in step time:
its ``impact_fraction`` is ``profiler.overhead_fraction`` and its severity follows it.
The rest are about trust in the other numbers, not a cost in step time: impact 0, and
the severity follows how much of the analysis the problem puts in doubt:

- ``trace_cuda_launch_blocking`` (``medium``): every idle gap then looks like host work
  and launch overhead is inflated; the trace does not represent the job.
- ``trace_warmup_step`` (``low``): the first step is not representative (still warming
  up, or started on an empty GPU queue); means include it.
- ``trace_unequal_steps`` (``low``): the step-to-step noise is large, so the diff's
  noise rule will call most changes ``within noise``.
- ``trace_too_few_steps`` (``low``): the diff's noise rule has too few samples (steps
  left out for lost GPU data do not count).
"""

from __future__ import annotations

import msgspec
import numpy as np

from tb_kineto_insights.analysis.lost import where_file_ends
from tb_kineto_insights.analysis.rules.base import (
    IMPACT_THRESHOLDS,
    Fix,
    Rule,
    SpanInput,
    duration,
    fix_prediction,
    make_diagnosis,
    severity_for_impact,
)
from tb_kineto_insights.analysis.rules.fixes import profiler_activities_removed
from tb_kineto_insights.analysis.rules.moments import step_moment
from tb_kineto_insights.analysis.step_windows import WARM_UP
from tb_kineto_insights.schema.diagnoses import Diagnosis, Moment
from tb_kineto_insights.schema.health import HealthPanel, LostData, TraceQuality
from tb_kineto_insights.schema.steps import LeftOutStep


def _no_step_markers(inp: SpanInput) -> Diagnosis | None:
    """``no_step_markers``: not a cost in step time (``impact_fraction`` 0) but a limit on
    every per-step number; always ``medium``, since without steps the diff and every
    per-step value degrade to whole-trace values."""
    steps = inp.steps
    if steps is None or steps.has_markers:
        return None
    return make_diagnosis(
        "no_step_markers",
        "medium",
        "No ProfilerStep markers: the whole trace is treated as one step",
        {"steps": 0},
        "Profile with torch.profiler.profile(schedule=torch.profiler.schedule(...)) and call "
        "prof.step() once per training iteration, so per-step numbers and the diff work.",
        "steps",
    )


_LOSS_KEYS = ("Out-of-range", "CUPTI stopped early?", "Invalid ext correlations")


def _data_loss(inp: SpanInput) -> Diagnosis | None:
    """Events the trace lacks: Kineto's own loss counts and error lines, events skipped
    or quarantined by the reader (missing fields, broken timestamps), events lost to
    damaged JSON (``health.damage``), and GPU events whose duration ran over the next
    event on their stream (clipped). Not about step time: severity follows the share of
    the trace's events that are unusable (``unusable_fraction``, also the
    ``impact_fraction``): high ≥ 50 %, or when the file ends before its GPU events
    (every GPU event lost: ``health.trace_quality.lost``), medium ≥ 5 % (or when CUPTI
    stopped early, Kineto logged errors, or the file itself is damaged), else low."""
    health = inp.health
    if health is None:
        return None
    counts = health.kineto_record_counts
    lost = {k: v for k, v in counts.items() if k in _LOSS_KEYS and v}
    dropped_lines = [
        line for line in health.kineto_log if "drop" in line.lower() or line.startswith("ERROR")
    ]
    skipped = sum(health.skipped.values())
    quarantined = sum(health.quarantined.values())
    lost_events = health.lost_events
    damaged_regions = health.damaged_regions
    clipped = health.stream_overlap_clipped
    overran = clipped.overran_whole_events
    unusable_events = skipped + quarantined + lost_events + overran
    if not lost and not dropped_lines and not unusable_events and not damaged_regions:
        return None
    events = health.event_count + lost_events
    unusable = unusable_events / events if events else 0.0
    stopped = bool(counts.get("CUPTI stopped early?"))
    cut = health.trace_quality.lost
    if unusable >= 0.5 or cut.gpu_events_lost:
        severity = "high"
    elif unusable >= 0.05 or stopped or dropped_lines or damaged_regions:
        severity = "medium"
    else:
        severity = "low"
    title = _loss_title(health, cut, unusable_events, unusable, events)
    return make_diagnosis(
        "trace_data_loss",
        severity,
        title,
        {
            "kineto_record_counts": lost,
            "kineto_errors": dropped_lines[:5],
            "skipped_events": skipped,
            "quarantined_events": quarantined,
            "quarantined_by_kind": health.quarantined_by_kind,
            "lost_events": lost_events,
            "lost_bytes": health.lost_bytes,
            "damaged_regions": damaged_regions,
            "damage": msgspec.to_builtins(health.damage[:5]),
            "overran_stream_events": overran,
            "overran_clipped_us": float(clipped.removed_ns) / 1e3,
            "unusable_fraction": unusable,
            "events": events,
            "file_ends_at_byte": cut.file_ends_at_byte,
            "gpu_events_lost": cut.gpu_events_lost,
            "gpu_events_set_aside": cut.gpu_events_set_aside,
            "launches_without_gpu_event": cut.launches_without_gpu_event,
            "incomplete_steps": cut.incomplete_steps,
            "lost": cut.lost,
        },
        "Numbers near the trace's edges may be off, and every panel misses what was "
        "dropped (see Trace health for why). Profile fewer steps per trace (schedule "
        "active=3..5); if CUPTI stopped early or buffers were dropped, raise the CUPTI "
        "buffer size; if events were unusable or the file is damaged (see the byte "
        "offsets in health), the file was damaged, cut short while being written, or "
        "written by a non-Kineto tool.",
        "health",
        impact_fraction=unusable,
    )


def _loss_title(
    health: HealthPanel, cut: LostData, unusable_events: int, unusable: float, events: int
) -> str:
    """``trace_data_loss``'s title: where the file ends (cut short, before or inside its
    GPU events), else the damage, the clipped GPU events or the unusable share."""
    damaged_regions = health.damaged_regions
    lost_events = health.lost_events
    clipped = health.stream_overlap_clipped
    overran = clipped.overran_whole_events
    ended = next(
        (
            d
            for d in health.damage
            if d.problem.startswith(("gzip stream ends early", "corrupt gzip"))
            and "check" not in d.problem  # a bad CRC/length: all was read
        ),
        None,
    )
    where = ""
    if cut.file_ends_at_byte is not None:
        where = where_file_ends(
            cut.file_ends_at_byte,
            compressed=health.compressed,
            file_bytes=health.file_bytes,
            corrupt=ended is not None and ended.problem.startswith("corrupt gzip"),
            gzip_whole=not any(
                d.problem.startswith(("gzip stream ends early", "corrupt gzip"))
                for d in health.damage
            ),
        )
        where = "T" + where.replace("the file ends", "the trace file ends", 1)[1:]
    if cut.gpu_events_lost and cut.file_ends_at_byte is not None and cut.gpu_events_set_aside:
        return (
            f"{where}, inside its GPU events: "
            "every step lost part of its GPU work, so the "
            f"{cut.gpu_events_set_aside} GPU events read are not used; no GPU number in "
            "this trace can be trusted"
        )
    if cut.gpu_events_lost and cut.file_ends_at_byte is not None:
        return (
            f"{where}, before its GPU events: "
            "all GPU events are lost"
            + (f" ({cut.launches} launch calls without their work)" if cut.launches else "")
            + "; no GPU number in this trace can be trusted"
        )
    if cut.file_ends_at_byte is not None and ended is None:
        cut_short = "" if "ends early" in where else " (cut short)"
        return f"{where}{cut_short}: lost " + "; ".join(cut.lost)
    if ended is not None:  # what followed the end of the readable stream is unknown
        return (
            f"The trace file ends after {ended.offset:,} bytes of JSON "
            f"({ended.problem.split(' (')[0]}): every event after that point is missing, and "
            f"{damaged_regions - 1} other damaged region(s) lost {lost_events} event(s)"
        )
    if damaged_regions:
        return (
            f"The trace file is damaged: {damaged_regions} damaged region(s), "
            f"{lost_events} event(s) and {health.lost_bytes} bytes lost"
        )
    if overran and unusable_events == overran:
        return (
            f"{overran} GPU event(s) had a duration running over the next event(s) on their "
            f"stream: clipped, {duration(float(clipped.removed_ns) / 1e3)} removed "
            "(the recorded duration cannot be right)"
        )
    if unusable_events:
        share = f"{100 * unusable:.0f} %" if unusable >= 0.005 else "< 1 %"
        return (
            f"The trace is incomplete: {unusable_events} of {events} events were unusable ({share})"
        )
    return "The trace is incomplete: Kineto reported dropped or out-of-range records"


def _nothing_usable(d: Diagnosis) -> bool:
    """Every event is unusable: every other finding would be an artefact."""
    return bool(d.evidence["unusable_fraction"] >= 1.0)


def _launch_blocking(inp: SpanInput) -> Diagnosis | None:
    """``trace_cuda_launch_blocking``: nearly every kernel launch returns only once its
    kernel is done (``launch_blocking.fraction`` at least
    ``quality_blocking_launch_fraction`` of at least ``quality_blocking_min_launches``
    launches)."""
    th = inp.th
    quality = _quality(inp)
    blocking = quality.launch_blocking
    frac = blocking.fraction
    if not (
        frac is not None
        and blocking.launches >= th.quality_blocking_min_launches
        and frac >= th.quality_blocking_launch_fraction
    ):
        return None
    return make_diagnosis(
        "trace_cuda_launch_blocking",
        "medium",
        f"Kernel launches wait for their kernel ({100 * frac:.0f} % of "
        f"{blocking.launches} launches): recorded with CUDA_LAUNCH_BLOCKING=1?",
        {
            "launches": blocking.launches,
            "ended_after_kernel": blocking.ended_after_kernel,
            "fraction": frac,
            "rule": f"fraction >= {th.quality_blocking_launch_fraction} with >= "
            f"{th.quality_blocking_min_launches} launches",
        },
        "Unset CUDA_LAUNCH_BLOCKING (a debugging switch) and record again: with it "
        "every launch is synchronous, so idle gaps look like host work and launch "
        "time is inflated.",
        "health",
    )


def _too_few_steps(inp: SpanInput) -> Diagnosis | None:
    """``trace_too_few_steps``: fewer usable profiled steps than ``quality_min_steps``."""
    th = inp.th
    quality = _quality(inp)
    n = quality.steps
    if not (quality.has_step_markers and 0 < n < th.quality_min_steps):
        return None
    return make_diagnosis(
        "trace_too_few_steps",
        "low",
        f"Only {n} usable profiled step{'s' if n != 1 else ''}: too few to tell a "
        "change from step-to-step noise",
        {"steps": n, "steps_left_out": quality.steps_left_out, "min_steps": th.quality_min_steps},
        "Profile more steps (schedule active=5 or more, e.g. "
        "tb_kineto_insights.capture.profile(..., preset='standard')).",
        "health",
    )


def _warmup_left_out(inp: SpanInput) -> LeftOutStep | None:
    """The warm-up step left out of the steady-state steps (``steps.left_out``), if
    any."""
    steps = inp.steps
    left = steps.left_out if steps is not None else []
    return next((s for s in left if s.reason == WARM_UP), None)


def _warmup_step(inp: SpanInput) -> Diagnosis | None:
    """``trace_warmup_step``: the first steady window lasted at least
    ``quality_warmup_ratio`` times the median of the others, and was left out of the
    steady-state steps."""
    warm = _warmup_left_out(inp)
    steps = inp.steps
    if warm is None or steps is None or not steps.steps:
        return None
    return make_diagnosis(
        "trace_warmup_step",
        "low",
        f"Step {warm.number} lasts {warm.ratio:.1f}x the others: a warm-up step, left out "
        "of the step figures",
        {
            "first_step_us": round(warm.duration_us, 3),
            "median_other_steps_us": round(
                float(np.median([s.duration_us for s in steps.steps])), 3
            ),
            "first_step_ratio": warm.ratio,
        },
        "Nothing to fix in the job: the step ran work the later steps did not (lazy "
        "initialisation, torch.compile, cudnn.benchmark autotuning, the allocator's "
        "first cudaMalloc calls), and every step figure here leaves it out. To profile "
        "steady steps only, start the profiler after it (schedule skip_first=N or one "
        "more warm-up step).",
        "health",
    )


def _unequal_steps(inp: SpanInput) -> Diagnosis | None:
    """``trace_unequal_steps``: the steady-state step durations' coefficient of
    variation is at least ``quality_unequal_steps_cv`` over at least
    ``quality_unequal_min_steps`` steps."""
    th = inp.th
    quality = _quality(inp)
    cv = quality.step_cv
    n_cv = quality.steps
    if not (
        quality.has_step_markers
        and cv is not None
        and n_cv >= th.quality_unequal_min_steps
        and cv >= th.quality_unequal_steps_cv
    ):
        return None
    return make_diagnosis(
        "trace_unequal_steps",
        "low",
        f"Steps of very unequal length (coefficient of variation {cv:.2f})",
        {"step_cv": cv, "steps": n_cv, "step_us": quality.step_us},
        "Find what makes some steps long (data loading stalls, periodic "
        "evaluation or checkpointing, garbage collection) or profile more "
        "steps; a diff of such traces calls most changes within noise.",
        "health",
    )


def _profiler_overhead(inp: SpanInput) -> Diagnosis | None:
    """``trace_profiler_overhead``: Kineto's own overhead activities take at least
    ``min_impact_fraction`` of the profiled time, and taking them out of the host's time
    shortens the replayed step by at least that much (its ``impact_fraction``: what they
    add to the step, not their sum: CUPTI's buffer work on a host that waits for the GPU
    anyway costs nothing)."""
    quality = _quality(inp)
    prof = quality.profiler
    over = float(prof.overhead_fraction or 0.0)
    if not quality.has_step_markers or severity_for_impact(over, inp.th) is None:
        return None
    prediction = fix_prediction(
        inp,
        "trace_profiler_overhead",
        "the profiler's own activities out of the host's time",
        profiler_activities_removed(),
        over,
    )
    impact = prediction.saving_fraction if prediction else over
    severity = severity_for_impact(impact, inp.th)
    if severity is None:
        return None  # its activities ran while the host waited anyway: no cost
    return make_diagnosis(
        "trace_profiler_overhead",
        severity,
        f"The profiler's own activities lengthen the step by {100 * impact:.1f} % "
        f"({100 * over:.1f} % of the profiled time is their work)",
        {
            "step_increase_fraction": round(impact, 4),
            "overhead_us": prof.overhead_us,
            "overhead_fraction": over,
            "python_function_events_per_step": prof.python_function_events_per_step,
            "flow_events_per_step": prof.flow_events_per_step,
        },
        "Record fewer things (preset 'light': no stacks, shapes or memory) or fewer "
        "active steps per cycle so CUPTI's buffers fill less within a step; the "
        "steps it lands in are longer than the job's.",
        "health",
        impact_fraction=impact,
        prediction=prediction,
    )


def _quality(inp: SpanInput) -> TraceQuality:
    """``health.trace_quality`` (the rules that read it need the ``health`` panel)."""
    health = inp.health
    if health is None:  # never: the rules list the panel
        raise ValueError("the trace-quality rules need the health panel")
    return health.trace_quality


def _first_step(d: Diagnosis, inp: SpanInput) -> Moment | None:
    """The warm-up step, whole."""
    warm = _warmup_left_out(inp)
    return None if warm is None else step_moment(inp.index, warm.number, "the warm-up step")


def _longest_step(d: Diagnosis, inp: SpanInput) -> Moment | None:
    """The longest step, whole."""
    index = inp.index
    if not len(index.steps):
        return None
    i = int(np.argmax(index.steps.dur_ns))
    return step_moment(index, int(index.steps.number[i]), "the longest step")


NO_STEP_MARKERS = Rule(
    id="no_step_markers",
    area="trace",
    label="No step markers",
    definition="The trace has no `ProfilerStep#N` markers: the whole trace is one step, "
    "and every per-step number and the diff degrade to whole-trace values.",
    panels=("steps",),
    check=_no_step_markers,
    fix=Fix("prof.step() once per iteration"),
)
TRACE_DATA_LOSS = Rule(
    id="trace_data_loss",
    area="trace",
    label="Trace data loss",
    definition="Events the trace lacks: Kineto's own loss counts, events the reader had "
    "to skip or quarantine, damaged or cut-short JSON, clipped GPU events; severity "
    "follows the unusable share of events.",
    panels=("health",),
    check=_data_loss,
    exclusive=_nothing_usable,
)
TRACE_CUDA_LAUNCH_BLOCKING = Rule(
    id="trace_cuda_launch_blocking",
    area="trace",
    label="CUDA_LAUNCH_BLOCKING=1 (launches wait for their kernel)",
    definition="Nearly every kernel launch returns only once its kernel ends: the trace "
    "was recorded with `CUDA_LAUNCH_BLOCKING=1` and does not represent the job.",
    panels=("health",),
    thresholds=("quality_blocking_min_launches", "quality_blocking_launch_fraction"),
    check=_launch_blocking,
)
TRACE_TOO_FEW_STEPS = Rule(
    id="trace_too_few_steps",
    area="trace",
    label="Too few profiled steps",
    definition="Fewer usable profiled steps than the diff's noise rule needs.",
    panels=("health",),
    thresholds=("quality_min_steps",),
    check=_too_few_steps,
)
TRACE_WARMUP_STEP = Rule(
    id="trace_warmup_step",
    area="trace",
    label="First step still warming up",
    definition="The first steady profiled step lasts at least 2x the median of the others "
    "(one-off work: compile, autotuning, lazy init): it is left out of the steady-state "
    "steps every figure stands on.",
    panels=("steps",),
    thresholds=("quality_warmup_ratio", "quality_warmup_min_steps"),
    check=_warmup_step,
    moment=_first_step,
)
TRACE_UNEQUAL_STEPS = Rule(
    id="trace_unequal_steps",
    area="trace",
    label="Steps of very unequal length",
    definition="The step durations vary widely (coefficient of variation over the "
    "steady-state steps): the diff will call most changes within noise.",
    panels=("health",),
    thresholds=("quality_warmup_ratio", "quality_unequal_min_steps", "quality_unequal_steps_cv"),
    check=_unequal_steps,
    moment=_longest_step,
)
TRACE_PROFILER_OVERHEAD = Rule(
    id="trace_profiler_overhead",
    area="trace",
    label="Profiler overhead in the trace",
    definition="Kineto's own overhead activities (CUPTI buffer requests and flushes) "
    "take a share of the profiled time.",
    panels=("health",),
    thresholds=IMPACT_THRESHOLDS,
    check=_profiler_overhead,
)
