"""Every real trace in ../shared/traces/public (and sample_logs/) read, with counts
checked against an independent pass of the standard library's json module."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_LOGS

from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.trace.reader import read_trace

KIND_OF = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "python_function": "python_function",  # with_stack=True (sample_logs/capture_full)
}
WEEK_US = 7 * 24 * 3600 * 1e6


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json*") if p.is_file())


def _independent(path: Path) -> dict[str, Any]:
    """Counts by a plain json.loads pass, with the reader's rules written out again."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kinds: Counter[str] = Counter()
    dur_ns: Counter[str] = Counter()
    memory = flows = 0
    for e in events:
        ph = e.get("ph")
        if ph == "X":
            cat = e.get("cat")
            if cat is None or e.get("name") is None or "ts" not in e or "dur" not in e:
                continue
            if not 0 <= e["dur"] <= WEEK_US:
                continue
            kind = KIND_OF.get(str(cat).lower())
            if kind is None:
                kind = "runtime" if str(cat).lower().endswith("_runtime") else "other"
            kinds[kind] += 1
            dur_ns[kind] += round(e["dur"] * 1000)
        elif ph == "i" and e.get("name") == "[memory]":
            memory += 1
        elif ph in ("s", "f", "t"):
            flows += 1
    return {
        "events": len(events),
        "kinds": kinds,
        "dur_ns": dur_ns,
        "memory": memory,
        "flows": flows,
    }


def _check(path: Path) -> None:
    trace = read_trace(str(path))
    expected = _independent(path)
    health = trace.health
    assert health.event_count == expected["events"]
    stream_kinds = ("kernel", "memcpy", "memset")  # clipped at the next event on a stream
    for kind, count in expected["kinds"].items():
        table = trace.tables[kind]
        assert len(table) == count, kind
        if kind not in stream_kinds:
            got = int(table.dur_ns.sum())
            assert got == pytest.approx(expected["dur_ns"][kind], abs=count), kind
        assert bool((table.start_ns[1:] >= table.start_ns[:-1]).all()), f"{kind} not sorted"
    on_streams = sum(int(trace.tables[k].dur_ns.sum()) for k in stream_kinds)
    count = sum(expected["kinds"][k] for k in stream_kinds)
    removed = health.stream_overlap_clipped["removed_ns"]
    assert on_streams + removed == pytest.approx(
        sum(expected["dur_ns"][k] for k in stream_kinds), abs=count
    )
    assert health.stream_overlap_clipped["overran_whole_events"] == 0
    assert len(trace.memory) == expected["memory"]
    assert len(trace.flows) == expected["flows"]
    assert not health.skipped and not health.quarantined and not health.repairs


def test_every_public_trace_is_read(shared_traces: Path) -> None:
    files = _files(shared_traces)
    assert len(files) == 17
    for path in files:
        _check(path)


def test_sample_logs_are_read() -> None:
    files = [
        Path(span.path)
        for run in discover(str(SAMPLE_LOGS))
        for worker in run.workers
        for span in worker.spans
    ]
    if not files:
        pytest.skip("sample_logs/ has no traces yet")
    for path in files:
        _check(path)
        assert read_trace(str(path)).health.flags["has_steps"]


def test_known_facts_of_public_traces(shared_traces: Path) -> None:
    nccl = read_trace(str(shared_traces / "hta_nccl_a100" / "nccl_data.json.gz"))
    assert nccl.rank == 0 and nccl.world_size == 2
    assert nccl.health.kineto_record_counts["Out-of-range"] == 4181
    names = {nccl.names[nccl.kernels.name[r]].split("(")[0] for r in nccl.kernels.comm}
    assert "ncclKernel_AllReduce_RING_LL_Sum_float" in names
    ns = read_trace(
        str(shared_traces / "hta_ns_resolution" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    )
    assert ns.health.exact_ns_timestamps
    # the first kernel's start as written in the file: 1712195495519689.047 µs
    raw = json.loads(gzip.decompress((Path(ns.health.path)).read_bytes()), parse_float=str)
    first = min(
        (e for e in raw["traceEvents"] if e.get("cat") == "kernel"),
        key=lambda e: int(e["ts"].replace(".", "")),
    )
    assert int(ns.kernels.start_ns[0]) == int(first["ts"].replace(".", ""))
    amd = read_trace(
        str(shared_traces / "hta_amd_mi250" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    )
    assert len(amd.kernels) == 14 and (amd.kernels.stream >= 0).all()
    mtia = read_trace(str(shared_traces / "hta_mtia" / "mtia_rank_0.json.gz"))
    assert len(mtia.kernels) == 0 and len(mtia.tables["other"]) == 25817
    assert mtia.health.category_counts["mtia_ccp_events"] == 25814
