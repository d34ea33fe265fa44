"""A loosely decoded event in exact mode (issue 47, item 11): its ``Input Dims`` numbers
are floats as a typed decode makes them, not ``Decimal`` (a conv op whose ``Input Dims``
was ``[[1e+300]]`` crashed the cuDNN autotune rule's JSON encoding: the plugin answered
500 and parsed the trace again on every request)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from tb_kineto_insights.store.cache import encode_json
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.rowjson import plain_numbers

EPOCH_US = 1_700_000_000_000_000


def _trace(path: Path) -> Path:
    events: list[dict[str, object]] = []
    for i in range(4):
        at = EPOCH_US + 1000 * i
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1,
             "tid": 1, "ts": at, "dur": 900}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::convolution", "pid": 1, "tid": 1,
             "ts": at + 10, "dur": 100, "args": {"Input Dims": [[1e300], [2.5]]}}
        )  # fmt: skip
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1,
             "tid": 1, "ts": at + 20 + 10 * k, "dur": 5}
            for k in range(8)
        ]  # fmt: skip
    # a field of an unexpected type: the piece is decoded loosely
    events.append(
        {"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": EPOCH_US + 5,
         "dur": "?"}
    )  # fmt: skip
    # an epoch-scale timestamp with a fraction: exact mode (numbers as Decimal)
    text = json.dumps({"traceEvents": events})
    text = text.replace(f'"ts": {EPOCH_US + 10},', f'"ts": {EPOCH_US + 10}.123,')
    path.write_text(text)
    return path


def test_loosely_decoded_input_dims_hold_floats(tmp_path: Path) -> None:
    trace = read_trace(str(_trace(tmp_path / "w.1.pt.trace.json")))
    dims = trace.tables[m.CPU_OP].input_dims
    values = [dims[r] for r in dims]
    assert values and all(v == [[1e300], [2.5]] for v in values)
    assert not any(isinstance(x, Decimal) for v in values for part in v for x in part)


def test_a_conv_op_with_a_huge_input_dim_is_summarized(tmp_path: Path) -> None:
    summary = summarize_file(str(_trace(tmp_path / "w.1.pt.trace.json")))
    encode_json(summary)  # TypeError: Object of type Decimal is not JSON serializable


def test_plain_numbers() -> None:
    assert plain_numbers(Decimal("1E+300")) == 1e300
    assert plain_numbers({"a": [Decimal("1.5"), "s", 3, None]}) == {"a": [1.5, "s", 3, None]}
    assert plain_numbers([[Decimal("1e999")]]) == [[float("inf")]]
    deep: list[object] = []
    for _ in range(5000):
        deep = [deep]
    assert plain_numbers(deep) is deep  # past the recursion limit: as it is
