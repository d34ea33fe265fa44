#!/usr/bin/env python3
"""Record the before/after pairs of issue 29's verdicts into ``sample_logs/``.

Three causes, each recorded next to its fixed twin so that the cost the analysis
claims can be checked against a measured one (``recording_info.json`` →
``verdicts``):

* ``optimizer_per_param`` / ``optimizer_foreach`` / ``optimizer_fused``: an MLP of
  ``OPT_LAYERS`` × ``Linear(OPT_WIDTH, OPT_WIDTH)`` (2 × ``OPT_LAYERS`` parameter
  tensors) trained with ``Adam(foreach=False)`` (one small kernel chain per
  parameter: ``optimizer_step_bound``), ``Adam(foreach=True)`` (``multi_tensor_apply``
  kernels) and ``Adam(fused=True)`` (one fused kernel per tensor group).
* ``allocator_empty_cache`` / ``allocator_cached``: an MLP (TF32 matmuls) that calls
  ``torch.cuda.empty_cache()`` at the end of every step, after ``zero_grad(set_to_none=
  True)`` (only the weights are alive then), so the caching allocator
  ``cudaFree``s its cached blocks (``cudaFree`` synchronises the device) and
  ``cudaMalloc``s them again in the next step (``allocator_churn``); the twin keeps
  its cache.
* ``cudnn_autotune_varying`` / ``cudnn_autotune_fixed``: a small CNN with
  ``torch.backends.cudnn.benchmark = True`` whose input size changes every step
  (a size never seen before: cuDNN benchmarks every convolution again, inside
  ``aten::convolution`` / ``aten::convolution_backward``: ``cudnn_autotune_in_step``);
  the twin keeps one size (tuned once, before profiling).
* ``allocator_no_caching`` / ``allocator_caching``: the ``allocator_cached`` loop (no
  ``empty_cache``) run with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` (the caching allocator
  is off: every tensor freed is a ``cudaFree``, every new one a ``cudaMalloc``:
  ``allocator_churn``) and, as its twin, without it; each in a process of its own (the
  variable is read once, at the first allocation), one after the other.

Every run: ``torch.profiler.profile(activities=[CPU, CUDA], schedule=schedule(wait=1,
warmup=1, active=ACTIVE), record_shapes=True, profile_memory=True)`` written by
``tensorboard_trace_handler(..., use_gzip=True)``; nothing waits for the GPU between
steps (the loop runs as a user's would). The cost of each cause is measured in-process
on the same machine: the mean step time of ``MEASURE_STEPS`` un-profiled steps (one
``torch.cuda.synchronize`` before and after the whole batch of steps), and the wall
time of every profiled step (``time.perf_counter`` at each ``prof.step()``).

Usage (on a machine with a CUDA GPU)::

    python scripts/record_verdicts.py --out /tmp/verdicts
"""

from __future__ import annotations

import os

# NVLink multicast stays off on shared multi-GPU hosts (as in every recording script),
# set before torch is imported.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

ACTIVE = 4
WAIT, WARMUP = 1, 1
WARM_STEPS = 5
MEASURE_STEPS = 20

OPT_LAYERS = 100
OPT_WIDTH = 256
OPT_BATCH = 64

ALLOC_LAYERS = 8
ALLOC_WIDTH = 4096
ALLOC_BATCH = 4096

CONV_BATCH = 32
CONV_FIXED_SIZE = 128
CONV_SIZES = list(range(100, 157))  # image sizes the varying run draws from, each once


def _sync() -> None:
    torch.cuda.synchronize()


def _free() -> None:
    gc.collect()
    _sync()
    torch.cuda.empty_cache()


def measure(step: Callable[[int], None], first: int, n: int) -> dict[str, object]:
    """Mean wall time of ``n`` un-profiled steps (sync before and after the batch)."""
    _sync()
    t0 = time.perf_counter()
    marks = []
    for i in range(n):
        step(first + i)
        marks.append(time.perf_counter())
    _sync()
    t1 = time.perf_counter()
    per_step = [(b - a) * 1e3 for a, b in zip([t0, *marks[:-1]], marks, strict=True)]
    return {
        "steps": n,
        "mean_step_ms": (t1 - t0) * 1e3 / n,
        "host_step_ms": per_step,
        "median_host_step_ms": statistics.median(per_step),
    }


