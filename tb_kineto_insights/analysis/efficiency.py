"""``summary.efficiency``: is the GPU busy *and* slow? Kernel efficiency per op group
against the roofline of the device's datasheet peaks (DESIGN.md, Kernel efficiency).

Definitions, in the order they are applied:

1. **Kernel → op.** A kernel's launching CPU op is the innermost CPU op on the thread
   of the runtime call that launched it (same ``correlation``), at the call's start
   (:func:`~tb_kineto_insights.analysis.memory.innermost_op`, as for allocations); the
   kernel's ``External id`` names that same op and is used first (:func:`launching_op`).
   ``aten::linear`` / ``aten::matmul`` reach their child GEMM op (``aten::addmm``,
   ``aten::mm``, ``aten::bmm``) this way. Only kernels on the main device
   (:attr:`~.trace_index.TraceIndex.main_device`) that start inside a step window count.
2. **Op group**: op name + ``Input Dims`` + ``Input type`` (``record_shapes=True``) +
   the scalar arguments a formula reads (``Concrete Inputs``: stride, padding,
   ``is_causal``). Its time is the sum of its kernels' durations; ``calls`` the ops
   that launched at least one kernel.
3. **FLOPs and bytes per call**, from shapes (:func:`op_work`; element size ``e`` from
   the dtype):

   - ``mm`` (M×K @ K×N): FLOPs 2·M·K·N, bytes e·(M·K + K·N + M·N); ``addmm`` adds
     the bias read; ``bmm``/``baddbmm``: B times that; ``linear``: M = product of the
     input's leading dims, N = weight rows; ``_scaled_mm`` (fp8): 1-byte inputs, a
     2-byte output. The GEMM count 2·M·K·N is the multiply-add convention of cuBLAS
     and of ``torch.utils.flop_counter``.
   - convolution (``convolution``, ``_convolution``, ``cudnn_convolution``, …):
     x N×C×S…, w O×(C/g)×k…; output size per spatial dim
     ⌊(S + 2p − d·(k − 1) − 1)/s⌋ + 1 (PyTorch's ``Conv2d`` docs); FLOPs
     2·N·O·∏out·(C/g)·∏k; bytes e·(x + w + out). Transposed convolutions: no claim.
     ``convolution_backward`` (grad_out, x, w, …, ``output_mask``): the forward count
     once per gradient computed (dgrad, wgrad); bytes e·(grad_out + x + w + the
     gradients written).
   - attention (``_scaled_dot_product_{flash,efficient,cudnn}_attention``,
     ``_flash_attention_forward``, …): FLOPs 2·B·H·Sq·Sk·(D + Dv) for the forward
     (two matmuls: Q·Kᵀ and P·V), ×2.5 for the backward (five matmuls of the same
     size), halved when causal (FlashAttention-2 paper's accounting); without a
     readable ``is_causal``: no claim. Bytes e·(q + k + v + out).
   - memory ops (element-wise, reduction, norm, softmax, copy, ``_foreach_*``):
     bytes only, the tensors read (every tensor input) plus the one written (the size
     of the largest input; none for reductions, whose output is small; fill/zero write
     only; ``copy_(dst, src)`` reads src and writes dst).
   - the trace's own count: a matmul-class op with a ``flops`` arg (a positive number)
     takes that count (``flops_source="trace"``), the formula's kept beside it and a
     note where the two differ by more than 1 % (:func:`with_trace_flops`). No
     ``torch.profiler`` up to 2.11 writes one: ``with_flops=True`` keeps its count in
     ``FunctionEvent.flops`` only; the recordings' ``profiler_flops`` (that count, per op
     and shapes) equal our formulas for every ``mm``/``addmm`` and ``conv2d``
     (tests/test_efficiency.py).

4. **Roof.** Peaks per GPU model come from ``analysis/data/gpu_peaks.json`` (dense
   datasheet rates, each row citing its datasheet; matched by
   ``deviceProperties.name``, SM count and memory size: :func:`match_peaks`) or from the
   ``peak_*`` thresholds. The unit of a matmul-class group follows its dtype, and for
   fp32 its kernels: ``tf32`` in a kernel name → TF32 tensor cores; ``sgemm``,
   ``ffma``, ``simt`` or ``f32f32`` (without ``tf32``) → fp32 on CUDA cores. Achieved
   FLOP/s = FLOPs / kernel time; arithmetic intensity = FLOPs / bytes; attainable =
   min(peak of the unit, intensity × bandwidth); ``roof_fraction`` = achieved /
   attainable; ``bound`` = compute when intensity × bandwidth ≥ peak, else memory.
   Memory ops: ``roof_fraction`` = achieved bytes/s / bandwidth.

No claim (``None``, and a note saying why) without shapes, for an unknown GPU, or for a
unit the GPU lacks. Datasheet peaks are ceilings: boost clocks, ideal kernels.

``per_step``: each step's matmul-class FLOPs, kernel time and tensor-core time (a call
belongs to the step where its first kernel starts), the samples the diff judges the
run's achieved TFLOP/s and tensor-core share on.

Verdicts (``analysis/rules/efficiency.py``). Every saving assumes a slow group can reach
what its kind reaches on this GPU (:func:`reachable_roof_fraction`, each measured:
GEMMs 0.6 of the roof, channels_last convolutions 0.3, flash attention 0.28):

- ``matmul_without_tensor_cores``: fp32 matmul/conv groups on CUDA cores. Cost: the time
  they would save at the same share of the bf16 tensor-core roof (bounded by the memory
  roof at half the bytes, and capped at the reachable share), per step, times the GPU's
  busy share of the step (on a launch-bound run faster kernels do not shorten the
  step). Fires on ``sample_logs/eff_mlp_fp32``, ``eff_ddp_fp32`` and the shared fp32
  DDP runs; quiet on ``eff_mlp_tf32`` / ``eff_mlp_bf16`` / ``eff_ddp_tf32`` /
  ``eff_ddp_bf16``.
- ``low_kernel_efficiency``: matmul-class groups below
  ``low_kernel_efficiency_roof_fraction`` of their roof and below what their kind
  reaches; cost: the time above what they would take at that reachable share, times
  the busy share. Fires on ``eff_gemm_odd`` (4095³), the NCHW fp32 convolutions
  (``eff_cnn_fp32_nchw``, ``cudnn_autotune_fixed``: no more than channels_last measures)
  and memory-efficient attention (``eff_sdpa_efficient_bf16``); quiet on
  ``eff_gemm_aligned``, ``eff_gemm_skinny`` (M = 16: memory-bound, near its bandwidth
  roof), channels_last convolutions and flash attention (``eff_sdpa_flash_bf16``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import msgspec
import numpy as np

from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.memory import innermost_op
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.schema.efficiency import (
    EfficiencyPanel,
    EfficiencyPeak,
    EfficiencyRow,
    EfficiencyStep,
)
from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.op_names import (
    CONV_OPS,
    ELEMENTWISE_OPS,
    GEMM_OPS,
    REDUCTION_OPS,
    WRITE_ONLY_OPS,
    has_formula,
    needs_scalars,
)
from tb_kineto_insights.trace.rowjson import RowJson

#: ``Input type`` strings → (dtype short name, bytes per element).
DTYPES: dict[str, tuple[str, int]] = {
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "long int": ("int64", 8),
    "int": ("int32", 4),
    "short int": ("int16", 2),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
}
#: dtype → roof unit of matmul-class work (fp32 is decided by its kernels).
TENSOR_UNIT: dict[str, str] = {
    "bf16": "bf16_tensor",
    "fp16": "fp16_tensor",
    "fp8": "fp8_tensor",
    "fp64": "fp64_tensor",
}
UNITS: tuple[str, ...] = (
    "fp64",
    "fp64_tensor",
    "fp32",
    "tf32_tensor",
    "bf16_tensor",
    "fp16_tensor",
    "fp8_tensor",
)
MATMUL_CLASS = ("matmul", "conv", "attention")

_CUDA_CORE = re.compile(r"sgemm|ffma|simt|f32f32")
# Concrete Inputs positions: (stride, padding, dilation, transposed or None, groups)
_CONV_ARGS: dict[str, tuple[int, int, int, int | None, int]] = {
    "aten::convolution": (3, 4, 5, 6, 8),
    "aten::_convolution": (3, 4, 5, 6, 8),
    "aten::convolution_overrideable": (3, 4, 5, 6, 8),
    "aten::cudnn_convolution": (3, 2, 4, None, 5),
    "aten::miopen_convolution": (4, 3, 5, None, 6),
    "aten::mkldnn_convolution": (4, 3, 5, None, 6),
}


@dataclass(frozen=True)
class _Attention:
    layout: str  # "bhsd" or "bshd"
    q: int
    k: int
    v: int
    causal_at: int
    factor: float  # 1 forward, 2.5 backward
    mask_type: bool = False  # causal given as custom_mask_type (0 none, else causal)


_ATTENTION: dict[str, _Attention] = {
    "aten::_scaled_dot_product_flash_attention": _Attention("bhsd", 0, 1, 2, 4, 1.0),
    "aten::_scaled_dot_product_efficient_attention": _Attention("bhsd", 0, 1, 2, 6, 1.0),
    "aten::_scaled_dot_product_cudnn_attention": _Attention("bhsd", 0, 1, 2, 6, 1.0),
    "aten::_flash_attention_forward": _Attention("bshd", 0, 1, 2, 8, 1.0),
    "aten::_efficient_attention_forward": _Attention("bshd", 0, 1, 2, 9, 1.0, True),
    "aten::_scaled_dot_product_flash_attention_backward": _Attention("bhsd", 1, 2, 3, 11, 2.5),
    "aten::_scaled_dot_product_efficient_attention_backward": _Attention("bhsd", 1, 2, 3, 11, 2.5),
    "aten::_scaled_dot_product_cudnn_attention_backward": _Attention("bhsd", 1, 2, 3, 11, 2.5),
    "aten::_flash_attention_backward": _Attention("bshd", 1, 2, 3, 11, 2.5),
    "aten::_efficient_attention_backward": _Attention("bshd", 1, 2, 3, 14, 2.5, True),
}


@dataclass(frozen=True)
class Work:
    """FLOPs and bytes of one op call (:func:`op_work`): ``category`` ``matmul``,
    ``conv``, ``attention`` or ``memory``; ``flops`` ``None`` for memory ops; ``dtype``
    the short name of its first floating input; ``dims`` (M, N, K, batch) of a GEMM or
    (N, C, O, 0) of a convolution, for the reasons of low efficiency."""

    category: str
    flops: float | None
    bytes: float
    dtype: str
    dims: tuple[int, int, int, int] | None = None
    #: ``"shapes"`` (the formula) or ``"trace"`` (the op's ``flops`` arg: :func:`with_trace_flops`)
    flops_source: str = "shapes"
    #: the formula's count where the trace's is used instead (the cross-check)
    shapes_flops: float | None = None


def _numel(shape: Any) -> int:
    return int(math.prod(int(x) for x in shape))


def _is_shape(shape: Any) -> bool:
    return isinstance(shape, list) and all(isinstance(x, int) and x >= 0 for x in shape)


def _tensors(dims: list[Any], types: list[Any]) -> list[tuple[list[int], str, int]]:
    """Tensor inputs ``(shape, dtype, element bytes)``: those whose ``Input type`` is a
    dtype of :data:`DTYPES` and whose ``Input Dims`` entry is a flat shape."""
    out = []
    for shape, typ in zip(dims, types, strict=False):
        known = DTYPES.get(typ) if isinstance(typ, str) else None
        if known is not None and _is_shape(shape):
            out.append((shape, known[0], known[1]))
    return out


def _ints(text: Any) -> list[int] | None:
    """``"[1, 1]"`` or ``"2"`` (a ``Concrete Inputs`` entry) → list of ints, else None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list) and all(isinstance(x, int) for x in value):
        return value
    return None


