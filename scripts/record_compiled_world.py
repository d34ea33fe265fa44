#!/usr/bin/env python3
"""Record the runs behind the step-time, what-if and compiled-world verdicts.

Every run is one TensorBoard run folder with one gzipped
``<gpu>.<timestamp>.pt.trace.json.gz``, recorded with the schedule most users copy::

    torch.profiler.profile(
        activities=[CPU, CUDA],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=ACTIVE, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(run_dir, worker_name=<gpu>,
                                                               use_gzip=True),
        record_shapes=True, profile_memory=True, with_stack=<per run>)

and nothing waits for the GPU between steps, so a GPU-bound loop's host runs ahead and
the first profiled step carries the GPU work the unprofiled steps left queued. Beside
each run, outside the profiler, the script measures the job's own step time:
``WARM_STEPS`` steps, then ``MEASURE_STEPS`` steps bracketed by
``torch.cuda.synchronize()`` (``mean_step_ms``), and the wall time of every profiled
step from one ``prof.step()`` to the next (``profiled_step_wall_ms``). Both go to
``<out>/compiled_world_info.json`` (runs, pairs' measured savings, versions).

The runs (``--only`` picks some, ``--list`` prints them):

* ``backlog_mlp_fp32`` / ``backlog_mlp_bf16``: a GPU-bound MLP (TF32 off) whose host
  issues every step long before the GPU runs it, and its bf16-autocast fix.
* ``empty_cache_every_step`` / ``empty_cache_removed``: a GPU-bound MLP calling
  ``torch.cuda.empty_cache()`` after every step (``cudaFree`` syncs the device) against
  the same loop without it (host ahead: a backlog step).
* ``compiled_eager`` / ``compiled_default`` / ``compiled_reduce_overhead`` /
  ``compiled_max_autotune``: a small launch-bound transformer block stack with fused
  AdamW, in eager, ``torch.compile()``, ``mode="reduce-overhead"`` (CUDA graphs) and
  ``mode="max-autotune-no-cudagraphs"``.
* ``recompile_every_step`` / ``recompile_mark_dynamic``: ``torch.compile(dynamic=False)``
  fed a sequence length never seen before in every step (Dynamo and Inductor compile
  inside the step) against ``mark_dynamic`` on the sequence dimension.
* ``grad_accum4``: the eager block stack with the optimizer every 4th step.
* ``hf_gpt2_fp32`` / ``hf_gpt2_bf16``: the ``transformers`` package's GPT-2 built from a
  config (no weights), fp32 with TF32 off and under bf16 autocast.
* ``attention_by_hand`` / ``attention_sdpa``: two attention blocks at L = 4096 with
  ``softmax(q @ kᵀ / √d) @ v`` written out (B·H·L² scores materialised) against
  ``F.scaled_dot_product_attention``, bf16 autocast.
* ``resnet50_fp32_nchw`` / ``resnet50_bf16_cl``: torchvision's ResNet-50 (TF32 off,
  NCHW) against bf16 autocast with ``channels_last``.
* ``sync_isnan_check`` / ``sync_isnan_removed``: a 12-layer MLP checking
  ``if torch.isnan(h).any()`` after every layer (12 host syncs a step), with Python
  stacks, against the same loop without the checks.

Usage (on a machine with a CUDA GPU)::

    python3 scripts/record_compiled_world.py --out /tmp/cw
    python3 scripts/record_compiled_world.py --out /tmp/cw --only compiled_eager,compiled_default

Sets ``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and
``NVSHMEM_DISABLE_NVLS=1`` before torch is imported, like the other recording scripts.
"""

from __future__ import annotations

import os

for _k, _v in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    os.environ.setdefault(_k, _v)

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

WAIT, WARMUP, ACTIVE = 1, 1, 5
WARM_STEPS = 5
MEASURE_STEPS = 20

Step = Callable[[int], None]


# --------------------------------------------------------------------------- harness


def _sync() -> None:
    torch.cuda.synchronize()


