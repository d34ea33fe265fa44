"""The `tb-kineto-insights report` command: JSON schema, text layout, errors, exit codes.
Real traces: ``test_cli_real.py``."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.cli.main import main
from tb_kineto_insights.summary import PANELS, REPORT_SCHEMA


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def _diagnosis_ids(report_json: str) -> list[str]:
    span = json.loads(report_json)["runs"][0]["workers"][0]["spans"][0]
    return [d["id"] for d in span["summary"]["diagnoses"]]


def _good_events() -> list[dict[str, object]]:
    return [
        cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        cpu("ProfilerStep#2", 100, 50, cat="user_annotation"),
        kernel("k", 10, 20),
    ]


def test_report_json_schema_and_broken_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_trace(tmp_path / "runA" / "w.100.pt.trace.json.gz", _good_events(), gz=True)
    bad = write_trace(tmp_path / "runA" / "w.200.pt.trace.json", text='{"traceEvents": [{"ph"')
    code, out, _ = run_cli(["report", str(tmp_path), "--format", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == REPORT_SCHEMA == "tb_kineto_insights.report/1"
    (run,) = doc["runs"]
    assert run["run"] == "runA"
    (worker,) = run["workers"]
    good, broken = worker["spans"]
    assert (good["span"], broken["span"]) == ("100", "200")
    assert list(good["summary"]) == list(PANELS)
    steps = good["summary"]["steps"]
    assert steps["count"] == 2 and steps["mean_step_us"] == 75.0
    assert [s["duration_us"] for s in steps["steps"]] == [100.0, 50.0]
    assert "summary" not in broken
    assert broken["error"]["type"] == "TraceFormatError"
    assert str(bad) in broken["error"]["message"] and "truncated" in broken["error"]["message"]


def test_report_with_a_cache_reads_a_file_whose_name_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``report --cache`` of a folder holding a file named with the byte 0xff: exit 0 and
    the same document twice (computed, then from the cache) as without a cache; the
    name is kept as Python reads it (``\\udcff`` in the JSON, as the stdlib writes it).
    It used to stop with a UnicodeEncodeError traceback while writing the entry."""
    logs = tmp_path / "logs"
    try:
        odd = os.fsdecode(str(logs).encode() + b"/run/w\xff.100.pt.trace.json")
        write_trace(Path(odd), _good_events())
    except (OSError, UnicodeError):
        pytest.skip("this filesystem refuses names that are not UTF-8")
    args = ["report", str(logs), "--format", "json"]
    code, plain, _ = run_cli([*args, "--cache", "none"], capsys)
    assert code == 0
    for _ in range(2):  # computed and stored, then read back
        code, cached, err = run_cli([*args, "--cache", str(tmp_path / "cache")], capsys)
        assert code == 0, err
        assert json.loads(cached) == json.loads(plain)
    span = json.loads(plain)["runs"][0]["workers"][0]["spans"][0]
    assert span["file"] == odd and "\\udcff" in plain
    assert span["summary"]["steps"]["count"] == 2


def test_report_text_starts_with_diagnoses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GPU-only trace without step markers: no_step_markers must be listed
    write_trace(tmp_path / "t.json", [kernel("a", 0, 5), kernel("b", 100, 5)])
    code, out, _ = run_cli(["report", str(tmp_path / "t.json")], capsys)
    assert code == 0
    lines = out.splitlines()
    diag_at = next(i for i, line in enumerate(lines) if line.startswith("Diagnoses"))
    run_at = next(i for i, line in enumerate(lines) if line.startswith("== run"))
    section = [line for line in lines[diag_at + 1 : run_at] if line.strip()]
    assert any("no_step_markers" in line for line in section)
    assert any("low_gpu_utilization" in line for line in section)
    order = ["HIGH", "MEDIUM", "LOW", "INFO"]
    ranks = [order.index(line.split("]")[0].strip(" [")) for line in section]
    assert ranks == sorted(ranks)


def test_report_threshold_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(write_trace(tmp_path / "t.json", [kernel("a", 0, 5), kernel("b", 100, 5)]))
    code, out, _ = run_cli(["report", path, "--format", "json"], capsys)
    ids = [
        d["id"]
        for d in json.loads(out)["runs"][0]["workers"][0]["spans"][0]["summary"]["diagnoses"]
    ]
    assert "low_gpu_utilization" in ids
    code, out, _ = run_cli(
        ["report", path, "--format", "json", "--threshold", "low_utilization=0.05"], capsys
    )
    ids = [
        d["id"]
        for d in json.loads(out)["runs"][0]["workers"][0]["spans"][0]["summary"]["diagnoses"]
    ]
    assert "low_gpu_utilization" not in ids
    code, _, err = run_cli(["report", path, "--threshold", "bogus=1"], capsys)
    assert code == 2 and "bogus" in err


