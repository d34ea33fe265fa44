"""The recording scripts under scripts/: argument parsing, workload registry, trace checks.

``scripts/record_distributed.py`` imports nothing outside the standard library at
import time, so everything here but the last tests runs without torch (the
project venv has none). The tests that record (CPU, gloo) or import
``record_sample_logs.py`` need torch and are skipped without it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import REPO, cpu, kernel, write_trace

SCRIPTS = REPO / "scripts"
DIST_SCRIPT = SCRIPTS / "record_distributed.py"
NVLS_VARS = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
NO_TORCH = "torch is not importable here (the project venv has none, by design)"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


@pytest.fixture(scope="module")
def rd() -> ModuleType:
    return _load(DIST_SCRIPT, "record_distributed_under_test")


def _parse(rd: ModuleType, *argv: str, cuda: bool = True, gpus: int = 2) -> Any:
    return rd.parse_args(list(argv), cuda_available=cuda, gpu_count=gpus)


# --------------------------------------------------------------------------
# import without torch, environment
# --------------------------------------------------------------------------


def test_import_needs_no_torch() -> None:
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('m', {str(DIST_SCRIPT)!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['m'] = m\n"
        "spec.loader.exec_module(m)\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_nvlink_multicast_off_set_before_anything_and_kept_when_set() -> None:
    code = (
        "import importlib.util, json, os, sys\n"
        f"spec = importlib.util.spec_from_file_location('m', {str(DIST_SCRIPT)!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['m'] = m\n"
        "spec.loader.exec_module(m)\n"
        f"print(json.dumps({{k: os.environ.get(k) for k in {sorted(NVLS_VARS)!r}}}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in NVLS_VARS}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert json.loads(out.stdout) == NVLS_VARS
    # setdefault: a value already in the environment is left alone
    env["NCCL_NVLS_ENABLE"] = "0 (set by the caller)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert json.loads(out.stdout)["NCCL_NVLS_ENABLE"] == "0 (set by the caller)"


def test_env_set_at_module_top_before_imports() -> None:
    src = DIST_SCRIPT.read_text()
    assert src.index("os.environ.setdefault") < src.index("import argparse")
    assert "\nimport torch" not in src  # torch only inside functions


# --------------------------------------------------------------------------
# workload registry and model size
# --------------------------------------------------------------------------


def test_workload_registry(rd: ModuleType) -> None:
    assert rd.ALL_WORKLOADS == ("ddp_default", "ddp_tuned", "fsdp", "ddp_straggler")
    w = rd.WORKLOADS
    assert {n: w[n].strategy for n in w} == {
        "ddp_default": "ddp",
        "ddp_tuned": "ddp",
        "fsdp": "fsdp",
        "ddp_straggler": "ddp",
    }
    assert [n for n in w if w[n].tuned_buckets] == ["ddp_tuned"]
    assert [n for n in w if w[n].straggler] == ["ddp_straggler"]
    assert rd.expected_collectives(w["ddp_default"]) == (rd.ALL_REDUCE_NAMES,)
    assert rd.expected_collectives(w["fsdp"]) == (rd.ALL_GATHER_NAMES, rd.REDUCE_SCATTER_NAMES)
    assert "_allgather_base" in rd.ALL_GATHER_NAMES
    assert "_reduce_scatter_base" in rd.REDUCE_SCATTER_NAMES


def test_model_sizes(rd: ModuleType) -> None:
    # ~100 M parameters on the GPU: 400 MB of fp32 gradients, many 25 MB DDP buckets
    assert 90e6 < rd.GPU_MODEL.params < 110e6
    assert 4 * rd.GPU_MODEL.params / (rd.DDP_DEFAULT_BUCKET_CAP_MB * 2**20) > 10
    assert rd.QUICK_MODEL.params < 5e6
    # more than one default bucket even for the quick model (the first bucket is 1 MiB)
    assert 4 * rd.QUICK_MODEL.params > 2 * 2**20


# --------------------------------------------------------------------------
# argument parsing
# --------------------------------------------------------------------------


def test_defaults_on_a_gpu_machine(rd: ModuleType) -> None:
    o = _parse(rd, gpus=4)
    assert (o.device, o.backend, o.world_size, o.straggler_rank) == ("cuda", "nccl", 4, 3)
    assert o.workloads == rd.ALL_WORKLOADS
    assert (o.active, o.warmup_iters, o.quick) == (rd.DEFAULT_ACTIVE_STEPS, 3, False)
    assert o.tuned_bucket_cap_mb == 100.0
    assert (o.straggler_ms, o.straggler_work, o.fsdp_impl) == (20.0, "sleep", "auto")
    assert o.out == Path("sample_logs") and o.check
    assert o.model == rd.GPU_MODEL


def test_defaults_without_cuda(rd: ModuleType) -> None:
    o = _parse(rd, "--quick", cuda=False, gpus=0)
    assert (o.device, o.backend, o.world_size, o.straggler_rank) == ("cpu", "gloo", 2, 1)
    assert o.warmup_iters == 1 and o.batch == rd.QUICK_MODEL.batch
    assert o.model == rd.QUICK_MODEL


def test_cpu_gloo_on_a_gpu_machine(rd: ModuleType) -> None:
    o = _parse(rd, "--device", "cpu", "--world-size", "3", gpus=1)
    assert (o.device, o.backend, o.world_size, o.straggler_rank) == ("cpu", "gloo", 3, 2)


def test_only_keeps_registry_order(rd: ModuleType) -> None:
    o = _parse(rd, "--only", " ddp_straggler,ddp_default,ddp_default ,")
    assert o.workloads == ("ddp_default", "ddp_straggler")


def test_options_are_passed_through(rd: ModuleType) -> None:
    o = _parse(
        rd,
        "--out",
        "/tmp/x",
        "--world-size",
        "1",
        "--active",
        "3",
        "--warmup-iters",
        "0",
        "--batch",
        "64",
        "--tuned-bucket-cap-mb",
        "50",
        "--straggler-rank",
        "0",
        "--straggler-ms",
        "7.5",
        "--straggler-work",
        "matmul",
        "--fsdp-impl",
        "fsdp1",
        "--seed",
        "3",
        "--no-check",
    )
    assert o.out == Path("/tmp/x") and o.world_size == 1 and o.active == 3
    assert o.warmup_iters == 0 and o.batch == 64 and o.model.batch == 64
    assert o.tuned_bucket_cap_mb == 50.0
    assert (o.straggler_rank, o.straggler_ms, o.straggler_work) == (0, 7.5, "matmul")
    assert o.fsdp_impl == "fsdp1" and o.seed == 3 and not o.check


@pytest.mark.parametrize(
    ("argv", "cuda", "gpus", "message"),
    [
        (["--only", "ddp,fsdp"], True, 2, "unknown workload"),
        (["--only", ","], True, 2, "unknown workload"),
        (["--world-size", "4"], True, 2, "> 2 visible GPU"),
        (["--world-size", "0"], True, 2, "must be >= 1"),
        (["--straggler-rank", "2"], True, 2, "not a rank of world size 2"),
        (["--straggler-rank", "-1"], True, 2, "not a rank"),
        (["--device", "cpu", "--backend", "nccl"], True, 2, "needs --device cuda"),
        (["--device", "cuda"], False, 0, "CUDA is not available"),
        (["--active", "0"], True, 2, "--active"),
        (["--straggler-ms", "-1"], True, 2, "--straggler-ms"),
        (["--tuned-bucket-cap-mb", "0"], True, 2, "--tuned-bucket-cap-mb"),
        (["--batch", "0"], True, 2, "--batch"),
        (["--straggler-work", "spin"], True, 2, "invalid choice"),
        (["--device", "cpu", "--fsdp-impl", "fsdp1"], True, 2, "FSDP1 refuses the CPU"),
    ],
)
def test_bad_arguments(
    rd: ModuleType,
    argv: list[str],
    cuda: bool,
    gpus: int,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        _parse(rd, *argv, cuda=cuda, gpus=gpus)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


# --------------------------------------------------------------------------
# reading back traces (synthetic, no torch)
# --------------------------------------------------------------------------


def _rank_events(ops: dict[str, int], backend: str, steps: int = 3) -> list[dict[str, Any]]:
    evs: list[dict[str, Any]] = []
    t = 0.0
    for s in range(2, 2 + steps):
        evs.append(cpu(f"ProfilerStep#{s}", t, 100, cat="user_annotation"))
        for op, n in ops.items():
            for _ in range(n):
                evs.append(cpu(f"c10d::{op}_", t + 1, 2))
                short = {"allreduce": "all_reduce", "_allgather_base": "all_gather"}.get(op, op)
                evs.append(cpu(f"{backend}:{short}", t + 1, 3, cat="user_annotation"))
                if backend == "nccl":
                    rpc = cpu("record_param_comms", t + 1, 2)
                    rpc["args"] = {"Collective name": op}
                    evs.append(rpc)
                    evs.append(kernel(f"ncclDevKernel_{op}(int)", t + 5, 3))
        t += 100
    return evs


def _write_run(
    run: Path, per_rank: list[dict[str, int]], backend: str = "gloo", steps: int = 3
) -> None:
    for r, ops in enumerate(per_rank):
        write_trace(
            run / f"rank{r}.{1000 + r}.pt.trace.json.gz",
            _rank_events(ops, backend, steps),
            gz=True,
            distributedInfo={"backend": backend, "rank": r, "world_size": len(per_rank)},
        )


def test_summarize_and_check_a_good_ddp_run(rd: ModuleType, tmp_path: Path) -> None:
    _write_run(tmp_path, [{"allreduce": 4}, {"allreduce": 4}], backend="nccl")
    (tmp_path / "recording_info.json").write_text("{}")  # not a trace
    summaries, problems = rd.check_run(tmp_path, rd.WORKLOADS["ddp_tuned"], 2, 3)
    assert problems == []
    s = summaries["rank1"]
    assert s["steps"] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert s["c10d_ops"] == {"c10d::allreduce_": 12}
    assert s["backend_ops"] == {"nccl:all_reduce": 12}
    assert s["record_param_comms"] == {"allreduce": 12}
    assert s["nccl_kernels"] == {"ncclDevKernel_allreduce": 12}
    assert s["distributedInfo"]["world_size"] == 2
    assert rd.collective_names(s) == {"allreduce"}


def test_check_fsdp_needs_all_gather_and_reduce_scatter(rd: ModuleType, tmp_path: Path) -> None:
    good = {"_allgather_base": 3, "_reduce_scatter_base": 2}
    _write_run(tmp_path / "ok", [good, good])
    assert rd.check_run(tmp_path / "ok", rd.WORKLOADS["fsdp"], 2, 3)[1] == []
    _write_run(tmp_path / "no_rs", [{"_allgather_base": 3}] * 2)
    problems = rd.check_run(tmp_path / "no_rs", rd.WORKLOADS["fsdp"], 2, 3)[1]
    assert len(problems) == 2 and all("_reduce_scatter_base" in p for p in problems)


def test_fsdp_on_one_rank_needs_no_collectives(rd: ModuleType, tmp_path: Path) -> None:
    # FSDP2 on one rank issues no all_gather / reduce_scatter (seen: torch 2.11, NCCL, 1 H200)
    _write_run(tmp_path / "one", [{}], backend="nccl")
    assert rd.check_run(tmp_path / "one", rd.WORKLOADS["fsdp"], 1, 3)[1] == []
    assert not rd.needs_collectives(rd.WORKLOADS["fsdp"], 1)
    assert rd.needs_collectives(rd.WORKLOADS["fsdp"], 2)
    assert rd.needs_collectives(rd.WORKLOADS["ddp_default"], 1)
    problems = rd.check_run(tmp_path / "one", rd.WORKLOADS["ddp_default"], 1, 3)[1]
    assert any("no c10d::" in p for p in problems)


def test_check_finds_missing_ranks_steps_collectives(rd: ModuleType, tmp_path: Path) -> None:
    _write_run(tmp_path / "a", [{"allreduce": 2}])
    problems = rd.check_run(tmp_path / "a", rd.WORKLOADS["ddp_default"], 2, 3)[1]
    assert problems == ["ranks with traces [0] != 0..1"]

    _write_run(tmp_path / "b", [{"allreduce": 2}, {"allreduce": 2}], steps=2)
    problems = rd.check_run(tmp_path / "b", rd.WORKLOADS["ddp_default"], 2, 3)[1]
    assert len(problems) == 2 and all("2 ProfilerStep# != 3" in p for p in problems)

    _write_run(tmp_path / "c", [{"allreduce": 2}, {"allreduce": 3}])
    problems = rd.check_run(tmp_path / "c", rd.WORKLOADS["ddp_default"], 2, 3)[1]
    assert len(problems) == 1 and "differ between ranks" in problems[0]

    _write_run(tmp_path / "d", [{}, {}])
    problems = rd.check_run(tmp_path / "d", rd.WORKLOADS["ddp_default"], 2, 3)[1]
    assert any("no c10d::" in p for p in problems)
    assert any("no nccl:/gloo:" in p for p in problems)
    assert any("none of" in p and "allreduce" in p for p in problems)

    _write_run(tmp_path / "e", [{"allreduce": 1}, {"allreduce": 1}])
    (tmp_path / "e" / "rank1.2.pt.trace.json.gz").write_bytes(b"not gzip")
    (tmp_path / "e" / "worker0.1.pt.trace.json.gz").write_bytes(b"")
    problems = rd.check_run(tmp_path / "e", rd.WORKLOADS["ddp_default"], 2, 3)[1]
    assert any("worker0.1.pt.trace.json.gz: not a rank" in p for p in problems)
    assert any(p == "rank1: 2 trace files" for p in problems)
    assert any("rank1.2.pt.trace.json.gz: does not parse" in p for p in problems)


def test_nccl_traces_need_record_param_comms(rd: ModuleType, tmp_path: Path) -> None:
    _write_run(tmp_path, [{"allreduce": 1}], backend="nccl")
    path = next(tmp_path.glob("rank0.*"))
    events = [
        e for e in _rank_events({"allreduce": 1}, "nccl") if e["name"] != "record_param_comms"
    ]
    write_trace(path, events, gz=True, distributedInfo={"backend": "nccl"})
    problems = rd.check_run(tmp_path, rd.WORKLOADS["ddp_default"], 1, 3)[1]
    assert problems == [f"{path.name}: no record_param_comms ops (expected with nccl)"]


def test_rank_of_trace_and_c10d_names(rd: ModuleType) -> None:
    assert rd.rank_of_trace("rank12.1795951636995845326.pt.trace.json.gz") == 12
    assert rd.rank_of_trace("worker0.1.pt.trace.json.gz") is None
    assert rd.rank_of_trace("rankX.1.pt.trace.json.gz") is None
    assert rd.c10d_collective("c10d::_allgather_base_") == "_allgather_base"
    assert rd.c10d_collective("c10d::allreduce_") == "allreduce"


def test_merge_rank_parts(rd: ModuleType, tmp_path: Path) -> None:
    o = _parse(rd, "--straggler-ms", "15", gpus=2)
    parts = tmp_path / rd.PARTS_DIR
    parts.mkdir()
    for r in range(2):
        part: dict[str, Any] = {
            "rank": r,
            "profiled_step_wall_ms": [10.0 + r],
            "straggler_extra_ms": [15.1] if r == 1 else [],
        }
        if r == 0:
            part["common"] = {"workload": "ddp_straggler", "world_size": 2}
        (parts / f"rank{r}.json").write_text(json.dumps(part))
    info = rd.merge_rank_parts(tmp_path, o, rd.WORKLOADS["ddp_straggler"])
    assert not parts.exists()  # the parts are merged and removed
    assert info["workload"] == "ddp_straggler" and info["world_size"] == 2
    assert sorted(info["ranks"]) == ["rank0", "rank1"]
    assert "common" not in info["ranks"]["rank0"]
    strag = info["straggler"]
    assert (strag["rank"], strag["work"], strag["extra_ms_target"]) == (1, "sleep", 15.0)
    assert strag["extra_ms_measured"] == [15.1]
    # no straggler block for the other workloads, and no parts is fine
    assert "straggler" not in rd.merge_rank_parts(tmp_path, o, rd.WORKLOADS["ddp_default"])


# --------------------------------------------------------------------------
# with torch: a real CPU recording (gloo, 2 ranks) and the older script's parser
# --------------------------------------------------------------------------


def _need_torch() -> None:
    """Skip without torch, except in ``make capture-test`` (KINETO_INSIGHTS_TORCH_TESTS=1),
    where a missing torch is a failure."""
    if os.environ.get("KINETO_INSIGHTS_TORCH_TESTS") == "1":
        import torch  # noqa: F401  (fails the test when missing)
    else:
        pytest.importorskip("torch", reason=NO_TORCH)


def test_record_sample_logs_parses_without_gpu() -> None:
    _need_torch()
    rsl = _load(SCRIPTS / "record_sample_logs.py", "record_sample_logs_under_test")
    opts, names = rsl.parse_args(["--device", "cpu", "--quick", "--only", "ddp"])
    assert names == ["ddp"] and opts.backend == "gloo" and opts.world_size == 2
    opts, names = rsl.parse_args(["--device", "cpu", "--quick", "--only", ",".join(MEMORY_RUNS)])
    assert names == list(MEMORY_RUNS) and opts.quick and opts.warmup_iters == 1


def test_cpu_gloo_recording_two_ranks(tmp_path: Path) -> None:
    _need_torch()
    cmd = [sys.executable, str(DIST_SCRIPT), "--out", str(tmp_path), "--device", "cpu"]
    cmd += ["--quick", "--world-size", "2", "--active", "3", "--only", "ddp_tuned,ddp_straggler"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for name in ("ddp_tuned", "ddp_straggler"):
        traces = sorted((tmp_path / name).glob("rank*.pt.trace.json.gz"))
        assert [t.name.split(".")[0] for t in traces] == ["rank0", "rank1"]
        info = json.loads((tmp_path / name / "recording_info.json").read_text())
        assert info["check_problems"] == [] and info["world_size"] == 2
        assert info["backend"] == "gloo"
        assert info["nvlink_multicast_off_env"] == NVLS_VARS
        for r in ("rank0", "rank1"):
            assert len(info["trace_summary"][r]["steps"]) == 3
            assert info["trace_summary"][r]["c10d_ops"].get("c10d::allreduce_", 0) >= 3
    strag = json.loads((tmp_path / "ddp_straggler" / "recording_info.json").read_text())
    assert strag["straggler"]["rank"] == 1
    assert len(strag["straggler"]["extra_ms_measured"]) == 3
    assert all(v >= 19.0 for v in strag["straggler"]["extra_ms_measured"])
    top = json.loads((tmp_path / "recording_info.json").read_text())
    assert set(top["runs"]) == {"ddp_tuned", "ddp_straggler"}


# --------------------------------------------------------------------------
# record_sample_logs.py without torch: its registry and its trace reading,
# taken from the source (importing the script needs torch)
# --------------------------------------------------------------------------

SAMPLE_SCRIPT = SCRIPTS / "record_sample_logs.py"
MEMORY_RUNS = (
    "memory_leak_async",
    "memory_fixed_async",
    "memory_fragmentation",
    "memory_fragmentation_fixed",
    "memory_fragmentation_expandable",
)


def _sample_script_tree() -> ast.Module:
    return ast.parse(SAMPLE_SCRIPT.read_text(), filename=str(SAMPLE_SCRIPT))


def _sample_script_constant(name: str) -> Any:
    for node in _sample_script_tree().body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not assigned at the top of {SAMPLE_SCRIPT.name}")


def _sample_script_function(name: str) -> Any:
    fn = next(
        n for n in _sample_script_tree().body if isinstance(n, ast.FunctionDef) and n.name == name
    )
    namespace: dict[str, Any] = {"json": json, "Path": Path}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(SAMPLE_SCRIPT), "exec"), namespace)
    return namespace[name]


def test_sample_script_registers_the_memory_runs() -> None:
    workloads = _sample_script_constant("ALL_WORKLOADS")
    assert set(MEMORY_RUNS) <= set(workloads)
    assert workloads[-1] == "ddp" and len(set(workloads)) == len(workloads)
    assert _sample_script_constant("EXPANDABLE_ENV") == "expandable_segments:True"
    src = SAMPLE_SCRIPT.read_text()
    for run in MEMORY_RUNS:  # each one has a runner in main()
        assert f'"{run}": lambda' in src


def _launch(ts: float, corr: int) -> dict[str, Any]:
    e = cpu("cudaLaunchKernel", ts, 2, cat="cuda_runtime")
    e["args"] = {"correlation": corr}
    return e


def test_host_lead_from_trace_exact(tmp_path: Path) -> None:
    host_lead = _sample_script_function("host_lead_from_trace")
    events = [
        cpu("ProfilerStep#2", 0, 100, cat="user_annotation"),
        cpu("ProfilerStep#3", 100, 100, cat="user_annotation"),
        cpu("ProfilerStep#4", 200, 100, cat="user_annotation"),
        # step 2 launches two kernels ending at 900 and 1500; step 3 one ending at 2500
        _launch(10, 1),
        _launch(20, 2),
        _launch(110, 3),
        kernel("a", 500, 400, corr=1),
        kernel("b", 900, 600, corr=2),
        kernel("c", 1500, 1000, corr=3),
        kernel("orphan", 3000, 10, corr=99),  # no launch: ignored
    ]
    path = write_trace(tmp_path / "w.pt.trace.json.gz", events, gz=True)
    assert host_lead(path) == [
        {
            "step": 2,
            "cpu_start_us": 0.0,
            "prev_gpu_end_us": None,
            "host_ahead_ms": None,
            "steps_in_flight": 0,
        },
        {
            "step": 3,
            "cpu_start_us": 100.0,
            "prev_gpu_end_us": 1500.0,
            "host_ahead_ms": 1.4,
            "steps_in_flight": 1,
        },
        {
            "step": 4,
            "cpu_start_us": 200.0,
            "prev_gpu_end_us": 2500.0,
            "host_ahead_ms": 2.3,
            "steps_in_flight": 2,
        },
    ]


@pytest.mark.parametrize("run", ["memory_leak_async", "memory_fixed_async"])
def test_host_lead_reproduces_the_recorded_runs(run: str) -> None:
    host_lead = _sample_script_function("host_lead_from_trace")
    logs = REPO / "sample_logs"
    if not (logs / run).is_dir():
        pytest.skip(f"sample_logs/{run} not found")
    (trace,) = sorted((logs / run).glob("*.pt.trace.json.gz"))
    info = json.loads((logs / "recording_info.json").read_text())["memory"][run]
    lead = host_lead(trace)
    assert lead == info["host_lead_per_profiled_step"]
    # the host ran ahead: from the third profiled step on, two or more steps in flight
    assert [x["steps_in_flight"] for x in lead] == [0, 1, 2, 3, 4]
    assert all(x["host_ahead_ms"] > 15.0 for x in lead[1:])
