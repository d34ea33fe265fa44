"""Command line, a thin shell over the library:

- ``report PATH [--format text|json]``: exit 0 when at least one span was read (broken
  spans are reported as errors), 2 when nothing could be read or the arguments are bad.
- Any command whose standard output cannot be written (a full disk) says so in one line
  and exits 74 (``EX_IOERR``); a closed pipe (``| head``) ends it quietly with 0.
- ``diff BASE EXP [--format text|json]``: exit 0, or 2 on unusable input.
- ``check BASE EXP [--max-step-time-regression 5%] [--fail-on ID ...]``: exit 0 when no
  limit is crossed, 1 on a regression or when EXP has a ``--fail-on`` diagnosis (on any
  span, or across its ranks for a run of several workers, e.g.
  ``communication_straggler``), 2 on unusable input or an unknown id; prints why.
- ``check RUN --against-history LOGDIR [--group-by ...]``: exit 1 when RUN's step time
  regressed against the current level of its series in LOGDIR (``cli/history.py``).
- ``history LOGDIR [--group-by ...] [--metric ...] [--since DATE] [--format text|json]``:
  the runs as series over time and the runs where a level changed (``compare/history.py``).
- Every command but ``--version`` takes ``--timeout SECONDS`` (default: 120 s + 2 s per
  MiB of the local input; ``0``: none): past it the command stops with exit 124 and says
  so, kept by a watchdog process that needs nothing of the command (``budget.py``,
  ``supervisor.py``).
- ``doctor``: TensorBoard version, whether both plugins are discoverable, a sample parse.
- ``index LOGDIR... [--cache DIR] [--scheduler ADDRESS]``: every missing summary into the
  cache on Dask (``index.py``); exit 0 all cached or computed, 1 some failed, 2 setup.
- ``window TRACE [TRACE ...] --step N [--start-us A --end-us B] --out FILE.json.gz``: one
  step's window cut from the file for Perfetto UI (``window.py``); several traces (the
  ranks of a run): each rank's window, merged into one trace; exit 0 written, 2
  otherwise.

Paths may be local or fsspec URLs (``s3://bucket/logs``, ``gs://``, ``abfs://``; the
driver from the ``s3``/``gcs``/``azure`` extra, endpoint and credentials through fsspec's
configuration, e.g. ``FSSPEC_S3_ENDPOINT_URL``). ``report``, ``diff`` and ``check`` take
``--cache DIR`` (a folder or an fsspec URL; ``none``: no cache), else use
``KINETO_INSIGHTS_CACHE_DIR`` when it is set (the TensorBoard plugin's cache), else no
cache: see ``cached_summaries.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from tb_kineto_insights import __version__
from tb_kineto_insights.cli.stdout import Output, OutputError, discard_stdout
from tb_kineto_insights.store.settings import CACHE_DIR_ENV, cli_cache_location

if TYPE_CHECKING:
    from tb_kineto_insights.analysis.thresholds import Thresholds
    from tb_kineto_insights.compare import before_after as compare
    from tb_kineto_insights.logdir.discovery import Span
    from tb_kineto_insights.schema import DiffDocument, Report
    from tb_kineto_insights.store.cached_summaries import CachedSummaries

# Start-up: this module imports only what the parser needs (argparse, the
# threshold names, the default size limit); each command imports its machinery when it
# runs: ``report`` the reader, the analysis and the JSON output (``cli/report.py``), and
# the cache (``store/cache.py``, with its msgspec decoders) only when one is used;
# ``diff``/``check`` ``compare``; ``index`` Dask; fsspec only for a URL. ``--version``
# loads neither numpy nor msgspec. The decode workers of a large read import this module
# too (through the console script, their main module), so what is imported here is paid
# once per worker. tests/test_startup_imports.py holds this.
# The thresholds (``dataclasses``, with it ``inspect``) and the reader's size limit
# (``trace.source``: threading, queue) are imported by the parser, which ``--version``
# alone does not build (:func:`main`). The gains of each cut (``--version`` and a small
# ``report``, before against after) are in benchmarks/RESULTS.md; measure them with
# ``python benchmarks/bench_startup.py --startup --pythonpath DIR``.

PROG = "tb-kineto-insights"
EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_UNUSABLE = 2
#: The command's output could not be written (``sysexits.h``'s ``EX_IOERR``).
EXIT_OUTPUT = 74

#: Set (unless the user set it) by :func:`main` before numpy is imported: numpy's
#: OpenBLAS starts one thread per core at import, which makes the import measurably
#: slower (see benchmarks/RESULTS.md), and nothing here uses BLAS (no ``linalg``,
#: ``dot`` or ``matmul``); the decode workers inherit it.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS",)


def build_report(
    path: str,
    *,
    max_json_bytes: int | None = None,
    thresholds: Thresholds | None = None,
    summaries: CachedSummaries | None = None,
) -> Report:
    """The ``tb_kineto_insights.report/1`` document for a log directory, run folder or
    file: :func:`tb_kineto_insights.service.reports.build_report` (which documents its
    shape and errors), with the defaults filled in: ``max_json_bytes`` None:
    ``trace.source.DEFAULT_MAX_JSON_BYTES``; ``thresholds`` None: ``DEFAULT_THRESHOLDS``."""
    from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
    from tb_kineto_insights.service import reports
    from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

    return reports.build_report(
        path,
        max_json_bytes=DEFAULT_MAX_JSON_BYTES if max_json_bytes is None else max_json_bytes,
        thresholds=DEFAULT_THRESHOLDS if thresholds is None else thresholds,
        summaries=summaries,
    )


def write_text(report: Report, out: TextIO) -> None:
    """Human-readable report: :func:`tb_kineto_insights.cli.report.write_text`."""
    from tb_kineto_insights.cli import report as cli_report

    cli_report.write_text(report, out)


def _cmd_report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tb_kineto_insights.cli import report as cli_report

    code = cli_report.cmd_report(args, out, err)
    if getattr(args, "verbose", False):
        _say_decisions(err)
    return code


def _say_decisions(err: TextIO) -> None:
    """``--verbose``: the command's choices of worker processes, one line each
    (:data:`~tb_kineto_insights.trace.parallel.DECISIONS`), on ``err``."""
    from tb_kineto_insights.trace import parallel

    for reason in parallel.DECISIONS:
        err.write(f"workers: {reason}\n")


def _prestart_report(args: argparse.Namespace) -> None:
    """``report``'s worker processes, started before its time budget's thread: for a
    large file, the decode workers' server
    (:func:`~tb_kineto_insights.trace.parallel.warm_up`); for a folder, the pool that
    reads its files at once (:func:`_prestart_pool`)."""
    from tb_kineto_insights.trace import parallel

    if parallel.warm_up(args.path) or "://" in args.path or not os.path.isdir(args.path):
        return
    from tb_kineto_insights.logdir.discovery import LogdirError, discover

    try:
        runs = discover(args.path, skipped=[])  # what it skips, report says
    except (LogdirError, OSError, ValueError):
        return  # report says why
    _prestart_pool([s for run in runs for worker in run.workers for s in worker.spans], args)


def _prestart_compare(args: argparse.Namespace) -> None:
    """``diff``/``check`` of two sides: both sides' files are read at once
    (:func:`_both_sides_at_once`), so their pool starts now (:func:`_prestart_pool`)."""
    if args.exp is None:  # check --against-history: one run
        return
    from tb_kineto_insights.logdir.discovery import LogdirError
    from tb_kineto_insights.logdir.sides import resolve_side

    try:
        spans = resolve_side(args.base) + resolve_side(args.exp)
    except (ValueError, LogdirError, OSError):
        return  # the command says why
    _prestart_pool(spans, args)


def _prestart_pool(spans: list[Span], args: argparse.Namespace) -> None:
    """The pool for reading ``spans`` at once, started now
    (:func:`~tb_kineto_insights.store.parallel_summaries.prestart`); with a cache, only
    the workers' server (the files to read are the cache's misses, not known yet)."""
    from tb_kineto_insights.store import parallel_summaries

    if cli_cache_location(args.cache) is not None:
        from tb_kineto_insights.trace import parallel

        total = sum(parallel_summaries.estimated_json_bytes(s) for s in spans)
        if parallel_summaries.worker_count(total, len(spans)):
            parallel.warm_up_server(parallel_summaries.PRELOAD)
        return
    parallel_summaries.prestart(spans)


def _compare(
    args: argparse.Namespace, err: TextIO
) -> tuple[DiffDocument, compare.LoadedSide] | None:
    """Load both sides and diff them (:func:`~tb_kineto_insights.service.diffs.compare_sides`);
    None (after printing why) on unusable input."""
    from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
    from tb_kineto_insights.logdir.discovery import LogdirError
    from tb_kineto_insights.service.diffs import compare_sides

    try:
        thresholds = DEFAULT_THRESHOLDS.with_overrides(args.threshold)
        return compare_sides(args.base, args.exp, thresholds, cli_cache_location(args.cache))
    except (ValueError, LogdirError, ImportError) as exc:
        err.write(f"error: {exc}\n")
        return None


def _cmd_diff(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tb_kineto_insights.cli.json_output import write_json
    from tb_kineto_insights.compare import (
        before_after as compare,  # diff machinery: diff/check only
    )

    result = _compare(args, err)
    if result is None:
        return EXIT_UNUSABLE
    doc = result[0]
    if args.format == "json":
        write_json(doc, out)
    elif args.format == "markdown":
        from tb_kineto_insights.cli.markdown import diff_markdown

        out.write(diff_markdown(doc))
    else:
        out.write(compare.diff_text(doc))
    return EXIT_OK


def _cmd_history(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tb_kineto_insights.cli import history

    return history.cmd_history(args, out, err)


def _cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.against_history is not None:
        if args.exp is not None:
            err.write("error: check RUN --against-history LOGDIR takes one run, not BASE EXP\n")
            return EXIT_UNUSABLE
        from tb_kineto_insights.cli import history

        return history.cmd_check_against_history(args, out, err)
    if args.exp is None:
        err.write("error: check needs BASE and EXP (or RUN --against-history LOGDIR)\n")
        return EXIT_UNUSABLE
    from tb_kineto_insights.analysis.rule_ids import RULE_IDS as DIAGNOSIS_IDS
    from tb_kineto_insights.analysis.units import fmt_duration_us as _fmt_us
    from tb_kineto_insights.compare import (
        before_after as compare,  # diff machinery: diff/check only
    )
    from tb_kineto_insights.compare.comparability import format_comparability

    try:
        limit = compare.parse_fraction(args.max_step_time_regression)
    except ValueError as exc:
        err.write(f"error: --max-step-time-regression {exc}\n")
        return EXIT_UNUSABLE
    fail_on = [i.strip() for item in args.fail_on for i in item.split(",") if i.strip()]
    unknown = sorted(set(fail_on) - set(DIAGNOSIS_IDS))
    if unknown:
        import difflib

        close = [m for u in unknown for m in difflib.get_close_matches(u, DIAGNOSIS_IDS, n=1)]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        err.write(
            f"error: unknown diagnosis id(s) {', '.join(unknown)}{hint} Known: "
            + ", ".join(DIAGNOSIS_IDS)
            + "\n"
        )
        return EXIT_UNUSABLE
    from tb_kineto_insights.analysis.units import TerminalLines

    result = _compare(args, err)
    if result is None:
        return EXIT_UNUSABLE
    doc, exp = result
    reasons = compare.check(doc, exp, limit, fail_on)
    if args.format == "markdown":
        from tb_kineto_insights.cli.markdown import check_markdown

        out.write(check_markdown(doc, reasons))
        return EXIT_REGRESSION if reasons else EXIT_OK
    out = TerminalLines(out)  # type: ignore[assignment]  # names from traces: escaped
    h = doc.headline
    for line in format_comparability(doc.comparability):
        out.write(line + "\n")
    if h.gained:  # the step time alone would tell half the story
        out.write(f"{h.text}\n")
    out.write(f"step time {_fmt_us(h.base_step_us)} -> {_fmt_us(h.exp_step_us)} [{h.verdict}]\n")
    for warning in doc.warnings:
        out.write(f"warning: {warning}\n")
    if reasons:
        for reason in reasons:
            out.write(f"FAIL: {reason}\n")
        return EXIT_REGRESSION
    out.write("OK: no limit crossed\n")
    return EXIT_OK


def _cmd_doctor(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tb_kineto_insights.cli.doctor import run_doctor  # imports TensorBoard: only here

    return run_doctor(out, err)


# ---------------------------------------------------------------------------- index


def _cmd_index(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``index LOGDIR... [--cache DIR] [--scheduler ADDRESS]``: see ``index.py``. Exit 0
    when every trace is cached or computed, 1 when some failed (listed), 2 on a usage or
    setup error (no Dask, unreachable scheduler, bad log directory or cache)."""
    import json

    from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
    from tb_kineto_insights.cli import index as index_module
    from tb_kineto_insights.store.cache import cache_dir_from_env

    try:
        thresholds = DEFAULT_THRESHOLDS.with_overrides(args.threshold)
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_UNUSABLE
    if args.workers is not None and args.workers < 1:
        err.write(f"error: --workers must be at least 1, got {args.workers}\n")
        return EXIT_UNUSABLE
    # Without --cache or the variable: the folder TensorBoard on this machine uses.
    raw = args.cache if args.cache is not None else os.environ.get(CACHE_DIR_ENV, "")
    location = cli_cache_location(args.cache) or str(cache_dir_from_env())
    if raw.strip().lower() == "none":
        err.write("error: index fills a cache: give --cache DIR (not 'none')\n")
        return EXIT_UNUSABLE
    try:
        result = index_module.run_index(
            args.logdir,
            location,
            scheduler=args.scheduler,
            workers=args.workers or index_module.default_workers(),
            processes=not args.threads,
            max_json_bytes=args.max_json_bytes,
            thresholds=thresholds,
            progress=None if args.quiet else err,
        )
    except index_module.IndexSetupError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_UNUSABLE
    if args.format == "json":
        json.dump(result.to_json(), out, indent=1)
        out.write("\n")
    else:
        index_module.write_result(result, out)
    if not result.spans:  # e.g. a mistyped path in a cron line: say so, as report does
        err.write(f"warning: no Kineto trace files found under {', '.join(args.logdir)}\n")
    return result.exit_code


