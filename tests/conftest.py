"""Shared test helpers: where the real traces are, and writers for tiny traces."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SHARED_TRACES = SHARED / "traces" / "public"
#: Real 2-GPU traces (2 x H200) with ground truth in each run's recording_info.json.
H200X2 = SHARED / "traces" / "h200x2"
#: Small failing inputs from public bug reports (see its README for the right answers).
CASES = SHARED / "cases"
SAMPLE_LOGS = REPO / "sample_logs"


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
