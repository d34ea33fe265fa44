#!/usr/bin/env python3
"""Record one small training loop with each ``tb_kineto_insights.capture`` preset.

For each of ``light``, ``standard`` and ``full``, and once more with ``light`` under
``CUDA_LAUNCH_BLOCKING=1``, a fresh child process (the variable is read when CUDA
starts) trains a small MLP and records it with ``capture.profile(out, run=NAME,
preset=...)`` (schedule wait=1, warmup=2, active=5). Runs are named
``capture_light``, ``capture_standard``, ``capture_full``, ``capture_blocking``.

Each child also times the loop: ``baseline_step_ms`` (median over ``--steps`` steps with
no profiler) and ``profiled_step_ms`` (median over the profiler's active steps); their
ratio minus one is the preset's overhead on this loop. The results are written to
``OUT/capture_info.json``.

Usage::

    PYTHONPATH=. python scripts/record_capture_presets.py --out /tmp/cap [--device cpu]

torch is imported only in the child (``--child``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RUNS: dict[str, tuple[str, dict[str, str]]] = {
    "capture_light": ("light", {}),
    "capture_standard": ("standard", {}),
    "capture_full": ("full", {}),
    "capture_blocking": ("light", {"CUDA_LAUNCH_BLOCKING": "1"}),
}


def child(out: str, run: str, preset: str, device: str, steps: int, width: int) -> dict[str, Any]:
    """Train, time, record; returns the timings (ms)."""
    import torch

    from tb_kineto_insights import capture

    torch.manual_seed(0)
    dev = torch.device(device)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, width, device=dev)
    y = torch.randint(0, 10, (256,), device=dev)

    def step() -> float:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()  # one sync per step: the step's wall time includes its GPU work
        return (time.perf_counter() - t0) * 1e3

    for _ in range(5):
        step()
    baseline = [step() for _ in range(steps)]
    prof = capture.profile(out, run=run, preset=preset, label=f"record_capture_presets {run}")
    times: list[float] = []
    with prof:
        for _ in range(1 + 2 + 5):
            times.append(step())
            prof.step()
    active = times[3:]
    return {
        "preset": preset,
        "baseline_step_ms": round(statistics.median(baseline), 4),
        "profiled_step_ms": round(statistics.median(active), 4),
        "overhead_fraction": round(statistics.median(active) / statistics.median(baseline) - 1, 4),
        "profiled_steps_ms": [round(t, 4) for t in active],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=30, help="unprofiled steps timed")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=1, help="times each run is recorded")
    ap.add_argument("--only", default="", help="comma-separated run names")
    ap.add_argument("--child", nargs=2, metavar=("RUN", "PRESET"))
    args = ap.parse_args(argv)
    if args.child:
        res = child(args.out, args.child[0], args.child[1], args.device, args.steps, args.width)
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.only.split(",") if n] or list(RUNS)
    if args.device != "cuda":
        names = [n for n in names if n != "capture_blocking"]
    info: dict[str, Any] = {"command": " ".join(sys.argv), "width": args.width, "runs": {}}
    for name in names:
        preset, extra = RUNS[name]
        env = {**os.environ, **extra}
        results = []
        for i in range(args.repeats):
            run = name if i == 0 else f"{name}_repeat{i}"
            cmd = [sys.executable, __file__, "--out", str(out), "--device", args.device]
            cmd += ["--steps", str(args.steps), "--width", str(args.width)]
            cmd += ["--child", run, preset]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                print(proc.stdout, proc.stderr, file=sys.stderr)
                return proc.returncode
            line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
            results.append(json.loads(line[len("RESULT ") :]))
        info["runs"][name] = {"env": extra, "results": results}
        print(name, json.dumps(results), flush=True)
    (out / "capture_info.json").write_text(json.dumps(info, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
