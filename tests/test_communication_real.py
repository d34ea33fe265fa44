"""The tests of ``test_communication.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_communication import REAL_COMM_KERNELS, _exposed_diagnoses, _plain

from tb_kineto_insights.analysis import collectives as co
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.communication import communication_summary
from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.trace.reader import read_trace

REAL_TRACE_FOLDERS = (
    "hta_nccl_a100",
    "hta_df_index_resolver",
    "hta_sampled_2ranks",
    "hta_trace_diff",
)


def test_real_kernel_names_are_classified(shared_traces: Path) -> None:
    """Every kernel name in the four traces: the NCCL ones (independently: the name starts
    with "nccl") are exactly REAL_COMM_KERNELS with the listed kind; no other kernel is
    communication; names.is_communication_kernel agrees."""
    found: set[str] = set()
    for folder in REAL_TRACE_FOLDERS:
        for path in sorted((shared_traces / folder).rglob("*.json*")):
            trace = read_trace(str(path))
            for nid in np.unique(trace.kernels.name).tolist():
                name = trace.names[nid]
                kind = co.collective_kind(name)
                assert (kind is not None) == name.startswith("nccl"), name
                assert nm.is_communication_kernel(name) == co.is_communication_kernel(name)
                if kind is not None:
                    assert REAL_COMM_KERNELS[name] == kind
                    found.add(name)
    assert found == set(REAL_COMM_KERNELS)


def test_waiting_rank_alone_is_told_it_waits(h200x2: Path) -> None:
    """ddp_straggler rank 0 profiled alone (no peer trace): its first bucket waits ~19 ms
    for rank 1 under backward and the 12 buckets queued behind it end up exposed; the
    estimate from this one trace must say waiting (the view across ranks measures 12.84
    of 14.44 ms/step as wait) and give no bucket advice."""
    (path,) = sorted((h200x2 / "ddp_straggler").glob("rank0*.pt.trace.json.gz"))
    index = build_index(read_trace(str(path)))
    comm = communication_summary(index)
    assert 12_000 < comm.exposed_wait_estimate_us_per_step < 15_500
    assert comm.exposed_wait_estimate_fraction > 0.8
    (d,) = _exposed_diagnoses(comm, steps_summary(index))
    assert "mostly waiting for other ranks" in d.title
    assert "bucket_cap_mb" not in d.recommendation


def test_span_level_exposed_communication_on_real_runs(h200x2: Path) -> None:
    """ddp_default / ddp_tuned expose 1-5 % of the step: silent. ddp_straggler rank 1
    (the late rank) exposes 1 %: silent."""
    for folder in ("ddp_default", "ddp_tuned", "ddp_straggler"):
        for path in sorted((h200x2 / folder).glob("rank*.pt.trace.json.gz")):
            if folder == "ddp_straggler" and path.name.startswith("rank0"):
                continue  # the waiting rank: re-qualified by the view across ranks
            trace = read_trace(str(path))
            index = build_index(trace)
            comm = communication_summary(index)
            assert comm.exposed_fraction < 0.06
            assert _exposed_diagnoses(comm, steps_summary(index)) == []


# --- real traces ----------------------------------------------------------------------


def _raw_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def _summary_of(path: Path) -> dict[str, Any]:
    return _plain(communication_summary(build_index(read_trace(str(path)))))


def test_hta_nccl_a100(shared_traces: Path) -> None:
    path = shared_traces / "hta_nccl_a100" / "nccl_data.json.gz"
    s = _summary_of(path)
    raw = sorted(
        (e for e in _raw_events(path) if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
        key=lambda e: e["ts"],
    )
    kinds = {k["kind"]: k for k in s["kinds"]}
    assert set(kinds) == {"all_reduce", "broadcast"}
    assert kinds["all_reduce"]["count"] == 15 and kinds["broadcast"]["count"] == 6
    # the first broadcast in the file: In msg nelems 53120, dtype Float → 212480 bytes
    first = raw[0]
    assert first["args"]["Collective name"] == "broadcast"
    assert (first["args"]["In msg nelems"], first["args"]["dtype"]) == (53120, "Float")
    assert s["sequence"][0]["kind"] == "broadcast" and s["sequence"][0]["bytes"] == 212480
    # totals, independently from the raw args (Float and Long in this file)
    size = {"Float": 4, "Long": 8}
    for kind, name in (("all_reduce", "allreduce"), ("broadcast", "broadcast")):
        mine = [e for e in raw if e["args"]["Collective name"] == name]
        assert kinds[kind]["bytes"] == sum(
            size[e["args"]["dtype"]] * e["args"]["In msg nelems"] for e in mine
        )
        assert kinds[kind]["time_us"] == pytest.approx(sum(e["dur"] for e in mine))
        assert kinds[kind]["group_sizes"] == [2]
        # n = 2: both factors are 1 (2(n−1)/n for AllReduce, 1 for Broadcast)
        assert kinds[kind]["busbw_gbps"] == pytest.approx(kinds[kind]["algbw_gbps"])
        assert kinds[kind]["algbw_gbps"] > 0
    assert kinds["all_reduce"]["kind_from"] == {"kernel_args": 15}
    assert s["ddp_bucket_bytes"]["count"] == 15
    assert s["ddp_bucket_bytes"]["total_bytes"] == kinds["all_reduce"]["bytes"]
    assert s["notes"] == []
    assert [st["number"] for st in s["steps"]] == [4, 5, 6]
    assert 0 < s["exposed_us"] <= s["comm_us"]


def test_hta_df_index_resolver(shared_traces: Path) -> None:
    path = shared_traces / "hta_df_index_resolver" / "df_index_resolver.json.gz"
    s = _summary_of(path)
    raw = [e for e in _raw_events(path) if e.get("cat") == "kernel"]
    comm = [e for e in raw if e["name"].startswith("ncclKernel_AllReduce")]
    assert len(comm) == 2020  # the folder's README: ~2,000 AllReduce kernels
    (kind,) = s["kinds"]
    assert kind["kind"] == "all_reduce" and kind["count"] == len(comm)
    assert s["kernel_count"] == len(comm) and s["collective_count"] == len(comm)
    assert kind["time_us"] == pytest.approx(sum(e["dur"] for e in comm))
    # independent union of the communication kernels (all inside the steps)
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in comm)
    union, end = 0.0, -1.0
    for a, b in spans:
        if b > end:
            union += b - max(a, end)
            end = b
    assert s["comm_us"] == pytest.approx(union)
    assert s["comm_outside_steps_us"] == 0.0
    assert len(s["steps"]) == 5
    # no sizes in this trace's args: no bandwidth, and the notes say so
    assert kind["bytes"] is None and kind["busbw_gbps"] is None
    assert any("no message size" in n for n in s["notes"])
    assert kind["group_sizes"] == [2]  # distributedInfo.world_size
    assert s["exposed_fraction"] is not None and 0 < s["exposed_fraction"] <= 1
