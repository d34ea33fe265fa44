"""The tests of ``test_diff_sums.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import pytest
from conftest import H200X2, SAMPLE_LOGS, as_json, require_dir
from test_diff_sums import _check_sums, _rows

from tb_kineto_insights.compare.before_after import compare, load_side

#: Before/after pairs of sample_logs/ (README there) and of ../shared/traces/h200x2.
SAMPLE_PAIRS = [
    ("dataloader_workers0", "dataloader_workers4"),
    ("transformer_eager", "transformer_compile"),
    ("memory_leak", "memory_fixed"),
    ("memory_leak_async", "memory_fixed_async"),
    ("memory_fragmentation", "memory_fragmentation_fixed"),
    ("memory_fragmentation", "memory_fragmentation_expandable"),
    ("ddp2_default", "ddp2_straggler"),
    ("capture_light", "capture_full"),
    ("capture_light", "capture_blocking"),
]
H200X2_PAIRS = [("ddp_default", "ddp_straggler"), ("ddp_default", "ddp_tuned")]


@pytest.mark.parametrize(("base", "exp"), SAMPLE_PAIRS)
def test_sample_pair_rows_add_up(base: str, exp: str) -> None:
    logs = require_dir(SAMPLE_LOGS, "sample_logs/")
    doc = as_json(compare(load_side(str(logs / base)), load_side(str(logs / exp))))
    _check_sums(doc, logs / base, logs / exp)


@pytest.mark.parametrize(("base", "exp"), H200X2_PAIRS)
def test_h200x2_pair_rows_add_up(base: str, exp: str) -> None:
    root = require_dir(H200X2, "../shared/traces/h200x2")
    doc = as_json(compare(load_side(str(root / base)), load_side(str(root / exp))))
    _check_sums(doc, root / base, root / exp)


def test_straggler_change_is_explained() -> None:
    """The issue's case: ddp2_default → ddp2_straggler, +15.3 ms/step; the rows that
    hold the cause (``other`` and the host-untraced idle) are in the diff."""
    logs = require_dir(SAMPLE_LOGS, "sample_logs/")
    doc = as_json(
        compare(load_side(str(logs / "ddp2_default")), load_side(str(logs / "ddp2_straggler")))
    )
    rows = _rows(doc)
    assert 14_000 < rows["step_time_us"]["delta"] < 17_000
    assert rows["breakdown.other_us"]["verdict"] == "regressed"
    assert rows["breakdown.other_us"]["delta"] > 0.5 * rows["step_time_us"]["delta"]
    assert rows["idle.host_untraced_us"]["verdict"] == "regressed"