def profile(run_dir: Path, step: Callable[[int], None], first: int) -> dict[str, object]:
    """Profile ``WAIT + WARMUP + ACTIVE`` steps; wall time of each active step."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    total = WAIT + WARMUP + ACTIVE
    marks: list[float] = []
    _sync()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            str(run_dir), worker_name="h200", use_gzip=True
        ),
        record_shapes=True,
        profile_memory=True,
        with_stack=False,
    ) as prof:
        for i in range(total):
            marks.append(time.perf_counter())
            step(first + i)
            prof.step()
        marks.append(time.perf_counter())
    # wall of step i = from its start to the start of step i + 1 (the last active
    # step's prof.step() writes the trace: left out)
    walls = [(b - a) * 1e3 for a, b in zip(marks[:-1], marks[1:], strict=True)]
    files = {p.name: p.stat().st_size for p in run_dir.iterdir()}
    return {
        "profiled_step_wall_ms": walls[WAIT + WARMUP : WAIT + WARMUP + ACTIVE - 1],
        "files": files,
    }


def _reserved_bytes() -> int | None:
    """The caching allocator's reserved bytes now (``None`` where it cannot say)."""
    try:
        return int(torch.cuda.memory_reserved())
    except RuntimeError:
        return None


def record(out: Path, name: str, step: Callable[[int], None], info: dict) -> None:
    print(f"== {name}", flush=True)
    for i in range(WARM_STEPS):
        step(i)
    m = measure(step, WARM_STEPS, MEASURE_STEPS)
    p = profile(out / name, step, WARM_STEPS + MEASURE_STEPS)
    info[name] = {
        **m,
        **p,
        "no_cuda_memory_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"),
        "memory_reserved_bytes_after": _reserved_bytes(),
    }
    print(
        f"   mean {m['mean_step_ms']:.3f} ms/step unprofiled; profiled walls "
        f"{[round(w, 3) for w in p['profiled_step_wall_ms']]} ms; files {p['files']}",
        flush=True,
    )
    _free()


def optimizer_step(kind: str) -> Callable[[int], None]:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(OPT_LAYERS):
        layers += [nn.Linear(OPT_WIDTH, OPT_WIDTH), nn.Tanh()]
    model = nn.Sequential(*layers).to(dev)
    flags = {
        "per_param": {"foreach": False},
        "foreach": {"foreach": True},
        "fused": {"fused": True},
    }
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, **flags[kind])
    x = torch.randn(OPT_BATCH, OPT_WIDTH, device=dev)

    def step(_: int) -> None:
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()

    return step


