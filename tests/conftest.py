"""Shared test helpers: where the real traces are, and writers for tiny traces."""

from __future__ import annotations

import functools
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SHARED = REPO.parent / "shared"
SHARED_TRACES = SHARED / "traces" / "public"
#: Real 2-GPU traces (2 x H200) with ground truth in each run's recording_info.json.
H200X2 = SHARED / "traces" / "h200x2"
#: Small failing inputs from public bug reports (see its README for the right answers).
CASES = SHARED / "cases"
SAMPLE_LOGS = REPO / "sample_logs"


T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    what: str | Callable[[], str],
    *,
    interval: float = 0.02,
) -> T:
    """Poll ``predicate`` every ``interval`` seconds until it returns something true, and
    return that; past ``timeout`` seconds fail, naming ``what`` (a callable: called then,
    for the state at that moment). For a condition no event of ours tells of (another
    process, a file, a server's answer); ``timeout`` is a bound on a hang, never a pace.
    An exception of ``predicate`` (an assertion on the way) goes through."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            pytest.fail(f"waited {timeout:g} s for {said}")
        time.sleep(interval)


def require_dir(path: Path, what: str) -> Path:
    """Skip (or fail under KINETO_INSIGHTS_REQUIRE_SHARED=1) when ``path`` is missing."""
    if not path.is_dir():
        reason = f"{what} not found at {path}"
        if os.environ.get("KINETO_INSIGHTS_REQUIRE_SHARED") == "1":
            pytest.fail(reason + " (KINETO_INSIGHTS_REQUIRE_SHARED=1)")
        pytest.skip(reason)
    return path


@pytest.fixture
def shared_traces() -> Path:
    return require_dir(SHARED_TRACES, "../shared/traces/public")


@pytest.fixture
def h200x2() -> Path:
    return require_dir(H200X2, "../shared/traces/h200x2")


@pytest.fixture
def shared_cases() -> Path:
    return require_dir(CASES, "../shared/cases")


#: Modules real by nature that keep their names, because files outside tests/ name them by
#: path: the torch modules (``make capture-test`` runs them in the torch venv),
#: test_expected_diagnoses (docs/adding_a_diagnosis.md and sample_logs/README.md point
#: at it; it reads every real run) and test_many_ranks (benchmarks/synth_ranks.py; its
#: ranks are copies of the h200x2 ones).
REAL_BY_NATURE = frozenset(
    {"test_capture", "test_record_scripts", "test_expected_diagnoses", "test_many_ranks"}
)


def is_real_module(path: Path) -> bool:
    """Whether the tests of the module at ``path`` are ``real``: they read real traces
    (``sample_logs/``, ``../shared``), drive the browser, need torch or an S3 server. Said
    by where they live: a module named ``*_real.py``, the ``browser/`` folder, or one of
    :data:`REAL_BY_NATURE` (tests/test_test_names.py holds every other module to tiny
    hand-written traces)."""
    try:
        folders = path.resolve().relative_to(TESTS).parts[:-1]
    except ValueError:  # not under tests/
        folders = ()
    return path.stem.endswith("_real") or path.stem in REAL_BY_NATURE or "browser" in folders


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``real`` every test of a real module (:func:`is_real_module`), so that ``make
    quick`` (``-m "not real and not slow"``) runs only the unit tests on tiny hand-written
    traces."""
    for item in items:
        if is_real_module(item.path):
            item.add_marker(pytest.mark.real)


# --------------------------------------------------------------------------- S3 (moto)


