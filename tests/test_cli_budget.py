"""Issue 32 §3: every command has a time budget (``--timeout``, default from the input's
size) and stops with exit 124, saying so, past it.
Real traces: ``test_cli_budget_real.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import kernel, python_child, write_trace

from tb_kineto_insights.cli import budget
from tb_kineto_insights.cli.main import main
from tb_kineto_insights.service.worker_pool import LoadDeadline

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, timeout: float = 120) -> tuple[int, str, str, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tb_kineto_insights.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


def big_trace(path: Path, kernels: int = 150_000) -> Path:
    """About 20 MB of plain JSON: seconds to read, far more than 0.2 s."""
    events = [kernel(f"k{i % 13}", 1000 + 2 * i, 1, corr=i) for i in range(kernels)]
    return write_trace(path, events)


def test_defaults_match_the_plugins_load_deadline() -> None:
    assert (
        LoadDeadline().base_s,
        LoadDeadline().per_mib_s,
    ) == (budget.DEFAULT_TIMEOUT_S, budget.DEFAULT_TIMEOUT_S_PER_MIB)


def test_default_budget_from_the_stored_size(tmp_path: Path) -> None:
    run = tmp_path / "logs" / "run"
    (run / "deep" / "er").mkdir(parents=True)
    (run / "a.pt.trace.json").write_bytes(b"x" * (3 * 1024**2))
    (run / "deep" / "er" / "b.pt.trace.json.gz").write_bytes(b"y" * 1024**2)
    assert budget.input_bytes([str(run)]) == 4 * 1024**2
    assert budget.input_bytes([f"{tmp_path / 'logs'}:run"]) == 4 * 1024**2  # LOGDIR:RUN
    assert budget.input_bytes(["s3://bucket/logs", str(tmp_path / "missing")]) is None
    assert budget.default_timeout_s([str(run), str(run / "a.pt.trace.json")]) == 120.0 + 2.0 * 7
    assert budget.default_timeout_s(["s3://bucket/logs"]) == 120.0


@pytest.mark.parametrize("bad", ["-1", "nan", "inf", "soon"])
def test_bad_timeout_is_a_usage_error(tmp_path: Path, bad: str) -> None:
    assert main(["report", str(tmp_path), "--timeout", bad]) == 2
    assert main(["diff", str(tmp_path), str(tmp_path), "--timeout", bad]) == 2
    assert main(["check", str(tmp_path), str(tmp_path), "--timeout", bad]) == 2
    assert main(["index", str(tmp_path), "--timeout", bad]) == 2
    assert main(["history", str(tmp_path), "--timeout", bad]) == 2
    assert main(["window", str(tmp_path), "--step", "1", "--out", "o", "--timeout", bad]) == 2
    assert main(["doctor", "--timeout", bad]) == 2


#: The console script with the history's work replaced by a C call that holds the GIL
#: for hours (Python's ``re`` backtracking): a budget kept by a thread or a ``SIGALRM``
#: handler of the command never fires (the attack run: ``--timeout 5`` ended after
#: 15.8 s, when the regex let go).
GIL_HOLDER = """
import re, sys
from tb_kineto_insights.compare import history
def hold_the_gil(*args, **kwargs):
    re.match(r"(a+)+b", "a" * 40)  # the input under test: hours in C, holding the GIL
