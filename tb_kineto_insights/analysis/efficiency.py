"""``summary.efficiency``: is the GPU busy *and* slow? Kernel efficiency per op group
against the roofline of the device's datasheet peaks (DESIGN.md, Kernel efficiency).

Definitions, in the order they are applied:

1. **Kernel → op.** A kernel's launching CPU op is the innermost CPU op on the thread
   of the runtime call that launched it (same ``correlation``), at the call's start
   (:func:`~tb_kineto_insights.analysis.enclosing_op.innermost_op`, as for allocations); the
   kernel's ``External id`` names that same op and is used first (:func:`launching_op`).
   ``aten::linear`` / ``aten::matmul`` reach their child GEMM op (``aten::addmm``,
   ``aten::mm``, ``aten::bmm``) this way. Only kernels on the main device
   (:attr:`~.trace_index.TraceIndex.main_device`) that start inside a step window count.
2. **Op group**: op name + ``Input Dims`` + ``Input type`` (``record_shapes=True``) +
   the scalar arguments a formula reads (``Concrete Inputs``: stride, padding,
   ``is_causal``). Its time is the sum of its kernels' durations; ``calls`` the ops
   that launched at least one kernel.
3. **FLOPs and bytes per call**, from shapes (:func:`~.efficiency_cost.op_work`: every
   formula and its source in :mod:`.efficiency_cost`); a matmul-class op with a
   ``flops`` arg takes that count, with a note where it differs from the formula by
   more than 1 % (:data:`FLOPS_CHECK_TOLERANCE`).

4. **Roof.** Peaks per GPU model come from ``analysis/data/gpu_peaks.json`` (dense
   datasheet rates, each row citing its datasheet; matched by
   ``deviceProperties.name``, SM count and memory size:
   :func:`~.efficiency_peaks.match_peaks`) or from the ``peak_*`` thresholds. The unit
   of a matmul-class group follows its dtype, and for fp32 its kernels: ``tf32`` in a
   kernel name → TF32 tensor cores; ``sgemm``, ``ffma``, ``simt`` or ``f32f32``
   (without ``tf32``) → fp32 on CUDA cores. Achieved FLOP/s = FLOPs / kernel time;
   arithmetic intensity = FLOPs / bytes; attainable = min(peak of the unit,
   intensity × bandwidth); ``roof_fraction`` = achieved / attainable; ``bound`` =
   compute when intensity × bandwidth ≥ peak, else memory.
   Memory ops: ``roof_fraction`` = achieved bytes/s / bandwidth.

No claim (``None``, and a note saying why) without shapes, for an unknown GPU, or for a
unit the GPU lacks. Datasheet peaks are ceilings: boost clocks, ideal kernels.

``per_step``: each step's matmul-class FLOPs, kernel time and tensor-core time (a call
belongs to the step where its first kernel starts), the samples the diff judges the
run's achieved TFLOP/s and tensor-core share on.

Verdicts (``analysis/rules/efficiency.py``). Every saving assumes a slow group can reach
what its kind reaches on this GPU (:func:`reachable_roof_fraction`; the defaults, each
set from real traces in :mod:`.thresholds`: GEMMs 0.6 of the roof, channels_last
convolutions 0.3, flash attention 0.28):

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
from typing import Any, NamedTuple

import msgspec
import numpy as np

from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.efficiency_cost import (
    MATMUL_CLASS,
    Work,
    op_work,
    with_trace_flops,
)
from tb_kineto_insights.analysis.efficiency_peaks import TENSOR_UNIT, match_peaks, peak_of
from tb_kineto_insights.analysis.enclosing_op import innermost_op
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.schema.efficiency import (
    EfficiencyPanel,
    EfficiencyPeak,
    EfficiencyRow,
    EfficiencyStep,
)
from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.op_names import has_formula, needs_scalars
from tb_kineto_insights.trace.rowjson import RowJson

_CUDA_CORE = re.compile(r"sgemm|ffma|simt|f32f32")


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


def launching_op(index: TraceIndex, rows: np.ndarray, kind: str = m.KERNEL) -> np.ndarray:
    """Row of the CPU op (``cpu_ops``) that launched each GPU event ``rows`` (int64) of
    table ``kind`` (kernels, memcpy, memset), -1 where unknown. Kineto gives a GPU event
    the ``External id`` of the innermost CPU op on the launching thread; where an event
    lacks it (or no op has it), the definition itself: correlation → runtime call →
    innermost CPU op on that thread at the call's start
    (:func:`~tb_kineto_insights.analysis.enclosing_op.innermost_op`). The two agree on
    every kernel of transformer_eager, transformer_compile, eff_mlp_fp32 and
    h200x2/ddp_default (tests/test_efficiency_real.py); the first is one vectorised
    search."""
    trace = index.trace
    ops = trace.cpu_ops
    out = np.full(rows.size, -1, dtype=np.int64)
    if rows.size == 0 or len(ops) == 0:
        return out
    ext = trace.tables[kind].external_id[rows]
    order, ids = index.cpu_ops_by_external_id
    if ids.size:
        pos = np.minimum(np.searchsorted(ids, ext), ids.size - 1)
        hit = (ids[pos] == ext) & (ext >= 0)
        out[hit] = order[pos[hit]]
    miss = np.flatnonzero(out < 0)
    if miss.size:
        launch = index.launch_row[kind][rows[miss]]
        ok = launch >= 0
        rt = trace.runtime
        at = launch[ok]
        out[miss[ok]] = innermost_op(ops, rt.pid[at], rt.tid[at], rt.start_ns[at])
    return out


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
    work: Work, kernel_names: list[str], peak: EfficiencyPeak | None, conv_tf32: bool = True
) -> tuple[str | None, bool]:
    """Roof unit of a group and whether it runs on CUDA cores (fp32 kernels by name).
    An fp32 convolution runs on CUDA cores whatever its kernels are called (implicit
    GEMM, Winograd, FFT, dgrad/wgrad engines, the layout conversions around them) when
    no fp32 convolution of the trace runs a TF32 kernel (``conv_tf32`` False: TF32 is
    off for cuDNN, ``torch.backends.cudnn.allow_tf32=False``)."""
    if work.category == "memory":
        return "memory", False
    if work.dtype == "fp32":
        lowered = [k.lower() for k in kernel_names]
        if any("tf32" in k for k in lowered):
            return "tf32_tensor", False
        if lowered and any(_CUDA_CORE.search(k) for k in lowered):
            return "fp32", True
        if lowered and work.category == "conv" and not conv_tf32:
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


class _Grouped(NamedTuple):
    """The kernels of :func:`efficiency_summary` grouped by their op's group: ``groups``
    (tallied), ``row_group`` the group of each distinct op row (-1 without a formula),
    ``inverse`` each kernel's index into those rows, ``kernel_group`` each kernel's
    group and ``kept`` the kernels with one."""

    groups: list[_Group]
    row_group: np.ndarray
    inverse: np.ndarray
    kernel_group: np.ndarray
    kept: np.ndarray


def efficiency_summary(
    index: TraceIndex,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    kernels_of: dict[tuple[str, str, str], np.ndarray] | None = None,
) -> EfficiencyPanel:
    """``summary.efficiency`` (module docstring): op groups of the main device with their
    achieved rates against the roofline; notes instead of claims where none is
    possible. ``kernels_of``, when given, receives each row's kernels: ``(op, shapes,
    dtype)`` → their rows of the kernel table (what a fix of that group changes)."""
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
    sel = _step_kernels(index, device)
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
    grouped = _group_kernels(index, ksel, op_row)
    groups, kernel_group, kept = grouped.groups, grouped.kernel_group, grouped.kept
    num_sms = props.get("numSms") if props else None
    out, row_of, covered_ns = _group_rows(
        trace, groups, peak, n_steps, num_sms if isinstance(num_sms, int) else None, th, notes
    )
    out.sort(key=lambda r: -r.time_us_per_step)
    if kernels_of is not None:
        _kernels_of_rows(ksel, grouped, row_of, kernels_of)
    if not out:
        notes.append("No kernel time in ops with a FLOPs or bytes formula and shapes.")
    headline = _headline(out)
    per_step = _matmul_work_per_step(
        steps.start_ns,
        k.start_ns[ksel][kept],
        k.dur_ns[ksel][kept],
        kernel_group[kept],
        grouped.inverse,
        k.start_ns[ksel],
        grouped.row_group,
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


def _kernels_of_rows(
    ksel: np.ndarray,
    grouped: _Grouped,
    row_of: dict[int, EfficiencyRow],
    out: dict[tuple[str, str, str], np.ndarray],
) -> None:
    """Fill ``out``: per row of the panel, ``(op, shapes, dtype)`` → its kernel rows."""
    kept = grouped.kept
    rows, groups = ksel[kept], grouped.kernel_group[kept]
    order = np.argsort(groups, kind="stable")
    rows, groups = rows[order], groups[order]
    bounds = np.searchsorted(groups, np.arange(len(grouped.groups) + 1))
    for gid, row in row_of.items():
        out[(row.op, row.shapes, row.dtype)] = rows[bounds[gid] : bounds[gid + 1]]


def _step_kernels(index: TraceIndex, device: int) -> np.ndarray:
    """Rows of the kernels on ``device`` that start between the first step's start and
    the last step's end."""
    steps = index.steps
    k = index.trace.kernels
    lo, hi = int(steps.start_ns[0]), int(steps.end_ns[-1])
    return np.flatnonzero((k.device == device) & (k.start_ns >= lo) & (k.start_ns < hi))


