"""Rules of the ``efficiency`` area: the GPU is busy, but its kernels run far from the
roof of the device (the efficiency panel, :mod:`~tb_kineto_insights.analysis.efficiency`).

Every saving assumes a slow group can reach what its kind reaches on this GPU
(:func:`reachable_roof_fraction`; the defaults, each set from real traces: GEMMs 0.6 of
the roof, channels_last convolutions 0.3, flash attention 0.28); impact = estimated time
saved per step × the device's busy share / mean step time (on a launch-bound run faster
kernels do not shorten the step); severity from the impact; nothing without a roof.

- ``matmul_without_tensor_cores``: fp32 matmul/conv groups on CUDA cores (every kernel
  an fp32 convolution launches, when TF32 is off for cuDNN: ``analysis/efficiency.py``).
  Cost: the time they would save at the same share of the bf16 tensor-core roof
  (bounded by the memory roof at half the bytes, and capped at the reachable share);
  convolutions at what bf16 channels_last convolutions reach
  (``efficiency_reachable_conv_bf16_roof_fraction``), the fix the card then names
  (``resnet50_fp32_nchw``: claimed ~66 %, measured 70.5 % with bf16 channels_last). Fires on
  ``sample_logs/eff_mlp_fp32``, ``eff_ddp_fp32`` and the shared fp32 DDP runs; quiet on
  ``eff_mlp_tf32`` / ``eff_mlp_bf16`` / ``eff_ddp_tf32`` / ``eff_ddp_bf16``.
- ``low_kernel_efficiency``: matmul-class groups below
  ``low_kernel_efficiency_roof_fraction`` of their roof and below what their kind
  reaches; cost: the time above what they would take at that reachable share. Fires on
  ``eff_gemm_odd`` (4095³), the NCHW fp32 convolutions (``eff_cnn_fp32_nchw``,
  ``cudnn_autotune_fixed``: no more than channels_last measures) and memory-efficient
  attention (``eff_sdpa_efficient_bf16``); quiet on ``eff_gemm_aligned``,
  ``eff_gemm_skinny`` (M = 16: memory-bound, near its bandwidth roof), channels_last
  convolutions and flash attention (``eff_sdpa_flash_bf16``).
- ``attention_not_fused``: attention written by hand materialises its scores
  (:func:`_attention_not_fused`); cost: its kernels' time above what SDPA reaches on the
  same shapes. Fires on ``attention_by_hand``; quiet on ``attention_sdpa``.
"""

from __future__ import annotations

from tb_kineto_insights.analysis.attention_unfused import unfused_attention
from tb_kineto_insights.analysis.efficiency import MATMUL_CLASS, peak_of
from tb_kineto_insights.analysis.efficiency_peaks import TENSOR_UNIT
from tb_kineto_insights.analysis.rules.base import (
    IMPACT_THRESHOLDS,
    Fix,
    Rule,
    SpanInput,
    fix_prediction,
    make_diagnosis,
    pct,
    severity_for_impact,
)
from tb_kineto_insights.analysis.rules.fixes import kernel_rows_faster, kernels_faster
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.units import fmt_bytes
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.efficiency import EfficiencyPanel, EfficiencyPeak, EfficiencyRow
from tb_kineto_insights.schema.steps import StepsPanel


def _busy_share(steps: StepsPanel, device: int | None) -> float:
    """The device's GPU utilization (busy / step time), 1 when unknown."""
    for d in steps.devices:
        if d.device == device and d.gpu_utilization_fraction is not None:
            return min(1.0, max(0.0, d.gpu_utilization_fraction))
    return 1.0


def _tflops(x: float | None) -> str:
    return "n/a" if x is None else f"{x / 1e12:.0f} TFLOP/s"


def reachable_roof_fraction(category: str, th: Thresholds) -> float:
    """The share of its roof an op group of ``category`` is assumed to be able to reach
    (the basis of every saving claimed here): ``efficiency_reachable_roof_fraction`` for
    matmuls, ``efficiency_reachable_conv_roof_fraction`` for convolutions,
    ``efficiency_reachable_attention_roof_fraction`` for attention (each set from real
    traces: :mod:`~tb_kineto_insights.analysis.thresholds`)."""
    if category == "conv":
        return th.efficiency_reachable_conv_roof_fraction
    if category == "attention":
        return th.efficiency_reachable_attention_roof_fraction
    return th.efficiency_reachable_roof_fraction