def _flag(text: Any) -> bool | None:
    if text in ("True", "true", "1"):
        return True
    if text in ("False", "false", "0"):
        return False
    return None


def _gemm(name: str, dims: list[Any], types: list[Any]) -> Work | None:
    t = _tensors(dims, types)
    if name in ("aten::mm", "aten::_scaled_mm"):
        if len(t) < 2 or len(t[0][0]) != 2 or len(t[1][0]) != 2:
            return None
        (mm, kk), (_, nn) = t[0][0], t[1][0]
        out_e = 2 if name == "aten::_scaled_mm" else t[0][2]
        byt = t[0][2] * mm * kk + t[1][2] * kk * nn + out_e * mm * nn
        return Work("matmul", 2.0 * mm * kk * nn, float(byt), t[0][1], (mm, nn, kk, 1))
    if name == "aten::addmm":
        if len(t) < 3 or len(t[1][0]) != 2 or len(t[2][0]) != 2:
            return None
        (mm, kk), (_, nn) = t[1][0], t[2][0]
        e = t[1][2]
        byt = e * (mm * kk + kk * nn + mm * nn) + t[0][2] * _numel(t[0][0])
        return Work("matmul", 2.0 * mm * kk * nn, float(byt), t[1][1], (mm, nn, kk, 1))
    if name in ("aten::bmm", "aten::baddbmm"):
        a, b = (
            (t[0], t[1]) if name == "aten::bmm" else (t[1], t[2]) if len(t) >= 3 else (t[0], t[0])
        )
        if len(a[0]) != 3 or len(b[0]) != 3:
            return None
        (bb, mm, kk), (_, _, nn) = a[0], b[0]
        e = a[2]
        byt = e * bb * (mm * kk + kk * nn + mm * nn)
        if name == "aten::baddbmm":
            byt += t[0][2] * _numel(t[0][0])
        return Work("matmul", 2.0 * bb * mm * kk * nn, float(byt), a[1], (mm, nn, kk, bb))
    if name == "aten::linear":
        if len(t) < 2 or len(t[1][0]) != 2 or not t[0][0]:
            return None
        x, w = t[0][0], t[1][0]
        mm, kk, nn = _numel(x[:-1]), x[-1], w[0]
        e = t[0][2]
        byt = e * (mm * kk + kk * nn + mm * nn) + sum(_numel(s) * b for s, _, b in t[2:])
        return Work("matmul", 2.0 * mm * kk * nn, float(byt), t[0][1], (mm, nn, kk, 1))
    return None


