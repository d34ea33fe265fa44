#!/usr/bin/env python3
"""Record the pair for the diff's "moved partly" (issue 29): work moved off the training
thread onto another thread of the traced process.

* ``moved_preprocess_main``: every step preprocesses its batch on the training thread
  (a depthwise 5 × 5 blur, ``aten::conv2d``, then a 3 × 3 sharpen, ``aten::conv2d``
  again), then trains a small MLP on it (``Linear`` layers: no convolution).
* ``moved_preprocess_thread``: the same, but the blur of the next batch runs on a
  background thread (``concurrent.futures.ThreadPoolExecutor(1)``, one batch ahead, as
  a prefetching loader would); the sharpen stays on the training thread. ``aten::conv2d``
  shrinks on the training thread and appears on the prefetch thread: part of it moved,
  none of it got faster.

CPU only (no GPU needed: the move is on the host). Profiled with ``schedule(wait=1,
warmup=1, active=ACTIVE)``, ``record_shapes=True`` and ``profile_all_threads=True``
(``torch._C._profiler._ExperimentalConfig``: without it torch 2.13 records only the
threads the profiler was started on and the autograd engine's), written by
``tensorboard_trace_handler(..., use_gzip=True)``; one intra-op thread
(``torch.set_num_threads(1)``) so that the two runs compare. In-process timings (mean of
``MEASURE_STEPS`` un-profiled steps; the time the blur takes, wherever it runs) go to
``moved_info.json``.

Usage::

    python scripts/record_moved_work.py --out /tmp/moved
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import platform
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ACTIVE = 5
WAIT, WARMUP = 1, 1
WARM_STEPS = 3
MEASURE_STEPS = 10
BATCH, SIZE = 16, 64
WIDTH = 512

_BLUR_MS: list[float] = []


def blur(x: torch.Tensor) -> torch.Tensor:
    """Depthwise 5 × 5 box blur (``aten::conv2d``); its wall time goes to ``_BLUR_MS``."""
    t0 = time.perf_counter()
    w = torch.full((3, 1, 5, 5), 1 / 25)
    out = nn.functional.conv2d(x, w, groups=3, padding=2)
    _BLUR_MS.append((time.perf_counter() - t0) * 1e3)
    return out


def sharpen(x: torch.Tensor) -> torch.Tensor:
    """Depthwise 3 × 3 sharpen (``aten::conv2d``), on the training thread in both runs."""
    k = torch.tensor([[0.0, -1.0, 0.0], [-1.0, 5.0, -1.0], [0.0, -1.0, 0.0]])
    return nn.functional.conv2d(x, k.expand(3, 1, 3, 3).contiguous(), groups=3, padding=1)


def make_step(prefetch: bool) -> tuple[Callable[[int], None], Callable[[], None]]:
    """The training step (its argument: the step's index) and a function that stops the
    prefetch thread."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(3 * 16 * 16, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    raws = [torch.rand(BATCH, 3, SIZE, SIZE) for _ in range(4)]
    labels = torch.randint(0, 10, (BATCH,))
    pool = cf.ThreadPoolExecutor(1, thread_name_prefix="prefetch") if prefetch else None
    ahead: dict[int, cf.Future[torch.Tensor]] = {}

    def blurred(i: int) -> torch.Tensor:
        if pool is None:
            return blur(raws[i % len(raws)])
        fut = ahead.pop(i, None) or pool.submit(blur, raws[i % len(raws)])
        ahead[i + 1] = pool.submit(blur, raws[(i + 1) % len(raws)])
        return fut.result()

    def step(i: int) -> None:
        x = sharpen(blurred(i))
        x = nn.functional.avg_pool2d(x, 4)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()

    def stop() -> None:
        if pool is not None:
            pool.shutdown(wait=True)

    return step, stop


def record(out: Path, name: str, prefetch: bool) -> dict[str, object]:
    print(f"== {name}", flush=True)
    step, stop = make_step(prefetch)
    for i in range(WARM_STEPS):
        step(i)
    _BLUR_MS.clear()
    t0 = time.perf_counter()
    for i in range(WARM_STEPS, WARM_STEPS + MEASURE_STEPS):
        step(i)
    mean_ms = (time.perf_counter() - t0) * 1e3 / MEASURE_STEPS
    blur_ms = statistics.median(_BLUR_MS)
    run_dir = out / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    first = WARM_STEPS + MEASURE_STEPS
    cfg = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            str(run_dir), worker_name="cpu", use_gzip=True
        ),
        record_shapes=True,
        experimental_config=cfg,
    ) as prof:
        for i in range(first, first + WAIT + WARMUP + ACTIVE):
            step(i)
            prof.step()
    stop()
    files = {p.name: p.stat().st_size for p in run_dir.iterdir()}
    print(f"   mean {mean_ms:.2f} ms/step, blur {blur_ms:.2f} ms; files {files}", flush=True)
    return {"mean_step_ms": mean_ms, "median_blur_ms": blur_ms, "files": files}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    runs = {
        "moved_preprocess_main": record(args.out, "moved_preprocess_main", False),
        "moved_preprocess_thread": record(args.out, "moved_preprocess_thread", True),
    }
    doc = {
        "command": f"python scripts/record_moved_work.py --out {args.out}",
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "machine": platform.machine(),
            "intra_op_threads": torch.get_num_threads(),
        },
        "profiler": {
            "wait": WAIT,
            "warmup": WARMUP,
            "active": ACTIVE,
            "record_shapes": True,
            "profile_all_threads": True,
        },
        "workload": {"batch": BATCH, "image": SIZE, "width": WIDTH},
        "warm_steps": WARM_STEPS,
        "measure_steps": MEASURE_STEPS,
        "runs": runs,
    }
    (args.out / "moved_info.json").write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
