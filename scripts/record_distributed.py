#!/usr/bin/env python3
"""Record multi-rank PyTorch-profiler (Kineto) traces: DDP, FSDP and a straggler.

Every workload is one TensorBoard run folder under ``--out`` holding one gzipped
``rank{r}.<timestamp>.pt.trace.json.gz`` per rank (one process per rank, spawned
here, each profiling itself with the same settings as ``record_sample_logs.py``:
``schedule(wait=1, warmup=1, active=N)``, ``record_shapes=True``,
``profile_memory=True``) and a ``recording_info.json`` with what the traces
cannot say themselves (settings, per-rank step times, the straggler's rank and
extra time, file sizes and the collectives counted in each trace).

Workloads (the same residual-MLP model in all four, ~100 M parameters in fp32 on
the GPU, ~2 M with ``--quick``):

* ``ddp_default``: ``DistributedDataParallel`` with the default buckets
  (``bucket_cap_mb=25``, the first one 1 MiB): many all-reduces per step,
  overlapping the backward pass.
* ``ddp_tuned``: the same with ``bucket_cap_mb=100`` (``--tuned-bucket-cap-mb``)
  and ``gradient_as_bucket_view=True``: fewer, larger all-reduces and no
  gradient-to-bucket copies -- the "after" of the pair.
* ``fsdp``: fully sharded data parallel on the same model, one unit per block:
  FSDP2 ``fully_shard`` when the installed torch has it (else FSDP1
  ``FullyShardedDataParallel``): all_gather (forward and backward) and
  reduce_scatter (backward) collectives.
* ``ddp_straggler``: ``ddp_default`` where one known rank (``--straggler-rank``,
  default the last) does ``--straggler-ms`` of extra work every step just
  before ``backward()`` -- a CPU sleep or, with ``--straggler-work matmul``,
  calibrated extra matmuls on its GPU -- so the other ranks wait for it in
  every all-reduce.

NCCL on the GPU, gloo on the CPU. NVLink multicast stays off: the variables
below are set (``setdefault``) before torch is imported and before any rank is
spawned, so every rank inherits them.

Usage (see ``scripts/README.md``)::

    python3 scripts/record_distributed.py --out sample_logs            # all GPUs
    python3 scripts/record_distributed.py --out /tmp/d --device cpu --quick --world-size 2

The module imports nothing outside the standard library at import time (torch is
imported where it is needed), so its argument parsing, workload registry and
trace checks can be used and tested without torch.
"""

from __future__ import annotations

import os

# NVLink multicast must stay off on shared multi-GPU hosts (a program using it
# can take the host's GPUs out of service). Set before torch / NCCL are
# imported; spawned ranks inherit os.environ.
NVLS_OFF_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
for _k, _v in NVLS_OFF_ENV.items():
    os.environ.setdefault(_k, _v)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

# --------------------------------------------------------------------------
# constants and the workload registry (no torch needed)
# --------------------------------------------------------------------------

WAIT_STEPS = 1  # the profiler schedule, as in record_sample_logs.py
WARMUP_STEPS = 1
DEFAULT_ACTIVE_STEPS = 5
TRACE_SUFFIX = ".pt.trace.json.gz"
RUN_INFO_NAME = "recording_info.json"
PARTS_DIR = "_rank_info"  # per-rank JSON parts, merged and removed by the parent

DDP_DEFAULT_BUCKET_CAP_MB = 25.0  # torch's default (the first bucket is 1 MiB)
DEFAULT_TUNED_BUCKET_CAP_MB = 100.0
DEFAULT_STRAGGLER_MS = 20.0


@dataclasses.dataclass(frozen=True)
class ModelSize:
    """Residual MLP: ``blocks`` x (LayerNorm, Linear(d, ffn), GELU, Linear(ffn, d))."""

    d_model: int
    ffn: int
    blocks: int
    batch: int  # rows per rank and step
    num_classes: int = 16

    @property
    def params(self) -> int:
        d, f = self.d_model, self.ffn
        per_block = 2 * d + (d * f + f) + (f * d + d)
        return self.blocks * per_block + d * self.num_classes + self.num_classes


