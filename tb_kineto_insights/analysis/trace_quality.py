"""Is this trace representative? ``health.trace_quality``.

Measures (all checkable by hand from the trace):

- ``steps``: the steady-state step windows (``ProfilerStep#N``) the panels use;
  ``step_us``: their durations; ``steps_left_out``: steps left out because GPU work they
  launched was lost (``health.steps_without_gpu_data``; the other windows left out are
  ``steps.left_out``).
- ``first_step_ratio``: the warm-up step's duration / the median steady-state step when
  one was left out (:data:`~.step_windows.WARM_UP`), else the first steady-state step's
  / the median of the others (``None`` below ``quality_warmup_min_steps`` steps). A
  first step still warming up (cudnn autotune, ``torch.compile``, lazy CUDA init,
  allocator growth) is much longer.
- ``step_cv``: sample standard deviation / mean of the steady-state step durations
  (``None`` below 2 steps).
- ``launch_blocking``: ``launches`` = kernel launches (runtime calls whose name contains
  ``LaunchKernel``) linked by correlation id to a kernel; ``ended_after_kernel`` = those
  whose runtime call ends at or after its kernel's end; ``fraction`` of the two. With
  ``CUDA_LAUNCH_BLOCKING=1`` every launch returns only once its kernel is done (nearly
  all launches); normally the call returns in µs, long before a queued kernel ends.
- ``profiler``: Kineto's own ``overhead`` activities (:data:`OVERHEAD_NAMES`: CUPTI
  buffer requests and flushes, instrumentation), ``overhead_us`` and
  ``overhead_fraction`` of the profiled time (sum of step durations); the volume the
  profiler records per step: ``python_function_events_per_step`` (``with_stack``) and
  ``flow_events_per_step``.

The diagnoses read from this section are the rules of ``analysis/rules/trace.py``.
"""

from __future__ import annotations

import numpy as np

from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.lost import lost_data
from tb_kineto_insights.analysis.step_windows import WARM_UP
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.schema.health import LaunchBlocking, ProfilerCost, TraceQuality
from tb_kineto_insights.trace import model as m

#: Names Kineto gives its ``overhead`` activities (CUPTI overhead kinds) that are the
#: profiler's own work. Not among them: ``Command Buffer Full``, CUPTI's record of a
#: launch that waited because the GPU's command queue was full: a host that runs ahead
#: of a busy GPU, not a cost of profiling (``sample_logs/hf_gpt2_fp32``: 687 of them,
#: 72 % of the profiled time, in steps as long as the unprofiled job's).
OVERHEAD_NAMES: frozenset[str] = frozenset(
    {
        "Activity Buffer Request",
        "Buffer Flush",
        "Instrumentation",
        "Resource",
        "Driver Compiler",
        "Runtime Triggered Module Loading",
        "Lazy Function Loading",
        "UVM Activity Init",
    }
)


def _launch_blocking(index: TraceIndex) -> LaunchBlocking:
    trace = index.trace
    kernels, runtime = trace.tables[m.KERNEL], trace.runtime
    rows = index.launch_row.get(m.KERNEL, np.zeros(0, dtype=np.int64))
    linked = rows >= 0
    if not linked.any():
        return LaunchBlocking(launches=0, ended_after_kernel=0, fraction=None)
    is_launch = index.rows_where(m.RUNTIME, nm.is_kernel_launch_call)
    rt_rows = rows[linked]
    launch = is_launch[rt_rows]
    rt_rows = rt_rows[launch]
    k_end = kernels.end_ns[linked][launch]
    n = int(rt_rows.size)
    after = int((runtime.end_ns[rt_rows] >= k_end).sum()) if n else 0
    return LaunchBlocking(
        launches=n,
        ended_after_kernel=after,
        fraction=round(after / n, 4) if n else None,
    )


def _is_overhead(name: str) -> bool:
    """One of the profiler's own overhead events (:data:`OVERHEAD_NAMES`)."""
    return name in OVERHEAD_NAMES


def _profiler(index: TraceIndex, profiled_ns: int, n_steps: int) -> ProfilerCost:
    trace = index.trace
    other = trace.tables[m.OTHER]
    overhead_ns = 0
    if len(other):
        # inside the steady steps' windows (host or GPU): what the step figures hold
        steps = index.steps
        inside = (steps.step_of(other.start_ns) >= 0) | (steps.host_step_of(other.start_ns) >= 0)
        mask = index.rows_where(m.OTHER, _is_overhead) & inside
        overhead_ns = int(other.dur_ns[mask].sum())
    per = max(n_steps, 1)
    return ProfilerCost(
        overhead_us=round(overhead_ns / 1000.0, 3),
        overhead_fraction=round(overhead_ns / profiled_ns, 4) if profiled_ns > 0 else None,
        python_function_events_per_step=round(len(trace.tables[m.PYTHON]) / per, 1),
        flow_events_per_step=round(len(trace.flows) / per, 1),
    )


def trace_quality_summary(
    index: TraceIndex, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> TraceQuality:
    """The ``health.trace_quality`` section
    (:class:`~tb_kineto_insights.schema.health.TraceQuality`, module docstring): ``steps``,
    ``steps_left_out``, ``step_us``,
    ``has_step_markers``, ``first_step_ratio``, ``step_cv``, ``launch_blocking``,
    ``profiler``, ``lost`` (:func:`~tb_kineto_insights.analysis.lost.lost_data`).
    Durations in µs."""
    steps = index.steps
    dur_us = [float(x) / 1000.0 for x in steps.dur_ns]
    n = len(dur_us)
    ratio: float | None = None
    warm = [s for s in index.left_out_steps if s.reason == WARM_UP]
    if warm:
        ratio = warm[0].ratio
    elif n >= thresholds.quality_warmup_min_steps:
        rest = float(np.median(dur_us[1:]))
        ratio = round(dur_us[0] / rest, 3) if rest > 0 else None
    cv: float | None = None
    if n >= 2 and np.mean(dur_us) > 0:
        cv = round(float(np.std(dur_us, ddof=1) / np.mean(dur_us)), 4)
    return TraceQuality(
        steps=n,
        steps_left_out=len(index.trace.health.steps_without_gpu_data),
        has_step_markers=bool(steps.has_markers),
        step_us=[round(x, 3) for x in dur_us],
        first_step_ratio=ratio,
        step_cv=cv,
        launch_blocking=_launch_blocking(index),
        profiler=_profiler(index, steps.total_ns, n),
        lost=lost_data(index),
    )
