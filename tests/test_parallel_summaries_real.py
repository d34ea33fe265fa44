"""The tests of ``test_parallel_summaries.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import io
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import SAMPLE_LOGS, kernel, python_child, write_trace
from test_parallel_summaries import _child, pools

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.cli import report as cli_report
from tb_kineto_insights.cli.json_output import dumps_json, write_json
from tb_kineto_insights.cli.main import build_report, main
from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.store import parallel_summaries as ps
from tb_kineto_insights.store.cached_summaries import CachedSummaries
from tb_kineto_insights.summary import SpanFailed, SpanOk, SpanResult, summarize_span
from tb_kineto_insights.trace import columns, parallel

#: Fixtures of test_parallel_summaries.py that these tests take: pytest looks them up
#: among the names of the test's module (this use of them keeps the import).
FIXTURES = (pools,)


def _report_json(path: str, **kwargs: Any) -> bytes:
    out = io.StringIO()
    write_json(build_report(path, **kwargs), out)
    return out.getvalue().encode()


def test_report_of_sample_logs_is_the_serial_one_to_the_byte(
    pools: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run of sample_logs (every trace file in it): the JSON report with the
    files read at once equals the serial one byte for byte, and a pool was used."""
    parallel_json = _report_json(str(SAMPLE_LOGS))
    assert len(pools) == 1 and pools[0] is not None
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    serial_json = _report_json(str(SAMPLE_LOGS))
    assert len(pools) == 1  # serial: no pool
    assert parallel_json == serial_json
    report = msgspec.json.decode(parallel_json)
    spans = [s for r in report["runs"] for w in r["workers"] for s in w["spans"]]
    files = list(SAMPLE_LOGS.rglob("*.pt.trace.json*"))
    assert len(files) >= 36  # the recordings of sample_logs/README.md
    assert len(spans) == len(files) and all("summary" in s for s in spans)


def _log_dir(tmp_path: Path) -> Path:
    """Files in an order that is not the order of their sizes, a broken one among them:
    ``c_big`` (26 MB of JSON, more than the others together), a tiny broken file,
    a two-rank run, small ones."""
    pairs = [
        ("a_broken", None),
        ("b_small", SAMPLE_LOGS / "memory_leak"),
        ("c_big", SAMPLE_LOGS / "optimizer_per_param"),
        ("d_mid", SAMPLE_LOGS / "ddp2_default"),
        ("e_small", SAMPLE_LOGS / "memory_fixed"),
    ]
    root = tmp_path / "logs"
    for name, source in pairs:
        run = root / name
        run.mkdir(parents=True)
        if source is None:
            (run / "worker0.1.pt.trace.json").write_text('{"traceEvents": [{"ph": oops')
            continue
        for f in source.glob("*.pt.trace.json.gz"):
            shutil.copy(f, run / f.name)
    return root


def _expected(spans: list[Any]) -> list[tuple[Any, str | None]]:
    return _got([summarize_span(span.path) for span in spans])


def _got(results: list[SpanResult]) -> list[tuple[Any, str | None]]:
    """Each result as ``(summary as built-ins, None)`` or ``(None, "Type: message")``."""
    return [
        (msgspec.to_builtins(r.summary), None)
        if isinstance(r, SpanOk)
        else (None, f"{r.type}: {r.message}")
        for r in results
    ]


