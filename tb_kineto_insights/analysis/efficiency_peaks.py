"""The roof of the efficiency panel (:mod:`.efficiency`): the dense datasheet peaks of
a GPU model, per compute unit, and its memory bandwidth.

Definitions:

- **Peak table**: ``analysis/data/gpu_peaks.json`` (package data; :func:`peak_table`),
  one row per GPU model with its dense rates in TFLOP/s per unit (:data:`UNITS`;
  ``null`` where the GPU lacks the unit) and its bandwidth in GB/s, each row citing its
  datasheet. Datasheet peaks are ceilings: boost clocks, ideal kernels.
- **Matching** (:func:`match_peaks`): the first row whose ``name_regex`` matches the
  lowercased ``deviceProperties.name`` and whose ``num_sms`` / ``min_memory_gib`` /
  ``max_memory_gib`` (of ``totalGlobalMem``) hold; the user's ``peak_*`` thresholds
  instead when the bandwidth and a FLOP/s figure are given (TF32 at half the tensor
  figure); ``None`` for an unknown GPU.
- **Unit of a dtype** (:data:`TENSOR_UNIT`): the tensor-core unit of matmul-class work
  in bf16, fp16, fp8, fp64; fp32 is decided by its kernels (the panel's job).
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.schema.efficiency import EfficiencyPeak

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
    """FLOP/s of ``unit`` (one of :data:`UNITS`) in ``peak``; ``None`` where the GPU lacks
    the unit.

    Raises:
        AttributeError: ``unit`` is not one of :data:`UNITS`.
    """
    value: float | None = getattr(peak, f"{unit}_flops_per_s")
    return value
