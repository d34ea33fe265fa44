"""The tests of ``test_comparability.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

from conftest import SAMPLE_LOGS, as_json

from tb_kineto_insights.compare.before_after import compare, load_side


def test_real_light_full_pair_warns_about_the_settings() -> None:
    doc = compare(
        load_side(str(SAMPLE_LOGS / "capture_light")), load_side(str(SAMPLE_LOGS / "capture_full"))
    )
    found = {e["field"]: e for e in as_json(doc.comparability)}
    assert (found["preset"]["base"], found["preset"]["new"]) == ("light", "full")
    for key in ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules"):
        assert (found[key]["base"], found[key]["new"]) == (False, True), key
    # same machine, same software: nothing else differs but the label-free facts
    assert set(found) <= {
        "preset",
        "record_shapes",
        "profile_memory",
        "with_stack",
        "with_flops",
        "with_modules",
    }
    # said once: the old "different profiler settings: with_stack differs" warnings
    # repeated three of these lines in diff, check and the tab
    assert not [w for w in doc.warnings if "profiler settings" in w]


def test_real_blocking_run_is_named_from_env_and_from_the_trace() -> None:
    doc = compare(
        load_side(str(SAMPLE_LOGS / "capture_light")),
        load_side(str(SAMPLE_LOGS / "capture_blocking")),
    )
    found = {e["field"]: e for e in as_json(doc.comparability)}
    env = found["env.CUDA_LAUNCH_BLOCKING"]
    assert (env["base"], env["new"], env["source"]) == (None, "1", "metadata")
    seen = found["cuda_launch_blocking"]
    assert (seen["base"], seen["new"], seen["source"]) == (False, True, "trace")
    assert "preset" not in found  # both light
