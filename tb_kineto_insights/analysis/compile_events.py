"""torch.compile compiling inside the profiled steps: what ``compile_in_step`` states
(``analysis/rules/idle.py``) beside the ``compiling`` idle cause (:mod:`.host_activity`).

Definitions (host step windows, :meth:`~.step_windows.StepWindows.host_windows`):

- a **compile range**: a CPU op or user annotation that
  :func:`~tb_kineto_insights.analysis.names.is_compile` names (Dynamo's frame compile
  ``dynamo`` / ``entire_frame_compile``, the lazy ``entire_backward_compile``, every
  ``… (dynamo_timed)`` phase, Triton's ``CachingAutotuner.benchmark_all_configs``);
- ``host_us_per_step``: per step, the union over every thread of its compile ranges
  cut to the step's host window (µs): the host time the fix removes from the step;
- ``compile_ids``: the distinct ``compile_id=F/N`` of the compile annotations in the
  steps, in order (Dynamo numbers each compile of frame ``F``: one more ``N`` per
  recompile); ``compiles`` their count (without ids: the outermost compile ranges);
- ``input_shapes``: the distinct ``Input Dims`` of the ``CompiledFunction`` calls (the
  compiled graph's inputs, ``record_shapes=True``) in the steps that compile, and of
  those the entries that differ between calls (``varying``: position → one dims list
  per distinct signature, in step order): the shapes that made it recompile.

Real traces: ``sample_logs/recompile_every_step`` (``dynamic=False`` fed a new sequence
length each step): 5 compiles (``0/12`` … ``0/16``) in 5 steps, input ``[8, 144]`` …
``[8, 176]``; ``recompile_mark_dynamic`` (one dynamic compile before profiling) and the
``compiled_*`` runs: no compile range in any step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.rowjson import RowJson

#: The op whose ``Input Dims`` are the compiled graph's inputs.
COMPILED_FUNCTION = "CompiledFunction"


@dataclass
class CompileFacts:
    """What :func:`compile_facts` finds (module docstring)."""

    host_us_per_step: list[float] = field(default_factory=list)
    steps_compiling: int = 0
    compile_ids: list[str] = field(default_factory=list)
    compiles: int = 0
    input_shapes: int = 0
    varying: dict[int, list[Any]] = field(default_factory=dict)
    #: the union of the compile ranges (trace clock, ns): what the fix removes
    ranges: iv.Intervals = field(default_factory=iv.empty)


def _rows(index: TraceIndex, kind: str) -> np.ndarray:
    return np.flatnonzero(index.rows_where(kind, nm.is_compile))


def compile_facts(index: TraceIndex) -> CompileFacts:
    """The compile ranges of the trace inside its host step windows (module
    docstring); empty facts without steps or compile ranges."""
    steps = index.steps
    trace = index.trace
    out = CompileFacts(host_us_per_step=[0.0] * len(steps))
    if not len(steps):
        return out
    hs, he = steps.host_windows() if steps.has_markers else (steps.start_ns, steps.end_ns)
    starts, ends = [], []
    ids: list[tuple[int, str]] = []
    roots = 0
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        table = trace.tables[kind]
        rows = _rows(index, kind)
        if not rows.size:
            continue
        starts.append(table.start_ns[rows])
        ends.append(table.end_ns[rows])
        for r in rows.tolist():
            cid = nm.compile_id(trace.names[int(table.name[r])])
            if cid is not None:
                ids.append((int(table.start_ns[r]), cid))
        roots += int(iv.union(table.start_ns[rows], table.end_ns[rows])[0].size)
    if not starts:
        return out
    compiling = iv.union(np.concatenate(starts), np.concatenate(ends))
    out.ranges = compiling
    per_step = iv.overlap_per_window(compiling, hs, he)
    out.host_us_per_step = [int(x) / 1000.0 for x in per_step.tolist()]
    out.steps_compiling = int((per_step > 0).sum())
    inside = sorted((t, cid) for t, cid in ids if iv.window_index(np.array([t]), hs, he)[0] >= 0)
    out.compile_ids = list(dict.fromkeys(cid for _, cid in inside))
    out.compiles = len(out.compile_ids) or roots
    _shapes(index, hs, he, per_step > 0, out)
    return out


def _shapes(
    index: TraceIndex, hs: np.ndarray, he: np.ndarray, hit: np.ndarray, out: CompileFacts
) -> None:
    """``input_shapes`` and ``varying`` of ``out`` from the ``CompiledFunction`` calls of
    the steps that compile (``hit``, per host window)."""
    ops = index.trace.cpu_ops
    if not len(ops) or not len(ops.input_dims):
        return
    names = index.trace.names
    is_fn = np.fromiter((n == COMPILED_FUNCTION for n in names), np.bool_, len(names))
    rows = np.flatnonzero(is_fn[ops.name])
    k = iv.window_index(ops.start_ns[rows], hs, he)
    rows = rows[(k >= 0) & hit[np.maximum(k, 0)]]
    if not rows.size:
        return
    texts = (
        ops.input_dims.texts(rows)
        if isinstance(ops.input_dims, RowJson)
        else [
            msgspec.json.encode(ops.input_dims[r]) if r in ops.input_dims else None
            for r in rows.tolist()
        ]
    )
    seen: list[list[Any]] = []
    for text in texts:
        if text is None:
            continue
        try:
            dims = msgspec.json.decode(text)
        except msgspec.DecodeError:
            continue
        if isinstance(dims, list) and dims not in seen:
            seen.append(dims)
    out.input_shapes = len(seen)
    if len(seen) > 1 and len({len(d) for d in seen}) == 1:
        for pos in range(len(seen[0])):
            values = [d[pos] for d in seen]
            if any(v != values[0] for v in values):
                out.varying[pos] = values