history.build_history = hold_the_gil
from tb_kineto_insights.cli.main import main
sys.argv = ["tb-kineto-insights", *sys.argv[1:]]
sys.exit(main())
"""


@pytest.mark.parametrize("command", ["history", "check"])
def test_the_budget_holds_while_the_command_holds_the_gil(tmp_path: Path, command: str) -> None:
    """``history`` and ``check --against-history`` stop with 124 at ``--timeout``
    whatever the command is doing: the budget is kept by a watchdog process."""
    logdir = tmp_path / "logs"
    for name in ("exp_1", "exp_2"):
        write_trace(logdir / name / "w.1.pt.trace.json", [kernel("k", 1000, 10)])
    args = [command, str(logdir)]
    if command == "check":
        args = [command, str(logdir / "exp_2"), "--against-history", str(logdir)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", GIL_HOLDER, *args, "--timeout", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,  # a hang guard: the regex alone would run for hours
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == budget.EXIT_TIMEOUT, proc.stderr
    assert f"{command} did not finish within its time budget of 1.0 s" in proc.stderr
    assert proc.stdout == "" and elapsed < 1.0 + 10.0  # start-up included


def test_report_past_its_budget_stops_with_124(tmp_path: Path) -> None:
    trace = big_trace(tmp_path / "w.1.pt.trace.json")
    code, out, err, elapsed = cli("report", str(trace), "--timeout", "0.2", "--cache", "none")
    assert code == budget.EXIT_TIMEOUT, err
    assert "report did not finish within its time budget of 0.2 s (--timeout)" in err
    assert elapsed < 0.2 + 10.0  # interpreter start-up and imports included
    assert out == ""


@pytest.mark.parametrize("command", ["diff", "check"])
def test_diff_and_check_past_their_budget_stop_with_124(tmp_path: Path, command: str) -> None:
    trace = big_trace(tmp_path / "w.1.pt.trace.json")
    code, _, err, _ = cli(command, str(trace), str(trace), "--timeout", "0.2", "--cache", "none")
    assert code == budget.EXIT_TIMEOUT and "within its time budget of 0.2 s" in err, err


def test_report_within_its_budget(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "w.1.pt.trace.json", [kernel("k", 1000, 5)])
    code, out, err, _ = cli("report", str(trace), "--format", "json", "--timeout", "60")
    assert code == 0, err
    assert json.loads(out)["runs"]
    code, out, err, _ = cli("report", str(trace), "--timeout", "0")  # 0: no budget
    assert code == 0, err


def _budget_child(code: str) -> tuple[int, str, float]:
    """Run ``code`` (with ``Budget`` imported and ``sys``, ``time``) in a fresh
    interpreter: its exit code, stderr and seconds."""
    started = time.monotonic()
    head = "import sys, time\nfrom tb_kineto_insights.cli.budget import Budget\n"
    proc = python_child(head + code, timeout=60)
    return proc.returncode, proc.stderr, time.monotonic() - started


def test_the_budget_is_kept_by_signal_while_no_thread_may_start() -> None:
    """While the command forks its workers (no thread may run then) the deadline is
    kept by SIGALRM: past it the process stops with 124 and the message, there too."""
    # the child's sleep is the command's work, which the budget must stop
    code, err, elapsed = _budget_child(
        "b = Budget('report', 0.3, '--timeout', sys.stderr)\n"
        "with b.by_signal():\n"
        "    import threading\n"
        "    assert threading.active_count() == 1\n"
        "    time.sleep(30)\n"
    )
    assert code == budget.EXIT_TIMEOUT, err
    assert "report did not finish within its time budget of 0.3 s (--timeout)" in err
    assert elapsed < 15


def test_the_thread_watches_what_the_signal_left() -> None:
    """After the signal's block the thread watches the rest of the same deadline (not a
    fresh budget), and the signal is off: 0.8 s of 1.0 s spent in the block, the thread
    waits at most 0.2 s more."""
    # the child's sleeps are the command's work: 0.8 s of it in the block, then more
    # than its budget
    code, err, elapsed = _budget_child(
        "import signal\n"
        "b = Budget('diff', 1.0, '--timeout', sys.stderr)\n"
        "with b.by_signal():\n"
        "    time.sleep(0.8)\n"
        "assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)\n"
        "assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL\n"
        "b.start()\n"
        "print('left', b.timer.interval, file=sys.stderr, flush=True)\n"
        "time.sleep(30)\n"
    )
    assert code == budget.EXIT_TIMEOUT, err
    assert "diff did not finish within its time budget of 1.0 s" in err
    left = float(err.split("left ")[1].split()[0])
    assert 0.0 <= left <= 0.2
    assert elapsed < 15


def test_a_command_within_the_signals_block_is_not_stopped() -> None:
    # the child's sleeps are the command's work, in the block and after it
    code, err, _ = _budget_child(
        "b = Budget('report', 5.0, '--timeout', sys.stderr)\n"
        "with b.by_signal():\n"
        "    time.sleep(0.1)\n"
        "b.start()\n"
        "b.cancel()\n"
        "time.sleep(0.2)\n"
        "print('done', file=sys.stderr)\n"
    )
    assert code == 0 and err.strip() == "done", err


def test_a_cancelled_budget_never_fires_and_output_cancels_it() -> None:
    """The command's first write to standard output cancels the budget (its document is
    written whole or not at all); a budget cancelled never fires (expire returns)."""
    import io

    b = budget.Budget("report", 60.0, "--timeout", io.StringIO())
    out = budget.OutputEndsBudget(io.StringIO(), b)
    assert out.write("{}\n") == 3
    b.expire()  # returns: cancelled by the write; it would end this process otherwise
    assert out.getvalue() == "{}\n"  # the rest is the stream's own


def test_a_tiny_budget_is_named_as_it_was_given() -> None:
    assert budget._seconds_text(0.004) == "0.004" and budget._seconds_text(0.2) == "0.2"
    assert budget._seconds_text(1.0) == "1.0"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")
def test_children_of_children_are_killed_without_psutil() -> None:
    """Without psutil the /proc fallback kills grandchildren too (a forkserver's
    workers are the command's grandchildren)."""
    # the input under test: a child and a grandchild (both sleeping) alive until killed
    code = (
        "import os, select, subprocess, sys\n"
        "sys.modules['psutil'] = None  # the fallback\n"
        "from tb_kineto_insights.cli import budget\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import subprocess, sys, time; "
        'p = subprocess.Popen(["sleep", "60"]); print(p.pid, flush=True); time.sleep(60)\'],'
        " stdout=subprocess.PIPE, text=True)\n"
        "grandchild = int(child.stdout.readline())\n"
        "budget._kill_children()\n"
        "child.wait(timeout=10)\n"
        "try:  # readable once the grandchild has ended (a zombie or reaped)\n"
        "    select.select([os.pidfd_open(grandchild)], [], [], 10)\n"
        "except ProcessLookupError:\n"
        "    pass  # reaped already\n"
        "try:\n"
        "    state = open(f'/proc/{grandchild}/stat').read().rsplit(')', 1)[1].split()[0]\n"
        "except FileNotFoundError:\n"
        "    state = 'gone'\n"
        "print(child.returncode, state)\n"
    )
    proc = python_child(code, timeout=60)
    assert proc.returncode == 0, proc.stderr
    code_of_child, state = proc.stdout.split()
    assert code_of_child == "-9" and state in ("Z", "gone")  # killed (a zombie until reaped)


def test_the_forkserver_is_spawned_with_sigint_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decode workers' server is spawned while this process ignores SIGINT (it
    inherits that, so a Ctrl-C while it imports its preload prints no traceback of it:
    the command says "interrupted" alone), and this process's handler is back after;
    from another thread (signal handlers are the main thread's) it is just started."""
    import signal
    import threading
    from multiprocessing import forkserver

    from tb_kineto_insights.trace import parallel

    seen: list[object] = []
    monkeypatch.setattr(
        forkserver, "ensure_running", lambda: seen.append(signal.getsignal(signal.SIGINT))
    )
    before = signal.getsignal(signal.SIGINT)
    parallel.start_server()
    assert seen == [signal.SIG_IGN] and signal.getsignal(signal.SIGINT) is before
    thread = threading.Thread(target=parallel.start_server)
    thread.start()
    thread.join()
    assert seen == [signal.SIG_IGN, before]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", ["1", ""])
@pytest.mark.parametrize("fmt", ["json", "text"])
def test_an_output_that_cannot_be_written_is_said_in_one_line(
    tmp_path: Path, fmt: str, unbuffered: str
) -> None:
    """A full disk under the output: one line on stderr and exit 74 (EX_IOERR), whether
    the text is written at once or flushed at the end; it was a traceback, exit 1."""
    trace = write_trace(tmp_path / "w.1.pt.trace.json", [kernel("k", 1, 2)])
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": unbuffered}
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "tb_kineto_insights.cli", "report", str(trace)]
            + ["--format", fmt, "--cache", "none"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )
    assert proc.returncode == 74
    assert proc.stderr == "error: cannot write the output ([Errno 28] No space left on device)\n"


