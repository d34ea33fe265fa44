"""CLI mistakes name their fix (difflib "did you mean" for runs, thresholds, diagnosis ids,
commands and flags; a subcommand's usage on its own error; the error first when nothing
could be read), and ``--format markdown`` of report / diff / check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.cli.main import main
from tb_kineto_insights.cli.markdown import cell, code, fmt_value, md_text


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def _run(folder: Path, kernel_us: float, sync: bool = False) -> Path:
    """4 steps of 1 ms + ``kernel_us``: a kernel of ``kernel_us`` µs; with ``sync``, a
    600 µs cudaDeviceSynchronize after it (the GPU idles after it returns)."""
    events: list[dict[str, Any]] = []
    for n in range(4):
        t0 = 1000.0 + n * 5000.0
        events.append(cpu(f"ProfilerStep#{n + 1}", t0, 1000.0 + kernel_us, cat="user_annotation"))
        launch = cpu("cudaLaunchKernel", t0 + 5.0, 2.0, cat="cuda_runtime")
        launch["args"] = {"correlation": n + 1}
        events.append(launch)
        events.append(kernel("k|pipe", t0 + 10.0, kernel_us, corr=n + 1))
        if sync:
            events.append(cpu("cudaDeviceSynchronize", t0 + 12.0, 600.0, cat="cuda_runtime"))
    return write_trace(folder / "w.1.pt.trace.json", events)


# --------------------------------------------------------------------------- did you mean


def test_a_mistyped_run_gets_the_close_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(tmp_path / "logs" / "dataloader_workers0", 100.0)
    code, _, err = run_cli(["report", str(tmp_path / "logs" / "dataloader_worker0")], capsys)
    assert code == 2
    assert f"did you mean {tmp_path / 'logs' / 'dataloader_workers0'}?" in err
    # diff: a missing side, and LOGDIR:RUN with a mistyped run
    side = str(tmp_path / "logs" / "dataloader_workers0")
    code, _, err = run_cli(["diff", str(tmp_path / "logs" / "dataloader_worker0"), side], capsys)
    assert code == 2 and "did you mean" in err and "dataloader_workers0" in err
    code, _, err = run_cli(["diff", f"{tmp_path / 'logs'}:dataloader_worker0", side], capsys)
    assert code == 2
    assert f"did you mean {tmp_path / 'logs'}:dataloader_workers0?" in err
    # nothing close: no guess
    code, _, err = run_cli(["report", str(tmp_path / "logs" / "zzzzzz")], capsys)
    assert code == 2 and "did you mean" not in err


def test_a_broken_symbolic_link_is_said_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attack run: a link to itself was "cannot be read: Too many levels of symbolic
    links; did you mean LOOP?" (itself) for report, and "no such file" for diff; a link
    to a missing path "does not exist". Each now says what it is, and guesses nothing."""
    side = str(_run(tmp_path / "logs" / "good", 100.0).parent)
    loop, dangling = tmp_path / "logs" / "loop", tmp_path / "logs" / "gone"
    loop.symlink_to(loop)
    dangling.symlink_to(tmp_path / "nowhere")
    said = {
        loop: "is a symbolic link in a loop",
        dangling: f"is a symbolic link to {str(tmp_path / 'nowhere')!r}, which does not exist",
    }
    for link, words in said.items():
        code, _, err = run_cli(["report", str(link)], capsys)
        assert (code, err) == (2, f"error: log directory {str(link)!r}: {words}\n")
        for argv in (["diff", str(link), side], ["check", side, str(link)]):
            code, _, err = run_cli(argv, capsys)
            assert (code, err) == (2, f"error: {link}: {words}\n")
        # with a trailing "/" (the shell's completion adds one) or "/.": no guess either
        for spelled in (f"{link}/", f"{link}/."):
            code, _, err = run_cli(["report", spelled], capsys)
            assert (code, err) == (2, f"error: log directory {spelled!r}: {words}\n")
            code, _, err = run_cli(["diff", spelled, side], capsys)
            assert (code, err) == (2, f"error: {spelled}: {words}\n")


def test_a_mistyped_threshold_or_id_gets_the_close_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _run(tmp_path / "run", 100.0)
    code, _, err = run_cli(["report", str(trace), "--threshold", "short_kernel=3"], capsys)
    assert code == 2 and "did you mean short_kernel_us?" in err
    code, _, err = run_cli(["check", str(trace), str(trace), "--fail-on", "memory_grwth"], capsys)
    assert code == 2 and "did you mean memory_growth?" in err


def test_a_mistyped_flag_gets_the_subcommands_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _run(tmp_path / "run", 100.0)
    code, out, err = run_cli(["report", "--formt", "json", str(trace)], capsys)
    assert code == 2 and out == ""
    assert err.startswith("usage: tb-kineto-insights report ")
    assert "--formt (did you mean --format?)" in err
    code, _, err = run_cli(["diff", str(trace), str(trace), "--treshold", "x=1"], capsys)
    assert code == 2 and err.startswith("usage: tb-kineto-insights diff ")
    assert "did you mean --threshold?" in err
    code, _, err = run_cli(["reprot", str(trace)], capsys)
    assert code == 2 and "unknown command 'reprot'; did you mean report?" in err


