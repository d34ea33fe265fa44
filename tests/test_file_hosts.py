"""``file://HOST/...`` URLs: ``localhost`` names this machine (RFC 8089: ``file:///x``),
any other host is refused by name, wherever a path enters (the command line, the
listing, the reader, the cache, the plugin's settings). fsspec reads ``file://HOST/x`` as
``HOST/x`` under the working folder: ``window --out file://localhost`` wrote a file
named ``localhost`` there and ``--cache file://localhost/tmp/c`` filled ``./localhost``."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.cli.main import main
from tb_kineto_insights.logdir.discovery import LogdirError, discover
from tb_kineto_insights.serve.settings import _normalise_path, cache_folder_from
from tb_kineto_insights.store.backends import LocalStore, open_store
from tb_kineto_insights.trace.errors import TraceIOError
from tb_kineto_insights.trace.local_paths import FileHostError, without_local_host
from tb_kineto_insights.trace.reader import read_trace

ELSEWHERE = "names the host 'server': a file URL reaches this machine's files only"


def _trace(folder: Path) -> Path:
    events = [
        cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        cpu("A", 10, 20),
        kernel("K", 20, 5, corr=1),
    ]
    return write_trace(folder / "w.pt.trace.json", events)


@pytest.mark.parametrize(
    ("given", "read_as"),
    [
        ("file://localhost/data/run1", "file:///data/run1"),
        ("file://LocalHost/data/", "file:///data/"),
        ("file://localhost/", "file:///"),
        ("simplecache::file://localhost/data", "simplecache::file:///data"),
        ("file:///data/run1", "file:///data/run1"),
        ("file://", "file://"),
        ("/data/run1", "/data/run1"),
        ("localhost/data", "localhost/data"),
        ("s3://localhost/key", "s3://localhost/key"),
    ],
)
def test_localhost_is_this_machine(given: str, read_as: str) -> None:
    assert without_local_host(given) == read_as


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("file://server/data", ELSEWHERE),
        ("file://logs", "names the host 'logs': a file URL reaches this machine's files only"),
        ("simplecache::file://server/x", ELSEWHERE),
        ("file://localhost", "names the host 'localhost' and no file"),
    ],
)
def test_another_host_is_refused_by_name(given: str, problem: str) -> None:
    with pytest.raises(FileHostError) as caught:
        without_local_host(given)
    assert caught.value.path == given
    tail = "; write file:///PATH (three slashes) or the plain path"
    assert caught.value.problem == problem + tail
    assert str(caught.value) == f"{given!r}: {caught.value.problem}"


def test_window_out_by_localhost_url_writes_the_named_file(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _trace(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    out = tmp_path / "o.json"
    given = ["window", f"file://localhost{trace}", "--step", "1"]
    assert main([*given, "--out", f"file://localhost{out}"]) == 0
    names = [e["name"] for e in json.loads(out.read_text())["traceEvents"]]
    assert names[:3] == ["ProfilerStep#1", "A", "K"]
    capsys.readouterr()
    # the host alone, and another host: refused before anything is read or written
    assert main(["window", str(trace), "--step", "1", "--out", "file://localhost"]) == 2
    assert capsys.readouterr().err == (
        "error: 'file://localhost': names the host 'localhost' and no file; write "
        "file:///PATH (three slashes) or the plain path\n"
    )
    assert main(["window", str(trace), "--step", "1", "--out", f"file://server{out}.2"]) == 2
    assert capsys.readouterr().err.startswith(f"error: 'file://server{out}.2': {ELSEWHERE}; ")
    assert os.listdir(work) == []
    assert sorted(os.listdir(tmp_path)) == ["o.json", "w.pt.trace.json", "work"]


def test_report_cache_and_sides_by_host(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _trace(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    cache = tmp_path / "cache"
    args = ["report", f"file://localhost{trace}", "--format", "json"]
    assert main([*args, "--cache", f"file://localhost{cache}"]) == 0
    span = json.loads(capsys.readouterr().out)["runs"][0]["workers"][0]["spans"][0]
    assert span["file"] == f"file://{trace}" and span["summary"]["steps"]
    assert cache.is_dir() and any(cache.rglob("*.summary"))
    assert os.listdir(work) == []  # before: ./localhost/<cache> and no error
    for argv in (
        ["report", f"file://server{trace}"],
        ["report", str(trace), "--cache", f"file://server{cache}"],
        ["diff", str(trace), f"file://server{trace}"],
        ["history", f"file://server{tmp_path}"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: 'file://server") and ELSEWHERE in err, argv
    assert os.listdir(work) == []


def test_the_library_entry_points(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    assert read_trace(f"file://localhost{trace}").health.event_count == 3
    with pytest.raises(TraceIOError, match=ELSEWHERE):
        read_trace(f"file://server{trace}")
    runs = discover(f"file://localhost{tmp_path}", skipped=[])
    assert [s.path for r in runs for w in r.workers for s in w.spans] == [f"file://{trace}"]
    with pytest.raises(LogdirError) as caught:
        discover(f"file://server{tmp_path}")
    assert caught.value.problem.startswith(ELSEWHERE)
    store = open_store(f"file://localhost{tmp_path}/c")
    assert isinstance(store, LocalStore) and store.folder == tmp_path / "c"
    with pytest.raises(ValueError, match=ELSEWHERE):
        open_store(f"file://server{tmp_path}/c")


def test_the_plugin_settings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert _normalise_path(f"file://localhost{tmp_path}") == os.path.realpath(tmp_path)
    # before: the host was dropped, and file://logs served "/"
    assert _normalise_path("file://logs") == "file://logs"
    assert _normalise_path(f"file://server{tmp_path}") == f"file://server{tmp_path}"
    assert cache_folder_from(None, f"file://localhost{tmp_path}/c") == tmp_path / "c"
    with caplog.at_level(logging.WARNING):
        assert cache_folder_from(None, f"file://server{tmp_path}/c") is None
    assert ELSEWHERE in caplog.text