def _cmd_window(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tb_kineto_insights.cli.window import run_window
    from tb_kineto_insights.trace.window import parse_offset_us

    try:  # the routes' grammar: plain decimals (no exponent), within the limit
        start_us, end_us = (
            None if text is None else parse_offset_us(text, option)
            for text, option in ((args.start_us, "--start-us"), (args.end_us, "--end-us"))
        )
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return 2
    return run_window(
        args.trace,
        args.step,
        args.out,
        start_us,
        end_us,
        out,
        err,
        max_json_bytes=args.max_json_bytes,
    )


def _add_window_parser(sub: Any) -> None:
    from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

    cmd = sub.add_parser(
        "window",
        help="cut one step's window of a trace (every event kept, partial overlaps moved to "
        "sibling tracks) for Perfetto UI or chrome://tracing",
    )
    cmd.add_argument(
        "trace",
        nargs="+",
        help="trace file (path or URL); several (one per rank): their windows merged into "
        "one trace, each rank's processes named after it",
    )
    cmd.add_argument("--step", type=int, required=True, help="N of ProfilerStep#N")
    cmd.add_argument(
        "--start-us",
        default=None,
        help="window start, µs after the step window's start (default: -10 %% of the step)",
    )
    cmd.add_argument(
        "--end-us",
        default=None,
        help="window end, µs after the step window's start (default: the step + 10 %%)",
    )
    cmd.add_argument("--out", required=True, help="output file (.json, or .json.gz compressed)")
    cmd.add_argument("--max-json-bytes", type=int, default=DEFAULT_MAX_JSON_BYTES)
    _add_timeout(cmd)
    cmd.set_defaults(func=_cmd_window)


def _add_index_parser(sub: Any, cache_help: str) -> None:
    from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

    cmd = sub.add_parser(
        "index",
        help="precompute every missing summary (and run view) into the cache, on Dask",
    )
    cmd.add_argument("logdir", nargs="+", help="log directory (path or URL); several allowed")
    cmd.add_argument(
        "--cache",
        metavar="DIR",
        default=None,
        help=cache_help.replace("else no cache", "else TensorBoard's default cache folder"),
    )
    cmd.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="an existing Dask scheduler (tcp://dask-scheduler:8786); default: a "
        "LocalCluster on this machine",
    )
    cmd.add_argument(
        "--workers", type=int, default=None, help="LocalCluster workers (default: CPUs, at most 4)"
    )
    cmd.add_argument(
        "--threads",
        action="store_true",
        help="LocalCluster workers as threads of this process instead of processes",
    )
    cmd.add_argument("--format", choices=("text", "json"), default="text")
    cmd.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    cmd.add_argument("--max-json-bytes", type=int, default=DEFAULT_MAX_JSON_BYTES)
    cmd.add_argument(
        "--threshold", action="append", default=[], metavar="NAME=VALUE", help=_THRESHOLD_HELP
    )
    _add_timeout(cmd)
    cmd.set_defaults(func=_cmd_index)