def _group_kernels(index: TraceIndex, ksel: np.ndarray, op_row: np.ndarray) -> _Grouped:
    """Kernels ``ksel`` (launched by the op rows ``op_row``) grouped by op group, each
    group with its calls, kernel time and kernel names (:func:`_tally`)."""
    trace = index.trace
    rows, inverse = np.unique(op_row, return_inverse=True)
    row_key, key_ids = _op_keys(index, rows)
    groups, key_group = _key_groups(trace, key_ids)
    row_group = key_group[row_key] if row_key.size else row_key
    kernel_group = row_group[inverse]
    kept = kernel_group >= 0
    if groups:
        _tally(trace, groups, ksel, row_group, kernel_group, kept)
    return _Grouped(groups, row_group, inverse, kernel_group, kept)


def _op_keys(index: TraceIndex, rows: np.ndarray) -> tuple[np.ndarray, dict[tuple[Any, ...], int]]:
    """A key id per op row of ``rows``, and the keys: (name, dims, types, scalars, flops
    texts)."""
    ops = index.trace.cpu_ops
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
    return row_key, key_ids


def _key_groups(
    trace: m.Trace, key_ids: dict[tuple[Any, ...], int]
) -> tuple[list[_Group], np.ndarray]:
    """The op groups of the keys of :func:`_op_keys`, and each key's group."""
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
    return groups, key_group


