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
from tb_kineto_insights.service.output_files import local_file, write_output
from tb_kineto_insights.service.reports import build_report
from tb_kineto_insights.store.backends import LocalStore, open_store
from tb_kineto_insights.store.cached_summaries import CachedSummaries
from tb_kineto_insights.store.content_id import content_key
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


def _trace_and_empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A trace in ``tmp_path`` and an empty working folder below it (where fsspec wrote
    ``file://localhost...`` before)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return _trace(tmp_path), work


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
    trace, work = _trace_and_empty_cwd(tmp_path, monkeypatch)
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
    trace, work = _trace_and_empty_cwd(tmp_path, monkeypatch)
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
        assert cache_folder_from(None, "file://h\x1b[31m/c") is None
    assert ELSEWHERE in caplog.text
    assert "\x1b" not in caplog.text and "'file://h\\x1b[31m/c'" in caplog.text


def test_local_scheme_and_ipv6_hosts() -> None:
    """Attack run: ``local://localhost`` (fsspec's other name for local files) still wrote
    ``./localhost``; ``file://[::1]/x`` was refused as "the host '['"."""
    assert without_local_host("local://localhost/x") == "local:///x"
    for given, host in (
        ("local://server/x", "server"),
        ("file://[::1]/x", "[::1]"),
        ("zip://a::file://[::1]/x", "[::1]"),
        ("file://localhost/a::file://[fe80::1]/x", "[fe80::1]"),
    ):
        with pytest.raises(FileHostError, match=f"names the host '{host}'".replace("[", r"\[")):
            without_local_host(given)


def test_every_module_that_opens_a_url_drops_localhost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack run: the cache's content key, a report of one file, the output files and a
    chained URL with a cache still read ``file://localhost/x`` as ``./localhost/x``."""
    trace, work = _trace_and_empty_cwd(tmp_path, monkeypatch)
    assert [r.run for r in build_report(f"file://localhost{trace}").runs] == [tmp_path.name]
    chained = f"simplecache::file://localhost{tmp_path}"
    report = build_report(chained, summaries=CachedSummaries(str(tmp_path / "cache")))
    spans = [s for r in report.runs for w in r.workers for s in w.spans]
    assert [(s.file, type(s.summary).__name__) for s in spans] == [
        (f"{chained}/w.pt.trace.json", "Summary")
    ]
    assert content_key(f"file://localhost{trace}", trace.stat().st_size, 0.0) == content_key(
        str(trace), trace.stat().st_size, 0.0
    )
    assert local_file(f"file://localhost{tmp_path}/x") == f"{tmp_path}/x"
    assert local_file("file://localhost") is None
    with pytest.raises(OSError, match="names the host 'localhost' and no file"):
        write_output("file://localhost", b"{}")
    write_output(f"local://localhost{tmp_path}/o.json", b"{}")
    assert (tmp_path / "o.json").read_bytes() == b"{}"
    assert os.listdir(work) == []