# ~100 M parameters (400 MB of fp32 gradients: 16 DDP buckets of 25 MB, 5 of 100 MB)
GPU_MODEL = ModelSize(d_model=1024, ffn=4096, blocks=12, batch=1024)
# ~2 M parameters (8 MB of gradients: still 2 DDP buckets with the 1 MiB first one)
QUICK_MODEL = ModelSize(d_model=256, ffn=1024, blocks=4, batch=32)


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    strategy: str  # "ddp" or "fsdp"
    summary: str
    tuned_buckets: bool = False  # bucket_cap_mb=--tuned-bucket-cap-mb, grad-as-bucket-view
    straggler: bool = False


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("ddp_default", "ddp", "DDP, default buckets (bucket_cap_mb=25)"),
        Workload(
            "ddp_tuned",
            "ddp",
            "DDP, bucket_cap_mb=--tuned-bucket-cap-mb, gradient_as_bucket_view=True",
            tuned_buckets=True,
        ),
        Workload("fsdp", "fsdp", "FSDP2 fully_shard per block (FSDP1 if FSDP2 is missing)"),
        Workload(
            "ddp_straggler",
            "ddp",
            "DDP, default buckets; --straggler-rank does --straggler-ms extra work before backward",
            straggler=True,
        ),
    )
}
ALL_WORKLOADS = tuple(WORKLOADS)

# Collective names as they appear in traces (``c10d::<name>_`` CPU ops without
# the prefix and trailing underscore, and ``record_param_comms`` args
# "Collective name"), per family.
ALL_REDUCE_NAMES = frozenset({"allreduce", "all_reduce", "allreduce_coalesced"})
ALL_GATHER_NAMES = frozenset(
    {
        "allgather",
        "all_gather",
        "_allgather_base",
        "all_gather_into_tensor",
        "allgather_into_tensor_coalesced",
        "all_gather_into_tensor_coalesced",
    }
)
REDUCE_SCATTER_NAMES = frozenset(
    {
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "reduce_scatter_tensor_coalesced",
    }
)


def expected_collectives(workload: Workload) -> tuple[frozenset[str], ...]:
    """Collective families (any name of each) that every rank's trace must hold."""
    if workload.strategy == "fsdp":
        return (ALL_GATHER_NAMES, REDUCE_SCATTER_NAMES)
    return (ALL_REDUCE_NAMES,)


# --------------------------------------------------------------------------
# command line (no torch needed: pass cuda_available / gpu_count in tests)
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Options:
    """Parsed command line, passed explicitly (pickled) to every rank."""

    out: Path
    workloads: tuple[str, ...]
    device: str
    backend: str
    world_size: int
    quick: bool
    active: int
    warmup_iters: int
    batch: int
    tuned_bucket_cap_mb: float
    straggler_rank: int
    straggler_ms: float
    straggler_work: str
    fsdp_impl: str
    seed: int
    check: bool

    @property
    def model(self) -> ModelSize:
        return dataclasses.replace(QUICK_MODEL if self.quick else GPU_MODEL, batch=self.batch)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out", type=Path, default=Path("sample_logs"), help="log dir")
    p.add_argument(
        "--only",
        default=",".join(ALL_WORKLOADS),
        help="comma-separated workloads: " + ", ".join(ALL_WORKLOADS),
    )
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda if any")
    p.add_argument("--backend", choices=("nccl", "gloo"), default=None, help="default: by device")
    p.add_argument(
        "--world-size", type=int, default=None, help="ranks (default: number of GPUs; 2 on CPU)"
    )
    p.add_argument("--quick", action="store_true", help="tiny model, for a CPU smoke test")
    p.add_argument("--active", type=int, default=DEFAULT_ACTIVE_STEPS, help="profiled steps")
    p.add_argument(
        "--warmup-iters",
        type=int,
        default=None,
        help="un-profiled steps before the profiler starts (default 3, 1 with --quick)",
    )
    p.add_argument("--batch", type=int, default=None, help="rows per rank and step")
    p.add_argument(
        "--tuned-bucket-cap-mb",
        type=float,
        default=DEFAULT_TUNED_BUCKET_CAP_MB,
        help="bucket_cap_mb of ddp_tuned",
    )
    p.add_argument(
        "--straggler-rank", type=int, default=None, help="the slow rank (default: the last)"
    )
    p.add_argument(
        "--straggler-ms",
        type=float,
        default=DEFAULT_STRAGGLER_MS,
        help="extra work of the straggler per step, ms",
    )
    p.add_argument(
        "--straggler-work",
        choices=("sleep", "matmul"),
        default="sleep",
        help="CPU sleep before backward, or calibrated extra matmuls on the device",
    )
    p.add_argument(
        "--fsdp-impl",
        choices=("auto", "fsdp2", "fsdp1"),
        default="auto",
        help="auto: FSDP2 fully_shard if the installed torch has it, else FSDP1",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="do not fail when a run's traces miss ranks, steps or collectives",
    )
    return p