#: ``--threshold`` of the commands other than ``report`` (whose help lists the names).
_THRESHOLD_HELP = "override a diagnosis threshold (repeatable); the names: report --help"


def _add_timeout(cmd: argparse.ArgumentParser) -> None:
    from tb_kineto_insights.cli.budget import (
        DEFAULT_TIMEOUT_S,
        DEFAULT_TIMEOUT_S_PER_MIB,
        timeout_arg,
    )

    cmd.add_argument(
        "--timeout",
        type=timeout_arg,
        default=None,
        metavar="SECONDS",
        help=f"stop (exit 124) after this many seconds; 0: no limit. Default: "
        f"{DEFAULT_TIMEOUT_S:g} s + {DEFAULT_TIMEOUT_S_PER_MIB:g} s per MiB of the local "
        "input's stored size",
    )


def _inputs(args: argparse.Namespace) -> list[str]:
    """The paths a command reads (for its default time budget)."""
    if args.command == "report":
        return [args.path]
    if args.command in ("diff", "check"):
        # check --against-history LOGDIR: one run and the log directory, no second run
        sides = [args.base, args.exp, getattr(args, "against_history", None)]
        return [side for side in sides if side is not None]
    if args.command == "window":
        return list(args.trace)
    logdir = getattr(args, "logdir", [])
    return [logdir] if isinstance(logdir, str) else list(logdir)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Why is my GPU job slow? Kineto trace analysis (CLI and TensorBoard tab).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    cache_help = (
        "summary cache: a folder (local, NFS) or fsspec URL (s3://bucket/cache), shared with "
        "TensorBoard and teammates; 'none': no cache. Default: $KINETO_INSIGHTS_CACHE_DIR "
        "when set, else no cache"
    )
    _add_report_parser(sub, cache_help)
    _add_diff_parser(sub, cache_help)
    _add_check_parser(sub, cache_help)
    _add_history_parser(sub, cache_help)
    doctor_cmd = sub.add_parser(
        "doctor", help="check TensorBoard, both plugins (ours, PyTorch Profiler) and a sample parse"
    )
    _add_timeout(doctor_cmd)
    doctor_cmd.set_defaults(func=_cmd_doctor)
    _add_index_parser(sub, cache_help)
    _add_window_parser(sub)
    return parser


