"""Readable names: kernel names with template arguments folded, categories of op names.

All name tests live here so that each rule is written once.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tb_kineto_insights.analysis.collectives import is_communication_kernel

_LEADING_KEYWORDS = re.compile(r"^(?:void|__global__|static|inline)\s+")


@lru_cache(maxsize=65536)
def short_kernel_name(name: str) -> str:
    """Fold template arguments and parameter lists of a (demangled) kernel name.

    ``void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>,
    at::detail::Array<char*, 3> >(int, at::native::AddFunctor<float>, ...)`` becomes
    ``at::native::vectorized_elementwise_kernel<…>``. Names without templates or
    parameters come back unchanged (``ampere_sgemm_128x64_tn``). Parentheses inside
    template arguments (``(anonymous namespace)``) are handled by depth counting.
    """
    text = _LEADING_KEYWORDS.sub("", name.strip())
    out: list[str] = []
    depth_angle = 0
    depth_paren = 0
    folded = False
    text = text.replace("(anonymous namespace)", "\x00")
    for ch in text:
        if ch == "<" and depth_paren == 0:
            if depth_angle == 0:
                out.append("<…>")
                folded = True
            depth_angle += 1
            continue
        if ch == ">" and depth_angle > 0 and depth_paren == 0:
            depth_angle -= 1
            continue
        if depth_angle > 0:
            if ch == "(":
                depth_paren += 1
            elif ch == ")" and depth_paren > 0:
                depth_paren -= 1
            continue
        if ch == "(" and depth_paren == 0:
            break  # parameter list: drop it and everything after
        out.append(ch)
    short = "".join(out).strip().replace("\x00", "(anonymous namespace)")
    if not short:
        return name
    return short if folded or short != text.replace("\x00", "(anonymous namespace)") else name


#: Runtime/driver calls that put work on the GPU (one call may launch many kernels:
#: a CUDA graph launch).
_LAUNCH = re.compile(
    r"^(?:cuda|cu|hip|hipExt|hipModule)(?:LaunchKernel|LaunchKernelExC|LaunchKernelEx|"
    r"LaunchKernel_v\d+|LaunchKernelExC_v\d+|LaunchCooperativeKernel|"
    r"LaunchCooperativeKernelMultiDevice|ModuleLaunchKernel|GraphLaunch|GraphLaunch_v\d+|"
    r"MemcpyAsync|Memcpy2DAsync|Memcpy3DAsync|MemsetAsync|MemsetD8Async|MemsetD32Async|"
    r"MemcpyHtoDAsync|MemcpyDtoHAsync|MemcpyDtoDAsync|MemcpyPeerAsync)(?:_v\d+|_ptsz)?$"
)
_GRAPH_LAUNCH = re.compile(r"^(?:cuda|cu|hip)GraphLaunch(?:_v\d+)?$")
#: Host calls that wait for the GPU: the host drains the queue instead of running ahead.
_SYNC_RUNTIME = re.compile(
    r"^(?:cuda|cu|hip)(?:DeviceSynchronize|StreamSynchronize|EventSynchronize|CtxSynchronize|"
    r"Memcpy|Memcpy2D|Memcpy3D|MemcpyDtoH|MemcpyHtoD|MemcpyDtoD|MemcpyPeer|Memset|"
    r"StreamWaitEvent_sync)(?:_v\d+|_ptds)?$"
)
#: Device-memory allocation calls of the runtime/driver (not the stream-ordered
#: ``cudaMallocAsync``/``cudaFreeAsync`` pool, which neither blocks nor synchronises).
_ALLOCATOR_CALL = re.compile(
    r"^(?:cuda|cu|hip)(?:Malloc|Free|MemAlloc|MemFree|MallocManaged|ExtMallocWithFlags)"
    r"(?:_v\d+|_v2)?$"
)
_SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::nonzero"})
_DATALOADER = re.compile(r"^enumerate\((?:DataLoader|DataPipe)\)#")
_OPTIMIZER = re.compile(r"^Optimizer\.(?:step|zero_grad)#")


def is_launch(name: str) -> bool:
    """A runtime/driver call that enqueues GPU work (kernel, graph, async copy/memset)."""
    return bool(_LAUNCH.match(name))


def is_kernel_launch(name: str) -> bool:
    """A launch call for kernels (not copies or memsets)."""
    return is_launch(name) and ("Launch" in name)


def is_graph_launch(name: str) -> bool:
    """``cudaGraphLaunch`` and friends: one call, many kernels."""
    return bool(_GRAPH_LAUNCH.match(name))


def is_sync(name: str) -> bool:
    """A host call or op that blocks until the GPU catches up."""
    return bool(_SYNC_RUNTIME.match(name)) or name in _SYNC_OPS


def is_allocator_call(name: str) -> bool:
    """``cudaMalloc`` / ``cudaFree`` (``cuMemAlloc``/``cuMemFree``, HIP ``hipMalloc``/
    ``hipFree``...): a caching allocator going to the driver. ``cudaFree`` waits for the
    device to finish its work (an implicit synchronisation)."""
    return bool(_ALLOCATOR_CALL.match(name))


def is_dataloader(name: str) -> bool:
    """``enumerate(DataLoader)#…`` / ``enumerate(DataPipe)#…``: fetching a batch."""
    return bool(_DATALOADER.match(name))