def _report_to(tmp_path: Path, **popen: Any) -> subprocess.CompletedProcess[str]:
    trace = write_trace(tmp_path / "w.1.pt.trace.json", [kernel("k", 1, 2)])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, "-m", "tb_kineto_insights.cli", "report", str(trace), "--cache", "none"],
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONPATH": str(REPO)},
        timeout=120,
        **popen,
    )


def test_a_closed_pipe_ends_quietly_with_buffered_output(tmp_path: Path) -> None:
    """`report ... | true` with the default (buffered) output: exit 0 and nothing on
    stderr (the exit's flush failed again: "Exception ignored", exit 120)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = _report_to(tmp_path, stdout=write)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_a_closed_standard_output_is_said_in_one_line(tmp_path: Path) -> None:
    proc = _report_to(tmp_path, stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    assert proc.returncode == 74
    assert proc.stderr == "error: cannot write the output (standard output is closed)\n"


@pytest.mark.skipif(sys.platform == "win32", reason="os.kill of SIGINT/SIGTERM: POSIX")
def test_a_second_signal_while_ending_says_nothing_more() -> None:
    """A terminal's Ctrl-C reaches the command twice (its process group, and the
    watchdog passing it on), and Python runs the handler again inside the first for a
    signal that came meanwhile: here a second SIGINT and a SIGTERM arrive after the
    first handler said its word. Said once, exit 130 (CI saw "interrupted" twice)."""
    setup = (
        "class Err:\n"
        "    sent = False\n"
        "    def write(self, text):\n"
        "        sys.stderr.write(text)\n"
        "    def flush(self):\n"
        "        sys.stderr.flush()\n"
        "        if not Err.sent:\n"
        "            Err.sent = True\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "            sum(range(10000))  # bytecode boundaries: pending handlers run here\n"
    )
    done = _ctrl_c_child(setup, err="Err()")
    assert (done.returncode, done.stderr) == (budget.EXIT_INTERRUPTED, "interrupted\n")


def _ctrl_c_child(setup: str, err: str = "sys.stderr") -> subprocess.CompletedProcess[str]:
    """A child that runs ``setup`` (``os``, ``signal``, ``sys`` and ``types`` imported),
    takes Ctrl-C as the console script does (``stop_on_interrupt(ERR)``), sends itself
    SIGINT and spins until a handler ends it."""
    code = (
        "import os, signal, sys, types\n"
        "from tb_kineto_insights.cli import budget\n"
        f"{setup}"
        f"budget.stop_on_interrupt({err})\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "while True:\n"
        "    pass\n"
    )
    return python_child(code, timeout=60)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the watchdog forks")
def test_a_signal_to_the_group_while_the_watchdog_forks_is_said_once() -> None:
    """SIGTERM to the whole process group just as the watchdog forks the command (the
    attack run hit it 3 times in 135): both processes get it. Said once, by the command,
    and the watchdog exits as the command did (143). Before the fork held the signals,
    the watchdog, still on the command's handler, said it (and the command too, when it
    was quicker than the watchdog's kill)."""
    code = (
        "import os, signal, sys, time\n"
        "from tb_kineto_insights.cli import budget, supervisor\n"
        "WATCHDOG = os.getpid()\n"
        "class Err:  # who says it\n"
        "    def write(self, text):\n"
        "        who = 'watchdog' if os.getpid() == WATCHDOG else 'command'\n"
        "        sys.stderr.write(who + ': ' + text)\n"
        "    def flush(self):\n"
        "        sys.stderr.flush()\n"
        "budget.stop_on_interrupt(Err())\n"
        "real = os.fork\n"
        "def fork():\n"
        "    pid = real()\n"
        "    if pid:\n"
        "        os.killpg(0, signal.SIGTERM)  # parent and child both exist now\n"
        "    return pid\n"
        "os.fork = fork\n"
        "supervisor.fork_watched(time.monotonic() + 60, 'over')\n"
        "time.sleep(30)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        start_new_session=True,
    )
    assert (done.returncode, done.stderr) == (budget.EXIT_TERMINATED, "command: terminated\n")


