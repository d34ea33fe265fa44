"""tb_kineto_insights.capture: presets, run metadata in the trace, read back by our reader.

The recording tests need torch, which the package does not depend on: ``make
capture-test`` runs this file in ``.venv-torch`` (CPU build of torch) with
``KINETO_INSIGHTS_TORCH_TESTS=1``, where a missing torch fails instead of skipping. The
project venv (no torch) runs only the tests above the recording ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, as_json

from tb_kineto_insights import capture

SCRIPT = REPO / "scripts" / "record_capture_presets.py"


def _need_torch() -> Any:
    try:
        import torch
    except ImportError:
        if os.environ.get("KINETO_INSIGHTS_TORCH_TESTS") == "1":
            pytest.fail("torch is required here (KINETO_INSIGHTS_TORCH_TESTS=1)")
        pytest.skip("torch is not importable here: `make capture-test` runs these in .venv-torch")
    return torch


# ------------------------------------------------------------------ without torch


def test_presets_and_overrides() -> None:
    light, standard, full = (capture.settings_for(p) for p in ("light", "standard", "full"))
    assert {k: standard[k] for k in ("wait", "warmup", "active")} == {
        "wait": 1,
        "warmup": 2,
        "active": 5,
    }
    assert not any(light[k] for k in ("record_shapes", "profile_memory", "with_stack"))
    assert standard["record_shapes"] and standard["profile_memory"] and not standard["with_stack"]
    assert full["with_stack"] and full["record_shapes"]
    assert capture.settings_for("light", active=3, with_stack=True)["active"] == 3
    with pytest.raises(capture.CaptureError, match="unknown preset 'huge'"):
        capture.settings_for("huge")
    with pytest.raises(capture.CaptureError, match="unknown setting"):
        capture.settings_for("light", activ=3)


def test_env_and_container() -> None:
    env = {"NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "8", "CUDA_LAUNCH_BLOCKING": "1", "HOME": "/"}
    assert capture.recorded_env(env) == {
        "CUDA_LAUNCH_BLOCKING": "1",
        "NCCL_ALGO": "Ring",
        "OMP_NUM_THREADS": "8",
    }
    assert capture.container_info({}, root="/nonexistent-root") is None
    assert capture.container_info({"DOCKER_IMAGE": "nvcr.io/pt:25.01"}, root="/nonexistent") == {
        "in_container": True,
        "image": "DOCKER_IMAGE=nvcr.io/pt:25.01",
    }


def test_import_does_not_import_torch() -> None:
    code = "import sys, tb_kineto_insights.capture; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_clear_error_without_torch(tmp_path: Path) -> None:
    # a child whose torch import fails, whatever this environment has
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from tb_kineto_insights import capture\n"
        "try:\n    capture.profile(sys.argv[1])\n"
        "except capture.CaptureError as e:\n    print('CaptureError', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("CaptureError tb_kineto_insights.capture needs PyTorch")
    # a wrong preset is named first (it was hidden behind the missing torch)
    typo = code.replace("(sys.argv[1])", "(sys.argv[1], preset='ful')")
    out = subprocess.run(
        [sys.executable, "-c", typo, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("CaptureError unknown preset 'ful'")
    assert not (tmp_path / "ful").exists() and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ with torch (CPU)


def _loop(logdir: Path, run: str, preset: str, **over: Any) -> Path:
    torch = _need_torch()
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))
    with capture.profile(logdir, run=run, preset=preset, label=f"test {preset}", **over) as prof:
        for _ in range(8):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            prof.step()
    files = sorted((logdir / run).glob("*.pt.trace.json.gz"))
    assert len(files) == 1, files
    return files[0]


def _profiler_steps(s: dict[str, Any]) -> list[int]:
    """The ProfilerStep numbers of summary ``s``: its steady steps, and before them the
    first window when a loaded CPU ran it long enough to be left out as a warm-up step
    (step_windows.WARM_UP; CI saw it), the only window these loops may leave out."""
    kept = [st["number"] for st in s["steps"]["steps"]]
    left = [(lo["number"], lo["reason"]) for lo in s["steps"]["left_out"]]
    assert s["health"]["trace_quality"]["steps"] == len(kept)
    assert left in ([], [(kept[0] - 1, "warm_up")]), left
    return [n for n, _ in left] + kept


@pytest.mark.parametrize("preset", ["light", "standard", "full"])
def test_each_preset_records_a_trace_we_read_with_its_metadata(tmp_path: Path, preset: str) -> None:
    from tb_kineto_insights.summary import summarize_file

    torch = _need_torch()
    path = _loop(tmp_path, f"run_{preset}", preset)
    s = as_json(summarize_file(str(path)))
    meta = s["health"]["run_metadata"]
    assert meta["preset"] == preset
    assert meta["settings"] == capture.settings_for(preset)
    assert meta["label"] == f"test {preset}"
    assert meta["torch_version"] == str(torch.__version__)
    assert meta["gpu_count"] == 0 and meta["gpu_model"] is None
    assert meta["version"] == capture.METADATA_VERSION
    # schedule wait=1, warmup=2, active=5: five ProfilerStep windows, #3 to #7
    assert _profiler_steps(s) == [3, 4, 5, 6, 7]
    flags = s["health"]["flags"]
    assert flags["has_stacks"] is (preset == "full")
    assert flags["has_memory"] is (preset != "light")
    # the trace itself agrees with the metadata: stacks recorded only by `full`
    assert bool(s["health"]["metadata"].get("with_stack")) is (preset == "full")  # Kineto: 1


def test_override_changes_the_schedule(tmp_path: Path) -> None:
    from tb_kineto_insights.summary import summarize_file

    path = _loop(tmp_path, "short", "light", active=3)
    s = as_json(summarize_file(str(path)))
    assert s["health"]["run_metadata"]["settings"]["active"] == 3
    assert _profiler_steps(s) == [3, 4, 5]


def test_light_vs_full_diff_names_the_settings(tmp_path: Path) -> None:
    from tb_kineto_insights.compare.before_after import compare, load_side

    _loop(tmp_path, "light", "light")
    _loop(tmp_path, "full", "full")
    doc = compare(load_side(str(tmp_path / "light")), load_side(str(tmp_path / "full")))
    fields = {e.field for e in doc.comparability}
    assert {"preset", "with_stack", "record_shapes", "profile_memory"} <= fields


def test_record_script_measures_overhead_per_preset(tmp_path: Path) -> None:
    _need_torch()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--device", "cpu"]
        + ["--steps", "10", "--width", "128"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    info = json.loads((tmp_path / "capture_info.json").read_text())
    assert sorted(info["runs"]) == ["capture_full", "capture_light", "capture_standard"]
    for name, run in info["runs"].items():
        res = run["results"][0]
        assert res["baseline_step_ms"] > 0 and res["profiled_step_ms"] > 0, name
        assert len(res["profiled_steps_ms"]) == 5
        assert len(list((tmp_path / name).glob("*.pt.trace.json.gz"))) == 1