def conv_out_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length of one spatial dim: ⌊(S + 2p − d·(k − 1) − 1)/s⌋ + 1 (PyTorch
    ``Conv2d`` docs, "Shape")."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _conv(name: str, dims: list[Any], types: list[Any], concrete: list[Any] | None) -> Work | None:
    t = _tensors(dims, types)
    if name == "aten::convolution_backward":
        if len(t) < 3:
            return None
        go, x, w = t[0][0], t[1][0], t[2][0]
        if len(go) < 3 or len(x) != len(go) or len(w) != len(go):
            return None
        mask = [True, True, False]
        if concrete is not None and len(concrete) > 10 and isinstance(concrete[10], str):
            parsed = [s.strip() == "True" for s in concrete[10].strip("[]").split(",")]
            if len(parsed) == 3:
                mask = parsed
        passes = int(mask[0]) + int(mask[1])
        if passes == 0:
            return None
        per = 2.0 * go[0] * go[1] * _numel(go[2:]) * w[1] * _numel(w[2:])
        e = t[0][2]
        byt = e * (_numel(go) + _numel(x) + _numel(w))
        byt += e * (_numel(x) * mask[0] + _numel(w) * mask[1])
        return Work("conv", per * passes, float(byt), t[0][1], (x[0], x[1], w[0], 0))
    pos = _CONV_ARGS.get(name)
    if pos is None or concrete is None or len(t) < 2:
        return None
    x, w = t[0][0], t[1][0]
    nsp = len(x) - 2
    if nsp < 1 or len(w) != len(x):
        return None
    stride_at, pad_at, dil_at, transposed_at, groups_at = pos
    if max(stride_at, pad_at, dil_at, groups_at) >= len(concrete):
        return None
    if transposed_at is not None and _flag(concrete[transposed_at]) is not False:
        return None  # transposed (or unreadable): no claim
    stride, pad, dil = (_ints(concrete[i]) for i in (stride_at, pad_at, dil_at))
    groups = _ints(concrete[groups_at])
    if stride is None or pad is None or dil is None or groups is None:
        return None
    if x[1] != w[1] * groups[0]:  # C/g is the weight's second dim: inconsistent, no claim
        return None
    stride, pad, dil = ([v[0]] * nsp if len(v) == 1 else v for v in (stride, pad, dil))
    if len(stride) != nsp or len(pad) != nsp or len(dil) != nsp:
        return None
    out_sp = [conv_out_size(x[2 + i], w[2 + i], stride[i], pad[i], dil[i]) for i in range(nsp)]
    if min(out_sp) <= 0:
        return None
    flops = 2.0 * x[0] * w[0] * _numel(out_sp) * w[1] * _numel(w[2:])
    e = t[0][2]
    byt = e * (_numel(x) + _numel(w) + x[0] * w[0] * _numel(out_sp))
    return Work("conv", flops, float(byt), t[0][1], (x[0], x[1], w[0], 0))


