"""The tests of ``test_shared_cache.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import Parses, S3Server
from werkzeug.test import Client

from tb_kineto_insights.cli import main as cli
from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.store.cache import CACHE_DIR_ENV
from tb_kineto_insights.summary import ANALYSIS_VERSION

RUNS = ("ddp_default", "ddp_straggler")


@pytest.fixture
def two_copies(h200x2: Path, tmp_path: Path) -> tuple[Path, Path]:
    """One log directory (two real 2-rank runs) and a copy of it elsewhere, times kept
    (``cp -a``, ``rsync -a``: as a team's shared folder mounted at two places reads)."""
    first = tmp_path / "mnt" / "team" / "logs"
    for run in RUNS:
        shutil.copytree(h200x2 / run, first / run)
    second = tmp_path / "home" / "me" / "logs-copy"
    shutil.copytree(first, second)
    return first, second


def cli_run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(argv)
    return code, out.getvalue()


def no_paths(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: no_paths(v) for k, v in value.items() if k not in ("file", "path")}
    if isinstance(value, list):
        return [no_paths(v) for v in value]
    return value


def test_second_report_on_a_copy_parses_nothing(
    two_copies: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two_copies
    cache = tmp_path / "shared-cache"
    parses = Parses(monkeypatch)
    code, out_first = cli_run(["report", str(first), "--format", "json", "--cache", str(cache)])
    assert code == 0
    assert len(parses.paths) == 4 and all(p.startswith(str(first)) for p in parses.paths)
    entries = sorted((cache / f"v{ANALYSIS_VERSION}").iterdir())
    assert len(entries) == 4 and all(p.suffix == ".summary" for p in entries)

    parses.paths.clear()
    code, out_second = cli_run(["report", str(second), "--format", "json", "--cache", str(cache)])
    assert code == 0
    assert parses.paths == []  # every span from the cache: nothing parsed
    assert len(sorted((cache / f"v{ANALYSIS_VERSION}").iterdir())) == 4  # nothing added
    report_first, report_second = json.loads(out_first), json.loads(out_second)
    assert no_paths(report_first) == no_paths(report_second)
    # The cached summaries name the copy's files, not the files they were computed from.
    for run in report_second["runs"]:
        for worker in run["workers"]:
            for span in worker["spans"]:
                assert span["file"].startswith(str(second))
                assert span["summary"]["health"]["path"] == span["file"]
    assert all(r["run_summary"] is not None for r in report_second["runs"])

    # The same cache through the plugin's environment variable (no --cache): diff and
    # check on the copy parse nothing either.
    monkeypatch.setenv(CACHE_DIR_ENV, str(cache))
    base, exp = str(second / "ddp_default"), str(second / "ddp_straggler")
    assert cli_run(["diff", base, exp, "--format", "json"])[0] == 0
    assert cli_run(["check", base, exp, "--max-step-time-regression", "1000%"])[0] == 0
    assert parses.paths == []
    # Without a cache (none), the copy is read again: the counter does count.
    assert cli_run(["report", str(second), "--cache", "none"])[0] == 0
    assert len(parses.paths) == 4


def test_tensorboard_on_the_copy_serves_from_the_cache(
    two_copies: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A teammate's TensorBoard on the other mount point: ready without reading."""
    from test_plugin import PRELOAD_ENV, RecordingLoader, make_app, summary_url, the_plugin

    from tb_kineto_insights.service import loader as loader_module

    first, second = two_copies
    cache = tmp_path / "shared-cache"
    assert cli_run(["report", str(first), "--cache", str(cache)])[0] == 0  # fills the cache

    parses: list[str] = []
    real = loader_module.summarize_file_with_timeline

    def counting(path: str, **kwargs: Any) -> Any:
        parses.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(loader_module, "summarize_file_with_timeline", counting)
    monkeypatch.setenv(PRELOAD_ENV, "1")
    RecordingLoader.made = []
    try:
        client = Client(make_app(second, "--kineto_insights_cache_dir", str(cache)))
        plugin = the_plugin()
        assert plugin.rescan()
        spans = [s for r in discover(str(second)) for w in r.workers for s in w.spans]
        assert len(spans) == 4
        for span in spans:
            response = client.get(summary_url(span.run, span.worker, span.span, wait="30"))
            assert response.status_code == 200
            summary = json.loads(response.get_data(as_text=True))
            assert summary["health"]["path"] == span.path
            assert summary["steps"]["count"] > 0
        response = client.get(f"/data/plugin/kineto_insights/run_summary?run={RUNS[1]}&wait=30")
        assert response.status_code == 200
        assert parses == []
        assert plugin.loader.loads_started == 0
    finally:
        for instance in RecordingLoader.made:
            instance.close()


# --------------------------------------------------------------------------- S3 cache


def test_cache_folder_on_s3(
    two_copies: tuple[Path, Path], s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    first, second = two_copies
    bucket = f"cache-{secrets.token_hex(4)}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir(bucket)
    url = f"s3://{bucket}/team/cache"
    parses = Parses(monkeypatch)
    assert cli_run(["report", str(first), "--cache", url])[0] == 0
    assert len(parses.paths) == 4
    found = fs.find(f"{bucket}/team/cache")
    headlines = [p for p in found if p.startswith(f"{bucket}/team/cache/headlines/")]
    stored = [p for p in found if p not in headlines]
    assert len(headlines) == 8  # each summary's headline, by content key and by file
    assert len(stored) == 4
    assert all(p.startswith(f"{bucket}/team/cache/v{ANALYSIS_VERSION}/") for p in stored)
    assert all(p.endswith(".summary") for p in stored)
    parses.paths.clear()
    assert cli_run(["report", str(second), "--cache", url])[0] == 0
    assert parses.paths == []
