"""Issue 17: what a new user trips over, on the CLI, JSON and diff side (the tab's share
is in frontend/test/ and tests/browser/).

- §1 a run folder given directly is named by its folder, not ".";
- §8 one GPU utilization (ratio of totals over the profiled steps) in report, diff
  and check;
- §9 names only one side has are added / removed / moved out, not a verdict;
- §10 durations in the unit that fits, sizes in IEC units (tests/test_units.py has the
  exact rule).

Real traces: ``test_first_use_real.py``."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.cli.main import build_report, main, write_text
from tb_kineto_insights.compare import before_after as compare


def _steps_trace(
    path: Path,
    steps: list[tuple[float, list[tuple[str, float, float]]]],
    ops: list[tuple[str, str]] | None = None,
) -> Path:
    """Steps back to back from t = 1000 µs: ``(duration, [(kernel, start offset, dur)])``.
    ``ops``: ``(name, cat)`` of one 5 µs CPU op / annotation at the start of each step."""
    events: list[dict[str, Any]] = []
    t0 = 1000.0
    corr = 0
    for i, (dur, kernels) in enumerate(steps):
        events.append(cpu(f"ProfilerStep#{i + 1}", t0, dur, cat="user_annotation"))
        for name, cat in ops or []:
            events.append(cpu(name, t0 + 1, 5, cat=cat))
        for name, start, kdur in kernels:
            corr += 1
            events.append(kernel(name, t0 + start, kdur, corr=corr))
        t0 += dur
    return write_trace(path, events)


# ---------------------------------------------------------------- §1 run names


def test_a_run_folder_given_directly_is_named_by_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "my_run"
    _steps_trace(run / "rank0.1.pt.trace.json", [(100, [("A", 0, 50)])])
    for given in (str(run), str(run) + "/"):
        report = build_report(given)
        assert [r.run for r in report.runs] == ["my_run"]
        buf = io.StringIO()
        write_text(report, buf)
        text = buf.getvalue()
        assert "== run my_run\n" in text
        assert "== run .\n" not in text and "./rank0" not in text
    monkeypatch.chdir(run)  # `report .` inside the run folder
    assert [r["run"] for r in as_json(build_report("."))["runs"]] == ["my_run"]
    # a log directory of several runs keeps their relative names
    _steps_trace(tmp_path / "other" / "rank0.1.pt.trace.json", [(100, [("A", 0, 50)])])
    assert [r["run"] for r in as_json(build_report(str(tmp_path)))["runs"]] == ["my_run", "other"]


# ---------------------------------------------------------------- §8 GPU utilization


@pytest.fixture
def util_pair(tmp_path: Path) -> tuple[Path, Path]:
    """Base: step 1 of 100 µs with 90 µs of kernel (0.9), step 2 of 300 µs with 30 µs
    (0.1): ratio of totals 120 / 400 = 30 %, mean of the per-step ratios 50 %.
    Exp: two 100 µs steps with 50 µs each: 50 % either way."""
    base = _steps_trace(
        tmp_path / "base" / "w0.1.pt.trace.json", [(100, [("A", 5, 90)]), (300, [("A", 5, 30)])]
    )
    exp = _steps_trace(
        tmp_path / "exp" / "w0.1.pt.trace.json", [(100, [("A", 5, 50)]), (100, [("A", 5, 50)])]
    )
    return base.parent, exp.parent


def test_gpu_utilization_is_one_ratio_of_totals_in_report_and_diff(
    util_pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, exp = util_pair
    report = as_json(build_report(str(base)))
    steps = report["runs"][0]["workers"][0]["spans"][0]["summary"]["steps"]
    assert steps["gpu_utilization_fraction"] == pytest.approx(0.30)
    assert [s["gpu_utilization_fraction"] for s in steps["steps"]] == pytest.approx([0.9, 0.1])
    assert main(["report", str(base)]) == 0
    assert "GPU utilization 30.0 % of step time" in capsys.readouterr().out
    assert main(["diff", str(base), str(exp), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    util = {m["key"]: m for m in doc["metrics"]}["gpu_utilization_fraction"]
    assert util["base"] == pytest.approx(0.30)  # not 0.50, the mean of 0.9 and 0.1
    assert util["exp"] == pytest.approx(0.50)
    assert util["delta"] == pytest.approx(0.20)
    assert main(["diff", str(base), str(exp)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "GPU utilization" in x)
    assert "30.0 % ->" in line and "50.0 %" in line


# ---------------------------------------------------------------- §9 one-sided names


def test_added_removed_and_moved_out_rows_get_no_verdict(tmp_path: Path) -> None:
    """Base: kernels A, B; ops aten::stack and a single-process DataLoader. Exp: A and a
    Triton kernel; the DataLoader now loads in worker processes, so aten::stack is
    'moved out'. B, absent from exp, is 'removed'; the Triton kernel 'added'."""
    single = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    multi = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    base = _steps_trace(
        tmp_path / "base" / "w0.1.pt.trace.json",
        [(100, [("A", 10, 20), ("B", 40, 30)])] * 3,
        ops=[("aten::stack", "cpu_op"), (single, "user_annotation")],
    )
    exp = _steps_trace(
        tmp_path / "exp" / "w0.1.pt.trace.json",
        [(100, [("A", 10, 20), ("triton_poi_fused_add_0", 40, 5)])] * 3,
        ops=[("aten::mul", "cpu_op"), (multi, "user_annotation")],
    )
    diffed = compare.compare(
        compare.load_side(str(base.parent)), compare.load_side(str(exp.parent))
    )
    doc = as_json(diffed)
    kernels, ops = doc["kernels"], doc["ops"]
    (added,) = kernels["added"]
    assert added["name"] == "triton_poi_fused_add_0" and added["status"] == "added"
    assert added["time_us_per_step"]["verdict"] == "added"
    assert added["time_us_per_step"]["exp"] == pytest.approx(5.0)
    (removed,) = kernels["removed"]
    assert removed["name"] == "B" and removed["status"] == "removed"
    assert removed["time_us_per_step"]["verdict"] == "removed"
    assert removed["time_us_per_step"]["base"] == pytest.approx(30.0)
    assert [r["name"] for r in kernels["changed"]] == []  # A is unchanged
    (stack,) = [r for r in ops["removed"] if r["name"] == "aten::stack"]
    assert stack["status"] == "moved_out"
    assert stack["time_us_per_step"]["verdict"] == "moved out"
    assert "DataLoader worker processes" in stack["note"]
    (mul,) = [r for r in ops["added"] if r["name"] == "aten::mul"]
    assert mul["status"] == "added"
    verdicts = {
        r["time_us_per_step"]["verdict"]
        for table in (kernels, ops)
        for group in ("added", "removed")
        for r in table[group]
    }
    assert not verdicts & {"improved", "regressed"}
    largest = {r["name"]: r["verdict"] for r in doc["largest_changes"] if r["what"] == "kernel"}
    assert largest["B"] == "removed" and largest["triton_poi_fused_add_0"] == "added"
    text = compare.diff_text(diffed)
    assert "Kernels added (only in exp; not judged)" in text
    assert "Kernels removed (only in base; not judged)" in text
    assert "CPU ops removed, or moved out of the traced threads" in text
    # without the switch to worker processes the same op is only 'removed'
    same = _steps_trace(
        tmp_path / "exp2" / "w0.1.pt.trace.json",
        [(100, [("A", 10, 20)])] * 3,
        ops=[("aten::mul", "cpu_op"), (single, "user_annotation")],
    )
    doc2 = as_json(
        compare.compare(compare.load_side(str(base.parent)), compare.load_side(str(same.parent)))
    )
    (stack2,) = [r for r in doc2["ops"]["removed"] if r["name"] == "aten::stack"]
    assert stack2["status"] == "removed" and "note" not in stack2


# ---------------------------------------------------------------- §10 units


def test_check_and_report_write_ms_and_iec_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Steps of 23,092 µs: `check` used to print "23092.0 µs"."""
    steps = [(23092.0, [("A", 5, 20000.0)])] * 10
    a = _steps_trace(tmp_path / "a" / "w0.1.pt.trace.json", steps)
    b = _steps_trace(tmp_path / "b" / "w0.1.pt.trace.json", steps)
    assert main(["check", str(a.parent), str(b.parent)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step time 23.09 ms -> 23.09 ms [unchanged]\n")
    assert main(["report", str(a.parent)]) == 0
    text = capsys.readouterr().out
    size = a.stat().st_size
    assert 1024 <= size < 1024**2
    assert f"{size / 1024:.1f} KiB of JSON\n" in text  # a plain .json file: its size
    assert "steps: 10, mean 23.09 ms" in text
    # §7: the per-step value first, the trace's total named as one
    assert "kernels: 1 per step, 0 % shorter than 10.0 µs (10 in the trace, total)" in text
    assert " MB" not in text and " kB" not in text
    # a gzip file: the JSON's size, said to be inflated (trial: "1.0 MiB JSON gzip" read
    # as the file's size, 62 kB)
    gz = tmp_path / "c" / "w0.1.pt.trace.json.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(a.read_bytes()))
    assert main(["report", str(gz.parent)]) == 0
    assert f"{size / 1024:.1f} KiB of JSON, inflated from gzip\n" in capsys.readouterr().out