def _attention(
    name: str, dims: list[Any], types: list[Any], concrete: list[Any] | None
) -> Work | None:
    spec = _ATTENTION[name]
    if concrete is None or spec.causal_at >= len(concrete):
        return None
    if spec.mask_type:
        mt = _ints(concrete[spec.causal_at])
        causal = None if mt is None else mt[0] != 0
    else:
        causal = _flag(concrete[spec.causal_at])
    if causal is None or max(spec.q, spec.k, spec.v) >= min(len(dims), len(types)):
        return None
    shapes = []
    for i in (spec.q, spec.k, spec.v):
        shape, typ = dims[i], types[i]
        if not _is_shape(shape) or len(shape) != 4 or typ not in DTYPES:
            return None
        shapes.append(shape)
    q, k, v = shapes
    if spec.layout == "bhsd":
        b, h, sq, d = q
        sk, dv = k[2], v[3]
    else:
        b, sq, h, d = q
        sk, dv = k[1], v[3]
    flops = 2.0 * b * h * sq * sk * (d + dv) * spec.factor
    if causal:
        flops /= 2.0
    dtype, e = DTYPES[types[spec.q]]
    byt = e * (_numel(q) + _numel(k) + _numel(v) + b * h * sq * dv)
    return Work("attention", flops, float(byt), dtype, (sq, sk, d, b * h))


def _memory_op(name: str, dims: list[Any], types: list[Any]) -> Work | None:
    if name.startswith("aten::_foreach_"):
        read = 0
        first: tuple[str, int] | None = None
        written = 0
        for i, (lst, typ) in enumerate(zip(dims, types, strict=False)):
            if typ != "TensorList" or not isinstance(lst, list):
                continue
            sizes = [_numel(s) for s in lst if _is_shape(s)]
            read += sum(sizes)
            if i == 0:
                written = sum(sizes)
        # element size of a TensorList is not in the trace: take 4 (fp32 master weights)
        if read == 0:
            return None
        first = first or ("fp32", 4)
        return Work("memory", None, float(first[1] * (read + written)), first[0])
    t = _tensors(dims, types)
    if not t:
        return None
    if name in WRITE_ONLY_OPS:
        return Work("memory", None, float(t[0][2] * _numel(t[0][0])), t[0][1])
    if name == "aten::copy_" and len(t) >= 2:  # copy_(dst, src): read src, write dst
        (dst, _, e_dst), (src, _, e_src) = t[0], t[1]
        return Work("memory", None, float(e_src * _numel(src) + e_dst * _numel(dst)), t[1][1])
    read = sum(_numel(s) * e for s, _, e in t)
    if name in REDUCTION_OPS:
        return Work("memory", None, float(read), t[0][1])
    largest = max(_numel(s) for s, _, _ in t)
    return Work("memory", None, float(read + largest * t[0][2]), t[0][1])


def op_work(name: str, dims: Any, types: Any, concrete: Any = None) -> Work | None:
    """FLOPs and bytes of one call of op ``name`` from its ``Input Dims``, ``Input type``
    and ``Concrete Inputs`` (lists as in the trace; see the module docstring for every
    formula and its source), or ``None`` when the op has no formula or its arguments do
    not fit it (no claim)."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    if not isinstance(concrete, list):
        concrete = None
    if name in GEMM_OPS or name == "aten::linear":
        return _gemm(name, dims, types)
    if name in CONV_OPS or name == "aten::convolution_backward":
        return _conv(name, dims, types, concrete)
    if name in _ATTENTION:
        return _attention(name, dims, types, concrete)
    if name in ELEMENTWISE_OPS or name in REDUCTION_OPS or name in WRITE_ONLY_OPS:
        return _memory_op(name, dims, types)
    if name.startswith("aten::_foreach_"):
        return _memory_op(name, dims, types)
    return None


def trace_flops(value: Any) -> float | None:
    """The op's ``flops`` arg as a FLOP count per call: a finite number > 0 (an int, a
    float, or a string holding one), else ``None``."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def with_trace_flops(work: Work, value: Any) -> Work:
    """``work`` with the FLOPs of the op's ``flops`` arg when the trace has one
    (:func:`trace_flops`) and the op is matmul-class: the count of the tool that wrote the
    trace is used, the formula's kept in ``shapes_flops`` for the cross-check. Memory
    ops keep ``flops=None`` (their roof is bandwidth; torch counts one FLOP per element
    of ``add``/``mul``, which sets no roof)."""
    count = trace_flops(value)
    if count is None or work.category not in MATMUL_CLASS:
        return work
    return Work(
        work.category,
        count,
        work.bytes,
        work.dtype,
        work.dims,
        flops_source="trace",
        shapes_flops=work.flops,
    )


def _has_formula(name: str) -> bool:
    return has_formula(name)


def _texts(values: Any, rows: np.ndarray) -> list[bytes | None]:
    """JSON text per row of a sparse column (a :class:`RowJson`, or a ``dict`` of values
    built by hand), ``None`` where absent."""
    if isinstance(values, RowJson):
        return values.texts(rows)
    return [msgspec.json.encode(values[r]) if r in values else None for r in rows.tolist()]


def _needs_scalars(name: str) -> bool:
    return needs_scalars(name)


def _scalar_texts(index: TraceIndex, rows: np.ndarray) -> list[bytes | None]:
    """``Concrete Inputs`` texts of the op rows whose formula reads scalars
    (convolution, attention), ``None`` for the others (they do not split groups)."""
    ops = index.trace.cpu_ops
    out: list[bytes | None] = [None] * rows.size
    need = np.flatnonzero(index.name_class(_needs_scalars)[ops.name[rows]])
    if need.size:
        for j, text in zip(need.tolist(), _texts(ops.concrete_inputs, rows[need]), strict=True):
            out[j] = text
    return out


