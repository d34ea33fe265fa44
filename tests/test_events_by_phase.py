"""Events decoded by phase (trace/events.py ``PhaseEvent`` / ``RawTsPhaseEvent``, a
tagged union on ``ph``): the fields the reader reads equal the one-struct decode on a
real trace; pieces that do not decode by phase take the one-struct path as before.
Real traces: ``test_events_by_phase_real.py``."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.trace import decode
from tb_kineto_insights.trace.columns import Builder
from tb_kineto_insights.trace.events import (
    FastEvent,
    RawTsEvent,
)
from tb_kineto_insights.trace.reader import read_trace


@pytest.mark.parametrize("exact", [True, False])
def test_top_level_decode_keeps_literals_as_pieces_do(exact: bool) -> None:
    """A small file is decoded whole at the top level: its events are a piece's
    (``Input Dims`` as its literal text; in exact mode ``ts`` too), not objects and
    ``Decimal`` (twice the time: issue 34), and the keys after the events are kept."""
    data = (
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,'
        b' "tid": 2, "ts": 1796138004838499.902, "dur": 3.5,'
        b' "args": {"Input Dims": [[4, 8], [8, 2]]}}], "deviceProperties": [{"id": 0}]}'
    )
    root = (decode.exact_root_decoder if exact else decode.root_decoder).decode(data)
    (event,) = root.traceEvents
    assert bytes(event.args.input_dims) == b"[[4, 8], [8, 2]]"
    if exact:
        assert bytes(event.ts) == b"1796138004838499.902"
    else:
        assert event.ts == 1796138004838499.902
    assert root.deviceProperties == [{"id": 0}]


@pytest.mark.parametrize("exact", [True, False])
def test_pieces_that_do_not_decode_by_phase_take_the_one_struct_path(exact: bool) -> None:
    base = b'{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1.5, "dur": 1}'
    one = RawTsEvent if exact else FastEvent
    builder = Builder(exact)
    assert not isinstance(decode.decode_typed(b"[" + base + b"]", builder)[0], one)
    for odd in (
        b'{"cat": "cpu_op", "name": "no phase", "ts": 1}',
        b'{"ph": "Q", "name": "not a Chrome trace phase", "ts": 1}',
        b'{"ph": 7, "name": "phase not a string", "ts": 1}',
    ):
        events = decode.decode_typed(b"[" + base + b"," + odd + b"]", builder)
        assert [type(e) for e in events] == [one, one]
    with pytest.raises(msgspec.DecodeError) as bad:  # bad JSON: the one-struct error
        decode.decode_typed(b"[" + base + b",{]", builder)
    with pytest.raises(msgspec.DecodeError) as old:
        (decode.raw_ts_event_decoder if exact else decode.event_decoder).decode(
            b"[" + base + b",{]"
        )
    assert str(bad.value) == str(old.value)


def test_reader_counts_with_odd_phases(tmp_path: Path) -> None:
    """A trace with a missing phase, an unknown one and a counter (C) among kernels and
    CPU ops: the same counts whichever decoder reads each piece."""
    events = [kernel("k", 10, 5), cpu("op", 8, 10)]
    events += [{"cat": "cpu_op", "name": "x", "ts": 1}, {"ph": "Q", "name": "y", "ts": 2}]
    events += [{"ph": "C", "name": "counter", "pid": 1, "ts": 3, "args": {"v": 1}}]
    trace = read_trace(str(write_trace(tmp_path / "w.1.pt.trace.json", events)))
    assert len(trace.kernels) == 1 and len(trace.cpu_ops) == 1
    assert trace.health.skipped == {
        "missing_ph": 1,
        "unsupported_phase_Q": 1,
        "unsupported_phase_C": 1,
    }
    events = [kernel("k", 10, 5), cpu("op", 8, 10)]
    events += [{"ph": "C", "name": "counter", "pid": 1, "ts": 3, "args": {"v": 1}}]
    trace = read_trace(str(write_trace(tmp_path / "w.2.pt.trace.json", events)))
    assert trace.health.skipped == {"unsupported_phase_C": 1}


def test_field_not_read_for_its_phase_no_longer_drops_the_event(tmp_path: Path) -> None:
    """A flow's ``name`` is not read; one of an odd type (a list) used to send the whole
    piece to the loose path, where that flow was dropped as ``invalid_field_type``.
    Decoded by phase it is kept; the same odd ``name`` on a kernel still drops it."""
    flow = {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 9, "cat": "ac2g", "name": [1]}
    trace = read_trace(str(write_trace(tmp_path / "a.json", [kernel("k", 10, 5), flow])))
    assert len(trace.flows.id) == 1
    assert "invalid_field_type" not in trace.health.skipped
    bad_kernel = {**kernel("k2", 20, 5), "name": [1]}
    trace = read_trace(str(write_trace(tmp_path / "b.json", [kernel("k", 10, 5), bad_kernel])))
    assert len(trace.kernels) == 1
    assert trace.health.skipped.get("invalid_field_type") == 1


@pytest.mark.parametrize("odd", [b'"abc"', b"true", b'{"a": 1}', b"[1]"])
def test_an_odd_ts_at_the_top_level_loses_its_event_alone(tmp_path: Path, odd: bytes) -> None:
    """A small file (decoded whole at the top level) in exact mode whose third ``ts`` is
    no number: that event alone is dropped (``invalid_field_type``), as in a piece;
    the literal's conversion once raised out of the read and lost the whole file."""
    ts = [b"5280976777797.857", b"5280976777800.123", odd, b"5280976777900.5", b"5280976777950.25"]
    events = b",".join(
        b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": '
        + t
        + b', "dur": 10.5, "args": {"External id": 1}}'
        for t in ts
    )
    path = tmp_path / "w.1.pt.trace.json"
    path.write_bytes(b'{"schemaVersion": 1, "traceEvents": [' + events + b"]}")
    trace = read_trace(str(path))
    assert trace.health.skipped == {"invalid_field_type": 1}
    assert trace.health.event_count == 5
    assert len(trace.tables["cpu_op"]) == 4
