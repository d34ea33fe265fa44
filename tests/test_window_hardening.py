"""The window cut is as hard as the reader: every trace ``report`` reads can be cut (the
reader's decoding: repaired, salvaged), only typed errors, n log n track layout, and the
``window`` command's output written atomically, never over its input whatever URL names
it. Tiny hand-written inputs, exact values."""

from __future__ import annotations

import gzip
import json
import os
import random
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import REPO, cpu, kernel, write_trace

from tb_kineto_insights.cli.main import main
from tb_kineto_insights.service.windows import window_of_step
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.window import cut_window, partial_overlaps
from tb_kineto_insights.trace.window_lanes import lay_out


def _names(cut: Any) -> list[str]:
    doc = json.loads(msgspec.json.encode(cut.document))  # valid JSON, or this raises
    return [e.get("name") for e in doc["traceEvents"] if e.get("ph") != "M"]


def _model_lay_out(ranges: list[tuple[int, int, int]]) -> dict[int, int]:
    """The rule in plain Python, one track after another (quadratic)."""
    stacks: list[list[int]] = []
    out: dict[int, int] = {}
    for start, end, position in sorted(ranges, key=lambda r: (r[0], -r[1], r[2])):
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                out[position] = lane
                break
        else:
            stacks.append([end])
            out[position] = len(stacks) - 1
    return out


def test_lay_out_exact_cases() -> None:
    # A [0,10) holds C [6,7); B [5,15) starts inside A and ends after it: track 1
    assert lay_out([(0, 10, 0), (5, 15, 1), (6, 7, 2)]) == {0: 0, 1: 1, 2: 0}
    # a staircase of 5: each starts inside the one before and ends after it
    stair = [(i, i + 10, i) for i in range(5)]
    assert lay_out(stair) == {i: i for i in range(5)}
    # ranges that touch ([0,5), [5,9)) do not overlap: one track
    assert lay_out([(0, 5, 0), (5, 9, 1)]) == {0: 0, 1: 0}
    # a track freed by a range that ended is taken again (the first that fits)
    assert lay_out([(0, 4, 0), (1, 6, 1), (2, 8, 2), (5, 7, 3)]) == {0: 0, 1: 1, 2: 2, 3: 0}
    assert lay_out([]) == {}


def test_lay_out_is_the_rule_on_random_ranges() -> None:
    rng = random.Random(47)
    for _ in range(300):
        n = rng.randrange(1, 60)
        ranges = []
        for position in range(n):
            start = rng.randrange(0, 40)
            ranges.append((start, start + rng.choice([0, 1, 2, 5, 13, 40]), position))
        assert lay_out(ranges) == _model_lay_out(ranges), ranges


def test_a_staircase_gets_a_track_per_overlap(tmp_path: Path) -> None:
    """The attack run's shape (16,000 there: benchmarks/bench_window_staircase.py): each
    event starts inside the one before and ends after it."""
    n = 300
    events = [cpu(f"op{i}", 1000 + i, n + 5) for i in range(n)]
    path = write_trace(tmp_path / "stair.json", events)
    cut = cut_window(str(path), 0, 2**62)
    assert (cut.moved, len(cut.sibling_tracks)) == (n - 1, n - 1)
    assert partial_overlaps(msgspec.json.encode(cut.document)) == 0


def _step_events() -> list[dict[str, Any]]:
    return [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        cpu("A", 10, 20),
        kernel("K", 20, 5, corr=1),
    ]


def _text_with(odd: bytes) -> bytes:
    """A small trace with ``odd`` (an event's bytes, as they are) among good events."""
    good = ",".join(json.dumps(e) for e in _step_events()).encode()
    last = json.dumps(cpu("B", 40, 5)).encode()
    return b'{"traceEvents": [' + good + b", " + odd + b", " + last + b"]}"


@pytest.mark.parametrize(
    ("odd", "kept"),
    [
        # the four untyped errors of the attack run: decimal.Overflow, OverflowError,
        # AttributeError, DecodeError
        (b'{"ph": "X", "name": "far", "pid": 1, "tid": 1, "ts": 1e4855364, "dur": 1}', []),
        (b'{"ph": "X", "name": "long", "pid": 1, "tid": 1, "ts": 50, "dur": 1e308}', ["long"]),
        (b'{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": "odd"}', []),
        (b'{"ph": "X", "name": "bad\xff", "pid": 1, "tid": 1, "ts": 50, "dur": 1}', ["bad\ufffd"]),
        (b'{"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 50, "args": {"a": "\xfe"}}', ["c"]),
        # what the reader repairs: NaN tokens, lone backslashes, raw control characters
        (b'{"ph": "X", "name": "nan", "pid": 1, "tid": 1, "ts": 50, "dur": NaN}', ["nan"]),
        (b'{"ph": "X", "name": "C:\\w\\x", "pid": 1, "tid": 1, "ts": 50, "dur": 1}', ["C:\\w\\x"]),
        (
            b'{"ph": "X", "name": "tab\there", "pid": 1, "tid": 1, "ts": 50, "dur": 1}',
            ["tab\there"],
        ),
        # ... and what it salvages (the event is lost, the rest read): single quotes
        (b"{'ph': 'X', 'name': 'quoted', 'ts': 50}", []),
    ],
)
def test_what_report_reads_can_be_cut(tmp_path: Path, odd: bytes, kept: list[str]) -> None:
    path = tmp_path / "w.1.pt.trace.json"
    path.write_bytes(_text_with(odd))
    summarize_file(str(path))  # the reader reads it
    cut = cut_window(str(path), 0, 200_000)
    assert _names(cut) == ["ProfilerStep#1", "A", "K", *kept, "B"]
    # the window command's cut: the step found by one read, the window cut from its index
    cut = window_of_step(str(path), 1, 0.0, 200.0)
    assert _names(cut) == ["ProfilerStep#1", "A", "K", *kept, "B"]


