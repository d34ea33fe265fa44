"""glibc malloc settings of trace-reading commands (cli/allocator.py, issue 34): a block
of a few MiB comes from the heap (reused), not a fresh ``mmap`` faulted in page by page;
a user's own allocator settings are kept. Checked in fresh interpreters with glibc's
``mallinfo2`` (bytes held in mmapped blocks), not by timing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.cli import allocator
from tb_kineto_insights.cli import main as cli_main

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc only",
)

#: Prints the tune's result and the bytes in mmapped blocks while a 3 MiB block lives.
_PROBE = """
import ctypes, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
tuned = None
if sys.argv[1] == "tune":
    from tb_kineto_insights.cli.allocator import tune_allocator
    tuned = tune_allocator()
block = bytearray(3 * 1024 * 1024)
print(tuned, libc.mallinfo2().hblkhd)
"""


def _probe(mode: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k not in allocator._USER_SETTINGS}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        env={**clean, **env},
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    return out[0], int(out[1])


def test_a_few_mib_come_from_the_heap_once_tuned() -> None:
    assert allocator.MMAP_THRESHOLD_BYTES > 3 * 1024 * 1024
    tuned, mmapped = _probe("tune")
    assert tuned == "True" and mmapped < 3 * 1024 * 1024
    # the negative control: glibc's default maps the block on its own
    untouched, mmapped = _probe("default")
    assert untouched == "None" and mmapped >= 3 * 1024 * 1024


def test_the_users_settings_are_kept() -> None:
    tuned, mmapped = _probe("tune", MALLOC_MMAP_THRESHOLD_=str(128 * 1024))
    assert tuned == "False" and mmapped >= 3 * 1024 * 1024
    tuned, _ = _probe("tune", GLIBC_TUNABLES="glibc.malloc.trim_threshold=131072")
    assert tuned == "False"
    tuned, _ = _probe("tune", GLIBC_TUNABLES="glibc.cpu.x86_shstk=on")  # not the allocator
    assert tuned == "True"


def test_commands_that_read_traces_tune_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(allocator, "tune_allocator", lambda: calls.append(True) or True)
    trace = write_trace(tmp_path / "w.1.pt.trace.json", [cpu("op", 0.0, 10.0), kernel("k", 1, 2)])
    assert cli_main.main(["--version"]) == 0
    assert calls == []
    assert cli_main.main(["report", str(trace), "--format", "json", "--cache", "none"]) == 0
    assert calls == [True]
    capsys.readouterr()
