"""Issue 17 §3: `make test` says what it installs before installing it, and uses a
Chromium that is already there (``CHROMIUM=``) instead of apt-get."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")


def _make(*args: str) -> str:
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_make_test_prints_its_plan_first() -> None:
    dry = _make("-n", "test", "CHROMIUM=/nonexistent/chromium")
    # the plan is the first thing `make test` runs
    assert dry.lstrip().startswith('echo "make test installs what is missing')


def test_plan_names_apt_get_only_when_chromium_is_missing(tmp_path: Path) -> None:
    missing = _make("test-plan", "CHROMIUM=/nonexistent/chromium")
    assert "apt-get" in missing and "--no-install-recommends" in missing
    assert "CHROMIUM=/path/to/chromium" in missing
    mine = tmp_path / "my-chromium"
    mine.write_text("#!/bin/sh\n")
    mine.chmod(0o755)
    present = _make("test-plan", f"CHROMIUM={mine}")
    assert f"Chromium: uses {mine} (nothing to install)" in present
    assert "apt-get" not in present
    for line in ("pip", "npm ci", "playwright"):
        assert line in present


def test_the_given_chromium_reaches_the_browser_tests() -> None:
    dry = _make("-n", "unit", "CHROMIUM=/opt/my/chromium")
    assert "KINETO_INSIGHTS_CHROMIUM=/opt/my/chromium " in dry
    browser = (REPO / "tests" / "browser" / "test_tab.py").read_text()
    assert 'os.environ.get("KINETO_INSIGHTS_CHROMIUM"' in browser


def test_readme_quick_start_says_what_make_test_installs() -> None:
    readme = (REPO / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    for words in ("apt-get", "CHROMIUM=/path/to/chromium", "npm ci", "make test-plan"):
        assert words in quick, words
    # everything the plan lists is named in the quick start (the torch venv was not)
    plan = _make("test-plan", "CHROMIUM=/usr/bin/true")
    for folder, said in ((".venv-torch/", ".venv-torch"), ("frontend/node_modules/", "npm ci")):
        assert folder in plan and said in quick, folder


def test_demo_installs_the_runtime_package_only() -> None:
    """`make -n demo` on a checkout without .venv: pip installs `-e .`, never the [dev]
    extra (pytest, ruff, mypy, moto, dask… are test tools); TensorBoard comes last, through
    scripts/demo.py, which prints the address once it answers (tests/test_demo.py)."""
    dry = _make("-n", "demo", "VENV=/nonexistent/venv")
    assert "[dev]" not in dry and "pip install -q -e ." in dry
    lines = [line for line in dry.splitlines() if line.strip()]
    assert "scripts/demo.py --logdir sample_logs --host 127.0.0.1 --port 6006" in lines[-1]


def test_demo_on_a_busy_port_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = subprocess.run(
            [
                "make",
                "--no-print-directory",
                "-C",
                str(REPO),
                "demo",
                f"PORT={port}",
                f"VENV={tmp_path / 'venv'}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode != 0 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port} on 127.0.0.1 is in use" in lines[0]
    assert not (tmp_path / "venv").exists(), "nothing was installed"


def test_browser_deps_installs_no_recommended_packages() -> None:
    dry = _make("-n", "browser-deps", "CHROMIUM=/nonexistent/chromium", "VENV=/nonexistent/venv")
    assert "apt-get install -y -q --no-install-recommends chromium" in dry