@pytest.mark.parametrize("dominant", [False, True], ids=["whole_files", "one_piece_by_piece"])
def test_order_kept_and_a_broken_file_does_not_stop_the_others(
    tmp_path: Path, pools: list[Any], monkeypatch: pytest.MonkeyPatch, dominant: bool
) -> None:
    """Results come in file order (not in the largest-first order of the work), each the
    serial summary of its own file; the broken file gives its reader error with its
    path, and every other file is summarised. ``one_piece_by_piece``: the largest file
    is read in this process with its pieces on the pool (small pieces: several)."""
    monkeypatch.setattr(ps, "MIN_PARALLEL_JSON_BYTES", 0)
    monkeypatch.setattr(ps, "BATCH_JSON_BYTES", 1)  # one file per batch: many tasks
    merged: list[int] = []
    if dominant:
        monkeypatch.setattr(parallel, "PARALLEL_MIN_JSON_BYTES", 1)
        monkeypatch.setattr(parallel, "PIECE_BYTES", 256 * 1024)
        real_merge = columns.Builder.merge

        def merge(self: columns.Builder, piece: columns.Builder) -> None:
            merged.append(piece.event_count)
            real_merge(self, piece)

        monkeypatch.setattr(columns.Builder, "merge", merge)
    root = _log_dir(tmp_path)
    spans = [s for r in discover(str(root)) for w in r.workers for s in w.spans]
    assert [s.run for s in spans] == ["a_broken", "b_small", "c_big", "d_mid", "d_mid", "e_small"]
    sizes = [ps.estimated_json_bytes(s) for s in spans]
    here, batches = ps.plan(sizes, 2)
    assert (here == [2]) is dominant  # c_big is the largest file
    settings = ps.Settings(8 << 30, DEFAULT_THRESHOLDS)
    got = [r for r, _ in ps.summarize_spans([ps.FileTask(s) for s in spans], settings)]
    assert len(pools) == 1 and pools[0] is not None
    assert (len(merged) > 10) is dominant  # pieces of c_big merged here
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    want = _expected(spans)
    assert _got(got) == want
    assert want[0][0] is None and want[0][1] is not None
    assert want[0][1].startswith("TraceFormatError: ") and "a_broken" in want[0][1]
    assert all(summary is not None for summary, _ in want[1:])