def _tally(
    trace: m.Trace,
    groups: list[_Group],
    ksel: np.ndarray,
    row_group: np.ndarray,
    kernel_group: np.ndarray,
    kept: np.ndarray,
) -> None:
    """Set each group's calls (op rows), kernel time and kernel name counts."""
    k = trace.kernels
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


def _group_rows(
    trace: m.Trace,
    groups: list[_Group],
    peak: EfficiencyPeak | None,
    n_steps: int,
    num_sms: int | None,
    th: Thresholds,
    notes: list[str],
) -> tuple[list[EfficiencyRow], dict[int, EfficiencyRow], int]:
    """A row per group with kernel time (:func:`_row`, in group order), the row of each
    group id, and the kernel time they cover (ns); a FLOPs cross-check note per row
    goes to ``notes``."""
    out: list[EfficiencyRow] = []
    row_of: dict[int, EfficiencyRow] = {}
    covered_ns = 0
    conv_tf32 = _convolutions_use_tf32(trace, groups)
    for gid, g in enumerate(groups):
        if g.time_ns <= 0:
            continue
        covered_ns += g.time_ns
        knames = [
            trace.names[n]
            for n in sorted(g.kernel_names or {}, key=lambda n: -(g.kernel_names or {})[n])
            if n >= 0
        ]
        row = _row(g, knames, peak, n_steps, num_sms, th, conv_tf32)
        row_of[gid] = row
        out.append(row)
        note = _flops_check_note(row)
        if note:
            notes.append(note)
    return out, row_of, covered_ns


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


def _matmul_work_per_step(
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


def _convolutions_use_tf32(trace: m.Trace, groups: list[_Group]) -> bool:
    """Whether any fp32 convolution group of the trace runs a TF32 kernel (TF32 on for
    cuDNN: its CUDA-core kernels are then cuDNN's choice of algorithm, not the
    setting's); True without fp32 convolutions."""
    fp32 = [g for g in groups if g.work.category == "conv" and g.work.dtype == "fp32"]
    if not fp32:
        return True
    return any("tf32" in trace.names[n].lower() for g in fp32 for n in (g.kernel_names or {}))


def _row(
    g: _Group,
    knames: list[str],
    peak: EfficiencyPeak | None,
    n_steps: int,
    num_sms: int | None,
    th: Thresholds,
    conv_tf32: bool = True,
) -> EfficiencyRow:
    work = g.work
    unit, cuda_cores = _unit(work, knames, peak, conv_tf32)
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
        fuses=fused_ops(g.op),
    )


_FUSED = re.compile(r"^triton_(?:poi|red|per)_fused_(?P<ops>.+?)(?:_\d+)?$")


def fused_ops(name: str) -> str | None:
    """The ops an Inductor kernel fuses, as its name gives them:
    ``triton_red_fused_native_layer_norm_backward_view_2`` →
    ``native_layer_norm_backward_view``; None for any other name."""
    match = _FUSED.match(name)
    return match.group("ops") if match else None


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
