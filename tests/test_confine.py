"""trace/confine.py: the containment check made on the opened file, not on its path."""

from __future__ import annotations

import gzip
import json
import os
import threading
from pathlib import Path

import pytest

from tb_kineto_insights.trace.confine import Rule, confined, file_identity, inside, open_local
from tb_kineto_insights.trace.errors import TraceIOError
from tb_kineto_insights.trace.reader import read_trace

TRACE = {"traceEvents": [{"ph": "X", "name": "k", "cat": "kernel", "ts": 1, "dur": 2}]}


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """``logs/`` (the log directory, real path) with ``.data/real.json``, and
    ``outside/secret.json`` next to it."""
    logs = tmp_path / "logs"
    (logs / ".data").mkdir(parents=True)
    (logs / ".data" / "real.json").write_text(json.dumps(TRACE))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text("root:x:0:0")
    return logs.resolve(), outside.resolve()


def test_inside() -> None:
    assert inside("/a/b", "/a/b/c.json") and inside("/a/b", "/a/b")
    assert not inside("/a/b", "/a/bc/d.json") and not inside("/a/b", "/a")
    assert not inside("/a/b", "relative")


def test_without_a_rule_any_path_opens(layout: tuple[Path, Path]) -> None:
    _, outside = layout
    with open_local(str(outside / "secret.json")) as f:
        assert f.read() == b"root:x:0:0"


def test_file_inside_opens_through_a_link_inside(layout: tuple[Path, Path]) -> None:
    logs, _ = layout
    (logs / "r").mkdir()
    link = logs / "r" / "w.1.pt.trace.json"
    link.symlink_to("../.data/real.json")
    rule = Rule(str(logs), file_identity(link.stat()))
    with confined(str(link), rule), open_local(str(link)) as f:
        assert json.loads(f.read()) == TRACE


@pytest.mark.parametrize("swap", ["file_link", "folder_link", "link_chain"])
def test_swapped_to_outside_is_refused_when_opened(swap: str, layout: tuple[Path, Path]) -> None:
    logs, outside = layout
    run = logs / "r"
    run.mkdir()
    link = run / "w.1.pt.trace.json"
    if swap == "file_link":
        link.symlink_to(outside / "secret.json")
    elif swap == "folder_link":
        run.rmdir()
        run.symlink_to(outside, target_is_directory=True)
        link = run / "secret.json"
    else:
        (logs / ".data" / "hop").symlink_to(outside / "secret.json")
        link.symlink_to("../.data/hop")
    with confined(str(link), Rule(str(logs))):
        with pytest.raises(TraceIOError) as err:
            open_local(str(link))
        # and through the reader, which opens it on a helper thread
        with pytest.raises(TraceIOError) as via_reader:
            read_trace(str(link))
    for message in (str(err.value), str(via_reader.value)):
        assert "outside the log directory" in message and str(link) in message
        assert "root:x" not in message
    with open_local(str(link)) as f:  # the rule is gone after the block
        assert f.read() == b"root:x:0:0"


def test_a_fifo_is_refused_without_blocking(layout: tuple[Path, Path]) -> None:
    logs, _ = layout
    fifo = logs / "w.1.pt.trace.json"
    os.mkfifo(fifo)
    result: list[BaseException] = []

    def attempt() -> None:
        with confined(str(fifo), Rule(str(logs))):
            try:
                open_local(str(fifo))
            except BaseException as exc:  # noqa: BLE001 (checked below)
                result.append(exc)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(5.0)
    assert not thread.is_alive(), "opening a FIFO blocked"
    assert len(result) == 1 and isinstance(result[0], TraceIOError)
    assert "not a regular file" in str(result[0])


def test_a_file_changed_since_listing_is_refused(layout: tuple[Path, Path]) -> None:
    logs, _ = layout
    trace = logs / "w.1.pt.trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(TRACE).encode()))
    listed = file_identity(trace.stat())
    with confined(str(trace), Rule(str(logs), listed)):
        with open_local(str(trace)) as f:
            assert f.read(2) == b"\x1f\x8b"
        os.utime(trace, ns=(listed[3] + 10**9, listed[3] + 10**9))
        with pytest.raises(TraceIOError, match="changed since the log directory was listed"):
            open_local(str(trace))
