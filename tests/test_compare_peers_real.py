"""The tests of ``test_compare_peers.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

from conftest import REPO
from test_compare_peers import cp  # (benchmarks/compare_peers.py, on the path there)


def test_discover_inputs_on_sample_logs() -> None:
    found = cp.discover_inputs([REPO / "sample_logs"])
    # every run folder's traces, none of the recording_info.json files
    assert len(found) >= 12
    assert all(".pt.trace.json" in i.path.name for i in found)