def _work_of(
    op: str,
    dims: bytes | None,
    types: bytes | None,
    concrete: bytes | None,
    flops: bytes | None = None,
) -> tuple[Work, tuple[Any, ...], str] | None:
    """:func:`op_work` from the JSON texts of the op's arguments (and its ``flops`` arg:
    :func:`with_trace_flops`), with its group key (op, dims text, dtype, FLOPs per call)
    and shapes text; ``None`` without a formula or on bad JSON."""
    if dims is None or types is None:
        return None
    try:
        dims_v = msgspec.json.decode(dims)
        types_v = msgspec.json.decode(types)
        concrete_v = None if concrete is None else msgspec.json.decode(concrete)
        flops_v = None if flops is None else msgspec.json.decode(flops)
    except msgspec.DecodeError:
        return None
    work = op_work(op, dims_v, types_v, concrete_v)
    if work is None:
        return None
    work = with_trace_flops(work, flops_v)
    key = (op, dims, work.dtype, work.flops)
    return work, key, json.dumps(dims_v, separators=(", ", ": "))


def launching_op(index: TraceIndex, kernel_rows: np.ndarray) -> np.ndarray:
    """Row of the CPU op (``cpu_ops``) that launched each kernel of ``kernel_rows``
    (int64), -1 where unknown. Kineto gives a kernel the ``External id`` of the innermost
    CPU op on the launching thread; where a kernel lacks it (or no op has it), the
    definition itself: correlation → runtime call → innermost CPU op on that thread at
    the call's start (:func:`~tb_kineto_insights.analysis.memory.innermost_op`). The two
    agree on every kernel of transformer_eager, transformer_compile, eff_mlp_fp32 and
    h200x2/ddp_default (tests/test_efficiency.py); the first is one vectorised search."""
    trace = index.trace
    ops = trace.cpu_ops
    out = np.full(kernel_rows.size, -1, dtype=np.int64)
    if kernel_rows.size == 0 or len(ops) == 0:
        return out
    ext = trace.kernels.external_id[kernel_rows]
    valid = np.flatnonzero(ops.external_id >= 0)
    if valid.size:
        order = valid[np.argsort(ops.external_id[valid], kind="stable")]
        ids = ops.external_id[order]
        pos = np.minimum(np.searchsorted(ids, ext), ids.size - 1)
        hit = (ids[pos] == ext) & (ext >= 0)
        out[hit] = order[pos[hit]]
    miss = np.flatnonzero(out < 0)
    if miss.size:
        launch = index.launch_row[m.KERNEL][kernel_rows[miss]]
        ok = launch >= 0
        rt = trace.runtime
        rows = launch[ok]
        out[miss[ok]] = innermost_op(ops, rt.pid[rows], rt.tid[rows], rt.start_ns[rows])
    return out


# -- peaks -------------------------------------------------------------------------------


@cache
def peak_table() -> list[dict[str, Any]]:
    """The rows of ``analysis/data/gpu_peaks.json`` (package data), in match order."""
    text = resources.files("tb_kineto_insights.analysis").joinpath("data/gpu_peaks.json")
    rows: list[dict[str, Any]] = json.loads(text.read_text(encoding="utf-8"))["gpus"]
    return rows


def _peak_from_row(row: dict[str, Any], device_name: str) -> EfficiencyPeak:
    def rate(key: str) -> float | None:
        v = row.get(key)
        return None if v is None else float(v) * 1e12

    return EfficiencyPeak(
        device_name=device_name,
        model=str(row["model"]),
        source=str(row["source"]),
        fp64_flops_per_s=rate("fp64"),
        fp64_tensor_flops_per_s=rate("fp64_tensor"),
        fp32_flops_per_s=rate("fp32"),
        tf32_tensor_flops_per_s=rate("tf32_tensor"),
        bf16_tensor_flops_per_s=rate("bf16_tensor"),
        fp16_tensor_flops_per_s=rate("fp16_tensor"),
        fp8_tensor_flops_per_s=rate("fp8_tensor"),
        memory_bytes_per_s=float(row["memory_bandwidth"]) * 1e9,
    )


def match_peaks(
    props: dict[str, Any] | None, th: Thresholds = DEFAULT_THRESHOLDS
) -> EfficiencyPeak | None:
    """The roof for one ``deviceProperties`` entry: the user's ``peak_*`` thresholds when
    the bandwidth and a FLOP/s figure are given, else the first row of
    :func:`peak_table` whose ``name_regex`` matches the lowercased ``name`` and whose
    ``num_sms`` / ``min_memory_gib`` / ``max_memory_gib`` (of ``totalGlobalMem``) hold;
    ``None`` for an unknown GPU."""
    name = str((props or {}).get("name") or "")
    if th.peak_memory_bytes_per_s > 0 and (
        th.peak_tensor_flops_per_s > 0 or th.peak_fp32_flops_per_s > 0
    ):
        tensor = th.peak_tensor_flops_per_s or None
        fp32 = th.peak_fp32_flops_per_s or None
        return EfficiencyPeak(
            device_name=name,
            model=name or "unknown GPU",
            source="--threshold peak_tensor_flops_per_s / peak_fp32_flops_per_s / "
            "peak_memory_bytes_per_s",
            fp64_flops_per_s=None,
            fp64_tensor_flops_per_s=None,
            fp32_flops_per_s=fp32,
            tf32_tensor_flops_per_s=None if tensor is None else tensor / 2,
            bf16_tensor_flops_per_s=tensor,
            fp16_tensor_flops_per_s=tensor,
            fp8_tensor_flops_per_s=None,
            memory_bytes_per_s=th.peak_memory_bytes_per_s,
        )
    if not name or props is None:
        return None
    lower = name.lower()
    sms = props.get("numSms")
    mem = props.get("totalGlobalMem")
    gib = float(mem) / 2**30 if isinstance(mem, (int, float)) else None
    for row in peak_table():
        if not re.search(row["name_regex"], lower):
            continue
        if "num_sms" in row and sms != row["num_sms"]:
            continue
        if "min_memory_gib" in row and (gib is None or gib < row["min_memory_gib"]):
            continue
        if "max_memory_gib" in row and (gib is None or gib > row["max_memory_gib"]):
            continue
        return _peak_from_row(row, name)
    return None


