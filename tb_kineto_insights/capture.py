"""Record traces that compare cleanly: profiler presets and run metadata.

``profile(logdir, run=None, preset="standard", **overrides)`` returns a configured
``torch.profiler.profile`` that writes gzip traces with ``tensorboard_trace_handler``
into ``logdir/run`` (or ``logdir``), and stores in each trace, under the top-level key
:data:`METADATA_KEY`, what a later comparison needs to tell like from unlike:

- ``preset`` and ``settings`` (the schedule and every profiler flag actually used);
- ``torch_version``, ``cuda_version``, ``cudnn_version``, ``nccl_version``;
- ``gpu_model`` and ``gpu_count`` (``torch.cuda``), ``world_size`` (``WORLD_SIZE`` or
  ``torch.distributed`` when initialised);
- ``container``: the image when known (``/.dockerenv`` or ``/run/.containerenv`` mark a
  container; the image name from common variables, :data:`IMAGE_ENV_VARS`);
- ``git_commit`` of the working directory (``git rev-parse HEAD``; ``None`` outside a
  repository or without git);
- ``env``: the variables in :data:`ENV_VARS` and every ``NCCL_*`` that are set;
- ``label``: free text from the caller.

torch is imported when :func:`profile` or :func:`run_metadata` is called, never on
import: the plugin does not depend on torch. Without it they raise
:class:`CaptureError`.

Presets (:data:`PRESETS`): ``light`` records kernels and steps only (routine checks,
lowest overhead); ``standard`` adds input shapes and memory; ``full`` adds Python stacks
(costs more: 10-15 % in distributed jobs by common reports). All use the schedule
``wait=1, warmup=2, active=5, repeat=1`` unless overridden.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

#: Top-level key of the trace that holds the run metadata written by :func:`profile`.
METADATA_KEY = "tb_kineto_insights"
#: Version of the metadata's layout.
METADATA_VERSION = 1

_SCHEDULE = {"wait": 1, "warmup": 2, "active": 5, "repeat": 1, "skip_first": 0}
#: Settings of each preset: the schedule and the profiler's flags.
PRESETS: dict[str, dict[str, Any]] = {
    "light": {
        **_SCHEDULE,
        "record_shapes": False,
        "profile_memory": False,
        "with_stack": False,
        "with_flops": False,
        "with_modules": False,
    },
    "standard": {
        **_SCHEDULE,
        "record_shapes": True,
        "profile_memory": True,
        "with_stack": False,
        "with_flops": False,
        "with_modules": False,
    },
    "full": {
        **_SCHEDULE,
        "record_shapes": True,
        "profile_memory": True,
        "with_stack": True,
        "with_flops": True,
        "with_modules": True,
    },
}
#: Environment variables recorded when set (besides every ``NCCL_*``).
ENV_VARS: tuple[str, ...] = (
    "CUDA_LAUNCH_BLOCKING",
    "PYTORCH_CUDA_ALLOC_CONF",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_CUDNN_V8_API_DISABLED",
)
#: Variables that name a container image in common setups, first found wins.
IMAGE_ENV_VARS: tuple[str, ...] = (
    "CONTAINER_IMAGE",
    "DOCKER_IMAGE",
    "IMAGE_NAME",
    "NVIDIA_PYTORCH_VERSION",
    "PYTORCH_BUILD_VERSION",
    "SINGULARITY_NAME",
    "APPTAINER_NAME",
)


class CaptureError(RuntimeError):
    """torch is missing, or :func:`profile` got an unknown preset or setting."""


def _torch() -> Any:
    try:
        import torch
        import torch.profiler  # noqa: F401
    except ImportError as exc:
        raise CaptureError(
            "tb_kineto_insights.capture needs PyTorch: pip install 'tb-kineto-insights[record]'"
            f" ({exc})"
        ) from exc
    return torch


def settings_for(preset: str, **overrides: Any) -> dict[str, Any]:
    """The settings of ``preset`` with ``overrides`` applied (no torch needed).

    Raises:
        CaptureError: unknown preset, or an override that is not a setting.
    """
    if preset not in PRESETS:
        raise CaptureError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
    settings = dict(PRESETS[preset])
    unknown = sorted(set(overrides) - set(settings))
    if unknown:
        raise CaptureError(
            f"unknown setting(s) {', '.join(unknown)}: one of {', '.join(sorted(settings))}"
        )
    settings.update(overrides)
    return settings


def _git_commit(cwd: str | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None


def container_info(env: dict[str, str] | None = None, root: str = "/") -> dict[str, Any] | None:
    """``{"in_container": bool, "image": str | None}``, or ``None`` when nothing says we
    run in a container (no marker file, no image variable)."""
    env = dict(os.environ) if env is None else env
    marker = any(Path(root, name).exists() for name in (".dockerenv", "run/.containerenv"))
    image = next((f"{k}={env[k]}" for k in IMAGE_ENV_VARS if env.get(k)), None)
    if not marker and image is None:
        return None
    return {"in_container": marker or image is not None, "image": image}


def recorded_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of :data:`ENV_VARS` and every ``NCCL_*`` that are set, sorted."""
    env = dict(os.environ) if env is None else env
    return {k: env[k] for k in sorted(env) if k in ENV_VARS or k.startswith("NCCL_")}


