#!/usr/bin/env python3
"""Record three small training loops with Python stacks (``with_stack=True``).

Each run is one TensorBoard run folder under ``--out`` holding one gzipped trace,
recorded with::

    torch.profiler.profile(
        activities=[CPU, CUDA],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=5, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            run_dir, worker_name=RUN, use_gzip=True),
        record_shapes=False, profile_memory=False, with_stack=True)

after ``WARMUP_STEPS`` un-profiled steps. The runs (issue 35):

* ``stacks_blocking_log``: an MLP step (about 1-2 ms of GPU work) that reads
  ``loss.item()`` and then calls :func:`log_metrics`, which blocks for 12 ms (a metrics
  push, here ``time.sleep(0.012)``). The GPU idles through it: the queue was drained
  by ``.item()``.
* ``stacks_preprocess``: the same MLP fed by :func:`preprocess`, NumPy work on the
  training thread (random batch, normalisation, ``tanh`` passes), then a copy to the
  GPU. No ``.item()``: the GPU idles while the host is in ``preprocess()``.
* ``stacks_healthy``: a GPU-bound loop (TF32 matmuls, no ``.item()``, no host work),
  where the Python frames must not raise anything.

In-process timings (``time.perf_counter_ns``) around :func:`log_metrics` and
:func:`preprocess` and of each step are taken on the profiled steps (the
``active`` ones) and written to ``OUT/recording_info.json`` under ``stacks``, with
the file and first line of each function (Kineto names a Python frame
``path(first line): name``).

Usage (on a GPU machine; ``--device cpu`` for a smoke test)::

    python scripts/record_stacks.py --out /tmp/stacks
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

WARMUP_STEPS = 3
WAIT, WARMUP, ACTIVE = 1, 1, 5
LOG_SLEEP_S = 0.012
PREPROCESS_TANH_PASSES = 8


def log_metrics(step: int, loss_value: float, sink: list[tuple[int, float]]) -> None:
    """A blocking metrics push: 12 ms on the training thread."""
    time.sleep(LOG_SLEEP_S)
    sink.append((step, loss_value))


def preprocess(rng: np.random.Generator, batch: int, width: int) -> np.ndarray:
    """NumPy preprocessing on the training thread: random batch, per-row
    normalisation, ``PREPROCESS_TANH_PASSES`` ``tanh`` passes."""
    a = rng.standard_normal((batch, width), dtype=np.float32)
    a = (a - a.mean(axis=1, keepdims=True)) / (a.std(axis=1, keepdims=True) + 1e-6)
    for _ in range(PREPROCESS_TANH_PASSES):
        a = np.tanh(a * 1.01)
    return a


def _mlp(width: int, layers: int, dev: torch.device) -> torch.nn.Module:
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods).to(dev)


def record(run: str, out: Path, dev: torch.device) -> dict[str, Any]:
    """Train ``run``'s loop under the profiler; returns its in-process timings (ms)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    healthy = run == "stacks_healthy"
    width, layers, batch = (4096, 4, 8192) if healthy else (2048, 3, 512)
    if dev.type == "cpu":
        width, batch = 256, 64
    model = _mlp(width, layers, dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width, device=dev)
    target = torch.randn(batch, width, device=dev)
    sink: list[tuple[int, float]] = []
    timed: dict[str, list[float]] = {"step_ms": [], "log_metrics_ms": [], "preprocess_ms": []}

    def step(i: int, record_times: bool) -> None:
        t_step = time.perf_counter_ns()
        inp = x
        if run == "stacks_preprocess":
            t0 = time.perf_counter_ns()
            batch_np = preprocess(rng, batch, width)
            t1 = time.perf_counter_ns()
            inp = torch.from_numpy(batch_np).to(dev)
            if record_times:
                timed["preprocess_ms"].append((t1 - t0) / 1e6)
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(inp), target)
        loss.backward()
        opt.step()
        if run == "stacks_blocking_log":
            loss_value = loss.item()
            t0 = time.perf_counter_ns()
            log_metrics(i, loss_value, sink)
            t1 = time.perf_counter_ns()
            if record_times:
                timed["log_metrics_ms"].append((t1 - t0) / 1e6)
        if record_times:
            timed["step_ms"].append((time.perf_counter_ns() - t_step) / 1e6)

    if healthy:
        torch.backends.cuda.matmul.allow_tf32 = True
    for i in range(WARMUP_STEPS):
        step(i, False)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    run_dir = out / run
    acts = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(
        activities=acts,
        schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            str(run_dir), worker_name=run, use_gzip=True
        ),
        record_shapes=False,
        profile_memory=False,
        with_stack=True,
    ) as prof:
        for i in range(WAIT + WARMUP + ACTIVE):
            step(WARMUP_STEPS + i, i >= WAIT + WARMUP)
            prof.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    torch.backends.cuda.matmul.allow_tf32 = False
    info: dict[str, Any] = {
        "width": width,
        "layers": layers,
        "batch": batch,
        "files": {p.name: p.stat().st_size for p in sorted(run_dir.iterdir())},
    }
    for key, vals in timed.items():
        if vals:
            info[key] = [round(v, 3) for v in vals]
            info[key.replace("_ms", "_median_ms")] = round(statistics.median(vals), 3)
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only", default="stacks_blocking_log,stacks_preprocess,stacks_healthy")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device(args.device)
    runs = {run: record(run, out, dev) for run in args.only.split(",")}
    functions = {
        f.__name__: {"file": f.__code__.co_filename, "first_line": f.__code__.co_firstlineno}
        for f in (log_metrics, preprocess)
    }
    info = {
        "stacks": {
            "command": "python scripts/record_stacks.py --out OUT",
            "schedule": {
                "warmup_unprofiled": WARMUP_STEPS,
                "wait": WAIT,
                "warmup": WARMUP,
                "active": ACTIVE,
            },
            "functions": functions,
            "runs": runs,
            "environment": {
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "numpy": np.__version__,
                "python": platform.python_version(),
                "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
            },
        }
    }
    (out / "recording_info.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