def allocator_step(empty_cache: bool) -> Callable[[int], None]:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    layers: list[nn.Module] = []
    for _ in range(ALLOC_LAYERS):
        layers += [nn.Linear(ALLOC_WIDTH, ALLOC_WIDTH, bias=False), nn.ReLU()]
    model = nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(ALLOC_BATCH, ALLOC_WIDTH, device=dev)

    def step(_: int) -> None:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)  # activations and gradients are free now ...
        if empty_cache:
            torch.cuda.empty_cache()  # ... so every segment but the weights' goes back

    return step


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 128, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(128, 128, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(128, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def conv_step(varying: bool, sizes_seen: list[int]) -> Callable[[int], None]:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    model = SmallCNN().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    sizes = list(CONV_SIZES)
    random.Random(0).shuffle(sizes)
    labels = torch.randint(0, 10, (CONV_BATCH,), device=dev)

    def step(i: int) -> None:
        size = sizes[i % len(sizes)] if varying else CONV_FIXED_SIZE
        sizes_seen.append(size)
        x = torch.randn(CONV_BATCH, 3, size, size, device=dev)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()

    return step


#: Runs recorded in a process of their own, with these environment variables (``None``:
#: the variable removed), so that an allocator setting read once per process holds.
OWN_PROCESS: dict[str, dict[str, str | None]] = {
    "allocator_no_caching": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
    "allocator_caching": {"PYTORCH_NO_CUDA_MEMORY_CACHING": None},
}


def record_in_own_process(out: Path, name: str, info: dict) -> None:
    """Run this script for ``name`` alone in a child process with ``OWN_PROCESS[name]``'s
    environment; its run record is merged into ``info``."""
    env = dict(os.environ)
    for k, v in OWN_PROCESS[name].items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    with tempfile.TemporaryDirectory() as tmp:
        child_info = Path(tmp) / "info.json"
        cmd = [sys.executable, __file__, "--out", str(out), "--only", name]
        cmd += ["--child-info", str(child_info)]
        done = subprocess.run(cmd, env=env, check=False)
        if done.returncode != 0 or not child_info.exists():
            info[name] = {"error": f"child process exited {done.returncode}"}
            return
        info.update(json.loads(child_info.read_text()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default="", help="comma-separated run names")
    ap.add_argument(
        "--child-info", type=Path, default=None, help=argparse.SUPPRESS
    )  # set by record_in_own_process: record here, write the run record there
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    only = {s for s in args.only.split(",") if s}
    info: dict[str, object] = {}
    sizes: dict[str, list[int]] = {}
    runs: list[tuple[str, Callable[[], Callable[[int], None]]]] = [
        ("optimizer_per_param", lambda: optimizer_step("per_param")),
        ("optimizer_foreach", lambda: optimizer_step("foreach")),
        ("optimizer_fused", lambda: optimizer_step("fused")),
        ("allocator_empty_cache", lambda: allocator_step(True)),
        ("allocator_cached", lambda: allocator_step(False)),
        ("cudnn_autotune_varying", lambda: conv_step(True, sizes.setdefault("varying", []))),
        ("cudnn_autotune_fixed", lambda: conv_step(False, sizes.setdefault("fixed", []))),
        ("allocator_no_caching", lambda: allocator_step(False)),
        ("allocator_caching", lambda: allocator_step(False)),
    ]
    for name, make in runs:
        if only and name not in only:
            continue
        if name in OWN_PROCESS and args.child_info is None:
            record_in_own_process(args.out, name, info)
            continue
        try:
            record(args.out, name, make(), info)
        except Exception as exc:  # keep the other recordings
            print(f"   {name} FAILED: {exc!r}", flush=True)
            info[name] = {"error": repr(exc)}
        _free()
    if args.child_info is not None:
        args.child_info.write_text(json.dumps(info))
        return 0
    pairs = [
        ("optimizer_per_param", "optimizer_foreach"),
        ("optimizer_per_param", "optimizer_fused"),
        ("allocator_empty_cache", "allocator_cached"),
        ("cudnn_autotune_varying", "cudnn_autotune_fixed"),
        ("allocator_no_caching", "allocator_caching"),
    ]
    costs = {}
    for bad, good in pairs:
        b, g = info.get(bad), info.get(good)
        if not (
            isinstance(b, dict)
            and isinstance(g, dict)
            and "mean_step_ms" in b
            and "mean_step_ms" in g
        ):
            continue
        bp = statistics.mean(b["profiled_step_wall_ms"])
        gp = statistics.mean(g["profiled_step_wall_ms"])
        costs[f"{bad}-{good}"] = {
            "unprofiled_cost_ms_per_step": b["mean_step_ms"] - g["mean_step_ms"],
            "unprofiled_cost_fraction": 1 - g["mean_step_ms"] / b["mean_step_ms"],
            "profiled_cost_ms_per_step": bp - gp,
            "profiled_cost_fraction": 1 - gp / bp,
        }
        print(f"cost {bad} vs {good}: {json.dumps(costs[f'{bad}-{good}'])}", flush=True)
    doc = {
        "command": "python scripts/record_verdicts.py "
        + " ".join(f"{k} {v}" for k, v in [("--out", args.out), ("--only", args.only)] if v),
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda_runtime": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "gpu": torch.cuda.get_device_name(0),
            "env": {
                k: os.environ.get(k)
                for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING")
            },
        },
        "profiler": {
            "wait": WAIT,
            "warmup": WARMUP,
            "active": ACTIVE,
            "record_shapes": True,
            "profile_memory": True,
        },
        "warm_steps": WARM_STEPS,
        "measure_steps": MEASURE_STEPS,
        "workloads": {
            "optimizer": {
                "layers": OPT_LAYERS,
                "width": OPT_WIDTH,
                "batch": OPT_BATCH,
                "parameter_tensors": 2 * OPT_LAYERS,
            },
            "allocator": {"layers": ALLOC_LAYERS, "width": ALLOC_WIDTH, "batch": ALLOC_BATCH},
            "cudnn": {"batch": CONV_BATCH, "fixed_size": CONV_FIXED_SIZE, "sizes_used": sizes},
        },
        "runs": info,
        "costs": costs,
    }
    (args.out / "verdicts_info.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
