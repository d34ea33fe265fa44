"""The op cost model: FLOPs and bytes of one op call from the shapes the trace records
(``Input Dims``, ``Input type`` and ``Concrete Inputs`` with ``record_shapes=True``), for
the efficiency panel (:mod:`.efficiency`).

Definitions (:func:`op_work`; element size ``e`` from the dtype, :data:`DTYPES`):

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
- Inductor's generated kernels (``triton_poi_*``, ``triton_red_*``, ``triton_per_*``,
  each launched by a CPU op of its own name whose ``Input Dims`` are the kernel's
  arguments): bytes only, every tensor argument once (a lower bound of the traffic);
  no FLOPs, whatever ops they fuse.
- memory ops (element-wise, reduction, norm, softmax, copy, ``_foreach_*``):
  bytes only, the tensors read (every tensor input) plus the one written (the size
  of the largest input; none for reductions, whose output is small; fill/zero write
  only; ``copy_(dst, src)`` reads src and writes dst).
- the trace's own count: a matmul-class op (:data:`MATMUL_CLASS`) with a ``flops`` arg
  (a positive number) takes that count (``flops_source="trace"``), the formula's kept
  beside it (:func:`with_trace_flops`). No ``torch.profiler`` up to 2.11 writes one:
  ``with_flops=True`` keeps its count in ``FunctionEvent.flops`` only; the recordings'
  ``profiler_flops`` (that count, per op and shapes) equal our formulas for every
  ``mm``/``addmm`` and ``conv2d`` (tests/test_efficiency.py).

An op without a formula, or whose arguments do not fit it, gets ``None``: no claim.
Nothing here reads a trace; the functions take the argument lists as the trace has them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from tb_kineto_insights.trace.op_names import (
    CONV_OPS,
    ELEMENTWISE_OPS,
    FUSED_PREFIXES,
    GEMM_OPS,
    REDUCTION_OPS,
    WRITE_ONLY_OPS,
)

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
MATMUL_CLASS = ("matmul", "conv", "attention")

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
    if name.startswith(FUSED_PREFIXES):
        return _fused(dims, types)
    return None


def _fused(dims: list[Any], types: list[Any]) -> Work | None:
    """An Inductor-generated (Triton) element-wise or reduction kernel: bytes only, each
    tensor argument once (its inputs read, its outputs written; a buffer read and
    written in place counts once, so the bytes are a lower bound); no FLOPs."""
    t = _tensors(dims, types)
    if not t:
        return None
    return Work("memory", None, float(sum(_numel(s) * e for s, _, e in t)), t[0][1])


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
