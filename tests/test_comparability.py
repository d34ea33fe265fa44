"""The diff's ``comparability`` list: two hand-written traces that differ in how they
were recorded (capture metadata, with_stack, CUDA version, env), and the real light/full
pair recorded on an H200 (sample_logs/capture_light, capture_full).
Real traces: ``test_comparability_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.cli.main import main
from tb_kineto_insights.compare.before_after import compare, load_side
from tb_kineto_insights.compare.comparability import comparability, format_comparability
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.schema.diff import ComparabilityItem
from tb_kineto_insights.summary import summarize_file


def _meta(**over: Any) -> dict[str, Any]:
    settings = {
        "wait": 1,
        "warmup": 2,
        "active": 5,
        "repeat": 1,
        "skip_first": 0,
        "record_shapes": True,
        "profile_memory": True,
        "with_stack": False,
        "with_flops": False,
        "with_modules": False,
    }
    meta: dict[str, Any] = {
        "version": 1,
        "preset": "standard",
        "settings": settings,
        "torch_version": "2.11.0",
        "cuda_version": "13.0",
        "cudnn_version": "91300",
        "nccl_version": "2.27.7",
        "gpu_model": "NVIDIA H200",
        "gpu_count": 1,
        "world_size": None,
        "container": None,
        "git_commit": "abc",
        "env": {"OMP_NUM_THREADS": "4"},
        "label": "x",
    }
    for key, value in over.items():
        if key in settings:
            settings[key] = value
        else:
            meta[key] = value
    return meta


def _run(path: Path, *, stack: bool = False, **root: Any) -> Path:
    events: list[dict[str, Any]] = []
    for s in range(5):
        t0 = 1000.0 + 200 * s
        events.append(cpu(f"ProfilerStep#{s + 1}", t0, 200, cat="user_annotation"))
        launch = cpu("cudaLaunchKernel", t0 + 5, 2, cat="cuda_runtime")
        launch["args"] = {"correlation": s + 1}
        events += [launch, kernel("k", t0 + 10, 50, corr=s + 1)]
        if stack:
            events.append(cpu("train.py(10): step", t0, 150, cat="python_function"))
    return write_trace(path, events, **root)


def _side(path: Path) -> list[tuple[str, Summary]]:
    return [("w", summarize_file(str(path)))]


def test_same_recording_is_comparable(tmp_path: Path) -> None:
    a = _run(tmp_path / "a/w.1.pt.trace.json", tb_kineto_insights=_meta())
    b = _run(tmp_path / "b/w.1.pt.trace.json", tb_kineto_insights=_meta())
    assert as_json(comparability(_side(a), _side(b))) == []


def test_metadata_differences_are_each_named(tmp_path: Path) -> None:
    a = _run(tmp_path / "a/w.1.pt.trace.json", tb_kineto_insights=_meta())
    b = _run(
        tmp_path / "b/w.1.pt.trace.json",
        stack=True,
        tb_kineto_insights=_meta(
            preset="full",
            with_stack=True,
            cuda_version="12.8",
            env={"OMP_NUM_THREADS": "4", "CUDA_LAUNCH_BLOCKING": "1"},
        ),
    )
    found = {e["field"]: e for e in as_json(comparability(_side(a), _side(b)))}
    assert set(found) == {"preset", "with_stack", "cuda_version", "env.CUDA_LAUNCH_BLOCKING"}
    assert (found["preset"]["base"], found["preset"]["new"]) == ("standard", "full")
    assert (found["with_stack"]["base"], found["with_stack"]["new"]) == (False, True)
    assert (found["cuda_version"]["base"], found["cuda_version"]["new"]) == ("13.0", "12.8")
    env = found["env.CUDA_LAUNCH_BLOCKING"]
    assert (env["base"], env["new"]) == (None, "1")
    assert "synchronous" in env["why"]
    assert all(e["source"] == "metadata" for e in found.values())


def test_without_metadata_the_trace_itself_is_read(tmp_path: Path) -> None:
    props = [{"id": 0, "name": "NVIDIA H100"}]
    a = _run(tmp_path / "a/w.1.pt.trace.json", cuda_runtime_version=12080, deviceProperties=props)
    b = _run(
        tmp_path / "b/w.1.pt.trace.json",
        stack=True,
        cuda_runtime_version=13000,
        deviceProperties=[{"id": 0, "name": "NVIDIA H200"}],
    )
    found = {e["field"]: e for e in as_json(comparability(_side(a), _side(b)))}
    assert set(found) == {"with_stack", "cuda_runtime_version", "gpu_model"}
    assert (found["cuda_runtime_version"]["base"], found["cuda_runtime_version"]["new"]) == (
        12080,
        13000,
    )
    assert found["gpu_model"]["new"] == "NVIDIA H200"
    assert {e["source"] for e in found.values()} == {"trace"}


def test_metadata_on_one_side_only_is_said(tmp_path: Path) -> None:
    # metadata that agrees with the trace (no shapes or memory events in it)
    meta = _meta(record_shapes=False, profile_memory=False)
    a = _run(tmp_path / "a/w.1.pt.trace.json", tb_kineto_insights=meta)
    b = _run(tmp_path / "b/w.1.pt.trace.json")
    found = as_json(comparability(_side(a), _side(b)))
    assert [e["field"] for e in found] == ["run_metadata"]
    # metadata that says shapes were recorded, against a trace without them: named too
    c = _run(tmp_path / "c/w.1.pt.trace.json", tb_kineto_insights=_meta())
    fields = [e["field"] for e in as_json(comparability(_side(c), _side(b)))]
    assert fields == ["run_metadata", "record_shapes", "profile_memory"]
    assert (found[0]["base"], found[0]["new"]) == ("present", "absent")


def test_diff_json_and_text_carry_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path / "a/w.1.pt.trace.json", tb_kineto_insights=_meta())
    _run(tmp_path / "b/w.1.pt.trace.json", tb_kineto_insights=_meta(torch_version="2.12.0"))
    doc = compare(load_side(str(tmp_path / "a")), load_side(str(tmp_path / "b")))
    assert [e["field"] for e in as_json(doc.comparability)] == ["torch_version"]
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("not like for like: torch_version 2.11.0 -> 2.12.0")


def test_settings_warning_stays_when_comparability_does_not_name_it(tmp_path: Path) -> None:
    """Metadata saying both sides recorded stacks outranks the trace in comparability;
    the trace-side warning then still tells that only one trace holds stacks."""
    meta = _meta(with_stack=True)
    a = _run(tmp_path / "a/w.1.pt.trace.json", stack=True, tb_kineto_insights=meta)
    b = _run(tmp_path / "b/w.1.pt.trace.json", tb_kineto_insights=meta)
    doc = compare(load_side(str(a.parent)), load_side(str(b.parent)))
    assert "with_stack" not in {e["field"] for e in as_json(doc.comparability)}
    assert "different profiler settings: with_stack differs (changes timings)" in doc.warnings


def test_text_names_an_unset_variable() -> None:
    item = ComparabilityItem(
        field="env.CUDA_LAUNCH_BLOCKING", base=None, new="1", why="w", source="metadata"
    )
    line = format_comparability([item])
    assert line == ["not like for like: env.CUDA_LAUNCH_BLOCKING unset -> 1 (w)"]


def test_metadata_of_the_wrong_types_is_compared_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hand-edited or foreign ``tb_kineto_insights`` key used to crash ``diff`` with a
    traceback (``'str' object has no attribute 'get'``, ``unhashable type: 'dict'``)."""
    a = _run(tmp_path / "a/w.1.pt.trace.json", tb_kineto_insights=_meta())
    odd = {
        "preset": {"name": "standard"},
        "settings": {"wait": "one", "with_stack": "no", "record_shapes": True},
        "env": {"OMP_NUM_THREADS": {"n": 4}},
        "container": {"image": ["img"]},
        "gpu_count": [1, 2],
        "torch_version": "2.11.0",
    }
    b = _run(tmp_path / "b/w.1.pt.trace.json", tb_kineto_insights=odd)
    c = _run(tmp_path / "c/w.1.pt.trace.json", tb_kineto_insights={"settings": "x", "env": ["a"]})
    found = {e["field"]: e for e in as_json(comparability(_side(a), _side(b)))}
    assert found["preset"]["new"] == '{"name": "standard"}'
    assert found["gpu_count"]["new"] == "[1, 2]"
    assert found["container"]["new"] == '["img"]'
    assert found["env.OMP_NUM_THREADS"]["new"] == '{"n": 4}'
    assert found["schedule"]["new"] == (
        "wait=one warmup=None active=None repeat=None skip_first=None"
    )
    assert "with_stack" not in found  # "no" is not a bool: unknown, not True
    assert "torch_version" not in found
    against_c = {e["field"]: e for e in as_json(comparability(_side(a), _side(c)))}
    assert against_c["preset"]["new"] is None and "schedule" not in against_c  # settings "x"
    assert main(["diff", str(a.parent), str(c.parent)]) == 0
    assert "not like for like: preset standard -> unset" in capsys.readouterr().out