def test_nothing_readable_says_so_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# not a trace\n")
    code, out, err = run_cli(["report", str(readme)], capsys)
    assert code == 2
    assert err.startswith("error: no trace could be read")
    assert out == ""  # nothing that reads like a report; each file's reason on stderr
    assert f"{readme}: TraceFormatError: " in err and err.count("README.md") == 1


# --------------------------------------------------------------------------- markdown


def test_markdown_helpers() -> None:
    assert cell("a|b\nc") == "a\\|b c"
    assert fmt_value("idle_us_per_step", 2470.0) == "2.47 ms/step"
    assert fmt_value("peak_bytes", 2**30) == "1.00 GiB"
    assert fmt_value("idle_fraction_of_step_time", 0.247) == "24.7 %"
    assert fmt_value("events_per_step", {"2": 3, "3": 4}) == "#2: 3, #3: 4"
    # a key that is only the unit (a straggler cause's us_per_step) keeps its unit
    assert fmt_value("us_per_step", 947300.0) == "947.30 ms/step"
    assert fmt_value("largest", [{"t_us": 1500.0, "op": "aten::mm"}]) == "t_us 1.50 ms, op aten::mm"


def test_report_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _run(tmp_path / "run", 100.0, sync=True)
    code, out, _ = run_cli(["report", str(trace), "--format", "markdown"], capsys)
    assert code == 0
    assert out.startswith("## tb-kineto-insights report: `")
    assert "### Diagnoses" in out
    assert "`gpu_idle_host_sync`" in out and "<details><summary>Evidence</summary>" in out
    assert "| idle_us_per_step |" in out and "*What to do:*" in out


def test_diff_and_check_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _run(tmp_path / "base", 100.0).parent
    exp = _run(tmp_path / "exp", 400.0).parent
    code, out, _ = run_cli(["diff", str(base), str(exp), "--format", "markdown"], capsys)
    assert code == 0
    assert out.startswith("## tb-kineto-insights diff")
    assert "**Step time " in out and ": regressed**" in out
    assert "### Largest changes (time per step)" in out
    assert "| +300.0 µs | kernel `k\\|pipe` | regressed |" in out
    assert "### Metrics beyond noise" in out
    assert "| 0.0 µs |" not in out, "no change is no largest change"
    code, out, _ = run_cli(["check", str(base), str(exp), "--format", "markdown"], capsys)
    assert code == 1
    assert "### ❌ FAIL" in out and "step time regressed" in out
    code, out, _ = run_cli(["check", str(base), str(base), "--format", "markdown"], capsys)
    assert code == 0 and "### ✅ OK" in out and "No limit crossed." in out


# --------------------------------------------------------------------------- hostile names

HOSTILE = (
    '<img src=x onerror="alert(1)"> @octocat\n# Owned *bold* [link](http://x) `tick` \x1b[31m|'
)


def test_markdown_text_and_code_spans_of_hostile_names() -> None:
    text = md_text(HOSTILE)
    assert "\n" not in text and "\x1b" not in text
    assert text.startswith('\\<img src=x onerror="alert(1)"\\> @\u200boctocat')
    assert "\\\\x0a\\# Owned \\*bold\\* \\[link\\](http://x) \\`tick\\` \\\\x1b\\[31m\\|" in text
    span = code("a`b``c\nd")
    assert span == "```a`b``c\\x0ad```"  # one backtick more than the longest run inside
    assert code("`x") == "`` `x ``" and code("plain") == "`plain`"
    # in a table cell: a pipe in a code span escaped, an escaped one left as it is
    assert cell(code("k|pipe")) == "`k\\|pipe`" and cell(md_text("a|b")) == "a\\|b"
    # evidence strings and keys from the data are escaped; numbers and units are ours
    assert fmt_value("largest", [{"op": "<b>@x</b>", "t_us": 1500.0}], md_text) == (
        "op \\<b\\>@\u200bx\\</b\\>, t_us 1.50 ms"
    )


def _outside_code(markdown: str) -> str:
    """The Markdown with its code spans removed (what GitHub renders as markup)."""
    import re

    return re.sub(r"(`+)(?:(?!\1).)*?\1", "", markdown, flags=re.S)


def _assert_inert(markdown: str, our_headings: int) -> None:
    import re

    assert "\x1b" not in markdown and "\u202e" not in markdown
    plain = _outside_code(markdown)
    assert re.search(r"(?<!\\)<(?!br>|/?details>|/?summary>)", plain) is None, "raw HTML"
    assert re.search(r"@(?!\u200b)", plain) is None, "a mention"
    headings = [line for line in markdown.splitlines() if line.lstrip().startswith("#")]
    assert len(headings) == our_headings, headings
    assert all(h.startswith(("## tb-kineto-insights", "### ")) for h in headings)


