"""Every threshold the analysis and the diagnoses use, in one documented place.

Override from the CLI with ``--threshold NAME=VALUE`` (repeatable), or in code with
``Thresholds().replace(name=value)``. Fractions are 0..1 and denominators are named.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Thresholds:
    """Thresholds with their meaning; see each field's comment."""

    #: Every diagnosis that costs step time states ``impact_fraction``, the share of step
    #: time it explains; below this share nothing is raised (silence beats a weak alarm).
    min_impact_fraction: float = 0.05
    #: ``medium`` from this impact (share of step time) up, ``low`` below it ...
    impact_medium_fraction: float = 0.10
    #: ... and ``high`` from this one up.
    impact_high_fraction: float = 0.30
    #: A kernel shorter than this (µs) counts as short (kernel density, fusion).
    short_kernel_us: float = 10.0
    #: small_kernel_flood: share of kernels (by count) that are short, at least ...
    small_kernel_count_fraction: float = 0.5
    #: ... and at least this many kernels per step on average.
    small_kernel_min_per_step: float = 200.0
    #: small_kernel_flood: an idle gap before a short kernel counts as launch-bound only
    #: when shorter than this (µs). Eager PyTorch spends tens of µs of host time per op,
    #: so nearly all of sample_logs/transformer_eager's launch-bound gaps are shorter; a
    #: longer wait before one kernel is other host work (DDP forward hooks once per step
    #: on h200x2/ddp_tuned, torch.compile guards) that fusion would not remove. Figures:
    #: benchmarks/RESULTS.md.
    launch_bound_max_gap_us: float = 200.0
    #: Fusion candidates: shortest repeated run of consecutive short kernels ...
    fusion_min_length: int = 3
    #: ... and how often the same run must recur within the profiled steps.
    fusion_min_repeats: int = 3
    #: A GPU gap opens "by synchronization" when a sync call on the launching thread
    #: returns no later than this (µs) after the gap starts.
    sync_return_tolerance_us: float = 20.0
    #: Idle-cause diagnoses need the cause to idle the GPU for at least
    #: ``min_impact_fraction`` of the step in this many steps, when the trace has at least
    #: ``idle_cause_min_steps + 1`` steps: one stall in a profile of several steps (the
    #: first profiled step starting on an empty GPU queue, a one-off checkpoint) is listed
    #: among the largest gaps but is not a steady cost to act on.
    idle_cause_min_steps: int = 2
    #: optimizer_step_bound: the GPU idles while the host is in the optimizer step for at
    #: least this share of the step time (its host time is exposed, not hidden behind
    #: queued GPU work); its impact is that idle plus the GPU work the step launches.
    #: Fires on sample_logs/transformer_eager and optimizer_per_param (per-parameter
    #: AdamW); quiet on transformer_compile (fused AdamW: what idles the GPU there is the
    #: grouping of tensors in Python, and the fix the card gives, foreach/fused, is
    #: already taken). Figures: benchmarks/RESULTS.md.
    optimizer_idle_min_fraction: float = 0.10
    #: ... and, for an optimizer already in its multi-tensor form (mode foreach, fused or
    #: compiled), at least this share: the fix the card gives first (foreach/fused) is
    #: taken, and what is left is Python overhead of the same kind as every other op's in
    #: a launch-bound loop (small_kernel_flood, low_gpu_utilization say that); named only
    #: when it is a major cost (quiet on sample_logs/optimizer_foreach, the foreach twin of
    #: optimizer_per_param, and on optimizer_fused; figures: benchmarks/RESULTS.md).
    optimizer_tuned_idle_min_fraction: float = 0.30
    #: cudnn_autotune_in_step: host synchronizations inside convolution ops that make a
    #: step a tuning step (cuDNN's benchmark waits for each trial; an ordinary
    #: convolution waits for nothing). Raised when at least ``idle_cause_min_steps``
    #: steps tune (once is warm-up) and the tuning time reaches ``min_impact_fraction``.
    cudnn_autotune_min_syncs: int = 2
    #: low_gpu_utilization: busiest device's busy time / step time below this (and its
    #: idle not explained by other diagnoses at least ``min_impact_fraction``).
    low_utilization: float = 0.50
    #: exposed_communication: communication not hidden under compute / step time, at
    #: least; severity then follows its impact (severity_for_impact).
    exposed_comm_fraction: float = 0.10
    #: exposed_communication says "waiting" (for a straggler or skew, no bucket or
    #: interconnect advice) when at least this share of the exposed communication is
    #: wait (run view: exact; one trace alone: the least-wait estimate).
    exposed_wait_mostly_fraction: float = 0.5
    #: communication_straggler, consistency: the rank with the largest mean per-step
    #: lateness against the others', its mean excess (Student's t against the noise of
    #: the run pooled with the reference below) and its smallest per-step excess (against
    #: the reference), the better of the two times 2, times n (the candidate is picked
    #: among n ranks: analysis/straggler.py); consistent when that p-value is at most
    #: this. It is the false-alarm rate of consistency alone under normal noise of the
    #: reference's size; with the cost bar below, balanced runs synthesised from the real
    #: h200x2 jitter alarm in under 1 % of the trials at every size (benchmarks/
    #: RESULTS.md, "Straggler rule").
    straggler_alpha: float = 0.01
    #: ... the reference noise of per-step lateness between balanced ranks: the residual
    #: standard deviation of the ranks × steps fit as a share of the mean step time,
    #: measured on the balanced h200x2 runs (ddp_default, ddp_tuned, fsdp; printed by
    #: benchmarks/straggler_false_alarms.py, figures in benchmarks/RESULTS.md). A cluster
    #: whose balanced ranks jitter more should set its own (it alarms more often with 2
    #: ranks and few steps otherwise: RESULTS.md).
    straggler_reference_noise_share_of_step: float = 0.050
    #: ... and the degrees of freedom it was measured on (below 3: no reference, the
    #: run's own noise only).
    straggler_reference_noise_df: int = 12
    #: ... and costly: what the other ranks lose to it per step (median over steps) /
    #: their mean step time, at least.
    straggler_min_share_of_step: float = 0.05
    #: communication_straggler names a cause (what the straggler spends longer on than
    #: the median rank, per step: analysis/straggler_cause.py) only when that excess is at
    #: least this share of the delay it causes the others.
    straggler_cause_min_share_of_delay: float = 0.25
    #: memory_growth: steady growth over at least this many steps ...
    memory_growth_min_steps: int = 3
    #: ... of at least this many bytes per step (step-end allocated, least squares) ...
    memory_growth_min_bytes_per_step: float = 1024.0 * 1024.0
    #: ... that fits a line this well (r², 0..1).
    memory_growth_min_r2: float = 0.9
    #: memory_growth is ``high`` when, at its rate, the device is full within this many
    #: steps (``medium`` when later, or when the device's memory is unknown).
    memory_growth_high_steps_to_capacity: float = 10_000.0
    #: memory_fragmentation counts an allocation only when it asks for more than this
    #: (bytes): requests up to 1 MiB come from the caching allocator's small pool, whose
    #: 2 MiB segments cannot use the large pool's cached free bytes, and vice versa.
    fragmentation_min_request_bytes: float = 1024.0 * 1024.0
    #: memory_fragmentation needs such allocations in at least this many steps after the
    #: first profiled one (steady state, not the allocator warming up).
    fragmentation_min_steps: int = 2
    #: ... and reserved memory growing faster than the allocated peak by at least this
    #: many bytes per step (else the new segments hold memory that is really kept).
    fragmentation_min_excess_bytes_per_step: float = 1024.0 * 1024.0
    #: memory_fragmentation is ``high`` when the reserved peak is at least this share of
    #: device memory (``deviceProperties.totalGlobalMem``) ...
    fragmentation_high_capacity_fraction: float = 0.75
    #: ... ``medium`` when, at its reserved growth per step, the device is full within
    #: this many steps, ``low`` otherwise (or when the device's memory is unknown).
    fragmentation_medium_steps_to_capacity: float = 1000.0
    #: memory_near_capacity: reserved peak / device memory (totalGlobalMem), at least.
    near_capacity_fraction: float = 0.9
    #: diff: a change too small to matter gets no verdict ("unchanged"), whatever its
    #: noise test says. To get one, a change must be at least this share of the base
    #: value ...
    diff_min_change_fraction: float = 0.01
    #: ... and, for a time per step, at least this share of the base's mean step time
    #: (for a share such as GPU utilization, at least this many hundredths: 0.005 =
    #: 0.5 percentage points). Under either bar the verdict is ``unchanged``.
    diff_min_step_fraction: float = 0.005
    #: diff: a metric with one value per side (no per-step samples) gets a verdict from
    #: this relative change up; between ``diff_min_change_fraction`` and this it is
    #: ``within noise``.
    diff_single_value_verdict_fraction: float = 0.10
    #: history: a run starts a new level of a metric only when it moves the metric by at
    #: least this share of the previous level (on top of the diff's rules: beyond the
    #: step-to-step noise, and ``diff_min_change_fraction``): runs of one job on shared
    #: machines differ from run to run by more than their steps differ from each other.
    history_min_change_fraction: float = 0.05
    #: history: a new level holds for at least this many consecutive runs (the changed
    #: run included); fewer runs off the level, followed by a run back on it, are
    #: outliers. A level is judged against only once it has this many runs.
    history_min_runs_per_level: int = 2
    #: trace_too_few_steps: fewer profiled steps than this leave the diff's noise rule
    #: (Welch, n >= 2 per side) without a usable step-to-step deviation.
    quality_min_steps: int = 3
    #: trace_warmup_step: the first profiled step lasts at least this many times the
    #: median of the others (cudnn autotune, torch.compile, lazy init inside it) ...
    quality_warmup_ratio: float = 2.0
    #: ... and at least this many steps are profiled (the others set the median).
    quality_warmup_min_steps: int = 3
    #: trace_unequal_steps: step durations' coefficient of variation (sample standard
    #: deviation / mean, first step left out when it is a warm-up step) at least this ...
    quality_unequal_steps_cv: float = 0.5
    #: ... over at least this many steps.
    quality_unequal_min_steps: int = 4
    #: trace_cuda_launch_blocking: at least this share of kernel launches whose runtime
    #: call (cudaLaunchKernel, by correlation id) ends at or after its kernel's end ...
    quality_blocking_launch_fraction: float = 0.9
    #: ... among at least this many launches linked to a kernel.
    quality_blocking_min_launches: int = 20
    #: low_kernel_efficiency: a matmul/conv/attention op group (tensor cores, or any unit
    #: but fp32 on CUDA cores, which has its own verdict) reaching less than this share of
    #: its roofline (min(peak, intensity × bandwidth)) ...
    low_kernel_efficiency_roof_fraction: float = 0.30
    #: ... costs the time above what it would take at this share of the same roof: what
    #: cuBLAS reaches on large aligned GEMMs (sample_logs/eff_gemm_aligned 76 %,
    #: eff_mlp_bf16 83-85 %). matmul_without_tensor_cores uses the same cap on the
    #: efficiency it assumes on tensor cores; with a margin below it (0.6), the replayed
    #: fp32 → bf16 pairs came out 15-23 % slower than measured (benchmarks/RESULTS.md).
    efficiency_reachable_roof_fraction: float = 0.75
    #: The same for convolutions: what cuDNN reaches in the layout the advice names
    #: (channels_last), on sample_logs/eff_cnn_* and eff_resnet_* (the conv models of
    #: cudnn_autotune_fixed and dataloader_workers4). A higher share (the GEMMs' 0.6)
    #: would claim more time than switching to channels_last saves in their step times.
    #: Figures: benchmarks/RESULTS.md.
    efficiency_reachable_conv_roof_fraction: float = 0.30
    #: The same for attention: what PyTorch's flash backend reaches in bf16
    #: (sample_logs/eff_sdpa_flash_bf16, FLOPs of the causal half); the memory-efficient
    #: backend reaches less (eff_sdpa_efficient_bf16). Figures: benchmarks/RESULTS.md.
    efficiency_reachable_attention_roof_fraction: float = 0.28
    #: Roofline peaks for a GPU that the table (analysis/data/gpu_peaks.json) does not
    #: know, or to replace its figures: dense 16-bit tensor-core FLOP/s (bf16/fp16), fp32
    #: FLOP/s on CUDA cores, and memory bytes/s. 0 = from the table; the user's peaks are
    #: used when the bandwidth and at least one FLOP/s figure are given.
    peak_tensor_flops_per_s: float = 0.0
    peak_fp32_flops_per_s: float = 0.0
    peak_memory_bytes_per_s: float = 0.0
    #: Op groups listed in ``efficiency.rows`` (by time per step).
    efficiency_max_rows: int = 40
    #: Points per memory series sent for display (peaks kept).
    memory_series_points: int = 2000
    #: Gaps listed in ``idle.largest_gaps`` per device.
    largest_gaps: int = 10
    #: Rows in top-kernel tables.
    top_kernels: int = 15
    #: Ops listed per device in ``idle.devices[].cpu_ops_top`` (and named in titles:
    #: the first 3) and kernels in ``idle.devices[].optimizer.top_kernels``.
    idle_top_ops: int = 5
    #: Python frames listed in ``idle.devices[].python_frames`` (with stacks) ...
    python_frames_listed: int = 20
    #: ... and call paths listed per frame (``callers``).
    python_callers_listed: int = 5
    #: An idle-cause diagnosis names at most this many Python frames ...
    python_frames_named: int = 3
    #: ... each holding at least this share of the cause's idle (a frame with less is
    #: one of many places, not the place to look).
    python_frame_min_fraction: float = 0.10
    #: A frame holding at least this share of a cause's idle is *the* cost: the
    #: recommendation is about that frame (for host_sync: when the host spent it after
    #: the sync, in another frame than the one that synchronised, the call, not the
    #: sync, idles the GPU).
    python_frame_dominant_fraction: float = 0.5
    #: Timeline level of detail: in a GPU stream lane with more than
    #: ``timeline_lod_min_events`` events in one step, each run of consecutive events
    #: shorter than this (µs), separated by less than it, is stored as one block with
    #: its count (a flood of tiny kernels stays countable and small to send).
    timeline_block_us: float = 1.0
    #: ... only in lanes with more events than this in one step (smaller lanes are kept
    #: event by event).
    timeline_lod_min_events: int = 20000

    def replace(self, **changes: Any) -> Thresholds:
        """A copy with some fields changed; unknown names raise ``ValueError``."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown threshold(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)

    def with_overrides(self, items: list[str]) -> Thresholds:
        """Apply ``NAME=VALUE`` strings (the CLI's ``--threshold``).

        Raises:
            ValueError: malformed item, unknown name, or a value of the wrong type.
        """
        types = {f.name: f.type for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for item in items:
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep or name not in types:
                close = difflib.get_close_matches(name, list(types), n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                raise ValueError(
                    f"bad --threshold {item!r}: {hint}expected NAME=VALUE with NAME one of "
                    + ", ".join(sorted(types))
                )
            try:
                number = int(value) if types[name] in (int, "int") else float(value)
            except ValueError as exc:
                raise ValueError(f"bad --threshold {item!r}: {exc}") from exc
            if not math.isfinite(number) or number < 0:
                raise ValueError(f"bad --threshold {item!r}: must be a finite number >= 0")
            changes[name] = number
        return self.replace(**changes)

    def to_dict(self) -> dict[str, Any]:
        """Field name → value."""
        return dataclasses.asdict(self)


DEFAULT_THRESHOLDS = Thresholds()
