#!/usr/bin/env python3
"""Record the sample PyTorch-profiler (Kineto) logs under ``sample_logs/``.

Each workload is written as one TensorBoard run folder that holds one gzipped
``<worker>.<timestamp>.pt.trace.json.gz`` per rank, recorded with::

    torch.profiler.profile(
        activities=[CPU, CUDA],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=N, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            run_dir, worker_name=..., use_gzip=True),
        record_shapes=True, profile_memory=True, with_stack=False)

The workloads come as before/after pairs:

* ``transformer_eager`` / ``transformer_compile``: a small transformer LM in
  eager mode with a per-parameter (``foreach=False``) AdamW -- a flood of
  short kernels -- versus the same model under ``torch.compile`` with
  ``AdamW(fused=True)`` (compiled before profiling).
* ``dataloader_workers0`` / ``dataloader_workers4``: a ResNet-18-like CNN
  (fp32) fed by a ``DataLoader`` over a synthetic dataset with CPU-heavy
  per-sample transforms, ``num_workers=0`` versus ``num_workers=4,
  pin_memory=True, prefetch_factor=2, persistent_workers=True`` with
  non-blocking copies. The amount of CPU work (Gaussian blur passes) is
  calibrated at start so that one batch costs ~2x the measured GPU step on one
  thread: the main process is then ~2/3 data loading with 0 workers, while 4
  workers deliver a batch every ~0.5 GPU steps. Both runs warm up for at least
  ``DL_WARMUP_ITERS`` un-profiled steps.
* ``memory_leak`` / ``memory_fixed``: a training loop that keeps every step's
  (not detached) output alive on the GPU -- allocated memory grows by exactly
  ``LEAK_BYTES_PER_STEP`` (16 MiB) per step -- versus the same loop that keeps
  only Python floats / tiny CPU tensors.
* ``memory_leak_async`` / ``memory_fixed_async``: a GPU-bound loop (fp32
  matmuls, no ``.item()``, ``.cpu()`` or synchronisation inside the loop or
  between profiled steps), so the host runs several steps ahead of the GPU; the
  leak keeps every step's not detached (batch, features) output alive --
  exactly ``ASYNC_LEAK_BYTES_PER_STEP`` (32 MiB) per step --, the fixed loop
  accumulates the loss on the device instead. The per-step allocated memory is
  read with ``torch.cuda.memory_allocated()`` (host-side accounting: no sync),
  and how far the host ran ahead is read back from the trace.
* ``memory_fragmentation`` / ``memory_fragmentation_fixed`` /
  ``memory_fragmentation_expandable``: each step makes ``FRAG_TEMPS_PER_STEP``
  activations of a batch whose length rises every step (``FRAG_BASE_ROWS`` +
  step x ``FRAG_ROWS_PER_STEP`` rows of ``FRAG_FEATURES`` fp32), so every
  request is larger than any cached free block: the caching allocator
  reserves new segments each step while hundreds of MiB sit cached and free.
  The fixed run pads every batch to the longest length (one size: the cached
  blocks are reused). The expandable run is the rising-length loop again with
  ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, recorded in a child
  process (the setting is read when CUDA is initialised).
* ``ddp``: DistributedDataParallel over an MLP, one process per rank (spawned
  here), each rank profiling itself into the same folder as ``rank{r}``.

Multi-rank DDP (default vs tuned buckets), FSDP and straggler runs are recorded
by the sibling ``record_distributed.py`` (see ``scripts/README.md``).

Usage (on a machine with a GPU)::

    python scripts/record_sample_logs.py --out sample_logs
    python scripts/record_sample_logs.py --out /tmp/sl --only ddp --world-size 2

CPU-only smoke test (tiny sizes, DDP over gloo with two ranks)::

    python scripts/record_sample_logs.py --out /tmp/sl --device cpu --quick \
        --backend gloo --world-size 2

Besides the run folders the script writes ``<out>/recording_info.json`` with
the versions, the command, the per-run file sizes, the per-step allocated
memory measured in the memory workloads and the data-loading calibration and
per-step wall / DataLoader-wait times of the dataloader workloads.
"""

from __future__ import annotations

import os

# NVLink multicast must stay off on shared multi-GPU hosts; set before torch /
# NCCL are imported so that spawned ranks inherit it too.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# --------------------------------------------------------------------------
# constants
# --------------------------------------------------------------------------

WAIT_STEPS = 1
WARMUP_STEPS = 1
DEFAULT_ACTIVE_STEPS = 5

MIB = 1024 * 1024
# memory_leak: every step keeps its (batch, features) fp32 output alive.
LEAK_BATCH = 1024
LEAK_FEATURES = 4096
LEAK_DTYPE_BYTES = 4
LEAK_BYTES_PER_STEP = LEAK_BATCH * LEAK_FEATURES * LEAK_DTYPE_BYTES  # 16 MiB
# memory_leak_async: a GPU-bound MLP (fp32 matmuls, ~15 ms of GPU work per step
# on an H200 against ~1-2 ms on the host) keeps its (batch, features) output.
ASYNC_LEAK_BATCH = 2048
ASYNC_LEAK_FEATURES = 4096
ASYNC_LEAK_LAYERS = 4
ASYNC_LEAK_BYTES_PER_STEP = ASYNC_LEAK_BATCH * ASYNC_LEAK_FEATURES * LEAK_DTYPE_BYTES  # 32 MiB
# memory_fragmentation: rows of the activations rise by FRAG_ROWS_PER_STEP a step
# (64 MiB, 72 MiB, 80 MiB, ... per tensor at FRAG_FEATURES fp32 features).
FRAG_TEMPS_PER_STEP = 4
FRAG_FEATURES = 4096
FRAG_BASE_ROWS = 4096
FRAG_ROWS_PER_STEP = 512
EXPANDABLE_ENV = "expandable_segments:True"