def test_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["report", str(tmp_path / "missing")], capsys)
    assert code == 2 and "missing" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(["report", str(tmp_path / "empty")], capsys)
    assert code == 2 and "no Kineto trace files" in err
    write_trace(tmp_path / "bad" / "w.1.pt.trace.json", text="not json")
    code, out, err = run_cli(["report", str(tmp_path / "bad")], capsys)
    # attack run: the heading went to stderr, the reasons to stdout, and the line
    # repeated the path ("PATH: TraceFormatError: PATH: ...")
    bad = tmp_path / "bad" / "w.1.pt.trace.json"
    assert code == 2 and out == ""
    assert err == (
        "error: no trace could be read; the reasons, per file, follow\n"
        f"{bad}: TraceFormatError: not a JSON trace (does not start with '{{' or '[') "
        "at byte 0\n"
    )
    code, out, err = run_cli(["report", str(tmp_path / "bad"), "--format", "markdown"], capsys)
    assert code == 2 and err.endswith(
        f"{bad}: TraceFormatError: not a JSON trace (does not start with '{{' or '[') at byte 0\n"
    )
    assert err.startswith("error: no trace could be read")
    assert "No trace could be read." in out  # the document asked for, on stdout
    # JSON, whose runs are encoded and let go as they come: the same error, each file's
    # reason, and the document with the error on stdout
    code, out, err = run_cli(["report", str(tmp_path / "bad"), "--format", "json"], capsys)
    assert code == 2 and err.startswith("error: no trace could be read")
    assert err.endswith(
        f"{bad}: TraceFormatError: not a JSON trace (does not start with '{{' or '[') at byte 0\n"
    )
    span = json.loads(out)["runs"][0]["workers"][0]["spans"][0]
    assert span["error"]["type"] == "TraceFormatError" and "summary" not in span
    code, out, err = run_cli(["report", str(tmp_path / "empty"), "--format", "json"], capsys)
    assert code == 2 and json.loads(out)["runs"] == [] and "no Kineto trace files" in err
    code, _, _ = run_cli(["report"], capsys)
    assert code == 2