def _cuda_info() -> tuple[bool, int]:
    import torch

    ok = torch.cuda.is_available()
    return ok, (torch.cuda.device_count() if ok else 0)


def parse_args(
    argv: Sequence[str] | None = None,
    *,
    cuda_available: bool | None = None,
    gpu_count: int | None = None,
) -> Options:
    """Parse ``argv``; ``cuda_available`` / ``gpu_count`` default to what torch sees."""
    p = build_parser()
    a = p.parse_args(argv)
    names = tuple(n.strip() for n in a.only.split(",") if n.strip())
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown or not names:
        p.error(f"unknown workload(s) {unknown}; choose from {list(ALL_WORKLOADS)}")
    names = tuple(n for n in ALL_WORKLOADS if n in names)  # registry order, no duplicates
    if cuda_available is None or gpu_count is None:
        cuda_available, gpu_count = _cuda_info()
    device = a.device or ("cuda" if cuda_available else "cpu")
    if device == "cuda" and not cuda_available:
        p.error("--device cuda but CUDA is not available (use --device cpu)")
    backend = a.backend or ("nccl" if device == "cuda" else "gloo")
    if backend == "nccl" and device != "cuda":
        p.error("--backend nccl needs --device cuda")
    world = a.world_size if a.world_size is not None else (gpu_count if device == "cuda" else 2)
    if world < 1:
        p.error(f"--world-size must be >= 1 (got {world})")
    if device == "cuda" and world > gpu_count:
        p.error(f"--world-size {world} > {gpu_count} visible GPU(s): one GPU per rank")
    straggler = a.straggler_rank if a.straggler_rank is not None else world - 1
    if not 0 <= straggler < world:
        p.error(f"--straggler-rank {straggler} is not a rank of world size {world}")
    if a.fsdp_impl == "fsdp1" and device == "cpu" and "fsdp" in names:
        p.error("--fsdp-impl fsdp1 needs --device cuda (FSDP1 refuses the CPU; FSDP2 runs there)")
    if a.active < 1:
        p.error("--active must be >= 1")
    if a.straggler_ms < 0:
        p.error("--straggler-ms must be >= 0")
    if a.tuned_bucket_cap_mb <= 0:
        p.error("--tuned-bucket-cap-mb must be > 0")
    warm = a.warmup_iters if a.warmup_iters is not None else (1 if a.quick else 3)
    if warm < 0:
        p.error("--warmup-iters must be >= 0")
    batch = a.batch if a.batch is not None else (QUICK_MODEL if a.quick else GPU_MODEL).batch
    if batch < 1:
        p.error("--batch must be >= 1")
    return Options(
        out=a.out,
        workloads=names,
        device=device,
        backend=backend,
        world_size=world,
        quick=a.quick,
        active=a.active,
        warmup_iters=warm,
        batch=batch,
        tuned_bucket_cap_mb=a.tuned_bucket_cap_mb,
        straggler_rank=straggler,
        straggler_ms=a.straggler_ms,
        straggler_work=a.straggler_work,
        fsdp_impl=a.fsdp_impl,
        seed=a.seed,
        check=a.check,
    )


# --------------------------------------------------------------------------
# reading back the traces (no torch needed)
# --------------------------------------------------------------------------


def _collective_of(ev: dict[str, Any]) -> str | None:
    """The collective an event stands for: ``record_param_comms`` ops by their args."""
    if ev.get("name") != "record_param_comms":
        return None
    args = ev.get("args") or {}
    name = args.get("Collective name") or args.get("collective_name")
    return str(name) if name else "?"


def c10d_collective(op: str) -> str:
    """``c10d::_allgather_base_`` -> ``_allgather_base`` (the name families use)."""
    name = op.split("::", 1)[1] if "::" in op else op
    return name[:-1] if name.endswith("_") else name


