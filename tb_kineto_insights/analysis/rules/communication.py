"""Rules of the ``communication`` area: collectives that lengthen the step.

``exposed_communication`` is raised per span from one rank's trace (the wait for other
ranks estimated: :mod:`~tb_kineto_insights.analysis.communication`, the least-wait
estimate) and, for a run of several ranks, per rank from the view across ranks with the
exact wait/transfer split, which replaces the span's. ``communication_straggler`` is
raised from the view across ranks (:mod:`~tb_kineto_insights.analysis.run_view` defines
the straggler test): the rank the others wait for, with what it costs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tb_kineto_insights.analysis.python_frames import short_frame
from tb_kineto_insights.analysis.rules.base import (
    IMPACT_THRESHOLDS,
    Fix,
    Rule,
    RunInput,
    SpanInput,
    make_diagnosis,
    severity_for_impact,
)
from tb_kineto_insights.analysis.rules.moments import collective_moment, moment_at
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.units import fmt_duration_us
from tb_kineto_insights.analysis.what_if import prediction_of
from tb_kineto_insights.schema.diagnoses import Diagnosis, FixPrediction, Moment


def _ms(us: float | None) -> str:
    """A duration in the unit that fits it (:mod:`~tb_kineto_insights.analysis.units`)."""
    return fmt_duration_us(us)


_STRAGGLER_ADVICE = (
    "Compare its step, idle and kernel panels with another rank's: uneven work or data "
    "(unbalanced shards, variable sequence lengths, a slower data path), extra work on "
    "that rank only (logging, evaluation or checkpointing on rank 0, a sleep or host-side "
    "Python before backward), a slower or throttled GPU (nvidia-smi clocks, temperature, "
    "ECC), or host contention (CPU affinity, NUMA, other processes). If ranks run on "
    "different hosts, rule out clock offset first: the skew should vary across steps."
)


_TRANSFER_ADVICE = (
    "Overlap communication with compute. DDP: gradients are all-reduced in buckets during "
    "backward; tune DistributedDataParallel(bucket_cap_mb=...) so the first buckets start "
    "earlier (smaller) or pay less per-call overhead (larger), pass "
    "gradient_as_bucket_view=True to skip bucket copies, and with gradient accumulation "
    "wrap the non-final micro-steps in model.no_sync(). FSDP: forward_prefetch=True and "
    "backward_prefetch=BackwardPrefetch.BACKWARD_PRE. If the bus bandwidth (from the "
    "matched transfer, see the view across ranks) is far below the interconnect's peak, "
    "check NCCL's transport (NVLink / InfiniBand) and message sizes."
)


def _straggler_title(s: dict[str, Any], impact: float) -> str:
    """``communication_straggler``'s title: who, what it costs, and why (the cause class
    with its excess over the median rank, and the top kernel or op), from the evidence."""
    head = (
        f"Rank {s['rank']} holds the other ranks back {_ms(s['delay_us_per_step'])}/step "
        f"({100 * impact:.0f} % of their step)"
    )
    per = s.get("per_collective") or {}
    if s.get("basis") == "collectives" and per:
        head += (
            f": last in {per['last_count']} of {per['collectives']} collectives, the others "
            f"wait {_ms(per['waited_for_us_per_step'])}/step for it, "
            f"{_ms(per['exposed_waited_for_us_per_step'])} exposed"
        )
    cause = s.get("cause") or {}
    if cause.get("class"):
        text = (
            f"{head}{'; ' if s.get('basis') == 'collectives' else ': '}{cause['label']}, "
            f"+{_ms(cause['us_per_step'])}/step against the median rank"
        )
        if cause.get("basis") == "before_late_collectives":
            text += " before the collectives it is late to"
        if cause["class"] == "launches":
            text += f" ({cause['launches_per_step_excess']:+.0f} kernels/step)"
        top = cause.get("top") or []
        if top:
            text += f", most in {top[0]['name']} (+{_ms(top[0]['us_per_step'])}/step)"
        frames = cause.get("frames") or []
        if frames:  # with Python stacks: the frame with the largest excess
            text += (
                f", in Python {short_frame(frames[0]['frame'])} "
                f"(+{_ms(frames[0]['us_per_step'])}/step)"
            )
        return text
    if s.get("basis") == "collectives":
        return head
    return (
        f"{head}: {_ms(s['lateness_excess_us_per_step'])}/step later than the others in "
        f"{s['tested_steps']} steps, last in {s['last_steps']}"
    )


_CAUSE_ADVICE = {
    "gpu_compute": (
        "It runs more GPU kernel time per step than the median rank: uneven work (shard "
        "sizes, sequence lengths, a branch only this rank takes) or a slower GPU "
        "(nvidia-smi clocks, temperature, ECC)."
    ),
    "memcpy": (
        "Its GPU spends longer in memory copies and sets: extra or pageable host-device "
        "copies on this rank (pin_memory, non_blocking=True), or more data to move."
    ),
    "host_untraced": (
        "Its host is busy outside traced ops before it launches its work: untraced Python, "
        "a sleep, I/O, logging or checkpointing on this rank only."
    ),
    "compiling": (
        "Its host spends longer compiling (torch.compile recompiles on this rank: its "
        "shapes differ from the others', or its cache was not warmed): mark the varying "
        "dims dynamic or warm every shape up before the loop."
    ),
    "data_loading": (
        "It waits longer for its next batch: more DataLoader workers, pin_memory, or a "
        "faster data path on its host."
    ),
    "host_sync": (
        "Its host synchronizes with the GPU more (.item(), .cpu(), synchronize): remove "
        "the syncs that run on this rank only."
    ),
    "optimizer_step": "Its optimizer step takes longer: compare the optimizer's state and work.",
    "launching": "It spends longer launching kernels: host contention (CPU affinity, NUMA).",
    "launches": (
        "Its host spends longer in kernel launch calls: more kernels on this rank (a "
        "branch, unfused ops: torch.compile or CUDA graphs cut launches) or slower "
        "launches (host contention: CPU affinity, NUMA)."
    ),
    "allocator": (
        "Its GPU waits for the caching allocator (cudaMalloc/cudaFree): memory pressure "
        "on this rank; see the memory panel."
    ),
    "cpu_ops": "Its CPU ops take longer: host contention or work on this rank only.",
    "graph_replay": (
        "Its GPU waits longer inside its CUDA graph replays, on work the graphs depend on "
        "(another stream, an event): compare what its graphs wait for with another rank's."
    ),
}


def _cause_advice(s: dict[str, Any]) -> str:
    cause = s.get("cause") or {}
    advice = _CAUSE_ADVICE.get(cause.get("class") or "")
    if not advice:
        return ""
    frames = cause.get("frames") or []
    if frames:
        listed = ", ".join(
            f"{short_frame(f['frame'])} (+{_ms(f['us_per_step'])}/step)" for f in frames
        )
        advice += f" The Python frames where it spends that time longer: {listed}; start there."
    elif cause.get("class") == "host_untraced":
        advice += " Profile with with_stack=True (or py-spy) to see the frames."
    return f"{advice} "


def _exposed_span(inp: SpanInput) -> Diagnosis | None:
    """``exposed_communication`` from one trace: communication not hidden under compute
    takes at least ``exposed_comm_fraction`` of the step time (denominator: total
    step-window time).

    From one rank's trace the wait for other ranks can only be estimated (the least-wait
    estimate, module docstring): when at least ``exposed_wait_mostly_fraction`` of the
    exposed time falls in the estimated wait, the diagnosis says the rank is mostly
    waiting for other ranks and points to the view across ranks, with no bucket or
    interconnect advice, ``impact_fraction`` = the exposed wait estimate ÷ step time;
    otherwise ``impact_fraction`` = the exposed transfer estimate ÷ step time, with
    overlap/bucket advice. Severity from the impact (:func:`~tb_kineto_insights.analysis.rules.base.
    severity_for_impact`). A rank that waits in *every* collective (the waiting rank of
    h200x2 ``ddp_straggler``) looks like slow transfer here; the view across ranks
    (:func:`_exposed_run`) re-qualifies it with the exact split and replaces
    this diagnosis."""
    comm, steps, th = inp.communication, inp.steps, inp.th
    if comm is None or steps is None or not comm.has_collectives:
        return None
    total_us = steps.total_us or comm.total_step_us or 0.0
    exposed_us = comm.exposed_us or 0.0
    if total_us <= 0:
        return None
    share = exposed_us / total_us
    if share < th.exposed_comm_fraction:
        return None
    # the kind holding the most exposed time (the title names it), else the most time
    top = max(
        comm.kinds,
        key=lambda k: (k.exposed_us_per_step or 0.0, k.time_us),
        default=None,
    )
    comm_us = comm.comm_us or 0.0
    n_steps = max(len(comm.steps), 1)
    step_us = total_us / n_steps
    ew = float(comm.exposed_wait_estimate_us_per_step or 0.0)
    et = float(comm.exposed_transfer_estimate_us_per_step or 0.0)
    wait_fraction = ew / (ew + et) if ew + et > 0 else 0.0
    top_name = (top.kind if top else "communication").replace("_", " ")
    evidence = {
        "exposed_fraction": share,
        "exposed_us_per_step": exposed_us / n_steps,
        "exposed_wait_estimate_us_per_step": ew,
        "exposed_transfer_estimate_us_per_step": et,
        "exposed_wait_estimate_fraction": wait_fraction,
        "wait_basis": "least_wait_estimate",
        "comm_fraction": comm_us / total_us,
        "overlap_fraction": comm.overlap_fraction,
        "top_kind": top.kind if top else None,
        "top_kind_time_us": top.time_us if top else None,
        "top_kind_count": top.count if top else None,
        "top_kind_calls_per_step": top.calls_per_step if top else None,
        "top_kind_busbw_gbps": top.busbw_gbps if top else None,
        "top_kind_busbw_basis": top.busbw_basis if top else None,
        "allreduce_median_bytes": comm.ddp_bucket_bytes.median_bytes,
        "threshold_fraction": th.exposed_comm_fraction,
    }
    head = f"{100 * share:.0f} % of the step time is communication that compute does not hide"
    if wait_fraction >= th.exposed_wait_mostly_fraction:
        impact = ew / step_us
        most = "mostly" if ew > et else "in part"  # "mostly": the larger part only
        title = (
            f"{head}, {most} waiting for other ranks ({fmt_duration_us(ew)}/step, estimated "
            f"from this trace; {top_name})"
        )
        recommendation = (
            "This rank mostly waits in its collectives for other ranks to arrive: not slow "
            "communication, so bucket sizes or the interconnect will not change it. Open "
            "the view across ranks (all ranks of the run profiled) to see which rank is "
            "late and by how much per step, then look at that rank's host work (data "
            "loading, logging, evaluation, Python before backward) and GPU."
        )
    else:
        impact = et / step_us
        title = f"{head} (mostly {top_name} transfer, {fmt_duration_us(et)}/step estimated)"
        recommendation = (
            "Overlap communication with compute. DDP: gradients are all-reduced in buckets "
            "during backward; tune DistributedDataParallel(bucket_cap_mb=...) so the first "
            "buckets start earlier (smaller) or pay less per-call overhead (larger), pass "
            "gradient_as_bucket_view=True to skip bucket copies, and with gradient "
            "accumulation wrap the non-final micro-steps in model.no_sync() so only the "
            "last one all-reduces. FSDP: forward_prefetch=True and "
            "backward_prefetch=BackwardPrefetch.BACKWARD_PRE to issue the next all-gather "
            "before it is needed. If bus bandwidth is far below the interconnect's peak, "
            "check NCCL's transport (NVLink / InfiniBand) and message sizes. With every "
            "rank profiled, the view across ranks separates wait from transfer exactly."
        )
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    return make_diagnosis(
        "exposed_communication", severity, title, evidence, recommendation, "communication", impact
    )


def _straggler(inp: RunInput) -> list[Diagnosis]:
    """``communication_straggler``: ``run["straggler"]`` is set (consistent and costly:
    :mod:`~tb_kineto_insights.analysis.run_view`); ``impact_fraction`` = its
    ``share_of_step`` (what the other ranks lose to it per step ÷ their step time),
    severity from it. Fires on h200x2 ``ddp_straggler`` (rank 1, ≈ 20 ms/step); quiet on
    ``ddp_default``, ``ddp_tuned``, ``fsdp``."""
    run, th = inp.run, inp.th
    s = run.get("straggler")
    if not s or s.get("share_of_step") is None:
        return []
    share = float(s["share_of_step"])
    if severity_for_impact(share, th) is None:
        return []
    prediction = straggler_prediction(run)
    impact = prediction.saving_fraction if prediction is not None else share
    severity = severity_for_impact(impact, th)
    if severity is None:
        return []
    return [
        make_diagnosis(
            "communication_straggler",
            severity,
            _straggler_title(s, share),
            {
                "rank": s["rank"],
                "worker": s["worker"],
                "delay_us_per_step": s["delay_us_per_step"],
                "share_of_step": share,
                "p_value": s["p_value"],
                "lateness_excess_us_per_step": s["lateness_excess_us_per_step"],
                "lateness_noise_us": s["lateness_noise_us"],
                "lateness_min_excess_us": s["lateness_min_excess_us"],
                "last_steps": s["last_steps"],
                "tested_steps": s["tested_steps"],
                "last_count": s["last_count"],
                "matched_count": s["matched_count"],
                "last_fraction": s["last_fraction"],
                "others_wait_us_per_step": s["others_wait_us_per_step"],
                "others_hidden_wait_us_per_step": s["others_hidden_wait_us_per_step"],
                "others_exposed_wait_us_per_step": s["others_exposed_wait_us_per_step"],
                "ranks_profiled": run.get("worker_count"),
                "world_size": run.get("world_size"),
                "cause": s.get("cause"),
                "basis": s.get("basis", "steps"),
                "per_collective": s.get("per_collective"),
            },
            f"The other ranks wait in their collectives for rank {s['rank']}. "
            + _cause_advice(s)
            + _STRAGGLER_ADVICE,
            "run",
            impact,
            prediction,
        )
    ]


def straggler_prediction(run: Mapping[str, Any]) -> FixPrediction | None:
    """The job's step with the straggler's lead-up made the median rank's: each rank's
    mean steady step less what it loses to the straggler on its critical path (its
    exposed wait: the wait not hidden under its own compute, measured across ranks), the
    straggler's less its delay (its lateness beyond the others'); the job runs at its
    slowest rank, before and after. ``"estimate"``: first order, from the measured waits
    (no rank's graph is replayed here). None without per-rank steps."""
    s = run.get("straggler") or {}
    rows = [r for r in run.get("ranks", []) if r.get("mean_step_us")]
    if not s or not rows:
        return None
    actual = max(float(r["mean_step_us"]) for r in rows)
    predicted = max(
        float(r["mean_step_us"])
        - float(
            s.get("delay_us_per_step") or 0.0
            if r.get("rank") == s.get("rank")
            else r.get("exposed_wait_us_per_step") or 0.0
        )
        for r in rows
    )
    fix = f"rank {s.get('rank')}'s extra work removed: the others' exposed wait for it gone"
    return prediction_of(fix, "estimate", actual, predicted)


def _exposed_run(inp: RunInput) -> list[Diagnosis]:
    """``exposed_communication`` across ranks, one per rank (``evidence.rank``): the
    rank's exposed communication is at least ``exposed_comm_fraction`` of its step,
    split exactly into exposed wait and exposed transfer. When the wait is at least
    ``exposed_wait_mostly_fraction`` of it, the diagnosis says the rank is waiting and
    names the straggler (or the skew when no rank stands out), with no bucket or
    interconnect advice; ``impact_fraction`` = exposed wait ÷ step. Otherwise it is the
    transfer that is exposed: bucket/overlap advice, ``impact_fraction`` = exposed
    transfer ÷ step. These replace the rank's span-level ``exposed_communication`` (an
    estimate from one trace). On ``ddp_straggler`` rank 0 it says waiting for rank 1."""
    out = []
    for row in inp.run.get("ranks", []):
        d = _exposed_rank(inp.run, row, inp.th)
        if d is not None:
            out.append(d)
    return out


def _exposed_rank(
    run: Mapping[str, Any], row: Mapping[str, Any], th: Thresholds
) -> Diagnosis | None:
    step_us = row.get("mean_step_us")
    exposed_us = row.get("mean_exposed_us")
    ew, et = row.get("exposed_wait_us_per_step"), row.get("exposed_transfer_us_per_step")
    if not step_us or exposed_us is None or ew is None or et is None or ew + et <= 0:
        return None
    share = exposed_us / step_us
    if share < th.exposed_comm_fraction:
        return None
    wait_fraction = ew / (ew + et)
    straggler = run.get("straggler")
    rank = row["rank"]
    evidence: dict[str, Any] = {
        "rank": rank,
        "worker": row["worker"],
        "exposed_fraction": share,
        "exposed_us_per_step": exposed_us,
        "exposed_wait_us_per_step": ew,
        "exposed_transfer_us_per_step": et,
        "exposed_wait_fraction": wait_fraction,
        "wait_us_per_step": row.get("wait_us_per_step"),
        "transfer_us_per_step": row.get("transfer_us_per_step"),
        "straggler_rank": straggler["rank"] if straggler else None,
        "busbw_gbps": {k["kind"]: k["busbw_gbps"] for k in run.get("kinds", [])},
        "threshold_fraction": th.exposed_comm_fraction,
    }
    head = (
        f"Rank {rank}: {_ms(exposed_us)}/step of communication is exposed "
        f"({100 * share:.0f} % of its step)"
    )
    if wait_fraction >= th.exposed_wait_mostly_fraction:
        impact = ew / step_us
        if straggler and straggler["rank"] != rank:
            whom = f"rank {straggler['rank']} (the straggler)"
            advice = (
                f"This is not slow communication: rank {rank} waits in its collectives for "
                f"rank {straggler['rank']} to arrive (see communication_straggler); bucket "
                "sizes or the interconnect will not change it. Make the ranks arrive "
                f"together: {_STRAGGLER_ADVICE}"
            )
        elif straggler:  # this rank is the straggler: its wait is in the others' turns
            others = "the other rank" if (run.get("worker_count") or 0) == 2 else "the others"
            whom = (
                f"{others} in the collectives it reached first (rank {rank} is the "
                "straggler: the others wait longer for it, see communication_straggler)"
            )
            advice = (
                f"This is not slow communication: rank {rank} is the rank the others wait "
                "for (see communication_straggler); its own wait is in the few collectives "
                "it reached first. Make the ranks arrive together: " + _STRAGGLER_ADVICE
            )
        else:
            test = run.get("straggler_test") or {}
            two = (run.get("worker_count") or 0) == 2
            if test.get("rank") is not None and test["rank"] != rank:
                # name who arrived last, and why it is not called a straggler
                why = (
                    "its lateness is within the step-to-step noise"
                    if not test.get("consistent")
                    else "its own lateness costs the others under "
                    f"{100 * th.straggler_min_share_of_step:.0f} % of the step"
                )
                evidence["last_rank"] = test["rank"]
                evidence["last_rank_last_steps"] = test.get("last_steps")
                evidence["last_rank_tested_steps"] = test.get("tested_steps")
                whom = (
                    f"rank {test['rank']}, last to arrive in {test.get('last_steps')} of "
                    f"{test.get('tested_steps')} steps (not called a straggler: {why})"
                )
            else:
                whom = "the other rank to arrive" if two else "the other ranks to arrive"
                whom += " (start skew, no consistent straggler)"
            advice = (
                f"This is not slow communication: rank {rank} waits in its collectives for "
                "ranks that arrive later. No rank is consistently last and costly enough to "
                "be called a straggler (see straggler_test in the view across ranks: its "
                "lateness against the step-to-step noise, and its cost). Look for uneven work "
                "across ranks (data, sequence lengths, host-side work) in the step panels "
                "of the ranks, and the largest skews in the view across ranks."
            )
        title = f"{head}, {_ms(ew)}/step of it waiting for {whom}"
    else:
        impact = et / step_us
        title = f"{head}, {_ms(et)}/step of it transfer that compute does not hide"
        advice = _TRANSFER_ADVICE
        world, profiled = run.get("world_size"), run.get("worker_count") or 0
        if world is not None and profiled < world:
            evidence["ranks_not_profiled"] = world - profiled
            title += f" (or waiting for the {world - profiled} ranks not profiled)"
            advice = (
                f"Only {profiled} of {world} ranks were profiled: the transfer measured here "
                "includes any wait for the others; profile all ranks (or a whole process "
                "group) to separate them. " + _TRANSFER_ADVICE
            )
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    return make_diagnosis("exposed_communication", severity, title, evidence, advice, "run", impact)


def _exposed_collective(d: Diagnosis, inp: SpanInput) -> Moment | None:
    """The collective with the most exposed time (``communication.sequence``)."""
    comm = inp.communication
    if comm is None or not comm.sequence:
        return None
    top = max(comm.sequence, key=lambda c: c.exposed_us)
    if top.exposed_us <= 0:
        return None
    return moment_at(
        inp.index,
        top.start_ns,
        top.end_ns,
        f"the collective with the most exposed time ({top.kind} #{top.seq}, "
        f"{top.exposed_us:.1f} µs exposed)",
    )


def _rank_exposed_collective(d: Diagnosis, inp: RunInput) -> Moment | None:
    """On the rank's own timeline, its collective with the most exposed time."""
    worker = str(d.evidence.get("worker"))
    span = dict(inp.workers).get(worker)
    if span is None or not span.communication.sequence:
        return None
    top = max(span.communication.sequence, key=lambda c: c.exposed_us)
    if top.exposed_us <= 0:
        return None
    return collective_moment(
        span.steps,
        top,
        f"the collective with the most exposed time ({top.kind} #{top.seq}, "
        f"{top.exposed_us:.1f} µs exposed)",
        worker,
    )


def _worst_late_collective(d: Diagnosis, inp: RunInput) -> Moment | None:
    """The straggler's worst collective: the matched collective where it came last with
    the largest skew (``run["largest_skews"]``, matched to its own entry by process
    group and sequence key), on its timeline."""
    worker = str(d.evidence.get("worker"))
    span = dict(inp.workers).get(worker)
    if span is None:
        return None
    rank = d.evidence.get("rank")
    for item in inp.run.get("largest_skews") or []:
        if item.get("last_rank") != rank:
            continue
        call = next(
            (
                c
                for c in span.communication.sequence
                if c.pg == item["pg"] and c.seq == item["seq"] and c.kind == item["kind"]
            ),
            None,
        )
        if call is None:
            continue
        found = collective_moment(
            span.steps,
            call,
            f"the straggler's worst collective ({call.kind} #{call.seq}: the others "
            f"waited {item['skew_us']:.1f} µs for it)",
            worker,
        )
        if found is not None:
            return found
    return None


_EXPOSED = (*IMPACT_THRESHOLDS, "exposed_comm_fraction", "exposed_wait_mostly_fraction")

COMMUNICATION_STRAGGLER = Rule(
    id="communication_straggler",
    area="communication",
    label="Communication straggler",
    definition="One rank is consistently late to the collectives (its per-step lateness "
    "beyond the step-to-step noise, or last in most collectives of most steps where the "
    "ranks re-align at every collective) and costs the others a real share of their "
    "step; the view across ranks names why it is late.",
    thresholds=IMPACT_THRESHOLDS,
    run_check=_straggler,
    run_moment=_worst_late_collective,
    fix=Fix("the slow rank's extra work removed"),
)
EXPOSED_COMMUNICATION = Rule(
    id="exposed_communication",
    area="communication",
    label="Exposed communication",
    definition="Communication that compute does not hide takes at least "
    "`exposed_comm_fraction` of the step, split into waiting for other ranks and "
    "transfer (estimated from one trace; exact across ranks, which replaces it).",
    panels=("communication", "steps"),
    thresholds=(*_EXPOSED, "straggler_min_share_of_step"),
    check=_exposed_span,
    moment=_exposed_collective,
    run_check=_exposed_run,
    run_moment=_rank_exposed_collective,
    run_replaces_span=True,
    fix=Fix("communication overlapped with compute"),
)
