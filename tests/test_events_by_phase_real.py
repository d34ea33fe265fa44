"""The tests of ``test_events_by_phase.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import gzip
from pathlib import Path

import msgspec
import pytest
from conftest import SAMPLE_LOGS

from tb_kineto_insights.trace.events import (
    NO_ARGS,
    NO_RAW_ARGS,
    Event,
    FastEvent,
    ObjectPhaseEvent,
    PhaseEvent,
    RawTsEvent,
    RawTsPhaseEvent,
)

#: Event fields each phase declares (the others read as for an absent key).
READ = {
    "X": ("cat", "name", "pid", "tid", "ts", "dur"),
    "i": ("cat", "name", "pid", "tid", "ts"),
    "s": ("cat", "pid", "tid", "ts", "id"),
    "f": ("cat", "pid", "tid", "ts", "id"),
    "M": ("cat", "name", "pid", "tid", "ts"),
}
#: args kept as their JSON text (empty when absent) by the typed decoders
RAW_TEXT_ARGS = ("input_dims", "input_type", "concrete_inputs", "flops")
ARGS_READ = {
    "X": (
        "external_id", "device", "stream", "correlation", "collective_name",
        "in_msg_nelems", "out_msg_nelems", "in_msg_size", "dtype", "group_size",
        "pg_name", "pg_ranks", "seq", "input_dims", "input_type", "concrete_inputs", "flops",
    ),
    "i": ("bytes", "total_allocated", "total_reserved", "device_type", "device_id", "addr"),
    "M": ("name",),
}  # fmt: skip


def _events_array(path: Path) -> bytes:
    data = gzip.decompress(path.read_bytes())
    start = data.index(b"[", data.index(b'"traceEvents"'))
    end = data.rindex(b"]")
    return data[start : end + 1]


def _value(v: object) -> object:
    return bytes(v) if isinstance(v, msgspec.Raw) else v


@pytest.mark.parametrize(
    ("by_phase", "one_struct"),
    [(RawTsPhaseEvent, RawTsEvent), (PhaseEvent, FastEvent), (ObjectPhaseEvent, Event)],
)
def test_by_phase_equals_one_struct_on_a_real_trace(by_phase: object, one_struct: object) -> None:
    """transformer_eager (12.7 MB, every Kineto phase): each event's phase, declared
    fields and args fields equal the one-struct decode's; undeclared ones read as
    absent."""
    array = _events_array(sorted((SAMPLE_LOGS / "transformer_eager").glob("*.json.gz"))[0])
    fast = msgspec.json.decode(array, type=list[by_phase])  # type: ignore[valid-type]
    slow = msgspec.json.decode(array, type=list[one_struct])  # type: ignore[valid-type]
    assert len(fast) == len(slow) > 30_000
    phases: dict[str, int] = {}
    for a, b in zip(fast, slow, strict=True):
        assert a.ph == b.ph
        phases[a.ph] = phases.get(a.ph, 0) + 1
        for field in READ[a.ph]:
            assert _value(getattr(a, field)) == _value(getattr(b, field)), (a.ph, field)
        for field in ARGS_READ.get(a.ph, ()):
            assert _value(getattr(a.args, field)) == _value(getattr(b.args, field)), field
        absent = NO_RAW_ARGS if one_struct is not Event else NO_ARGS
        for field in absent.__struct_fields__:  # undeclared: as absent
            if field not in ARGS_READ.get(a.ph, ()) and field not in RAW_TEXT_ARGS:
                assert _value(getattr(a.args, field)) == _value(getattr(absent, field))
    assert set(phases) == {"X", "i", "s", "f", "M"}
    assert phases["X"] > 20_000 and phases["s"] > 1_000 and phases["f"] > 1_000
