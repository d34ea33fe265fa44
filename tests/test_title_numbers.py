"""One set of numbers per fact: every number a diagnosis's title states is one of its
evidence values, in the title's unit and to the title's precision.

The check (:func:`unmatched_numbers`) reads each number of the title with the unit that
follows it (``%``, ``ms``/``µs``/``ns``/``s``, ``B``…``TiB``, ``x``, ``GB/s``,
``TFLOP/s``, none) and looks for an evidence value (any number in the evidence, nested
lists and objects included, and the length of a list) that shows as that number: ``%``
from a fraction (× 100), a duration from µs, a size from bytes (IEC), the rest as they
are; within half a unit of the title's last digit. Numbers glued to a name (``CUDA:0``,
``f32``, ``ProfilerStep#2``, ``X=1``) are names, not numbers.

Run per diagnosis id over every diagnosis of ``sample_logs/`` and ``../shared`` (span
and run level); an id that no real trace raises is skipped, and says so.

Real traces: ``test_title_numbers_real.py``."""

from __future__ import annotations

import math
import re
from typing import Any

_NUMBER = re.compile(
    r"(?<![\w.:=#/\-])(\d[\d,]*(?:\.\d+)?)(?![\w.]*[=_])"
    r"\s?(%|ms|µs|us|ns|s|B|KiB|MiB|GiB|TiB|x|×|GB/s|TFLOP/s)?(?!\w)"
)
_FRAME_LINE = re.compile(r"\.py\(\d+\)")
#: An op group's input shapes (``[[32, 96, 128, 128], [], ...]``) are part of its name.
_SHAPES = re.compile(r"\[[\d,\s\[\]]*\]")
_SCALE: dict[str, list[float]] = {
    "%": [100.0],
    "ms": [1e-3],
    "µs": [1.0],
    "us": [1.0],
    "ns": [1e3],
    "s": [1e-6],
    "B": [1.0],
    "KiB": [1 / 1024],
    "MiB": [1 / 1024**2],
    "GiB": [1 / 1024**3],
    "TiB": [1 / 1024**4],
    "x": [1.0],
    "×": [1.0],
    "GB/s": [1.0, 1e-9],
    "TFLOP/s": [1e-12],
    "": [1.0],
}


def _values(evidence: Any) -> list[float]:
    """Every number in ``evidence`` (nested), and the length of every list."""
    out: list[float] = []
    if isinstance(evidence, bool):
        return out
    if isinstance(evidence, int | float):
        if math.isfinite(evidence):
            out.append(float(evidence))
    elif isinstance(evidence, dict):
        for value in evidence.values():
            out += _values(value)
    elif isinstance(evidence, list):
        out.append(float(len(evidence)))
        for value in evidence:
            out += _values(value)
    return out


def unmatched_numbers(title: str, evidence: dict[str, Any]) -> list[str]:
    """The numbers of ``title`` (with their unit) that no value of ``evidence`` shows
    as (see the module docstring); ``[]`` when every number is accounted for."""
    values = _values(evidence)
    missing = []
    # a Python frame's line number is part of its name (``train.py(42): step``), not a
    # figure: the evidence carries the name as text
    title = _SHAPES.sub("[]", _FRAME_LINE.sub(".py()", title))
    for match in _NUMBER.finditer(title):
        text, unit = match.group(1), match.group(2) or ""
        shown = float(text.replace(",", ""))
        decimals = len(text.split(".")[1]) if "." in text else 0
        tolerance = 0.5 * 10**-decimals + 1e-9
        if not any(
            abs(v * scale - shown) <= tolerance * (1 + 1e-6)
            for v in values
            for scale in _SCALE[unit]
        ):
            missing.append(f"{text} {unit}".strip())
    return missing


# --------------------------------------------------------------------------- known answers


def test_checker_finds_each_number() -> None:
    evidence = {"device": 0, "idle_fraction_of_step_time": 0.247, "idle_us_per_step": 2470.0}
    title = "GPU 0 idles 25 % of the step time (2.5 ms per step) after host synchronisation"
    assert unmatched_numbers(title, evidence) == []
    # a number the evidence does not hold, a unit it does not show as
    assert unmatched_numbers("GPU 0 idles 30 % (2.5 ms per step)", evidence) == ["30 %"]
    assert unmatched_numbers("GPU 0 idles 25 % (2.5 µs per step)", evidence) == ["2.5 µs"]
    assert unmatched_numbers("GPU 3 idles", evidence) == ["3"]


def test_checker_reads_sizes_counts_and_names() -> None:
    evidence = {"steady_state_events": 16, "steady_state_reserved_growth_bytes": 2_083_520_512}
    title = (
        "The caching allocator on CUDA:0 reserved new memory 16 times (1.94 GiB) in ~20,269 steps"
    )
    assert unmatched_numbers(title, {**evidence, "steps_to_capacity": 20268.53}) == []
    # CUDA:0 is a name; the steps are missing
    assert unmatched_numbers(title, evidence) == ["20,269"]
    # names with digits are not numbers: ProfilerStep#2, f32, CUDA_LAUNCH_BLOCKING=1
    assert unmatched_numbers("ProfilerStep#2 f32 CUDA_LAUNCH_BLOCKING=1? sm80_xmma", {}) == []
    # a list's length counts: "in 4 steady-state steps"
    assert unmatched_numbers("in 4 steps", {"steady_state_steps": [3, 5, 6, 7]}) == []


def test_checker_catches_the_old_fragmentation_title() -> None:
    """The issue's case: the title counted the steady-state steps (16 events, 1.94 GiB),
    the evidence every step (19 events, 2.24 GiB)."""
    old_evidence = {
        "events": 19,
        "reserved_growth_bytes": 2_407_530_496,
        "steady_state_steps": [3, 4, 5, 6],
    }
    title = "reserved new memory 16 times (1.94 GiB) in 4 steady-state steps"
    assert unmatched_numbers(title, old_evidence) == ["16", "1.94 GiB"]
