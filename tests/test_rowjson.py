"""trace/rowjson.py: Input Dims kept as JSON text, built when looked up."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from conftest import cpu, write_trace

from tb_kineto_insights.trace import timing
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.rowjson import RowJson, renumber_rows


def _texts(rows: list[int], values: list[bytes]) -> RowJson:
    out = RowJson()
    lengths = np.array([len(v) for v in values], dtype=np.int64)
    ends = np.cumsum(lengths)
    out.add_texts(np.array(rows, dtype=np.int64), ends - lengths, ends, b"".join(values))
    return out


def test_lookup_extend_renumber_by_hand() -> None:
    a = _texts([0, 2], [b"[[2, 3], []]", b"[[4]]"])
    a.add_object(5, [[1.5]])
    assert a[0] == [[2, 3], []] and a[2] == [[4]] and a[5] == [[1.5]]
    assert a.get(1) is None and 1 not in a and 2 in a and len(a) == 3
    with pytest.raises(KeyError):
        a[7]
    assert list(a) == [0, 2, 5]
    assert a == {0: [[2, 3], []], 2: [[4]], 5: [[1.5]]}
    b = _texts([1], [b'[["x"]]'])
    a.extend(b, base=10)  # b's row 1 becomes row 11
    assert dict(a.items()) == {0: [[2, 3], []], 2: [[4]], 5: [[1.5]], 11: [["x"]]}
    # rows 0..11 reversed, keeping only even old rows
    new_row = np.arange(12)[::-1].copy()
    keep = np.arange(12) % 2 == 0
    moved = a.renumbered(new_row, keep)
    assert dict(moved.items()) == {11: [[2, 3], []], 9: [[4]]}
    assert list(moved) == [9, 11]
    assert renumber_rows({0: "a", 3: "b"}, np.array([3, 2, 1, 0]), None) == {3: "a", 0: "b"}
    assert pickle.loads(pickle.dumps(a)) == a


def test_reader_input_dims_values_and_absent(tmp_path: Path) -> None:
    """Read back exactly the nested lists written; ``null`` and a missing key are
    absent, as before; a row far outside the trace is quarantined with its dims."""
    events = [cpu(f"op{i}", 10.0 + i, 1.0) for i in range(5)]
    events[0]["args"] = {"Input Dims": [[2048, 768], [768], []]}
    events[1]["args"] = {"Input Dims": None}
    events[2]["args"] = {"Input Dims": [[1, 2.5, "s"], [[3]]]}
    events[3]["args"] = {"Input Dims": []}
    path = write_trace(tmp_path / "t.json", events)
    for workers in (1, 2):
        ops = read_trace(str(path), workers=workers).tables["cpu_op"]
        assert isinstance(ops.input_dims, RowJson)
        assert ops.input_dims == {0: [[2048, 768], [768], []], 2: [[1, 2.5, "s"], [[3]]], 3: []}
    # quarantine keeps rows and their dims together (take_rows renumbers them)
    events.insert(0, {**cpu("far", 1.0, 1.0), "args": {"Input Dims": [[9]]}})
    for e in events[1:]:
        e["ts"] += 4e9  # the trace is 4·10⁹ µs away from the first event
    ops = read_trace(str(write_trace(tmp_path / "far.json", events))).tables["cpu_op"]
    assert len(ops) == 5
    assert ops.input_dims == {0: [[2048, 768], [768], []], 2: [[1, 2.5, "s"], [[3]]], 3: []}
    assert timing.take_rows(ops, np.array([False, True, True, True, True])).input_dims == {
        1: [[1, 2.5, "s"], [[3]]],
        2: [],
    }


def test_loosely_decoded_event_keeps_its_dims_as_objects(tmp_path: Path) -> None:
    """A piece with a field of an unexpected type is decoded loosely: its dims arrive
    as objects and are kept as they are."""
    events = [cpu("a", 10.0, 1.0), cpu("b", 11.0, 1.0)]
    events[0]["args"] = {"Input Dims": [[5, 6]]}
    events[1]["args"] = {"Input Dims": [[7]]}
    events[1]["dur"] = "1.0"  # a string where a number belongs: decoded loosely
    ops = read_trace(str(write_trace(tmp_path / "t.json", events))).tables["cpu_op"]
    assert ops.input_dims == {0: [[5, 6]], 1: [[7]]}
