#!/usr/bin/env python3
"""Record the kernel-efficiency (roofline) sample logs under ``sample_logs/``.

Each workload is one TensorBoard run folder holding one gzipped
``<worker>.<timestamp>.pt.trace.json.gz``, recorded with::

    torch.profiler.profile(
        activities=[CPU, CUDA],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=N, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            run_dir, worker_name=..., use_gzip=True),
        record_shapes=True, with_flops=True, profile_memory=False, with_stack=False)

The workloads:

* ``eff_mlp_fp32`` / ``eff_mlp_tf32`` / ``eff_mlp_bf16``: an ``MLP_LAYERS``-layer
  ``MLP_WIDTH``-wide MLP (``nn.Linear`` + ReLU, SGD) trained on a batch of
  ``MLP_BATCH`` rows: fp32 with TF32 off (PyTorch's default: GEMMs on CUDA cores), the
  same with ``torch.set_float32_matmul_precision("high")`` (TF32 tensor cores), the same
  under ``torch.autocast("cuda", dtype=torch.bfloat16)``.
* ``eff_gemm_aligned`` / ``eff_gemm_odd``: ``GEMM_CALLS`` bf16 ``torch.mm`` of
  4096 x 4096 x 4096 per step against 4095 x 4095 x 4095 (not a multiple of 8: no
  16-byte aligned rows for the tensor-core kernels).
* ``eff_gemm_skinny``: ``GEMM_CALLS`` bf16 ``torch.mm`` of (16 x 8192) @ (8192 x 8192)
  per step: 16 rows cannot give the 132 SMs enough output tiles.
* ``eff_conv_bf16``: a small CNN (3x3 convolutions, BatchNorm, ReLU) in
  ``channels_last`` under bf16 autocast, forward and backward, cuDNN benchmark mode
  tuned before profiling.

Beside each recording, outside the profiler, the script measures with CUDA events the
mean step time (``step_ms``) and the TFLOP/s of the workload's main op alone
(``event_timed``: op, shapes, dtype, FLOPs per call, ms per call, TFLOP/s) and writes
them to ``<out>/recording_info.json`` under ``efficiency``.

Usage (on a machine with a CUDA GPU)::

    python scripts/record_efficiency.py --out sample_logs
    python scripts/record_efficiency.py --out /tmp/eff --only eff_mlp_fp32,eff_mlp_bf16
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import shutil
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

WAIT_STEPS = 1
WARMUP_STEPS = 1
ACTIVE_STEPS = 3
WARMUP_ITERS = 3
TIMED_ITERS = 10

MLP_LAYERS = 8
MLP_WIDTH = 4096
MLP_BATCH = 4096
GEMM_CALLS = 10
SKINNY_M = 16
SKINNY_KN = 8192
CONV_BATCH = 64
CONV_CHANNELS = 128
CONV_HW = 56
CONV_LAYERS = 4

ALL_WORKLOADS = (
    "eff_mlp_fp32",
    "eff_mlp_tf32",
    "eff_mlp_bf16",
    "eff_gemm_aligned",
    "eff_gemm_odd",
    "eff_gemm_skinny",
    "eff_conv_bf16",
)


def events_ms(fn: Callable[[], None], iters: int) -> float:
    """Mean milliseconds of ``fn`` over ``iters`` calls, timed with CUDA events (after
    ``WARMUP_ITERS`` untimed calls)."""
    for _ in range(WARMUP_ITERS):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / iters


def profile_steps(run_dir: Path, step_fn: Callable[[], None]) -> None:
    """``wait + warmup + active`` steps of ``step_fn`` under the profiler, synchronised
    after each step; the trace is written gzipped into ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(
            wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=ACTIVE_STEPS, repeat=1
        ),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            str(run_dir), worker_name=run_dir.name, use_gzip=True
        ),
        record_shapes=True,
        with_flops=True,
        profile_memory=False,
        with_stack=False,
    ) as prof:
        for _ in range(WAIT_STEPS + WARMUP_STEPS + ACTIVE_STEPS):
            step_fn()
            torch.cuda.synchronize()
            prof.step()


def _tflops(flops: float, ms: float) -> float:
    return round(flops / (ms * 1e-3) / 1e12, 3)


def _mlp(mode: str) -> dict[str, object]:
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    dev = torch.device("cuda")
    layers: list[nn.Module] = []
    for _ in range(MLP_LAYERS):
        layers += [nn.Linear(MLP_WIDTH, MLP_WIDTH), nn.ReLU()]
    model = nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(MLP_BATCH, MLP_WIDTH, device=dev)
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if mode == "bf16" else contextlib.nullcontext()
    )

    def step() -> None:
        with autocast:
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    lin = model[0]
    assert isinstance(lin, nn.Linear)

    def linear() -> None:
        with torch.no_grad(), autocast:
            F.linear(x, lin.weight, lin.bias)

    flops = 2.0 * MLP_BATCH * MLP_WIDTH * MLP_WIDTH
    op_ms = events_ms(linear, TIMED_ITERS * 5)
    step_ms = events_ms(step, TIMED_ITERS)
    dtype = "bf16" if mode == "bf16" else "fp32"
    return {
        "step": step,
        "step_ms": round(step_ms, 4),
        "event_timed": {
            "op": "aten::addmm (F.linear forward)",
            "shapes": [[MLP_BATCH, MLP_WIDTH], [MLP_WIDTH, MLP_WIDTH]],
            "dtype": dtype,
            "tf32": mode == "tf32",
            "flops_per_call": flops,
            "ms_per_call": round(op_ms, 5),
            "tflops_per_s": _tflops(flops, op_ms),
        },
        "step_gemm_flops": 3 * MLP_LAYERS * flops,
    }