def test_markdown_of_hostile_run_and_kernel_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run folders and kernel names with HTML, @mentions, newlines and ESC: the
    Markdown of report, diff and check shows them as text, in code spans or escaped,
    and forges no heading, tag or mention."""
    folder = '@octocat <img src=x onerror="alert(1)">\n# Owned\x1b[31m'
    events: list[dict[str, Any]] = []
    for n in range(4):
        t0 = 1000.0 + n * 5000.0
        events.append(cpu(f"ProfilerStep#{n + 1}", t0, 1200.0, cat="user_annotation"))
        launch = cpu("cudaLaunchKernel", t0 + 5.0, 2.0, cat="cuda_runtime")
        launch["args"] = {"correlation": n + 1}
        events.append(launch)
        events.append(kernel(HOSTILE, t0 + 10.0, 200.0 + 300.0 * (n >= 0), corr=n + 1))
        events.append(cpu("cudaDeviceSynchronize", t0 + 12.0, 600.0, cat="cuda_runtime"))
    bad = write_trace(tmp_path / folder / "w.1.pt.trace.json", events)
    base = _run(tmp_path / "base @octocat", 100.0).parent
    code_, out, _ = run_cli(["report", str(bad.parent), "--format", "markdown"], capsys)
    assert code_ == 0 and "### Diagnoses" in out
    _assert_inert(out, our_headings=3)  # the title, "What if" and "Diagnoses"
    code_, out, _ = run_cli(["diff", str(base), str(bad.parent), "--format", "markdown"], capsys)
    assert code_ == 0 and "### Largest changes (time per step)" in out
    # the kernel (its template arguments folded by the analysis) in a code span, the
    # newline shown as an escape
    assert "kernel `<…> @octocat\\x0a# Owned *bold* [link]`" in out
    _assert_inert(out, our_headings=out.count("\n### ") + 1)
    code_, out, _ = run_cli(["check", str(base), str(bad.parent), "--format", "markdown"], capsys)
    assert code_ == 1
    _assert_inert(out, our_headings=out.count("\n### ") + 1)


# --------------------------------------------------------------------------- URL sides


def _register_fake_storage() -> None:
    """``unreachable://`` (every call a refused connection) and ``hiding://`` (says no
    file exists, as fsspec's http driver says of an unreachable host, and refuses to
    list: expired credentials), as fsspec drivers."""
    import fsspec
    from fsspec.spec import AbstractFileSystem

    class Unreachable(AbstractFileSystem):  # type: ignore[misc]
        protocol = "unreachable"

        def info(self, path: str, **kwargs: Any) -> Any:
            raise ConnectionRefusedError("connection refused")

        exists = ls = info

    class Hiding(AbstractFileSystem):  # type: ignore[misc]
        protocol = "hiding"

        def exists(self, path: str, **kwargs: Any) -> bool:
            return False

        def info(self, path: str, **kwargs: Any) -> Any:
            raise FileNotFoundError(path)  # as fsspec's http driver, whatever the error

        def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
            raise RuntimeError("credentials expired")  # a driver's own error type

    fsspec.register_implementation("unreachable", Unreachable, clobber=True)
    fsspec.register_implementation("hiding", Hiding, clobber=True)


def test_a_url_side_says_why_it_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """diff/check of URL sides: an unknown protocol, a driver not installed, storage that
    cannot be reached or listed are said as such (they all read "no such file, folder,
    or LOGDIR:RUN"); a path that is not there still reads so."""
    import fsspec

    _register_fake_storage()
    fsspec.register_implementation(
        "nodriver", "no_such_package_xyz.NoFileSystem", errtxt="install no_such_package_xyz"
    )
    side = str(_run(tmp_path / "logs" / "a", 100.0).parent)
    cases = {
        "foo://bucket/a": "unknown protocol 'foo'",
        "nodriver://bucket/a": "needs a driver that is not installed",
        "unreachable://bucket/a": "cannot reach it: ConnectionRefusedError: connection refused",
        "hiding://bucket/a": "cannot list: RuntimeError: credentials expired",
    }
    for url, said in cases.items():
        for command in ("diff", "check"):
            code, _, err = run_cli([command, url, side, "--cache", "none"], capsys)
            assert code == 2 and said in err and "no such file" not in err, (command, url, err)
    code, _, err = run_cli(["diff", str(tmp_path / "nothing"), side, "--cache", "none"], capsys)
    assert code == 2 and "no such file, folder, or LOGDIR:RUN" in err


def test_an_empty_path_is_refused_not_read_as_the_working_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check "$UNSET" exp`` compared whatever ran in the working folder (an unset shell
    variable): an empty path, or ``file://`` alone, is refused by every command."""
    side = str(_run(tmp_path / "logs" / "a", 100.0).parent)
    monkeypatch.chdir(side)  # a folder of traces: what "" read as
    for empty in ("", "file://"):
        for argv in (
            ["diff", empty, side],
            ["check", empty, side],
            ["report", empty],
            ["history", empty],
        ):
            code, out, err = run_cli([*argv, "--cache", "none"], capsys)
            assert code == 2 and out == "", (argv, out)
            assert "an empty path: name a trace file, a folder or a URL" in err, (argv, err)