def test_json_is_strict(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", _good_events())
    buf = io.StringIO()
    from tb_kineto_insights.cli.main import build_report

    json.dump(as_json(build_report(str(path))), buf, allow_nan=False)
    assert json.loads(buf.getvalue())["runs"][0]["workers"][0]["spans"][0]["summary"]


def test_doctor(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["doctor"], capsys)
    assert code == 0
    assert "[ok  ] plugin kineto_insights" in out and "tensorboard" in out
    assert "parse:" in out
    assert "[info] parallel read: affinity" in out and "a 100 MB trace:" in out


def test_report_verbose_says_the_read_choice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--verbose``: one line per choice of processes on stderr; without it, none."""
    from tb_kineto_insights.trace import parallel

    monkeypatch.setattr(parallel, "DECISIONS", [])
    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    path = write_trace(tmp_path / "w.pt.trace.json", [cpu("ProfilerStep#1", 0.0, 100)])
    code, _, err = run_cli(["report", str(path), "--format", "json", "--verbose"], capsys)
    assert code == 0
    assert "workers: read: a file under 34 MB of JSON: one process" in err.splitlines()
    code, _, err = run_cli(["report", str(path), "--format", "json"], capsys)
    assert code == 0 and "workers:" not in err


# --------------------------------------------------------------------------- issue 32 §9

FORGED = "\x1b]0;owned\x07\x1b[2J\u202eevil\r\nFAIL: step time regressed 90%"


def _forged_events() -> list[dict[str, object]]:
    events = [cpu(f"ProfilerStep#{n}", 1000.0 * n, 1000, cat="user_annotation") for n in (1, 2, 3)]
    events += [kernel(FORGED, 1000.0 * n + 10, 900, corr=n) for n in (1, 2, 3)]
    return events


def test_terminal_safe_escapes_what_a_terminal_acts_on() -> None:
    from tb_kineto_insights.analysis.units import terminal_safe

    assert terminal_safe("aten::mm\tok µs ✓") == "aten::mm\tok µs ✓"
    assert terminal_safe(FORGED) == (
        "\\x1b]0;owned\\x07\\x1b[2J\\u202eevil\\x0d\\x0aFAIL: step time regressed 90%"
    )
    assert terminal_safe("\x7f\x85\u2066") == "\\x7f\\x85\\u2066"


@pytest.mark.parametrize("command", ["report", "diff", "check"])
def test_text_output_escapes_control_characters_from_trace_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A run folder and a kernel named with ESC/OSC sequences, an RLO and a newline:
    the text output holds the names escaped, never raw (no forged line, no terminal
    command)."""
    folder = tmp_path / "run\x1b]0;owned\x07\u202e\nFAIL: forged"
    trace = write_trace(folder / "w.1.pt.trace.json", _forged_events())
    args = [str(trace)] if command == "report" else [str(trace), str(trace)]
    code, out, _ = run_cli([command, *args], capsys)
    assert code == 0, out
    assert not any(c in out for c in "\x1b\x07\r\u202e")
    assert not any(line.startswith("FAIL") for line in out.splitlines())
    if command == "report":  # the run's name is shown, escaped
        assert "== run run\\x1b]0;owned\\x07\\u202e\\x0aFAIL: forged" in out


def _report_merged(path: Path) -> tuple[int, str]:
    """``report PATH`` as a terminal shows it: stderr and stdout in one stream."""
    done = subprocess.run(
        [sys.executable, "-m", "tb_kineto_insights.cli", "report", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        timeout=120,
    )
    return done.returncode, done.stdout


def test_unreadable_input_prints_the_error_first(tmp_path: Path) -> None:
    """Attack run: random bytes named ``.json.gz`` (the reproduction): the error comes
    first, then the file and why ("not gzip"), and nothing that reads like a report."""
    run = tmp_path / "run1"
    run.mkdir()
    bad = run / "w.pt.trace.json.gz"
    bad.write_bytes(b"\x9c" + bytes(range(256)) * 19)
    code, text = _report_merged(run)
    assert code == 2
    assert text == (
        "error: no trace could be read; the reasons, per file, follow\n"
        f"{bad}: TraceFormatError: not gzip (named .gz, but it does not start with "
        "the gzip magic 1f 8b) and not a JSON trace either at byte 0\n"
    )


def test_a_folder_named_like_a_trace_is_said_once_then_the_error(tmp_path: Path) -> None:
    """Attack run: a folder named ``w.pt.trace.json`` and nothing else: one warning
    naming it, the error, and no empty "0 run(s)" report."""
    run = tmp_path / "run2"
    (run / "w.pt.trace.json").mkdir(parents=True)
    code, text = _report_merged(run)
    assert code == 2
    assert text == (
        f"warning: {run}: skipped 1 path(s): {run / 'w.pt.trace.json'} (a folder named like "
        "a trace file, not read)\n"
        f"error: no Kineto trace files found under {run}\n"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs: POSIX only")
def test_report_json_lists_what_discovery_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attack run: a FIFO and a dangling link named like traces were said only on
    stderr; a JSON consumer saw nothing of them. They are now ``skipped`` (path and
    reason, sorted by path), before ``runs``; a log directory that skipped nothing has no
    such key."""
    logdir = tmp_path / "logs"
    write_trace(logdir / "run1" / "w.1.pt.trace.json", [kernel("k", 0.0, 10.0)])
    (logdir / "run2").mkdir()
    os.mkfifo(logdir / "run2" / "w.2.pt.trace.json")
    (logdir / "run2" / "w.3.pt.trace.json").symlink_to(logdir / "run2" / "gone")
    os.mkfifo(os.fsencode(logdir / "run2") + b"/\xfe.pt.trace.json")  # not UTF-8
    code, out, _ = run_cli(["report", str(logdir), "--format", "json", "--cache", "none"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert list(doc) == ["schema", "path", "skipped", "runs"]
    assert doc["skipped"] == [
        {  # written escaped, and sorted as written ("\\" before "w")
            "path": str(logdir / "run2") + "/\\xfe.pt.trace.json",
            "reason": "not a regular file (a fifo, socket or device), not read",
        },
        {
            "path": str(logdir / "run2" / "w.2.pt.trace.json"),
            "reason": "not a regular file (a fifo, socket or device), not read",
        },
        {
            "path": str(logdir / "run2" / "w.3.pt.trace.json"),
            "reason": "a symlink to a missing file, not read",
        },
    ]
    assert [r["run"] for r in doc["runs"]] == ["run1"]
    code, out, _ = run_cli(
        ["report", str(logdir / "run1"), "--format", "json", "--cache", "none"], capsys
    )
    assert code == 0 and "skipped" not in json.loads(out)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs: POSIX only")
def test_a_skipped_name_is_escaped_on_the_terminal(tmp_path: Path) -> None:
    """Attack run: a FIFO named with an ESC sequence and a newline reached the terminal
    raw in the "skipped" warning (a forged line, a colour); it is escaped, as every name
    printed is, and the JSON still holds the name itself."""
    run = tmp_path / "run1"
    write_trace(run / "w.1.pt.trace.json", [kernel("k", 0.0, 10.0)])
    os.mkfifo(run / "e\x1b[31mred\nx.pt.trace.json")
    done = subprocess.run(
        [sys.executable, "-m", "tb_kineto_insights.cli", "report", str(run), "--format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert done.returncode == 0
    assert done.stderr == (
        f"warning: {run}: skipped 1 path(s): {run}/e\\x1b[31mred\\x0ax.pt.trace.json "
        "(not a regular file (a fifo, socket or device), not read)\n"
    )
    skipped = json.loads(done.stdout)["skipped"]
    assert skipped == [
        {
            "path": str(run / "e\x1b[31mred\nx.pt.trace.json"),
            "reason": "not a regular file (a fifo, socket or device), not read",
        }
    ]