def test_results_come_as_each_file_is_done_and_runs_as_theirs_are_in(
    tmp_path: Path,
    pools: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """summarize_spans_as_done gives every file once, this process's first (the largest,
    c_big) first, each the serial summary; build_report calls on_run once per run as
    soon as its files are in (c_big's run first), and the command line's JSON, written
    run by run, is dumps_json of the report built whole."""
    monkeypatch.setattr(ps, "MIN_PARALLEL_JSON_BYTES", 0)
    root = _log_dir(tmp_path)
    spans = [s for r in discover(str(root)) for w in r.workers for s in w.spans]
    settings = ps.Settings(8 << 30, DEFAULT_THRESHOLDS)
    got = list(ps.summarize_spans_as_done([ps.FileTask(s) for s in spans], settings))
    assert len(pools) == 1 and pools[0] is not None
    assert sorted(i for i, _ in got) == list(range(len(spans)))
    assert got[0][0] == 2 and spans[2].run == "c_big"
    assert _got([r for _, (r, _) in sorted(got, key=lambda x: x[0])]) == _expected(spans)
    calls: list[tuple[int, str]] = []
    handed = cli_report.build_report(str(root), on_run=lambda i, r: calls.append((i, r.run)))
    assert handed.runs == [] and len(pools) == 2  # each run is on_run's alone
    report = cli_report.build_report(str(root))
    assert sorted(calls) == [(i, run.run) for i, run in enumerate(report.runs)]
    assert calls[0] == (2, "c_big") and len(report.runs) == 5
    capsys.readouterr()
    assert main(["report", str(root), "--format", "json", "--cache", "none"]) == 0
    assert capsys.readouterr().out == dumps_json(report) + "\n"


def test_a_summary_msgpack_cannot_hold_comes_back_whole(
    tmp_path: Path,
    pools: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A log dir whose name is not UTF-8 (a lone surrogate in every summary's paths,
    which msgpack cannot hold): the pool sends each summary back as the object itself;
    no batch fails and is read again here with a warning (every one did), and the
    results are the serial ones. So does a summary holding an int beyond 64 bits."""
    monkeypatch.setattr(ps, "MIN_PARALLEL_JSON_BYTES", 0)
    root = tmp_path / os.fsdecode(b"logs_\xff")
    _log_dir(tmp_path).rename(root)
    spans = [s for r in discover(str(root)) for w in r.workers for s in w.spans]
    settings = ps.Settings(8 << 30, DEFAULT_THRESHOLDS)
    one = ps.summarize_batch([ps.FileTask(spans[1])], settings)
    assert [kind for kind, *_ in one] == ["object"] and "\udcff" in spans[1].path
    with caplog.at_level(logging.WARNING):
        got = [r for r, _ in ps.summarize_spans([ps.FileTask(s) for s in spans], settings)]
    assert len(pools) == 1 and pools[0] is not None
    assert "worker process failed" not in caplog.text
    serial = [summarize_span(s.path) for s in spans]
    assert _got(got) == _got(serial)
    assert [isinstance(r, SpanFailed) for r in got] == [True, False, False, False, False, False]
    # an int beyond msgpack's 64 bits in the trace's metadata (attack run: base warned
    # "OverflowError: can't serialize ints")
    huge = write_trace(
        tmp_path / "huge" / "w.1.pt.trace.json",
        [kernel("k", 10.0, 5.0)],
        cupti_version=-(10**30),
    )
    span = next(s for r in discover(str(huge.parent)) for w in r.workers for s in w.spans)
    ((kind, summary, _, _),) = ps.summarize_batch([ps.FileTask(span)], settings)
    serial_huge = summarize_span(str(huge))
    assert kind == "object" and isinstance(serial_huge, SpanOk) and summary == serial_huge.summary
    assert "-1000000000000000000000000000000" in msgspec.json.encode(summary).decode()


def test_through_the_cache_stores_each_file_once(
    tmp_path: Path, pools: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a cache, the processes that summarise store the entries (the broken file's
    reader error too); a second pass answers everything from the cache, the same."""
    monkeypatch.setattr(ps, "MIN_PARALLEL_JSON_BYTES", 0)
    root = _log_dir(tmp_path)
    spans = [s for r in discover(str(root)) for w in r.workers for s in w.spans]
    first = CachedSummaries(str(tmp_path / "cache"))
    got = list(first.summarize_all(spans))
    assert (first.parsed, first.from_cache, first.store_failures) == (6, 0, 0)
    assert _got(got) == _expected(spans)
    again = CachedSummaries(str(tmp_path / "cache"))
    assert _got(list(again.summarize_all(spans))) == _got(got)
    assert (again.parsed, again.from_cache) == (0, 6)


def test_estimated_json_bytes_is_the_gzip_trailer(tmp_path: Path) -> None:
    """A gzip file's size from its ISIZE trailer (exact below 4 GiB), a plain file's
    its own size."""
    import gzip

    span = next(
        s for r in discover(str(SAMPLE_LOGS / "memory_leak")) for w in r.workers for s in w.spans
    )
    with gzip.open(span.path, "rb") as fh:
        assert ps.estimated_json_bytes(span) == len(fh.read())
    plain = tmp_path / "w.pt.trace.json"
    plain.write_bytes(b'{"traceEvents": []}' + b" " * 100)
    span = next(s for r in discover(str(tmp_path)) for w in r.workers for s in w.spans)
    assert ps.estimated_json_bytes(span) == 119
    # a gzip file cut short (still being written): its last four bytes are deflate
    # data, not a size; past deflate's largest ratio they are not taken as one
    whole = gzip.compress(b'{"traceEvents": [' + b'{"ph": "X"},' * 5000)
    cut = whole[: len(whole) // 2] + b"\xff\xff\xff\x7f"  # "2 GiB"
    truncated = tmp_path / "cut" / "w.pt.trace.json.gz"
    truncated.parent.mkdir()
    truncated.write_bytes(cut)
    span = next(s for r in discover(str(truncated.parent)) for w in r.workers for s in w.spans)
    assert ps.estimated_json_bytes(span) == len(cut) * parallel.GZIP_RATIO_ESTIMATE


def test_diff_of_two_runs_with_workers_is_the_serial_diff(
    pools: list[Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``diff`` reads both sides' files at once (one pool for the four files of two
    two-rank runs) and prints what the serial path prints."""
    monkeypatch.setattr(ps, "MIN_PARALLEL_JSON_BYTES", 0)
    args = [
        "diff",
        str(SAMPLE_LOGS / "ddp2_default"),
        str(SAMPLE_LOGS / "ddp2_straggler"),
        "--format",
        "json",
        "--cache",
        "none",
    ]
    assert main(args) == 0
    parallel_out = capsys.readouterr().out
    assert len(pools) == 1 and pools[0] is not None
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    assert main(args) == 0
    assert capsys.readouterr().out == parallel_out
    assert len(pools) == 1


def test_history_through_the_pool_is_the_serial_history(
    tmp_path: Path, pools: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``history``'s headlines of runs not in the cache come from the pool (their entries
    and headline records stored by the workers): the same document as the serial path,
    the broken run skipped with its reader error; a second pass reads headlines only."""
    from tb_kineto_insights.cli.history import collect_runs

    monkeypatch.setattr(ps, "MIN_PARALLEL_JSON_BYTES", 0)
    root = _log_dir(tmp_path)
    summaries = CachedSummaries(str(tmp_path / "cache"))
    runs, skipped = collect_runs(discover(str(root)), summaries)
    assert len(pools) == 1 and pools[0] is not None
    assert summaries.parsed == 6  # the latest span of each worker (d_mid: 2), the broken one
    assert list(skipped) == ["a_broken"] and "TraceFormatError" in skipped["a_broken"]
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    serial_runs, serial_skipped = collect_runs(discover(str(root)), CachedSummaries(None))
    assert serial_skipped == skipped
    encode = msgspec.json.encode
    assert [(r.name, {w: encode(h) for w, h in r.workers.items()}) for r in runs] == [
        (r.name, {w: encode(h) for w, h in r.workers.items()}) for r in serial_runs
    ]
    again = CachedSummaries(str(tmp_path / "cache"))
    collect_runs(discover(str(root)), again)
    # from the cache: the broken file's stored error, and d_mid's two summaries for its
    # run-level diagnoses (no headline index without a log directory given)
    assert (again.parsed, again.headlines_read, again.from_cache) == (0, 5, 3)


def test_prestart_forks_all_but_one_core_unless_a_file_goes_piece_by_piece() -> None:
    """sample_logs (no file a core's share): the pool's one process (2 cores, this process
    takes batches too) is forked ahead. A file read piece by piece (here any file, with
    the threshold at 1 byte): the forkserver is started instead, nothing is forked.
    Files too few or too small: nothing starts."""
    spans = (
        "from tb_kineto_insights.store import parallel_summaries as ps\n"
        "from tb_kineto_insights.logdir.discovery import discover\n"
        "def spans(p): return [s for r in discover(p) for w in r.workers for s in w.spans]\n"
    )
    out = _child(
        spans + f"print(ps.prestart(spans({str(SAMPLE_LOGS)!r})), parallel._prestarted[0])"
    )
    assert out == ["True", "1"]
    out = _child(
        spans
        + "parallel.PARALLEL_MIN_JSON_BYTES = 1\n"
        + f"print(ps.prestart(spans({str(SAMPLE_LOGS / 'ddp2_default')!r})), "
        + "ps.MIN_PARALLEL_JSON_BYTES > 14 << 20, parallel._prestarted)\n"
    )
    assert out == ["False", "True", "None"]  # ddp2_default: 14 MB of JSON, under the pool's
    out = _child(
        spans
        + "parallel.PARALLEL_MIN_JSON_BYTES = 1\nps.MIN_PARALLEL_JSON_BYTES = 0\n"
        + "import multiprocessing.forkserver as fs\n"
        + f"print(ps.prestart(spans({str(SAMPLE_LOGS / 'ddp2_default')!r})), "
        + "parallel._prestarted, fs._forkserver._forkserver_pid is not None)\n"
    )
    assert out == ["True", "None", "True"]


def test_more_processes_than_cores_are_not_forked_ahead() -> None:
    """KINETO_INSIGHTS_READ_WORKERS=999 on this machine: a fork of each process would
    import the analysis (998 processes forked at once took 138 s); the server starts
    them as the work needs them, as before."""
    code = (
        "from tb_kineto_insights.store import parallel_summaries as ps\n"
        "from tb_kineto_insights.logdir.discovery import discover\n"
        f"runs = discover({str(SAMPLE_LOGS)!r})\n"
        "spans = [s for r in runs for w in r.workers for s in w.spans]\n"
        "print(ps.prestart(spans), parallel._prestarted)\n"
    )
    assert _child(code, workers="999") == ["True", "None"]


def test_report_of_a_log_dir_from_the_command_line_is_the_serial_one() -> None:
    """The console script's path (the pool forked ahead, before the time budget's
    thread): the same JSON as one core, byte for byte."""

    def report(workers: str) -> str:
        argv = ["tb-kineto-insights", "report", str(SAMPLE_LOGS), "--format", "json"]
        code = (
            f"import runpy, sys\nsys.argv = {[*argv, '--cache', 'none']!r}\n"
            "runpy.run_module('tb_kineto_insights.cli', run_name='__main__')\n"
        )
        proc = python_child(code, {parallel.WORKERS_ENV: workers}, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert report("2") == report("1")