@dataclass(frozen=True)
class S3Server:
    """A moto S3-API server on loopback; ``env``: fsspec's standard configuration for it
    (what a user sets to point ``s3://`` at their endpoint)."""

    endpoint_url: str
    env: dict[str, str]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto server (``moto[server]``) per test session, on 127.0.0.1 and a free port.
    Skipped when moto or s3fs is missing, except under CI
    (``KINETO_INSIGHTS_REQUIRE_SHARED=1``), where that fails."""
    try:
        import s3fs  # noqa: F401
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        reason = f"object-storage tests need moto[server] and s3fs (pip install -e '.[dev]'): {exc}"
        if os.environ.get("KINETO_INSIGHTS_REQUIRE_SHARED") == "1":
            pytest.fail(reason + " (KINETO_INSIGHTS_REQUIRE_SHARED=1)")
        pytest.skip(reason)
    import fsspec.config

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "FSSPEC_S3_ENDPOINT_URL": endpoint,
        "FSSPEC_S3_KEY": "testing",
        "FSSPEC_S3_SECRET": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved_env = {k: os.environ.get(k) for k in env}
    saved_conf = dict(fsspec.config.conf.get("s3", {}))
    os.environ.update(env)
    # fsspec reads FSSPEC_* at import: apply them to the running process too.
    fsspec.config.conf["s3"] = {
        **saved_conf,
        "endpoint_url": endpoint,
        "key": "testing",
        "secret": "testing",
    }
    try:
        yield S3Server(endpoint, env)
    finally:
        server.stop()
        fsspec.config.conf["s3"] = saved_conf
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def python_child(
    code: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``code`` run by ``python -c`` in a fresh interpreter of one thread (a test process
    may run more) that imports this checkout, with ``env`` added to the environment."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        timeout=timeout,
    )


def write_trace(
    path: Path,
    events: list[dict[str, Any]] | None = None,
    *,
    text: str | bytes | None = None,
    gz: bool = False,
    **root: Any,
) -> Path:
    """Write a trace file: ``{"traceEvents": events, **root}`` or the raw ``text``."""
    if text is None:
        text = json.dumps({**root, "traceEvents": events or []})
    data = text.encode() if isinstance(text, str) else text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def kernel(
    name: str, ts: float, dur: float, *, stream: Any = 7, device: int = 0, corr: int = 1
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": stream, "correlation": corr},
    }


def cpu(name: str, ts: float, dur: float, *, cat: str = "cpu_op", tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur}


@functools.lru_cache(maxsize=1)
def _real_summary_bytes() -> bytes:
    from tb_kineto_insights.store.cache import encode_json
    from tb_kineto_insights.summary import summarize_file

    folder = Path(tempfile.mkdtemp(prefix="kineto-insights-summary-"))
    try:
        events = []
        for n in (1, 2):
            t0 = 1000.0 * n
            events += [cpu(f"ProfilerStep#{n}", t0, 1000.0, cat="user_annotation")]
            events += [kernel("k", t0 + 10.0, 20.0, corr=n)]
        return encode_json(summarize_file(str(write_trace(folder / "w.json", events))))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_json(value: Any) -> Any:
    """``value`` (a Struct such as ``Summary``, ``RunView``, ``DiffDocument``, or
    built-ins holding Structs) as the JSON values a user sees: ``msgspec.to_builtins``
    (fields left UNSET are left out, as in the JSON)."""
    import msgspec

    return msgspec.to_builtins(value)


def real_summary(**steps: Any) -> dict[str, Any]:
    """A whole summary of a tiny 2-step trace (it fits ``schema.Summary``: the cache
    serves no other), as plain JSON objects; ``steps`` overrides keys of its ``steps``
    panel (e.g. ``count=5`` to tell entries apart)."""
    summary: dict[str, Any] = json.loads(_real_summary_bytes())
    summary["steps"].update(steps)
    return summary


class Parses:
    """Counts (and names) the files analysed, by wrapping ``summary.summarize_file`` and
    ``summary.summarize_file_with_timeline`` (what CachedSummaries calls; threads of this
    process, as the index tests' clusters are, are seen too). Files are read in this
    process (``KINETO_INSIGHTS_READ_WORKERS=1``: no worker processes, which the counter
    would not see; ``tests/test_parallel_summaries.py`` covers those)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from tb_kineto_insights import summary as summary_module

        monkeypatch.setenv("KINETO_INSIGHTS_READ_WORKERS", "1")

        self.paths: list[str] = []
        for name in ("summarize_file", "summarize_file_with_timeline"):
            real = getattr(summary_module, name)

            def counting(path: str, _real: Any = real, **kwargs: Any) -> Any:
                self.paths.append(path)
                return _real(path, **kwargs)

            monkeypatch.setattr(summary_module, name, counting)


def pair(result: Any) -> tuple[Any, dict[str, str] | None]:
    """A span's :class:`~tb_kineto_insights.summary.SpanResult` (or headline record) as
    ``(summary, None)`` or ``(None, {"type", "message"})``, for assertions on both."""
    from tb_kineto_insights.summary import SpanFailed, SpanOk

    if isinstance(result, SpanFailed):
        return None, result.as_dict()
    return (result.summary if isinstance(result, SpanOk) else result), None


@pytest.fixture(autouse=True)
def _no_machine_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test sees a load of 0 (no other process running): the tests run on shared,
    loaded machines, and a pool a test forces on (two cores) must not fall back to one
    process because other jobs run beside it. The load rule itself is tested with exact inputs
    (``tests/test_read_plan.py``)."""
    from tb_kineto_insights.trace import parallel

    monkeypatch.setattr(parallel, "load_now", lambda: 0.0)


@functools.cache
def fuzzer_module(name: str = "fuzz_structured") -> Any:
    """``benchmarks/NAME.py`` (a fuzzer, ``fuzz_structured`` by default) as a module (its
    functions make and check the fuzzed inputs that tests replay)."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module
