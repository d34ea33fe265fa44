"""``trace/window.py`` and the ``window`` command: a window cut from the file keeps every
event of the window as it is, and moves partially overlapping complete events to named
sibling tracks; exact on a tiny trace, checked on a ``with_stack=True`` sample.
Real traces: ``test_window_real.py``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.cli.main import main
from tb_kineto_insights.service.windows import step_window, write_window_file
from tb_kineto_insights.trace.errors import TraceError, TraceFormatError, TraceIOError
from tb_kineto_insights.trace.window import (
    cut_window,
    ns_of,
    parse_offset_us,
    partial_overlaps,
)


def _events(cut: Any) -> list[dict[str, Any]]:
    return json.loads(msgspec.json.encode(cut.document))["traceEvents"]


def test_cut_keeps_the_window_and_moves_partial_overlaps(tmp_path: Path) -> None:
    events = [
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 1, "args": {"name": "python 1"}},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        cpu("A", 0, 10),
        cpu("B", 5, 10),  # starts inside A, ends after it: moved
        cpu("C", 6, 1),  # inside A (and B): stays
        cpu("late", 25, 5),  # outside [0, 20)
        cpu("early", -10, 12, tid=2),  # overlaps the window's start: kept
        kernel("K", 2, 1),
        kernel("K2", 50, 10),  # outside
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 100, "tid": 1, "ts": 4, "args": {}},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 100, "tid": 1, "ts": 30, "args": {}},
        {"ph": "X", "name": "no ts", "pid": 100, "tid": 1, "dur": 3},
    ]
    path = write_trace(tmp_path / "t.json", events, deviceProperties=[{"id": 0}], schemaVersion=1)
    cut = cut_window(str(path), 0, 20_000)
    kept = _events(cut)
    names = [e["name"] for e in kept]
    assert names == [
        "thread_name",
        "process_name",
        "A",
        "B",
        "C",
        "early",
        "K",
        "[memory]",
        "thread_name",  # the sibling track's name, last
    ]
    assert cut.document["deviceProperties"] == msgspec.Raw(b'[{"id": 0}]')
    assert (cut.events, cut.kernels, cut.moved) == (8, 1, 1)
    b = kept[3]
    assert b["tid"] == 8 and b["ts"] == 5 and b["dur"] == 10  # above every tid (1, 7)
    assert cut.sibling_tracks == [(100, 1, 8)]
    assert kept[-1] == {
        "ph": "M",
        "name": "thread_name",
        "pid": 100,
        "tid": 8,
        "args": {"name": "python 1 (partially overlapping events, moved from tid 1)"},
    }
    assert kept[2] == cpu("A", 0, 10)  # everything else exactly as in the file
    original = json.dumps({"traceEvents": events}).encode()
    assert partial_overlaps(original) == 1
    assert partial_overlaps(msgspec.json.encode(cut.document)) == 0
    out = tmp_path / "w.json.gz"
    assert write_window_file(cut.document, str(out)) == out.stat().st_size
    assert json.loads(gzip.decompress(out.read_bytes()))["traceEvents"] == kept


def test_overlaps_are_decided_in_exact_ns(tmp_path: Path) -> None:
    # 1.8e15 µs: a float cannot hold the ns; [x.460, x.462) and [x.461, x.463) overlap
    # by 1 ns, [x.462, x.464) only touches the first
    text = (
        '{"traceEvents": ['
        '{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1796082237887330.460, "dur": 0.002},'
        '{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 1796082237887330.461, "dur": 0.002},'
        '{"ph": "X", "name": "c", "pid": 1, "tid": 2, "ts": 1796082237887330.460, "dur": 0.002},'
        '{"ph": "X", "name": "d", "pid": 1, "tid": 2, "ts": 1796082237887330.462, "dur": 0.002}'
        "]}"
    )
    path = write_trace(tmp_path / "t.json", text=text)
    assert ns_of(msgspec.Raw(b"1796082237887330.461")) == 1796082237887330461
    assert ns_of(msgspec.Raw(b'"N/A"')) is None and ns_of(msgspec.Raw(b"null")) is None
    assert partial_overlaps(text.encode()) == 1
    cut = cut_window(str(path), 0, 2**62)
    assert cut.moved == 1 and cut.sibling_tracks == [(1, 1, 3)]
    assert partial_overlaps(msgspec.json.encode(cut.document)) == 0


def test_bad_input_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(TraceIOError, match="file not found"):
        cut_window(str(tmp_path / "missing.json"), 0, 10)
    bad = write_trace(tmp_path / "bad.json", text="hello")
    with pytest.raises(TraceFormatError, match="bad.json: not a JSON trace"):
        cut_window(str(bad), 0, 10)
    # a file the reader reads as empty (cut short before any event) is an empty cut,
    # which the window command refuses as "holds no event"
    empty = write_trace(tmp_path / "empty.json", text='{"traceEvents": [')
    assert (cut_window(str(empty), 0, 10).events, cut_window(str(empty), 0, 10).timed) == (0, 0)
    lost = write_trace(tmp_path / "lost.json", text='{"traceEvents": [{"ph": "X", "ts": [}]}')
    with pytest.raises(TraceFormatError, match="lost.json: nothing usable: "):
        cut_window(str(lost), 0, 10)
    good = write_trace(tmp_path / "good.json", [cpu("A", 0, 10)])
    with pytest.raises(TraceFormatError, match="empty window"):
        cut_window(str(good), 10, 10)
    with pytest.raises(TraceError, match="no step 4; its step numbers: 0"):
        step_window(str(good), 4)


def test_timestamps_beyond_int64_ns_are_left_out_not_a_crash(tmp_path: Path) -> None:
    """``ts`` of ``1e400`` or ``9.3e18`` µs does not fit int64 ns: those events are left
    out of the cut (the reader quarantines them too), the rest is cut as usual (the
    attack run found an OverflowError here)."""
    events = [cpu("A", 0, 10), kernel("K", 2, 3, corr=1)]
    text = json.dumps({"traceEvents": events})[:-2] + (
        ', {"ph": "X", "cat": "cpu_op", "name": "huge", "ts": 1e400, "dur": 1, "pid": 1, '
        '"tid": 1}, {"ph": "X", "cat": "cpu_op", "name": "huge2", "ts": 9.3e18, "dur": 1, '
        '"pid": 1, "tid": 1}]}'
    )
    path = write_trace(tmp_path / "w.1.pt.trace.json", text=text)
    cut = cut_window(str(path), 0, 20_000)
    assert sorted(e["name"] for e in _events(cut) if e.get("ph") == "X") == ["A", "K"]


def test_window_command_errors(tmp_path: Path, capsys: Any) -> None:
    args = ["window", str(tmp_path / "nope.json"), "--step", "1", "--out", str(tmp_path / "o")]
    assert main(args) == 2
    assert "file not found" in capsys.readouterr().err
    good = write_trace(
        tmp_path / "good.json", [cpu("ProfilerStep#1", 0, 10, cat="user_annotation")]
    )
    only_start = [
        "window",
        str(good),
        "--step",
        "1",
        "--start-us",
        "3",
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(only_start) == 2
    assert "give both --start-us and --end-us" in capsys.readouterr().err
    backwards = [*only_start[:-2], "--end-us", "1", "--out", str(tmp_path / "o")]
    assert main(backwards) == 2
    assert "--end-us 1 is not after --start-us 3" in capsys.readouterr().err


def test_odd_events_and_a_bare_array(tmp_path: Path) -> None:
    # an event that is not an object, a ts that is no number, a list tid: the cut reads
    # them one by one and leaves out what has no time; a legacy bare array works alike
    text = (
        '[5, {"ph": "X", "name": "na", "pid": 1, "tid": 1, "ts": "N/A", "dur": 3},'
        ' {"ph": "X", "name": "a", "pid": 1, "tid": [2], "ts": 1, "dur": 3},'
        ' {"ph": "X", "name": "b", "pid": 1, "tid": [2], "ts": 2, "dur": 3},'
        ' {"ph": "i", "name": "i", "pid": 1, "tid": 1, "ts": 1.5}]'
    )
    path = write_trace(tmp_path / "t.json", text=text)
    cut = cut_window(str(path), 0, 10_000)
    kept = [e["name"] for e in _events(cut)]
    assert kept == ["a", "b", "i", "thread_name"]
    assert cut.moved == 1 and cut.sibling_tracks == [(1, "[2]", 2)]  # above tid 1


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--start-us", "nan", "--start-us must be a decimal number of µs (digits, an optional"),
        ("--end-us", "inf", "--end-us must be a decimal number of µs (digits, an optional"),
        # the routes refuse an exponent: so does the command (attack run: 1e300 passed
        # here and was refused there)
        ("--end-us", "1e300", "--end-us must be a decimal number of µs (digits, an optional '-'"),
        ("--end-us", "1e20", "no exponent), within ±1,000,000,000,000 of the step's start (got "),
        ("--end-us", "100000000000000", "--end-us must be within ±1,000,000,000,000 µs of the"),
    ],
)
def test_window_command_names_the_option_and_its_limit(
    tmp_path: Path, capsys: Any, option: str, value: str, words: str
) -> None:
    """Attack run: ``--start-us nan`` ended in "cannot convert float NaN to integer"
    and ``--end-us 1e20`` cut a window of 10^20 µs."""
    good = write_trace(
        tmp_path / "good.json", [cpu("ProfilerStep#1", 0, 10, cat="user_annotation")]
    )
    other = "--end-us" if option == "--start-us" else "--start-us"
    args = ["window", str(good), "--step", "1", option, value, other, "5"]
    if option == "--end-us":
        args[-1] = "0"
    assert main([*args, "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --") and words in err and err.count("\n") == 1
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        # what the page sent after a Largest-gaps click (a float's shortest repr): refused
        # with "must be a decimal number" before, though it is one
        ("766.7589999999999", 766_759),
        ("75180.70300000001", 75_180_703),
        ("-12.3456", -12_346),
        ("+5", 5_000),
        ("0.0005", 0),  # half a ns: to even
        ("0.0015", 2),
        ("10", 10_000),
    ],
)
def test_an_offset_is_any_decimal_rounded_once_to_the_ns(text: str, ns: int) -> None:
    value = parse_offset_us(text, "start_us")
    assert round(value * 1000) == ns
    assert value == ns / 1000  # whole ns: the cut's own rounding changes nothing


@pytest.mark.parametrize("text", ["1e3", "nan", " 1", "1.", ".5", "0x10", "1" + "0" * 70])
def test_an_offset_that_is_no_plain_decimal_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="start_us must be a decimal number of µs"):
        parse_offset_us(text, "start_us")


def test_a_piece_boundary_inside_a_string_waits_for_more(tmp_path: Path, monkeypatch: Any) -> None:
    from tb_kineto_insights.trace import window_events as win

    odd = 'x"}, {"ph": "X"' * 200  # looks like event boundaries, inside a name
    events = [cpu(f"op{i}", i * 10, 5) for i in range(300)]
    events[150]["name"] = odd
    path = write_trace(tmp_path / "t.json", events)
    monkeypatch.setattr(win, "PIECE_BYTES", 256)
    cut = cut_window(str(path), 1495_000, 1510_000)
    assert [e["name"] for e in _events(cut)] == [odd]


def test_json_range_reads_back_from_checkpoints(tmp_path: Path, monkeypatch: Any) -> None:
    """``BlockReader.json_range`` after a read with checkpoints gives the bytes of the
    uncompressed JSON, from a checkpoint near the range, on a two-member gzip file."""
    import random

    from tb_kineto_insights.trace import source

    monkeypatch.setattr(source, "CHECKPOINT_SPACING_BYTES", 50_000)
    rng = random.Random(7)
    data = b"".join(b"%d," % rng.randrange(10**9) for _ in range(200_000))
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(data[:700_000]) + gzip.compress(data[700_000:]))
    reader = source.BlockReader(str(path), block_bytes=65536, checkpoints=True)
    assert b"".join(reader) == data
    assert len(reader.checkpoints) >= 20
    for _ in range(50):
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randrange(1, 200_000))
        assert reader.json_range(a, b) == data[a:b]
    assert reader.json_range(len(data) - 5, len(data)) == data[-5:]
    with pytest.raises(ValueError, match="no longer in the file"):
        reader.json_range(len(data) - 5, len(data) + 5)


def test_a_window_outside_the_trace_is_refused(tmp_path: Path, capsys: Any) -> None:
    """Attack run: ``--start-us 99999999999 --end-us 999999999999`` exited 0 with "60
    events, 0 kernels" (metadata only)."""
    trace = write_trace(
        tmp_path / "t.json",
        [
            cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"),
            cpu("ProfilerStep#2", 1000, 1000, cat="user_annotation"),
            kernel("k", 1100, 500),
        ],
    )
    out = tmp_path / "far.json"
    args = ["window", str(trace), "--step", "2", "--out", str(out)]
    assert main([*args, "--start-us", "99999999999", "--end-us", "999999999999"]) == 2
    # step 2 starts at 1000 µs; the events span 0 to 2000 µs: -1000 to 1000 after it
    assert capsys.readouterr().err == (
        f"error: {trace}: the window 99,999,999,999.000 to 999,999,999,999.000 µs after "
        "step 2's start holds no event; the trace's events span -1,000.000 to 1,000.000 µs "
        "after that start\n"
    )
    assert not out.exists()
    # the same trace twice as two ranks (two files): refused alike; one window inside
    copy = write_trace(tmp_path / "u.json", text=trace.read_text())
    assert main([*args[:2], str(copy), *args[2:], "--start-us", "-5000", "--end-us", "-2000"]) == 2
    assert "µs after step 2's start holds no event" in capsys.readouterr().err
    # the negative: a window that meets one event is cut
    assert main([*args, "--start-us", "950", "--end-us", "1200"]) == 0
    assert "0 kernels" in capsys.readouterr().out
    kept = [e["name"] for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") != "M"]
    assert kept == ["ProfilerStep#2"]
