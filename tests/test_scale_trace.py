"""benchmarks/scale_trace.py: a trace repeated N times keeps its per-step values.

The scaled traces feed the speed benchmarks (issue 14); if scaling changed what a step
looks like, the benchmark would time a different workload. Checked on a real sample
and a real public trace: step count N times, per-step values equal, links unique.

Real traces: ``test_scale_trace_real.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO, kernel, write_trace

from tb_kineto_insights.trace.reader import read_trace

SCRIPT = REPO / "benchmarks" / "scale_trace.py"


def _scale(src: Path, out: Path, *how: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(src), "-o", str(out), *how],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _tiny(path: Path) -> None:
    step = {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1}
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "host"}},
        {**step, "name": "warmup", "ts": 0.5, "dur": 0.25},
        {**step, "name": "ProfilerStep#7", "ts": 1.0, "dur": 10.0},
        {**step, "name": "ProfilerStep#8", "ts": 11.0, "dur": 9.5},
        kernel("k", 2.125, 3.0, corr=5),
        {"ph": "s", "id": 5, "pid": 1, "tid": 1, "ts": 1.5, "cat": "ac2g", "name": "l"},
        {"ph": "f", "id": 5, "pid": 0, "tid": 7, "ts": 2.125, "cat": "ac2g", "name": "l"},
        {**step, "name": "tail", "ts": 25.0, "dur": 1.0},
    ]
    write_trace(path, events, gz=True)


def test_tiny_trace_exact_shifts(tmp_path: Path) -> None:
    """Window [1, 20.5) µs: copy k is shifted by k * 19.5 µs, steps 7, 8 → 9, 10 → 11,
    12; correlation and flow id 5 → 5 + k * 6; the tail moves by 2 * 19.5 µs."""
    src, out = tmp_path / "t.json.gz", tmp_path / "t3.json.gz"
    _tiny(src)
    _scale(src, out, "--repeat", "3")
    t = read_trace(str(out))
    ann = t.tables["user_annotation"]
    got = sorted((int(s), t.names[n]) for s, n in zip(ann.start_ns, ann.name, strict=True))
    assert got == [
        (500, "warmup"),
        (1000, "ProfilerStep#7"),
        (11000, "ProfilerStep#8"),
        (20500, "ProfilerStep#9"),
        (30500, "ProfilerStep#10"),
        (40000, "ProfilerStep#11"),
        (50000, "ProfilerStep#12"),
        (64000, "tail"),
    ]
    k = t.tables["kernel"]
    assert k.start_ns.tolist() == [2125, 21625, 41125]
    assert k.correlation.tolist() == [5, 11, 17]
    assert sorted(t.flows.id.tolist()) == [5, 5, 11, 11, 17, 17]
    assert t.process_names == {1: "host"}