def tensor_core_saving_us(
    row: EfficiencyRow, peak: EfficiencyPeak, th: Thresholds
) -> tuple[float, float]:
    """Estimated time saved per step (µs) if an fp32 CUDA-core group ran on tensor
    cores, ``(bf16, tf32)``: its FLOPs at the same share of the tensor-core roof as it
    reaches of the fp32 one (at most :func:`reachable_roof_fraction` of its category),
    the roof bounded by the memory roof (bf16 moves half the bytes, TF32 as many); 0
    where the peak is unknown. A convolution in bf16 is assumed at what convolutions
    reach in bf16 channels_last (``efficiency_reachable_conv_bf16_roof_fraction``): the
    fix changes its algorithm (layout, tensor-core kernels), not only its unit, so its
    share of the fp32 roof says little of its share there."""
    if row.flops_per_call is None or row.roof_fraction is None:
        return 0.0, 0.0
    eff = min(row.roof_fraction, reachable_roof_fraction(row.category, th))
    flops = row.flops_per_call * row.calls_per_step
    bw = peak.memory_bytes_per_s
    out = []
    for unit, byte_scale in (("bf16_tensor", 0.5), ("tf32_tensor", 1.0)):
        p = peak_of(peak, unit)
        share = eff
        if unit == "bf16_tensor" and row.category == "conv":
            share = th.efficiency_reachable_conv_bf16_roof_fraction
        if p is None or share <= 0:
            out.append(0.0)
            continue
        intensity = row.flops_per_call / (row.bytes_per_call * byte_scale)
        new_us = flops / (share * min(p, intensity * bw)) * 1e6
        out.append(max(0.0, row.time_us_per_step - new_us))
    return out[0], out[1]


def _key(row: EfficiencyRow) -> tuple[str, str, str]:
    """The group's key among the efficiency panel's kernels (``WhatIf.kernel_groups``)."""
    return (row.op, row.shapes, row.dtype)


def _low_efficiency_advice(worst: EfficiencyRow) -> str:
    """What to do about the slowest group, by its kind."""
    reason = f"Likely reason: {worst.reason}. " if worst.reason else ""
    if worst.category == "attention":
        return (
            "These attention kernels are far below what the flash backend reaches on the "
            "same shapes. " + reason + "Let F.scaled_dot_product_attention use the flash "
            "backend (fp16/bf16, head dim a multiple of 8 up to 256, no arbitrary mask: "
            "pass is_causal=True instead of a causal mask) or cuDNN attention "
            "(torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)); check which "
            "kernel each attention group runs in the efficiency panel."
        )
    if worst.category == "conv":
        return (
            "These convolutions are far below what cuDNN reaches on the same shapes. "
            + reason
            + "Keep activations and weights in channels_last (model.to(memory_format="
            "torch.channels_last) and the input too), use channel counts that are "
            "multiples of 8, and let cuDNN pick its fastest algorithms "
            "(torch.backends.cudnn.benchmark = True for fixed input sizes)."
        )
    return (
        "These kernels are far below what the GPU reaches on the same work. "
        + reason
        + "Pad matmul dims (hidden sizes, vocabulary, sequence) to multiples of "
        "8 (16 for fp8), batch more work into fewer, larger matmuls, or fuse "
        "small ones (torch.compile); check the shapes in the efficiency panel."
    )


def _roof_inputs(inp: SpanInput) -> tuple[EfficiencyPanel, EfficiencyPeak, float, float] | None:
    """The panel, its peak, the mean step time (µs) and the device's busy share; None
    without a roof, a step time or op groups."""
    panel, steps = inp.efficiency, inp.steps
    if panel is None or steps is None:
        return None
    peak = panel.peak
    step_us = steps.mean_step_us
    if peak is None or not step_us or not panel.rows:
        return None
    return panel, peak, step_us, _busy_share(steps, panel.device)


