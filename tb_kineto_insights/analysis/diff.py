"""Run-to-run diff: compare two sides (a span, a worker, or a whole run) step-normalised.

A *side* is a list of ``(label, summary)`` pairs: one span summary, the spans of one
worker, or every worker (rank) of a run. Per-step values of all its spans and workers
are pooled, so a run's numbers are the ranks averaged; :func:`diff` also compares rank
by rank when both sides are runs with the same ranks.

Noise rule (:data:`NOISE_RULE`): a metric with per-step samples changes *beyond noise*
when the difference of the means exceeds twice its standard error
``sqrt(s_base²/n_base + s_exp²/n_exp)``, where ``s`` is a side's step-to-step standard
deviation (Welch; about a 95 % two-sided test). The step-to-step noise of both sides
enters, so a jittery side needs a larger change. Only then is it ``improved`` or
``regressed``; a difference under 1 % of the base (or exactly zero) is ``unchanged``;
anything else is ``within noise``. Metrics with one value per
side (no per-step samples) use a relative rule: under 1 % ``unchanged``, 10 % or more
``improved``/``regressed``, between ``within noise``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

DIFF_SCHEMA = "tb_kineto_insights.diff/1"
NOISE_RULE = (
    "beyond noise when |mean(exp) - mean(base)| > 2 x sqrt(s_base^2/n_base + s_exp^2/n_exp), "
    "s = step-to-step standard deviation of each side (Welch); under 1 % of base: "
    "unchanged; single values: under 1 % unchanged, >= 10 % a verdict, else within noise"
)
UNCHANGED_FRACTION = 0.01
SCALAR_VERDICT_FRACTION = 0.10

Side = Sequence[tuple[str, dict[str, Any]]]
Extractor = Callable[[dict[str, Any]], list[float] | None]


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    better: str  # "lower" or "higher"
    extract: Extractor
    per_step: bool = True


def _steps(s: dict[str, Any]) -> list[dict[str, Any]]:
    return s.get("steps", {}).get("steps", []) or []


def _main_idle(s: dict[str, Any]) -> dict[str, Any] | None:
    idle = s.get("idle", {})
    return next(
        (d for d in idle.get("devices", []) if d.get("device") == idle.get("main_device")), None
    )


def _breakdown(cat: str) -> Extractor:
    return lambda s: [x["breakdown_us"][cat] for x in _steps(s)]


def _idle_cause(cause: str) -> Extractor:
    def get(s: dict[str, Any]) -> list[float] | None:
        dev = _main_idle(s)
        return None if dev is None else [x["causes_us"][cause] for x in dev["per_step"]]

    return get


def _utilization(s: dict[str, Any]) -> list[float] | None:
    vals = [x["gpu_utilization_fraction"] for x in _steps(s)]
    return None if any(v is None for v in vals) else vals


def _kernels_per_step(s: dict[str, Any]) -> list[float] | None:
    per = s.get("kernels", {}).get("per_step")
    return None if not per else [float(x["count"]) for x in per]


def _short_share(s: dict[str, Any]) -> list[float] | None:
    per = s.get("kernels", {}).get("per_step")
    if not per or any(x["count"] == 0 for x in per):
        return None
    return [x["short_count"] / x["count"] for x in per]


def _comm(key: str) -> Extractor:
    def get(s: dict[str, Any]) -> list[float] | None:
        comm = s.get("communication") or {}
        per = comm.get("steps")
        if not per or not comm.get("has_collectives"):
            return None
        return [float(x[key]) for x in per]

    return get


def _memory_device(s: dict[str, Any]) -> dict[str, Any] | None:
    devices = (s.get("memory") or {}).get("devices") or []
    gpu = [d for d in devices if d.get("device_type") not in (0, None)]
    pool = gpu or devices
    return max(pool, key=lambda d: d.get("peak_allocated_bytes") or 0, default=None)


def _memory_peak(s: dict[str, Any]) -> list[float] | None:
    dev = _memory_device(s)
    per = (dev or {}).get("per_step")
    if not per:
        return None
    return [float(x["peak_bytes"]) for x in per if x.get("peak_bytes") is not None] or None


def _memory_growth(s: dict[str, Any]) -> list[float] | None:
    growth = ((_memory_device(s) or {}).get("growth")) or {}
    slope = growth.get("bytes_per_step")
    return None if slope is None else [float(slope)]


_CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "data_loading", "cpu_exec")
_CAUSES = ("data_loading", "host_sync", "optimizer_step", "launching", "cpu_ops")

METRICS: tuple[Metric, ...] = (
    Metric(
        "step_time_us",
        "step time",
        "µs",
        "lower",
        lambda s: [x["duration_us"] for x in _steps(s)],
    ),
    Metric("gpu_utilization_fraction", "GPU utilization", "fraction", "higher", _utilization),
    *(
        Metric(
            f"breakdown.{c}_us",
            f"step breakdown: {c.replace('_', ' ')}",
            "µs",
            "lower",
            _breakdown(c),
        )
        for c in _CATEGORIES
    ),
    *(
        Metric(f"idle.{c}_us", f"GPU idle: {c.replace('_', ' ')}", "µs", "lower", _idle_cause(c))
        for c in _CAUSES
    ),
    Metric("kernels_per_step", "kernels per step", "count", "lower", _kernels_per_step),
    Metric("short_kernel_fraction", "short-kernel share", "fraction", "lower", _short_share),
    Metric("communication.exposed_us", "exposed communication", "µs", "lower", _comm("exposed_us")),
    Metric(
        "communication.overlapped_us",
        "overlapped communication",
        "µs",
        "higher",
        _comm("overlapped_us"),
    ),
    Metric("memory.peak_allocated_bytes", "memory peak", "bytes", "lower", _memory_peak),
    Metric(
        "memory.growth_bytes_per_step",
        "memory growth",
        "bytes/step",
        "lower",
        _memory_growth,
        per_step=False,
    ),
)


def _mean_std(xs: list[float]) -> tuple[float, float]:
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


def judge(
    base: list[float], exp: list[float], better: str, per_step: bool = True
) -> dict[str, Any]:
    """Compare two samples; returns means, change, noise and the verdict (see NOISE_RULE)."""
    mb, sb = _mean_std(base)
    me, se = _mean_std(exp)
    delta = me - mb
    rel = delta / abs(mb) if mb else (0.0 if delta == 0 else math.copysign(math.inf, delta))
    stderr = math.sqrt(sb * sb / len(base) + se * se / len(exp))
    if delta == 0 or abs(rel) < UNCHANGED_FRACTION:
        verdict = "unchanged"
    elif per_step and len(base) > 1 and len(exp) > 1:
        beyond = abs(delta) > 2 * stderr
        verdict = _direction(delta, better) if beyond else "within noise"
    else:
        verdict = (
            _direction(delta, better) if abs(rel) >= SCALAR_VERDICT_FRACTION else "within noise"
        )
    return {
        "base": mb,
        "exp": me,
        "delta": delta,
        "change_fraction": rel if math.isfinite(rel) else None,
        "base_noise": sb,
        "exp_noise": se,
        "stderr": stderr,
        "base_n": len(base),
        "exp_n": len(exp),
        "verdict": verdict,
    }


def _direction(delta: float, better: str) -> str:
    good = delta < 0 if better == "lower" else delta > 0
    return "improved" if good else "regressed"


def _pool(side: Side, extract: Extractor) -> list[float] | None:
    out: list[float] = []
    for _, summary in side:
        vals = extract(summary)
        if vals is None:
            return None
        out.extend(float(v) for v in vals)
    return out or None


def _table_rows(side: Side, table: str) -> tuple[dict[str, dict[str, list[float]]], int]:
    """name → {"time": per-step µs, "count": per-step count}, pooled over the side's spans
    (a span lacking a name contributes zeros for its steps); and the pooled step count."""
    rows: dict[str, dict[str, list[float]]] = {}
    offset = 0
    for _, summary in side:
        t = (summary.get("tables") or {}).get(table) or {}
        n = int(t.get("steps") or len(_steps(summary)))
        for row in t.get("rows", []):
            entry = rows.setdefault(row["name"], {"time": [], "count": []})
            for key, src in (("time", "per_step_time_us"), ("count", "per_step_count")):
                entry[key].extend([0.0] * (offset - len(entry[key])))
                entry[key].extend(float(v) for v in row[src])
        offset += n
    for entry in rows.values():
        for key in ("time", "count"):
            entry[key].extend([0.0] * (offset - len(entry[key])))
    return rows, offset


def _compare_table(base: Side, exp: Side, table: str, limit: int = 25) -> dict[str, Any]:
    b_rows, b_n = _table_rows(base, table)
    e_rows, e_n = _table_rows(exp, table)
    if not b_n or not e_n:
        return {"changed": [], "added": [], "removed": [], "unchanged_count": 0}
    changed, added, removed = [], [], []
    unchanged = 0
    for name in sorted(set(b_rows) | set(e_rows)):
        b = b_rows.get(name, {"time": [0.0] * b_n, "count": [0.0] * b_n})
        e = e_rows.get(name, {"time": [0.0] * e_n, "count": [0.0] * e_n})
        t = judge(b["time"], e["time"], "lower")
        c = judge(b["count"], e["count"], "lower")
        row = {
            "name": name,
            "time_us_per_step": t,
            "count_per_step": c,
            "delta_time_us_per_step": t["delta"],
        }
        if name not in b_rows:
            added.append(row)
        elif name not in e_rows:
            removed.append(row)
        elif t["verdict"] in ("improved", "regressed") or c["verdict"] in ("improved", "regressed"):
            changed.append(row)
        else:
            unchanged += 1

    def by_impact(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(rows, key=lambda r: -abs(r["delta_time_us_per_step"]))[:limit]

    return {
        "changed": by_impact(changed),
        "added": by_impact(added),
        "removed": by_impact(removed),
        "unchanged_count": unchanged,
    }


def _setting(s: dict[str, Any], key: str) -> Any:
    return (s.get("health", {}).get("metadata") or {}).get(key)


def _warnings(base: Side, exp: Side) -> list[str]:
    def devices(side: Side) -> set[str]:
        names = set()
        for _, s in side:
            for p in s.get("health", {}).get("device_properties") or []:
                if p.get("name"):
                    names.add(str(p["name"]))
        return names

    def world(side: Side) -> set[Any]:
        return {
            (s.get("health", {}).get("distributed_info") or {}).get("world_size") for _, s in side
        }

    def values(side: Side, key: str) -> set[Any]:
        return {_setting(s, key) for _, s in side}

    def flags(side: Side, key: str) -> set[Any]:
        return {bool((s.get("health", {}).get("flags") or {}).get(key)) for _, s in side}

    out = []
    bd, ed = devices(base), devices(exp)
    if bd and ed and bd != ed:
        out.append(f"different devices: {', '.join(sorted(bd))} vs {', '.join(sorted(ed))}")
    bw, ew = world(base), world(exp)
    if bw != ew:
        out.append(f"different world sizes: {sorted(map(str, bw))} vs {sorted(map(str, ew))}")
    for key in ("cuda_runtime_version", "cuda_driver_version", "cupti_version"):
        bv, ev = values(base, key), values(exp, key)
        if bv != ev and bv != {None} and ev != {None}:
            what = key.replace("_", " ")
            out.append(f"different {what}: {sorted(map(str, bv))} vs {sorted(map(str, ev))}")
    for key, flag in (
        ("record_shapes", "has_shapes"),
        ("with_stack", "has_stacks"),
        ("profile_memory", "has_memory"),
    ):
        if flags(base, flag) != flags(exp, flag):
            out.append(f"different profiler settings: {key} differs (changes timings)")
    if len(base) != len(exp):
        out.append(f"different number of workers/spans: {len(base)} vs {len(exp)}")
    return out


def _diagnosis_ids(side: Side) -> set[str]:
    return {d["id"] for _, s in side for d in s.get("diagnoses", [])}


def diff(
    base: Side, exp: Side, *, base_label: str = "base", exp_label: str = "exp"
) -> dict[str, Any]:
    """Compare two sides; returns the ``tb_kineto_insights.diff/1`` document.

    Keys: ``headline`` (step time before → after, ``speedup`` = base / exp, verdict),
    ``metrics`` (one row per metric both sides have: means, ``delta``,
    ``change_fraction`` (relative to base), noise, ``verdict``), ``kernels`` / ``ops``
    (``changed`` / ``added`` / ``removed`` by time per step), ``diagnoses``
    (``appeared`` / ``disappeared`` / ``kept``), ``warnings`` (device, world size,
    CUDA versions, profiler settings), ``per_rank`` (runs with matching ranks),
    ``largest_changes`` and ``noise_rule``.

    Raises:
        ValueError: a side has no summaries or no steps.
    """
    if not base or not exp:
        raise ValueError("both sides need at least one readable trace")
    metrics = []
    for metric in METRICS:
        b, e = _pool(base, metric.extract), _pool(exp, metric.extract)
        if not b or not e:
            continue
        row = judge(b, e, metric.better, metric.per_step)
        metrics.append(
            {
                "key": metric.key,
                "label": metric.label,
                "unit": metric.unit,
                "better": metric.better,
                **row,
            }
        )
    metrics.extend(_bandwidth_metrics(base, exp))
    step = next((m for m in metrics if m["key"] == "step_time_us"), None)
    if step is None:
        raise ValueError("no step times on one side")
    headline = {
        "base_step_us": step["base"],
        "exp_step_us": step["exp"],
        "speedup": step["base"] / step["exp"] if step["exp"] else None,
        "change_fraction": step["change_fraction"],
        "verdict": step["verdict"],
    }
    kernels = _compare_table(base, exp, "kernels")
    ops = _compare_table(base, exp, "ops")
    b_ids, e_ids = _diagnosis_ids(base), _diagnosis_ids(exp)
    largest = sorted(
        [
            {
                "what": "metric",
                "name": m["label"],
                "delta_us_per_step": m["delta"],
                "verdict": m["verdict"],
            }
            for m in metrics
            if m["unit"] == "µs" and m["key"] != "step_time_us"
        ]
        + [
            {
                "what": "kernel",
                "name": r["name"],
                "delta_us_per_step": r["delta_time_us_per_step"],
                "verdict": r["time_us_per_step"]["verdict"],
            }
            for group in ("changed", "added", "removed")
            for r in kernels[group]
        ],
        key=lambda r: -abs(r["delta_us_per_step"]),
    )[:10]
    return {
        "schema": DIFF_SCHEMA,
        "base": {"label": base_label, "workers": [w for w, _ in base]},
        "exp": {"label": exp_label, "workers": [w for w, _ in exp]},
        "headline": headline,
        "warnings": _warnings(base, exp),
        "metrics": metrics,
        "kernels": kernels,
        "ops": ops,
        "diagnoses": {
            "appeared": sorted(e_ids - b_ids),
            "disappeared": sorted(b_ids - e_ids),
            "kept": sorted(b_ids & e_ids),
        },
        "per_rank": _per_rank(base, exp),
        "largest_changes": largest,
        "noise_rule": NOISE_RULE,
    }


def _busbw(side: Side) -> dict[str, list[float]]:
    """Per collective kind, the bus bandwidth (GB/s) of each summary that has one."""
    out: dict[str, list[float]] = {}
    for _, s in side:
        for k in (s.get("communication") or {}).get("kinds") or []:
            if k.get("busbw_gbps") is not None:
                out.setdefault(k["kind"], []).append(float(k["busbw_gbps"]))
    return out


def _bandwidth_metrics(base: Side, exp: Side) -> list[dict[str, Any]]:
    """Bus bandwidth per collective kind both sides have (one value per span: the
    relative rule for single values applies unless both sides have several)."""
    b, e = _busbw(base), _busbw(exp)
    rows = []
    for kind in sorted(set(b) & set(e)):
        several = len(b[kind]) > 1 and len(e[kind]) > 1
        row = judge(b[kind], e[kind], "higher", per_step=several)
        head = {"key": f"communication.busbw.{kind}_gbps", "label": f"busbw {kind}"}
        rows.append({**head, "unit": "GB/s", "better": "higher", **row})
    return rows


def _rank(summary: dict[str, Any]) -> Any:
    return (summary.get("health", {}).get("distributed_info") or {}).get("rank")


def _per_rank(base: Side, exp: Side) -> list[dict[str, Any]]:
    by_b: dict[Any, list[tuple[str, dict[str, Any]]]] = {}
    by_e: dict[Any, list[tuple[str, dict[str, Any]]]] = {}
    for side, into in ((base, by_b), (exp, by_e)):
        for label, s in side:
            into.setdefault(_rank(s), []).append((label, s))
    if len(by_b) < 2 or set(by_b) != set(by_e) or None in by_b:
        return []
    out = []
    metric = METRICS[0]
    for rank in sorted(by_b):
        b, e = _pool(by_b[rank], metric.extract), _pool(by_e[rank], metric.extract)
        if b and e:
            out.append({"rank": rank, "step_time_us": judge(b, e, "lower")})
    return out
