"""The tests of ``test_reader_builder.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tb_kineto_insights.trace.reader import read_trace


def _json_events(path: Path) -> list[dict[str, Any]]:
    import gzip

    with gzip.open(path) as fh:
        events: list[dict[str, Any]] = json.load(fh)["traceEvents"]
    return events


def test_real_string_tids_and_metadata_names_match_the_json(shared_traces: Path) -> None:
    """Real traces on both new paths, checked against the JSON read with ``json``:
    ``kineto_resnet50`` (old Kineto: tids ``"5555"``, ``"stream 7"``) keeps numeric
    string tids as ints and interns the others; ``hta_mtia`` (310,046 ``M`` events)
    gets every process and thread name, the last label of an id winning (its 310,046
    ``M`` events repeat the names of 2 processes and their threads per piece)."""
    run = shared_traces / "kineto_resnet50/resnet50_num_workers_4"
    path = run / "worker0.1623212756351.pt.trace.json.gz"
    tr = read_trace(str(path), workers=1)
    want: set[int] = set()
    for e in _json_events(path):
        if e.get("ph") == "X" and e.get("cat") == "Operator":
            t = e["tid"]
            want.add(int(t) if isinstance(t, int) or t.isdigit() else -1 - tr.string_ids.index(t))
    got = set(tr.tables["cpu_op"].tid.tolist())
    assert got == want
    assert {5555, 5786} <= got

    # hta_mtia: the names below are those the JSON gives (checked with ``json`` once:
    # with it, this test took 33 s here, too long for every run)
    tr = read_trace(str(shared_traces / "hta_mtia/mtia_rank_0.json.gz"), workers=1)
    assert tr.health.kind_counts["metadata"] == 310_046
    named = {k: v for k, v in tr.process_names.items() if k >= 0}
    assert sorted(named) == [9, 3100453]  # 62,111 process_name events name these 2 again
    assert named[9] == "MTIA 9"
    assert len(tr.thread_names) == 7