def _matmul_without_tensor_cores(inp: SpanInput) -> Diagnosis | None:
    """``matmul_without_tensor_cores`` (module docstring)."""
    found = _roof_inputs(inp)
    if found is None:
        return None
    panel, peak, step_us, busy = found
    th = inp.th
    fp32 = [r for r in panel.rows if r.cuda_cores and r.category in MATMUL_CLASS]
    if not fp32:
        return None
    savings = [tensor_core_saving_us(r, peak, th) for r in fp32]
    bf16_us = sum(s[0] for s in savings)
    tf32_us = sum(s[1] for s in savings)
    shares = [
        (_key(r), (r.time_us_per_step - s[0]) / r.time_us_per_step)
        for r, s in zip(fp32, savings, strict=True)
        if r.time_us_per_step > 0
    ]
    prediction = fix_prediction(
        inp,
        "matmul_without_tensor_cores",
        "bf16 autocast: the fp32 matmul groups at the tensor-core rate they can reach",
        kernels_faster(shares),
        min(1.0, bf16_us * busy / step_us),
    )
    impact = prediction.saving_fraction if prediction else min(1.0, bf16_us * busy / step_us)
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    time_us = sum(r.time_us_per_step for r in fp32)
    conv_us = sum(r.time_us_per_step for r in fp32 if r.category == "conv")
    flops = sum((r.flops_per_call or 0.0) * r.calls_per_step for r in fp32)
    achieved = flops / (time_us / 1e6) if time_us > 0 else None
    conv_reach = th.efficiency_reachable_conv_bf16_roof_fraction
    conv_rate = conv_reach * (peak.bf16_tensor_flops_per_s or 0.0)
    convs = conv_us >= 0.5 * time_us  # mostly convolutions: their fix is told first
    what = "fp32 matmuls run on CUDA cores"
    if convs:
        what = (
            f"fp32 convolutions and matmuls run on CUDA cores (convolutions "
            f"{pct(conv_us / step_us)} of the step)"
            if conv_us < time_us
            else "fp32 convolutions run on CUDA cores"
        )
    how = (
        f"bf16 channels_last convolutions (at {pct(conv_reach)} of the bf16 roof, "
        f"{_tflops(conv_rate)}) could save about {pct(impact)} of the step"
        if convs
        else f"tensor cores could save about {pct(impact)} of the step"
    )
    return make_diagnosis(
        "matmul_without_tensor_cores",
        severity,
        f"{what}: {pct(time_us / step_us)} of the step "
        f"at {_tflops(achieved)} (fp32 peak {_tflops(peak.fp32_flops_per_s)}, "
        f"bf16 tensor peak {_tflops(peak.bf16_tensor_flops_per_s)}); {how}",
        {
            "device": panel.device,
            "gpu": peak.model,
            "groups": len(fp32),
            "time_us_per_step": round(time_us, 1),
            "share_of_step": round(time_us / step_us, 4),
            "achieved_flops_per_s": achieved,
            "fp32_peak_flops_per_s": peak.fp32_flops_per_s,
            "tf32_tensor_peak_flops_per_s": peak.tf32_tensor_flops_per_s,
            "bf16_tensor_peak_flops_per_s": peak.bf16_tensor_flops_per_s,
            "estimated_saving_bf16_us_per_step": round(bf16_us, 1),
            "estimated_saving_tf32_us_per_step": round(tf32_us, 1),
            "estimated_step_speedup_bf16": prediction.speedup if prediction else None,
            "estimated_saving_fraction_of_step": round(impact, 4),
            "gpu_busy_fraction": round(busy, 4),
            "kernels": sorted({k for r in fp32 for k in r.kernels})[:5],
            "peak_source": peak.source,
            "convolution_us_per_step": round(conv_us, 1),
            "convolution_share_of_step": round(conv_us / step_us, 4),
            "reachable_conv_bf16_roof_fraction": conv_reach,
            "reachable_conv_bf16_flops_per_s": conv_rate,
        },
        (
            "The convolutions run in fp32 on CUDA cores (cuDNN's implicit GEMM, "
            "Winograd, FFT and dgrad/wgrad kernels, with nchwToNhwc conversions around "
            'them): autocast to bf16 (torch.autocast("cuda", dtype=torch.bfloat16) '
            "around the forward) and keep the model and its input in channels_last "
            "(model.to(memory_format=torch.channels_last), input.to(memory_format="
            f"torch.channels_last)): cuDNN's tensor-core kernels work in NHWC and reach "
            f"about {pct(conv_reach)} of the bf16 roof there ({_tflops(conv_rate)} on "
            "this GPU). Or, keeping fp32 storage, torch.backends.cudnn.allow_tf32 = True "
            'and torch.set_float32_matmul_precision("high") (TF32). Both trade '
            "precision for speed: compare a few hundred steps of loss against the fp32 "
            "run."
            if convs
            else "Let the matmuls use tensor cores: torch.set_float32_matmul_precision"
            '("high") (TF32: fp32 storage, 10-bit mantissa inside the matmul; '
            "usually harmless for training, check the loss curve) or "
            'torch.autocast("cuda", dtype=torch.bfloat16) around the forward '
            "(bf16: half the bytes too, 8-bit mantissa; keep the loss and the "
            "optimizer in fp32). Both trade matmul precision for speed: compare "
            "a few hundred steps of loss against the fp32 run."
        ),
        "efficiency",
        impact,
        prediction,
    )


