"""Name rules: short kernel names and name classes."""

from __future__ import annotations

from tb_kineto_insights.analysis import names as nm


def test_short_kernel_names() -> None:
    s = nm.short_kernel_name
    assert (
        s(
            "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, "
            "at::detail::Array<char*, 3> >(int, at::native::AddFunctor<float>, "
            "at::detail::Array<char*, 3>)"
        )
        == "at::native::vectorized_elementwise_kernel<…>"
    )
    assert (
        s("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int)")
        == "at::native::(anonymous namespace)::vectorized_layer_norm_kernel<…>"
    )
    assert s("ampere_sgemm_128x64_tn") == "ampere_sgemm_128x64_tn"
    assert (
        s("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)")
        == "ncclKernel_AllReduce_RING_LL_Sum_float"
    )
    assert s("triton_poi_fused_add_0") == "triton_poi_fused_add_0"


def test_name_classes() -> None:
    assert nm.is_kernel_launch("cudaLaunchKernel") and nm.is_kernel_launch("cuLaunchKernelEx")
    assert nm.is_kernel_launch("hipExtModuleLaunchKernel") and nm.is_kernel_launch(
        "hipLaunchKernel"
    )
    assert nm.is_graph_launch("cudaGraphLaunch") and nm.is_kernel_launch("cudaGraphLaunch")
    assert nm.is_launch("cudaMemcpyAsync") and not nm.is_kernel_launch("cudaMemcpyAsync")
    assert not nm.is_launch("cudaEventQuery")
    assert nm.is_sync("cudaStreamSynchronize") and nm.is_sync("cudaMemcpy")
    assert nm.is_sync("aten::item") and nm.is_sync("hipDeviceSynchronize")
    assert not nm.is_sync("cudaMemcpyAsync")
    assert nm.is_dataloader("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")
    assert nm.is_optimizer("Optimizer.step#AdamW.step")
    for name in (
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "void ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
        "rcclGenericKernel",
    ):
        assert nm.is_communication_kernel(name), name
    assert not nm.is_communication_kernel("ampere_sgemm_128x64_tn")
    assert nm.is_pageable_memcpy("Memcpy HtoD (Pageable -> Device)")
