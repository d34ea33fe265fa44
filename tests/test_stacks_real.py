"""Python frames on real traces recorded with ``with_stack=True`` on one H200
(``scripts/record_stacks.py``, ``sample_logs/stacks_*``; the in-process timings are in
``sample_logs/recording_info.json`` → ``stacks``).

* ``stacks_blocking_log``: ``log_metrics()`` blocks 12 ms after ``loss.item()``: the top
  diagnosis names it with its file and line, costs within 10 % of the time measured
  around the call, and advises logging every N steps or off the training thread.
* ``stacks_preprocess``: NumPy ``preprocess()`` on the training thread: likewise, as
  untraced host time, without the advice to record stacks.
* ``stacks_healthy`` and ``capture_full`` (also recorded with stacks): the frames change
  no diagnosis and no number; the same traces without their ``python_function``
  events get the same diagnoses.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_LOGS

from tb_kineto_insights.summary import summarize_file

INFO = json.loads((SAMPLE_LOGS / "recording_info.json").read_text())["stacks"]


def _trace(run: str) -> Path:
    (path,) = (SAMPLE_LOGS / run).glob("*.pt.trace.json.gz")
    return path


def _frame_name(function: str) -> str:
    """Kineto's name of a function of record_stacks.py: ``record_stacks.py(LINE): NAME``
    (the profiler strips the script's folder, which is on ``sys.path``)."""
    line = INFO["functions"][function]["first_line"]
    return f"record_stacks.py({line}): {function}"


def _in_process_ms(run: str, function: str) -> float:
    return statistics.mean(INFO["runs"][run][f"{function}_ms"])


@pytest.mark.parametrize(
    ("run", "function", "diagnosis", "advice"),
    [
        ("stacks_blocking_log", "log_metrics", "gpu_idle_host_sync", "every N steps"),
        ("stacks_preprocess", "preprocess", "gpu_idle_host_untraced", "off the training thread"),
    ],
)
def test_top_diagnosis_names_the_function(
    run: str, function: str, diagnosis: str, advice: str
) -> None:
    summary = summarize_file(str(_trace(run)))
    top = summary.diagnoses[0]
    name = _frame_name(function)
    assert top.id == diagnosis and top.severity == "high"
    assert name in top.title
    frame = top.evidence["python_frames"][0]
    assert frame["frame"] == name
    measured_ms = _in_process_ms(run, function)
    assert frame["idle_us_per_step"] / 1000.0 == pytest.approx(measured_ms, rel=0.10)
    assert frame["fraction_of_cause"] > 0.9
    assert advice in top.recommendation and "off the training thread" in top.recommendation
    assert "with_stack" not in top.recommendation
    idle = summary.idle
    assert idle is not None and idle.python_stacks
    (dev,) = idle.devices
    assert dev.python_frames[0].frame == name
    # the in-process time of every profiled step, within 10 %, step by step
    per_call = INFO["runs"][run][f"{function}_ms"]
    got = [us / 1000.0 for us in dev.python_frames[0].per_step_us]
    assert got == pytest.approx(per_call, rel=0.10)
    assert dev.largest_gaps[0].python_frame == name
    caller = dev.python_frames[0].callers[0].callers[0]
    assert caller.startswith("record_stacks.py(") and caller.endswith(": step")


def test_blocking_call_after_sync_is_the_cost() -> None:
    """The sync (``loss.item()`` in ``step``) drained the queue; ``log_metrics``, called
    after it, holds the idle: the advice is about the call."""
    summary = summarize_file(str(_trace("stacks_blocking_log")))
    top = summary.diagnoses[0]
    frame = top.evidence["python_frames"][0]
    assert frame["after_sync_us_per_step"] == pytest.approx(frame["idle_us_per_step"])
    assert "not the sync itself" in top.recommendation
    # the idle left to low_gpu_utilization is mostly CPU ops, in the loop's own step()
    low = next(d for d in summary.diagnoses if d.id == "low_gpu_utilization")
    assert low.evidence["largest_unexplained_cause"] == "cpu_ops"
    assert low.evidence["python_frames"][0]["frame"].endswith(": step")
    assert "mostly other CPU ops" in low.title
    assert re.search(
        r"; the host was in record_stacks\.py\(95\): step \([\d.]+ µs per step\)$", low.title
    )


def test_loop_frame_is_named_but_not_moved() -> None:
    """``capture_full``: the untraced host time is in the training loop's own ``step``
    (it launches the kernels too): the title names it, the advice does not tell the
    user to move the training step off the training thread."""
    summary = summarize_file(str(_trace("capture_full")))
    untraced = next(d for d in summary.diagnoses if d.id == "gpu_idle_host_untraced")
    frame = untraced.evidence["python_frames"][0]
    assert frame["frame"].endswith(": step") and frame["launches_gpu_work"]
    assert frame["frame"] in untraced.title
    assert "named in the title" in untraced.recommendation
    assert "with_stack" not in untraced.recommendation


def _without_stacks(src: Path, dst: Path) -> Path:
    doc: dict[str, Any] = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    dst.write_bytes(json.dumps(doc).encode())
    return dst


@pytest.mark.parametrize(
    ("trace", "with_stacks_ids", "bare_ids"),
    [
        (Path("stacks_healthy"), set(), set()),
        # with stacks the sync's idle is log_metrics' (moved off the thread: 15.3 → 3.2
        # ms replayed); without them the only fix to replay is the sync itself, which
        # saves nothing (the host's 12 ms after it stay): no sync verdict
        (
            Path("stacks_blocking_log"),
            {"gpu_idle_host_sync", "low_gpu_utilization"},
            {"low_gpu_utilization"},
        ),
        (Path("stacks_preprocess"), {"gpu_idle_host_untraced"}, {"gpu_idle_host_untraced"}),
        (
            Path("capture_full"),
            {"gpu_idle_host_untraced", "low_gpu_utilization"},
            {"gpu_idle_host_untraced", "low_gpu_utilization"},
        ),
    ],
)
def test_stacks_change_only_what_a_named_frame_changes(
    tmp_path: Path, trace: Path, with_stacks_ids: set[str], bare_ids: set[str]
) -> None:
    """With and without the python_function events: the same idle numbers; a
    diagnosis whose cost is one named function's (a dominant frame) predicts that
    function's time off the thread, the others the same fix (and impact) either way;
    the titles differ only by the frame part."""
    (src,) = (SAMPLE_LOGS / trace).glob("*.pt.trace.json.gz")
    with_stacks = summarize_file(str(src))
    bare = summarize_file(str(_without_stacks(src, tmp_path / "bare.pt.trace.json")))
    assert {d.id for d in with_stacks.diagnoses} == with_stacks_ids
    assert {d.id for d in bare.diagnoses} == bare_ids
    bare_by_id = {d.id: d for d in bare.diagnoses}
    for a in with_stacks.diagnoses if with_stacks_ids == bare_ids else []:
        b = bare_by_id[a.id]
        assert a.title.startswith(b.title)
        fix_a = getattr(a.prediction, "fix", None)
        if fix_a == getattr(b.prediction, "fix", None):
            assert a.impact_fraction == pytest.approx(b.impact_fraction)
    assert with_stacks.idle is not None and bare.idle is not None
    assert bare.idle.python_stacks is False
    for d_with, d_bare in zip(with_stacks.idle.devices, bare.idle.devices, strict=True):
        assert d_with.causes == d_bare.causes
        assert d_bare.python_frames == []