def _slow_groups(panel: EfficiencyPanel, th: Thresholds) -> tuple[list[EfficiencyRow], list[float]]:
    """The matmul-class groups on tensor cores below ``low_kernel_efficiency_roof_fraction``
    of their roof that would be faster at what their kind reaches, and the time each
    would save per step (µs)."""
    slow: list[EfficiencyRow] = []
    saved: list[float] = []
    for r in panel.rows:
        if (
            r.category in MATMUL_CLASS
            and not r.cuda_cores
            and r.roof_fraction is not None
            and r.roof_fraction < th.low_kernel_efficiency_roof_fraction
            and r.attainable_flops_per_s
            and r.flops_per_call
        ):
            reach = reachable_roof_fraction(r.category, th)
            at_reach = r.flops_per_call * r.calls_per_step / (reach * r.attainable_flops_per_s)
            saving = r.time_us_per_step - at_reach * 1e6
            if saving > 0:  # below the threshold but at what its kind reaches: no claim
                slow.append(r)
                saved.append(saving)
    return slow, saved


def _low_kernel_efficiency(inp: SpanInput) -> Diagnosis | None:
    """``low_kernel_efficiency`` (module docstring)."""
    found = _roof_inputs(inp)
    if found is None:
        return None
    panel, peak, step_us, busy = found
    th = inp.th
    slow, saved = _slow_groups(panel, th)
    if not slow:
        return None
    total = sum(saved)
    prediction = fix_prediction(
        inp,
        "low_kernel_efficiency",
        "the slow groups at the share of their roof their kind reaches",
        kernels_faster(
            [
                (_key(r), (r.time_us_per_step - x) / r.time_us_per_step)
                for x, r in zip(saved, slow, strict=True)
                if r.time_us_per_step > 0
            ]
        ),
        min(1.0, total * busy / step_us),
    )
    impact = prediction.saving_fraction if prediction else min(1.0, total * busy / step_us)
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    worst = max(zip(saved, slow, strict=True), key=lambda x: x[0])[1]
    return make_diagnosis(
        "low_kernel_efficiency",
        severity,
        f"{worst.op} {worst.shapes} ({worst.dtype}) reaches "
        f"{pct(worst.roof_fraction or 0.0)} of its {worst.bound}-bound roof "
        f"({_tflops(worst.achieved_flops_per_s)} of "
        f"{_tflops(worst.attainable_flops_per_s)}); "
        f"{len(slow)} group(s) below {pct(th.low_kernel_efficiency_roof_fraction)} "
        f"cost about {pct(impact)} of the step",
        {
            "device": panel.device,
            "gpu": peak.model,
            "groups": [
                {
                    "op": r.op,
                    "shapes": r.shapes,
                    "dtype": r.dtype,
                    "time_us_per_step": r.time_us_per_step,
                    "achieved_flops_per_s": r.achieved_flops_per_s,
                    "attainable_flops_per_s": r.attainable_flops_per_s,
                    "roof_fraction": r.roof_fraction,
                    "bound": r.bound,
                    "reason": r.reason,
                    "estimated_saving_us_per_step": round(s, 1),
                }
                for s, r in sorted(zip(saved, slow, strict=True), key=lambda x: -x[0])[:5]
            ],
            "groups_below_roof": len(slow),
            "threshold_fraction": th.low_kernel_efficiency_roof_fraction,
            "estimated_saving_us_per_step": round(total, 1),
            "estimated_saving_fraction_of_step": round(impact, 4),
            "reachable_roof_fraction": {c: reachable_roof_fraction(c, th) for c in MATMUL_CLASS},
            "gpu_busy_fraction": round(busy, 4),
            "peak_source": peak.source,
        },
        _low_efficiency_advice(worst),
        "efficiency",
        impact,
        prediction,
    )


