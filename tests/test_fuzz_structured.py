"""Issue 32 §8: values that are valid JSON but odd give a schema-valid summary or a
typed error, never an untyped exception; and a structure-aware fuzzer on a fixed
budget (``benchmarks/fuzz_structured.py``).
Real traces: ``test_fuzz_structured_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights import schema
from tb_kineto_insights.summary import summarize_file, summarize_trace
from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.errors import SummarySchemaError
from tb_kineto_insights.trace.reader import read_trace

EXACT_TS = "1700000000000000.125"  # 16 digits and a fraction: the exact-ns path
BIG = 99999999999999999999  # 20 digits: past int64


def step(n: int | str, ts: float, dur: float = 1000.0) -> dict[str, Any]:
    return cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


def good_events() -> list[dict[str, Any]]:
    return [step(1, 1000), step(2, 2000), kernel("k", 1100, 300), kernel("k", 2100, 300)]


def checked(path: Path) -> schema.Summary:
    summary = summarize_file(str(path))
    schema.check_summary(summary)  # (summarize_trace checks too: never raises here)
    return summary


@pytest.mark.parametrize(
    "literal",
    ["1e999999999999999999", "1E+9999999999", '"1e99999999999"', "-1e999999999999999999"],
)
def test_timestamp_past_decimal_limits_is_out_of_range(tmp_path: Path, literal: str) -> None:
    """decimal.Overflow in the exact-ns path (``abs``/``scaleb`` apply the context):
    the event is out of range, the rest read."""
    events = ",".join(msgspec.json.encode(e).decode() for e in good_events())
    odd = f'{{"ph":"X","cat":"kernel","name":"odd","pid":0,"tid":7,"ts":{literal},"dur":1}}'
    first = f'{{"ph":"X","cat":"cpu_op","name":"x","pid":1,"tid":1,"ts":{EXACT_TS},"dur":1}}'
    text = f'{{"traceEvents":[{first},{events},{odd}]}}'
    summary = checked(write_trace(tmp_path / "t.json", text=text))
    assert summary.steps.count == 2


def test_root_number_past_decimal_limits(tmp_path: Path) -> None:
    """decimal.InvalidOperation in the exact root decode: a top-level number whose
    exponent decimal cannot hold is read as a float (0.0)."""
    events = ",".join(msgspec.json.encode(e).decode() for e in good_events())
    first = f'{{"ph":"X","cat":"cpu_op","name":"x","pid":1,"tid":1,"ts":{EXACT_TS},"dur":1}}'
    text = f'{{"traceEvents":[{first},{events}],"baseTimeNanoseconds":1.0e-999999999999999999999}}'
    assert checked(write_trace(tmp_path / "t.json", text=text)).steps.count == 2


def test_twenty_digit_nelems_world_size_and_step_number(tmp_path: Path) -> None:
    """OverflowError on 20-digit ``In msg nelems``, ``world_size`` and ``ProfilerStep#``
    numbers: such a value is no value (None), such a marker no step."""
    comm = cpu("record_param_comms", 1200, 50)
    comm["args"] = {"Collective name": "allreduce", "In msg nelems": BIG, "dtype": "Float"}
    events = [*good_events(), step(BIG, 3000), comm]
    path = write_trace(tmp_path / "t.json", events, distributedInfo={"world_size": BIG})
    summary = checked(path)
    assert summary.steps.count == 2  # ProfilerStep#<20 digits> is not a step
    assert summary.communication.world_size is None
    trace = read_trace(str(path))
    assert trace.world_size is None
    comm_args = [c for table in trace.tables.values() for c in table.comm.values()]
    assert [(c.collective_name, c.in_msg_nelems) for c in comm_args] == [("allreduce", None)]


@pytest.mark.parametrize("value", [True, False, -2, "8", 2**31])
def test_booleans_and_odd_numbers_in_world_size_and_rank(tmp_path: Path, value: Any) -> None:
    info = {"world_size": value, "rank": value, "backend": "nccl"}
    path = write_trace(tmp_path / "t.json", good_events(), distributedInfo=info)
    summary = checked(path)
    assert summary.communication.world_size is None
    trace = read_trace(str(path))
    assert trace.world_size is None and trace.rank is None
    good = write_trace(tmp_path / "g.json", good_events(), distributedInfo={"world_size": 8})
    assert checked(good).communication.world_size == 8


def test_boolean_device_memory_is_no_capacity(tmp_path: Path) -> None:
    mem = {
        "ph": "i",
        "s": "t",
        "name": "[memory]",
        "pid": 100,
        "tid": 1,
        "ts": 1500,
        "args": {"Device Type": 1, "Device Id": 0, "Bytes": 1024, "Total Allocated": 1024},
    }
    for props, capacity in (
        ([{"id": 0, "totalGlobalMem": True}], None),
        ([{"id": True, "totalGlobalMem": 2**34}], None),  # id true is no device 1 nor 0
        ([{"id": 0, "totalGlobalMem": 2**34}], 2**34),
    ):
        path = write_trace(tmp_path / "t.json", [*good_events(), mem], deviceProperties=props)
        (device,) = checked(path).memory.devices
        assert device.capacity_bytes == capacity, props


def test_a_summary_that_fails_its_schema_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last guard: whatever value reaches a summary, one that does not fit its
    schema is a SummarySchemaError (cached as the file's error), never served."""
    trace = read_trace(str(write_trace(tmp_path / "t.json", good_events())))
    summarize_trace(trace)  # fine
    monkeypatch.setattr(m.Trace, "world_size", property(lambda self: True))
    with pytest.raises(SummarySchemaError, match="does not fit its schema") as info:
        summarize_trace(trace)
    assert "world_size" in str(info.value) and str(tmp_path / "t.json") in str(info.value)
