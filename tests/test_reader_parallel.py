"""Parallel decode (issue 14): pieces decoded in worker processes read exactly as the
serial reader reads them, column by column, health and damage offsets included.

Inputs: a real sample scaled 2x (exact ns timestamps, many pieces), a real public trace
with float timestamps, the same sample with damage planted at known places (a piece
that fails in a worker goes back to the serial repair/salvage path), string pids
(interned ids: serial path), and a tiny hand-written trace whose name ids are known.

Real traces: ``test_reader_parallel_real.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import kernel, python_child, write_trace

from tb_kineto_insights.trace import columns, parallel
from tb_kineto_insights.trace.model import Trace
from tb_kineto_insights.trace.reader import build_piece, read_trace

SMALL_BLOCK = 64 * 1024  # many pieces even for a few MB of JSON
EVENT_COLUMNS = (
    "name",
    "start_ns",
    "dur_ns",
    "pid",
    "tid",
    "device",
    "stream",
    "correlation",
    "external_id",
)


@pytest.fixture
def merged(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts pieces built in a worker and merged by the parent (one entry each), and
    makes a piece 3 blocks of SMALL_BLOCK so that small files give many pieces."""
    calls: list[int] = []
    original = columns.Builder.merge

    def merge(self: columns.Builder, piece: columns.Builder) -> None:
        calls.append(piece.event_count)
        original(self, piece)

    monkeypatch.setattr(columns.Builder, "merge", merge)
    monkeypatch.setattr(parallel, "PIECE_BYTES", 3 * SMALL_BLOCK)
    return calls


def _assert_same(serial: Trace, par: Trace) -> None:
    assert par.names == serial.names
    for kind, table in serial.tables.items():
        other = par.tables[kind]
        for col in EVENT_COLUMNS:
            a, b = getattr(table, col), getattr(other, col)
            assert a.dtype == b.dtype, (kind, col)
            assert np.array_equal(a, b), (kind, col)
        assert other.comm == table.comm, kind
        assert other.input_dims == table.input_dims, kind
        assert other.input_types == table.input_types, kind
        assert other.concrete_inputs == table.concrete_inputs, kind
    for col in ("ts_ns", "bytes", "total_allocated_bytes", "total_reserved_bytes", "addr"):
        assert np.array_equal(getattr(par.memory, col), getattr(serial.memory, col)), col
    for col in ("id", "ts_ns", "pid", "tid", "phase", "launch"):
        assert np.array_equal(getattr(par.flows, col), getattr(serial.flows, col)), col
    assert par.process_names == serial.process_names
    assert par.thread_names == serial.thread_names
    assert par.string_ids == serial.string_ids
    assert par.health == serial.health


def test_string_pids_take_the_serial_path(tmp_path: Path, merged: list[int]) -> None:
    """String pids are interned in file order (negative ids), so a piece holding one is
    not built in a worker; the result still equals the serial read."""
    events = [kernel(f"k{i % 7}", 10.0 * i, 5.0, corr=i) for i in range(3000)]
    for e in events[1000:1010]:
        e["pid"] = "host"
    path = write_trace(tmp_path / "t.json.gz", events, gz=True)
    serial = read_trace(str(path), workers=1, block_bytes=4096)
    assert serial.string_ids == ["host"]
    assert (serial.tables["kernel"].pid == -1).sum() == 10
    parallel.PIECE_BYTES = 8192  # (restored by the fixture)
    _assert_same(serial, read_trace(str(path), workers=2, block_bytes=4096))
    assert len(merged) > 5  # the pieces without a string pid