def _free() -> None:
    gc.collect()
    _sync()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def measure(step: Step, first: int, n: int) -> dict[str, object]:
    """Mean wall time of ``n`` unprofiled steps, one sync before and after the batch."""
    _sync()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(n):
        step(first + i)
    _sync()
    t1 = time.perf_counter()
    return {
        "measure_steps": n,
        "mean_step_ms": (t1 - t0) * 1e3 / n,
        "max_memory_allocated_bytes": int(torch.cuda.max_memory_allocated()),
        "max_memory_reserved_bytes": int(torch.cuda.max_memory_reserved()),
    }


def profile(run_dir: Path, step: Step, first: int, *, active: int, stacks: bool) -> dict:
    """Profile ``WAIT + WARMUP + active`` steps as a user's loop would (no sync)."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    model = re.search(r"\b([A-Z]\d{2,4})\b", torch.cuda.get_device_name(0))
    worker = model.group(1).lower() if model else "gpu"
    marks: list[float] = []
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=active, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            str(run_dir), worker_name=worker, use_gzip=True
        ),
        record_shapes=True,
        profile_memory=True,
        with_stack=stacks,
    ) as prof:
        for i in range(WAIT + WARMUP + active):
            marks.append(time.perf_counter())
            step(first + i)
            prof.step()
        marks.append(time.perf_counter())
    walls = [(b - a) * 1e3 for a, b in zip(marks[:-1], marks[1:], strict=True)]
    return {
        "active": active,
        "with_stack": stacks,
        # the last active step's prof.step() writes the trace: its wall is left out
        "profiled_step_wall_ms": walls[WAIT + WARMUP : WAIT + WARMUP + active - 1],
        "files": {p.name: p.stat().st_size for p in run_dir.iterdir()},
    }


# --------------------------------------------------------------------------- models


def mlp(layers: int, width: int) -> nn.Module:
    mods: list[nn.Module] = []
    for _ in range(layers):
        mods += [nn.Linear(width, width, bias=False), nn.ReLU()]
    return nn.Sequential(*mods)


class Block(nn.Module):
    """Pre-LayerNorm transformer block; attention by SDPA or written out by hand."""

    def __init__(self, d: int, heads: int, by_hand: bool = False, causal: bool = True) -> None:
        super().__init__()
        self.heads, self.by_hand, self.causal = heads, by_hand, causal
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.by_hand:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
            a = torch.softmax(scores, dim=-1) @ v
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, max_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(max_len, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


# --------------------------------------------------------------------------- workloads

DEV = "cuda"


def backlog_mlp(bf16: bool) -> Step:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    model = mlp(8, 4096).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(8192, 4096, device=DEV)

    def step(_: int) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def empty_cache_mlp(empty_cache: bool) -> Step:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    model = mlp(8, 4096).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(4096, 4096, device=DEV)

    def step(_: int) -> None:
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if empty_cache:
            torch.cuda.empty_cache()

    return step


LM_VOCAB, LM_D, LM_HEADS, LM_LAYERS, LM_LEN, LM_BATCH = 4096, 256, 4, 6, 128, 8


def lm_step(mode: str | None, accumulate: int = 1) -> Step:
    """The small block stack; ``mode`` is ``None`` (eager) or a ``torch.compile`` mode."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    model = TinyLM(LM_VOCAB, LM_D, LM_HEADS, LM_LAYERS, LM_LEN).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd: Callable[..., torch.Tensor] = model
    if mode is not None:
        fwd = torch.compile(model, mode=None if mode == "default" else mode)
    idx = torch.randint(0, LM_VOCAB, (LM_BATCH, LM_LEN), device=DEV)

    def step(i: int) -> None:
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        fwd(idx, idx).backward()
        if (i + 1) % accumulate == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


def _raise_recompile_limit() -> None:
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 4096)


