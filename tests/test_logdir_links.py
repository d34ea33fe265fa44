"""Symlinked run folders and files (``logdir/links.py``): not followed by default, with
a word; followed into the folders the setting names (flag, environment variable), each
file under the allowed root it must still lie in when opened; a link that leaves every
allowed root is still refused; loops end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_logdir import HINT, shape, write

from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.logdir.links import FOLLOW_SYMLINKS_ENV, follow_roots
from tb_kineto_insights.trace.confine import Rule, confined, open_local
from tb_kineto_insights.trace.errors import TraceIOError

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks here")


def _comparison(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``runs/`` (two real runs), ``secret/`` (a trace outside every allowed root) and
    ``compare/`` (the log directory: links to both runs, one of them twice, and one to
    the secret folder)."""
    runs = tmp_path / "runs"
    write(runs / "base" / "w.1.pt.trace.json")
    write(runs / "exp" / "w.2.pt.trace.json")
    secret = tmp_path / "secret"
    write(secret / "run" / "w.3.pt.trace.json")
    logdir = tmp_path / "compare"
    (logdir / "a").mkdir(parents=True)
    (logdir / "a" / "base").symlink_to(runs / "base", target_is_directory=True)
    (logdir / "a" / "exp").symlink_to(runs / "exp", target_is_directory=True)
    (logdir / "b").mkdir()
    (logdir / "b" / "base").symlink_to(runs / "base", target_is_directory=True)
    (logdir / "leak").symlink_to(secret / "run", target_is_directory=True)
    return logdir, runs, secret


def test_linked_run_folders_are_not_followed_by_default(tmp_path: Path) -> None:
    logdir, runs, secret = _comparison(tmp_path)
    skipped: list[tuple[str, str]] = []
    assert discover(str(logdir), skipped=skipped, follow="") == []
    assert sorted(skipped) == sorted(
        (
            str(logdir / link),
            f"a symlink to the folder {target} outside the log directory, not entered{HINT}",
        )
        for link, target in (
            ("a/base", runs / "base"),
            ("a/exp", runs / "exp"),
            ("b/base", runs / "base"),
            ("leak", secret / "run"),
        )
    )


def test_followed_into_the_named_folders_only(tmp_path: Path) -> None:
    logdir, runs, secret = _comparison(tmp_path)
    skipped: list[tuple[str, str]] = []
    found = discover(str(logdir), skipped=skipped, follow=str(runs))
    # one run folder linked twice is two runs, each under its link's name
    assert shape(found) == {"a/base": {"w": ["1"]}, "a/exp": {"w": ["2"]}, "b/base": {"w": ["1"]}}
    span = found[0].workers[0].spans[0]
    assert span.path == str(logdir / "a" / "base" / "w.1.pt.trace.json")
    assert span.root == os.path.realpath(runs)  # what the file must lie in when opened
    # a link that leaves every allowed root is still refused, and named
    assert skipped == [
        (
            str(logdir / "leak"),
            f"a symlink to the folder {secret / 'run'} outside the log directory and every "
            "folder to follow, not entered",
        )
    ]
    # the open checks it again: the link swapped to the secret folder afterwards
    (logdir / "a" / "base").unlink()
    (logdir / "a" / "base").symlink_to(secret / "run", target_is_directory=True)
    os.link(secret / "run" / "w.3.pt.trace.json", secret / "run" / "w.1.pt.trace.json")
    with (
        pytest.raises(TraceIOError, match="outside the log directory"),
        confined(span.path, Rule(span.root)),
        open_local(span.path),
    ):
        pass


def test_the_environment_variable_names_the_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logdir, runs, secret = _comparison(tmp_path)
    monkeypatch.setenv(FOLLOW_SYMLINKS_ENV, f"{runs}{os.pathsep}{secret}")
    assert sorted(r.name for r in discover(str(logdir))) == ["a/base", "a/exp", "b/base", "leak"]
    assert follow_roots(None) == (os.path.realpath(runs), os.path.realpath(secret))
    assert follow_roots(" ") == ()


def test_a_linked_file_follows_the_same_rule(tmp_path: Path) -> None:
    outside = write(tmp_path / "runs" / "w.1.pt.trace.json")
    logdir = tmp_path / "logs"
    (logdir / "run").mkdir(parents=True)
    (logdir / "run" / "w.1.pt.trace.json").symlink_to(outside)
    skipped: list[tuple[str, str]] = []
    assert discover(str(logdir), skipped=skipped, follow="") == []
    assert skipped == [
        (
            str(logdir / "run" / "w.1.pt.trace.json"),
            f"a symlink to a file outside the log directory, not read{HINT}",
        )
    ]
    (span,) = [
        s
        for r in discover(str(logdir), follow=str(tmp_path / "runs"))
        for w in r.workers
        for s in w.spans
    ]
    assert span.root == os.path.realpath(tmp_path / "runs")


def test_loops_end_and_are_named(tmp_path: Path) -> None:
    """A linked run folder holding a link back to its parent, and two folders linking to
    each other: each folder is listed once on its way, the link back is named."""
    runs = tmp_path / "runs"
    write(runs / "r1" / "w.1.pt.trace.json")
    (runs / "r1" / "up").symlink_to(runs, target_is_directory=True)
    write(runs / "x" / "w.2.pt.trace.json")
    write(runs / "y" / "w.3.pt.trace.json")
    (runs / "x" / "to_y").symlink_to(runs / "y", target_is_directory=True)
    (runs / "y" / "to_x").symlink_to(runs / "x", target_is_directory=True)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / "r1").symlink_to(runs / "r1", target_is_directory=True)
    (logdir / "x").symlink_to(runs / "x", target_is_directory=True)
    skipped: list[tuple[str, str]] = []
    found = discover(str(logdir), skipped=skipped, follow=str(runs))
    assert sorted(r.name for r in found) == ["r1", "x", "x/to_y"]
    loops = sorted(path for path, why in skipped if "(a loop)" in why)
    assert loops == [str(logdir / "r1" / "up"), str(logdir / "x" / "to_y" / "to_x")]