def test_build_piece_local_names_and_merge(tmp_path: Path, merged: list[int]) -> None:
    """Hand-made: names are interned in first-seen order across pieces built apart."""
    events = [kernel(n, 10.0 * i, 2.0, corr=i) for i, n in enumerate("bacabdda")]
    path = write_trace(tmp_path / "t.json.gz", events, gz=True)
    parallel.PIECE_BYTES = 0  # one block a piece (restored by the fixture)
    par = read_trace(str(path), workers=2, block_bytes=128)  # about one event a block
    assert len(merged) >= 4
    assert par.names == ["b", "a", "c", "d"]
    assert par.tables["kernel"].name.tolist() == [0, 1, 2, 1, 0, 3, 3, 1]
    assert par.tables["kernel"].start_ns.tolist() == [i * 10_000 for i in range(8)]
    assert par.health.event_count == 8
    assert par.health.kind_counts["kernel"] == 8
    piece = build_piece(b"[" + b",".join(_json(e) for e in events[3:5]) + b"]", False)
    assert piece is not None
    assert list(piece.names) == ["a", "b"]  # local ids: first seen in the piece
    assert build_piece(b'[{"ph": "X", "name": "a"', False) is None  # cut short
    assert (
        build_piece(
            b'[{"ph": "X", "pid": "host", "cat": "kernel", "name": "a", "ts": 1, "dur": 1}]', False
        )
        is None
    )


def _json(e: dict) -> bytes:
    return json.dumps(e).encode()


def test_read_workers_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    assert parallel.read_workers(10 * parallel.PARALLEL_MIN_JSON_BYTES) == 0
    monkeypatch.setenv(parallel.WORKERS_ENV, "4")
    assert parallel.read_workers(10 * parallel.PARALLEL_MIN_JSON_BYTES) == 4
    assert parallel.read_workers(parallel.PARALLEL_MIN_JSON_BYTES - 1) == 0
    assert parallel.read_workers(0, requested=3) == 3
    assert parallel.read_workers(10**12, requested=1) == 0


def test_read_workers_refuses_while_the_main_module_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import multiprocessing as mp

    assert parallel.read_workers(1 << 40, None) >= 0  # not bootstrapping: no error
    monkeypatch.setattr(mp.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(RuntimeError, match="guard the script's top level"):
        parallel.read_workers(1 << 40, 2)


def test_warm_up_starts_workers_only_for_a_large_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = write_trace(tmp_path / "w.1.pt.trace.json", [kernel("k", 0.0, 1.0)])
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    assert not parallel.warm_up(str(small))  # under PARALLEL_MIN_JSON_BYTES
    assert not parallel.warm_up(str(tmp_path / "missing.json"))
    assert not parallel.warm_up(str(tmp_path))  # a folder
    monkeypatch.setattr(parallel, "PARALLEL_MIN_JSON_BYTES", 0)
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    assert not parallel.warm_up(str(small))  # serial by the variable


#: A fresh interpreter that warms up a read of a file forced parallel (``PATH``),
#: beside a thread when ``BESIDE == "thread"``, then reads it: prints whether
#: workers were forked here (a pool waiting, its workers this process's children), then
#: whether the forkserver runs, then the events read.
_WARM_UP_CHILD = """
import os, threading
from multiprocessing import forkserver
from tb_kineto_insights.trace import parallel
from tb_kineto_insights.trace.reader import read_trace
parallel.PARALLEL_MIN_JSON_BYTES = 0
done = threading.Event()
if BESIDE == "thread":
    threading.Thread(target=done.wait).start()
assert parallel.warm_up(PATH)
ahead = parallel._prestarted
forked = ahead is not None and ahead[1].submit(os.getppid).result() == os.getpid()
print(forked, forkserver._forkserver._forkserver_pid is not None)
print(len(read_trace(PATH).tables["kernel"].start_ns), parallel._prestarted)
done.set()
"""


@pytest.mark.parametrize(("beside", "forked"), [("none", "True"), ("thread", "False")])
def test_warm_up_forks_the_workers_here_unless_a_thread_runs(
    tmp_path: Path, beside: str, forked: str
) -> None:
    """In a process of one thread the read's workers are forked ahead (they share its
    imports) and the read takes them; beside a thread (fork unsafe) the forkserver is
    started instead. Either way the read gives every event."""
    events = [kernel(f"k{i}", float(i), 1.0) for i in range(50)]
    path = write_trace(tmp_path / "w.1.pt.trace.json", events)
    head = f"PATH = {str(path)!r}\nBESIDE = {beside!r}\n"
    env = {parallel.WORKERS_ENV: "2", "OPENBLAS_NUM_THREADS": "1"}
    proc = python_child(head + _WARM_UP_CHILD, env)
    assert proc.returncode == 0, proc.stderr
    server = "False" if forked == "True" else "True"
    assert proc.stdout.split() == [forked, server, "50", "None"]
