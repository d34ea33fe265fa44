"""Broken timestamps, damaged files and typed errors: exact values on tiny traces, the
known answers of ../shared/cases, checked ranges on real traces."""

from __future__ import annotations

import gzip
import json
import random
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import H200X2, SAMPLE_LOGS, as_json, cpu, kernel, write_trace

from tb_kineto_insights.cli.main import main as cli_main
from tb_kineto_insights.logdir.discovery import parse_span_index
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace import decode
from tb_kineto_insights.trace.errors import TraceError, TraceFormatError
from tb_kineto_insights.trace.reader import read_trace


def _one(folder: Path) -> str:
    files = sorted(folder.glob("worker0*.json*"))
    assert files, folder
    return str(files[0])


def _ids(summary: dict[str, Any]) -> set[str]:
    return {d["id"] for d in summary["diagnoses"]}


def _same_tables(a: Any, b: Any) -> None:
    for kind in a.tables:
        ta, tb = a.tables[kind], b.tables[kind]
        for col in ("start_ns", "dur_ns", "device", "stream", "correlation"):
            assert np.array_equal(getattr(ta, col), getattr(tb, col)), (kind, col)


# -- broken timestamps ------------------------------------------------------------------


def test_far_outside_timestamps_are_quarantined(tmp_path: Path) -> None:
    base = 5_000_000_000.0  # µs, as CUPTI's clock since boot
    events = [cpu("ProfilerStep#1", base, 10_000, cat="user_annotation")]
    events += [kernel(f"k{i}", base + 100 * i, 50, corr=i) for i in range(10)]
    events += [kernel("zero", 0, 0, corr=90), kernel("hours_before", base - 3 * 3600e6, 5)]
    events += [kernel("huge", 1e300, 5, corr=91)]
    events += [cpu("seconds_before", base - 30e6, 5)]  # 30 s before the step: legitimate
    events += [{"ph": "f", "id": 90, "pid": 0, "tid": 7, "ts": 0, "cat": "ac2g", "name": "a"}]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    assert sorted(tr.names[i] for i in tr.kernels.name) == [f"k{i}" for i in range(10)]
    assert [tr.names[i] for i in tr.cpu_ops.name] == ["seconds_before"]
    assert tr.health.quarantined == {"ts_out_of_range": 1, "ts_far_outside_trace": 3}
    assert tr.health.quarantined_by_kind == {
        "kernel": {"ts_out_of_range": 1, "ts_far_outside_trace": 2},
        "flow": {"ts_far_outside_trace": 1},
    }
    assert len(tr.flows) == 0
    assert tr.health.kind_counts["kernel"] == 10


def test_long_pause_in_a_long_trace_is_kept(tmp_path: Path) -> None:
    # 3 hours of events with a 20-minute pause: the pause is under 10x the span
    events = [cpu(f"op{i}", 1e9 + i * 60e6, 5) for i in range(160)]
    events += [cpu("after_pause", 1e9 + 160 * 60e6 + 20 * 60e6, 5)]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    assert len(tr.cpu_ops) == 161 and tr.health.quarantined == {}


def test_exact_ts_then_huge_numbers_are_typed(tmp_path: Path) -> None:
    text = (
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": 1712195495519689.047,'
        ' "dur": 1, "pid": 0, "tid": 7}, {"ph": "X", "cat": "kernel", "name": "b",'
        ' "ts": 1e400, "dur": 1, "pid": 0, "tid": 7}, {"ph": "X", "cat": "kernel",'
        ' "name": "c", "ts": 1e300, "dur": 1e400, "pid": 0, "tid": 7}]}'
    )
    tr = read_trace(str(write_trace(tmp_path / "t.json", text=text)))
    assert tr.kernels.start_ns.tolist() == [1712195495519689047]
    assert tr.health.quarantined == {"ts_out_of_range": 2}


