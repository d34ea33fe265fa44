"""``--group-by`` / ``/history?group_by=`` never runs unbounded: the user's regex runs on
RE2 (no backtracking), and what RE2 cannot take is a clear 400 / exit 2, never a 500,
a traceback or a frozen TensorBoard (the attack run: ``(a+)+b`` on a 27-character name
took 14.2 s holding the GIL, ``a{99999999999}`` gave an OverflowError, 1,000 nested
groups a RecursionError)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from test_history import DAY_NS, T0, headline, one, tiny_trace
from test_history_plugin import history_until_loaded
from test_plugin import _close_plugins, make_app, strict_json, url  # noqa: F401
from werkzeug.test import Client

from tb_kineto_insights.compare.history import series_key
from tb_kineto_insights.compare.history_groups import MAX_PATTERN_CHARS, group_key, group_pattern
from tb_kineto_insights.serve.plugin import PRELOAD_ENV

#: Patterns that backtrack for ever in Python's re on a long run of ``a``.
HOSTILE = [r"(a+)+b", r"(a|a)*b", r"(a*)*b", r"^(a|aa)+$x"]
NESTED = "(" * 1000 + "a" + ")" * 1000
SHALLOWER = "(?:" * 400 + "(a)" + ")" * 400


def test_the_engine_is_re2() -> None:
    assert type(group_pattern("x")).__module__.startswith("re2")


@pytest.mark.parametrize("pattern", HOSTILE)
def test_hostile_patterns_are_linear(pattern: str) -> None:
    # 10,000 characters: Python's re would take longer than the universe has existed
    assert group_key(pattern, "a" * 10_000) is None


def test_odd_patterns_are_refused_or_bounded() -> None:
    assert group_key("a{99999999999}", "a{99999999999}") == "a{99999999999}"  # a literal
    assert group_key(SHALLOWER, "xay") == "a"  # 400 nested groups: compiled, no recursion
    for bad, why in (
        ("a{1001}", "invalid repetition size"),
        (r"(a)\1", "invalid escape sequence"),  # a backreference
        ("(?<=a)b", "invalid perl operator"),  # lookbehind
        ("(", "missing )"),
        ("x" * (MAX_PATTERN_CHARS + 1), "characters long; at most 4,096"),
        # linear, but 10,004 instructions: 0.4 s a 4,096-character name (fuzz_groups.py)
        ("(.*){1000}", "compiles to 10,004 RE2 instructions; at most 1,000"),
        (NESTED, "has 1,000 capturing groups; at most 9"),  # Python's re: RecursionError
        # 972 instructions, but 480 captures tracked: over a second a 4,000-char name
        ("(?:" + "(" * 480 + "." + ")" * 480 + ")*", "has 480 capturing groups"),
    ):
        with pytest.raises(ValueError, match=f"--group-by .*{re.escape(why)}"):
            group_pattern(bad)


def test_groups_as_before() -> None:
    assert group_key(r"^(exp)_\d+", "exp_007") == "exp"
    assert group_key(r"(x)?exp", "exp_007") == "exp"  # the whole match
    assert group_key("(x)?", "exp_007") is None  # an empty match: no key
    assert group_key(r"^zzz", "exp_007") is None
    # a name that is not UTF-8 is matched as shown: its bad byte as \xff
    assert group_key(r"^(\w+)\\xff_\d+$", "run\udcff_12") == "run"
    assert group_key(r"_(\d+)$", "run\udcff_12") == "12"
    # a pattern holding such a byte (a command line in a locale that is not UTF-8)
    # matches the name's byte: it was a bare UnicodeEncodeError in the RE2 wrapper
    assert group_key("^(run)\udcff_", "run\udcff_12") == "run"
    assert group_key("(\udcff_\\d+)", "run\udcff_12") == "\\xff_12"
    assert group_key("\udcff", "run\udcfe_12") is None
    # a quantifier after the byte repeats the byte (it repeated the "f" of its \xff)
    assert group_key("^(run\udcff{2})_", "run\udcff\udcff_4") == "run\\xff\\xff"
    # any other lone surrogate (no file system gives one) is shown as \uNNNN
    assert group_key(r"(\\ud800)", "a\ud800") == "\\ud800"
    run = one("a" * 27, headline())
    assert series_key(run, "logs", "(a+)+b") == ("a" * 27, "run")


def test_history_command_with_a_hostile_group_by(tmp_path: Path) -> None:
    """The command's answer comes at once; the runs the regex does not match are series
    of their own (a hang guard of 60 s: Python's re would run for hours)."""
    logdir = tmp_path / "logs"
    for i in range(2):
        tiny_trace(logdir / ("a" * 40 + str(i)) / "w.1.pt.trace.json", 200.0, T0 + i * DAY_NS)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "tb_kineto_insights.cli", "history", str(logdir)]
        + ["--group-by", "(a+)+b", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count('"grouped_by": "run"') == 2
    bad = subprocess.run(
        [sys.executable, "-m", "tb_kineto_insights.cli", "history", str(logdir)]
        + ["--group-by", "a{1001}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: --group-by 'a{1001}' is not")
    assert "Traceback" not in bad.stderr


def test_history_route_with_hostile_group_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile ``group_by`` is answered at once (200 or 400, never a 500) and every
    other route keeps answering."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    logdir = tmp_path / "logs"
    for i in range(3):
        tiny_trace(logdir / ("a" * 27 + str(i)) / "w.1.pt.trace.json", 200.0, T0 + i * DAY_NS)
    client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(tmp_path / "cache")))
    history_until_loaded(client)
    for pattern, code in (
        ("(a+)+b", 200),
        ("a{99999999999}", 200),
        (SHALLOWER, 200),
        (NESTED, 400),
        ("a{1001}", 400),
        (r"(a)\1", 400),
        ("x" * 5000, 400),
    ):
        answer = client.get(url("history", group_by=pattern))
        assert answer.status_code == code, (pattern[:20], answer.get_data(as_text=True)[:200])
        if code == 400:
            assert "--group-by" in strict_json(answer)["error"]
        assert client.get(url("runs")).status_code == 200
    doc = strict_json(client.get(url("history", group_by="(a+)+b")))
    assert sorted(s["grouped_by"] for s in doc["series"]) == ["run", "run", "run"]


def test_a_pattern_is_compiled_once_per_history() -> None:
    group_pattern.cache_clear()
    runs = [one(f"exp_{i}", headline()) for i in range(50)]
    keys = {series_key(r, "logs", r"^(exp)_\d+")[0] for r in runs}
    assert keys == {"exp"} and group_pattern.cache_info().misses == 1


@pytest.mark.parametrize("command", ["history", "check"])
def test_a_bad_group_by_is_refused_before_any_trace_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """``history --group-by '('`` and ``check --against-history … --group-by '('`` say
    why at once: no trace is read (none reaches the cache folder)."""
    from tb_kineto_insights.cli.main import main  # noqa: PLC0415

    logdir = tmp_path / "logs"
    tiny_trace(logdir / "run_1" / "w.1.pt.trace.json", 200.0, T0)
    cache = tmp_path / "cache"
    args = [str(logdir)] if command == "history" else [str(logdir / "run_1")]
    if command == "check":
        args += ["--against-history", str(logdir), "--max-step-time-regression", "5%"]
    code = main([command, *args, "--group-by", "(", "--cache", str(cache)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: --group-by '(' is not a regex RE2 takes: missing )"), err
    assert not list(cache.rglob("*.summary"))  # nothing was read