def _attention_not_fused(inp: SpanInput) -> Diagnosis | None:
    """``attention_not_fused``: attention written by hand materialises its B·H·L·S scores
    (:func:`~tb_kineto_insights.analysis.attention_unfused.unfused_attention`: the ops
    around a softmax over ``[..., L, S]`` between ``q @ kᵀ`` and ``p @ v``, forward and
    backward, and the kernels they launch).

    Its fix, ``F.scaled_dot_product_attention``, replaces those kernels by fused ones
    that never write the scores: their time per step becomes SDPA's FLOPs for the same
    shapes (forward ``2·B·H·L·S·(D + Dv)``, backward 2.5 ×) at what the flash backend
    reaches (``efficiency_reachable_attention_roof_fraction`` of the peak of the
    scores' dtype: bf16/fp16 tensor cores, else fp32); the host time is left as it is.
    ``impact_fraction`` = (their kernel time − that estimate) × the busy share / the
    mean step. The title states the score shape, its bytes and what the score tensors
    held at the allocated peak. Fires on ``sample_logs/attention_by_hand`` (claimed
    ~78 %, measured 67.74 → 11.33 ms with SDPA: 83 %); quiet on ``attention_sdpa``,
    the ``eff_sdpa_*`` runs and every other sample."""
    found = _roof_inputs(inp)
    if found is None:
        return None
    panel, peak, step_us, busy = found
    th = inp.th
    facts = unfused_attention(inp.index)
    if facts is None or facts.flops_per_step <= 0:
        return None
    unit = TENSOR_UNIT.get(facts.dtype, "fp32")
    roof = peak_of(peak, unit) or peak.fp32_flops_per_s
    if not roof:
        return None
    reach = th.efficiency_reachable_attention_roof_fraction
    fused_us = facts.flops_per_step / (reach * roof) * 1e6
    saving_us = max(0.0, facts.kernel_us_per_step - fused_us)
    prediction = fix_prediction(
        inp,
        "attention_not_fused",
        "F.scaled_dot_product_attention: the attention kernels at SDPA's reachable rate",
        kernel_rows_faster(facts.kernel_rows, fused_us / facts.kernel_us_per_step)
        if facts.kernel_us_per_step > 0
        else lambda wi: None,
        min(1.0, saving_us * busy / step_us),
    )
    impact = prediction.saving_fraction if prediction else min(1.0, saving_us * busy / step_us)
    severity = severity_for_impact(impact, th)
    if severity is None:
        return None
    shape = "[" + ", ".join(str(x) for x in facts.score_shape) + "]"
    held = (
        f", {fmt_bytes(facts.peak_score_bytes)} of the "
        f"{fmt_bytes(facts.peak_allocated_bytes)} allocated peak in score tensors"
        if facts.peak_score_bytes and facts.peak_allocated_bytes
        else ""
    )
    return make_diagnosis(
        "attention_not_fused",
        severity,
        f"Attention is computed by hand: softmax(q @ kᵀ) @ v materialises {shape} scores "
        f"({fmt_bytes(facts.score_bytes)} each in {facts.dtype}, "
        f"{facts.calls_per_step:.0f} per step{held}); its kernels take "
        f"{pct(facts.kernel_us_per_step / step_us)} of the step, and "
        f"F.scaled_dot_product_attention could save about {pct(impact)}",
        {
            "device": panel.device,
            "gpu": peak.model,
            "score_shape": facts.score_shape,
            "dtype": facts.dtype,
            "head_dim": facts.head_dim,
            "value_dim": facts.value_dim,
            "calls_per_step": facts.calls_per_step,
            "backward": facts.backward,
            "kernel_us_per_step": round(facts.kernel_us_per_step, 1),
            "share_of_step": round(facts.kernel_us_per_step / step_us, 4),
            "sdpa_flops_per_step": facts.flops_per_step,
            "fused_estimate_us_per_step": round(fused_us, 1),
            "estimated_saving_us_per_step": round(saving_us, 1),
            "estimated_saving_fraction_of_step": round(impact, 4),
            "reachable_roof_fraction": reach,
            "score_bytes": facts.score_bytes,
            "peak_score_bytes": facts.peak_score_bytes,
            "peak_allocated_bytes": facts.peak_allocated_bytes,
            "peak_score_fraction": (
                facts.peak_score_bytes / facts.peak_allocated_bytes
                if facts.peak_score_bytes and facts.peak_allocated_bytes
                else None
            ),
            "gpu_busy_fraction": round(busy, 4),
            "ops": facts.ops,
        },
        "Replace the hand-written attention with torch.nn.functional."
        "scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=..., "
        "is_causal=...): its flash and memory-efficient kernels never write the "
        "B·H·L·S scores to memory, forward or backward, so their time and their memory "
        "go (a longer sequence or a larger batch fits). Pass is_causal=True rather than a "
        "causal mask tensor, and keep q, k, v in bf16/fp16 (autocast) for the flash "
        "backend; nn.MultiheadAttention and most model libraries' 'sdpa' attention "
        "implementation already call it.",
        "efficiency",
        impact,
        prediction,
    )


