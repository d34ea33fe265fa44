"""``benchmarks/fuzz_groups.py``: the history grouping (``--group-by``, ``/history?
group_by=``) fuzzed on a fixed budget, and the fuzzer's checks shown to catch what they
look for."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import fuzzer_module


def _fuzzer() -> Any:
    return fuzzer_module("fuzz_groups")


def test_grouping_fuzz_on_a_fixed_budget() -> None:
    """2,000 patterns of seed 47 (about 10 s on a loaded 2-core machine): every one
    compiles or is refused with the reason, every match is a non-empty part of the name
    as shown, none takes 1 s (the 100 ms of the 10^6 run, with room for a loaded CI)."""
    result = _fuzzer().run(2000, seed=47, max_seconds=1.0)
    assert result.failures == []
    assert result.inputs == 2000
    assert result.compiled > 200 and result.refused > 200  # both paths are exercised
    assert result.matches == 8 * result.compiled


def test_the_same_input_for_a_seed_and_index() -> None:
    fuzz = _fuzzer()
    assert fuzz.make_input(5, 123) == fuzz.make_input(5, 123)
    assert fuzz.make_input(5, 123) != fuzz.make_input(5, 124)


def test_the_checks_catch_what_they_look_for(monkeypatch: pytest.MonkeyPatch) -> None:
    fuzz = _fuzzer()
    assert fuzz.check_one(r"^(exp)_\d+", ["exp_1", "x"])[:2] == (None, True)
    assert fuzz.check_one("(", ["x"])[:2] == (None, False)  # refused, with --group-by
    # a match slower than the bound
    failure, _, _ = fuzz.check_one("(.*){50}", ["a" * 4096], max_seconds=1e-9)
    assert failure is not None and "a match on 4,096 characters took" in failure

    def untyped(group_by: str, name: str) -> str:
        raise TypeError("boom")

    monkeypatch.setattr(fuzz, "group_key", untyped)
    failure, _, _ = fuzz.check_one("x", ["x"])
    assert failure == "group_key on 'x': TypeError: boom"
    monkeypatch.setattr(fuzz, "group_key", lambda group_by, name: "not in it")
    failure, _, _ = fuzz.check_one("x", ["x"])
    assert failure is not None and "not in the name" in failure
    monkeypatch.setattr(
        fuzz, "check_options", lambda group_by: (_ for _ in ()).throw(ValueError("bad"))
    )
    failure, _, _ = fuzz.check_one("x", ["x"])
    assert failure == "refused without saying --group-by: bad"
