#!/usr/bin/env python3
"""Record one big, real PyTorch-profiler (Kineto) trace of GPT training, for benchmarks.

The model is a small GPT written here (nanoGPT-like: token + position embeddings,
``--layers`` pre-LayerNorm blocks of causal self-attention and a 4x MLP, tied LM
head), trained on random tokens (no download) with ``torch.optim.AdamW(foreach=False)``
(one kernel group per parameter: many short kernels, like an un-fused optimizer in the
wild) under::

    torch.profiler.profile(
        activities=[CPU, CUDA],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=N, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            run_dir, worker_name="gpt", use_gzip=True),
        record_shapes=True, profile_memory=True, with_stack=True)

so the trace holds ``ProfilerStep#2`` ... ``ProfilerStep#(N+1)`` with Python stacks.

Sizing: ``--active`` steps (default: chosen). With ``--target-json-mb`` (default 150)
a probe run of ``--probe-active`` steps is recorded first into ``<out>/probe``; its
uncompressed JSON bytes per active step choose ``N`` so that the final JSON is about
the target, at least ``--min-active`` (20) steps, and -- from the probe's gzip ratio --
a ``.json.gz`` of at most ``--max-gz-mb`` (15, so it fits a 16 MiB transfer). If the
final ``.gz`` is still larger, it is recorded once more with proportionally fewer
steps. Writes ``<out>/gpt/gpt.<ts>.pt.trace.json.gz`` and ``<out>/record_info.json``
(versions, the options, steps, sizes, seconds).

    python3 scripts/record_gpt_trace.py --out /tmp/gpt            # on a GPU machine
    python3 scripts/record_gpt_trace.py --out /tmp/gpt --device cpu --quick  # smoke test

Sets ``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and
``NVSHMEM_DISABLE_NVLS=1`` before torch is imported, like the other recording scripts.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import shutil
import sys
import time
from pathlib import Path

for _k, _v in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    os.environ.setdefault(_k, _v)

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402


class Block(nn.Module):
    """One pre-LayerNorm transformer block: causal self-attention + 4x GELU MLP."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        h = self.n_heads
        q = q.view(b, t, h, c // h).transpose(1, 2)
        k = k.view(b, t, h, c // h).transpose(1, 2)
        v = v.view(b, t, h, c // h).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Token + position embeddings, ``n_layers`` blocks, final LayerNorm, tied LM head."""

    def __init__(self, vocab: int, seq_len: int, d_model: int, n_heads: int, n_layers: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def record(args: argparse.Namespace, run_dir: Path, active: int) -> Path:
    """Train ``2 + active`` steps under the profiler; returns the ``.pt.trace.json.gz``."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = GPT(args.vocab, args.seq_len, args.d_model, args.heads, args.layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step() -> None:
        idx = torch.randint(0, args.vocab, (args.batch, args.seq_len), device=device)
        tgt = torch.randint(0, args.vocab, (args.batch, args.seq_len), device=device)
        with amp:
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # un-profiled warm-up (cuBLAS handles, allocator)
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    with torch.profiler.profile(
        activities=acts,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=active, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            str(run_dir), worker_name="gpt", use_gzip=True
        ),
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
    ) as prof:
        for _ in range(2 + active):
            step()
            prof.step()
    files = sorted(run_dir.glob("*.pt.trace.json.gz"))
    if len(files) != 1:
        raise RuntimeError(f"{run_dir}: expected one .pt.trace.json.gz, found {len(files)}")
    return files[0]


def sizes(path: Path) -> tuple[int, int]:
    """(gz bytes, uncompressed JSON bytes) of a ``.json.gz``."""
    n = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            n += len(chunk)
    return path.stat().st_size, n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--active", type=int, default=0, help="active steps; 0 = choose")
    p.add_argument("--probe-active", type=int, default=3)
    p.add_argument("--min-active", type=int, default=20)
    p.add_argument("--target-json-mb", type=float, default=150.0)
    p.add_argument("--max-gz-mb", type=float, default=15.0)
    p.add_argument("--quick", action="store_true", help="tiny model, 2 active steps")
    args = p.parse_args(argv)
    if args.quick:
        args.layers, args.d_model, args.heads, args.seq_len = 2, 64, 2, 32
        args.batch, args.vocab, args.active = 2, 256, 2
    args.out.mkdir(parents=True, exist_ok=True)
    info: dict[str, object] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device_name": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "argv": sys.argv,
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    t0 = time.perf_counter()
    active = args.active
    max_gz = args.max_gz_mb * 1e6
    if active <= 0:
        probe = record(args, args.out / "probe", args.probe_active)
        gz, js = sizes(probe)
        per_step = js / args.probe_active
        ratio = js / gz
        by_target = args.target_json_mb * 1e6 / per_step
        by_gz = max_gz * ratio / per_step * 0.9
        active = max(args.min_active, int(min(by_target, by_gz)))
        info["probe"] = {"active": args.probe_active, "gz_bytes": gz, "json_bytes": js}
        shutil.rmtree(args.out / "probe")
    path = record(args, args.out / "gpt", active)
    gz, js = sizes(path)
    if gz > max_gz and args.active <= 0:
        active = max(1, math.floor(active * max_gz / gz * 0.95))
        path = record(args, args.out / "gpt", active)
        gz, js = sizes(path)
    info.update(
        active_steps=active,
        file=str(path.relative_to(args.out)),
        gz_bytes=gz,
        json_bytes=js,
        seconds=round(time.perf_counter() - t0, 1),
    )
    (args.out / "record_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