_REACHABLE = (
    "efficiency_reachable_roof_fraction",
    "efficiency_reachable_conv_roof_fraction",
    "efficiency_reachable_attention_roof_fraction",
)

MATMUL_WITHOUT_TENSOR_CORES = Rule(
    id="matmul_without_tensor_cores",
    area="efficiency",
    label="fp32 matmuls on CUDA cores",
    definition="fp32 matmul/convolution groups run on CUDA cores (TF32 off, no autocast): "
    "the cost is the time they would save on tensor cores at the share of the roof their "
    "kind reaches, times the GPU's busy share.",
    panels=("efficiency", "steps"),
    thresholds=(*IMPACT_THRESHOLDS, *_REACHABLE, "efficiency_reachable_conv_bf16_roof_fraction"),
    check=_matmul_without_tensor_cores,
    fix=Fix("TF32 or bf16 autocast"),
)
ATTENTION_NOT_FUSED = Rule(
    id="attention_not_fused",
    area="efficiency",
    label="Attention not fused",
    definition="Attention is written by hand (softmax(q @ kᵀ) @ v over [B, H, L, L] "
    "scores, from record_shapes): the scores are materialised in memory; the cost is "
    "its kernels' time above what F.scaled_dot_product_attention reaches on the same "
    "shapes.",
    panels=("efficiency", "steps"),
    thresholds=(*IMPACT_THRESHOLDS, "efficiency_reachable_attention_roof_fraction"),
    check=_attention_not_fused,
    fix=Fix("F.scaled_dot_product_attention"),
)
LOW_KERNEL_EFFICIENCY = Rule(
    id="low_kernel_efficiency",
    area="efficiency",
    label="Kernels far below the roofline",
    definition="Matmul-class groups on tensor cores run below "
    "`low_kernel_efficiency_roof_fraction` of their roof and below what their kind "
    "reaches: the cost is the time above that reachable share.",
    panels=("efficiency", "steps"),
    thresholds=(*IMPACT_THRESHOLDS, "low_kernel_efficiency_roof_fraction", *_REACHABLE),
    check=_low_kernel_efficiency,
    fix=Fix("aligned shapes, channels_last, flash attention"),
)
