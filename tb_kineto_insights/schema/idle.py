"""Shape of ``idle``: filled by ``analysis.idle.idle_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out
from tb_kineto_insights.schema.kernels import HistogramBin


class IdleCause(Out, frozen=True, kw_only=True):
    """Idle time of one cause: ``us`` in total over the steps analysed, its
    share of all idle time and of step time."""

    us: float
    fraction_of_idle: float
    fraction_of_step_time: float


class ShortKernelCost(Out, frozen=True, kw_only=True):
    """``summary.idle.devices[].short_kernels``."""

    busy_us: float
    launch_bound_gaps: int
    launch_bound_idle_us: float
    launch_bound_idle_us_by_cause: dict[str, float]
    launch_bound_kernel_us: float
    cost_us: float
    cost_fraction_of_step_time: float


class OpIdle(Out, frozen=True, kw_only=True):
    """An op and the GPU idle time it overlaps (``us``, its share of step time)."""

    name: str
    us: float
    fraction_of_step_time: float


class OptimizerKernel(Out, frozen=True, kw_only=True):
    """A kernel launched from the optimizer step: short name, count and time per step."""

    name: str
    count_per_step: float
    us_per_step: float


class OptimizerStepCost(Out, frozen=True, kw_only=True):
    """``summary.idle.devices[].optimizer``: what the optimizer step costs this device.

    ``idle_us``: GPU idle while the launching thread is inside ``Optimizer.step#…`` /
    ``Optimizer.zero_grad#…`` (the ``optimizer_step`` idle cause); ``busy_us``: wall
    time of the GPU work launched from inside those ranges (launch call inside one, by
    correlation); ``cost_us`` = the two, ``cost_fraction_of_step_time`` over the summed
    step time. ``mode``: ``per_parameter``, ``foreach``, ``fused``, ``compiled`` or
    ``none`` (read from its kernels: :func:`tb_kineto_insights.analysis.idle_costs.optimizer_mode`).
    ``launch_bound_idle_us`` / ``launch_bound_kernel_us``: the part of the short-kernel
    cost (``short_kernels``) that lies in the optimizer step."""

    ranges_per_step: float
    host_us: float
    idle_us: float
    busy_us: float
    cost_us: float
    cost_fraction_of_step_time: float
    idle_fraction_of_step_time: float
    kernels_per_step: float
    mode: str
    top_kernels: list[OptimizerKernel]
    launch_bound_idle_us: float
    launch_bound_kernel_us: float


class IdleStep(Out, frozen=True, kw_only=True):
    """``summary.idle.devices[].per_step[]``."""

    number: int
    duration_us: float
    idle_us: float
    busy_fraction: float | None
    causes_us: dict[str, float]


class HostThread(Out, frozen=True, kw_only=True):
    """``summary.idle.devices[].largest_gaps[].thread``."""

    pid: int
    tid: int


class PythonCallers(Out, frozen=True, kw_only=True):
    """``summary.idle.devices[].python_frames[].callers[]``: one call path to the frame,
    ``callers`` the user frames around it, nearest first (Kineto's names), and the idle
    time (µs, over the steps analysed) the frame held on that path."""

    callers: list[str]
    idle_us: float


class PythonFrame(Out, frozen=True, kw_only=True):
    """``summary.idle.devices[].python_frames[]``: a user Python frame (``frame``, as
    Kineto names it: ``path/file.py(42): function``) the launching thread was in while
    the GPU idled (``analysis.python_frames``: library frames folded into the nearest
    user frame). ``idle_us`` over the steps analysed, ``idle_us_per_step``, its share of
    the device's idle and of step time, by idle cause (``causes_us``), per step
    (``per_step_us``, in ``per_step`` order), ``after_sync_us``: the part in gaps opened
    by a host synchronization made from another frame (the host had moved on from the
    frame that synchronised), and its call paths (``callers``, largest first)."""

    frame: str
    idle_us: float
    idle_us_per_step: float
    fraction_of_idle: float
    fraction_of_step_time: float
    causes_us: dict[str, float]
    after_sync_us: float
    per_step_us: list[float]
    callers: list[PythonCallers]


class SyncSource(Out, frozen=True, kw_only=True):
    """``summary.idle.devices[].sync_sources[]``: where the host synchronised with the
    GPU (``analysis.idle_sync``): ``op``, the outermost CPU op around the sync (the
    runtime call itself when no op holds it); ``after``, the op the thread ran just
    before it (whose result the sync usually reads); ``call``, the runtime call that
    waited (``cudaStreamSynchronize``…); ``chain``, every op and call around the sync,
    outermost first; ``within``, the user annotation around ``op``;
    ``calls_per_step``, runtime sync calls per step from this source; ``gaps_opened``
    and ``idle_us`` (``idle_us_per_step``), the idle gaps it opened and their time;
    ``python_frame``, with stacks, the user frame it was called from."""

    op: str
    after: str | None
    call: str | None
    chain: list[str]
    within: str | None
    calls_per_step: float
    gaps_opened: int
    idle_us: float
    idle_us_per_step: float
    python_frame: str | None


class IdleGap(Out, frozen=True, kw_only=True):
    """One of the largest idle gaps: where (``step``, ``offset_us`` in the step,
    ``start_us``), ``length_us``, its ``cause`` and time by cause (``causes_us``), the
    op open on the host (``op``, ``innermost_op``), its ``thread`` and, with Python
    stacks, the user frame that held most of it (``python_frame``, else null)."""

    step: int | None
    offset_us: float | None
    start_us: float
    length_us: float
    cause: str
    opened_by_sync: bool
    causes_us: dict[str, float]
    op: str | None
    innermost_op: str | None
    thread: HostThread
    python_frame: str | None


class IdleDevice(Out, frozen=True, kw_only=True):
    """One GPU's idle time: totals, time by cause (``causes``: cause →
    :class:`IdleCause`), per step, the gap-length histogram, the largest gaps with what
    the host was doing, the cost of short kernels (``short_kernels``) and of the
    optimizer step (``optimizer``), the ops holding the ``cpu_ops`` idle, most idle
    first (``cpu_ops_top``: the outermost CPU op on the launching thread), and, with
    Python stacks, the user frames the launching threads were in while it idled
    (``python_frames``, largest first; ``python_idle_us``: the idle inside any recorded
    frame); ``sync_sources``: where the host synchronised, most idle first.
    A gap opened by a sync names, in ``op`` / ``innermost_op``, the outermost op and
    the call around that sync (not what the host ran after it)."""

    device: int
    busy_us: float
    busy_fraction: float | None
    idle_us: float
    idle_fraction: float | None
    idle_us_per_step: float | None
    gap_count: int
    causes: dict[str, IdleCause]
    sync_opened_gaps: int
    short_kernels: ShortKernelCost
    optimizer: OptimizerStepCost
    cpu_ops_top: list[OpIdle]
    per_step: list[IdleStep]
    gap_histogram: list[HistogramBin]
    largest_gaps: list[IdleGap]
    python_idle_us: float
    python_frames: list[PythonFrame]
    sync_sources: list[SyncSource] = []


class IdlePanel(Out, frozen=True, kw_only=True):
    """``summary.idle`` (``analysis.idle.idle_summary``): GPU idle gaps inside
    steps and their host-side cause, per device (``devices``); causes are keys of
    ``cause_order``, with display names in ``cause_labels``. ``python_stacks``: the trace
    holds ``python_function`` ranges (recorded with ``with_stack=True``)."""

    cause_order: list[str]
    cause_labels: dict[str, str]
    main_device: int | None
    devices: list[IdleDevice]
    python_stacks: bool
    notes: list[str]

    def main_entry(self) -> IdleDevice | None:
        """The entry of ``main_device`` (``analysis.trace_index.TraceIndex.main_device``:
        always one of ``devices``), else the first device; None without devices."""
        return next((d for d in self.devices if d.device == self.main_device), None) or (
            self.devices[0] if self.devices else None
        )
