"""Where the host synchronised (``idle.devices[].sync_sources``, ``analysis/idle_sync.py``)
and what ``gpu_idle_host_sync`` says of it, on real traces: the known answers of
``sample_logs/sync_isnan_check`` (``if torch.isnan(h).any():`` after each of 12 layers)
and ``stacks_blocking_log`` (``loss.item()``), and runs with no GPU sync."""

from __future__ import annotations

from conftest import SAMPLE_LOGS

from tb_kineto_insights.summary import summarize_file


def _summary(run: str):  # type: ignore[no-untyped-def]
    (path,) = (SAMPLE_LOGS / run).glob("*.pt.trace.json.gz")
    return summarize_file(str(path))


def test_isnan_checks_are_12_syncs_per_step_from_is_nonzero() -> None:
    s = _summary("sync_isnan_check")
    dev = s.idle.main_entry()
    assert dev is not None
    (src,) = dev.sync_sources
    assert (src.op, src.after, src.call) == (
        "aten::is_nonzero",
        "aten::any",
        "cudaStreamSynchronize",
    )
    assert src.chain == [
        "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize"
    ]  # fmt: skip
    assert src.calls_per_step == 12.0
    assert src.python_frame == "record_compiled_world.py(366): step"
    # the idle the syncs open is nearly all of the host_sync cause
    assert src.idle_us >= 0.9 * dev.causes["host_sync"].us
    d = next(d for d in s.diagnoses if d.id == "gpu_idle_host_sync")
    assert "12 syncs per step from aten::is_nonzero ← aten::any" in d.title
    assert "in record_compiled_world.py(366): step" in d.title
    assert d.evidence["syncs_per_step"] == 12.0
    assert "Python `if`" in d.recommendation


def test_removed_checks_leave_no_sync() -> None:
    s = _summary("sync_isnan_removed")
    dev = s.idle.main_entry()
    assert dev is not None and dev.sync_sources == []
    assert "gpu_idle_host_sync" not in {d.id for d in s.diagnoses}


def test_a_sync_gap_names_the_op_that_synchronised() -> None:
    """``loss.item()`` then a 12 ms ``log_metrics()``: the gaps the sync opens name
    ``aten::item`` (the host was in ``log_metrics`` for most of them, after the sync)."""
    s = _summary("stacks_blocking_log")
    dev = s.idle.main_entry()
    assert dev is not None
    (src,) = dev.sync_sources
    assert (src.op, src.calls_per_step, src.gaps_opened) == ("aten::item", 1.0, 5)
    synced = [g for g in dev.largest_gaps if g.opened_by_sync]
    assert len(synced) == 5
    assert {(g.op, g.innermost_op) for g in synced} == {("aten::item", "cudaStreamSynchronize")}


def test_item_of_a_cpu_tensor_is_no_sync() -> None:
    """Adam's ``foreach`` step reads its step counts (CPU tensors) with ``.item()``:
    1,600 ``aten::_local_scalar_dense`` with no runtime sync inside; none is a sync, so
    no host_sync idle and no source (they were 9 % of the step, "after host
    synchronisation")."""
    s = _summary("optimizer_foreach")
    dev = s.idle.main_entry()
    assert dev is not None
    assert dev.sync_sources == [] and dev.causes["host_sync"].us == 0.0
    assert "gpu_idle_host_sync" not in {d.id for d in s.diagnoses}
