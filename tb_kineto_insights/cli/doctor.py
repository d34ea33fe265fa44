"""``tb-kineto-insights doctor``: is this installation ready to show the tab?

Checks, in order, and prints one line for each:

1. Python and this package's version.
2. TensorBoard: installed, and its version.
3. The ``tensorboard_plugins`` entry points (what TensorBoard itself loads at start):
   ``kineto_insights`` (this package) must be there and load, with the plugin's own
   dependencies; ``pytorch_profiler`` (the ``torch-tb-profiler`` package, the PyTorch
   Profiler tab) is optional: reported, never a failure.
4. The cache folder the plugin would use, and whether it is writable (a warning only:
   the plugin then keeps summaries in memory).
5. Informational: how a large trace would be read now (worker processes or one, and
   why: ``trace/parallel.py``'s :func:`~tb_kineto_insights.trace.parallel.plan_read`).
6. A parse of one trace: the smallest file of ``sample_logs/`` (beside the package in a
   source checkout, or in the current folder) when there is one, else a tiny trace
   built in.

Exit status 0 when our plugin is fine (2, 3 for ``kineto_insights``, 6), else 1.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import platform
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from tb_kineto_insights import __version__

__all__ = ["OUR_PLUGIN", "TORCH_PROFILER_PLUGIN", "run_doctor"]

OUR_PLUGIN = "kineto_insights"
#: The PyTorch Profiler tab's plugin name; torch-tb-profiler registers its entry point
#: as ``torch_profiler`` (module ``torch_tb_profiler``).
TORCH_PROFILER_PLUGIN = "pytorch_profiler"
_TORCH_PROFILER_ENTRY_NAMES = ("torch_profiler", "pytorch_profiler")
_TORCH_PROFILER_MODULE = "torch_tb_profiler"
_GROUP = "tensorboard_plugins"


def _torch_profiler_entry(eps: dict[str, metadata.EntryPoint]) -> metadata.EntryPoint | None:
    for name in _TORCH_PROFILER_ENTRY_NAMES:
        if name in eps:
            return eps[name]
    for ep in eps.values():
        if ep.value.split(":")[0].split(".")[0] == _TORCH_PROFILER_MODULE:
            return ep
    return None


def _entry_points() -> dict[str, metadata.EntryPoint]:
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=_GROUP):
        found.setdefault(ep.name, ep)
    return found


def _distribution_version(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is not None:
        return f"{dist.metadata['Name']} {dist.version}"
    return "?"


def _check_entry_point(ep: metadata.EntryPoint) -> str | None:
    """None when the entry point loads and is a TensorBoard loader or plugin class, else
    the problem in words."""
    try:
        obj = ep.load()
    except Exception as exc:
        return f"cannot be imported ({type(exc).__name__}: {exc})"
    from tensorboard.plugins import base_plugin

    if isinstance(obj, type) and issubclass(obj, (base_plugin.TBLoader, base_plugin.TBPlugin)):
        return None
    return f"is {obj!r}, not a TensorBoard loader or plugin class"


def _sample_trace() -> tuple[str, str]:
    """``(path, description)``: the smallest trace of sample_logs/, else a built-in one
    (written to a temporary file)."""
    from tb_kineto_insights.logdir.discovery import discover

    for folder in (Path(__file__).resolve().parents[2] / "sample_logs", Path.cwd() / "sample_logs"):
        if not folder.is_dir():
            continue
        try:
            spans = [s for r in discover(str(folder)) for w in r.workers for s in w.spans]
        except Exception:
            continue
        if spans:
            smallest = min(spans, key=lambda s: s.size_bytes)
            return smallest.path, f"{folder}: {smallest.run}/{smallest.worker}/{smallest.span}"
    events: list[dict[str, Any]] = []
    for n in range(1, 4):
        ts = 1000.0 * n
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{n}",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 900.0,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "void gemm_kernel<float>()",
                "pid": 0,
                "tid": 7,
                "ts": ts + 100.0,
                "dur": 500.0,
                "args": {"device": 0, "stream": 7, "correlation": n},
            }
        )
    handle, path = tempfile.mkstemp(prefix="kineto-insights-doctor-", suffix=".pt.trace.json.gz")
    with os.fdopen(handle, "wb") as out:
        out.write(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path, "built-in tiny trace (no sample_logs/ found)"


def _parallel_read() -> str:
    """What the reader would choose now (``trace/parallel.py``): the CPUs, the load, and
    the plan for a 100 MB and a 1 GB trace."""
    from tb_kineto_insights.trace import parallel

    machine = parallel.machine_now()
    quota = "no cgroup quota" if machine.quota is None else f"cgroup quota {machine.quota:g} CPU"
    plans = "; ".join(
        f"{label}: {parallel.plan_read(size, machine, parallel.costs_now()).reason}"
        for label, size in (("a 100 MB trace", 10**8), ("1 GB", 10**9))
    )
    return f"affinity {machine.affinity} CPUs, {quota}, load {machine.load:.1f}; {plans}"


def run_doctor(out: TextIO, err: TextIO) -> int:
    """Run the checks, print a report on ``out`` (problems also on ``err``); 0 when the
    Kineto Insights plugin is ready, else 1."""
    ok = True

    def line(status: str, what: str, detail: str) -> None:
        out.write(f"[{status:4s}] {what}: {detail}\n")

    def fail(what: str, detail: str) -> None:
        nonlocal ok
        ok = False
        line("FAIL", what, detail)
        err.write(f"doctor: {what}: {detail}\n")

    line("ok", "python", f"{platform.python_version()} ({platform.python_implementation()})")
    line("ok", "tb-kineto-insights", __version__)

    try:
        from tensorboard import version as tb_version

        line("ok", "tensorboard", tb_version.VERSION)
    except Exception as exc:
        fail(
            "tensorboard", f"not importable ({type(exc).__name__}: {exc}); pip install tensorboard"
        )

    try:
        eps = _entry_points()
    except Exception as exc:
        eps = {}
        fail("entry points", f"cannot list {_GROUP} ({type(exc).__name__}: {exc})")
    ours = eps.get(OUR_PLUGIN)
    if ours is None:
        fail(
            f"plugin {OUR_PLUGIN}",
            f"no {_GROUP} entry point: TensorBoard will not show the tab "
            "(install the package: pip install -e . or pip install tb-kineto-insights)",
        )
    else:
        problem = _check_entry_point(ours)
        if problem is None:
            try:
                from tb_kineto_insights.serve import plugin  # noqa: F401  (the heavy dependencies)
            except Exception as exc:
                problem = f"its plugin module cannot be imported ({type(exc).__name__}: {exc})"
        if problem is None:
            line("ok", f"plugin {OUR_PLUGIN}", f"{ours.value} ({_distribution_version(ours)})")
        else:
            fail(f"plugin {OUR_PLUGIN}", f"{ours.value} {problem}")
    theirs = _torch_profiler_entry(eps)
    if theirs is None:
        line(
            "warn",
            f"plugin {TORCH_PROFILER_PLUGIN}",
            "not installed: no PyTorch Profiler tab beside ours (pip install torch-tb-profiler)",
        )
    else:
        problem = _check_entry_point(theirs)
        status = "ok" if problem is None else "warn"
        detail = f"{theirs.value} ({_distribution_version(theirs)})"
        line(status, f"plugin {TORCH_PROFILER_PLUGIN}", detail + (f" {problem}" if problem else ""))
    others = sorted(n for n, ep in eps.items() if ep is not ours and ep is not theirs)
    if others:
        line("info", "other tensorboard plugins", ", ".join(others))

    try:
        from tb_kineto_insights.store.cache import cache_dir_from_env

        folder = cache_dir_from_env()
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-", delete=True):
            pass
        line("ok", "cache folder", f"{folder} (writable)")
    except Exception as exc:
        line("warn", "cache folder", f"not usable ({exc}); summaries would be kept in memory")

    line("info", "parallel read", _parallel_read())

    built_in: str | None = None
    try:
        from tb_kineto_insights.summary import summarize_file

        path, description = _sample_trace()
        if description.startswith("built-in"):
            built_in = path
        started = time.perf_counter()
        summary = summarize_file(path)
        elapsed = time.perf_counter() - started
        line(
            "ok",
            "parse",
            f"{description}: {summary.health.event_count} events, {summary.steps.count} steps "
            f"in {elapsed:.2f} s",
        )
    except Exception as exc:
        fail("parse", f"{type(exc).__name__}: {exc}")
    finally:
        if built_in is not None:
            with contextlib.suppress(OSError):
                os.unlink(built_in)

    out.write("ready\n" if ok else "not ready: see the FAIL lines above\n")
    return 0 if ok else 1


if __name__ == "__main__":  # python -m tb_kineto_insights.cli.doctor
    import sys

    sys.exit(run_doctor(sys.stdout, sys.stderr))
