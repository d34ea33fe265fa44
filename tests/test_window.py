"""``trace/window.py`` and the ``window`` command: a window cut from the file keeps every
event of the window as it is, and moves partially overlapping complete events to named
sibling tracks; exact on a tiny trace, checked on a ``with_stack=True`` sample."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from conftest import SAMPLE_LOGS, cpu, kernel, write_trace

from tb_kineto_insights.cli.main import main
from tb_kineto_insights.service.windows import step_window
from tb_kineto_insights.trace.errors import TraceError, TraceFormatError, TraceIOError
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.window import cut_window, ns_of, partial_overlaps, write_window

WITH_STACK = SAMPLE_LOGS / "capture_full" / "vm_520.1796082237887330460.pt.trace.json.gz"


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
    assert write_window(cut, str(out)) == out.stat().st_size
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
    bad = write_trace(tmp_path / "bad.json", text='{"traceEvents": [')
    with pytest.raises(TraceFormatError, match="bad.json: not a readable JSON trace"):
        cut_window(str(bad), 0, 10)
    good = write_trace(tmp_path / "good.json", [cpu("A", 0, 10)])
    with pytest.raises(TraceFormatError, match="empty window"):
        cut_window(str(good), 10, 10)
    with pytest.raises(TraceError, match="no step 4; its steps: 0"):
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


@pytest.mark.skipif(not WITH_STACK.exists(), reason="sample_logs/capture_full missing")
def test_window_command_on_a_with_stack_trace(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "w.json.gz"
    trace = read_trace(str(WITH_STACK))
    assert trace.health.flags["has_stacks"]
    assert partial_overlaps(gzip.decompress(WITH_STACK.read_bytes())) > 0  # what Perfetto drops
    for step in (3, 5):
        code = main(["window", str(WITH_STACK), "--step", str(step), "--out", str(out)])
        assert code == 0
        said = capsys.readouterr().out
        w = step_window(str(WITH_STACK), step)
        margin = (w.end_ns - w.start_ns) // 10
        lo, hi = w.start_ns - margin, w.end_ns + margin
        data = gzip.decompress(out.read_bytes())
        assert partial_overlaps(data) == 0
        doc = json.loads(data)
        k = trace.kernels
        inside = (k.start_ns < hi) & (k.start_ns + k.dur_ns > lo)
        kept = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        assert len(kept) == int(inside.sum()) > 0
        names = sorted(trace.names[int(n)] for n in k.name[inside])
        assert sorted(e["name"] for e in kept) == names
        # the step's own CPU marker is in the cut
        assert f"ProfilerStep#{step}" in {e["name"] for e in doc["traceEvents"]}
        assert f"{len(kept)} kernels" in said
    # a window given in µs after the step window's start
    code = main(
        ["window", str(WITH_STACK), "--step", "3", "--start-us", "0", "--end-us", "100"]
        + ["--out", str(out)]
    )
    assert code == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    w = step_window(str(WITH_STACK), 3)
    ts_ns = [
        ns_of(msgspec.Raw(json.dumps(e["ts"]).encode())) for e in doc["traceEvents"] if "ts" in e
    ]
    assert all(t is not None and t < w.start_ns + 100_000 + 1000 for t in ts_ns)
    assert np.any(np.array([t for t in ts_ns if t is not None]) >= w.start_ns)


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


def _doc_bytes(cut: Any) -> bytes:
    return msgspec.json.encode(cut.document)


@pytest.mark.skipif(not WITH_STACK.exists(), reason="sample_logs/capture_full missing")
def test_the_cut_in_small_pieces_is_the_cut_in_one(tmp_path: Path, monkeypatch: Any) -> None:
    """The streamed cut (pieces of ``PIECE_BYTES``) gives the same document, byte for
    byte, with pieces of 2 KiB (the file is 400 KiB) as with one piece; plain and gzip
    files alike."""
    from tb_kineto_insights.trace import window as win

    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(WITH_STACK.read_bytes()))
    w = step_window(str(WITH_STACK), 4)
    windows = [(w.start_ns, w.end_ns), (0, 2**62), (w.start_ns - 1, w.start_ns + 1)]
    whole = {bounds: _doc_bytes(cut_window(str(WITH_STACK), *bounds)) for bounds in windows}
    monkeypatch.setattr(win, "PIECE_BYTES", 2048)
    for path in (WITH_STACK, plain):
        for bounds in windows:
            assert _doc_bytes(cut_window(str(path), *bounds)) == whole[bounds]


def test_a_piece_boundary_inside_a_string_waits_for_more(tmp_path: Path, monkeypatch: Any) -> None:
    from tb_kineto_insights.trace import window as win

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


@pytest.mark.skipif(not WITH_STACK.exists(), reason="sample_logs/capture_full missing")
def test_the_window_command_reads_the_file_once(tmp_path: Path, monkeypatch: Any) -> None:
    """``window`` finds the step and cuts it from one read of the file: the cut reads back
    only the pieces that meet the window (from the inflater's checkpoints), and gives
    the document ``cut_window`` gives. The with_stack sample repeated 12 times (60
    steps, 5 MB of JSON), pieces of 64 KiB, a checkpoint every 128 KiB."""
    import subprocess
    import sys

    from conftest import REPO

    from tb_kineto_insights.service.windows import window_of_step
    from tb_kineto_insights.trace import source
    from tb_kineto_insights.trace import window as win

    scaled = tmp_path / "scaled.json.gz"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "scale_trace.py"), str(WITH_STACK)]
        + ["-o", str(scaled), "--repeat", "12"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    monkeypatch.setattr(win, "PIECE_BYTES", 64 * 1024)
    monkeypatch.setattr(source, "CHECKPOINT_SPACING_BYTES", 128 * 1024)
    monkeypatch.setattr(source, "COMPRESSED_READ_BYTES", 4096)  # reads as small as that
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(scaled.read_bytes()))
    read: list[int] = []
    opened = source.open_stored

    class Counted:
        def __init__(self, f: Any) -> None:
            self.f = f

        def read(self, n: int = -1) -> bytes:
            data = self.f.read(n)
            read.append(len(data))
            return data

        def __getattr__(self, name: str) -> Any:
            return getattr(self.f, name)

        def __enter__(self) -> Any:
            self.f.__enter__()
            return self

        def __exit__(self, *exc: Any) -> Any:
            return self.f.__exit__(*exc)

    monkeypatch.setattr(source, "open_stored", lambda p: Counted(opened(p)))
    for path in (scaled, plain):
        for step, bounds in ((30, None), (41, (100.0, 900.0))):
            read.clear()
            cut = window_of_step(str(path), step, *(bounds or (None, None)))
            size = path.stat().st_size
            assert size <= sum(read) < 1.3 * size  # the read, and the pieces read back
            w = step_window(str(path), step)
            if bounds is None:
                margin = (w.end_ns - w.start_ns) // 10
                lo, hi = w.start_ns - margin, w.end_ns + margin
            else:
                lo, hi = w.start_ns + 100_000, w.start_ns + 900_000
            assert (cut.start_ns, cut.end_ns) == (lo, hi)
            assert _doc_bytes(cut) == _doc_bytes(cut_window(str(path), lo, hi))
            assert cut.kernels > 0


DDP2 = SAMPLE_LOGS / "ddp2_straggler"


@pytest.mark.skipif(not DDP2.is_dir(), reason="sample_logs/ddp2_straggler missing")
def test_window_of_every_rank_merges_them(tmp_path: Path, capsys: Any) -> None:
    """``window RANK0 RANK1 --step N``: one trace holding each rank's window of the step,
    each rank's processes apart (their own pids, names prefixed with the rank), every
    kernel of each rank's cut kept, no partial overlaps on any track."""
    from tb_kineto_insights.service.windows import window_of_step

    paths = sorted(str(p) for p in DDP2.glob("rank*.pt.trace.json.gz"))
    assert len(paths) == 2
    step = int(build_steps(paths[0])[1])
    out = tmp_path / "ranks.json.gz"
    assert main(["window", *paths, "--step", str(step), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    data = gzip.decompress(out.read_bytes())
    assert partial_overlaps(data) == 0
    doc = json.loads(data)
    events = doc["traceEvents"]
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    for k, path in enumerate(paths):
        cut = window_of_step(path, step)
        label = f"rank {k}"
        assert f"{label}: step {step}" in said and f"{cut.kernels} kernels" in said
        own = {p for p, n in names.items() if n.startswith(f"{label}: ")}
        assert own, names
        kernels = sorted(
            (e["name"], e["ts"]) for e in events if e.get("cat") == "kernel" and e["pid"] in own
        )
        expected = sorted((e["name"], e["ts"]) for e in _events(cut) if e.get("cat") == "kernel")
        assert kernels == expected and len(kernels) == cut.kernels > 0
    # the ranks' processes are apart: every pid belongs to one rank
    owners = [{p for p, n in names.items() if n.startswith(f"rank {k}: ")} for k in (0, 1)]
    assert not owners[0] & owners[1]
    assert {e["pid"] for e in events} <= owners[0] | owners[1]
    assert doc["traceName"] == "ranks: rank 0, rank 1"


def build_steps(path: str) -> list[int]:
    from tb_kineto_insights.analysis.trace_index import build_index

    return [int(n) for n in build_index(read_trace(path)).steps.number]


def test_window_refuses_to_overwrite_its_input(tmp_path: Path, capsys: Any) -> None:
    """Attack run: ``window $f --step 2 --out $f`` exited 0 and left only the cut."""
    src = SAMPLE_LOGS / "eff_gemm_skinny"
    trace = tmp_path / next(p.name for p in src.iterdir() if p.name.endswith(".gz"))
    trace.write_bytes(next(p for p in src.iterdir() if p.name.endswith(".gz")).read_bytes())
    before = trace.read_bytes()
    link = tmp_path / "link.json.gz"
    link.symlink_to(trace)
    for out in (trace, link):
        assert main(["window", str(trace), "--step", "2", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"error: --out {out}: is the input trace {trace}; writing the window there "
            "would overwrite the trace: give another file name\n"
        )
    assert trace.read_bytes() == before
    # the same file twice (as two ranks), by its name and through a link
    for twice in ([str(trace), str(trace)], [str(trace), str(link)]):
        assert main(["window", *twice, "--step", "2", "--out", str(tmp_path / "o.json")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {twice[1]}: the same trace file is given twice (also as ")
    assert not (tmp_path / "o.json").exists()
    # a directory, and a folder that does not exist: the message names --out
    assert main(["window", str(trace), "--step", "2", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: --out {tmp_path}: is a directory; give a file name (.json or .json.gz)\n"
    )
    missing = tmp_path / "no" / "o.json"
    assert main(["window", str(trace), "--step", "2", "--out", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"error: --out {missing}: cannot be written: No such file or directory\n"
    )
    # a healthy call still works
    assert main(["window", str(trace), "--step", "2", "--out", str(tmp_path / "o.json")]) == 0
    assert (tmp_path / "o.json").stat().st_size > 1000


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