def test_the_cut_of_a_damaged_file_says_what_was_lost(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "w.1.pt.trace.json"
    path.write_bytes(_text_with(b"{'ph': 'X', 'name': 'quoted', 'ts': 50}"))
    cut = cut_window(str(path), 0, 200_000)
    assert (len(cut.damage), cut.lost_events) == (1, 1)
    out = tmp_path / "o.json"
    assert main(["window", str(path), "--step", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "1 damaged region(s) of the trace skipped as the reader skips them (1 events lost" in err
    assert [e["name"] for e in json.loads(out.read_text())["traceEvents"]][-1] == "B"


def test_a_truncated_gzip_is_cut_up_to_the_break(tmp_path: Path) -> None:
    events = [*_step_events(), *(cpu(f"op{i}", 30 + i, 1) for i in range(2000))]
    data = gzip.compress(json.dumps({"traceEvents": events}).encode())
    path = tmp_path / "w.1.pt.trace.json.gz"
    path.write_bytes(data[: len(data) // 2])
    cut = cut_window(str(path), 0, 200_000)
    assert cut.stream_damage is not None and 0 < cut.timed < len(events)
    assert _names(cut)[:3] == ["ProfilerStep#1", "A", "K"]


@pytest.mark.parametrize("scheme", ["file://", "local://"])
def test_window_never_writes_over_its_input_by_url(
    tmp_path: Path, capsys: Any, scheme: str
) -> None:
    """Attack run: ``window file://T --out T`` made the 334 KB trace its 80 KB window."""
    trace = write_trace(tmp_path / "t.json", _step_events())
    before = trace.read_bytes()
    for given, out in ((f"{scheme}{trace}", str(trace)), (str(trace), f"{scheme}{trace}")):
        assert main(["window", given, "--step", "1", "--out", out]) == 2
        assert "would overwrite the trace" in capsys.readouterr().err
        assert trace.read_bytes() == before
    link = tmp_path / "link.json"
    link.symlink_to(trace)
    hard = tmp_path / "hard.json"
    os.link(trace, hard)
    for out in (str(link), str(hard), f"{scheme}{hard}"):
        assert main(["window", f"{scheme}{trace}", "--step", "1", "--out", out]) == 2
    assert trace.read_bytes() == before
    # the same trace twice by two names: refused
    assert main(["window", str(trace), f"{scheme}{hard}", "--step", "1", "--out", "x.json"]) == 2
    assert "the same trace file is given twice" in capsys.readouterr().err
    # another name is written, through the URL too
    out = tmp_path / "o.json"
    assert main(["window", f"{scheme}{trace}", "--step", "1", "--out", f"{scheme}{out}"]) == 0
    assert [e["name"] for e in json.loads(out.read_text())["traceEvents"]][1] == "ProfilerStep#1"


@pytest.mark.parametrize("empty", ["", "file://", "file:", " ", "\t"])
def test_window_refuses_an_empty_path(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, empty: str
) -> None:
    """Attack run: ``window ''`` said "error: : file not found" and ``window file://``
    cut the working folder ("Is a directory"); an empty ``--out`` is refused too, and
    nothing is written."""
    trace = write_trace(tmp_path / "t.json", _step_events())
    monkeypatch.chdir(tmp_path)
    assert main(["window", empty, "--step", "1", "--out", "o.json"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: trace {empty!r}: an empty path: name a trace file\n"
    assert main(["window", str(trace), "--step", "1", "--out", empty]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --out {empty!r}: an empty path: name the file to write\n"
    assert sorted(os.listdir(tmp_path)) == ["t.json"]


def test_window_of_a_broken_link_says_what_it_is(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack run: a link to itself was "cannot open: [Errno 40] Too many levels of
    symbolic links", a link to a missing path "file not found"; as report says them."""
    monkeypatch.chdir(tmp_path)
    os.symlink("self", "self")
    os.symlink("gone", "d")
    os.symlink("d", "chain")
    said = {
        "self": "is a symbolic link in a loop",
        "d": "is a symbolic link to 'gone', which does not exist",
        "chain": f"is a symbolic link to 'd', which leads to {str(tmp_path / 'gone')!r}, "
        "which does not exist",
    }
    for link, words in said.items():
        assert main(["window", link, "--step", "1", "--out", "o.json"]) == 2
        assert capsys.readouterr().err == f"error: {link}: {words}\n"
    assert sorted(os.listdir(tmp_path)) == ["chain", "d", "self"]


def _window_with_file_limit(args: list[str], limit: int) -> subprocess.CompletedProcess[str]:
    """The ``window`` command with files limited to ``limit`` bytes (``RLIMIT_FSIZE``, the
    write past it fails with EFBIG: a full disk as a process sees one)."""

    def limit_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "tb_kineto_insights.cli", "window", *args],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=limit_files,  # noqa: PLW1509 (a test's child, no thread in between)
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="no RLIMIT_FSIZE")
def test_a_full_disk_leaves_the_older_output_whole(tmp_path: Path) -> None:
    """Attack run: ``window`` on a full disk left a truncated JSON file, and truncated a
    valid older output at that path."""
    events = [*_step_events(), *(cpu(f"op{i}", 30 + i * 0.01, 0.005) for i in range(3000))]
    trace = write_trace(tmp_path / "t.json", events)
    out = tmp_path / "o.json"
    out.write_text('{"traceEvents": []}')
    done = _window_with_file_limit([str(trace), "--step", "1", "--out", str(out)], 4096)
    assert done.returncode == 2, done.stderr
    assert f"--out {out}: cannot be written" in done.stderr
    assert out.read_text() == '{"traceEvents": []}'  # the older output, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json", "t.json"]  # no temporary
    done = _window_with_file_limit([str(trace), "--step", "1", "--out", str(out)], 10**8)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(out.read_text())["traceEvents"]) > 3000


def test_only_typed_errors_leave_the_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The safety net: a bug under the cut is a TraceError naming the file and the
    exception, not a traceback."""
    from tb_kineto_insights.trace import window as win

    path = write_trace(tmp_path / "t.json", _step_events())

    def broken(ranges: Any) -> Any:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(win, "lay_out", broken)
    with pytest.raises(TraceError, match=r"t.json: cannot cut a window \(ZeroDivisionError"):
        cut_window(str(path), 0, 200_000)


@pytest.mark.parametrize("root", ["object", "array"])
def test_leading_whitespace_is_dropped_as_it_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: str
) -> None:
    """A BOM and 3 MiB of whitespace (many blocks, over the head's bound, here 1 MiB)
    before the trace: the same cut, its offsets right. The whitespace is now dropped as
    it comes (it was copied and stripped again at every block: 200 MB of spaces took
    90 s; ``benchmarks/RESULTS.md``)."""
    from tb_kineto_insights.trace import window_events

    monkeypatch.setattr(window_events, "MAX_HEAD_BYTES", 1 << 20)
    body = _text_with(json.dumps(cpu("odd", 50, 1)).encode())
    if root == "array":
        body = body[len(b'{"traceEvents": ') : -1]  # the bare array of events
    path = tmp_path / "w.1.pt.trace.json"
    path.write_bytes(b"\xef\xbb\xbf" + b" \n\t\r" * (3 << 18) + body)
    cut = cut_window(str(path), 0, 200_000)
    assert _names(cut) == ["ProfilerStep#1", "A", "K", "odd", "B"]


def test_window_out_never_replaces_a_device_fifo_or_link(tmp_path: Path, capsys: Any) -> None:
    """Attack run: ``--out`` renamed its temporary over whatever the name was: a FIFO and
    a character device (``--out /dev/null`` as root) became regular files, and a
    symbolic link was replaced while its target stayed empty. Now a name that is not a
    regular file is refused as it is and left alone, and a link is written through."""
    trace = write_trace(tmp_path / "t.json", _step_events())
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert main(["window", str(trace), "--step", "1", "--out", str(fifo)]) == 2
    assert "a FIFO, not a regular file: name a file to write" in capsys.readouterr().err
    assert fifo.is_fifo()
    # a character device: a null device of our own (never /dev/null: a regression
    # would replace it), where this user may make one
    null = tmp_path / "null.json"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        pass
    else:
        assert main(["window", str(trace), "--step", "1", "--out", str(null)]) == 2
        assert "a character device, not a regular file" in capsys.readouterr().err
        assert null.is_char_device()
    target = tmp_path / "target.json"
    target.write_bytes(b"")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert main(["window", str(trace), "--step", "1", "--out", str(link)]) == 0
    assert link.is_symlink() and json.loads(target.read_bytes())["traceEvents"]
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "new.json")
    assert main(["window", str(trace), "--step", "1", "--out", str(dangling)]) == 0
    assert dangling.is_symlink() and (tmp_path / "new.json").stat().st_size > 0