ALL_WORKLOADS = (
    "transformer_eager",
    "transformer_compile",
    "dataloader_workers0",
    "dataloader_workers4",
    "memory_leak",
    "memory_fixed",
    "memory_leak_async",
    "memory_fixed_async",
    "memory_fragmentation",
    "memory_fragmentation_fixed",
    "memory_fragmentation_expandable",
    "ddp",
)

TRACE_SUFFIX = ".pt.trace.json.gz"


# --------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Options:
    """Parsed command line, passed explicitly to every workload."""

    out: Path
    device: str
    quick: bool
    active: int
    warmup_iters: int
    world_size: int
    backend: str
    compile_backend: str
    seed: int


def profiler_activities(device: torch.device) -> list[torch.profiler.ProfilerActivity]:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_steps(
    run_dir: Path,
    worker_name: str,
    device: torch.device,
    active: int,
    step_fn: Callable[[int], None],
    sync_each_step: bool = True,
) -> None:
    """Run ``wait + warmup + active`` steps of ``step_fn`` under the profiler.

    The trace of the ``active`` steps is written once, gzipped, into
    ``run_dir`` by ``tensorboard_trace_handler``. With ``sync_each_step`` False
    nothing waits for the GPU between steps (the host runs ahead, as in a
    GPU-bound loop); the profiler synchronises the device when it stops.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    total = WAIT_STEPS + WARMUP_STEPS + active
    with torch.profiler.profile(
        activities=profiler_activities(device),
        schedule=torch.profiler.schedule(
            wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=active, repeat=1
        ),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            str(run_dir), worker_name=worker_name, use_gzip=True
        ),
        record_shapes=True,
        profile_memory=True,
        with_stack=False,
    ) as prof:
        for i in range(total):
            step_fn(i)
            if sync_each_step:
                sync(device)
            prof.step()


def fresh_run_dir(opts: Options, name: str) -> Path:
    run_dir = opts.out / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    return run_dir


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------
# 1. transformer: eager + per-parameter AdamW vs torch.compile + fused AdamW
# --------------------------------------------------------------------------


class TinyTransformerLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_heads: int, n_layers: int, seq_len: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
        layer = nn.TransformerEncoderLayer(
            d_model,
            n_heads,
            dim_feedforward=4 * d_model,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        mask = torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        x = self.encoder(x, mask=self.causal_mask, is_causal=True)
        return self.head(self.norm(x))


def _transformer(opts: Options, name: str, compiled: bool) -> None:
    device = torch.device(opts.device)
    torch.manual_seed(opts.seed)
    if opts.quick:
        vocab, d_model, heads, layers, seq, batch = 512, 64, 4, 2, 32, 4
    else:
        vocab, d_model, heads, layers, seq, batch = 4096, 256, 4, 4, 128, 8
    model = TinyTransformerLM(vocab, d_model, heads, layers, seq).to(device)
    if compiled:
        fused = device.type == "cuda"
        optim = torch.optim.AdamW(
            model.parameters(), lr=1e-3, fused=fused, foreach=None if fused else False
        )
        fwd = torch.compile(model, backend=opts.compile_backend)
    else:
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
        fwd = model
    gen = torch.Generator(device="cpu").manual_seed(opts.seed)
    batches = [
        torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device) for _ in range(4)
    ]

    def step(i: int) -> None:
        tokens = batches[i % len(batches)]
        inp, tgt = tokens[:, :-1], tokens[:, 1:]
        with torch.profiler.record_function("forward"):
            logits = fwd(inp)
            loss = F.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1))
        with torch.profiler.record_function("backward"):
            loss.backward()
        with torch.profiler.record_function("optimizer"):
            optim.step()
            optim.zero_grad(set_to_none=True)

    # warm-up outside the profiler: torch.compile compiles here (fwd + bwd),
    # the optimizer allocates its state, cuBLAS/cuDNN pick their algorithms.
    t0 = time.perf_counter()
    for i in range(opts.warmup_iters):
        step(i)
    sync(device)
    print(
        f"  [{name}] warm-up ({opts.warmup_iters} steps, compiled={compiled})"
        f" took {time.perf_counter() - t0:.1f}s"
    )
    n_params = sum(p.numel() for p in model.parameters())
    n_tensors = sum(1 for _ in model.parameters())
    print(
        f"  [{name}] {n_params / 1e6:.2f} M parameters in {n_tensors} tensors; batch {batch}x{seq}"
    )
    profile_steps(fresh_run_dir(opts, name), "worker0", device, opts.active, step)
    if compiled:
        torch._dynamo.reset()


def run_transformer_eager(opts: Options) -> None:
    _transformer(opts, "transformer_eager", compiled=False)


def run_transformer_compile(opts: Options) -> None:
    _transformer(opts, "transformer_compile", compiled=True)


# --------------------------------------------------------------------------
# 2. data loading: num_workers=0 vs 4 workers + pinned memory + prefetch
# --------------------------------------------------------------------------

# The CPU cost of one batch of transforms (one thread, as in a DataLoader
# worker) is set to DL_CPU_TO_GPU_RATIO x the measured GPU step: with
# num_workers=0 a step is then ~2/3 data loading, while DL_WORKERS workers
# deliver a batch every ~DL_CPU_TO_GPU_RATIO / DL_WORKERS = 0.5 GPU steps and
# keep the prefetch queue full.
DL_CPU_TO_GPU_RATIO = 2.0
DL_WORKERS = 4
DL_PREFETCH_FACTOR = 2
# un-profiled steps before the profiler starts (at least): workers started,
# prefetch queue in steady state, cuDNN algorithms chosen.
DL_WARMUP_ITERS = 12
DL_BLUR_KERNEL = 5
DL_MAX_BLUR_PASSES_PER_SAMPLE = 64


@dataclasses.dataclass(frozen=True)
class DataloaderConfig:
    batch: int
    raw: int  # side of the pre-generated ("decoded") images
    crop: int  # side of the random crop fed to the model
    width: int  # channels of the first stage (x2, x4, x8 in the next ones)
    blocks_per_stage: int
    num_classes: int
    bank_size: int  # number of pre-generated images


def _dataloader_config(quick: bool) -> DataloaderConfig:
    if quick:
        return DataloaderConfig(
            batch=8, raw=40, crop=32, width=8, blocks_per_stage=1, num_classes=10, bank_size=4
        )
    return DataloaderConfig(
        batch=32, raw=288, crop=256, width=96, blocks_per_stage=2, num_classes=10, bank_size=8
    )


@contextlib.contextmanager
def _torch_threads(n: int):
    """Run the block with ``torch.set_num_threads(n)`` (restored afterwards)."""
    prev = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


class SyntheticImageDataset(torch.utils.data.Dataset):
    """Random crops of a few pre-generated images with CPU-heavy transforms.

    ``__getitem__``: random crop, random flips, colour jitter (brightness,
    contrast, saturation), a number of 5x5 Gaussian blur passes (depthwise
    ``conv2d`` on the CPU) and normalisation. The per-sample parameters come
    from Python's ``random`` seeded with the index, so the samples are
    deterministic and the trace holds no tiny scalar torch ops. The CPU work is
    set by ``blur_passes_per_batch``: the blur passes of one batch of
    ``batch`` consecutive indices, spread over its samples (every batch of an
    unshuffled ``DataLoader`` gets exactly that many).
    """

    def __init__(self, length: int, cfg: DataloaderConfig, seed: int):
        self.length = length
        self.raw = cfg.raw
        self.crop = cfg.crop
        self.batch = cfg.batch
        self.num_classes = cfg.num_classes
        self.seed = seed
        self.blur_passes_per_batch = 0
        gen = torch.Generator().manual_seed(seed)
        self.bank = torch.rand(cfg.bank_size, 3, cfg.raw, cfg.raw, generator=gen)
        k = DL_BLUR_KERNEL
        g = torch.arange(k, dtype=torch.float32) - (k - 1) / 2
        g = torch.exp(-(g**2) / 2.0)
        k2d = torch.outer(g, g)
        k2d = k2d / k2d.sum()
        self.blur = k2d.expand(3, 1, k, k).contiguous()
        mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
        self.scale = 1.0 / std
        self.shift = -mean / std

    def __len__(self) -> int:
        return self.length

    def blur_passes(self, idx: int) -> int:
        per_sample, extra = divmod(self.blur_passes_per_batch, self.batch)
        return per_sample + (1 if idx % self.batch < extra else 0)

    def __getitem__(self, idx: int):
        rng = random.Random(self.seed * 1_000_003 + idx)
        top = rng.randrange(self.raw - self.crop + 1)
        left = rng.randrange(self.raw - self.crop + 1)
        img = self.bank[idx % len(self.bank), :, top : top + self.crop, left : left + self.crop]
        # random horizontal / vertical flips (both copy the crop: the bank stays untouched)
        dims = [d for d in (2, 1) if rng.random() < 0.5]
        img = torch.flip(img, dims).contiguous() if dims else img.clone()
        # colour jitter: brightness, contrast, saturation
        img = img * (0.8 + 0.4 * rng.random())
        img = torch.lerp(img.mean(), img, 0.8 + 0.4 * rng.random())
        img = torch.lerp(img.mean(dim=0, keepdim=True), img, 0.8 + 0.4 * rng.random())
        img = img.clamp_(0.0, 1.0)
        # gaussian blur (depthwise conv on the CPU)
        pad = DL_BLUR_KERNEL // 2
        for _ in range(self.blur_passes(idx)):
            img = F.conv2d(img.unsqueeze(0), self.blur, padding=pad, groups=3)[0]
        # normalise
        img = torch.addcmul(self.shift, img, self.scale)
        return img, rng.randrange(self.num_classes)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.short(x))


class SmallResNet(nn.Module):
    """ResNet-18-like CNN: stride-2 stem (no max-pool), 4 stages of basic blocks."""

    def __init__(self, num_classes: int, width: int = 32, blocks_per_stage: int = 1):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        )
        blocks: list[nn.Module] = []
        cin = width
        for stage, mult in enumerate((1, 2, 4, 8)):
            for b in range(blocks_per_stage):
                stride = 2 if stage > 0 and b == 0 else 1
                blocks.append(BasicBlock(cin, width * mult, stride))
                cin = width * mult
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(8 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _dl_model(cfg: DataloaderConfig, device: torch.device):
    model = SmallResNet(cfg.num_classes, cfg.width, cfg.blocks_per_stage).to(device)
    optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def train(images: torch.Tensor, labels: torch.Tensor) -> None:
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)

    return model, train


def _calibrate_dataloader(
    opts: Options, cfg: DataloaderConfig, device: torch.device
) -> dict[str, object]:
    """Choose ``blur_passes_per_batch`` so that one batch costs ~2x the GPU step.

    Measures the training step on a batch already on the device, then the CPU
    time of one batch (``__getitem__`` x batch + ``default_collate``, on the
    calling thread -- one intra-op thread, as in a DataLoader worker) with 0 and
    with 2 blur passes per sample.
    """
    torch.manual_seed(opts.seed)
    _, train = _dl_model(cfg, device)
    x = torch.randn(cfg.batch, 3, cfg.crop, cfg.crop, device=device)
    y = torch.randint(0, cfg.num_classes, (cfg.batch,), device=device)
    times = []
    for _ in range(10):
        sync(device)
        t0 = time.perf_counter()
        train(x, y)
        sync(device)
        times.append(time.perf_counter() - t0)
    gpu_step = statistics.median(times[4:])
    del train, x, y
    free_memory(device)

    ds = SyntheticImageDataset(4 * cfg.batch, cfg, opts.seed)
    collate = torch.utils.data.default_collate

    def batch_cost(passes_per_batch: int, reps: int = 3) -> float:
        ds.blur_passes_per_batch = passes_per_batch
        best = float("inf")
        for r in range(reps):
            t0 = time.perf_counter()
            collate([ds[i] for i in range(r * cfg.batch, (r + 1) * cfg.batch)])
            best = min(best, time.perf_counter() - t0)
        return best

    batch_cost(cfg.batch, reps=1)  # oneDNN primitives, allocator
    base = batch_cost(0)
    per_pass = max((batch_cost(2 * cfg.batch) - base) / (2 * cfg.batch), 1e-6)
    target = DL_CPU_TO_GPU_RATIO * gpu_step

    def passes_for(per_pass: float) -> int:
        passes = round(max(target - base, 0.0) / per_pass)
        return min(passes, DL_MAX_BLUR_PASSES_PER_SAMPLE * cfg.batch)

    passes = passes_for(per_pass)
    for _ in range(2):  # refine: the cost per pass need not be linear in the count
        cpu_batch = batch_cost(passes)
        if passes == 0:
            break
        per_pass = max((cpu_batch - base) / passes, 1e-6)
        passes = passes_for(per_pass)
    cpu_batch = batch_cost(passes)
    cal: dict[str, object] = {
        "gpu_step_ms": round(gpu_step * 1e3, 3),
        "cpu_batch_without_blur_ms": round(base * 1e3, 3),
        "cpu_per_blur_pass_ms": round(per_pass * 1e3, 4),
        "target_cpu_batch_ms": round(target * 1e3, 3),
        "blur_passes_per_batch": passes,
        "cpu_batch_ms": round(cpu_batch * 1e3, 3),
        "cpu_to_gpu_ratio": round(cpu_batch / gpu_step, 3),
        "predicted_data_fraction_workers0": round(cpu_batch / (cpu_batch + gpu_step), 3),
        "predicted_batch_interval_workers4_ms": round(cpu_batch / DL_WORKERS * 1e3, 3),
    }
    print(f"  [dataloader calibration] {json.dumps(cal)}")
    if cpu_batch / DL_WORKERS > 0.75 * gpu_step:
        print(
            f"  [dataloader calibration] WARNING: {DL_WORKERS} workers deliver a batch every"
            f" {cpu_batch / DL_WORKERS * 1e3:.1f} ms, GPU step {gpu_step * 1e3:.1f} ms",
            file=sys.stderr,
        )
    return cal


def _dataloader(opts: Options, name: str, workers: int, info: dict[str, object]) -> None:
    device = torch.device(opts.device)
    cfg = _dataloader_config(opts.quick)
    with _torch_threads(1):
        cal = info.get("calibration")
        if not isinstance(cal, dict):  # once per process: both runs share the workload
            cal = _calibrate_dataloader(opts, cfg, device)
            info["calibration"] = cal
            info["config"] = dataclasses.asdict(cfg) | {
                "blur_kernel": DL_BLUR_KERNEL,
                "cpu_to_gpu_ratio_target": DL_CPU_TO_GPU_RATIO,
                "main_process_torch_threads": 1,
                "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            }
        _dataloader_run(opts, name, workers, cfg, int(cal["blur_passes_per_batch"]), info)


def _dataloader_run(
    opts: Options,
    name: str,
    workers: int,
    cfg: DataloaderConfig,
    blur_passes_per_batch: int,
    info: dict[str, object],
) -> None:
    device = torch.device(opts.device)
    torch.manual_seed(opts.seed)
    warmup_iters = max(opts.warmup_iters, DL_WARMUP_ITERS)
    steps_needed = warmup_iters + WAIT_STEPS + WARMUP_STEPS + opts.active
    slack = DL_WORKERS * DL_PREFETCH_FACTOR + 4
    dataset = SyntheticImageDataset(cfg.batch * (steps_needed + slack), cfg, opts.seed)
    dataset.blur_passes_per_batch = blur_passes_per_batch
    on_gpu = device.type == "cuda"
    loader_kwargs: dict[str, object] = dict(batch_size=cfg.batch, shuffle=False, drop_last=True)
    if workers > 0:
        loader_kwargs.update(
            num_workers=workers,
            pin_memory=on_gpu,
            prefetch_factor=DL_PREFETCH_FACTOR,
            persistent_workers=True,
        )
    else:
        loader_kwargs.update(num_workers=0)
    loader = torch.utils.data.DataLoader(dataset, **loader_kwargs)
    non_blocking = workers > 0 and on_gpu

    _, train = _dl_model(cfg, device)
    it = iter(loader)
    step_ms: list[float] = []
    data_ms: list[float] = []

    def step(_: int) -> None:
        t0 = time.perf_counter()
        images, labels = next(it)
        t1 = time.perf_counter()
        images = images.to(device, non_blocking=non_blocking)
        labels = labels.to(device, non_blocking=non_blocking)
        train(images, labels)
        sync(device)
        data_ms.append((t1 - t0) * 1e3)
        step_ms.append((time.perf_counter() - t0) * 1e3)

    # warm-up outside the profiler: starts the workers and fills their prefetch
    # queue, initialises cuDNN / cuBLAS.
    t0 = time.perf_counter()
    for i in range(warmup_iters):
        step(i)
    sync(device)
    warm = time.perf_counter() - t0
    print(f"  [{name}] warm-up ({warmup_iters} steps, num_workers={workers}) took {warm:.2f}s")
    t0 = time.perf_counter()
    profile_steps(fresh_run_dir(opts, name), "worker0", device, opts.active, step)
    total = WAIT_STEPS + WARMUP_STEPS + opts.active
    print(
        f"  [{name}] profiled {total} steps in {time.perf_counter() - t0:.2f}s (incl. trace export)"
    )
    active_step = [round(v, 2) for v in step_ms[-opts.active :]]
    active_data = [round(v, 2) for v in data_ms[-opts.active :]]
    frac = [round(d / s, 3) for d, s in zip(active_data, active_step, strict=True)]
    print(f"  [{name}] profiled steps (wall ms): {active_step}")
    print(f"  [{name}] waiting for the DataLoader (ms): {active_data} -> fraction {frac}")
    info[name] = {
        "num_workers": workers,
        "pin_memory": bool(loader_kwargs.get("pin_memory", False)),
        "prefetch_factor": loader_kwargs.get("prefetch_factor"),
        "persistent_workers": bool(loader_kwargs.get("persistent_workers", False)),
        "non_blocking": non_blocking,
        "warmup_iters_before_profiler": warmup_iters,
        "warmup_step_wall_ms": [round(v, 2) for v in step_ms[:warmup_iters]],
        "profiled_step_wall_ms": active_step,
        "profiled_dataloader_wait_ms": active_data,
        "profiled_dataloader_fraction": frac,
    }
    # the iterator (and with it the persistent workers) goes away on return


def run_dataloader_workers0(opts: Options, info: dict[str, object]) -> None:
    _dataloader(opts, "dataloader_workers0", workers=0, info=info)


def run_dataloader_workers4(opts: Options, info: dict[str, object]) -> None:
    _dataloader(opts, "dataloader_workers4", workers=DL_WORKERS, info=info)


# --------------------------------------------------------------------------
# 3. memory: a per-step leak of exactly LEAK_BYTES_PER_STEP vs flat memory
# --------------------------------------------------------------------------


def _memory(opts: Options, name: str, leak: bool, info: dict[str, object]) -> None:
    device = torch.device(opts.device)
    torch.manual_seed(opts.seed)
    if opts.quick:
        batch, hidden, feats = 64, 256, 256
    else:
        batch, hidden, feats = LEAK_BATCH, 1024, LEAK_FEATURES
    bytes_per_step = batch * feats * LEAK_DTYPE_BYTES
    model = nn.Sequential(nn.Linear(hidden, feats), nn.ReLU(), nn.Linear(feats, feats)).to(device)
    optim = torch.optim.SGD(model.parameters(), lr=1e-3)  # stateless: no growth of its own
    x = torch.randn(batch, hidden, device=device)
    kept: list[object] = []
    allocated: list[int] = []

    def step(_: int) -> None:
        out = model(x)  # (batch, feats) float32
        loss = out.square().mean()
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        if leak:
            kept.append(out)  # BUG: keeps the GPU output (and its grad_fn) alive
        else:
            kept.append(loss.item())  # fixed: a Python float
            kept.append(out.detach().mean().cpu())  # and a 0-d CPU tensor
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            allocated.append(torch.cuda.memory_allocated(device))

    for i in range(opts.warmup_iters):
        step(i)
    profile_steps(fresh_run_dir(opts, name), "worker0", device, opts.active, step)
    deltas = [b - a for a, b in zip(allocated[:-1], allocated[1:], strict=True)]
    expected = bytes_per_step if leak else 0
    print(f"  [{name}] expected growth per step: {expected} bytes ({expected / MIB:g} MiB)")
    if allocated:
        print(f"  [{name}] torch.cuda.memory_allocated after each step: {allocated}")
        print(f"  [{name}] measured growth per step: {deltas}")
    info[name] = {
        "expected_growth_bytes_per_step": expected,
        "kept_tensor_shape": [batch, feats] if leak else None,
        "steps_before_profiler": opts.warmup_iters,
        "profiler_schedule": {"wait": WAIT_STEPS, "warmup": WARMUP_STEPS, "active": opts.active},
        "cuda_memory_allocated_after_each_step": allocated,
        "measured_growth_bytes_per_step": deltas,
    }
    kept.clear()


def run_memory_leak(opts: Options, info: dict[str, object]) -> None:
    _memory(opts, "memory_leak", leak=True, info=info)


def run_memory_fixed(opts: Options, info: dict[str, object]) -> None:
    _memory(opts, "memory_fixed", leak=False, info=info)


# --------------------------------------------------------------------------
# 3b. memory on a GPU-bound loop: the host runs ahead, nothing synchronises
# --------------------------------------------------------------------------


def host_lead_from_trace(trace_path: Path) -> list[dict[str, object]]:
    """How far the host ran ahead of the GPU, per ``ProfilerStep#N`` of a trace.

    For each CPU step N: ``cpu_start_us`` (the marker's start, trace µs),
    ``prev_gpu_end_us`` (the end of the last kernel / memcpy / memset launched
    from inside step N-1, matched by ``correlation``), ``host_ahead_ms`` =
    (prev_gpu_end_us - cpu_start_us) / 1000 (> 0: step N started on the host
    before step N-1's GPU work ended) and ``steps_in_flight`` (earlier steps
    whose GPU work had not ended when step N started on the host).
    """
    import gzip

    opener = gzip.open if trace_path.name.endswith(".gz") else open
    with opener(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    steps: list[tuple[int, float, float]] = []
    launch_ts: dict[int, float] = {}
    gpu: list[tuple[int, float]] = []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, name = e.get("cat"), str(e.get("name", ""))
        ts, dur = float(e.get("ts", 0)), float(e.get("dur", 0))
        corr = (e.get("args") or {}).get("correlation")
        if cat == "user_annotation" and name.startswith("ProfilerStep#"):
            steps.append((int(name.split("#", 1)[1]), ts, ts + dur))
        elif cat in ("cuda_runtime", "cuda_driver") and isinstance(corr, int):
            launch_ts[corr] = ts
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset") and isinstance(corr, int):
            gpu.append((corr, ts + dur))
    steps.sort(key=lambda s: s[1])
    gpu_end: list[float | None] = [None] * len(steps)
    for corr, end in gpu:
        t = launch_ts.get(corr)
        if t is None:
            continue
        for k, (_, s0, s1) in enumerate(steps):
            if s0 <= t < s1:
                prev = gpu_end[k]
                gpu_end[k] = end if prev is None else max(prev, end)
                break
    out: list[dict[str, object]] = []
    for k, (number, s0, _) in enumerate(steps):
        prev_end = gpu_end[k - 1] if k > 0 else None
        in_flight = sum(1 for j in range(k) if (gpu_end[j] or 0.0) > s0)
        out.append(
            {
                "step": number,
                "cpu_start_us": s0,
                "prev_gpu_end_us": prev_end,
                "host_ahead_ms": None if prev_end is None else round((prev_end - s0) / 1e3, 3),
                "steps_in_flight": in_flight,
            }
        )
    return out


def _trace_file(run_dir: Path) -> Path:
    files = sorted(p for p in run_dir.iterdir() if p.name.endswith(TRACE_SUFFIX))
    if len(files) != 1:
        raise RuntimeError(f"{run_dir}: expected one trace file, found {len(files)}")
    return files[0]


def _memory_async(opts: Options, name: str, leak: bool, info: dict[str, object]) -> None:
    device = torch.device(opts.device)
    on_gpu = device.type == "cuda"
    torch.manual_seed(opts.seed)
    if opts.quick:
        batch, feats, layers = 64, 256, 2
    else:
        batch, feats, layers = ASYNC_LEAK_BATCH, ASYNC_LEAK_FEATURES, ASYNC_LEAK_LAYERS
    bytes_per_step = batch * feats * LEAK_DTYPE_BYTES
    mods: list[nn.Module] = []
    for _ in range(layers):
        mods += [nn.Linear(feats, feats, bias=False), nn.ReLU()]
    model = nn.Sequential(*mods[:-1]).to(device)
    optim = torch.optim.SGD(model.parameters(), lr=1e-6)  # stateless
    x = torch.randn(batch, feats, device=device)
    running = torch.zeros((), device=device)  # the fix: the sum stays on the device
    kept: list[torch.Tensor] = []
    allocated: list[int] = []

    def step(_: int) -> None:
        out = model(x)  # (batch, feats) float32
        loss = out.square().mean()
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        if leak:
            kept.append(out)  # BUG: keeps the GPU output (and its grad_fn) alive
        else:
            running.add_(loss.detach())  # fixed: accumulate on the device, no sync
        # host-side allocator accounting: exact without waiting for the GPU
        allocated.append(torch.cuda.memory_allocated(device) if on_gpu else 0)

    for i in range(opts.warmup_iters):
        step(i)
    sync(device)  # the profiled loop starts from an idle GPU ...
    run_dir = fresh_run_dir(opts, name)
    # ... and nothing in it waits for the GPU
    profile_steps(run_dir, "worker0", device, opts.active, step, sync_each_step=False)
    sync(device)
    deltas = [b - a for a, b in zip(allocated[:-1], allocated[1:], strict=True)]
    expected = bytes_per_step if leak else 0
    lead = host_lead_from_trace(_trace_file(run_dir))
    print(f"  [{name}] expected growth per step: {expected} bytes ({expected / MIB:g} MiB)")
    print(f"  [{name}] torch.cuda.memory_allocated after each step: {allocated}")
    print(f"  [{name}] measured growth per step: {deltas}")
    print(f"  [{name}] host ahead of the GPU per profiled step: {json.dumps(lead)}")
    info[name] = {
        "expected_growth_bytes_per_step": expected,
        "kept_tensor_shape": [batch, feats] if leak else None,
        "kept_tensors_bytes": sum(t.numel() * t.element_size() for t in kept),
        "model": f"{layers} x Linear({feats}, {feats}, bias=False) + ReLU, fp32, batch {batch}",
        "sync_inside_loop": False,
        "steps_before_profiler": opts.warmup_iters,
        "profiler_schedule": {"wait": WAIT_STEPS, "warmup": WARMUP_STEPS, "active": opts.active},
        "cuda_memory_allocated_after_each_step": allocated,
        "cuda_memory_allocated_note": "read at the end of each step's Python code, without "
        "synchronising (the caching allocator's host-side count)",
        "measured_growth_bytes_per_step": deltas,
        "host_lead_per_profiled_step": lead,
        "running_loss_sum": None if leak else float(running.item()),  # after the profiler
    }
    kept.clear()


def run_memory_leak_async(opts: Options, info: dict[str, object]) -> None:
    _memory_async(opts, "memory_leak_async", leak=True, info=info)


def run_memory_fixed_async(opts: Options, info: dict[str, object]) -> None:
    _memory_async(opts, "memory_fixed_async", leak=False, info=info)


# --------------------------------------------------------------------------
# 3c. fragmentation: rising batch lengths vs one padded length
# --------------------------------------------------------------------------


def _allocator_stats(device: torch.device) -> dict[str, int]:
    if device.type != "cuda":
        return {}
    st = torch.cuda.memory_stats(device)
    keys = {
        "allocated_bytes": "allocated_bytes.all.current",
        "reserved_bytes": "reserved_bytes.all.current",
        "segments_current": "segment.all.current",
        "segments_allocated_total": "segment.all.allocated",
        "inactive_split_bytes": "inactive_split_bytes.all.current",
        "alloc_retries": "num_alloc_retries",
    }
    return {k: int(st.get(v, 0)) for k, v in keys.items()}


def _fragmentation(opts: Options, name: str, padded: bool, info: dict[str, object]) -> None:
    device = torch.device(opts.device)
    torch.manual_seed(opts.seed)
    if opts.quick:
        feats, base, inc = 64, 64, 16
    else:
        feats, base, inc = FRAG_FEATURES, FRAG_BASE_ROWS, FRAG_ROWS_PER_STEP
    total_steps = opts.warmup_iters + WAIT_STEPS + WARMUP_STEPS + opts.active
    longest = base + (total_steps - 1) * inc
    w = torch.randn(feats, feats, device=device) / feats**0.5
    acc = torch.zeros((), device=device)
    counter = [0]
    rows_per_step: list[int] = []
    stats: list[dict[str, int]] = []

    def step(_: int) -> None:
        k = counter[0]
        counter[0] += 1
        rows = longest if padded else base + k * inc
        rows_per_step.append(rows)
        # FRAG_TEMPS_PER_STEP activations of (rows, feats) fp32, alive together
        h0 = torch.randn(rows, feats, device=device)
        h1 = h0 @ w
        h2 = torch.relu(h1)
        h3 = h2 @ w
        acc.add_(h3.mean())
        del h0, h1, h2, h3
        stats.append(_allocator_stats(device))

    for i in range(opts.warmup_iters):
        step(i)
    sync(device)
    profile_steps(fresh_run_dir(opts, name), "worker0", device, opts.active, step)
    tensor_bytes = [r * feats * 4 for r in rows_per_step]
    print(f"  [{name}] bytes per activation per step: {tensor_bytes}")
    for k, st in enumerate(stats):
        print(f"  [{name}] after step {k}: {json.dumps(st)}")
    entry: dict[str, object] = {
        "padded_to_longest": padded,
        "temps_per_step": FRAG_TEMPS_PER_STEP,
        "rows_per_step": rows_per_step,
        "features": feats,
        "activation_bytes_per_step": tensor_bytes,
        "steps_before_profiler": opts.warmup_iters,
        "profiler_schedule": {"wait": WAIT_STEPS, "warmup": WARMUP_STEPS, "active": opts.active},
        "allocator_stats_after_each_step": stats,
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    }
    if device.type == "cuda":
        with contextlib.suppress(Exception):
            segs = torch.cuda.memory_snapshot()
            entry["snapshot_segments"] = len(segs)
            entry["snapshot_expandable_segments"] = sum(
                1 for seg in segs if seg.get("is_expandable")
            )
    info[name] = entry


def run_memory_fragmentation(opts: Options, info: dict[str, object]) -> None:
    _fragmentation(opts, "memory_fragmentation", padded=False, info=info)


def run_memory_fragmentation_fixed(opts: Options, info: dict[str, object]) -> None:
    _fragmentation(opts, "memory_fragmentation_fixed", padded=True, info=info)


def run_memory_fragmentation_expandable(opts: Options, info: dict[str, object]) -> None:
    """The rising-length loop with expandable segments. The allocator reads
    ``PYTORCH_CUDA_ALLOC_CONF`` once, when CUDA is initialised, so this run is
    recorded by a child process started with the variable set; the child writes
    its own entry into ``<out>/recording_info.json``, which the parent merges."""
    name = "memory_fragmentation_expandable"
    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF") == EXPANDABLE_ENV:
        _fragmentation(opts, name, padded=False, info=info)
        return
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=EXPANDABLE_ENV)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(opts.out)]
    cmd += ["--only", name, "--device", opts.device, "--active", str(opts.active)]
    cmd += ["--warmup-iters", str(opts.warmup_iters), "--seed", str(opts.seed)]
    cmd += ["--quick"] if opts.quick else []
    print(f"  [{name}] child process: PYTORCH_CUDA_ALLOC_CONF={EXPANDABLE_ENV} {' '.join(cmd)}")
    subprocess.run(cmd, check=True, env=env)


# --------------------------------------------------------------------------
# 4. DDP: one process per rank, each profiling itself as rank{r}
# --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_rank(rank: int, opts: Options, run_dir: Path, port: int) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ["RANK"] = str(rank)
    os.environ["LOCAL_RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(opts.world_size)
    if opts.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    init_kwargs: dict[str, object] = dict(
        backend=opts.backend, rank=rank, world_size=opts.world_size
    )
    if opts.backend == "nccl":
        init_kwargs["device_id"] = device
    dist.init_process_group(**init_kwargs)
    try:
        torch.manual_seed(opts.seed)  # identical initial weights on all ranks
        if opts.quick:
            batch, width, depth = 16, 128, 3
        else:
            batch, width, depth = 256, 2048, 6
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.GELU()]
        layers.append(nn.Linear(width, 10))
        model = DDP(
            nn.Sequential(*layers).to(device),
            device_ids=[rank] if device.type == "cuda" else None,
            bucket_cap_mb=16,
        )
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        gen = torch.Generator(device="cpu").manual_seed(opts.seed + 1000 * rank)  # per-rank data
        data = [
            (
                torch.randn(batch, width, generator=gen).to(device),
                torch.randint(0, 10, (batch,), generator=gen).to(device),
            )
            for _ in range(4)
        ]

        def step(i: int) -> None:
            xb, yb = data[i % len(data)]
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()  # gradient all-reduce overlaps the backward pass
            optim.step()
            optim.zero_grad(set_to_none=True)

        for i in range(opts.warmup_iters):
            step(i)
        sync(device)
        dist.barrier()
        profile_steps(run_dir, f"rank{rank}", device, opts.active, step)
        dist.barrier()
        if rank == 0:
            n = sum(p.numel() for p in model.parameters())
            print(
                f"  [ddp] world_size={opts.world_size} backend={opts.backend}"
                f" {n / 1e6:.1f} M parameters"
            )
    finally:
        dist.destroy_process_group()


def run_ddp(opts: Options) -> None:
    import torch.multiprocessing as mp

    run_dir = fresh_run_dir(opts, "ddp")
    if opts.device == "cuda" and opts.world_size > torch.cuda.device_count():
        raise SystemExit(
            f"--world-size {opts.world_size} > {torch.cuda.device_count()} visible GPUs"
        )
    mp.spawn(_ddp_rank, args=(opts, run_dir, _free_port()), nprocs=opts.world_size, join=True)


# --------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------


def describe_run(run_dir: Path) -> dict[str, int]:
    files = sorted(p for p in run_dir.iterdir() if p.name.endswith(TRACE_SUFFIX))
    sizes = {p.name: p.stat().st_size for p in files}
    total = sum(sizes.values())
    print(f"  [{run_dir.name}] {len(files)} trace file(s), {total / 1e6:.2f} MB total")
    for fname, size in sizes.items():
        print(f"      {fname}  {size} bytes ({size / 1e6:.2f} MB)")
    return sizes


def environment_info(opts: Options) -> dict[str, object]:
    env: dict[str, object] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": opts.device,
        "platform": platform.platform(),
    }
    if opts.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpu_count"] = torch.cuda.device_count()
        with contextlib.suppress(Exception):
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            env["driver"] = out.stdout.strip().splitlines()[0]
        with contextlib.suppress(Exception):
            env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    return env


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> tuple[Options, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out",
        type=Path,
        default=Path("sample_logs"),
        help="log dir (one run folder per workload)",
    )
    p.add_argument(
        "--only",
        default=",".join(ALL_WORKLOADS),
        help="comma-separated workloads to record (default: all): " + ", ".join(ALL_WORKLOADS),
    )
    p.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu"
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes, for a CPU smoke test")
    p.add_argument(
        "--active", type=int, default=DEFAULT_ACTIVE_STEPS, help="profiled (active) steps per run"
    )
    p.add_argument(
        "--warmup-iters",
        type=int,
        default=None,
        help="un-profiled steps before the profiler starts (default 3, 1 with --quick)",
    )
    p.add_argument(
        "--world-size", type=int, default=None, help="DDP ranks (default: number of GPUs, 2 on CPU)"
    )
    p.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        default=None,
        help="DDP backend (default: nccl on cuda, gloo on cpu)",
    )
    p.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile backend for transformer_compile",
    )
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    names = [n.strip() for n in a.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(ALL_WORKLOADS))
    if unknown:
        p.error(f"unknown workload(s) {unknown}; choose from {list(ALL_WORKLOADS)}")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but CUDA is not available (use --device cpu)")
    world = a.world_size or (torch.cuda.device_count() if a.device == "cuda" else 2)
    backend = a.backend or ("nccl" if a.device == "cuda" else "gloo")
    if backend == "nccl" and a.device != "cuda":
        p.error("--backend nccl needs --device cuda")
    warm = a.warmup_iters if a.warmup_iters is not None else (1 if a.quick else 3)
    opts = Options(
        out=a.out,
        device=a.device,
        quick=a.quick,
        active=a.active,
        warmup_iters=warm,
        world_size=world,
        backend=backend,
        compile_backend=a.compile_backend,
        seed=a.seed,
    )
    return opts, names


def main(argv: list[str] | None = None) -> int:
    opts, names = parse_args(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    env = environment_info(opts)
    print("environment:", json.dumps(env))
    mem_info: dict[str, object] = {}
    dl_info: dict[str, object] = {}
    runners: dict[str, Callable[[], None]] = {
        "transformer_eager": lambda: run_transformer_eager(opts),
        "transformer_compile": lambda: run_transformer_compile(opts),
        "dataloader_workers0": lambda: run_dataloader_workers0(opts, dl_info),
        "dataloader_workers4": lambda: run_dataloader_workers4(opts, dl_info),
        "memory_leak": lambda: run_memory_leak(opts, mem_info),
        "memory_fixed": lambda: run_memory_fixed(opts, mem_info),
        "memory_leak_async": lambda: run_memory_leak_async(opts, mem_info),
        "memory_fixed_async": lambda: run_memory_fixed_async(opts, mem_info),
        "memory_fragmentation": lambda: run_memory_fragmentation(opts, mem_info),
        "memory_fragmentation_fixed": lambda: run_memory_fragmentation_fixed(opts, mem_info),
        "memory_fragmentation_expandable": lambda: run_memory_fragmentation_expandable(
            opts, mem_info
        ),
        "ddp": lambda: run_ddp(opts),
    }
    failed: list[str] = []
    runs: dict[str, dict[str, int]] = {}
    device = torch.device(opts.device)
    for name in [n for n in ALL_WORKLOADS if n in names]:
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            runners[name]()
        except Exception:  # keep recording the other workloads
            traceback.print_exc()
            failed.append(name)
        free_memory(device)
        print(f"  [{name}] done in {time.perf_counter() - t0:.1f}s", flush=True)
        if (opts.out / name).is_dir():
            runs[name] = describe_run(opts.out / name)

    total = sum(s for sizes in runs.values() for s in sizes.values())
    print(f"total trace size: {total / 1e6:.2f} MB in {sum(len(s) for s in runs.values())} file(s)")
    info_path = opts.out / "recording_info.json"
    info: dict[str, object] = {}
    if info_path.exists():  # keep what earlier --only runs recorded
        with contextlib.suppress(Exception):
            info = json.loads(info_path.read_text())
    command = " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:]))
    info.update(
        {
            "command": command,  # the last command that wrote this file
            "environment": env,
            "profiler": {
                "wait": WAIT_STEPS,
                "warmup": WARMUP_STEPS,
                "active": opts.active,
                "record_shapes": True,
                "profile_memory": True,
                "with_stack": False,
            },
            "quick": opts.quick,
            "warmup_iters_before_profiler": opts.warmup_iters,
            "ddp": {"world_size": opts.world_size, "backend": opts.backend},
        }
    )
    info.setdefault("runs", {}).update(runs)  # type: ignore[union-attr]
    info.setdefault("run_commands", {}).update(dict.fromkeys(runs, command))  # type: ignore[union-attr]
    info.setdefault("memory", {}).update(mem_info)  # type: ignore[union-attr]
    if dl_info:
        info.setdefault("dataloader", {}).update(dl_info)  # type: ignore[union-attr]
    info_path.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
