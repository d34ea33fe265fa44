"""The tests of ``test_fuzz_structured.py``'s subject that read real traces (the fuzzer
mutates those of ``sample_logs/``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest
from conftest import fuzzer_module


def _fuzzer() -> Any:
    return fuzzer_module()


@pytest.mark.parametrize(
    ("seed", "index"),
    [
        (7, 13402),  # Decimal numbers in a loosely decoded ``Input Dims`` (exact ts)
    ],
)
def test_inputs_the_fuzzer_found_are_fixed(
    monkeypatch: pytest.MonkeyPatch, seed: int, index: int
) -> None:
    """Failures of longer fuzz runs (benchmarks/RESULTS.md), replayed alone."""
    monkeypatch.setenv("KINETO_INSIGHTS_READ_WORKERS", "1")
    kind, failure, notes = _fuzzer().replay(seed, index)
    assert failure is None, (failure, notes)
    assert kind == "summary"


@pytest.mark.parametrize(
    ("seed", "index", "crashed_at"),
    [
        (4747, 47, "distributedInfo.rank an object: diff.py _rank, unhashable"),
        (4747, 164, "distributedInfo.world_size a list: diff.py _warnings, unhashable"),
        (47048, 2944, "distributedInfo.backend an object: comparability.py, unhashable"),
        (47047, 147367, "Input Dims [[1e400]]: rowjson.py, Number out of range"),
        (47047, 91393, "forged steps.count and tables.*.steps: diff_tables.py, MemoryError"),
        (47052, 202910, "forged matmul flops and time: diff.py TFLOP/s floor, ZeroDivision"),
    ],
)
def test_inputs_the_surfaces_fuzzer_found_are_fixed(
    monkeypatch: pytest.MonkeyPatch, seed: int, index: int, crashed_at: str
) -> None:
    """``--surfaces`` (issue 47: the window cut, the diff, the run view and forged cache
    entries past the summary), 60 coherent events: these inputs raised ``TypeError`` in
    the diff before ``rank_of`` read every rank and world size and ``trace_facts`` took
    every value the file states as a hashable fact; a ``ValidationError`` where an
    ``Input Dims`` held a number past float range; a ``MemoryError`` in the diff of a
    forged entry whose step count was past the steps it lists (the cache's checks now
    hold the count to them); a ``ZeroDivisionError`` in the diff's smallest TFLOP/s change
    that matters, where a forged entry's matmul FLOPs over its time underflowed to a rate
    of 0. The last three come from device runs (benchmarks/RESULTS.md)."""
    monkeypatch.setenv("KINETO_INSIGHTS_READ_WORKERS", "1")
    kind, failure, notes = _fuzzer().replay(seed, index, 60, True, surfaces=True)
    assert failure is None, (crashed_at, failure, notes)
    assert kind == "summary"


def test_surfaces_fuzz_on_a_fixed_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same past the summary (seed 47, 10 s): no untyped error in the window cut,
    the diff, the run view, or on a forged copy of each summary."""
    monkeypatch.setenv("KINETO_INSIGHTS_READ_WORKERS", "1")
    result = _fuzzer().run(10**6, seed=47, seconds=10.0, events=60, coherent=True, surfaces=True)
    assert result.failures == []
    assert result.inputs >= 10 and result.summaries > result.inputs // 2


def test_structure_aware_fuzz_on_a_fixed_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutated real traces (seed 32; as many as 15 s allow): no untyped exception, no
    summary outside its schema, none slower than 5 s."""
    monkeypatch.setenv("KINETO_INSIGHTS_READ_WORKERS", "1")
    fuzz = _fuzzer()
    started = time.monotonic()
    result = fuzz.run(10**6, seed=32, seconds=15.0)
    assert time.monotonic() - started < 25.0
    assert result.failures == []
    assert result.inputs >= 20  # the budget ran inputs
    assert result.summaries > result.inputs // 2  # most mutations keep the trace readable


def test_fuzz_workers_share_one_index_space(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--workers N``: worker ``w`` runs inputs ``w, w + N, ...`` of the one index
    space, so the device run's input ``i`` is replayed alone; ``--coherent`` small
    inputs keep kernels with their runtime calls."""
    monkeypatch.setenv("KINETO_INSIGHTS_READ_WORKERS", "1")
    fuzz = _fuzzer()
    part = fuzz.run(6, seed=3, events=20, coherent=True, worker=1, workers=3)
    assert part.inputs == 2 and part.failures == []  # inputs 1 and 4
    for index in (1, 4):
        kind, failure, notes = fuzz.replay(3, index, events=20, coherent=True)
        assert failure is None and notes, (kind, notes)
    bases = [msgspec.json.decode(b) for b in fuzz.base_traces(20, coherent=True)]
    with_kernels = [b for b in bases if any(e.get("cat") == "kernel" for e in b["traceEvents"])]
    assert len(with_kernels) >= len(bases) // 2  # (the first 20 events have none)