def test_ctrl_c_during_the_import_of_the_process_helpers_ends_cleanly() -> None:
    """Ctrl-C while start-up imports ``trace/processes.py`` (half made: an ImportError
    of ``descendants``, a traceback and exit 1 in the attack run): said once, exit 130;
    no child exists before that module is whole."""
    setup = (
        "half = types.ModuleType('tb_kineto_insights.trace.processes')  # no names yet\n"
        "sys.modules['tb_kineto_insights.trace.processes'] = half\n"
    )
    done = _ctrl_c_child(setup)
    assert (done.returncode, done.stderr) == (budget.EXIT_INTERRUPTED, "interrupted\n")


def test_ctrl_c_while_the_console_script_parses_its_arguments() -> None:
    """The console script takes Ctrl-C as soon as it starts: here it comes while the
    argument parser is built (a ``KeyboardInterrupt`` traceback, exit 1, in the attack
    run, which sent it 0.05-0.2 s after the start)."""
    code = (
        "import os, signal, sys\n"
        "from tb_kineto_insights.cli import main as cli\n"
        "parser = cli._parser\n"
        "def interrupted_parser():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return parser()\n"
        "cli._parser = interrupted_parser\n"
        "sys.argv = ['tb-kineto-insights', 'report', os.devnull]\n"
        "sys.exit(cli.main())\n"
    )
    done = python_child(code, timeout=60)
    assert (done.returncode, done.stderr) == (budget.EXIT_INTERRUPTED, "interrupted\n")