def _add_report_parser(sub: Any, cache_help: str) -> None:
    from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
    from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

    report = sub.add_parser(
        "report", help="summarise the traces of a log directory, run folder or trace file"
    )
    report.add_argument("path", help="log directory, run folder or trace file (path or URL)")
    report.add_argument(
        "--format",
        choices=("text", "json", "markdown"),
        default="text",
        help="markdown: GitHub-flavoured, for a PR comment or $GITHUB_STEP_SUMMARY",
    )
    report.add_argument(
        "--max-json-bytes",
        type=int,
        default=DEFAULT_MAX_JSON_BYTES,
        help="refuse files whose uncompressed JSON is larger (default: %(default)s)",
    )
    report.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a diagnosis threshold (repeatable); names: "
        + ", ".join(DEFAULT_THRESHOLDS.to_dict()),
    )
    report.set_defaults(func=_cmd_report, prestart=_prestart_report)
    report.add_argument("--cache", metavar="DIR", default=None, help=cache_help)
    report.add_argument(
        "--verbose",
        action="store_true",
        help="also say on stderr how many processes read the traces, and why",
    )
    _add_timeout(report)


def _add_side_arguments(cmd: argparse.ArgumentParser, cache_help: str, *, exp_needed: bool) -> None:
    """The arguments ``diff`` and ``check`` share: BASE, EXP (optional for ``check``),
    ``--threshold``, ``--cache`` and ``--timeout``."""
    side_help = "run folder, trace file, or LOGDIR:RUN"
    cmd.add_argument("base", help=f"BASE: {side_help}")
    if exp_needed:
        cmd.add_argument("exp", help=f"EXP: {side_help}")
    else:
        cmd.add_argument("exp", nargs="?", default=None, help=f"EXP: {side_help}")
    cmd.add_argument(
        "--threshold", action="append", default=[], metavar="NAME=VALUE", help=_THRESHOLD_HELP
    )
    cmd.add_argument("--cache", metavar="DIR", default=None, help=cache_help)
    _add_timeout(cmd)


