"""Were the two sides of a diff recorded alike? The diff's ``comparability`` list.

Each side's facts come from its summaries' ``health``:

- the run metadata written by :func:`tb_kineto_insights.capture.profile`
  (``health.run_metadata``) when present: preset, schedule and profiler settings,
  torch / CUDA / cuDNN / NCCL versions, GPU model and count, world size, container
  image, git commit, recorded environment variables;
- otherwise, and for what the metadata does not hold, what the trace itself says:
  ``deviceProperties`` (GPU model and count), ``cuda_runtime_version`` /
  ``cuda_driver_version``, ``distributedInfo`` (backend, world size, NCCL version),
  stacks / shapes / memory events present (``health.flags``), and launches that wait
  for their kernel (the ``trace_cuda_launch_blocking`` diagnosis, CUDA_LAUNCH_BLOCKING).

A fact is compared only when both sides know it (an environment variable recorded by
``capture`` on both sides counts as known: absent means unset). One entry per field
whose values differ: ``{field, base, new, why, source}`` where ``base`` / ``new`` are
the side's value (a sorted list when its workers disagree), ``why`` says what the
difference does to the comparison and ``source`` is ``"metadata"`` or ``"trace"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tb_kineto_insights.analysis.run_facts import meta_facts as _meta_facts
from tb_kineto_insights.analysis.run_facts import trace_facts as _trace_facts
from tb_kineto_insights.schema.diff import ComparabilityItem
from tb_kineto_insights.schema.summary import Summary

Side = Sequence[tuple[str, Summary]]

_TIMING = "changes what is measured: timings are not comparable"
#: Why a difference matters, per field (``env.NAME`` fields use :data:`ENV_WHY`).
WHY: dict[str, str] = {
    "run_metadata": "only one side was recorded with tb_kineto_insights.capture: the other's "
    "settings are read from the trace itself",
    "preset": "another profiler preset records more or less, and costs more or less",
    "schedule": "another profiling schedule (wait/warmup/active): other steps are measured",
    "record_shapes": "recording input shapes adds host time to every op: " + _TIMING,
    "profile_memory": "recording memory events adds host time to every allocation: " + _TIMING,
    "with_stack": "recording Python stacks costs host time (10-15 % reported in "
    "distributed jobs): " + _TIMING,
    "with_flops": "FLOP counting adds host time to every op: " + _TIMING,
    "with_modules": "recording module hierarchy adds host time: " + _TIMING,
    "torch_version": "another PyTorch version: other kernels and dispatch costs",
    "cuda_version": "another CUDA version: other kernels and libraries",
    "cuda_runtime_version": "another CUDA runtime: other kernels and libraries",
    "cuda_driver_version": "another CUDA driver: launch and copy costs may differ",
    "cudnn_version": "another cuDNN version: other convolution algorithms",
    "nccl_version": "another NCCL version: other collective algorithms and bandwidth",
    "gpu_model": "another GPU model: every time differs",
    "gpu_count": "another number of GPUs",
    "world_size": "another world size: other communication and per-rank work",
    "backend": "another distributed backend: other communication",
    "container": "another container image: other libraries",
    "git_commit": "another code version (expected when the change is the point)",
    "cuda_launch_blocking": "launches wait for their kernel on one side "
    "(CUDA_LAUNCH_BLOCKING=1): every gap looks like host work there",
}
#: Why a difference of an environment variable matters (the ``env.NAME`` fields), per
#: variable name; other ``NCCL_*`` variables and the rest have a generic reason.
ENV_WHY: dict[str, str] = {
    "CUDA_LAUNCH_BLOCKING": "CUDA_LAUNCH_BLOCKING=1 makes every launch synchronous: "
    "idle gaps and launch times are not comparable",
    "PYTORCH_CUDA_ALLOC_CONF": "another caching-allocator configuration: memory and "
    "allocation costs differ",
    "OMP_NUM_THREADS": "another number of CPU threads: host-side ops run at another speed",
}


def _side_facts(side: Side) -> tuple[dict[str, set[Any]], dict[str, str], bool, set[str]]:
    """Per field, the set of values over the side's workers; each field's source;
    whether every worker has run metadata; the env variables recorded anywhere."""
    values: dict[str, set[Any]] = {}
    source: dict[str, str] = {}
    all_meta = bool(side)
    env_names: set[str] = set()
    for _, s in side:
        run = s.health.run_metadata
        facts = _trace_facts(s)
        src = dict.fromkeys(facts, "trace")
        if isinstance(run, dict):
            mf = _meta_facts(run)
            env_names |= {k for k in mf if k.startswith("env.")}
            facts.update(mf)
            src.update(dict.fromkeys(mf, "metadata"))
        else:
            all_meta = False
        for key, value in facts.items():
            values.setdefault(key, set()).add(value if not isinstance(value, list) else str(value))
            source.setdefault(key, src[key])
    return values, source, all_meta, env_names


def _shown(vals: set[Any]) -> Any:
    if len(vals) == 1:
        return next(iter(vals))
    return sorted(vals, key=str)


def comparability(base: Side, exp: Side) -> list[ComparabilityItem]:
    """Unlike-for-like differences between the two sides (module docstring), in a stable
    order: run metadata presence, then settings, versions, hardware, environment.
    Empty when nothing known differs."""
    bv, bsrc, bmeta, benv = _side_facts(base)
    ev, esrc, emeta, eenv = _side_facts(exp)
    out: list[ComparabilityItem] = []
    if bmeta != emeta:
        out.append(
            ComparabilityItem(
                field="run_metadata",
                base="present" if bmeta else "absent",
                new="present" if emeta else "absent",
                why=WHY["run_metadata"],
                source="metadata",
            )
        )
    if bmeta and emeta:  # recorded by capture on both sides: an absent env var is unset
        for name in benv | eenv:
            bv.setdefault(name, {None})
            ev.setdefault(name, {None})
    order = list(WHY) + sorted(k for k in set(bv) | set(ev) if k.startswith("env."))
    for field in order:
        if field == "run_metadata" or field not in bv or field not in ev:
            continue
        if bv[field] == ev[field]:
            continue
        if field.startswith("env."):
            name = field[4:]
            why = ENV_WHY.get(name) or (
                "another NCCL setting: other collective algorithms or transport"
                if name.startswith("NCCL_")
                else "another environment setting"
            )
        else:
            why = WHY[field]
        source = "metadata" if "metadata" in (bsrc.get(field), esrc.get(field)) else "trace"
        out.append(
            ComparabilityItem(
                field=field, base=_shown(bv[field]), new=_shown(ev[field]), why=why, source=source
            )
        )
    return out


def format_comparability(entries: list[ComparabilityItem]) -> list[str]:
    """One text line per entry: ``not like for like: FIELD BASE -> NEW (WHY)``; a value
    of ``None`` (an environment variable not set) reads ``unset``."""

    def shown(v: Any) -> str:
        return "unset" if v is None else str(v)

    return [
        f"not like for like: {e.field} {shown(e.base)} -> {shown(e.new)} ({e.why})" for e in entries
    ]
