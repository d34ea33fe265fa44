"""The facts about how a span was recorded that decide whether two spans compare like
for like: what ``compare/comparability.py`` compares between the two sides of a diff and
``compare/history.py`` between consecutive runs of a series (kept in each run's headline
record, ``analysis/headline.py``).

:func:`trace_facts` reads what the trace itself says (``deviceProperties``, CUDA
versions, ``distributedInfo``, recorded stacks/shapes/memory, launch blocking);
:func:`meta_facts` what :func:`tb_kineto_insights.capture.profile` wrote
(``health.run_metadata``). Field names are those of ``comparability.WHY``.
"""

from __future__ import annotations

import json
from typing import Any

from tb_kineto_insights.schema.summary import Summary

_SETTINGS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules")
_META_FIELDS = (
    "torch_version",
    "cuda_version",
    "cudnn_version",
    "nccl_version",
    "gpu_model",
    "gpu_count",
    "world_size",
    "git_commit",
)


def trace_facts(s: Summary) -> dict[str, Any]:
    """Facts the trace itself states (field → value); a field the trace does not state is
    absent."""
    health = s.health
    meta = health.metadata
    flags = health.flags
    dist = health.distributed_info or {}
    facts: dict[str, Any] = {}
    names = sorted({str(p["name"]) for p in health.device_properties if "name" in p})
    if names:
        facts["gpu_model"] = ", ".join(names)
        facts["gpu_count"] = len(health.device_properties)
    # values as the file wrote them: any that is not a scalar as its JSON (hashable)
    for key in ("cuda_runtime_version", "cuda_driver_version"):
        if meta.get(key) is not None:
            facts[key] = _fact(meta[key])
    for key, src in (("world_size", "world_size"), ("backend", "backend")):
        if dist.get(src) is not None:
            facts[key] = _fact(dist[src])
    if dist.get("nccl_version") is not None:
        facts["nccl_version"] = str(dist["nccl_version"])
    facts["with_stack"] = flags.has_stacks
    facts["record_shapes"] = flags.has_shapes
    facts["profile_memory"] = flags.has_memory
    if health.trace_quality.launch_blocking.fraction is not None:  # thresholds: the diagnosis
        ids = {d.id for d in s.diagnoses}
        facts["cuda_launch_blocking"] = "trace_cuda_launch_blocking" in ids
    return facts


def _fact(value: Any) -> Any:
    """A metadata value as a comparable, hashable fact: scalars as they are, anything
    else (a hand-edited or foreign ``tb_kineto_insights`` key) as its compact JSON."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def meta_facts(run: dict[str, Any]) -> dict[str, Any]:
    """Facts from ``health.run_metadata``; a part of the wrong type (``settings`` or
    ``env`` not an object) is treated as absent, any non-scalar value as its JSON."""
    facts: dict[str, Any] = {"preset": _fact(run.get("preset"))}
    settings = _mapping(run.get("settings"))
    sched = [settings.get(k) for k in ("wait", "warmup", "active", "repeat", "skip_first")]
    if any(v is not None for v in sched):
        facts["schedule"] = "wait={} warmup={} active={} repeat={} skip_first={}".format(
            *map(_fact, sched)
        )
    for key in _SETTINGS:
        if isinstance(settings.get(key), bool):  # "no" is not False: leave it unknown
            facts[key] = settings[key]
    for key in _META_FIELDS:
        if run.get(key) is not None:
            facts[key] = _fact(run[key])
    container = run.get("container")
    facts["container"] = _fact(_mapping(container).get("image")) or (
        "container (image unknown)" if container else "none"
    )
    for name, value in _mapping(run.get("env")).items():
        facts[f"env.{name}"] = _fact(value)
    return facts
