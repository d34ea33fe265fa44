"""``tb-kineto-insights index`` (issue 15 §3): every missing summary into the shared cache
on a Dask LocalCluster; idempotent, resumable after a kill; TensorBoard then parses
nothing; exit codes 0/1/2. Real traces: ``test_index_real.py``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Parses, cpu, kernel, pair, write_trace

from tb_kineto_insights import summary as summary_module
from tb_kineto_insights.cli import main as cli
from tb_kineto_insights.cli.index import IndexSetupError, Progress, run_index
from tb_kineto_insights.store.cache import encode_json
from tb_kineto_insights.summary import ANALYSIS_VERSION

pytest.importorskip("dask.distributed")

REPO = Path(__file__).resolve().parents[1]


def entries(cache: Path) -> list[Path]:
    folder = cache / f"v{ANALYSIS_VERSION}"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in (".summary", ".error"))


def index(logdirs: list[Path], cache: Path, **kwargs: Any) -> Any:
    return run_index([str(p) for p in logdirs], str(cache), workers=2, processes=False, **kwargs)


# ------------------------------------------------------------------ tiny traces


def tiny_trace(path: Path, rank: int, kernel_us: float) -> Path:
    events = [cpu("ProfilerStep#1", 0.0, 1000.0), kernel("gemm", 100.0, kernel_us)]
    return write_trace(path, events, distributedInfo={"rank": rank, "world_size": 2})


def test_copies_are_one_entry_and_a_broken_trace_fails_with_its_reason(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    tiny_trace(logdir / "run" / "w0.1.pt.trace.json", 0, 300.0)
    tiny_trace(logdir / "run" / "w1.1.pt.trace.json", 1, 500.0)
    (logdir / "copy").mkdir()
    shutil.copy2(logdir / "run" / "w0.1.pt.trace.json", logdir / "copy" / "w0.1.pt.trace.json")
    broken = logdir / "bad" / "w.1.pt.trace.json"
    broken.parent.mkdir()
    broken.write_text('{"traceEvents": [ {"ph": "X", ')
    cache = tmp_path / "cache"
    first = index([logdir], cache)
    assert (first.spans, first.entries, first.computed, first.cached) == (4, 3, 2, 0)
    assert [f["file"] for f in first.failed] == [str(broken)]
    assert first.failed[0]["stored"] is True and "JSON" in first.failed[0]["reason"]
    assert first.exit_code == 1
    assert first.run_views == {"computed": 1, "cached": 0, "failed": []}
    view_file = next((cache / f"v{ANALYSIS_VERSION}" / "runs").iterdir())
    view = json.loads(view_file.read_bytes().split(b"\n", 1)[1])
    assert view["run"] == "run" and [s["worker"] for s in view["spans"]] == ["w0", "w1"]
    assert view["summary"] == json.loads(
        encode_json(
            summary_module.summarize_run(
                [
                    (
                        "w0",
                        summary_module.summarize_file(str(logdir / "run" / "w0.1.pt.trace.json")),
                    ),
                    (
                        "w1",
                        summary_module.summarize_file(str(logdir / "run" / "w1.1.pt.trace.json")),
                    ),
                ]
            )
        )
    )
    again = index([logdir], cache)
    assert (again.computed, again.cached, len(again.failed)) == (0, 2, 1)
    assert again.failed[0]["stored"] is True  # the verdict is cached, not parsed again


def cli_run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def test_cli_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logdir = tmp_path / "logs"
    tiny_trace(logdir / "run" / "w0.1.pt.trace.json", 0, 300.0)
    cache = tmp_path / "cache"
    code, out, _ = cli_run(
        ["index", str(logdir), "--cache", str(cache), "--threads", "--workers", "1", "--quiet"]
    )
    assert code == 0
    assert "1 span(s), 1 distinct trace(s): 1 computed, 0 cached already, 0 failed" in out
    code, out, _ = cli_run(
        ["index", str(logdir), "--cache", str(cache), "--threads", "--format", "json"]
    )
    assert code == 0 and json.loads(out)["cached"] == 1 and json.loads(out)["computed"] == 0
    code, _, err = cli_run(["index", str(tmp_path / "missing"), "--cache", str(cache)])
    assert code == 2 and "does not exist" in err
    code, _, err = cli_run(["index", str(logdir), "--cache", "none"])
    assert code == 2 and "--cache" in err
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # import fails
    code, _, err = cli_run(["index", str(logdir), "--cache", str(cache)])
    assert code == 2 and "tb-kineto-insights[index]" in err


def test_unreachable_scheduler_is_a_setup_error(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    tiny_trace(logdir / "run" / "w0.1.pt.trace.json", 0, 300.0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    with pytest.raises(IndexSetupError, match=f"127.0.0.1:{port}"):
        run_index(
            [str(logdir)],
            str(tmp_path / "cache"),
            scheduler=f"tcp://127.0.0.1:{port}",
            connect_timeout_s=1.0,
        )


def test_progress_line(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    bar = Progress(stream, total_files=4, total_bytes=40_000_000, interval_s=5.0)
    bar.start()
    clock[0] = 102.0
    bar.advance(10_000_000)  # 10 MB in 2 s: 5 MB/s, 30 MB left: 6 s
    assert bar.line() == "[#####...............] 1/4 files  5.0 MB/s of files read  ETA 0:00:06"
    assert stream.getvalue().splitlines()[0].startswith("[....................] 0/4 files")
    assert len(stream.getvalue().splitlines()) == 1  # not a terminal: one line per 5 s
    for _ in range(3):
        bar.advance(10_000_000)
    assert stream.getvalue().splitlines()[-1].startswith("[####################] 4/4 files")


def test_index_runs_from_a_fresh_interpreter_on_processes(tmp_path: Path) -> None:
    """The default LocalCluster (worker processes): tasks are importable module-level
    functions and the entries are the same files."""
    logdir = tmp_path / "logs"
    tiny_trace(logdir / "run" / "w0.1.pt.trace.json", 0, 300.0)
    tiny_trace(logdir / "run" / "w1.1.pt.trace.json", 1, 400.0)
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tb_kineto_insights.cli.main",
            "index",
            str(logdir),
            "--cache",
            str(cache),
            "--workers",
            "2",
            "--format",
            "json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["computed"], result["cached"], result["failed"]) == (2, 0, [])
    assert len(entries(cache)) == 2


def test_index_on_an_existing_scheduler(tmp_path: Path) -> None:
    """``--scheduler ADDRESS``: the tasks run on that cluster's workers (here a cluster
    started by the test, reached over TCP on loopback like a remote one)."""
    from dask.distributed import LocalCluster

    logdir = tmp_path / "logs"
    tiny_trace(logdir / "run" / "w0.1.pt.trace.json", 0, 300.0)
    tiny_trace(logdir / "run" / "w1.1.pt.trace.json", 1, 400.0)
    cache = tmp_path / "cache"
    with LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        processes=False,
        dashboard_address=None,
        host="127.0.0.1",
        protocol="tcp",
    ) as cluster:
        seen: list[str] = []
        result = run_index(
            [str(logdir)],
            str(cache),
            scheduler=cluster.scheduler_address,
            on_client=lambda client: seen.append(client.scheduler.address),
        )
        assert seen == [cluster.scheduler_address]
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
    assert (result.computed, result.cached, result.failed) == (2, 0, [])
    assert result.run_views["computed"] == 1
    assert len(entries(cache)) == 2


def test_two_concurrent_index_runs_leave_whole_entries(tmp_path: Path) -> None:
    """Two ``index`` runs on one cache at once (two crons overlapping): duplicates are
    accepted (each entry is computed or found by each run), never a corrupt entry."""
    import threading

    from tb_kineto_insights.logdir.discovery import span_for_file
    from tb_kineto_insights.store.cached_summaries import CachedSummaries

    logdir = tmp_path / "logs"
    files = [
        tiny_trace(logdir / "run" / f"w{rank}.1.pt.trace.json", rank % 2, 100.0 + 50 * rank)
        for rank in range(4)
    ]
    cache = tmp_path / "cache"
    results: list[Any] = []
    runs = [threading.Thread(target=lambda: results.append(index([logdir], cache))) for _ in "ab"]
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join(timeout=300)
    assert len(results) == 2
    for result in results:
        assert result.failed == [] and result.computed + result.cached == 4
    assert 4 <= sum(r.computed for r in results) <= 8
    assert len(entries(cache)) == 4
    reader = CachedSummaries(str(cache))
    for path in files:
        summary, error = pair(reader.summarize(span_for_file(str(path))))
        assert error is None and summary is not None
    assert reader.parsed == 0 and reader.from_cache == 4  # every entry whole and valid


def test_a_file_unreadable_for_its_key_fails_with_the_os_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed entry says why the file could not be read (it used to say only
    "cannot be read for its content key"); the other file is still computed."""
    from tb_kineto_insights.store import content_id

    logdir = tmp_path / "logs"
    tiny_trace(logdir / "run" / "w0.1.pt.trace.json", 0, 300.0)
    locked = logdir / "other" / "w0.2.pt.trace.json"
    tiny_trace(locked, 0, 500.0)
    real = content_id._head_and_tail

    def refusing(path: str, *args: Any, **kwargs: Any) -> Any:
        if path == str(locked):  # as root, chmod 000 would not stop the read
            raise PermissionError(13, "Permission denied", path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(content_id, "_head_and_tail", refusing)
    result = index([logdir], tmp_path / "cache")
    assert (result.spans, result.computed, result.exit_code) == (2, 1, 1)
    [failed] = result.failed
    assert failed["file"] == str(locked) and failed["stored"] is False
    assert failed["reason"].startswith("TraceIOError: ")
    assert "Permission denied" in failed["reason"] and str(locked) in failed["reason"]


def test_an_unwritable_cache_is_a_setup_error_before_any_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: exit 2 on an unusable cache. A cache that is a file used to give exit 1
    with one "cannot write the cache" failure per trace, after parsing each of them."""
    logdir = tmp_path / "logs"
    tiny_trace(logdir / "run" / "w0.1.pt.trace.json", 0, 300.0)
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file, not a folder")
    parses = Parses(monkeypatch)
    with pytest.raises(IndexSetupError, match="cannot be written") as err:
        index([logdir], not_a_folder)
    assert str(not_a_folder) in str(err.value) and "Not a directory" in str(err.value)
    assert parses.paths == []
    code, out, stderr = cli_run(["index", str(logdir), "--cache", str(not_a_folder), "--quiet"])
    assert code == 2 and out == ""
    assert stderr.startswith(f"error: cache '{not_a_folder}' cannot be written")
    ok = tmp_path / "ok"
    assert index([logdir], ok).computed == 1
    assert sorted(p.name for p in (ok / f"v{ANALYSIS_VERSION}").iterdir()) == [
        p.name for p in entries(ok)
    ]  # the probe file is gone


def test_nothing_to_compute_starts_no_cluster(tmp_path: Path) -> None:
    """A second run (everything cached) and a folder without traces start no Dask
    cluster (they took 2-7 s for one); the latter says so on stderr, as report does."""
    logdir = tmp_path / "logs"
    tiny_trace(logdir / "run" / "w0.1.pt.trace.json", 0, 300.0)
    tiny_trace(logdir / "run" / "w1.1.pt.trace.json", 1, 500.0)
    cache = tmp_path / "cache"
    first = index([logdir], cache)
    assert (first.computed, first.run_views["computed"]) == (2, 1)
    clients: list[object] = []
    again = index([logdir], cache, on_client=clients.append)
    assert clients == []
    assert (again.computed, again.cached, again.failed) == (0, 2, [])
    assert again.run_views == {"computed": 0, "cached": 1, "failed": []}
    (tmp_path / "empty").mkdir()
    code, out, err = cli_run(["index", str(tmp_path / "empty"), "--cache", str(cache), "--quiet"])
    assert code == 0 and out.startswith("0 span(s)")
    assert err == f"warning: no Kineto trace files found under {tmp_path / 'empty'}\n"
