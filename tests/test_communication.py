"""Communication panel: the collective classifier against real kernel names, exact
numbers on tiny traces (overlap, bytes, bandwidth, sequence), the exposed-communication
diagnosis, and real traces cross-checked against the raw JSON.
Real traces: ``test_communication_real.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.analysis import collectives as co
from tb_kineto_insights.analysis.communication import communication_summary
from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.rules import area_diagnoses
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.schema.communication import CommunicationPanel
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.steps import StepsPanel
from tb_kineto_insights.trace.reader import read_trace

# --- the classifier -------------------------------------------------------------------

#: Every distinct NCCL kernel name in the shared real traces hta_nccl_a100,
#: hta_df_index_resolver, hta_sampled_2ranks and hta_trace_diff (copied literally).
REAL_COMM_KERNELS: dict[str, str] = {
    # hta_nccl_a100 (NCCL 2.17)
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": "all_reduce",
    "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": "broadcast",
    # hta_sampled_2ranks (both ranks)
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": (
        "send_recv"
    ),
    # hta_df_index_resolver, hta_trace_diff (older NCCL: ncclWorkElem argument)
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": "all_reduce",
    # hta_trace_diff
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)": "send_recv",
}

#: Names of newer NCCL (≥ 2.19 ``ncclDevKernel_*``), old NCCL (< 2.8) and RCCL as
#: published in profiles, plus lower-case and ``void`` variants.
OTHER_COMM_KERNELS: dict[str, str] = {
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "all_gather",
    "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)": "send_recv",
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)": "other_collective",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "all_reduce",
    "ncclDevKernel_AllReduce_Sum_f32_RING_SIMPLE": "all_reduce",
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": (
        "reduce_scatter"
    ),
    "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "broadcast",
    "ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "reduce",
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t": "send_recv",
    "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)": "all_gather",
    "ncclKernel_ReduceScatter_RING_LL_Sum_half(ncclWorkElem)": "reduce_scatter",
    "ncclAllReduceRingLLKernel_sum_f32(ncclColl)": "all_reduce",
    "ncclBroadcastRingLLKernel_copy_i8(ncclColl)": "broadcast",
    "void rcclGenericKernel<1, false>(ncclDevKernelArgsStorage<4096ul>)": "other_collective",
    "rcclGenericKernel": "other_collective",
    "nccldevkernel_allgather_ring_ll": "all_gather",
    "ncclkernel_allreduce_ring_ll_sum_float": "all_reduce",
    "void ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": "all_reduce",
}

NOT_COMM = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1>)",
    "ampere_sgemm_128x64_tn",
    "void cross_device_reduce_1stage<float, 8>(...)",
    "Memcpy DtoD (Device -> Device)",
    "triton_poi_fused_add_0",
    "broadcast_tensors",
    "aten::all_reduce_like",
    "record_param_comms",
    "",
]


def _exposed_diagnoses(
    comm: CommunicationPanel, steps: StepsPanel, th: Thresholds = DEFAULT_THRESHOLDS
) -> list[Diagnosis]:
    """The communication rules alone on these panels."""
    return area_diagnoses("communication", {"communication": comm, "steps": steps}, th)


@pytest.mark.parametrize("name,kind", sorted({**REAL_COMM_KERNELS, **OTHER_COMM_KERNELS}.items()))
def test_kernel_names(name: str, kind: str) -> None:
    assert co.is_communication_kernel(name)
    assert co.collective_kind(name) == kind
    assert co.collective_kind(name, None) == kind


@pytest.mark.parametrize("name", NOT_COMM)
def test_not_communication(name: str) -> None:
    assert co.collective_kind(name) is None
    assert not co.is_communication_kernel(name)


@pytest.mark.parametrize(
    "collective_name,kind",
    [
        ("allreduce", "all_reduce"),
        ("allreduce_coalesced", "all_reduce"),
        ("allgather", "all_gather"),
        ("all_gather_into_tensor", "all_gather"),
        ("all_gather_into_tensor_coalesced", "all_gather"),
        ("_allgather_base", "all_gather"),
        ("reduce_scatter_tensor", "reduce_scatter"),
        ("_reduce_scatter_base", "reduce_scatter"),
        ("reduce_scatter_tensor_coalesced", "reduce_scatter"),
        ("broadcast", "broadcast"),
        ("reduce", "reduce"),
        ("alltoall_base", "all_to_all"),
        ("alltoall", "all_to_all"),
        ("all_to_all_single", "all_to_all"),
        ("send", "send_recv"),
        ("recv", "send_recv"),
        ("recvAnySource", "send_recv"),
        ("barrier", "barrier"),
        ("gather", "other_collective"),
        ("scatter", "other_collective"),
    ],
)
def test_collective_names(collective_name: str, kind: str) -> None:
    # on the kernel, on record_param_comms, and winning over the kernel name
    assert co.collective_kind("record_param_comms", collective_name) == kind
    assert co.collective_kind("ncclDevKernel_Generic_4(x)", collective_name) == kind
    sendrecv = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"
    assert co.collective_kind(sendrecv, collective_name) == kind


def test_wait_is_not_a_collective_and_unknown_names() -> None:
    assert co.collective_kind("record_param_comms", "wait") is None
    assert co.collective_kind("record_param_comms", None) is None
    # an unknown collective name on a kernel falls back to the kernel name
    assert co.collective_kind("ncclKernel_Broadcast_RING_LL_Sum_int8_t(x)", "frob") == "broadcast"
    assert co.collective_kind("record_param_comms", "frobnicate") == "other_collective"


@pytest.mark.parametrize(
    "op,kind",
    [
        ("nccl:all_reduce", "all_reduce"),
        ("nccl:broadcast", "broadcast"),
        ("nccl:_all_gather_base", "all_gather"),
        ("nccl:_reduce_scatter_base", "reduce_scatter"),
        ("nccl:all_to_all", "all_to_all"),
        ("nccl:send", "send_recv"),
        ("nccl:recv", "send_recv"),
        ("nccl:something_new", "other_collective"),
        ("gloo:all_reduce", "all_reduce"),
        ("c10d::allreduce_", "all_reduce"),
        ("c10d::_allgather_base_", "all_gather"),
        ("c10d::alltoall_base_", "all_to_all"),
        ("c10d::broadcast_", "broadcast"),
        ("c10d::monitored_barrier_", "barrier"),
        ("c10d::wait", None),
        ("c10d::_register_process_group", None),
    ],
)
def test_op_names(op: str, kind: str | None) -> None:
    assert co.collective_kind(op) == kind


@pytest.mark.parametrize(
    "dtype,size",
    [
        ("Float", 4),
        ("Half", 2),
        ("BFloat16", 2),
        ("Double", 8),
        ("Long", 8),
        ("Int", 4),
        ("Short", 2),
        ("Byte", 1),
        ("Char", 1),
        ("Bool", 1),
        ("Float8_e4m3fn", 1),
        ("Float8_e5m2", 1),
        ("ComplexFloat", 8),
        ("float", 4),
        ("c10::BFloat16", 2),
        ("c10::Half", 2),
        ("signed char", 1),
        ("unsigned char", 1),
        ("long int", 8),
        ("torch.float32", 4),
        ("int64_t", 8),
        ("bfloat16", 2),
    ],
)
def test_dtype_sizes(dtype: str, size: int) -> None:
    assert co.dtype_size_bytes(dtype) == size


def test_dtype_unknown() -> None:
    assert co.dtype_size_bytes("Quaternion") is None
    assert co.dtype_size_bytes("") is None


def test_bus_bandwidth_factors() -> None:
    assert co.bus_bandwidth_factor("all_reduce", 2) == 1.0
    assert co.bus_bandwidth_factor("all_reduce", 8) == 1.75
    assert co.bus_bandwidth_factor("all_gather", 8) == 0.875
    assert co.bus_bandwidth_factor("reduce_scatter", 4) == 0.75
    assert co.bus_bandwidth_factor("all_to_all", 2) == 0.5
    assert co.bus_bandwidth_factor("broadcast", 8) == 1.0
    assert co.bus_bandwidth_factor("reduce", 8) == 1.0
    assert co.bus_bandwidth_factor("send_recv", 2) == 1.0
    assert co.bus_bandwidth_factor("barrier", 8) is None
    assert co.bus_bandwidth_factor("other_collective", 8) is None
    assert co.bus_bandwidth_factor("all_reduce", None) is None
    assert co.bus_bandwidth_factor("all_reduce", 0) is None


# --- tiny traces ----------------------------------------------------------------------


def launch(ts: float, dur: float, corr: int, tid: int = 1) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 100,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def step(n: int, ts: float, dur: float) -> dict[str, Any]:
    return cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


def with_args(event: dict[str, Any], **args: Any) -> dict[str, Any]:
    event = dict(event)
    event["args"] = {**event.get("args", {}), **args}
    return event


def comm_args(
    collective: str = "allreduce",
    nelems: int = 1000,
    dtype: str = "Float",
    group: int | None = 2,
    **more: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "Collective name": collective,
        "In msg nelems": nelems,
        "Out msg nelems": nelems,
        "dtype": dtype,
        **more,
    }
    if group is not None:
        out["Group size"] = group
    return out


AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
SR = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"


def summarise(tmp_path: Path, events: list[dict[str, Any]], **root: Any) -> dict[str, Any]:
    """The communication panel of a tiny trace, as built-ins (the JSON a front end reads)."""
    trace = read_trace(str(write_trace(tmp_path / "t.json", events, **root)))
    return _plain(communication_summary(build_index(trace)))


def _plain(panel: CommunicationPanel) -> dict[str, Any]:
    assert isinstance(panel, CommunicationPanel)
    out: dict[str, Any] = msgspec.to_builtins(panel)
    json.dumps(out, allow_nan=False)  # plain JSON, no NaN
    return out


def test_overlap_with_compute_on_the_same_device_only(tmp_path: Path) -> None:
    s = summarise(
        tmp_path,
        [
            step(1, 0, 200),
            kernel(AR, 0, 100, stream=20, device=0, corr=1),
            kernel("gemm", 60, 100, stream=7, device=0, corr=2),
            kernel("gemm_other_gpu", 0, 100, stream=7, device=1, corr=3),
        ],
    )
    assert s["has_collectives"] and s["kernel_count"] == 1 and s["collective_count"] == 1
    assert s["steps"] == [
        {
            "number": 1,
            "comm_us": 100.0,
            "overlapped_us": 40.0,
            "exposed_us": 60.0,
            "comm_fraction": 0.5,
            "exposed_fraction": 0.3,
            "wait_estimate_us": 0.0,
            "exposed_wait_estimate_us": 0.0,
            "exposed_transfer_estimate_us": 60.0,
        }
    ]
    assert (s["comm_us"], s["overlapped_us"], s["exposed_us"]) == (100.0, 40.0, 60.0)
    assert s["overlap_fraction"] == 0.4
    assert s["total_step_us"] == 200.0
    assert s["devices"] == [
        {
            "device": 0,
            "comm_us": 100.0,
            "overlapped_us": 40.0,
            "exposed_us": 60.0,
            "comm_fraction": 0.5,
            "exposed_fraction": 0.3,
        }
    ]
    # no args, no distributedInfo: kind from the kernel name, no bytes, notes say so
    (kind,) = s["kinds"]
    assert kind["kind"] == "all_reduce" and kind["count"] == 1 and kind["time_us"] == 100.0
    assert kind["bytes"] is None and kind["algbw_gbps"] is None and kind["busbw_gbps"] is None
    assert any("no message size" in n for n in s["notes"])


def test_comm_per_step_and_outside_steps(tmp_path: Path) -> None:
    s = summarise(
        tmp_path,
        [
            step(1, 0, 100),
            step(2, 100, 100),
            kernel(AR, 10, 20, stream=20, corr=1),
            kernel(AR, 20, 20, stream=21, corr=2),  # overlaps the first: union [10, 40)
            kernel(AR, 190, 20, stream=20, corr=3),  # crosses into step 2's end
            kernel("gemm", 0, 15, stream=7, corr=4),  # hides [10, 15)
            kernel(AR, 300, 5, stream=20, corr=5),  # outside every step (but in the span)
        ],
    )
    assert [st["comm_us"] for st in s["steps"]] == [30.0, 10.0]
    assert [st["exposed_us"] for st in s["steps"]] == [25.0, 10.0]
    assert [st["overlapped_us"] for st in s["steps"]] == [5.0, 0.0]
    assert s["comm_us"] == 40.0 and s["exposed_us"] == 35.0
    assert s["mean_comm_us"] == 20.0 and s["mean_exposed_us"] == 17.5
    assert s["comm_outside_steps_us"] == 15.0
    assert s["kinds"][0]["count"] == 4
    assert [e["step"] for e in s["sequence"]] == [1, 1, 2, None]


@pytest.mark.parametrize("group,busbw", [(2, 2**30 / 1e7), (8, 2**30 / 1e7 * 1.75)])
def test_allreduce_bus_bandwidth(tmp_path: Path, group: int, busbw: float) -> None:
    """1 GiB (2^28 floats) all-reduced in 10 ms: algbw = 2^30 B / 10 ms = 107.374 GB/s;
    busbw = algbw × 2(n−1)/n: × 1 for n = 2, × 1.75 for n = 8."""
    s = summarise(
        tmp_path,
        [
            step(1, 0, 20_000),
            with_args(kernel(AR, 0, 10_000, stream=20), **comm_args(nelems=2**28, group=group)),
        ],
    )
    (kind,) = s["kinds"]
    assert kind["bytes"] == 2**30
    assert kind["time_us"] == 10_000.0
    assert kind["algbw_gbps"] == pytest.approx(107.3741824, rel=1e-12)
    assert kind["busbw_gbps"] == pytest.approx(busbw, rel=1e-12)
    assert kind["group_sizes"] == [group]
    assert s["notes"] == []


def test_group_size_falls_back_to_world_size(tmp_path: Path) -> None:
    s = summarise(
        tmp_path,
        [
            step(1, 0, 20_000),
            with_args(kernel(AR, 0, 10_000, stream=20), **comm_args(nelems=2**28, group=None)),
        ],
        distributedInfo={"rank": 0, "world_size": 8, "backend": "nccl"},
    )
    (kind,) = s["kinds"]
    assert kind["group_sizes"] == [8]
    assert kind["busbw_gbps"] == pytest.approx(2**30 / 1e7 * 1.75, rel=1e-12)
    assert any("world_size (8)" in n for n in s["notes"])


def test_group_size_unknown(tmp_path: Path) -> None:
    s = summarise(
        tmp_path,
        [step(1, 0, 200), with_args(kernel(AR, 0, 100, stream=20), **comm_args(group=None))],
    )
    (kind,) = s["kinds"]
    assert kind["bytes"] == 4000 and kind["algbw_gbps"] == 4000 / 100_000
    assert kind["busbw_gbps"] is None
    assert any("Group size unknown" in n for n in s["notes"])


def test_bytes_from_the_launching_op(tmp_path: Path) -> None:
    """Kernels without args get sizes from the record_param_comms op that encloses their
    launch on the launching thread (Float: 4 B, BFloat16: 2 B per element); kernels whose
    launch is unknown get them through External id; the op's Seq and process group
    travel along."""
    events = [
        step(1, 0, 1000),
        # call 1: c10d::allreduce_ > record_param_comms(args) > nccl:all_reduce > launch
        cpu("c10d::allreduce_", 10, 50),
        with_args(
            cpu("record_param_comms", 12, 40),
            **comm_args(dtype="BFloat16", nelems=1000, **{"Process Group Name": "3", "Seq": 7}),
        ),
        cpu("nccl:all_reduce", 15, 30, cat="user_annotation"),
        launch(20, 5, corr=11),
        kernel(AR, 100, 50, stream=20, corr=11),
        # call 2: Float, different thread
        with_args(
            cpu("record_param_comms", 200, 40, tid=2),
            **comm_args(dtype="Float", nelems=1000, **{"Process Group Name": "3", "Seq": 8}),
        ),
        launch(210, 5, corr=12, tid=2),
        kernel(AR, 300, 50, stream=20, corr=12),
        # call 3: no launch record; linked by External id
        with_args(
            cpu("record_param_comms", 400, 40, tid=3),
            **comm_args(dtype="Half", nelems=10, **{"Process Group Name": "3", "Seq": 9}),
            **{"External id": 77},
        ),
        with_args(kernel(AR, 500, 50, stream=20, corr=99), **{"External id": 77}),
    ]
    s = summarise(tmp_path, events)
    (kind,) = s["kinds"]
    assert kind["count"] == 3
    assert kind["bytes"] == 2000 + 4000 + 20
    assert kind["sized_count"] == 3
    assert kind["kind_from"] == {"op": 3}
    assert [(e["pg"], e["seq"], e["bytes"]) for e in s["sequence"]] == [
        ("3", 7, 2000),
        ("3", 8, 4000),
        ("3", 9, 20),
    ]
    assert s["seq_source"] == "args"
    assert s["ddp_bucket_bytes"]["sizes"] == [
        {"bytes": 4000, "count": 1},
        {"bytes": 2000, "count": 1},
        {"bytes": 20, "count": 1},
    ]
    assert s["ddp_bucket_bytes"]["min_bytes"] == 20
    assert s["ddp_bucket_bytes"]["median_bytes"] == 2000.0
    assert s["ddp_bucket_bytes"]["max_bytes"] == 4000
    hist = s["ddp_bucket_bytes"]["histogram"]
    assert sum(hist["counts"]) == 3
    assert hist["counts"][:3] == [1, 2, 0]  # [0, 1 KiB), [1 KiB, 4 KiB), [4 KiB, 16 KiB)


def test_kind_from_the_launching_op_and_kernel_args_win(tmp_path: Path) -> None:
    """NCCL runs all_to_all as SendRecv kernels: the nccl:all_to_all op that launched
    the kernel names the kind. The kernel's own Collective name wins over the op."""
    events = [
        step(1, 0, 1000),
        cpu("nccl:all_to_all", 10, 30, cat="user_annotation"),
        launch(20, 5, corr=1),
        kernel(SR, 100, 50, stream=20, corr=1),
        cpu("nccl:all_to_all", 200, 30, cat="user_annotation"),
        launch(210, 5, corr=2),
        with_args(kernel(SR, 300, 50, stream=20, corr=2), **comm_args("send", nelems=8)),
        kernel(SR, 400, 50, stream=20, corr=3),  # no launch, no args: the name decides
    ]
    s = summarise(tmp_path, events)
    kinds = {k["kind"]: k for k in s["kinds"]}
    assert set(kinds) == {"all_to_all", "send_recv"}
    assert kinds["all_to_all"]["count"] == 1 and kinds["all_to_all"]["kind_from"] == {"op": 1}
    assert kinds["send_recv"]["count"] == 2
    assert kinds["send_recv"]["kind_from"] == {"kernel_args": 1, "kernel_name": 1}
    assert [e["kind"] for e in s["sequence"]] == ["all_to_all", "send_recv", "send_recv"]
    assert [e["seq"] for e in s["sequence"]] == [0, 1, 2]  # k-th of process group "0"
    assert s["seq_source"] == "order"
    assert any("run send_recv kernels" in n and "all_to_all" in n for n in s["notes"])


