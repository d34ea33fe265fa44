"""Attention written by hand: ``softmax(q @ kᵀ) @ v`` materialising the B·H·L·S scores,
what ``attention_not_fused`` states (``analysis/rules/efficiency.py``).

Definitions (CPU ops of the trace with ``record_shapes=True``, those starting in a host
step window; shapes from ``Input Dims``):

- a **score shape**: the input of a softmax (``aten::softmax``, ``aten::_softmax``,
  ``aten::_safe_softmax``) of at least 3 dims, ``[..., L, S]`` with ``L`` and ``S`` at
  least :data:`MIN_SEQUENCE`, such that a matmul (``aten::matmul``, ``aten::bmm``,
  ``aten::baddbmm``) *produces* a tensor of that many elements ending ``[L, S]`` (``q @
  kᵀ``: ``[..., L, D] @ [..., D, S]``) and a matmul *consumes* one as its first input
  (``p @ v``: ``[..., L, S] @ [..., S, Dv]``); ``N`` = its number of elements
  (B·H·L·S), ``D`` / ``Dv`` the contraction dim of the first / the last dim of the
  second;
- the **attention ops**: every op (forward and backward) with an input of ``N``
  elements ending ``[L, S]`` or ``[S, L]``, or a matmul whose product has ``N``
  elements ending ``[L, S]``: the two matmuls, the scaling, the mask, the softmax and
  its backward, the casts of autocast;
- ``kernel_us``: the time of the kernels on the main device (starting in a step
  window) whose launching op (:func:`.efficiency.launching_op`, the innermost) is an
  attention op, summed over the steps;
- ``flops``: what scaled-dot-product attention computes for the same shapes: forward
  ``2·B·H·L·S·(D + Dv)`` per softmax call, backward 2.5 × that when the trace runs the
  softmax's backward (``aten::_softmax_backward_data`` of ``N`` elements);
- ``dtype``: the element type of ``q @ kᵀ``'s inputs (the scores'); ``score_bytes``:
  ``N`` × its size, per call;
  ``peak_score_bytes``: the bytes held at the moment of the allocated peak (inside the
  steps, main device) by allocations of ``N`` × 2 or ``N`` × 4 bytes made in the steps
  and not freed by then (``[memory]`` events matched by ``Addr``), with
  ``peak_allocated_bytes`` that peak; ``None`` without memory events with totals.

Real traces: ``sample_logs/attention_by_hand`` (B 4, H 16, L = S = 4 096, D 64, two
layers, bf16 autocast): 2 calls a step, 22.0 of the 23.2 GiB allocated peak in score
tensors; quiet on ``attention_sdpa``, the ``eff_sdpa_*`` runs and every other run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis.efficiency import launching_op
from tb_kineto_insights.analysis.efficiency_cost import DTYPES
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.trace.rowjson import RowJson

#: Shortest sequence (``L`` and ``S``) whose scores count as materialised attention:
#: below it the scores are small and SDPA's win is launch overhead, not memory.
MIN_SEQUENCE = 256
_SOFTMAX = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax"})
_MATMUL = frozenset({"aten::matmul", "aten::bmm", "aten::baddbmm"})
_SOFTMAX_BACKWARD = "aten::_softmax_backward_data"


@dataclass(frozen=True)
class UnfusedAttention:
    """What :func:`unfused_attention` finds (module docstring); per-step values are
    means over the steps."""

    score_shape: list[int]
    dtype: str
    head_dim: int
    value_dim: int
    calls_per_step: float
    backward: bool
    kernel_us_per_step: float
    flops_per_step: float
    score_bytes: int
    peak_score_bytes: int | None
    peak_allocated_bytes: int | None
    ops: list[str]
    #: the rows of the kernel table those ops launched in the steps (main device)
    kernel_rows: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))


def _decode(text: bytes | None) -> Any:
    if text is None:
        return None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None


def _texts(values: Any, rows: np.ndarray) -> list[bytes | None]:
    if isinstance(values, RowJson):
        return values.texts(rows)
    return [msgspec.json.encode(values[r]) if r in values else None for r in rows.tolist()]


def _shape(x: Any) -> list[int] | None:
    if isinstance(x, list) and x and all(isinstance(v, int) and v >= 0 for v in x):
        return x
    return None


def _product(a: list[int], b: list[int]) -> list[int] | None:
    """The shape of ``a @ b`` for batched matmuls of equal rank (≥ 3), else None."""
    if len(a) != len(b) or len(a) < 3 or a[-1] != b[-2]:
        return None
    return [*a[:-2], a[-2], b[-1]]


class _Op:
    """One op row's name and decoded inputs (shapes and dtype names)."""

    def __init__(self, name: str, dims: Any, types: Any) -> None:
        self.name = name
        self.shapes = [s for s in (dims if isinstance(dims, list) else []) if _shape(s)]
        self.types = types if isinstance(types, list) else []
        self.all_dims = dims if isinstance(dims, list) else []

    def operands(self) -> tuple[list[int] | None, list[int] | None]:
        """The two matrices of a matmul (``baddbmm``: after its ``self``)."""
        at = 1 if self.name == "aten::baddbmm" else 0
        if self.name not in _MATMUL or len(self.all_dims) < at + 2:
            return None, None
        return _shape(self.all_dims[at]), _shape(self.all_dims[at + 1])

    def product(self) -> list[int] | None:
        a, b = self.operands()
        return _product(a, b) if a and b else None


