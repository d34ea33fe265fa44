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
* ``eff_ddp_fp32`` / ``eff_ddp_tf32`` / ``eff_ddp_bf16``: the residual MLP of
  ``record_distributed.py`` (``GPU_MODEL``, the model of the shared ``h200x2`` DDP runs)
  under ``DistributedDataParallel`` with NCCL at world size 1 (one GPU is enough to
  record DDP's bucketed all-reduces), in fp32 (TF32 off), with TF32, and under bf16
  autocast.
* ``eff_sdpa_flash_bf16`` / ``eff_sdpa_efficient_bf16``:
  ``F.scaled_dot_product_attention`` forward and backward in bf16 on (``SDPA_BATCH``,
  ``SDPA_HEADS``, ``SDPA_SEQ``, ``SDPA_HEAD_DIM``) tensors, pinned to the flash backend
  (causal) and to the memory-efficient backend (not causal) with ``sdpa_kernel``.
* ``eff_resnet_{fp32_nchw,fp32_cl,bf16_cl}`` and ``eff_cnn_{fp32_nchw,fp32_cl,bf16_cl}``:
  the conv models of ``sample_logs/dataloader_workers4`` (``record_sample_logs.SmallResNet``,
  width 96, 2 blocks per stage, 32 images of 256 x 256, cuDNN benchmark off as there) and
  of ``sample_logs/cudnn_autotune_fixed`` (``record_verdicts.SmallCNN``, 32 images of
  128 x 128, cuDNN benchmark on as there), trained on a batch already on the GPU: NCHW
  fp32 (PyTorch's defaults: cuDNN may use TF32), ``channels_last`` fp32, and
  ``channels_last`` under bf16 autocast. Their step times say how much of the time
  ``low_kernel_efficiency`` claims on the NCHW runs the remedies win back.

Beside each recording, outside the profiler, the script measures with CUDA events the
mean step time (``step_ms``) and the TFLOP/s of the workload's main op alone
(``event_timed``: op, shapes, dtype, FLOPs per call, ms per call, TFLOP/s) and writes
them to ``<out>/recording_info.json`` under ``efficiency``. It also writes, per run, what
``with_flops=True`` gave: ``profiler_flops`` (the profiler's own FLOP count per op and
input shapes, from ``key_averages(group_by_input_shape=True)``, i.e. ``FunctionEvent.flops``)
and ``trace_flops_args`` (every ``args`` key of the trace's ``cpu_op`` events, and how
many events carry a ``flops`` or ``kernel_flop`` arg: whether this torch writes the count
into the trace file at all). The attention runs also keep ``torch.utils.flop_counter``'s
counts of the forward and of forward + backward (``flop_counter``).

Usage (on a machine with a CUDA GPU)::

    python scripts/record_efficiency.py --out sample_logs
    python scripts/record_efficiency.py --out /tmp/eff --only eff_mlp_fp32,eff_mlp_bf16
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import gzip
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

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
SDPA_BATCH = 4
SDPA_HEADS = 16
SDPA_SEQ = 4096
SDPA_HEAD_DIM = 128

ALL_WORKLOADS = (
    "eff_mlp_fp32",
    "eff_mlp_tf32",
    "eff_mlp_bf16",
    "eff_gemm_aligned",
    "eff_gemm_odd",
    "eff_gemm_skinny",
    "eff_conv_bf16",
    "eff_ddp_fp32",
    "eff_ddp_tf32",
    "eff_ddp_bf16",
    "eff_sdpa_flash_bf16",
    "eff_sdpa_efficient_bf16",
    "eff_resnet_fp32_nchw",
    "eff_resnet_fp32_cl",
    "eff_resnet_bf16_cl",
    "eff_cnn_fp32_nchw",
    "eff_cnn_fp32_cl",
    "eff_cnn_bf16_cl",
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


def profile_steps(run_dir: Path, step_fn: Callable[[], None]) -> dict[str, object]:
    """``wait + warmup + active`` steps of ``step_fn`` under the profiler, synchronised
    after each step; the trace is written gzipped into ``run_dir``. Returns the
    profiler's own FLOP counts (``profiler_flops``) and what the trace file says of them
    (``trace_flops_args``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    handler = torch.profiler.tensorboard_trace_handler(
        str(run_dir), worker_name=run_dir.name, use_gzip=True
    )
    found: dict[str, object] = {}

    def ready(prof: torch.profiler.profile) -> None:
        handler(prof)
        rows = []
        try:
            for ev in prof.key_averages(group_by_input_shape=True):
                if ev.flops:
                    rows.append(
                        {
                            "op": ev.key,
                            "input_shapes": ev.input_shapes,
                            "count": ev.count,
                            "flops_per_call": ev.flops / ev.count,
                        }
                    )
        except Exception as exc:  # the trace is written; say why the counts are missing
            found["profiler_flops_error"] = repr(exc)
        found["profiler_flops"] = rows

    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(
            wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=ACTIVE_STEPS, repeat=1
        ),
        on_trace_ready=ready,
        record_shapes=True,
        with_flops=True,
        profile_memory=False,
        with_stack=False,
    ) as prof:
        for _ in range(WAIT_STEPS + WARMUP_STEPS + ACTIVE_STEPS):
            step_fn()
            torch.cuda.synchronize()
            prof.step()
    found["trace_flops_args"] = trace_flops_args(run_dir)
    return found


def trace_flops_args(run_dir: Path) -> dict[str, object]:
    """Every ``args`` key of the ``cpu_op`` events of the run's trace, and how many
    events (any category) carry a ``flops`` or ``kernel_flop`` arg."""
    keys: set[str] = set()
    with_flops = with_kernel_flop = 0
    for path in run_dir.glob("*.pt.trace.json.gz"):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            events = json.load(fh).get("traceEvents", [])
        for ev in events:
            args = ev.get("args") or {}
            if ev.get("cat") == "cpu_op":
                keys.update(args)
            with_flops += "flops" in args
            with_kernel_flop += "kernel_flop" in args
    return {
        "cpu_op_arg_keys": sorted(keys),
        "events_with_flops_arg": with_flops,
        "events_with_kernel_flop_arg": with_kernel_flop,
    }


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


_DDP: dict[str, object] = {}


def _ddp_group() -> None:
    """One NCCL process group of world size 1 for the DDP runs (made once)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=0,
        world_size=1,
        device_id=torch.device("cuda", 0),
    )


def _ddp(mode: str) -> dict[str, object]:
    """``record_distributed``'s residual MLP under DDP (NCCL, world size 1)."""
    import record_distributed as rd
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    _ddp_group()
    dev = torch.device("cuda", 0)
    size = rd.GPU_MODEL
    torch.manual_seed(0)
    model = DDP(rd.build_model(size).to(dev), device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(size.batch, size.d_model, device=dev)
    y = torch.randint(0, size.num_classes, (size.batch,), device=dev)
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if mode == "bf16" else contextlib.nullcontext()
    )

    def step() -> None:
        with autocast:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    up = model.module.blocks[0].up
    xu = torch.randn(size.batch, size.d_model, device=dev)

    def linear() -> None:
        with torch.no_grad(), autocast:
            F.linear(xu, up.weight, up.bias)

    flops = 2.0 * size.batch * size.d_model * size.ffn
    op_ms = events_ms(linear, TIMED_ITERS * 5)
    step_ms = events_ms(step, TIMED_ITERS)
    return {
        "step": step,
        "step_ms": round(step_ms, 4),
        "model": {
            "d_model": size.d_model,
            "ffn": size.ffn,
            "blocks": size.blocks,
            "batch": size.batch,
            "world_size": 1,
            "backend": "nccl",
        },
        "event_timed": {
            "op": "aten::addmm (F.linear forward, block 0 up-projection)",
            "shapes": [[size.batch, size.d_model], [size.ffn, size.d_model]],
            "dtype": "bf16" if mode == "bf16" else "fp32",
            "tf32": mode == "tf32",
            "flops_per_call": flops,
            "ms_per_call": round(op_ms, 5),
            "tflops_per_s": _tflops(flops, op_ms),
        },
    }


def _sdpa(backend_name: str, causal: bool) -> dict[str, object]:
    """SDPA forward + backward in bf16, pinned to one backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    backend = getattr(SDPBackend, backend_name)
    dev = torch.device("cuda")
    shape = (SDPA_BATCH, SDPA_HEADS, SDPA_SEQ, SDPA_HEAD_DIM)
    q, k, v = (
        torch.randn(shape, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
    )
    grad = torch.randn(shape, device=dev, dtype=torch.bfloat16)

    def step() -> None:
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out.backward(grad)
        q.grad = k.grad = v.grad = None

    def forward() -> None:
        with torch.no_grad(), sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    counts: dict[str, object] = {}
    for what, fn in (("forward", forward), ("forward_backward", step)):
        with FlopCounterMode(display=False) as fc:
            fn()
        counts[what] = {
            "total": fc.get_total_flops(),
            "by_op": {str(op): n for op, n in fc.get_flop_counts().get("Global", {}).items()},
        }
    b, h, s, d = shape
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    op_ms = events_ms(forward, TIMED_ITERS * 2)
    step_ms = events_ms(step, TIMED_ITERS)
    return {
        "step": step,
        "step_ms": round(step_ms, 4),
        "flop_counter": counts,
        "event_timed": {
            "op": f"scaled_dot_product_attention forward ({backend_name}, is_causal={causal})",
            "shapes": [list(shape)] * 3,
            "dtype": "bf16",
            "causal": causal,
            "flops_per_call": flops,
            "ms_per_call": round(op_ms, 5),
            "tflops_per_s": _tflops(flops, op_ms),
        },
    }


def _conv_model(model_name: str, mode: str) -> dict[str, object]:
    """The conv model of ``dataloader_workers4`` (``resnet``) or ``cudnn_autotune_fixed``
    (``cnn``) on one batch already on the GPU; ``mode`` ``fp32_nchw``, ``fp32_cl`` or
    ``bf16_cl``. TF32 settings are PyTorch's defaults (cuDNN TF32 on, matmul off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda")
    torch.manual_seed(0)
    if model_name == "resnet":
        import record_sample_logs as rsl

        cfg = rsl._dataloader_config(False)
        torch.backends.cudnn.benchmark = False
        model: nn.Module = rsl.SmallResNet(cfg.num_classes, cfg.width, cfg.blocks_per_stage)
        batch, side, classes, lr = cfg.batch, cfg.crop, cfg.num_classes, 0.05
    else:
        import record_verdicts as rv

        torch.backends.cudnn.benchmark = True
        model = rv.SmallCNN()
        batch, side, classes, lr = rv.CONV_BATCH, rv.CONV_FIXED_SIZE, 10, 1e-3
    cl = mode.endswith("_cl")
    fmt = torch.channels_last if cl else torch.contiguous_format
    model = model.to(dev).to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    x = torch.randn(batch, 3, side, side, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, classes, (batch,), device=dev)
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if mode.startswith("bf16")
        else contextlib.nullcontext()
    )

    def step() -> None:
        with autocast:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step_ms = events_ms(step, TIMED_ITERS)
    return {
        "step": step,
        "step_ms": round(step_ms, 4),
        "model": {
            "name": model_name,
            "batch": batch,
            "side": side,
            "mode": mode,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
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
    "eff_ddp_fp32": lambda: _ddp("fp32"),
    "eff_ddp_tf32": lambda: _ddp("tf32"),
    "eff_ddp_bf16": lambda: _ddp("bf16"),
    "eff_sdpa_flash_bf16": lambda: _sdpa("FLASH_ATTENTION", causal=True),
    "eff_sdpa_efficient_bf16": lambda: _sdpa("EFFICIENT_ATTENTION", causal=False),
    "eff_resnet_fp32_nchw": lambda: _conv_model("resnet", "fp32_nchw"),
    "eff_resnet_fp32_cl": lambda: _conv_model("resnet", "fp32_cl"),
    "eff_resnet_bf16_cl": lambda: _conv_model("resnet", "bf16_cl"),
    "eff_cnn_fp32_nchw": lambda: _conv_model("cnn", "fp32_nchw"),
    "eff_cnn_fp32_cl": lambda: _conv_model("cnn", "fp32_cl"),
    "eff_cnn_bf16_cl": lambda: _conv_model("cnn", "bf16_cl"),
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
            res.update(profile_steps(run_dir, step))  # type: ignore[arg-type]
            res["files"] = {p.name: p.stat().st_size for p in sorted(run_dir.iterdir())}
            results[name] = res
            print(json.dumps({name: res}), flush=True)
            # each run's record as soon as it is made (a run cut short keeps the others')
            parts = args.out / "_parts"
            parts.mkdir(exist_ok=True)
            (parts / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
        except Exception:
            traceback.print_exc()
            failed.append(name)
        gc.collect()
        torch.cuda.empty_cache()
        print(f"  [{name}] done in {time.perf_counter() - t0:.1f}s", flush=True)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
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
    shutil.rmtree(args.out / "_parts", ignore_errors=True)  # all in recording_info.json now
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