def recompile_step(fixed: bool) -> Step:
    """A new sequence length every step: static compile (recompiles) vs mark_dynamic."""
    _raise_recompile_limit()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    model = TinyLM(LM_VOCAB, LM_D, LM_HEADS, 4, 1024).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(model) if fixed else torch.compile(model, dynamic=False)

    def step(i: int) -> None:
        n = 64 + 8 * i  # never seen before
        idx = torch.randint(0, LM_VOCAB, (LM_BATCH, n), device=DEV)
        if fixed:
            torch._dynamo.maybe_mark_dynamic(idx, 1)
        fwd(idx, idx).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def hf_gpt2_step(bf16: bool) -> Step:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).to(DEV).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, cfg.vocab_size, (8, 512), device=DEV)

    def step(_: int) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=idx, labels=idx).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def attention_step(by_hand: bool) -> Step:
    torch.manual_seed(0)
    d, heads, n, b = 1024, 16, 4096, 4
    blocks = [Block(d, heads, by_hand, causal=False) for _ in range(2)]
    model = nn.Sequential(*blocks).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(b, n, d, device=DEV)

    def step(_: int) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def resnet50_step(bf16_cl: bool) -> Step:
    import torchvision

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(DEV)
    fmt = torch.channels_last if bf16_cl else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device=DEV).to(memory_format=fmt)
    y = torch.randint(0, 1000, (64,), device=DEV)

    def step(_: int) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16_cl):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def isnan_step(check: bool) -> Step:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    layers = nn.ModuleList(nn.Linear(2048, 2048) for _ in range(12)).to(DEV)
    opt = torch.optim.AdamW(layers.parameters(), lr=1e-4, fused=True)
    x = torch.randn(2048, 2048, device=DEV)

    def step(_: int) -> None:
        h = x
        for lin in layers:
            h = torch.relu(lin(h))
            if check and torch.isnan(h).any():
                raise FloatingPointError("NaN in activations")
        h.square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


#: name -> (builder, active steps, with_stack, measure steps)
RUNS: dict[str, tuple[Callable[[], Step], int, bool, int]] = {
    "backlog_mlp_fp32": (lambda: backlog_mlp(False), ACTIVE, False, MEASURE_STEPS),
    "backlog_mlp_bf16": (lambda: backlog_mlp(True), ACTIVE, False, MEASURE_STEPS),
    "empty_cache_every_step": (lambda: empty_cache_mlp(True), ACTIVE, False, MEASURE_STEPS),
    "empty_cache_removed": (lambda: empty_cache_mlp(False), ACTIVE, False, MEASURE_STEPS),
    "compiled_eager": (lambda: lm_step(None), ACTIVE, False, MEASURE_STEPS),
    "compiled_default": (lambda: lm_step("default"), ACTIVE, False, MEASURE_STEPS),
    "compiled_reduce_overhead": (lambda: lm_step("reduce-overhead"), ACTIVE, False, 20),
    "compiled_max_autotune": (
        lambda: lm_step("max-autotune-no-cudagraphs"),
        ACTIVE,
        False,
        MEASURE_STEPS,
    ),
    "recompile_every_step": (lambda: recompile_step(False), ACTIVE, False, 3),
    "recompile_mark_dynamic": (lambda: recompile_step(True), ACTIVE, False, 3),
    "grad_accum4": (lambda: lm_step(None, accumulate=4), 8, False, 20),
    "hf_gpt2_fp32": (lambda: hf_gpt2_step(False), ACTIVE, False, MEASURE_STEPS),
    "hf_gpt2_bf16": (lambda: hf_gpt2_step(True), ACTIVE, False, MEASURE_STEPS),
    "attention_by_hand": (lambda: attention_step(True), ACTIVE, False, MEASURE_STEPS),
    "attention_sdpa": (lambda: attention_step(False), ACTIVE, False, MEASURE_STEPS),
    "resnet50_fp32_nchw": (lambda: resnet50_step(False), ACTIVE, False, MEASURE_STEPS),
    "resnet50_bf16_cl": (lambda: resnet50_step(True), ACTIVE, False, MEASURE_STEPS),
    "sync_isnan_check": (lambda: isnan_step(True), ACTIVE, True, MEASURE_STEPS),
    "sync_isnan_removed": (lambda: isnan_step(False), ACTIVE, True, MEASURE_STEPS),
}