def _add_diff_parser(sub: Any, cache_help: str) -> None:
    diff_cmd = sub.add_parser("diff", help="compare two runs, workers or traces (before → after)")
    _add_side_arguments(diff_cmd, cache_help, exp_needed=True)
    diff_cmd.add_argument(
        "--format",
        choices=("text", "json", "markdown"),
        default="text",
        help="markdown: GitHub-flavoured, for a PR comment or $GITHUB_STEP_SUMMARY",
    )
    diff_cmd.set_defaults(func=_cmd_diff, prestart=_prestart_compare)


def _add_check_parser(sub: Any, cache_help: str) -> None:
    check_cmd = sub.add_parser(
        "check", help="exit 1 when EXP regressed against BASE (for CI pipelines)"
    )
    _add_side_arguments(check_cmd, cache_help, exp_needed=False)
    check_cmd.add_argument(
        "--format",
        choices=("text", "markdown"),
        default="text",
        help="markdown: the verdict and the diff, for $GITHUB_STEP_SUMMARY",
    )
    check_cmd.add_argument(
        "--max-step-time-regression",
        default="5%",
        help="fail when step time grows more than this, beyond noise (default: %(default)s)",
    )
    check_cmd.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="ID[,ID]",
        help="fail when EXP has this diagnosis, on any span or across its ranks (repeatable, "
        "or comma-separated), e.g. memory_growth, communication_straggler",
    )
    check_cmd.add_argument(
        "--against-history",
        metavar="LOGDIR",
        default=None,
        help="check one run (BASE) against the current step-time level of its series in "
        "LOGDIR (the history's rule): exit 1 when it regressed",
    )
    check_cmd.add_argument(
        "--group-by", default=None, help="with --against-history: as history --group-by"
    )
    check_cmd.set_defaults(func=_cmd_check, prestart=_prestart_compare)


