"""The tests of ``test_startup_imports.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from conftest import SAMPLE_LOGS
from test_startup_imports import UNUSED_STDLIB, _loaded_after, _stdlib

from tb_kineto_insights.cli.json_output import dumps_json


def test_report_of_real_traces_loads_no_unused_stdlib(h200x2: Path) -> None:
    """Reports of real traces load none of :data:`UNUSED_STDLIB`. The negative control:
    the same check sees ``logging`` once it is imported."""
    files = [
        str(next((SAMPLE_LOGS / "transformer_eager").glob("*.pt.trace.json.gz"))),
        str(next((h200x2 / "fsdp").glob("rank0.*.pt.trace.json.gz"))),
        str(SAMPLE_LOGS / "memory_leak"),
    ]
    code = (
        "import io, contextlib, tb_kineto_insights.cli.main as c\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    for f in {files!r}:\n"
        "        assert c.main(['report', f, '--format', 'json', '--cache', 'none']) == 0\n"
    )
    assert _loaded_after(code, UNUSED_STDLIB) == []
    control = code + "import logging\n"
    assert _loaded_after(control, ("logging",)) != []


def test_report_json_of_a_real_trace_has_the_stdlib_values() -> None:
    """transformer_eager's whole report document (a Struct), msgspec-encoded, holds the
    values the stdlib writes of its built-ins."""
    from tb_kineto_insights.cli.main import build_report

    trace_dir = SAMPLE_LOGS / "transformer_eager"
    report = build_report(str(trace_dir))
    text = dumps_json(report)
    assert json.loads(text) == json.loads(_stdlib(msgspec.to_builtins(report)))
    assert len(text) > 10_000  # a full report, not an error stub
    assert '"summary"' in text