def test_b5_kernels_ts_zero(shared_cases: Path) -> None:
    path = _one(shared_cases / "B5_kernels_ts_zero")
    tr = read_trace(path)
    assert len(tr.kernels) == 50
    assert tr.health.quarantined_by_kind == {
        "kernel": {"ts_far_outside_trace": 30},
        "flow": {"ts_far_outside_trace": 30},
    }
    assert int(tr.kernels.start_ns.min()) > 4_000_000_000 * 1000  # none left at ts 0
    assert tr.quarantined_correlations.size == 30
    b5 = as_json(summarize_file(path))
    b0 = as_json(summarize_file(_one(shared_cases / "B0_baseline")))
    # the two steps whose kernels lost their timestamps are left out of every panel:
    # their GPU time is unknown, and counting it as idle gave 37.5 % utilization
    assert b5["health"]["steps_without_gpu_data"] == [10, 11]  # ProfilerStep#10, #11
    assert b5["steps"]["count"] == 2 and b0["steps"]["count"] == 4
    for key in ("mean_step_us", "min_step_us", "max_step_us", "gpu_utilization_fraction"):
        assert b5["steps"][key] == b0["steps"][key], key
    sev0 = {d["id"]: d["severity"] for d in b0["diagnoses"]}
    sev5 = {d["id"]: d["severity"] for d in b5["diagnoses"]}
    assert "low_gpu_utilization" not in sev5
    assert sev5["gpu_idle_host_sync"] == sev0["gpu_idle_host_sync"] == "medium"
    # and, with 2 of its 4 steps left out for lost GPU data, too few for the noise rule
    assert set(sev5) - set(sev0) == {"trace_data_loss", "trace_too_few_steps"}
    assert set(sev0) - set(sev5) == set()
    # host-side panels keep every step: a broken kernel timestamp does not touch the
    # [memory] events, so the growth is B0's, over all 4 steps
    (mem5,), (mem0,) = b5["memory"]["devices"], b0["memory"]["devices"]
    assert mem5["growth"] == mem0["growth"]
    assert mem5["growth"]["steps_used"] == 4 and mem5["growth"]["bytes_per_step"] == 4 * 2**20
    assert mem5["per_step"] == mem0["per_step"]
    loss = [d for d in b5["diagnoses"] if d["id"] == "trace_data_loss"]
    assert loss[0]["evidence"]["quarantined_events"] == 60
    assert "trace_data_loss" not in _ids(b0)


def test_stream_overlap_is_clipped_exactly(tmp_path: Path) -> None:
    events = [
        kernel("long", 100, 50, corr=1),  # runs over "inside" and into "next"
        kernel("inside", 110, 5, corr=2),
        kernel("next", 140, 20, corr=3),
        kernel("pdl", 200, 10, corr=4),  # partial overlap of 2 µs
        kernel("after", 208, 10, corr=5),
        kernel("other_stream", 105, 100, stream=9, corr=6),  # different stream: untouched
    ]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    dur = {tr.names[n]: int(d) for n, d in zip(tr.kernels.name, tr.kernels.dur_ns, strict=True)}
    assert dur == {
        "long": 10_000,
        "inside": 5_000,
        "next": 20_000,
        "pdl": 8_000,
        "after": 10_000,
        "other_stream": 100_000,
    }
    assert tr.health.stream_overlap_clipped == {
        "events": 2,  # "long" (at 110, swallowing "inside") and "pdl" (at 208)
        "removed_ns": 40_000 + 2_000,
        "overran_whole_events": 1,
    }


def test_b7_kernel_dur_overflow(shared_cases: Path) -> None:
    path = _one(shared_cases / "B7_kernel_dur_overflow_same_stream")
    tr = read_trace(path)
    clipped = tr.health.stream_overlap_clipped
    assert clipped["events"] == 1 and clipped["overran_whole_events"] == 1
    assert 1_599_000_000 < clipped["removed_ns"] < 1_600_000_000  # 1.6 s less ~300 µs
    b7 = as_json(summarize_file(path))
    b0 = as_json(summarize_file(_one(shared_cases / "B0_baseline")))
    assert b7["steps"]["count"] == b0["steps"]["count"] == 4
    assert b7["steps"]["min_step_us"] > 0
    assert b7["steps"]["max_step_us"] == pytest.approx(b0["steps"]["max_step_us"], rel=0.02)
    assert b7["steps"]["mean_step_us"] == pytest.approx(b0["steps"]["mean_step_us"], rel=0.02)
    gpu = b7["steps"]["gpu_utilization_fraction"]
    assert gpu == pytest.approx(b0["steps"]["gpu_utilization_fraction"], abs=0.01)
    assert "trace_data_loss" in _ids(b7)
    (loss,) = [d for d in b7["diagnoses"] if d["id"] == "trace_data_loss"]
    assert loss["title"].startswith("1 GPU event(s) had a duration running over")
    assert "clipped, 1.6 s removed" in loss["title"]  # issue 17 §10: the unit that fits


