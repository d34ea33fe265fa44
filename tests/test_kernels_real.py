"""The tests of ``test_kernels.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SAMPLE_LOGS, require_dir
from test_kernels import assert_plain_json

from tb_kineto_insights.analysis.kernels import NO_KERNELS_NOTE, kernels_summary
from tb_kineto_insights.analysis.trace_index import TraceIndex, build_index
from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.reader import read_trace


def _index(path: Path) -> TraceIndex:
    return build_index(read_trace(str(path)))


def _one(folder: Path, pattern: str) -> Path:
    (path,) = sorted(folder.glob(pattern))
    return path


def test_cuda_graphs_small_kernels(shared_traces: Path) -> None:
    index = _index(shared_traces / "hta_cuda_graphs_small_kernels" / "rank0.json.gz")
    s = kernels_summary(index)
    assert_plain_json(s)
    assert s.count == 6080  # HTA: 6,080 kernels
    assert 0.80 <= s.short_count_fraction <= 0.95  # HTA: ~88 % under 10 µs
    assert s.graph_launched_count > 0

    # independent recount in plain Python from the table arrays
    trace = index.trace
    k, rt = trace.kernels, trace.runtime
    windows = list(zip(index.steps.start_ns.tolist(), index.steps.end_ns.tolist(), strict=True))
    starts, durs = k.start_ns.tolist(), k.dur_ns.tolist()
    in_step = [any(a <= t < b for a, b in windows) for t in starts]
    n_in = sum(in_step)
    n_short_in = sum(1 for d, ok in zip(durs, in_step, strict=True) if ok and d < 10_000)
    assert s.count_in_steps == n_in
    assert s.short_count_fraction == n_short_in / n_in
    all_short = sum(1 for d in durs if d < 10_000) / len(durs)
    assert 0.85 <= all_short <= 0.90  # over ALL kernels too (every kernel is in a step)
    runtime_name = {
        c: trace.names[n] for c, n in zip(rt.correlation.tolist(), rt.name.tolist(), strict=True)
    }
    graph = sum(1 for c in k.correlation.tolist() if runtime_name.get(c) == "cudaGraphLaunch")
    assert s.graph_launched_count == graph
    unlinked = sum(1 for c in k.correlation.tolist() if c not in runtime_name)
    assert s.launch.unlinked_kernels == unlinked
    assert s.launch.one_to_one_count == n_in - graph - unlinked
    assert sum(r.count for r in s.duration_histogram) == n_in
    assert sum(r.count for r in s.per_step) == n_in
    assert s.fusion_candidates and all(
        c.occurrences >= 3 and c.length >= 3 for c in s.fusion_candidates
    )


def test_eager_has_more_kernels_per_step_than_compile() -> None:
    eager_dir = require_dir(SAMPLE_LOGS / "transformer_eager", "sample_logs/transformer_eager")
    compile_dir = require_dir(
        SAMPLE_LOGS / "transformer_compile", "sample_logs/transformer_compile"
    )
    eager = kernels_summary(_index(_one(eager_dir, "*.pt.trace.json.gz")))
    compiled = kernels_summary(_index(_one(compile_dir, "*.pt.trace.json.gz")))
    assert_plain_json(eager)
    assert eager.short_count_fraction > 0.8
    assert eager.mean_per_step > compiled.mean_per_step
    assert eager.launch.unlinked_kernels == 0
    assert eager.fusion_candidates[0].cpu_op is not None


@pytest.mark.parametrize(
    "folder",
    ["hta_cpu_only", pytest.param("hta_mtia", marks=pytest.mark.slow)],
)
def test_traces_without_kernels(shared_traces: Path, folder: str) -> None:
    s = kernels_summary(_index(_one(shared_traces / folder, "*.json.gz")))
    assert_plain_json(s)
    assert s.count == 0
    assert s.notes and s.notes[0].startswith(NO_KERNELS_NOTE)


def test_amd_hip_launches_linked(shared_traces: Path) -> None:
    index = _index(_one(shared_traces / "hta_amd_mi250", "*.json.gz"))
    s = kernels_summary(index)
    assert_plain_json(s)
    trace = index.trace
    assert s.count == len(trace.kernels) > 0
    assert s.launch.unlinked_kernels == 0
    assert s.launch.launch_count > 0 and s.launch.mean_launch_us > 0
    launchers = {
        trace.names[int(trace.runtime.name[r])] for r in index.launch_row[m.KERNEL].tolist()
    }
    assert "hipLaunchKernel" in launchers
    assert s.count_in_steps + s.outside_steps.count == s.count
    assert 0.0 <= s.short_count_fraction <= 1.0
    assert s.launch.one_to_one_count == s.count_in_steps
