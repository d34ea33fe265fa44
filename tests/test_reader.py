"""Reader rules on tiny hand-written traces: exact values."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.trace import TraceFormatError, TraceIOError, TraceTooLargeError
from tb_kineto_insights.trace.reader import read_trace


def names(trace, kind):  # type: ignore[no-untyped-def]
    return [trace.names[i] for i in trace.tables[kind].name]


def test_object_root_with_keys_after_events(tmp_path: Path) -> None:
    text = (
        '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H200", '
        '"totalGlobalMem": 150000000000}], "traceEvents": ['
        + json.dumps(kernel("k1", 10.0, 5.0))
        + "], "
        '"distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8}, '
        '"traceName": "x", "baseTimeNanoseconds": 1700000000000000000}'
    )
    tr = read_trace(str(write_trace(tmp_path / "a.json", text=text)))
    assert names(tr, "kernel") == ["k1"]
    assert tr.rank == 3 and tr.world_size == 8
    assert tr.health.device_properties[0]["totalGlobalMem"] == 150000000000
    assert tr.health.metadata["baseTimeNanoseconds"] == 1700000000000000000
    assert tr.health.metadata["schemaVersion"] == 1
    assert tr.health.root == "object"


def test_bare_array_root(tmp_path: Path) -> None:
    events = [cpu("aten::mm", 1.0, 2.0), kernel("gemm", 2.0, 3.0)]
    tr = read_trace(str(write_trace(tmp_path / "legacy.json", text=json.dumps(events))))
    assert tr.health.root == "array"
    assert names(tr, "cpu_op") == ["aten::mm"]
    assert tr.kernels.start_ns.tolist() == [2000]
    assert tr.kernels.dur_ns.tolist() == [3000]


def test_gzip_by_magic_not_suffix(tmp_path: Path) -> None:
    p1 = write_trace(tmp_path / "plain_named.json", [kernel("k", 1, 1)], gz=True)
    p2 = write_trace(tmp_path / "gz_named.json.gz", [kernel("k", 1, 1)], gz=False)
    t1, t2 = read_trace(str(p1)), read_trace(str(p2))
    assert t1.health.compressed is True and len(t1.kernels) == 1
    assert t2.health.compressed is False and len(t2.kernels) == 1


def test_bare_nan_inf_na_tokens_are_repaired_and_counted(tmp_path: Path) -> None:
    text = (
        '{"traceEvents": ['
        '{"ph": "X", "cat": "kernel", "name": "a NaN inside a string", "pid": 0, "tid": 7,'
        ' "ts": 1, "dur": 2, "args": {"device": 0, "stream": 7, "occupancy": NaN}},'
        '{"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 5, "dur": inf,'
        ' "args": {"device": 0, "stream": 7}},'
        '{"ph": "X", "cat": "kernel", "name": "k3", "pid": 0, "tid": 7, "ts": 9, "dur": 1,'
        ' "args": {"device": N/A, "stream": 7, "x": -Infinity}}'
        "]}"
    )
    tr = read_trace(str(write_trace(tmp_path / "t.json", text=text)))
    assert tr.health.repairs == {"nan_token": 1, "inf_token": 2, "na_token": 1}
    # the string is untouched; k2 lost its duration (inf → null) and is skipped
    assert names(tr, "kernel") == ["a NaN inside a string", "k3"]
    assert tr.health.skipped == {"missing_dur": 1}
    # k3's device became null → falls back to pid
    assert tr.kernels.device.tolist() == [0, 0]


def test_lone_backslashes_in_names(tmp_path: Path) -> None:
    text = (
        '{"traceEvents": [{"ph": "X", "cat": "python_function", '
        '"name": "C:\\work\\model.py(12): forward", "pid": 1, "tid": 1, "ts": 1, "dur": 1},'
        '{"ph": "X", "cat": "cpu_op", "name": "ok\\\\fine\\n", "pid": 1, "tid": 1,'
        ' "ts": 2, "dur": 1}]}'
    )
    tr = read_trace(str(write_trace(tmp_path / "t.json", text=text)))
    assert names(tr, "python_function") == ["C:\\work\\model.py(12): forward"]
    assert names(tr, "cpu_op") == ["ok\\fine\n"]
    assert tr.health.repairs == {"lone_backslash": 2}


def test_integers_above_2_63(tmp_path: Path) -> None:
    big = 2**64 + 5
    ev = kernel("k", 1, 1)
    ev["args"]["External id"] = big
    ev["args"]["huge"] = 10**30
    ev["args"]["correlation"] = 2**63 + 1
    tr = read_trace(str(write_trace(tmp_path / "t.json", [ev, kernel("k", 3, 1, corr=42)])))
    assert len(tr.kernels) == 2
    assert tr.kernels.external_id.tolist() == [-1, -1]  # out of int64: treated as absent
    assert tr.kernels.correlation.tolist() == [-1, 42]


def test_ns_resolution_timestamps_are_exact(tmp_path: Path) -> None:
    # 19 significant digits: a float64 cannot hold them
    text = (
        '{"traceEvents": ['
        '{"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7,'
        ' "ts": 1712195495519689.047, "dur": 1.001, "args": {"device": 0, "stream": 7}},'
        '{"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7,'
        ' "ts": 1712195495519690.048, "dur": 0.999, "args": {"device": 0, "stream": 7}}'
        "]}"
    )
    tr = read_trace(str(write_trace(tmp_path / "t.json", text=text)))
    assert tr.health.exact_ns_timestamps is True
    assert tr.kernels.start_ns.tolist() == [1712195495519689047, 1712195495519690048]
    assert tr.kernels.dur_ns.tolist() == [1001, 999]
    # back to back: the first ends exactly where the second starts, no rounding overlap
    assert int(tr.kernels.end_ns[0]) == int(tr.kernels.start_ns[1])


def test_small_float_timestamps_keep_ns(tmp_path: Path) -> None:
    tr = read_trace(
        str(write_trace(tmp_path / "t.json", [kernel("a", 4458677009853.422, 2636.669)]))
    )
    assert tr.kernels.start_ns.tolist() == [4458677009853422]
    assert tr.kernels.dur_ns.tolist() == [2636669]


def test_implausible_durations_are_quarantined(tmp_path: Path) -> None:
    events = [
        kernel("neg", 10, -5),
        kernel("years", 10, 3.0e13),
        kernel("ok", 10, 5),
        kernel("week_minus", 10, 7 * 24 * 3600 * 1e6 - 1),
    ]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    assert names(tr, "kernel") == ["ok", "week_minus"]
    assert tr.health.quarantined == {"negative_duration": 1, "duration_over_7_days": 1}


def test_events_missing_cat_dur_name_are_skipped_and_counted(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "nocat", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "nodur", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "X", "cat": "cpu_op", "name": "nots", "pid": 1, "tid": 1, "dur": 1},
        {"cat": "cpu_op", "name": "noph", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "B", "cat": "cpu_op", "name": "begin", "pid": 1, "tid": 1, "ts": 1},
        cpu("good", 1, 1),
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
    ]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    assert names(tr, "cpu_op") == ["good"]
    assert tr.health.skipped == {
        "missing_cat": 1,
        "missing_name": 1,
        "missing_dur": 1,
        "missing_ts": 1,
        "missing_ph": 1,
        "unsupported_phase_B": 1,
    }
    assert tr.health.event_count == 8
    assert tr.process_names == {1: "python"}


def test_string_stream_ids_and_unknown_categories(tmp_path: Path) -> None:
    events = [
        kernel("k0", 1, 1, stream="0x0"),
        kernel("k1", 2, 1, stream="0x1a"),
        kernel("k2", 3, 1, stream="12"),
        {"ph": "X", "cat": "mtia_ccp_events", "name": "job", "pid": 5, "tid": 5, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "mtia_runtime", "name": "launch", "pid": 5, "tid": 5, "ts": 1, "dur": 1},
    ]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    assert tr.kernels.stream.tolist() == [0, 26, 12]
    assert tr.health.string_ids == 6  # tid and args.stream, 3 kernels each
    assert names(tr, "other") == ["job"]
    assert names(tr, "runtime") == ["launch"]
    assert tr.health.category_counts == {"kernel": 3, "mtia_ccp_events": 1, "mtia_runtime": 1}


def test_memory_events_any_device_type(tmp_path: Path) -> None:
    def mem(ts: float, b: int, dt: int, did: int, **extra: int) -> dict[str, object]:
        args = {"Device Type": dt, "Device Id": did, "Bytes": b, **extra}
        return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 2, "ts": ts, "args": args}

    events = [
        mem(3, -512, 1, 0, Addr=4096, **{"Total Allocated": 0, "Total Reserved": 2097152}),
        mem(1, 512, 1, 0, Addr=4096, **{"Total Allocated": 512, "Total Reserved": 2097152}),
        mem(2, 64, 19, 3),  # MTIA, old-style without Addr or totals
    ]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    mt = tr.memory
    assert mt.ts_ns.tolist() == [1000, 2000, 3000]
    assert mt.bytes.tolist() == [512, 64, -512]
    assert mt.device_type.tolist() == [1, 19, 1]
    assert mt.device_id.tolist() == [0, 3, 0]
    assert mt.addr.tolist() == [4096, -1, 4096]
    assert mt.total_allocated_bytes.tolist() == [512, -1, 0]
    assert tr.health.flags["has_memory"] and tr.health.flags["has_memory_totals"]


def test_flows_and_collective_args(tmp_path: Path) -> None:
    k = kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 5, 9)
    k["args"].update(
        {
            "Collective name": "allreduce",
            "In msg nelems": 1048576,
            "Out msg nelems": 1048576,
            "dtype": "Float",
            "Group size": 2,
            "Process Group Name": "0",
            "Process Group Ranks": "[0, 1]",
            "Seq": 17,
        }
    )
    events = [
        kernel("first", 1, 1),
        k,
        {"ph": "s", "id": 1, "pid": 100, "tid": 1, "ts": 0.5, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 1, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "s", "id": 9, "pid": 100, "tid": 1, "ts": 2, "cat": "fwdbwd", "name": "fwdbwd"},
    ]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    comm = tr.kernels.comm
    assert list(comm) == [1]
    c = comm[1]
    assert (c.collective_name, c.in_msg_nelems, c.dtype, c.group_size, c.seq) == (
        "allreduce",
        1048576,
        "Float",
        2,
        17,
    )
    assert c.process_group_ranks == "[0, 1]"
    assert tr.flows.id.tolist() == [1, 1, 9]
    assert tr.flows.phase.tolist() == [0, 1, 0]
    assert tr.flows.launch.tolist() == [True, True, False]


def test_kineto_log_and_record_counts(tmp_path: Path) -> None:
    info = [
        "INFO:2024-04-03 18:51:36 1102:1102 CuptiActivityProfiler.cpp:300] Record counts: "
        "Out-of-range = 3829, Blocklisted runtime = 56517, Invalid ext correlations = 0, "
        "CUPTI stopped early? = 1",
    ]
    p = write_trace(tmp_path / "t.json", [kernel("k", 1, 1)], INFO=info, ERROR=["lost 3 events"])
    tr = read_trace(str(p))
    assert tr.health.kineto_record_counts == {
        "Out-of-range": 3829,
        "Blocklisted runtime": 56517,
        "Invalid ext correlations": 0,
        "CUPTI stopped early?": 1,
    }
    assert tr.health.kineto_log[-1] == "ERROR: lost 3 events"


def test_record_counts_line_of_spaces_reads_in_linear_time(tmp_path: Path) -> None:
    """Issue 32 §3, the reproduction: an INFO line ``Record counts: x<1500 spaces>x``
    (1.8 KB) made the record-count regex backtrack for minutes; now no count, at once,
    and 100x the spaces stays linear."""
    import time

    from tb_kineto_insights.trace.assemble import record_counts

    line = "Record counts: x" + " " * 1500 + "x"
    p = write_trace(tmp_path / "t.json", [kernel("k", 1, 1)], INFO=[line])
    started = time.perf_counter()
    tr = read_trace(str(p))
    assert tr.health.kineto_record_counts == {}
    assert record_counts("Record counts: x" + " " * 150_000 + "x") == {}
    assert record_counts("Record counts: " + "a " * 100_000 + "= 1") == {"a " * 99_999 + "a": 1}
    assert time.perf_counter() - started < 2.0
    assert record_counts("no counts = 3") == {}
    assert record_counts("Record counts: a = 12x, = 3, b, c=, d = 99999999999999999999") == {
        "a": 12
    }
    assert record_counts("Record counts: a=1\nb=2") == {"a": 1}


def test_invalid_field_types_decode_loosely(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "strdur", "pid": 1, "tid": 1, "ts": 1, "dur": "2.5"},
        {"ph": "X", "cat": "cpu_op", "name": "objdur", "pid": 1, "tid": 1, "ts": 1, "dur": {}},
        cpu("good", 3, 1),
    ]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    assert names(tr, "cpu_op") == ["strdur", "good"]
    assert tr.cpu_ops.dur_ns.tolist() == [2500, 1000]
    assert tr.health.repairs == {}
    assert tr.health.skipped == {"invalid_field_type": 1}
    assert tr.health.event_count == 3


def _many_events() -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    for i in range(300):
        events.append(kernel(f"k{i % 7}", 1000 + 10 * i, 3 + i % 5, corr=i))
        events.append(cpu("tricky }, { name" if i % 50 == 0 else "aten::add", 1000 + 10 * i, 2))
    return events


@pytest.mark.parametrize("block_bytes", [37, 101, 4096])
def test_small_blocks_give_the_same_trace(tmp_path: Path, block_bytes: int) -> None:
    p = write_trace(tmp_path / "t.json.gz", _many_events(), gz=True, distributedInfo={"rank": 1})
    ref = read_trace(str(p))
    tr = read_trace(str(p), block_bytes=block_bytes)
    assert len(tr.kernels) == 300 and len(tr.cpu_ops) == 300
    assert tr.rank == 1
    for kind in ("kernel", "cpu_op"):
        a, b = ref.tables[kind], tr.tables[kind]
        assert names(ref, kind) == names(tr, kind)
        for col in ("start_ns", "dur_ns", "correlation", "stream"):
            assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert names(tr, "cpu_op").count("tricky }, { name") == 6


def _event_ends(events: list[dict[str, object]], head: str) -> list[int]:
    """End offset of each event in ``head + ", ".join(json.dumps(e))``."""
    ends, pos = [], len(head)
    for e in events:
        pos += len(json.dumps(e))
        ends.append(pos)
        pos += 2
    return ends


def test_truncated_json_keeps_complete_events(tmp_path: Path) -> None:
    # was: a TraceFormatError for the whole file; now the events before the cut are kept
    events = _many_events()
    full = json.dumps({"traceEvents": events}).encode()
    cut = len(full) // 2
    p = write_trace(tmp_path / "cut.pt.trace.json", text=full[:cut])
    tr = read_trace(str(p), block_bytes=1024)
    ends = _event_ends(events, '{"traceEvents": [')
    complete = sum(end <= cut for end in ends)
    assert len(tr.kernels) + len(tr.cpu_ops) == complete
    assert tr.health.lost_events == 1 and tr.health.damaged_regions == 1
    start = ends[complete] - len(json.dumps(events[complete]))
    assert tr.health.damage[0]["start"] == start
    assert tr.health.lost_bytes == cut - start
    assert "truncated" in tr.health.damage[0]["problem"]


def test_truncated_gzip_keeps_complete_events(tmp_path: Path) -> None:
    # was: a TraceFormatError for the whole file; now the events before the cut are kept
    events = _many_events()
    data = gzip.compress(json.dumps({"traceEvents": events}).encode())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    produced = len(zlib.decompressobj(wbits=31).decompress(data[: len(data) // 2]))
    tr = read_trace(str(p))
    complete = sum(end <= produced for end in _event_ends(events, '{"traceEvents": ['))
    assert len(tr.kernels) + len(tr.cpu_ops) == complete
    problems = [d["problem"] for d in tr.health.damage]
    assert any("gzip stream ends early" in x for x in problems)
    assert tr.health.lost_events == 1


def test_malformed_json_offset(tmp_path: Path) -> None:
    # was: a TraceFormatError for the whole file; now the two good events are kept
    good = json.dumps(kernel("k", 1, 1))
    text = '{"traceEvents": [' + good + ", " + good + ', {"ph": "X", , }]}'
    tr = read_trace(str(write_trace(tmp_path / "bad.json", text=text)))
    assert len(tr.kernels) == 2
    assert tr.health.damage[0]["offset"] == text.index(", }")  # the stray comma
    assert tr.health.damage[0]["start"] == text.index('{"ph": "X", ,')
    assert tr.health.lost_events == 1
    only_bad = '{"traceEvents": [{"ph": "X", , }]}'
    with pytest.raises(TraceFormatError, match="nothing usable") as err:
        read_trace(str(write_trace(tmp_path / "bad2.json", text=only_bad)))
    assert err.value.offset == only_bad.index(", }")


def test_not_json_and_empty_and_no_events(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="not a JSON trace") as err:
        read_trace(str(write_trace(tmp_path / "x.json", text="hello world")))
    assert err.value.offset == 0
    with pytest.raises(TraceFormatError, match="empty file"):
        read_trace(str(write_trace(tmp_path / "e.json", text="  \n")))
    with pytest.raises(TraceFormatError, match="no traceEvents"):
        read_trace(str(write_trace(tmp_path / "c.json", text='{"lr": 0.1}')))
    with pytest.raises(TraceIOError, match="file not found"):
        read_trace(str(tmp_path / "missing.json"))


def test_gzip_bomb_hits_the_cap(tmp_path: Path) -> None:
    text = '{"traceEvents": [' + " " * 5_000_000 + "]}"
    p = write_trace(tmp_path / "bomb.json.gz", text=text, gz=True)
    assert p.stat().st_size < 10_000
    with pytest.raises(TraceTooLargeError) as err:
        read_trace(str(p), max_json_bytes=1_000_000)
    assert str(p) in str(err.value) and "1000000" in str(err.value)
    assert len(read_trace(str(p), max_json_bytes=6_000_000).kernels) == 0


def test_concatenated_gzip_members(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": [kernel("k", 1, 1)]}).encode()
    p = tmp_path / "multi.json.gz"
    p.write_bytes(gzip.compress(text[:10]) + gzip.compress(text[10:]))
    assert len(read_trace(str(p)).kernels) == 1


def test_fsspec_memory_url() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    data = gzip.compress(json.dumps({"traceEvents": [kernel("k", 1, 1)]}).encode())
    with fs.open("/reader_test/w.1.pt.trace.json.gz", "wb") as f:
        f.write(data)
    try:
        tr = read_trace("memory:///reader_test/w.1.pt.trace.json.gz")
        assert names(tr, "kernel") == ["k"]
        assert tr.health.file_bytes == len(data)
    finally:
        fs.rm("/reader_test", recursive=True)


def test_whitespace_bomb_is_linear_and_bounded(tmp_path: Path) -> None:
    import time
    import zlib

    p = tmp_path / "pad.pt.trace.json.gz"
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with p.open("wb") as f:
        f.write(c.compress(b'{"traceEvents": ['))
        for _ in range(96):  # 96 MiB of spaces where an event should start
            f.write(c.compress(b" " * (1 << 20)))
        f.write(c.compress(json.dumps(kernel("k", 1, 1)).encode() + b"]}"))
        f.write(c.flush())
    t0 = time.perf_counter()
    tr = read_trace(str(p))
    assert len(tr.kernels) == 1  # padding between tokens is legal JSON
    assert time.perf_counter() - t0 < 10
    q = tmp_path / "endless.pt.trace.json.gz"
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with q.open("wb") as f:
        f.write(c.compress(b'{"traceEvents": [{"name": "'))
        for _ in range(80):  # one string longer than MAX_EVENT_BYTES
            f.write(c.compress(b"A" * (1 << 20)))
        f.write(c.flush())
    with pytest.raises(TraceFormatError, match="without the end of an event"):
        read_trace(str(q))
    with pytest.raises(TraceFormatError, match="empty file"):
        read_trace(str(write_trace(tmp_path / "ws.json", text=" " * 3_000_000)))


def test_deep_nesting_bom_and_invalid_utf8(tmp_path: Path) -> None:
    deep = write_trace(tmp_path / "deep.json", text="[" * 200_000 + "]" * 200_000)
    with pytest.raises(TraceFormatError, match="nested too deeply") as err:
        read_trace(str(deep))
    assert str(deep) in str(err.value)
    body = json.dumps({"traceEvents": [kernel("k", 1, 1)]}).encode()
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + body)
    assert len(read_trace(str(bom)).kernels) == 1
    latin = tmp_path / "latin.json"
    latin.write_bytes(body.replace(b'"k"', b'"caf\xe9"'))
    tr = read_trace(str(latin))
    assert names(tr, "kernel") == ["caf\ufffd"]
    assert tr.health.repairs == {"invalid_utf8": 1}


def test_absurdly_long_names_are_cut(tmp_path: Path) -> None:
    tr = read_trace(str(write_trace(tmp_path / "t.json", [kernel("K" * 300_000, 1, 1)])))
    assert len(tr.names[0]) == 16385 and tr.names[0].endswith("…")
    assert tr.health.repairs == {"long_name_truncated": 1}


def test_corrupt_gzip_with_nothing_decoded_is_named_not_empty(tmp_path: Path) -> None:
    """A gzip header followed by garbage used to be reported as an "empty file"."""
    bad = tmp_path / "w.1.pt.trace.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbagegarbage")
    with pytest.raises(TraceFormatError, match="corrupt gzip data") as err:
        read_trace(str(bad))
    assert "empty file" not in str(err.value)
    assert str(bad) in str(err.value)
    assert err.value.offset == 0
    cut = tmp_path / "c.1.pt.trace.json.gz"  # a header only: the stream ends early
    cut.write_bytes(gzip.compress(b'{"traceEvents": []}')[:10])
    with pytest.raises(TraceFormatError, match="gzip stream ends early"):
        read_trace(str(cut))


def test_oversized_top_level_objects_are_left_out_and_counted(tmp_path: Path) -> None:
    """deviceProperties / distributedInfo / tb_kineto_insights are copied into every
    summary as they are: one over ROOT_OBJECT_MAX_BYTES is left out (counted in
    ``skipped``), the others and every event are kept."""
    from tb_kineto_insights.trace.assemble import ROOT_OBJECT_MAX_BYTES

    huge_label = "x" * (ROOT_OBJECT_MAX_BYTES + 1)
    path = write_trace(
        tmp_path / "t.json",
        [kernel("k", 10, 5), cpu("op", 0, 20)],
        tb_kineto_insights={"preset": "light", "label": huge_label},
        distributedInfo={"rank": 0, "world_size": 1},
        deviceProperties=[{"name": "H200", "env": {f"NCCL_{i}": "1" for i in range(10_000)}}],
    )
    health = read_trace(str(path)).health
    assert health.run_metadata is None and health.device_properties == []
    assert health.distributed_info == {"rank": 0, "world_size": 1}
    assert health.skipped == {"oversized_tb_kineto_insights": 1, "oversized_deviceProperties": 1}
    assert health.event_count == 2
    # just under the cap is kept as it is
    small = write_trace(
        tmp_path / "s.json", [kernel("k", 10, 5)], tb_kineto_insights={"label": "x" * 1000}
    )
    kept = read_trace(str(small)).health
    assert kept.run_metadata == {"label": "x" * 1000} and kept.skipped == {}