def peak_of(peak: EfficiencyPeak, unit: str) -> float | None:
    """FLOP/s of ``unit`` (one of :data:`UNITS`) in ``peak``."""
    value: float | None = getattr(peak, f"{unit}_flops_per_s")
    return value


# -- the panel ---------------------------------------------------------------------------


@dataclass
class _Group:
    op: str
    shapes: str
    dtype: str
    work: Work
    calls: int = 0
    time_ns: int = 0
    kernel_names: dict[int, int] | None = None


def _device_props(trace: m.Trace, device: int) -> dict[str, Any] | None:
    props = trace.health.device_properties
    for p in props:
        if isinstance(p, dict) and p.get("id") == device:
            return p
    return props[0] if len(props) == 1 and isinstance(props[0], dict) else None


def _unit(
    work: Work, kernel_names: list[str], peak: EfficiencyPeak | None
) -> tuple[str | None, bool]:
    """Roof unit of a group and whether it runs on CUDA cores (fp32 kernels by name)."""
    if work.category == "memory":
        return "memory", False
    if work.dtype == "fp32":
        lowered = [k.lower() for k in kernel_names]
        if any("tf32" in k for k in lowered):
            return "tf32_tensor", False
        if lowered and any(_CUDA_CORE.search(k) for k in lowered):
            return "fp32", True
        return "fp32", False
    unit = TENSOR_UNIT.get(work.dtype)
    if unit == "fp64_tensor" and peak is not None and peak.fp64_tensor_flops_per_s is None:
        unit = "fp64"
    return unit, False


def _reason(work: Work, unit: str | None, num_sms: int | None, kernels: list[str]) -> str | None:
    """Why a matmul-class group is far below its roof, when its shapes show it."""
    if work.dims is None:
        return None
    reasons = []
    align = {"fp8_tensor": 16, "bf16_tensor": 8, "fp16_tensor": 8, "tf32_tensor": 4}.get(
        unit or "", 0
    )
    if work.category == "matmul":
        mm, nn, kk, batch = work.dims
        if align and (kk % align or nn % align or mm % align):
            odd = [f"{n}={v}" for n, v in (("M", mm), ("N", nn), ("K", kk)) if v % align]
            reasons.append(
                f"{', '.join(odd)} not a multiple of {align} (tensor-core alignment: pad "
                f"the dims to multiples of {align})"
            )
        tiles = math.ceil(mm / 128) * math.ceil(nn / 128) * batch
        if num_sms and tiles < num_sms:
            reasons.append(
                f"only {tiles} output tiles of 128x128 for {num_sms} SMs (wave quantization)"
            )
        if mm < 64:
            reasons.append(f"tiny batch: M={mm} rows")
    elif work.category == "conv":
        n, c, o, _ = work.dims
        if any("nchwtonhwc" in k.lower() or "nhwctonchw" in k.lower() for k in kernels):
            reasons.append(
                "NCHW tensors: cuDNN converts the layout around the convolution "
                "(nchwToNhwc kernels); use channels_last"
            )
        if align and (c % align or o % align):
            reasons.append(f"channels C={c}, O={o} not multiples of {align}")
        if n < 8:
            reasons.append(f"tiny batch: N={n}")
    return "; ".join(reasons) or None


def _empty(
    notes: list[str],
    steps: int,
    device: int | None = None,
    name: str | None = None,
    peak: EfficiencyPeak | None = None,
    kernel_us: float = 0.0,
) -> EfficiencyPanel:
    return EfficiencyPanel(
        device=device,
        device_name=name,
        peak=peak,
        steps=steps,
        kernel_time_us_per_step=kernel_us,
        covered_fraction=0.0,
        headline=None,
        rows=[],
        notes=notes,
    )


