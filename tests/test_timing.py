"""trace/timing.py's window of the trace's own span: known answers on hand-made starts."""

from __future__ import annotations

import numpy as np

from tb_kineto_insights.trace import timing

GAP_NS = int(timing.FAR_GAP_MIN_US * 1000)


def _ns(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_trace_window_none_when_no_gap_exceeds_the_minimum() -> None:
    assert timing.trace_window_ns([]) is None
    assert timing.trace_window_ns([_ns(), _ns()]) is None
    # first and last start exactly FAR_GAP_MIN_US apart: no gap is larger (None, both by
    # the shortcut on the span and by the sorted gaps)
    assert timing.trace_window_ns([_ns(5, GAP_NS + 5), _ns(10)]) is None


def test_trace_window_leaves_out_a_far_start() -> None:
    base = 5_000_000_000_000  # 5e9 µs, as in a real trace
    trace = _ns(base, base + 1_000, base + 40_000_000)
    # ts 0, one gap beyond the minimum, in a second array: quarantined
    assert timing.trace_window_ns([trace, _ns(0)]) == (base, base + 40_000_000)
    # a start one ns more than the minimum after the last: far as well
    far = base + 40_000_000 + GAP_NS + 1
    assert timing.trace_window_ns([trace, _ns(far)]) == (base, base + 40_000_000)
    # ... but exactly the minimum after it is no break: nothing to quarantine
    near = base + 40_000_000 + GAP_NS
    assert timing.trace_window_ns([trace, _ns(near)]) is None
    # a far group that is the larger one wins: the 3 starts at base go
    assert timing.trace_window_ns([trace, _ns(far, far + 1, far + 2, far + 3)]) == (far, far + 3)