def _touches(op: _Op, n: int, ls: tuple[int, int]) -> bool:
    """The op has an input of ``n`` elements ending ``[L, S]`` (or ``[S, L]``), or is a
    matmul whose product does."""
    ends = {ls, (ls[1], ls[0])}
    for s in op.shapes:
        if len(s) >= 2 and math.prod(s) == n and (s[-2], s[-1]) in ends:
            return True
    out = op.product()
    return out is not None and math.prod(out) == n and (out[-2], out[-1]) == ls


def _step_ops(
    index: TraceIndex, only: frozenset[str] | None = None
) -> tuple[np.ndarray, list[_Op]]:
    """The CPU op rows starting in a host step window, with shapes, and their ops;
    ``only``: just the rows of these op names (their order kept): decoding every op's
    inputs is most of this rule's time on a large trace, and the score shapes need only
    the matmuls and softmaxes (:func:`unfused_attention`)."""
    ops = index.trace.cpu_ops
    steps = index.steps
    if not len(ops) or not len(ops.input_dims) or not len(steps):
        return np.zeros(0, dtype=np.int64), []
    hs, he = steps.host_windows() if steps.has_markers else (steps.start_ns, steps.end_ns)
    rows = np.flatnonzero(iv.window_index(ops.start_ns, hs, he) >= 0)
    names = index.trace.names
    if only is not None:
        ids = [i for i, name in enumerate(names) if name in only]
        rows = rows[np.isin(ops.name[rows], np.asarray(ids, dtype=np.int64))]
    dims = _texts(ops.input_dims, rows)
    types = _texts(ops.input_types, rows)
    built = [
        _Op(names[int(ops.name[r])], _decode(d), _decode(t))
        for r, d, t in zip(rows.tolist(), dims, types, strict=True)
    ]
    return rows, built


def _score_shapes(built: list[_Op]) -> list[tuple[list[int], str]]:
    """The score shapes (module docstring) with the softmax input's dtype name."""
    produced: set[tuple[int, int, int]] = set()
    consumed: set[tuple[int, int, int]] = set()
    for op in built:
        if op.name not in _MATMUL:
            continue
        out = op.product()
        if out is not None:
            produced.add((math.prod(out), out[-2], out[-1]))
        first = op.operands()[0]
        if first is not None and len(first) >= 3:
            consumed.add((math.prod(first), first[-2], first[-1]))
    found: dict[tuple[int, ...], str] = {}
    for op in built:
        if op.name not in _SOFTMAX or not op.all_dims:
            continue
        s = _shape(op.all_dims[0])
        if s is None or len(s) < 3 or min(s[-2], s[-1]) < MIN_SEQUENCE:
            continue
        key = (math.prod(s), s[-2], s[-1])
        if key in produced and key in consumed:
            dtype = op.types[0] if op.types and isinstance(op.types[0], str) else "float"
            found.setdefault(tuple(s), dtype)
    return [(list(s), t) for s, t in found.items()]


