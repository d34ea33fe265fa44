"""Broken timestamps, damaged files and typed errors: exact values on tiny traces, the
known answers of ../shared/cases, checked ranges on real traces.
Real traces: ``test_reader_damage_real.py``."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.cli.main import main as cli_main
from tb_kineto_insights.logdir.discovery import parse_span_index
from tb_kineto_insights.trace import decode
from tb_kineto_insights.trace.errors import TraceError, TraceFormatError
from tb_kineto_insights.trace.reader import read_trace

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


# -- damaged files ----------------------------------------------------------------------


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