def is_optimizer(name: str) -> bool:
    """``Optimizer.step#…`` / ``Optimizer.zero_grad#…`` annotations."""
    return bool(_OPTIMIZER.match(name))


def is_optimizer_step(name: str) -> bool:
    """``Optimizer.step#…`` alone (one per optimizer step, not ``zero_grad``)."""
    return name.startswith("Optimizer.step#")


def is_step_marker(name: str) -> bool:
    """``ProfilerStep#N``: the profiler's step annotation."""
    return name.startswith("ProfilerStep#")


def is_not_step_marker(name: str) -> bool:
    """Anything but a ``ProfilerStep#N`` annotation."""
    return not name.startswith("ProfilerStep#")


def is_allocator_free(name: str) -> bool:
    """``cudaFree`` and its kin (:func:`is_allocator_call` naming a free)."""
    return is_allocator_call(name) and "Free" in name


def is_kernel_launch_call(name: str) -> bool:
    """Any call named ``…LaunchKernel…`` (``cudaLaunchKernel``, ``cuLaunchKernelEx``)."""
    return "LaunchKernel" in name


__all__ = ["is_communication_kernel"]  # re-exported: collectives.py is the one classifier


def is_compiled_kernel(name: str) -> bool:
    """A kernel generated by torch.compile's Inductor backend (Triton: ``triton_poi_*``,
    ``triton_red_*``, ``triton_per_*``, ``triton_tem_*``, …)."""
    return name.startswith("triton_") or name.startswith("void triton_")


#: The ranges torch.compile records while it compiles (Dynamo tracing, AOTAutograd,
#: Inductor lowering and codegen, Triton autotuning): the whole frame's compile and the
#: backward graph's (compiled lazily at the first backward), every ``dynamo_timed``
#: phase, and the ``…_data: compile_id=F/N`` annotations beside them. Running compiled
#: code (``Torch-Compiled Region``, ``CompiledFunction``, ``TorchDynamo Cache Lookup``)
#: is not compiling.
_COMPILE_NAMES = frozenset(
    {
        "dynamo",
        "entire_frame_compile",
        "entire_backward_compile",
        "backend_compile",
        "inductor_compile",
        "compile_fx_inner",
        "fx_codegen_and_compile",
        "create_aot_dispatcher_function",
        "_compile.compile_inner",
        "OutputGraph.call_user_compiler",
        "CachingAutotuner.benchmark_all_configs",
    }
)
_COMPILE_ID = re.compile(r"compile_id=(\S+)")


def is_compile(name: str) -> bool:
    """A range torch.compile records while compiling (:data:`_COMPILE_NAMES`, a
    ``… (dynamo_timed)`` phase, a ``compile_attempt_N``, a ``…: compile_id=…``
    annotation)."""
    return (
        name in _COMPILE_NAMES
        or name.endswith("(dynamo_timed)")
        or name.startswith("compile_attempt_")
        or "compile_id=" in name
    )


def compile_id(name: str) -> str | None:
    """``0/13`` of an annotation named ``…: compile_id=0/13`` (Dynamo's frame / compile
    number: one more per recompile of the frame), else None."""
    match = _COMPILE_ID.search(name)
    return match.group(1) if match else None


def is_pageable_memcpy(name: str) -> bool:
    """Kineto names copies from pageable host memory ``Memcpy HtoD (Pageable -> Device)``."""
    return "Pageable" in name
