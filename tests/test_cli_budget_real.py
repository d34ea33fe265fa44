"""The tests of ``test_cli_budget.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import wait_until
from test_cli_budget import REPO


def _session_processes(sid: int) -> list[int]:
    """PIDs of the processes of session ``sid`` (``/proc/PID/stat``'s sixth field)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:
                pids.append(int(entry))
    return pids


def _report_in_own_session() -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "KINETO_INSIGHTS_READ_WORKERS": "2"}
    code = (
        "import sys\nsys.argv = ['tb-kineto-insights', 'report', sys.argv[1], '--format', "
        "'json', '--cache', 'none']\nfrom tb_kineto_insights.cli.main import main\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(REPO / "sample_logs")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    wait_until(
        lambda: _reading_with_handlers(proc), 30, "the report's worker ready, its handlers set"
    )
    return proc


def _dispositions(pid: int) -> tuple[int, int]:
    """``(ignored, caught)``: the signal masks of ``/proc/PID/status`` (bit n-1: signal n)."""
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["SigIgn"], 16), int(fields["SigCgt"], 16)


def _command_of(pid: int) -> int:
    """The process that runs the command: the console script forks the command off its
    time budget's watchdog (``cli/supervisor.py``), the process started; ``pid`` itself
    when it has no child yet."""
    from tb_kineto_insights.trace.processes import descendants

    found = descendants(pid)
    return found[0] if found else pid


def _reading_with_handlers(proc: subprocess.Popen[str]) -> bool:
    """The command of :func:`_report_in_own_session` reads the files: past its fork of
    the worker processes, and every process of its session but the watchdog and the
    command has its own signal dispositions (SIGINT ignored, SIGTERM not the command's
    handler), not the ones a fork inherits from the command."""
    import signal

    assert proc.poll() is None, proc.communicate()
    sigint, sigterm = 1 << (signal.SIGINT - 1), 1 << (signal.SIGTERM - 1)
    command = _command_of(proc.pid)
    try:
        others = [pid for pid in _session_processes(proc.pid) if pid not in (proc.pid, command)]
        masks = [_dispositions(pid) for pid in others]
    except OSError:  # a process ended meanwhile: look again
        return False
    return (
        command != proc.pid
        and bool(others)
        and all(ignored & sigint and not caught & sigterm for ignored, caught in masks)
    )


def _assert_session_ends(pid: int) -> None:
    """Within 10 s no process of the session led by ``pid`` is left (its workers too)."""
    wait_until(lambda: _session_processes(pid) == [], 10, f"no process of session {pid}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl: Linux")
@pytest.mark.parametrize(
    ("signal_name", "said", "code"),
    [("SIGINT", "interrupted", 130), ("SIGTERM", "terminated", 143)],
)
@pytest.mark.parametrize("to_group", [False, True])
def test_ctrl_c_or_sigterm_ends_report_and_its_workers_without_tracebacks(
    signal_name: str, said: str, code: int, to_group: bool
) -> None:
    """Ctrl-C or SIGTERM while a log directory is read, to the command alone or to its
    whole process group (as a terminal's Ctrl-C, or ``kill -- -PGID``): said once on
    stderr (a worker that kept the command's SIGTERM handler said it too), exit 128 +
    the signal, no traceback, and no process of the command left."""
    import signal

    proc = _report_in_own_session()
    if to_group:
        os.killpg(proc.pid, getattr(signal, signal_name))
    else:
        proc.send_signal(getattr(signal, signal_name))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code and err == said + "\n", err
    assert out == ""
    _assert_session_ends(proc.pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl: Linux")
def test_workers_end_with_a_killed_command() -> None:
    """SIGKILL of the command alone (not its group): its forked workers die with it, so
    a reader of its output gets end-of-file (a worker left behind held the pipe)."""
    import signal

    proc = _report_in_own_session()
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)  # end-of-file on both pipes: no worker holds them
    _assert_session_ends(proc.pid)