def summarize_trace(path: Path) -> dict[str, Any]:
    """Counts read from one (gzipped) Kineto trace with ``json``: steps and collectives.

    Collectives show up three ways: ``c10d::<op>_`` CPU ops (any backend),
    ``nccl:<op>`` / ``gloo:<op>`` annotations of the backend's work, and
    ``record_param_comms`` ops with a "Collective name" argument (NCCL; gloo in
    torch 2.13 writes none). NCCL kernels are counted apart.
    """
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        root = json.load(fh)
    events = [e for e in root.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    steps = sorted(
        {str(e["name"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")},
        key=lambda s: int(s.split("#", 1)[1]) if s.split("#", 1)[1].isdigit() else -1,
    )
    param_comms = Counter(c for e in events if (c := _collective_of(e)) is not None)
    c10d_ops = Counter(
        str(e["name"])
        for e in events
        if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("c10d::")
    )
    backend_ops = Counter(
        str(e["name"])
        for e in events
        if e.get("cat") in ("cpu_op", "user_annotation")
        and str(e.get("name", "")).startswith(("nccl:", "gloo:"))
    )
    comm_kernels = Counter(
        str(e["name"]).split("(")[0]
        for e in events
        if e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower()
    )
    return {
        "file": path.name,
        "bytes": path.stat().st_size,
        "events": len(events),
        "steps": steps,
        "distributedInfo": root.get("distributedInfo"),
        "c10d_ops": dict(sorted(c10d_ops.items())),
        "backend_ops": dict(sorted(backend_ops.items())),
        "record_param_comms": dict(sorted(param_comms.items())),
        "nccl_kernels": dict(sorted(comm_kernels.items())),
    }


def collective_names(summary: dict[str, Any]) -> set[str]:
    """Every collective name a trace summary holds (c10d ops and record_param_comms)."""
    return {c10d_collective(op) for op in summary["c10d_ops"]} | set(summary["record_param_comms"])


def rank_of_trace(name: str) -> int | None:
    """``rank3.1234.pt.trace.json.gz`` -> 3; None for other names."""
    head = name.split(".", 1)[0]
    if head.startswith("rank") and head[4:].isdigit():
        return int(head[4:])
    return None


def needs_collectives(workload: Workload, world_size: int) -> bool:
    """False for FSDP on one rank: FSDP2 then issues no all_gather / reduce_scatter.

    (Seen with torch 2.11 + NCCL on one H200: no c10d, nccl: or record_param_comms
    ops at all; DDP on one rank still issues its all-reduces.)
    """
    return world_size > 1 or workload.strategy != "fsdp"


def check_run(
    run_dir: Path, workload: Workload, world_size: int, active: int
) -> tuple[dict[str, Any], list[str]]:
    """Summaries per rank and the problems found: missing ranks/steps/collectives."""
    problems: list[str] = []
    files = sorted(p for p in run_dir.iterdir() if p.name.endswith(TRACE_SUFFIX))
    by_rank: dict[int, list[Path]] = {}
    for f in files:
        r = rank_of_trace(f.name)
        if r is None:
            problems.append(f"{f.name}: not a rank{{r}} trace")
        else:
            by_rank.setdefault(r, []).append(f)
    if sorted(by_rank) != list(range(world_size)):
        problems.append(f"ranks with traces {sorted(by_rank)} != 0..{world_size - 1}")
    summaries: dict[str, Any] = {}
    for r, paths in sorted(by_rank.items()):
        if len(paths) != 1:
            problems.append(f"rank{r}: {len(paths)} trace files")
        for f in paths:
            try:
                s = summarize_trace(f)
            except Exception as exc:  # a broken file is a finding, not a crash
                problems.append(f"{f.name}: does not parse ({exc!r})")
                continue
            summaries[f"rank{r}"] = s
            if len(s["steps"]) != active:
                problems.append(f"{f.name}: {len(s['steps'])} ProfilerStep# != {active}")
            if not needs_collectives(workload, world_size):
                continue
            names = collective_names(s)
            if not s["c10d_ops"]:
                problems.append(f"{f.name}: no c10d:: collective ops")
            if not s["backend_ops"]:
                problems.append(f"{f.name}: no nccl:/gloo: collective annotations")
            backend = (s["distributedInfo"] or {}).get("backend")
            if backend == "nccl" and not s["record_param_comms"]:
                problems.append(f"{f.name}: no record_param_comms ops (expected with nccl)")
            for family in expected_collectives(workload):
                if not names & family:
                    problems.append(f"{f.name}: none of {sorted(family)} in {sorted(names)}")
    per_rank = {r: [s["c10d_ops"], s["record_param_comms"]] for r, s in summaries.items()}
    if len({json.dumps(v, sort_keys=True) for v in per_rank.values()}) > 1:
        problems.append(f"collective counts differ between ranks: {per_rank}")
    return summaries, problems


def merge_rank_parts(run_dir: Path, opts: Options, workload: Workload) -> dict[str, Any]:
    """Build the run's info from the ranks' ``_rank_info/rank{r}.json`` parts (then removed)."""
    parts_dir = run_dir / PARTS_DIR
    ranks: dict[str, Any] = {}
    common: dict[str, Any] = {}
    if parts_dir.is_dir():
        for f in sorted(parts_dir.glob("rank*.json")):
            part = json.loads(f.read_text())
            common = part.pop("common", None) or common
            ranks[f"rank{part['rank']}"] = part
            f.unlink()
        parts_dir.rmdir()
    info: dict[str, Any] = {**common, "ranks": ranks}
    if workload.straggler:
        strag = ranks.get(f"rank{opts.straggler_rank}", {})
        info["straggler"] = {
            "rank": opts.straggler_rank,
            "work": opts.straggler_work,
            "where": "every step, after the forward pass, before backward()",
            "extra_ms_target": opts.straggler_ms,
            "extra_ms_measured": strag.get("straggler_extra_ms"),
            "expected_signature": (
                "the other ranks wait for it in every all-reduce: their nccl:/gloo:"
                " all_reduce spans (and NCCL kernels) last about extra_ms longer than"
                " the straggler's"
            ),
        }
    return info


# --------------------------------------------------------------------------
# the ranks (torch from here on)
# --------------------------------------------------------------------------


def _shared() -> Any:
    """``record_sample_logs`` (profile_steps, describe_run, environment_info)."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import record_sample_logs

    return record_sample_logs


def build_model(size: ModelSize) -> Any:
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(size.d_model)
            self.up = nn.Linear(size.d_model, size.ffn)
            self.down = nn.Linear(size.ffn, size.d_model)

        def forward(self, x: Any) -> Any:
            return x + self.down(nn.functional.gelu(self.up(self.norm(x))))

    class ResidualMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(size.blocks))
            self.head = nn.Linear(size.d_model, size.num_classes)

        def forward(self, x: Any) -> Any:
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    return ResidualMLP()


def _wrap_fsdp(model: Any, opts: Options, device: Any) -> tuple[Any, str]:
    impl = opts.fsdp_impl
    fully_shard = None
    if impl in ("auto", "fsdp2"):
        try:
            from torch.distributed.fsdp import fully_shard  # torch >= 2.6
        except ImportError:
            if impl == "fsdp2":
                raise
    if fully_shard is not None:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (opts.world_size,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, "fsdp2.fully_shard"
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    block_cls = type(model.blocks[0])
    wrapped = FSDP(
        model,
        auto_wrap_policy=ModuleWrapPolicy({block_cls}),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        device_id=device if device.type == "cuda" else None,
        use_orig_params=True,
    )
    return wrapped, "fsdp1.FullyShardedDataParallel"


def _ddp_info(model: Any) -> dict[str, Any]:
    """What DDP says about its buckets (private API: best effort)."""
    out: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        data = model._get_ddp_logging_data()
        for key in (
            "bucket_cap_bytes",
            "bucket_sizes",
            "gradient_as_bucket_view",
            "num_buckets_reduced",
            "rebuilt_bucket_sizes",
            "rebuilt_per_bucket_param_indices",
            "has_rebuilt_buckets",
            "static_graph",
        ):
            if key in data:
                out[key] = data[key]
    return out


def _rank_main(rank: int, opts: Options, workload_name: str, run_dir: Path, port: int) -> None:
    import datetime

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    shared = _shared()
    workload = WORKLOADS[workload_name]
    for k, v in NVLS_OFF_ENV.items():  # inherited from the parent; make sure anyway
        os.environ.setdefault(k, v)
    env_seen = {k: os.environ.get(k) for k in NVLS_OFF_ENV}
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // opts.world_size))
    if opts.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    init_kwargs: dict[str, Any] = dict(
        backend=opts.backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=opts.world_size,
        timeout=datetime.timedelta(minutes=5),
    )
    if opts.backend == "nccl":
        init_kwargs["device_id"] = device
    dist.init_process_group(**init_kwargs)
    try:
        size = opts.model
        torch.manual_seed(opts.seed)  # identical initial weights on every rank
        model = build_model(size).to(device)
        n_params = sum(p.numel() for p in model.parameters())
        n_tensors = sum(1 for _ in model.parameters())
        wrap: dict[str, Any] = {"strategy": workload.strategy}
        if workload.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            ddp_kwargs: dict[str, Any] = {}
            if workload.tuned_buckets:
                ddp_kwargs = dict(
                    bucket_cap_mb=opts.tuned_bucket_cap_mb, gradient_as_bucket_view=True
                )
            model = DDP(model, device_ids=[rank] if device.type == "cuda" else None, **ddp_kwargs)
            wrap["bucket_cap_mb"] = ddp_kwargs.get("bucket_cap_mb", DDP_DEFAULT_BUCKET_CAP_MB)
            wrap["gradient_as_bucket_view"] = ddp_kwargs.get("gradient_as_bucket_view", False)
        else:
            model, wrap["fsdp_impl"] = _wrap_fsdp(model, opts, device)
        optim = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        gen = torch.Generator(device="cpu").manual_seed(opts.seed + 1000 * rank)  # per rank
        data = [
            (
                torch.randn(size.batch, size.d_model, generator=gen).to(device),
                torch.randint(0, size.num_classes, (size.batch,), generator=gen).to(device),
            )
            for _ in range(4)
        ]

        is_straggler = workload.straggler and rank == opts.straggler_rank
        extra = _straggler_work(opts, device) if is_straggler else None
        step_ms: list[float] = []
        extra_ms: list[float] = []

        def step(i: int) -> None:
            t0 = time.perf_counter()
            xb, yb = data[i % len(data)]
            loss = F.cross_entropy(model(xb), yb)
            if extra is not None:
                extra_ms.append(extra())
            loss.backward()  # DDP: all-reduce per bucket; FSDP: reduce-scatter per unit
            optim.step()
            optim.zero_grad(set_to_none=True)
            shared.sync(device)
            step_ms.append((time.perf_counter() - t0) * 1e3)

        for i in range(opts.warmup_iters):
            step(i)
        shared.sync(device)
        dist.barrier()
        step_ms.clear()
        extra_ms.clear()
        shared.profile_steps(run_dir, f"rank{rank}", device, opts.active, step)
        dist.barrier()
        active_ms = [round(v, 3) for v in step_ms[-opts.active :]]
        mine = {
            "rank": rank,
            "profiled_step_wall_ms": active_ms,
            "straggler_extra_ms": [round(v, 3) for v in extra_ms[-opts.active :]],
            "env": env_seen,
            "ddp": _ddp_info(model) if workload.strategy == "ddp" else None,
        }
        if rank == 0:
            mine["common"] = {
                "workload": workload.name,
                "summary": workload.summary,
                "world_size": opts.world_size,
                "backend": opts.backend,
                "device": opts.device,
                "nvlink_multicast_off_env": env_seen,
                "model": {
                    **dataclasses.asdict(size),
                    "params": n_params,
                    "param_tensors": n_tensors,
                    "grad_bytes_fp32": 4 * n_params,
                },
                "wrap": wrap,
                "steps_before_profiler": opts.warmup_iters,
                "profiler": {
                    "wait": WAIT_STEPS,
                    "warmup": WARMUP_STEPS,
                    "active": opts.active,
                    "record_shapes": True,
                    "profile_memory": True,
                    "with_stack": False,
                },
            }
            print(
                f"  [{workload.name}] world_size={opts.world_size} backend={opts.backend}"
                f" {n_params / 1e6:.1f} M parameters ({wrap}); rank0 steps (ms): {active_ms}",
                flush=True,
            )
        # no all_gather_object (it needs numpy): the parent merges these parts
        parts = run_dir / PARTS_DIR
        parts.mkdir(exist_ok=True)
        (parts / f"rank{rank}.json").write_text(json.dumps(mine))
    finally:
        dist.destroy_process_group()


def _straggler_work(opts: Options, device: Any) -> Any:
    """A callable doing ``opts.straggler_ms`` of extra work; returns the ms it took."""
    import torch

    target_s = opts.straggler_ms / 1e3
    if opts.straggler_work == "sleep":

        def sleep() -> float:
            t0 = time.perf_counter()
            time.sleep(target_s)
            return (time.perf_counter() - t0) * 1e3

        return sleep

    n = 256 if opts.quick else 4096
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)

    def timed(k: int) -> float:
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(k):
                torch.mm(a, b)
            end.record()
            end.synchronize()  # only the straggler syncs here, before its backward
            return float(start.elapsed_time(end))
        t0 = time.perf_counter()
        for _ in range(k):
            torch.mm(a, b)
        return (time.perf_counter() - t0) * 1e3

    timed(2)  # warm-up
    per = max(timed(4) / 4, 1e-3)
    count = max(1, math.ceil(opts.straggler_ms / per))
    return lambda: timed(count)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def record(opts: Options, name: str) -> Path:
    """Spawn ``opts.world_size`` ranks recording ``name`` into ``<out>/<name>``."""
    import shutil

    import torch.multiprocessing as mp

    run_dir = opts.out / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    mp.spawn(
        _rank_main,
        args=(opts, name, run_dir, _free_port()),
        nprocs=opts.world_size,
        join=True,
    )
    return run_dir


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    shared = _shared()
    opts.out.mkdir(parents=True, exist_ok=True)
    env = shared.environment_info(opts)  # reads opts.device only
    env["nvlink_multicast_off_env"] = {k: os.environ.get(k) for k in NVLS_OFF_ENV}
    print("environment:", json.dumps(env), flush=True)
    command = " ".join([Path(sys.argv[0]).name] + list(argv if argv is not None else sys.argv[1:]))
    failed: list[str] = []
    runs: dict[str, dict[str, int]] = {}
    for name in opts.workloads:
        print(f"== {name} ({WORKLOADS[name].summary})", flush=True)
        t0 = time.perf_counter()
        try:
            run_dir = record(opts, name)
        except Exception:  # keep recording the other workloads
            traceback.print_exc()
            failed.append(name)
            continue
        print(f"  [{name}] recorded in {time.perf_counter() - t0:.1f}s", flush=True)
        runs[name] = shared.describe_run(run_dir)
        summaries, problems = check_run(run_dir, WORKLOADS[name], opts.world_size, opts.active)
        for rank, s in summaries.items():
            print(
                f"  [{name}] {rank}: {len(s['steps'])} steps {s['steps'][:1]}..{s['steps'][-1:]},"
                f" c10d {s['c10d_ops']}, annotations {s['backend_ops']},"
                f" record_param_comms {s['record_param_comms']},"
                f" nccl kernels {sum(s['nccl_kernels'].values())}",
                flush=True,
            )
        if not needs_collectives(WORKLOADS[name], opts.world_size):
            print(f"  [{name}] note: world size 1, FSDP issues no collectives: not checked")
        for p in problems:
            print(f"  [{name}] PROBLEM: {p}", flush=True)
        info_path = run_dir / RUN_INFO_NAME
        info = merge_rank_parts(run_dir, opts, WORKLOADS[name])
        info.update(
            command=command,
            environment=env,
            files=runs[name],
            trace_summary={
                r: {k: v for k, v in s.items() if k not in ("file", "bytes")}
                for r, s in summaries.items()
            },
            check_problems=problems,
        )
        info_path.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        if problems and opts.check:
            failed.append(name)

    total = sum(s for sizes in runs.values() for s in sizes.values())
    n_files = sum(len(s) for s in runs.values())
    print(f"total trace size: {total / 1e6:.2f} MB in {n_files} file(s)")
    # merge into <out>/recording_info.json like record_sample_logs.py does
    top_path = opts.out / RUN_INFO_NAME
    top: dict[str, Any] = {}
    if top_path.exists():
        with contextlib.suppress(Exception):
            top = json.loads(top_path.read_text())
    top.setdefault("runs", {}).update(runs)
    top.setdefault("run_commands", {}).update(dict.fromkeys(runs, command))
    top.setdefault("distributed", {}).update(
        {
            name: {
                "world_size": opts.world_size,
                "backend": opts.backend,
                "environment": env,
                "info": f"{name}/{RUN_INFO_NAME}",
            }
            for name in runs
        }
    )
    top_path.write_text(json.dumps(top, indent=2, sort_keys=True) + "\n")
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
