"""Shape of ``efficiency``: filled by ``analysis.efficiency.efficiency_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out


class EfficiencyPeak(Out, frozen=True, kw_only=True):
    """``summary.efficiency.peak``: the roof used, per unit in FLOP/s (``None`` where the
    GPU has no such unit) and bytes/s. ``source``: the datasheet the figures come from
    (or ``"--threshold"`` for peaks given by the user); ``model``: the table's row (or
    the device's own name for user peaks). Datasheet peaks are ceilings."""

    device_name: str
    model: str
    source: str
    fp64_flops_per_s: float | None
    fp64_tensor_flops_per_s: float | None
    fp32_flops_per_s: float | None
    tf32_tensor_flops_per_s: float | None
    bf16_tensor_flops_per_s: float | None
    fp16_tensor_flops_per_s: float | None
    fp8_tensor_flops_per_s: float | None
    memory_bytes_per_s: float


class EfficiencyRow(Out, frozen=True, kw_only=True):
    """One op group of ``summary.efficiency.rows[]``: op name + input shapes + dtype.

    ``category``: ``matmul``, ``conv``, ``attention`` (FLOPs from shapes) or ``memory``
    (element-wise, reduction, norm, copy: bytes only). ``unit``: the roof used
    (``fp32``, ``tf32_tensor``, ``bf16_tensor``, ``fp16_tensor``, ``fp8_tensor``,
    ``fp64``, ``fp64_tensor``, ``memory``). Rates are per second of the group's own
    kernel time; ``arithmetic_intensity`` = FLOPs / bytes; ``attainable_flops_per_s`` =
    min(peak of its unit, intensity × memory bandwidth); ``roof_fraction`` = achieved
    FLOP/s / attainable (memory ops: achieved bytes/s / bandwidth); ``bound``:
    ``compute`` or ``memory``. ``None`` where no claim is possible (no peak for this GPU
    or unit). ``cuda_cores``: an fp32 matmul/conv whose kernels run on CUDA cores (names
    with ``sgemm``/``ffma``/``simt``/``f32f32`` and no ``tf32``). ``reason``: why a
    compute-bound group is far below its roof, when its shapes show it.
    ``flops_source``: ``shapes`` (the formula of ``analysis.efficiency``) or ``trace``
    (the ops' ``flops`` arg, used when the trace has one); ``shapes_flops_per_call``: the
    formula's count beside the trace's (the cross-check), ``None`` when the formula's is
    the one used."""

    op: str
    shapes: str
    dtype: str
    category: str
    unit: str | None
    kernels: list[str]
    calls_per_step: float
    time_us_per_step: float
    flops_per_call: float | None
    bytes_per_call: float
    achieved_flops_per_s: float | None
    achieved_bytes_per_s: float
    arithmetic_intensity: float | None
    peak_flops_per_s: float | None
    attainable_flops_per_s: float | None
    roof_fraction: float | None
    bound: str | None
    cuda_cores: bool
    reason: str | None
    flops_source: str = "shapes"
    shapes_flops_per_call: float | None = None
    #: for an Inductor-generated (Triton) kernel, the ops it fuses as its name gives
    #: them (``triton_poi_fused_gelu_view_2`` → ``gelu_view``), else None
    fuses: str | None = None


class EfficiencyStep(Out, frozen=True, kw_only=True):
    """One step of ``summary.efficiency.per_step[]``: the matmul/conv/attention work of
    the step (op calls whose first kernel starts in it): ``matmul_flops``, their kernel
    time ``matmul_time_us`` and the part of it on tensor cores ``tensor_core_time_us``
    (groups whose roof is a ``*_tensor`` unit). Per-step samples for the diff's
    efficiency verdicts."""

    matmul_flops: float
    matmul_time_us: float
    tensor_core_time_us: float


class EfficiencyPanel(Out, frozen=True, kw_only=True):
    """``summary.efficiency`` (``analysis.efficiency.efficiency_summary``): kernel
    efficiency per op group against the roofline of the device's datasheet peaks.

    ``device``: the device analysed (the one with the most kernel time), ``None`` without
    kernels. ``kernel_time_us_per_step``: its kernel time per step; ``covered_fraction``:
    the share of it in ``rows`` (op groups with a formula and shapes); ``rows``: the op
    groups by time, at most ``max_rows``; ``headline``: one line on the matmul work
    (e.g. "matmuls reach 74 % of the bf16 tensor roof"), ``None`` when there is none;
    ``notes``: why no claim is made where none is (no shapes, unknown GPU, no kernels).
    ``per_step``: the matmul-class work of each step (:class:`EfficiencyStep`), empty
    without it."""

    device: int | None
    device_name: str | None
    peak: EfficiencyPeak | None
    steps: int
    kernel_time_us_per_step: float
    covered_fraction: float
    headline: str | None
    rows: list[EfficiencyRow]
    notes: list[str]
    per_step: list[EfficiencyStep] = []