def _add_history_parser(sub: Any, cache_help: str) -> None:
    hist_cmd = sub.add_parser(
        "history",
        help="every run of a log directory over time, per series, and the runs where step "
        "time (or another headline metric) changed level",
    )
    hist_cmd.add_argument("logdir", help="log directory (path or URL)")
    hist_cmd.add_argument(
        "--group-by",
        default=None,
        help="series by a regex on the run name (its first group; a run it does not match, "
        "or matches empty, is a series of its own) or key:NAME (a run metadata field, e.g. "
        "key:git_commit); default: the run metadata label, else the run name without its "
        "run counter (a trailing date or number) when at least two runs share it, else "
        "the run alone; runs named by a counter alone form the log directory's series",
    )
    hist_cmd.add_argument(
        "--metric",
        action="append",
        default=[],
        help="metric(s) to judge: step_time, gpu_utilization, memory_peak (repeatable or "
        "comma-separated; default: all)",
    )
    hist_cmd.add_argument("--since", default=None, help="show runs from this date (ISO, UTC)")
    hist_cmd.add_argument("--format", choices=("text", "json"), default="text")
    hist_cmd.add_argument(
        "--threshold", action="append", default=[], metavar="NAME=VALUE", help=_THRESHOLD_HELP
    )
    hist_cmd.add_argument("--cache", metavar="DIR", default=None, help=cache_help)
    _add_timeout(hist_cmd)
    hist_cmd.set_defaults(func=_cmd_history)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps them there; no public accessor
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args`` whose mistakes name a fix: an unknown command or flag gets
    ``did you mean`` (``difflib``), and a subcommand's unknown flag is reported with that
    subcommand's usage (argparse itself reports it with the top-level usage).

    A ``file://localhost/`` URL among the paths loses its host, and one of another
    host is refused (:func:`_without_local_hosts`).

    Raises:
        SystemExit: 2 on a usage error (after printing it), 0 after ``--help``.
    """
    import difflib

    commands = _subparsers(parser)
    first = next((a for a in argv if not a.startswith("-")), None)
    if first is not None and first not in commands and argv and argv[0] == first:
        close = difflib.get_close_matches(first, list(commands), n=1)
        if close:
            parser.error(f"unknown command {first!r}; did you mean {close[0]}?")
    args, extras = parser.parse_known_args(argv)
    if extras:
        command = commands.get(getattr(args, "command", None) or "", parser)
        known = [o for a in command._actions for o in a.option_strings]
        hints = [
            f"{x} (did you mean {close[0]}?)"
            if (close := difflib.get_close_matches(x, known, n=1))
            else x
            for x in extras
        ]
        command.error(f"unrecognized arguments: {' '.join(hints)}")
    try:
        _without_local_hosts(args)
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from exc
    return args


#: The arguments that name a file, folder or URL (one string or a list of them).
_PATH_ARGUMENTS = ("path", "base", "exp", "against_history", "trace", "out", "logdir", "cache")


def _without_local_hosts(args: argparse.Namespace) -> None:
    """Every path argument with a ``file://localhost/`` URL's host dropped, in place
    (:func:`~tb_kineto_insights.trace.local_paths.without_local_host`). Raises
    ValueError for a ``file://`` URL of another host."""
    from tb_kineto_insights.trace.local_paths import without_local_host

    for name in _PATH_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, without_local_host(value))
        elif isinstance(value, list):
            setattr(args, name, [without_local_host(v) for v in value])


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tb-kineto-insights`` console script; returns the exit code."""
    if argv is None:  # the console script: Ctrl-C ends it at once, without tracebacks,
        from tb_kineto_insights.cli import budget as cli_budget  # from the start on

        cli_budget.stop_on_interrupt(sys.stderr)
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        # what argparse's version action prints, without building the parser
        sys.stdout.write(f"{PROG} {__version__}\n")
        return EXIT_OK
    parser = _parser()
    try:
        args = _parse(parser, list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0) if exc.code in (0, None) else EXIT_UNUSABLE
    budget = None
    if sys.stdout is None:  # started with its standard output closed (`>&-`)
        sys.stderr.write("error: cannot write the output (standard output is closed)\n")
        return EXIT_OUTPUT
    out: TextIO = Output(sys.stdout)  # type: ignore[assignment]
    cache = cli_cache_location(args.cache) if hasattr(args, "cache") else None
    local = cache if cache is not None and "://" not in cache and "::" not in cache else None
    if local and os.path.exists(local) and not os.path.isdir(local):  # once, before any work
        sys.stderr.write(f"error: cache {local!r} cannot be written: it is not a folder\n")
        return EXIT_UNUSABLE
    if cache is not None:
        from tb_kineto_insights.store.seal import CacheKeyError, current_key

        try:  # a cache key file that cannot be used: said before any work
            current_key()
        except CacheKeyError as exc:
            sys.stderr.write(f"error: {exc}\n")
            return EXIT_UNUSABLE
    if hasattr(args, "timeout"):  # a command that reads traces
        from tb_kineto_insights.cli import budget as cli_budget
        from tb_kineto_insights.cli.allocator import tune_allocator

        tune_allocator()  # before the workers fork: they inherit it
        budget = cli_budget.budget_for(args.command, args.timeout, _inputs(args), sys.stderr)
        if budget is not None:  # the document is written whole or not at all
            if argv is None:  # the console script: a watchdog process keeps the budget
                budget.supervise()
            out = cli_budget.OutputEndsBudget(out, budget)  # type: ignore[assignment]
    prestart = getattr(args, "prestart", None)
    if prestart is not None:  # worker processes forked while this process is one thread
        with budget.by_signal() if budget is not None else contextlib.nullcontext():
            prestart(args)
    if budget is not None:
        budget.start()
    try:
        code = int(args.func(args, out, sys.stderr))
        out.flush()  # what is still buffered: a failure to write it is this command's
        return code
    except BrokenPipeError:  # e.g. `report ... | head`
        discard_stdout()  # the exit's flush of what is buffered would fail again
        return EXIT_OK
    except OutputError as exc:  # a full disk, a quota: said in one line, not a traceback
        sys.stderr.write(f"error: cannot write the output ({exc.__cause__})\n")
        discard_stdout()
        return EXIT_OUTPUT
    finally:
        if budget is not None:
            budget.cancel()
        if "tb_kineto_insights.trace.parallel" in sys.modules:  # a pool forked for nothing
            sys.modules["tb_kineto_insights.trace.parallel"].release_prestarted()
        if argv is None:  # the console script: the process ends now
            # the interpreter's last collections would traverse every object left (a
            # report's summaries): a cost at every exit (benchmarks/RESULTS.md)
            gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
