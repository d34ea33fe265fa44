"""The unit of every evidence value, and the one way each unit is written.

A diagnosis's evidence (``Diagnosis.evidence``) is a dict whose keys name their unit
(DESIGN.md, "Units in names"): ``idle_us_per_step`` is µs per step, ``peak_bytes`` bytes,
``gpu_busy_fraction`` a share. :func:`unit_of` reads a key's unit from :data:`UNIT_RULES`,
an ordered table of patterns (the first that matches the whole key wins), so a rule added
later whose keys follow the convention is formatted without more work; the few keys that
do not follow it are the table's first rows (its exceptions). The same table goes to the
tab (``docs/schema/labels.json`` → ``frontend/src/vocabulary.ts``), which applies it with
the same matching (``frontend/src/evidence.ts``), so the tab, ``report``'s text and
``--format markdown`` write one value alike; ``frontend/test/evidence_cases.json`` holds
examples that both implementations must write exactly.

How each unit is written (:func:`format_scalar`):

================  ===========================================  ==========================
unit              written                                      example
================  ===========================================  ==========================
``us``            µs below 1 ms (1 decimal), ms below 1 s,      ``812.4 µs``, ``73.08 ms``
                  else s (2 decimals): ``units.fmt_duration_us``
``bytes``         IEC, 2 decimals from KiB (``units.fmt_bytes``) ``16.00 MiB``, ``512 B``
``fraction``      a percentage, 1 decimal; ``<0.1 %`` for a      ``64.4 %``
                  share too small to show
``flop_rate``     FLOP/s in T/G/M, 1 decimal                    ``51.6 TFLOP/s``
``byte_rate``     bytes/s in GB/s (10^9), 1 decimal             ``12.5 GB/s``
``gbps``          GB/s given as such, 1 decimal                 ``241.6 GB/s``
``times``         a multiple, 2 decimals                        ``2.80×``
``count``         a whole number with thousands separators;     ``1,400``, ``215.25``
                  a mean count with up to 2 decimals
``steps``         a number of steps, whole                      ``8,919 steps``
``step``          step numbers (N of ProfilerStep#N)            ``#3, #4``
``coefficient``   a dimensionless statistic (r², CV), 2 decimals ``0.59``
``device``        a device: an index is a GPU                   ``GPU 0``, ``CUDA:0``
``id``            a rank, an index: the number as it is         ``1``
``name``          text from the trace, as it is                 ``aten::mm``
``text``          our words; ``snake_case`` words spaced         ``all reduce``
================  ===========================================  ==========================

A key ending in ``_per_step`` has its unit per step (``/step`` follows the value). Lists
are written item by item (at most :data:`LIST_ITEMS`), mappings as ``key: value`` in the
parent key's unit (step numbers as keys: ``#2: 3``), lists of records (the largest
allocations, Python frames) one record per line, each field by its own key.

Rounding: the same as the titles' (``analysis/rules``: ``units.fmt_duration_us``, whole
percentages, ``x.xx×``), with as many or more digits, so a title's number is the evidence
value rounded further, never another number (``tests/test_evidence_units_real.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from tb_kineto_insights.analysis.units import fmt_bytes, fmt_duration_us

__all__ = [
    "LIST_ITEMS",
    "NA",
    "UNIT_RULES",
    "UNITS",
    "evidence_texts",
    "format_evidence",
    "format_scalar",
    "says_nothing",
    "unit_of",
]

NA = "n/a"
#: Items of a list written before ``… (N)``.
LIST_ITEMS = 8
#: Every unit :func:`format_scalar` writes.
UNITS = (
    "us",
    "bytes",
    "fraction",
    "flop_rate",
    "byte_rate",
    "gbps",
    "times",
    "count",
    "steps",
    "step",
    "coefficient",
    "device",
    "id",
    "name",
    "text",
)

#: ``(pattern, unit)``, first match wins; a pattern matches a whole key, after a trailing
#: ``_per_step`` is taken off (it makes any unit "per step"). The exceptions (keys whose
#: name does not say their unit) come first, then the conventions of DESIGN.md. A key
#: that matches nothing is a ``count`` (a number) or ``text`` (a string).
UNIT_RULES: tuple[tuple[str, str], ...] = (
    # exceptions: names from the trace, our words, identities and statistics
    ("worker|op|name|frame|kernel|kernels|top_kernels|op_input_shapes|shapes|gpu|dtype", "name"),
    ("kinds|peak_source|rule|reason|label|class|basis|mode|bound|(.+_)?basis", "text"),
    ("device", "device"),
    ("rank|straggler_rank", "id"),
    ("r2|(.+_)?cv", "coefficient"),
    ("p_value", "fraction"),  # a probability: "<0.1 %"
    ("step|op_steps|steady_state_steps|steps_left_out", "step"),
    ("(.+_)?steps_to_capacity", "steps"),
    ("classes", "us/step"),  # a straggler cause's excess per class
    ("(.+_)?us_per_step_by_.+", "us/step"),
    ("(.+_)?us_(by|in)_.+", "us"),
    ("launches_per_step_excess|.+_per_step_mean", "count/step"),
    # the conventions: units in names
    ("(.+_)?us", "us"),
    (".+_bytes_per_s", "byte_rate"),
    ("(.+_)?bytes", "bytes"),
    (".+_flops_per_s", "flop_rate"),
    ("(.+_)?gbps", "gbps"),
    ("(.+_)?fraction(_.+)?|(.+_)?share_of_.+|.+_share", "fraction"),
    ("(.+_)?speedup(_.+)?|.+_ratio", "times"),
)
#: Units that name a thing rather than measure it: ``<thing>_per_step`` counts the thing
#: per step (``kernels_per_step``), whatever ``<thing>`` alone would be.
_NAMING = frozenset({"name", "text", "id", "device", "step"})

_PER_STEP = "_per_step"


@cache
def _compiled() -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(pattern), unit) for pattern, unit in UNIT_RULES)


def unit_of(key: str) -> tuple[str, bool]:
    """``(unit, per_step)`` of an evidence key (module docstring): the first row of
    :data:`UNIT_RULES` that matches the whole key (a unit written ``"us/step"`` is per
    step), else the first that matches it less a trailing ``_per_step`` (then per step;
    a thing named, such as ``kernels``, is then counted: ``count``), else ``"count"``."""
    for pattern, unit in _compiled():
        if pattern.fullmatch(key):
            name, _, per = unit.partition("/")
            return name, per == "step"
    base = key.removesuffix(_PER_STEP)
    per_step = base != key
    if per_step:
        for pattern, unit in _compiled():
            if pattern.fullmatch(base):
                name = unit.partition("/")[0]
                return ("count" if name in _NAMING else name), True
    return "count", per_step


def _plain(value: float, decimals: int) -> str:
    """``value`` with at most ``decimals`` decimals, trailing zeros dropped, thousands
    grouped."""
    text = f"{value:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _scaled(value: float, units: tuple[tuple[float, str], ...]) -> str:
    for size, unit in units:
        if abs(value) >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.1f} {units[-1][1]}"


_SNAKE = re.compile(r"[a-z0-9]+(_[a-z0-9]+)+")
_FLOPS = ((1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"), (1.0, "FLOP/s"))


def format_scalar(unit: str, value: Any, per_step: bool = False) -> str:
    """One number (or string, bool) in ``unit`` (the module docstring's table), with
    ``/step`` after it when ``per_step``; None and non-finite numbers are
    :data:`NA`."""
    if value is None:
        return NA
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        # our enum-like words ("all_reduce", "host_untraced") read with spaces; names from
        # the trace (kernels, ops, workers) stay exactly as recorded
        spaced = unit not in ("name", "device") and _SNAKE.fullmatch(value)
        return value.replace("_", " ") if spaced else value
    if not isinstance(value, int | float) or not math.isfinite(value):
        return NA
    suffix = "/step" if per_step else ""
    text = _number(unit, float(value) if isinstance(value, float) else value)
    return text + suffix


def _number(unit: str, value: float) -> str:
    """A finite number in ``unit`` (no per-step suffix)."""
    if unit == "us":
        return fmt_duration_us(value)
    if unit == "bytes":
        return fmt_bytes(value, 2)
    if unit == "fraction":
        pct = 100 * value
        if pct != 0 and abs(pct) < 0.05:
            return "<0.1 %" if pct > 0 else ">-0.1 %"
        return f"{pct:.1f} %"
    if unit == "flop_rate":
        return _scaled(value, _FLOPS)
    if unit == "byte_rate":
        return f"{value / 1e9:,.1f} GB/s"
    if unit == "gbps":
        return f"{value:,.1f} GB/s"
    if unit == "times":
        return f"{value:.2f}×"
    if unit == "steps":
        return f"{round(value):,} steps"
    if unit == "step":
        return f"#{round(value)}"
    if unit == "coefficient":
        return f"{value:.2f}"
    if unit == "device":
        return f"GPU {round(value)}"
    if unit == "id":
        return str(round(value))
    return _plain(value, 2)  # count, and any number of an unknown unit


def format_evidence(
    key: str,
    value: Any,
    escape: Callable[[str], str] = str,
    *,
    escape_key: Callable[[str], str] | None = None,
    records_sep: str = "; ",
) -> str:
    """An evidence value in its key's unit (:func:`unit_of`): scalars by
    :func:`format_scalar`; lists item by item; a mapping as ``key: value``, its values in
    the parent key's unit (step numbers as keys: ``#N``, a count per step then being that
    step's count), or as a record when the parent key names no unit (a count, not per
    step: each field by its own key); a list of records one record after the other
    (``records_sep``), each field by its own key. ``escape`` is applied to every text
    from the data (strings), ``escape_key`` (default ``escape``) to mapping keys and
    record fields, e.g. Markdown escaping; numbers and units are ours."""
    fmt = _Formatter(escape, escape_key or escape, records_sep)
    return fmt.evidence(key, value)


class _Formatter:
    """:func:`format_evidence` with its escaping and separator."""

    def __init__(
        self, escape: Callable[[str], str], escape_key: Callable[[str], str], records_sep: str
    ) -> None:
        self.escape = escape
        self.escape_key = escape_key
        self.records_sep = records_sep

    def evidence(self, key: str, value: Any) -> str:
        unit, per_step = unit_of(key)
        if isinstance(value, Mapping):
            known = {k: v for k, v in value.items() if v is not None}
            if not known:  # {} or every entry unknown (a bus bandwidth of no collective)
                return "none"
            steps = all(str(k).isdigit() for k in value)
            if unit == "count" and not per_step and not steps:
                # a key that names no unit holds a record (a test's figures): each
                # field in its own unit
                return ", ".join(
                    f"{self.escape_key(str(k))}: {self.evidence(str(k), v)}"
                    for k, v in known.items()
                )
            return ", ".join(
                f"{'#' + str(k) if steps else self.escape_key(str(k))}: "
                f"{self.inner(unit, per_step and not steps, v)}"
                for k, v in known.items()
            )
        if isinstance(value, list | tuple):
            if value and all(isinstance(v, Mapping) for v in value):
                return self.records_sep.join(self.record(r) for r in value)
            # a list under a per-step key holds one value per step: each is that step's
            items = [self.inner(unit, False, v) for v in value[:LIST_ITEMS]]
            more = f", … ({len(value)})" if len(value) > LIST_ITEMS else ""
            return ", ".join(items) + more if items else "none"
        return self.inner(unit, per_step, value)

    def inner(self, unit: str, per_step: bool, value: Any) -> str:
        if isinstance(value, Mapping | list | tuple):
            return self.evidence("value", value)
        text = format_scalar(unit, value, per_step)
        return self.escape(text) if isinstance(value, str) else text

    def record(self, record: Mapping[str, Any]) -> str:
        return ", ".join(
            f"{self.escape_key(str(k))} {self.evidence(str(k), v)}"
            for k, v in record.items()
            if v is not None
        )


def says_nothing(value: Any) -> bool:
    """Whether an evidence value is left out: None, an empty list or mapping, or a mapping
    whose every value is None (``busbw_gbps`` of collectives without a size was shown as
    an empty row)."""
    if value is None:
        return True
    if isinstance(value, Mapping):
        return all(v is None for v in value.values())
    return isinstance(value, list | tuple) and not value


def evidence_texts(
    evidence: Mapping[str, Any],
    escape: Callable[[str], str] = str,
    *,
    escape_key: Callable[[str], str] | None = None,
    records_sep: str = "; ",
) -> list[tuple[str, str]]:
    """``(key, text)`` per evidence value worth showing (empty lists and mappings and
    None left out), in the evidence's order, each by :func:`format_evidence` (with the
    same ``escape``, ``escape_key`` and ``records_sep``); a straggler's ``cause`` one row
    per field (``cause.us_per_step``, …), each in its own unit."""
    options: dict[str, Any] = {"escape_key": escape_key, "records_sep": records_sep}
    rows: list[tuple[str, str]] = []
    for key, value in evidence.items():
        if says_nothing(value):
            continue
        if key == "cause" and isinstance(value, Mapping):
            for field, inner in value.items():
                if says_nothing(inner):
                    continue
                rows.append(
                    (f"cause.{field}", format_evidence(str(field), inner, escape, **options))
                )
            continue
        rows.append((key, format_evidence(key, value, escape, **options)))
    return rows