def efficiency_summary(
    index: TraceIndex, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> EfficiencyPanel:
    """``summary.efficiency`` (module docstring): op groups of the main device with their
    achieved rates against the roofline; notes instead of claims where none is
    possible."""
    th = thresholds
    trace = index.trace
    steps = index.steps
    n_steps = len(steps)
    device = index.main_device
    if device is None or n_steps == 0:
        return _empty(["No GPU kernels in this trace: no kernel efficiency to measure."], n_steps)
    props = _device_props(trace, device)
    name = str(props.get("name")) if props and props.get("name") else None
    peak = match_peaks(props, th)
    k = trace.kernels
    lo, hi = int(steps.start_ns[0]), int(steps.end_ns[-1])
    sel = np.flatnonzero((k.device == device) & (k.start_ns >= lo) & (k.start_ns < hi))
    kernel_ns = int(k.dur_ns[sel].sum())
    kernel_us = kernel_ns / 1000.0 / n_steps
    notes: list[str] = []
    if peak is None:
        notes.append(
            f"Unknown GPU {name or '(no deviceProperties)'}: no roofline verdict. Give its "
            "dense peaks with --threshold peak_tensor_flops_per_s=… "
            "--threshold peak_fp32_flops_per_s=… --threshold peak_memory_bytes_per_s=…"
        )
    ops = trace.cpu_ops
    if len(ops.input_dims) == 0:
        notes.append(
            "No input shapes in this trace (record_shapes=False): kernel time only, no "
            "FLOPs, bytes or efficiency. Profile with record_shapes=True."
        )
        return _empty(notes, n_steps, device, name, peak, kernel_us)
    op_row = launching_op(index, sel)
    has_op = op_row >= 0
    ksel, op_row = sel[has_op], op_row[has_op]
    if op_row.size == 0:
        notes.append("No kernel could be tied to the CPU op that launched it (no correlation).")
        return _empty(notes, n_steps, device, name, peak, kernel_us)
    formula = index.name_class(_has_formula)[ops.name[op_row]]
    ksel, op_row = ksel[formula], op_row[formula]
    rows, inverse = np.unique(op_row, return_inverse=True)
    # op rows keyed by their texts: each distinct (op, dims, types, scalars) decoded once
    key_ids: dict[tuple[Any, ...], int] = {}
    keys = zip(
        ops.name[rows].tolist(),
        _texts(ops.input_dims, rows),
        _texts(ops.input_types, rows),
        _scalar_texts(index, rows),
        _texts(ops.flops, rows) if len(ops.flops) else [None] * rows.size,
        strict=True,
    )
    row_key = np.array([key_ids.setdefault(key, len(key_ids)) for key in keys], dtype=np.int64)
    # key → group (op, dims text, dtype), -1 without a formula
    groups: list[_Group] = []
    group_ids: dict[tuple[Any, ...], int] = {}
    key_group = np.full(len(key_ids), -1, dtype=np.int64)
    for key, kid in key_ids.items():
        found = _work_of(trace.names[key[0]], key[1], key[2], key[3], key[4])
        if found is None:
            continue
        work, gkey, shapes = found
        gid = group_ids.get(gkey)
        if gid is None:
            gid = group_ids[gkey] = len(groups)
            groups.append(_Group(gkey[0], shapes, work.dtype, work, kernel_names={}))
        key_group[kid] = gid
    row_group = key_group[row_key] if row_key.size else row_key
    kernel_group = row_group[inverse]
    kept = kernel_group >= 0
    if groups:
        n_groups = len(groups)
        calls = np.bincount(row_group[row_group >= 0], minlength=n_groups)
        time_ns = np.bincount(
            kernel_group[kept], weights=k.dur_ns[ksel][kept].astype(np.float64), minlength=n_groups
        )
        n_names = len(trace.names) + 1
        pair, pair_count = np.unique(
            kernel_group[kept] * n_names + k.name[ksel][kept], return_counts=True
        )
        for p, c in zip(pair.tolist(), pair_count.tolist(), strict=True):
            g = groups[p // n_names]
            assert g.kernel_names is not None
            g.kernel_names[p % n_names] = c
        for g, n, t in zip(groups, calls.tolist(), time_ns.tolist(), strict=True):
            g.calls, g.time_ns = int(n), int(t)
    num_sms = props.get("numSms") if props else None
    out: list[EfficiencyRow] = []
    row_of: dict[int, EfficiencyRow] = {}
    covered_ns = 0
    for gid, g in enumerate(groups):
        if g.time_ns <= 0:
            continue
        covered_ns += g.time_ns
        knames = [
            trace.names[n]
            for n in sorted(g.kernel_names or {}, key=lambda n: -(g.kernel_names or {})[n])
            if n >= 0
        ]
        row = _row(g, knames, peak, n_steps, num_sms if isinstance(num_sms, int) else None, th)
        row_of[gid] = row
        out.append(row)
        note = _flops_check_note(row)
        if note:
            notes.append(note)
    out.sort(key=lambda r: -r.time_us_per_step)
    if not out:
        notes.append("No kernel time in ops with a FLOPs or bytes formula and shapes.")
    headline = _headline(out)
    per_step = _per_step(
        steps.start_ns,
        k.start_ns[ksel][kept],
        k.dur_ns[ksel][kept],
        kernel_group[kept],
        inverse,
        k.start_ns[ksel],
        row_group,
        groups,
        row_of,
    )
    return EfficiencyPanel(
        device=device,
        device_name=name,
        peak=peak,
        steps=n_steps,
        kernel_time_us_per_step=round(kernel_us, 3),
        covered_fraction=round(covered_ns / kernel_ns, 4) if kernel_ns else 0.0,
        headline=headline,
        rows=out[: th.efficiency_max_rows],
        notes=notes,
        per_step=per_step,
    )


#: Relative difference between the trace's ``flops`` arg and the shapes formula above
#: which the panel says so (a different counting convention, or a formula's blind spot).
FLOPS_CHECK_TOLERANCE = 0.01


def _flops_check_note(row: EfficiencyRow) -> str | None:
    """A note when an op group's FLOPs come from the trace's ``flops`` arg and differ
    from the shapes formula by more than :data:`FLOPS_CHECK_TOLERANCE`."""
    ours, theirs = row.shapes_flops_per_call, row.flops_per_call
    if row.flops_source != "trace" or ours is None or theirs is None or ours <= 0:
        return None
    rel = theirs / ours - 1.0
    if abs(rel) <= FLOPS_CHECK_TOLERANCE:
        return None
    return (
        f"{row.op} {row.shapes}: the trace's flops arg ({theirs:.4g} per call) differs from "
        f"the shapes formula ({ours:.4g}) by {100 * rel:+.0f} %; the trace's count is used."
    )


def _per_step(
    step_start_ns: np.ndarray,
    kernel_start_ns: np.ndarray,
    kernel_dur_ns: np.ndarray,
    kernel_group: np.ndarray,
    kernel_op: np.ndarray,
    op_kernel_start_ns: np.ndarray,
    row_group: np.ndarray,
    groups: list[_Group],
    row_of: dict[int, EfficiencyRow],
) -> list[EfficiencyStep]:
    """Matmul-class work per step (the diff's efficiency rows judge it against the
    step-to-step noise): FLOPs of the op calls whose first kernel starts in the step,
    kernel time of those groups, and the part of it on tensor cores (groups whose unit
    is a ``*_tensor`` roof). A kernel belongs to the last step that starts at or before
    it. Empty without matmul-class work.

    ``kernel_*``: the grouped kernels (start, duration, group); ``kernel_op``: for every
    kernel with an op (ungrouped too), its index into ``row_group`` (the op calls), with
    ``op_kernel_start_ns`` their starts."""
    n_steps = len(step_start_ns)
    n_groups = len(groups)
    is_mm = np.zeros(n_groups + 1, dtype=np.bool_)  # last slot: no group (-1)
    on_tensor = np.zeros(n_groups + 1, dtype=np.bool_)
    flops = np.zeros(n_groups + 1, dtype=np.float64)
    for gid, row in row_of.items():
        if row.category in MATMUL_CLASS and row.flops_per_call is not None:
            is_mm[gid] = True
            flops[gid] = row.flops_per_call
            on_tensor[gid] = bool(row.unit and row.unit.endswith("_tensor"))
    if not is_mm.any() or n_steps == 0:
        return []

    def step_of(ts: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(step_start_ns, ts, side="right") - 1, 0, n_steps - 1)

    mm_k = is_mm[kernel_group]
    k_step = step_of(kernel_start_ns[mm_k])
    dur = kernel_dur_ns[mm_k].astype(np.float64) / 1000.0
    time_us = np.bincount(k_step, weights=dur, minlength=n_steps)
    tc = on_tensor[kernel_group[mm_k]]
    tc_us = np.bincount(k_step[tc], weights=dur[tc], minlength=n_steps)
    first = np.full(row_group.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, kernel_op, op_kernel_start_ns)
    calls = np.flatnonzero(is_mm[row_group])
    step_flops = np.bincount(
        step_of(first[calls]), weights=flops[row_group[calls]], minlength=n_steps
    )
    return [
        EfficiencyStep(
            matmul_flops=float(f), matmul_time_us=round(float(t), 3),
            tensor_core_time_us=round(float(c), 3),
        )
        for f, t, c in zip(step_flops.tolist(), time_us.tolist(), tc_us.tolist(), strict=True)
    ]  # fmt: skip


def _row(
    g: _Group,
    knames: list[str],
    peak: EfficiencyPeak | None,
    n_steps: int,
    num_sms: int | None,
    th: Thresholds,
) -> EfficiencyRow:
    work = g.work
    unit, cuda_cores = _unit(work, knames, peak)
    seconds = g.time_ns / 1e9
    flops_total = None if work.flops is None else work.flops * g.calls
    bytes_total = work.bytes * g.calls
    achieved_flops = None if flops_total is None else flops_total / seconds
    achieved_bytes = bytes_total / seconds
    intensity = None if work.flops is None or work.bytes <= 0 else work.flops / work.bytes
    peak_flops = attainable = fraction = None
    bound: str | None = None
    reason: str | None = None
    if peak is not None:
        bw = peak.memory_bytes_per_s
        if unit == "memory":
            fraction = achieved_bytes / bw
            bound = "memory"
        elif unit is not None and intensity is not None and achieved_flops is not None:
            if (
                unit == "fp32"
                and not cuda_cores
                and peak.fp32_flops_per_s
                and achieved_flops > peak.fp32_flops_per_s
            ):
                unit = "tf32_tensor"  # faster than CUDA cores can be: TF32 tensor cores
            peak_flops = peak_of(peak, unit)
            if peak_flops is not None:
                attainable = min(peak_flops, intensity * bw)
                fraction = achieved_flops / attainable
                bound = "compute" if intensity * bw >= peak_flops else "memory"
                if fraction < th.low_kernel_efficiency_roof_fraction:
                    reason = _reason(work, unit, num_sms, knames)
    return EfficiencyRow(
        op=g.op,
        shapes=g.shapes,
        dtype=g.dtype,
        category=work.category,
        unit=unit,
        kernels=[nm.short_kernel_name(n) for n in knames[:3]],
        calls_per_step=round(g.calls / n_steps, 3),
        time_us_per_step=round(g.time_ns / 1000.0 / n_steps, 3),
        flops_per_call=work.flops,
        bytes_per_call=work.bytes,
        achieved_flops_per_s=achieved_flops,
        achieved_bytes_per_s=achieved_bytes,
        arithmetic_intensity=None if intensity is None else round(intensity, 3),
        peak_flops_per_s=peak_flops,
        attainable_flops_per_s=attainable,
        roof_fraction=None if fraction is None else round(fraction, 4),
        bound=bound,
        cuda_cores=cuda_cores,
        reason=reason,
        flops_source=work.flops_source,
        shapes_flops_per_call=work.shapes_flops,
    )


def _headline(rows: list[EfficiencyRow]) -> str | None:
    """ "matmuls reach N % of the <unit> roof" over the time-weighted matmul-class rows
    of the unit with the most time."""
    by_unit: dict[str, list[EfficiencyRow]] = {}
    for r in rows:
        if r.category in MATMUL_CLASS and r.roof_fraction is not None and r.unit:
            by_unit.setdefault(r.unit, []).append(r)
    if not by_unit:
        return None
    unit, group = max(by_unit.items(), key=lambda kv: sum(r.time_us_per_step for r in kv[1]))
    time = sum(r.time_us_per_step for r in group)
    frac = sum((r.roof_fraction or 0.0) * r.time_us_per_step for r in group) / time
    label = unit.replace("_tensor", " tensor-core").replace("fp32", "fp32 CUDA-core")
    return f"matmul/conv/attention kernels reach {_pct(frac)} of the {label} roof (time-weighted)"


# -- verdicts ----------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100.0 * x:.0f} %"