def unfused_attention(index: TraceIndex) -> UnfusedAttention | None:
    """The largest materialised attention of the trace (module docstring), or None."""
    # the score shapes come from the matmuls and softmaxes alone (_score_shapes reads no
    # other op, in the same order): every op is decoded only when there is one
    _, candidates = _step_ops(index, _MATMUL | _SOFTMAX)
    shapes = _score_shapes(candidates)
    if not shapes:
        return None
    rows, built = _step_ops(index)
    best: UnfusedAttention | None = None
    for shape, dtype in shapes:
        found = _measure(index, rows, built, shape, dtype)
        if found is None:
            continue
        if best is None or found.kernel_us_per_step > best.kernel_us_per_step:
            best = found
    return best


def _measure(
    index: TraceIndex, rows: np.ndarray, built: list[_Op], shape: list[int], dtype: str
) -> UnfusedAttention | None:
    """The facts of one score shape."""
    n = math.prod(shape)
    ls = (shape[-2], shape[-1])
    touching = [i for i, op in enumerate(built) if _touches(op, n, ls)]
    if not touching:
        return None
    mine = np.zeros(len(index.trace.cpu_ops), dtype=np.bool_)
    mine[rows[touching]] = True
    head = value = 0
    for i in touching:
        op = built[i]
        out = op.product()
        a, b = op.operands()
        if out is not None and a and (out[-2], out[-1]) == ls and math.prod(out) == n:
            head = head or a[-1]
            if op.types and isinstance(op.types[0], str) and op.types[0] in DTYPES:
                dtype = op.types[0]  # the scores' dtype: the product's inputs' (q, k)
        elif a and b and math.prod(a) == n and b[-2] == ls[1]:
            value = value or b[-1]
    n_steps = max(len(index.steps), 1)
    # one call per softmax kernel op (aten::softmax may wrap another aten::softmax)
    calls = sum(1 for i in touching if built[i].name == "aten::_softmax")
    calls = calls or sum(1 for i in touching if built[i].name == "aten::_safe_softmax")
    backward = any(built[i].name == _SOFTMAX_BACKWARD for i in touching)
    k = index.trace.kernels
    device = index.main_device
    sel = np.flatnonzero((k.device == device) & (index.steps.step_of(k.start_ns) >= 0))
    launched = launching_op(index, sel)
    ok = launched >= 0
    ok[ok] = mine[launched[ok]]
    kernel_us = float(k.dur_ns[sel[ok]].sum()) / 1000.0
    fwd = 2.0 * n * (head + (value or head))  # q @ kᵀ and p @ v, per softmax call
    flops = fwd * calls * (3.5 if backward else 1.0)  # the backward: 2.5 × the forward
    elem = DTYPES.get(dtype, ("fp32", 4))
    peak_score, peak = _peak_scores(index, n)
    names = sorted({built[i].name for i in touching})
    return UnfusedAttention(
        score_shape=shape,
        dtype=elem[0],
        head_dim=head,
        value_dim=value or head,
        calls_per_step=calls / n_steps,
        backward=backward,
        kernel_us_per_step=kernel_us / n_steps,
        flops_per_step=flops / n_steps,
        score_bytes=n * elem[1],
        peak_score_bytes=peak_score,
        peak_allocated_bytes=peak,
        ops=names,
        kernel_rows=sel[ok],
    )


def _peak_scores(index: TraceIndex, n: int) -> tuple[int | None, int | None]:
    """``(peak_score_bytes, peak_allocated_bytes)`` (module docstring), ``(None,
    None)`` without memory events with totals on the main device inside the steps."""
    mem = index.trace.memory
    device = index.main_device
    sel = np.flatnonzero((mem.device_type == 1) & (mem.device_id == (device or 0)))
    if not sel.size or (mem.total_allocated_bytes[sel] < 0).any():
        return None, None
    steps = index.steps
    hs, he = steps.host_windows() if steps.has_markers else (steps.start_ns, steps.end_ns)
    ts, nbytes, addr = mem.ts_ns[sel], mem.bytes[sel], mem.addr[sel]
    total = mem.total_allocated_bytes[sel]
    inside = iv.window_index(ts, hs, he) >= 0
    if not inside.any():
        return None, None
    at = int(np.flatnonzero(inside)[np.argmax(total[inside])])
    t_peak = ts[at]
    score = inside & (ts <= t_peak) & ((nbytes == 2 * n) | (nbytes == 4 * n)) & (addr >= 0)
    live = 0
    for j in np.flatnonzero(score).tolist():
        later = np.flatnonzero((addr == addr[j]) & (ts > ts[j]))
        if later.size == 0 or ts[later[0]] > t_peak:
            live += int(nbytes[j])
    return live, int(total[at])