@pytest.mark.parametrize("run", ["ddp_default", "ddp_tuned", "ddp_straggler", "fsdp"])
def test_real_h200_traces_have_no_broken_timestamps(run: str) -> None:
    folder = H200X2 / run
    if not folder.is_dir():
        pytest.skip("../shared/traces/h200x2 not found")
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        h = read_trace(str(path)).health
        assert h.quarantined == {} and h.damaged_regions == 0
        assert h.stream_overlap_clipped["overran_whole_events"] == 0


def test_real_partial_overlaps_are_small() -> None:
    # H200 sample: 175 kernels overlap the next on their stream by at most 4.7 µs
    # (programmatic dependent launch style); clipped, but no data loss
    folder = SAMPLE_LOGS / "dataloader_workers0"
    if not folder.is_dir():
        pytest.skip("sample_logs missing")
    path = _one(folder)
    h = read_trace(path).health
    clip = h.stream_overlap_clipped
    assert 100 <= clip["events"] <= 300 and clip["overran_whole_events"] == 0
    assert clip["removed_ns"] < clip["events"] * 5_000
    assert "trace_data_loss" not in _ids(as_json(summarize_file(path)))


# -- damaged files ----------------------------------------------------------------------


def test_b1_unescaped_quote_is_salvaged(shared_cases: Path) -> None:
    folder = shared_cases / "B1_unescaped_quote_in_name"
    bad = read_trace(str(folder / "worker0.1700000000000.pt.trace.json"))
    good = read_trace(str(folder / "worker1.1700000000001.pt.trace.json"))
    clean = read_trace(_one(shared_cases / "B0_baseline"))
    h = bad.health
    assert (h.damaged_regions, h.lost_events, h.event_count) == (1, 1, 431)
    assert h.damage[0]["offset"] == 109296  # the raw quote's next byte
    assert h.damage[0]["start"] == 109205  # the python_function event holding it
    assert good.health.damaged_regions == 0 and good.health.event_count == 431
    _same_tables(good, clean)
    _same_tables(bad, clean)  # only the extra python_function event was lost
    assert "trace_data_loss" in _ids(
        as_json(summarize_file(str(folder / "worker0.1700000000000.pt.trace.json")))
    )


def test_b4_empty_value_is_salvaged(shared_cases: Path) -> None:
    folder = shared_cases / "B4_empty_pg_description"
    path = str(folder / "worker0.1700000000000.pt.trace.json")
    h = read_trace(path).health
    assert (h.damaged_regions, h.lost_events, h.event_count) == (2, 2, 434)
    assert [d["offset"] for d in h.damage] == [1067, 2025]  # each ", " after the key
    assert h.lost_bytes == 376 + 772
    s = as_json(summarize_file(path))
    loss = [d for d in s["diagnoses"] if d["id"] == "trace_data_loss"]
    assert loss and loss[0]["evidence"]["lost_events"] == 2
    assert loss[0]["severity"] == "medium"
    good = read_trace(str(folder / "worker1.1700000000001.pt.trace.json"))
    _same_tables(good, read_trace(_one(shared_cases / "B0_baseline")))


def test_truncated_gzip_of_a_real_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(_one(SAMPLE_LOGS / "dataloader_workers0"))
    raw = path.read_bytes()
    cut = tmp_path / "w.1.pt.trace.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    prefix = zlib.decompressobj(wbits=31).decompress(raw[: len(raw) // 2])
    full, part = read_trace(str(path)), read_trace(str(cut))
    assert any("gzip stream ends early" in d["problem"] for d in part.health.damage)
    began = prefix.count(b'"ph":')
    assert part.health.event_count in (began - 1, began)  # the cut event is lost
    assert 0.2 * full.health.event_count < part.health.event_count < full.health.event_count
    ops_full, ops_part = full.cpu_ops, part.cpu_ops
    whole = set(zip(ops_full.start_ns.tolist(), ops_full.dur_ns.tolist(), strict=True))
    kept = set(zip(ops_part.start_ns.tolist(), ops_part.dur_ns.tolist(), strict=True))
    assert kept and kept <= whole
    # the diagnosis says the rest is missing, and a diff against the file warns
    loss = next(
        d for d in as_json(summarize_file(str(cut)))["diagnoses"] if d["id"] == "trace_data_loss"
    )
    # half of the gzip holds only the host section: every GPU event is lost (high)
    (ended,) = [d for d in part.health.damage if d["problem"].startswith("gzip stream ends")]
    end = loss["evidence"]["file_ends_at_byte"]  # the start of the cut event
    assert ended["offset"] - 1000 < end <= ended["offset"]
    # a gzip file says which bytes count: the compressed file's end and the inflated
    # JSON's offset (the attack run found an inflated offset past the file's end)
    assert loss["title"].startswith(
        f"The gzip file ends at byte {len(raw) // 2:,} (compressed; its JSON breaks at "
        f"byte {end:,}, inflated), before its GPU events"
    )
    assert loss["severity"] == "high" and loss["evidence"]["gpu_events_lost"] is True
    assert cli_main(["diff", str(cut), str(path)]) in (0, 1)
    assert "warning: the base side lost trace data" in capsys.readouterr().out