def test_kernels_of_one_call_are_one_collective(tmp_path: Path) -> None:
    events = [
        step(1, 0, 1000),
        with_args(cpu("record_param_comms", 10, 30), **comm_args(nelems=100, group=2)),
        launch(12, 2, corr=1),
        launch(16, 2, corr=2),
        kernel(AR, 100, 50, stream=20, corr=1),
        kernel(AR, 120, 50, stream=21, corr=2),
    ]
    s = summarise(tmp_path, events)
    (kind,) = s["kinds"]
    assert (kind["count"], kind["kernel_count"]) == (1, 2)
    assert kind["time_us"] == 70.0  # first kernel start to last kernel end
    assert kind["bytes"] == 400
    assert s["sequence"][0]["dur_us"] == 70.0


def test_no_collectives(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", [step(1, 0, 100), kernel("gemm", 0, 50)])
    index = build_index(read_trace(str(path)))
    panel = communication_summary(index)
    s = _plain(panel)
    assert not s["has_collectives"]
    assert s["kinds"] == [] and s["sequence"] == [] and s["comm_us"] == 0.0
    assert s["steps"][0]["comm_fraction"] == 0.0
    assert s["overlap_fraction"] is None
    assert s["notes"] == ["No NCCL/RCCL communication kernels in this trace."]
    assert _exposed_diagnoses(panel, steps_summary(index)) == []


def test_host_collectives_without_kernels(tmp_path: Path) -> None:
    s = summarise(
        tmp_path,
        [
            step(1, 0, 100),
            with_args(cpu("record_param_comms", 0, 10), **comm_args(group=1)),
            cpu("nccl:all_reduce", 1, 5, cat="user_annotation"),
        ],
    )
    assert not s["has_collectives"] and s["collective_ops"] == 1
    assert "no NCCL/RCCL kernel ran" in s["notes"][0]


def test_empty_trace(tmp_path: Path) -> None:
    s = summarise(tmp_path, [cpu("aten::add", 0, 10)])
    assert not s["has_collectives"] and s["kernel_count"] == 0


def test_sequence_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tb_kineto_insights.analysis import communication

    monkeypatch.setattr(communication, "SEQUENCE_LIMIT", 2)
    s = summarise(tmp_path, [step(1, 0, 100)] + [kernel(AR, 10 * i, 5) for i in range(5)])
    assert len(s["sequence"]) == 2
    assert s["sequence_truncated"] and s["sequence_total"] == 5


def _diag_inputs(tmp_path: Path) -> tuple[CommunicationPanel, StepsPanel]:
    trace = read_trace(
        str(
            write_trace(
                tmp_path / "d.json",
                [
                    step(1, 0, 200),
                    kernel(AR, 0, 100, stream=20, corr=1),
                    kernel("gemm", 60, 100, stream=7, corr=2),
                ],
            )
        )
    )
    index = build_index(trace)
    return communication_summary(index), steps_summary(index)


def test_exposed_communication_diagnosis(tmp_path: Path) -> None:
    comm, steps = _diag_inputs(tmp_path)  # exposed 60 of 200 µs: 30 %
    (d,) = _exposed_diagnoses(comm, steps)
    assert d.id == "exposed_communication" and d.severity == "high"
    assert d.panel == "communication"
    assert d.impact_fraction == pytest.approx(0.3)
    assert d.evidence["exposed_fraction"] == pytest.approx(0.3)
    assert d.evidence["exposed_us_per_step"] == 60.0
    assert d.evidence["top_kind"] == "all_reduce"
    for word in ("bucket_cap_mb", "gradient_as_bucket_view=True", "no_sync()", "prefetch"):
        assert word in d.recommendation
    assert set(msgspec.to_builtins(d)) == {
        "id",
        "severity",
        "title",
        "evidence",
        "recommendation",
        "panel",
        "impact_fraction",
    }
    # severity follows the impact (30 % of the step: high from impact_high_fraction)
    medium = _exposed_diagnoses(comm, steps, Thresholds(impact_high_fraction=0.5))
    assert medium[0].severity == "medium"
    assert _exposed_diagnoses(comm, steps, Thresholds(exposed_comm_fraction=0.31)) == []


def test_exposed_communication_that_is_mostly_waiting(tmp_path: Path) -> None:
    """Two 4 kB all-reduces; the fastest took 20 µs, so the 120 µs one waited ~100 µs at
    its start, all of it exposed: the diagnosis says waiting, with no bucket advice, and
    its impact is the exposed wait estimate (100 of 2 × 200 µs of step)."""
    events = [step(1, 0, 200), step(2, 200, 200)]
    for i, (ts, dur) in enumerate(((0, 120), (200, 20))):
        events.append(with_args(kernel(AR, ts, dur, stream=20, corr=i + 1), **comm_args()))
    trace = read_trace(str(write_trace(tmp_path / "w.json", events)))
    index = build_index(trace)
    comm, steps = communication_summary(index), steps_summary(index)
    assert comm.exposed_wait_estimate_us_per_step == 50.0
    assert comm.exposed_transfer_estimate_us_per_step == 20.0
    (d,) = _exposed_diagnoses(comm, steps)
    assert "mostly waiting for other ranks" in d.title
    assert "bucket_cap_mb" not in d.recommendation
    assert "view across ranks" in d.recommendation
    assert d.impact_fraction == pytest.approx(0.25) and d.severity == "medium"
    assert d.evidence["exposed_wait_estimate_fraction"] == pytest.approx(100 / 140)
    # the transfer case: exposed 20 % of the step, none of it waiting -> bucket advice
    comm2, steps2 = _diag_inputs(tmp_path)
    (d2,) = _exposed_diagnoses(comm2, steps2)
    assert "bucket_cap_mb" in d2.recommendation and "transfer" in d2.title


def test_transfer_queued_behind_a_wait_counts_as_waiting(tmp_path: Path) -> None:
    """Step 1 (0-400 µs): all-reduce A [0, 120) waits 100 µs (the same 4 kB message took
    20 µs elsewhere) under a gemm [0, 125); B [122, 142) and C [144, 164) are queued
    behind A (gaps 2 µs) and run partly exposed after the gemm: 17 + 20 = 37 µs of
    transfer at their fastest. Without A's 100 µs wait the chain would have run under the
    gemm, so the 37 µs count as exposed wait (min(100, 37)); step 2's lone all-reduce
    [600, 620) (no queue) stays transfer. With 50 µs gaps (no queue) B [170, 190) and
    C [240, 260) keep their 40 µs as transfer."""

    def run(gap_us: float) -> CommunicationPanel:
        events = [step(1, 0, 400), step(2, 400, 400), kernel("gemm", 0, 125, stream=7, corr=9)]
        times = ((0, 120), (120 + gap_us, 20), (140 + 2 * gap_us, 20), (600, 20))
        for i, (ts, dur) in enumerate(times):
            events.append(with_args(kernel(AR, ts, dur, stream=20, corr=i + 1), **comm_args()))
        index = build_index(read_trace(str(write_trace(tmp_path / f"q{gap_us}.json", events))))
        return communication_summary(index)

    queued = run(2.0)
    step1, step2 = queued.steps
    assert step1.exposed_us == 37.0
    assert step1.wait_estimate_us == 100.0
    assert step1.exposed_wait_estimate_us == 37.0
    assert step1.exposed_transfer_estimate_us == 0.0
    assert step2.exposed_wait_estimate_us == 0.0
    assert step2.exposed_transfer_estimate_us == 20.0
    apart = run(50.0).steps[0]
    assert apart.exposed_us == 40.0
    assert apart.exposed_wait_estimate_us == 0.0
    assert apart.exposed_transfer_estimate_us == 40.0