def _gemm(m: int, k: int, n: int) -> dict[str, object]:
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)

    def one() -> None:
        torch.mm(a, b)

    def step() -> None:
        for _ in range(GEMM_CALLS):
            torch.mm(a, b)

    flops = 2.0 * m * k * n
    op_ms = events_ms(one, TIMED_ITERS * 5)
    step_ms = events_ms(step, TIMED_ITERS)
    return {
        "step": step,
        "step_ms": round(step_ms, 4),
        "event_timed": {
            "op": "aten::mm",
            "shapes": [[m, k], [k, n]],
            "dtype": "bf16",
            "flops_per_call": flops,
            "ms_per_call": round(op_ms, 5),
            "tflops_per_s": _tflops(flops, op_ms),
            "bytes_per_call": 2 * (m * k + k * n + m * n),
            "tbytes_per_s": round(2 * (m * k + k * n + m * n) / (op_ms * 1e-3) / 1e12, 3),
        },
    }


def _conv() -> dict[str, object]:
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    layers: list[nn.Module] = []
    for _ in range(CONV_LAYERS):
        layers += [
            nn.Conv2d(CONV_CHANNELS, CONV_CHANNELS, 3, padding=1, bias=False),
            nn.BatchNorm2d(CONV_CHANNELS),
            nn.ReLU(),
        ]
    model = nn.Sequential(*layers).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(CONV_BATCH, CONV_CHANNELS, CONV_HW, CONV_HW, device=dev).to(
        memory_format=torch.channels_last
    )

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    conv = model[0]
    xb = x.to(torch.bfloat16)
    wb = conv.weight.detach().to(torch.bfloat16).to(memory_format=torch.channels_last)

    def one() -> None:
        with torch.no_grad():
            F.conv2d(xb, wb, padding=1)

    flops = 2.0 * CONV_BATCH * CONV_CHANNELS * CONV_HW * CONV_HW * CONV_CHANNELS * 9
    op_ms = events_ms(one, TIMED_ITERS * 5)
    step_ms = events_ms(step, TIMED_ITERS)
    return {
        "step": step,
        "step_ms": round(step_ms, 4),
        "event_timed": {
            "op": "aten::convolution (forward)",
            "shapes": [
                [CONV_BATCH, CONV_CHANNELS, CONV_HW, CONV_HW],
                [CONV_CHANNELS, CONV_CHANNELS, 3, 3],
            ],
            "dtype": "bf16",
            "flops_per_call": flops,
            "ms_per_call": round(op_ms, 5),
            "tflops_per_s": _tflops(flops, op_ms),
        },
    }


WORKLOADS: dict[str, Callable[[], dict[str, object]]] = {
    "eff_mlp_fp32": lambda: _mlp("fp32"),
    "eff_mlp_tf32": lambda: _mlp("tf32"),
    "eff_mlp_bf16": lambda: _mlp("bf16"),
    "eff_gemm_aligned": lambda: _gemm(4096, 4096, 4096),
    "eff_gemm_odd": lambda: _gemm(4095, 4095, 4095),
    "eff_gemm_skinny": lambda: _gemm(SKINNY_M, SKINNY_KN, SKINNY_KN),
    "eff_conv_bf16": _conv,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default=",".join(ALL_WORKLOADS))
    args = parser.parse_args(argv)
    names = [n for n in ALL_WORKLOADS if n in args.only.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {}
    failed: list[str] = []
    for name in names:
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            res = WORKLOADS[name]()
            step = res.pop("step")
            run_dir = args.out / name
            if run_dir.exists():
                shutil.rmtree(run_dir)
            profile_steps(run_dir, step)  # type: ignore[arg-type]
            res["files"] = {p.name: p.stat().st_size for p in sorted(run_dir.iterdir())}
            results[name] = res
            print(json.dumps({name: res}), flush=True)
        except Exception:
            traceback.print_exc()
            failed.append(name)
        gc.collect()
        torch.cuda.empty_cache()
        print(f"  [{name}] done in {time.perf_counter() - t0:.1f}s", flush=True)
    info_path = args.out / "recording_info.json"
    info: dict[str, object] = {}
    if info_path.exists():
        with contextlib.suppress(Exception):
            info = json.loads(info_path.read_text())
    props = torch.cuda.get_device_properties(0)
    command = " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:]))
    eff = info.setdefault("efficiency", {})
    assert isinstance(eff, dict)
    eff.update(
        {
            "command": command,
            "environment": {
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "gpu": props.name,
                "sm_count": props.multi_processor_count,
                "python": platform.python_version(),
                "host": socket.gethostname(),
            },
            "profiler": {
                "wait": WAIT_STEPS,
                "warmup": WARMUP_STEPS,
                "active": ACTIVE_STEPS,
                "record_shapes": True,
                "with_flops": True,
                "profile_memory": False,
            },
            "timing": f"CUDA events, mean of {TIMED_ITERS} steps / {TIMED_ITERS * 5} op calls "
            f"after {WARMUP_ITERS} untimed",
        }
    )
    eff.setdefault("runs", {}).update(results)
    info_path.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
