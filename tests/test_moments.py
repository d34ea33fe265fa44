"""Moments (``analysis/rules/``: each rule's ``moment``): every diagnosis with a place
in time points at it (``Diagnosis.moment``): exact on tiny traces, and for each id on the
real sample that raises it, checked against the summary's own numbers; ids without a
place in time have none. Real traces: ``test_moments_real.py``."""

from __future__ import annotations

from pathlib import Path

from conftest import kernel, write_trace
from test_analysis import launch, step

from tb_kineto_insights.analysis.rules.moments import moment_at
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.schema.diagnoses import Moment
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace


def test_moment_at_is_exact_on_a_tiny_trace(tmp_path: Path) -> None:
    events = [step(1, 0, 100), step(2, 100, 100), launch(5, 2, 1), kernel("k", 10, 5)]
    idx = build_index(read_trace(str(write_trace(tmp_path / "t.json", events))))
    assert moment_at(idx, 130_500, 131_250, "x") == Moment(
        step=2, offset_us=30.5, length_us=0.75, what="x"
    )
    assert moment_at(idx, 0, 1, "x") == Moment(step=1, offset_us=0.0, length_us=0.001, what="x")
    assert moment_at(idx, -1, 5, "x") is None  # before the first step
    assert moment_at(idx, 200_000, 200_001, "x") is None  # after the last


def test_pageable_copy_and_unequal_steps_point_at_their_event(tmp_path: Path) -> None:
    copy = {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy HtoD (Pageable -> Device)",
        "pid": 0,
        "tid": 7,
        "ts": 110,
        "dur": 30,
        "args": {"device": 0, "stream": 7, "correlation": 1},
    }
    short = dict(copy, ts=20, dur=3, args={"device": 0, "stream": 7, "correlation": 2})
    events = [step(1, 0, 100), step(2, 100, 300), launch(105, 2, 1), launch(5, 2, 2)]
    events += [copy, short, kernel("k", 30, 5, corr=3), launch(25, 2, 3)]
    summary = summarize_trace(read_trace(str(write_trace(tmp_path / "t.json", events))))
    by_id = {d.id: d for d in summary.diagnoses}
    page = by_id["pageable_memcpy"]
    assert page.moment == Moment(
        step=2, offset_us=10.0, length_us=30.0, what="the longest pageable copy, 30.0 µs"
    )
    assert "trace_unequal_steps" not in by_id or isinstance(
        by_id["trace_unequal_steps"].moment, Moment
    )