def run_metadata(
    preset: str = "standard", label: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """The metadata :func:`profile` stores (module docstring); versions are strings or
    ``None``.

    Raises:
        CaptureError: torch is not importable, or unknown preset/setting.
    """
    settings = settings_for(preset, **overrides)
    torch = _torch()
    cuda_ok = bool(torch.cuda.is_available())
    nccl: str | None = None
    try:
        if cuda_ok and hasattr(torch.cuda, "nccl"):
            v = torch.cuda.nccl.version()
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 (a build without NCCL)
        nccl = None
    world_size: int | None = None
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            world_size = int(dist.get_world_size())
    except Exception:  # noqa: BLE001
        world_size = None
    if world_size is None and os.environ.get("WORLD_SIZE", "").isdigit():
        world_size = int(os.environ["WORLD_SIZE"])
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "version": METADATA_VERSION,
        "preset": preset,
        "settings": settings,
        "torch_version": str(torch.__version__),
        "cuda_version": torch.version.cuda,
        "cudnn_version": str(cudnn) if cudnn is not None else None,
        "nccl_version": nccl,
        "gpu_model": torch.cuda.get_device_name(0) if cuda_ok else None,
        "gpu_count": int(torch.cuda.device_count()) if cuda_ok else 0,
        "world_size": world_size,
        "container": container_info(),
        "git_commit": _git_commit(),
        "env": recorded_env(),
        "label": label,
    }


def profile(
    logdir: str | os.PathLike[str],
    run: str | None = None,
    preset: str = "standard",
    *,
    label: str | None = None,
    worker_name: str | None = None,
    activities: list[Any] | None = None,
    **overrides: Any,
) -> Any:
    """A ``torch.profiler.profile`` configured by ``preset`` (:data:`PRESETS`) and
    ``overrides`` (any key of a preset: ``wait``, ``warmup``, ``active``, ``repeat``,
    ``skip_first``, ``record_shapes``, ``profile_memory``, ``with_stack``, ``with_flops``,
    ``with_modules``). Traces go to ``logdir/run`` (``logdir`` when ``run`` is None) as
    ``*.pt.trace.json.gz``, with :func:`run_metadata` under :data:`METADATA_KEY`.
    Use it as ``with profile(...) as prof:`` and call ``prof.step()`` once per step.

    ``activities`` defaults to CPU, plus CUDA when available.

    Raises:
        CaptureError: torch is not importable, or unknown preset/setting.
    """
    settings = settings_for(preset, **overrides)  # a typo is named even without torch
    torch = _torch()
    meta = run_metadata(preset, label, **overrides)
    out = Path(logdir) / run if run else Path(logdir)
    out.mkdir(parents=True, exist_ok=True)
    tp = torch.profiler
    if activities is None:
        activities = [tp.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(tp.ProfilerActivity.CUDA)
    prof = tp.profile(
        activities=activities,
        schedule=tp.schedule(
            wait=settings["wait"],
            warmup=settings["warmup"],
            active=settings["active"],
            repeat=settings["repeat"],
            skip_first=settings["skip_first"],
        ),
        on_trace_ready=tp.tensorboard_trace_handler(
            str(out), worker_name=worker_name, use_gzip=True
        ),
        record_shapes=settings["record_shapes"],
        profile_memory=settings["profile_memory"],
        with_stack=settings["with_stack"],
        with_flops=settings["with_flops"],
        with_modules=settings["with_modules"],
    )
    payload = json.dumps(meta, sort_keys=True)
    if hasattr(prof, "preset_metadata_json"):  # torch >= 2.1: applied to every cycle
        prof.preset_metadata_json(METADATA_KEY, payload)
    else:  # pragma: no cover (older torch)
        prof.add_metadata_json(METADATA_KEY, payload)
    return prof
