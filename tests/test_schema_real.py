"""The tests of ``test_schema.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest
from conftest import CASES, H200X2, REPO, SAMPLE_LOGS, SHARED_TRACES

from tb_kineto_insights import schema
from tb_kineto_insights.cli.main import build_report
from tb_kineto_insights.store.cache import encode_json
from tb_kineto_insights.summary import SpanFailed, summarize_span


def _trace_files() -> list[Path]:
    found: list[Path] = []
    for root in (SAMPLE_LOGS, SHARED_TRACES, H200X2, CASES):
        if root.is_dir():
            found += sorted(
                p
                for p in root.rglob("*.json*")
                if p.name != "recording_info.json" and p.suffix in (".json", ".gz")
            )
    return found


def _id(path: Path) -> str:
    return str(path.relative_to(REPO.parent if REPO.parent in path.parents else REPO))


# --------------------------------------------------------------------- round trip


@pytest.mark.slow
@pytest.mark.parametrize("path", _trace_files(), ids=_id)
def test_every_real_summary_round_trips_through_the_schema(path: Path) -> None:
    """A summary of every trace of sample_logs/, ../shared/traces/public,
    ../shared/traces/h200x2 and ../shared/cases: its JSON (what the cache stores),
    decoded with msgspec.json.Decoder(Summary) (what the cache reads back), is an equal
    Struct and encodes back to exactly the same bytes (same keys, order, types, values:
    an int where the Struct says float would come back as a float). A case the reader
    rejects must be rejected with its typed error (nothing to round-trip)."""
    result = summarize_span(str(path))
    if isinstance(result, SpanFailed):
        assert CASES in path.parents, result
        assert result.type != "AnalysisError", result
        return
    summary = result.summary
    raw = encode_json(summary)
    decoded = schema.SUMMARY_DECODER.decode(raw)
    assert isinstance(decoded, schema.Summary) and decoded == summary
    assert msgspec.json.encode(decoded) == raw


def test_shared_corpus_is_present_for_the_round_trip() -> None:
    """The round trip above covers the real corpus (not an empty parametrisation)."""
    files = _trace_files()
    assert sum(1 for p in files if SAMPLE_LOGS in p.parents) >= 14
    if os.environ.get("KINETO_INSIGHTS_REQUIRE_SHARED") == "1" or SHARED_TRACES.is_dir():
        assert sum(1 for p in files if SHARED_TRACES in p.parents) >= 17


def test_report_and_run_view_round_trip(h200x2: Path) -> None:
    """The report of a 2-rank DDP run (two span summaries and the view across ranks)
    fits the Report Struct and encodes back to the same bytes."""
    report = build_report(str(h200x2 / "ddp_straggler"))
    raw = encode_json(report)
    decoded = msgspec.json.decode(raw, type=schema.Report)
    assert decoded.schema == schema.REPORT_SCHEMA
    assert msgspec.json.encode(decoded) == raw
    views = [r.run_summary for r in decoded.runs if r.run_summary is not None]
    assert len(views) == 1 and views[0].worker_count == 2