def test_corrupt_gzip_keeps_what_comes_before_the_damage(tmp_path: Path) -> None:
    """A bad CRC at the very end loses nothing but is reported; corrupt deflate data in
    the middle keeps the events before it (zlib raises for a whole call, so the data
    before the damage is recovered by bisection); a valid two-member gzip split inside an
    event reads as the original."""
    path = Path(_one(SAMPLE_LOGS / "memory_leak"))
    raw = path.read_bytes()
    full = read_trace(str(path))
    crc = bytearray(raw)
    crc[-6] ^= 0xFF  # the CRC32 of the trailer
    bad_crc = read_trace(
        str(write_trace(tmp_path / "crc" / "w.1.pt.trace.json.gz", text=bytes(crc)))
    )
    assert bad_crc.health.event_count == full.health.event_count
    assert len(bad_crc.kernels) == len(full.kernels)
    assert [d["problem"][:18] for d in bad_crc.health.damage] == ["corrupt gzip data "]
    middle = bytearray(raw)
    for i in range(len(raw) // 2, len(raw) // 2 + 200):
        middle[i] ^= 0x5A
    bad_mid = read_trace(
        str(write_trace(tmp_path / "mid" / "w.1.pt.trace.json.gz", text=bytes(middle)))
    )
    assert any(d["problem"].startswith("corrupt gzip data") for d in bad_mid.health.damage)
    assert 0.2 * full.health.event_count < bad_mid.health.event_count < full.health.event_count
    json_text = gzip.decompress(raw)
    half = json_text.index(b'"ph"', len(json_text) // 2) + 2  # inside an event
    two = gzip.compress(json_text[:half]) + gzip.compress(json_text[half:])
    joined = read_trace(str(write_trace(tmp_path / "two" / "w.1.pt.trace.json.gz", text=two)))
    assert joined.health.event_count == full.health.event_count
    assert joined.health.damage == []


def test_damage_inside_a_large_file_resumes_at_the_next_event(tmp_path: Path) -> None:
    events = [kernel(f"k{i}", 1000 + 10 * i, 3, corr=i) for i in range(3000)]
    text = json.dumps({"traceEvents": events})
    bad = text.replace('"k1500"', '"k1"500"').replace('"k2500"', '"k2" "500"')
    tr = read_trace(str(write_trace(tmp_path / "t.json.gz", text=bad, gz=True)), block_bytes=4096)
    assert len(tr.kernels) == 2998
    assert tr.health.lost_events == 2
    offsets = [d["offset"] for d in tr.health.damage]
    assert offsets == [bad.index('"k1"500"') + 4, bad.index('"k2" "500"') + 5]


def test_stray_bracket_in_a_real_shaped_trace(tmp_path: Path) -> None:
    events = [kernel(f"k{i}", 1000 + 10 * i, 3, corr=i) for i in range(50)]
    text = json.dumps({"traceEvents": events})
    at = text.index('{"ph"', text.index('"k20"') - 40)
    bad = text[:at] + "[" + text[at:]
    tr = read_trace(str(write_trace(tmp_path / "t.json", text=bad)))
    # k19 and k20 now form one unit "{k19}, [{k20}" that never closes: lost together
    assert len(tr.kernels) == 48 and tr.health.damaged_regions == 1
    assert tr.health.damage[0]["start"] == bad.rindex('{"ph"', 0, at)
    assert tr.health.damage[0]["problem"] == "unbalanced bracket or quote"
    assert sorted(tr.names[i] for i in tr.kernels.name) == sorted(
        f"k{i}" for i in range(50) if i not in (19, 20)
    )


def test_shared_fuzz_inputs_give_only_typed_errors(shared_cases: Path) -> None:
    fuzz = shared_cases / "fuzz"
    with pytest.raises(TraceFormatError, match="nothing usable") as err:
        read_trace(str(fuzz / "hand_decodeerror_truncated.json"))
    assert err.value.offset is not None and str(fuzz) in str(err.value)
    tr = read_trace(str(fuzz / "hand_stray_bracket_array_root.json"))
    assert [tr.names[i] for i in tr.cpu_ops.name] == ["a"]  # "b" sits in a nested array
    assert tr.health.skipped == {"invalid_field_type": 1} and tr.health.damaged_regions == 1
    tr = read_trace(str(fuzz / "hand_validation_number_out_of_range.json"))
    assert tr.health.event_count == 2 and len(tr.kernels) == 0
    for path in sorted(fuzz.iterdir()):  # any file added there later: typed or a Trace
        try:
            result = read_trace(str(path))
        except TraceError as exc:
            assert str(path) in str(exc)
        else:
            assert result.health.event_count >= 0


def test_repair_work_is_linear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One event whose args hold 2 MB of {"file": "C:\work\m.py"} items: every block ends
    # inside it, and each cut needs repair. Bytes handed to repair must stay within a
    # small multiple of the file (quadratic rescanning was ~ size^2 / block).
    item = '{"file": "C:\\work\\m.py", "line": 12}'
    body = ", ".join([item] * (2_000_000 // (len(item) + 2)))
    big = '{"ph": "X", "cat": "cpu_op", "name": "big", "pid": 1, "tid": 1, "ts": 1, "dur": 5,'
    text = '{"traceEvents": [' + big + ' "args": {"frames": [' + body + "]}}, "
    text += ", ".join(json.dumps(cpu("op", 10 + i, 1)) for i in range(100)) + "]}"
    path = write_trace(tmp_path / "nb.json", text=text)
    seen = []
    real = decode.repair_json

    def counting(data: Any, *args: Any) -> Any:
        seen.append(len(data))
        return real(data, *args)

    monkeypatch.setattr(decode, "repair_json", counting)
    tr = read_trace(str(path), block_bytes=16_384)
    assert len(tr.cpu_ops) == 101 and tr.health.repairs["lone_backslash"] > 50_000
    assert sum(seen) < 4 * len(text)


# -- typed errors, whatever the bytes ------------------------------------------------------


def _base() -> bytes:
    events: list[dict[str, Any]] = []
    for i in range(6):
        t = 5e9 + 100 * i
        events.append(cpu(f"ProfilerStep#{i}", t, 100, cat="user_annotation"))
        events.append(kernel("sgemm", t + 10, 50, corr=i))
        events.append({"ph": "f", "id": i, "pid": 0, "tid": 7, "ts": t + 10, "cat": "ac2g"})
        events.append(
            {
                "ph": "i",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": t + 3,
                "s": "t",
                "args": {"Bytes": 512, "Total Allocated": 1024, "Device Type": 1},
            }
        )
    return json.dumps({"traceEvents": events, "traceName": "x"}, indent=1).encode()


BASE = _base()
JUNK = [
    b"[",
    b"]",
    b"{",
    b"}",
    b'"',
    b",",
    b":",
    b"\\",
    b"\n",
    b"\x00",
    b"NaN",
    b"1e400",
    b"-1e300",
    b'"a"',
    b"[" * 3000,
    b"\xff",
    b"99999999999999999999999",
]


def test_reader_raises_only_typed_errors(tmp_path: Path) -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    edits = st.lists(
        st.tuples(
            st.integers(0, len(BASE)),
            st.sampled_from(["insert", "delete", "cut", "value"]),
            st.sampled_from(JUNK),
        ),
        min_size=1,
        max_size=3,
    )

    @hypothesis.settings(max_examples=100, deadline=None, derandomize=True, database=None)
    @hypothesis.given(edits=edits, gz=st.booleans())
    def check(edits: list[tuple[int, str, bytes]], gz: bool) -> None:
        data = bytearray(BASE)
        for pos, op, junk in edits:
            pos = min(pos, len(data))
            if op == "insert":
                data[pos:pos] = junk
            elif op == "delete":
                del data[pos : pos + len(junk) * 7]
            elif op == "cut":
                del data[pos:]
            else:
                at = data.find(b'"ts": ', pos)
                if at >= 0:
                    end = data.find(b",", at)
                    data[at + 6 : end if end > 0 else at + 6] = junk
        raw = bytes(data)
        if gz:
            raw = (
                gzip.compress(raw, 1)[: max(len(raw) // 3, 20)]
                if edits[0][1] == "cut"
                else gzip.compress(raw, 1)
            )
        p = tmp_path / ("f.pt.trace.json.gz" if gz else "f.pt.trace.json")
        p.write_bytes(raw)
        try:
            tr = read_trace(str(p))
        except TraceError as exc:
            assert str(p) in str(exc)
            return
        assert tr.health.event_count >= 0

    check()


def test_span_index_is_ascii_digits_only() -> None:
    assert parse_span_index("3") == 3 and parse_span_index("-1") == -1
    for bad in ("1_0", "\u0663", "+3", " 3", "", "1.5", "x"):
        with pytest.raises(ValueError):
            parse_span_index(bad)


# --------------------------------------------------------------------------- issue 32 §7


def _kernel_texts(n: int) -> list[str]:
    return [json.dumps(kernel(f"k{i % 7}", 1000 + i, 0.5, corr=i)) for i in range(n)]


def _decoded_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes handed to the typed event decoder, per call (the reader's decode work)."""
    seen: list[int] = []
    typed = decode.decode_typed

    def counting(data: Any, builder: Any) -> Any:
        seen.append(len(data))
        return typed(data, builder)

    monkeypatch.setattr(decode, "decode_typed", counting)
    return seen


def test_stray_bracket_after_the_first_event_is_salvaged_in_linear_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reproduction: ``{event},[{event},...`` (a ``[`` that never closes). Each
    piece that was cut short used to be handed back whole, so the pending bytes grew to
    the end of the file (12.7 MB: 18.7 s against 0.2 s clean; past 64 MiB the whole file
    was lost). Now the damaged unit (the first two events) is lost, everything else read,
    and the bytes decoded stay a small multiple of the file. (The pending bytes are
    salvaged past 4 MiB; 1 MiB here, for a 5 MB file.)"""
    monkeypatch.setattr(decode, "MAX_PENDING_BYTES", 1024 * 1024)
    texts = _kernel_texts(40_000)  # 5.3 MB: five 1 MiB pieces
    body = texts[0] + ",[" + ",".join(texts[1:])
    path = write_trace(tmp_path / "t.json", text='{"traceEvents":[' + body + "]}")
    size = path.stat().st_size
    decoded = _decoded_bytes(monkeypatch)
    tr = read_trace(str(path), workers=1)
    assert len(tr.kernels) == 40_000 - 2
    assert tr.health.damaged_regions == 1 and tr.health.lost_events == 1
    assert tr.health.damage[0]["offset"] < 200  # where the stray "[" is
    assert sum(decoded) < 6 * size, (sum(decoded), size)
    clean = write_trace(tmp_path / "c.json", text='{"traceEvents":[' + ",".join(texts) + "]}")
    decoded.clear()
    assert len(read_trace(str(clean), workers=1).kernels) == 40_000
    assert sum(decoded) < 2 * size


@pytest.mark.parametrize(("depth", "lost"), [(600, 0), (1000, 1), (5000, 1)])
def test_an_over_deep_event_is_skipped_and_counted(tmp_path: Path, depth: int, lost: int) -> None:
    """One event whose ``args`` nest 1,000 deep used to reject the whole trace (600 was
    fine): now that event alone is lost and counted as damage, the rest read."""
    texts = _kernel_texts(20_000)  # 2.6 MB: three pieces
    deep = "[" * depth + "1" + "]" * depth
    texts.insert(10_000, f'{{"ph":"X","cat":"cpu_op","name":"deep","pid":1,"tid":1,"ts":5,'
                 f'"dur":1,"args":{{"x":{deep}}}}}')  # fmt: skip
    path = write_trace(tmp_path / "t.json", text='{"traceEvents":[' + ",".join(texts) + "]}")
    tr = read_trace(str(path), workers=1)
    assert len(tr.kernels) == 20_000
    assert tr.health.lost_events == lost and tr.health.damaged_regions == lost
    if lost:
        assert "nested too deeply" in tr.health.damage[0]["problem"]
    assert len(tr.cpu_ops) == 1 - lost


def test_random_bytes_named_gz_are_not_gzip(tmp_path: Path) -> None:
    """Attack run: random bytes named ``.json.gz`` were called "not a JSON trace"; the
    name promises gzip, so the error says it is not gzip (and not JSON). The same bytes
    named ``.json`` stay "not a JSON trace"."""
    data = bytes([0x9C]) + random.Random(32).randbytes(4999)  # neither 1f 8b nor { or [
    gz = tmp_path / "w.pt.trace.json.gz"
    gz.write_bytes(data)
    with pytest.raises(TraceFormatError) as caught:
        read_trace(str(gz))
    assert str(caught.value) == (
        f"{gz}: not gzip (named .gz, but it does not start with the gzip magic 1f 8b) "
        "and not a JSON trace either at byte 0"
    )
    plain = tmp_path / "w.pt.trace.json"
    plain.write_bytes(data)
    with pytest.raises(TraceFormatError) as caught:
        read_trace(str(plain))
    assert "not a JSON trace (does not start with '{' or '[')" in str(caught.value)
    assert "gzip" not in str(caught.value)


def test_plain_json_named_gz_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "w.pt.trace.json.gz"
    path.write_text(
        '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}'
    )
    assert read_trace(str(path)).health.event_count == 1


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[1,2,3]", "holds no trace event: 3 entries, none an object"),
        ('{"traceEvents": [1, "a", null, []]}', "holds no trace event: 4 entries, none an object"),
        ('{"traceEvents": 5}', "JSON object has no traceEvents array at byte 0"),
    ],
)
def test_json_without_one_event_object_is_no_trace(
    tmp_path: Path, capsys: Any, text: str, problem: str
) -> None:
    """Attack run: ``printf '[1,2,3]' | gzip > notjson/w.125.pt.trace.json.gz`` became a
    run with "3 of 3 events were unusable (100 %)" and a step 0 of 0 µs."""
    path = tmp_path / "notjson" / "w.125.pt.trace.json.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(text.encode()))
    with pytest.raises(TraceFormatError) as caught:
        read_trace(str(path))
    assert str(caught.value) == f"{path}: {problem}"
    assert cli_main(["report", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{path}: TraceFormatError: {problem}\n" in captured.err
    # the negative: one usable object among them keeps the trace (the rest counted)
    mixed = tmp_path / "mixed.json"
    mixed.write_text(
        '[1, 2, {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 3}]'
    )
    trace = read_trace(str(mixed))
    assert trace.health.event_count == 3 and trace.health.skipped == {"invalid_field_type": 2}
    # an empty trace is still a trace (history says "no step time" for it)
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    assert read_trace(str(empty)).health.event_count == 0


def test_random_bytes_named_gz_read_alike_by_report_and_window(tmp_path: Path, capsys: Any) -> None:
    """Attack run: ``report`` said "not gzip", ``window`` "not a JSON trace"."""
    bad = tmp_path / "w.1.pt.trace.json.gz"
    bad.write_bytes(b"\x9c" + bytes(range(256)) * 19)
    words = "not gzip (named .gz, but it does not start with the gzip magic 1f 8b)"
    assert cli_main(["window", str(bad), "--step", "1", "--out", str(tmp_path / "o.json")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}: {words} and not a JSON trace")
    assert cli_main(["report", str(bad)]) == 2
    assert f"{bad}: TraceFormatError: {words} and not a JSON trace" in capsys.readouterr().err


def test_a_whole_gzip_of_cut_json_says_the_json_ends_early(tmp_path: Path) -> None:
    """Attack run: a complete gzip (``gzip -t`` passes) of JSON cut short was said to
    be "The gzip file ends at byte 2,264 … (cut short)". The negative: a gzip stream
    cut short still says where the gzip file ends (the test above)."""
    source = next((SAMPLE_LOGS / "eff_gemm_skinny").glob("*.gz"))
    text = gzip.decompress(source.read_bytes())[:30000]
    cut = tmp_path / "r" / "w.1.pt.trace.json.gz"
    cut.parent.mkdir()
    cut.write_bytes(gzip.compress(text))
    loss = next(
        d for d in as_json(summarize_file(str(cut)))["diagnoses"] if d["id"] == "trace_data_loss"
    )
    end = loss["evidence"]["file_ends_at_byte"]
    assert 29_000 < end <= 30_000
    assert loss["title"] == (
        f"The JSON inside the gzip file ends early, at byte {end:,} (inflated; the gzip "
        f"data itself is whole): lost every event written after byte {end:,}"
    )