#: before -> after: the fix each pair stands for
PAIRS = [
    ("backlog_mlp_fp32", "backlog_mlp_bf16"),
    ("empty_cache_every_step", "empty_cache_removed"),
    ("compiled_eager", "compiled_default"),
    ("compiled_eager", "compiled_reduce_overhead"),
    ("compiled_default", "compiled_reduce_overhead"),
    ("compiled_eager", "compiled_max_autotune"),
    ("recompile_every_step", "recompile_mark_dynamic"),
    ("hf_gpt2_fp32", "hf_gpt2_bf16"),
    ("attention_by_hand", "attention_sdpa"),
    ("resnet50_fp32_nchw", "resnet50_bf16_cl"),
    ("sync_isnan_check", "sync_isnan_removed"),
]


def record(out: Path, name: str) -> dict[str, object]:
    build, active, stacks, n_measure = RUNS[name]
    t0 = time.perf_counter()
    step = build()
    for i in range(WARM_STEPS):
        step(i)
    _sync()
    warm_s = time.perf_counter() - t0
    m = measure(step, WARM_STEPS, n_measure)
    p = profile(out / name, step, WARM_STEPS + n_measure, active=active, stacks=stacks)
    walls = p["profiled_step_wall_ms"]
    steady = statistics.median(walls[1:]) if len(walls) > 1 else float("nan")
    return {**m, **p, "warm_s": warm_s, "median_profiled_wall_after_first_ms": steady}


def environment() -> dict[str, object]:
    env: dict[str, object] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(0),
    }
    for mod in ("transformers", "torchvision", "triton"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001 - a version we could not read is said so
            env[mod] = f"not importable: {exc!r}"
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=False)
    ap.add_argument("--only", default="", help="comma-separated run names")
    ap.add_argument("--list", action="store_true", help="print the run names and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(RUNS))
        return 0
    if args.out is None:
        ap.error("--out is required")
    only = [s for s in args.only.split(",") if s] or list(RUNS)
    unknown = [s for s in only if s not in RUNS]
    if unknown:
        ap.error(f"unknown runs: {', '.join(unknown)} (see --list)")
    args.out.mkdir(parents=True, exist_ok=True)
    info_path = args.out / "compiled_world_info.json"
    doc = json.loads(info_path.read_text()) if info_path.exists() else {"runs": {}}
    doc["environment"] = environment()
    doc["profiler"] = {
        "wait": WAIT,
        "warmup": WARMUP,
        "record_shapes": True,
        "profile_memory": True,
    }
    doc["warm_steps"] = WARM_STEPS
    for name in only:
        print(f"== {name}", flush=True)
        try:
            doc["runs"][name] = record(args.out, name)
            r = doc["runs"][name]
            print(
                f"   unprofiled {r['mean_step_ms']:.2f} ms/step; profiled walls "
                f"{[round(w, 2) for w in r['profiled_step_wall_ms']]}; warm {r['warm_s']:.1f} s",
                flush=True,
            )
        except Exception as exc:  # keep the other recordings
            traceback.print_exc()
            doc["runs"][name] = {"error": repr(exc)}
        _free()
        pairs = {}
        for before, after in PAIRS:
            b, a = doc["runs"].get(before, {}), doc["runs"].get(after, {})
            if "mean_step_ms" in b and "mean_step_ms" in a:
                pairs[f"{before}->{after}"] = {
                    "before_ms": b["mean_step_ms"],
                    "after_ms": a["mean_step_ms"],
                    "saving": 1 - a["mean_step_ms"] / b["mean_step_ms"],
                }
        doc["pairs"] = pairs
        info_path.write_text(json.dumps(doc, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
