"""``tb-kineto-insights history LOGDIR`` and ``check --against-history LOGDIR RUN``:
the runs of a log directory as series over time, with the runs where a level changed
(``compare/history.py``), from the runs' headline records
(:func:`tb_kineto_insights.service.headlines.collect_runs`): a run whose headline is
stored costs one small read of the cache and no read of its trace; a run added since
is summarised (and stored) alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
from datetime import datetime, timezone
from typing import TextIO

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.analysis.units import fmt_duration_us, terminal_safe
from tb_kineto_insights.compare import history as hist
from tb_kineto_insights.logdir.discovery import LogdirError, Run, describe_skipped, discover
from tb_kineto_insights.logdir.names import escaped_name
from tb_kineto_insights.service.headlines import collect_runs
from tb_kineto_insights.store.cached_summaries import CachedSummaries, cli_cache_location

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_UNUSABLE = 2


def parse_since(text: str | None) -> int | None:
    """``--since``: an ISO 8601 date or time (UTC when no zone is given) as ns since the
    epoch; None when not given. Raises ValueError for anything else."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"--since {text!r}: expected a date such as 2026-11-30 ({exc})") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return round(when.timestamp() * 1e9)


def _metrics(items: list[str]) -> list[str]:
    names = [m.strip() for item in items for m in item.split(",") if m.strip()]
    return names or list(hist.METRICS)


def _discover(logdir: str) -> tuple[list[Run], str]:
    """The runs of ``logdir`` and, when discovery skipped paths (links it does not
    follow, FIFOs named like traces), ``"skipped N path(s): ..."``, else ``""``. Raises
    LogdirError as :func:`discover`."""
    skipped: list[tuple[str, str]] = []
    runs = discover(logdir, skipped=skipped)
    return runs, describe_skipped(skipped)


def build(args: argparse.Namespace, err: TextIO | None = None) -> hist.HistoryDocument:
    """The history document for ``args`` (``logdir``, ``group_by``, ``metric``,
    ``since``, ``threshold``, ``cache``); what discovery skipped is said on ``err`` as a
    warning, as ``report`` says it. Raises ValueError or LogdirError on bad input (a log
    directory without a trace file included: the message names what was skipped)."""
    hist.check_options(args.group_by, _metrics(args.metric))  # before any trace is read
    thresholds = DEFAULT_THRESHOLDS.with_overrides(args.threshold)
    summaries = CachedSummaries(cli_cache_location(args.cache), thresholds=thresholds)
    found, skipped_paths = _discover(args.logdir)
    if not found:  # as report says it (an empty folder, one of FIFOs only)
        why = f"; {skipped_paths}" if skipped_paths else ""
        raise ValueError(f"no Kineto trace files found under {args.logdir}{why}")
    if skipped_paths and err is not None:
        err.write(f"warning: {args.logdir}: {skipped_paths}\n")
    runs, skipped = collect_runs(found, summaries, args.logdir)
    return hist.build_history(
        runs,
        logdir=args.logdir,
        group_by=args.group_by,
        metrics=_metrics(args.metric),
        since_ns=parse_since(args.since),
        thresholds=thresholds,
        skipped=skipped,
    )


def cmd_history(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``history``: exit 0, or 2 on unusable input (bad log directory, option, or no run
    that could be read); each skipped run is also named on stderr."""
    from tb_kineto_insights.analysis.units import TerminalLines
    from tb_kineto_insights.cli.json_output import write_json

    err = TerminalLines(err)  # type: ignore[assignment]  # paths from the user: escaped

    # The run records and headlines form no reference cycles; the cyclic garbage
    # collector's passes over tens of thousands of new objects cost a quarter of the
    # CPU time of a history of 10,000 runs (benchmarks/RESULTS.md), so it is off here.
    gc.disable()
    try:
        doc = build(args, err)
    except (ValueError, LogdirError, ImportError) as exc:
        err.write(f"error: {exc}\n")
        return EXIT_UNUSABLE
    finally:
        gc.enable()
    if args.format == "json":
        write_json(doc, out)
    else:
        out.write(hist.history_text(doc))
    for run, why in doc.skipped.items():  # on stderr too, as report names its bad files
        err.write(f"warning: run {run} skipped: {why}\n")
    if doc.skipped and not any(s.runs for s in doc.series):
        err.write(f"error: no run of {args.logdir} could be read\n")
        return EXIT_UNUSABLE
    return EXIT_OK


#: How a new run's series was found (``hist.series_key``'s ``grouped_by``), in words.
_SERIES_BY = {
    "name": "by its name's stem",
    "regex": "by the --group-by pattern",
    "label": "by its metadata label",
    "logdir": "by the log directory's name",
}

#: Series names listed in an error, at most.
_LISTED = 8


def _series_by(how: str, group_by: str | None) -> str:
    """How a run's series was found, in words (``how``: ``hist.series_key``'s second
    value; ``group_by``: the option, which decides why a run is a series of its own)."""
    if how.startswith("metadata:"):
        return f"by its metadata field {how[len('metadata:') :]!r}"
    if how != "run":
        return _SERIES_BY.get(how, how)
    if group_by and group_by.startswith("key:"):
        return f"its own name: it has no metadata field {group_by[4:]!r}"
    if group_by:
        return "its own name: the --group-by pattern does not match it"
    return "its own name: no run of the history shares its name's stem"


def _series_listed(doc: hist.HistoryDocument, key: str) -> str:
    """The history's series names, for an error: at most :data:`_LISTED`, and a word
    when one of them is named ``key`` but grouped otherwise than the run."""
    names = [s.name for s in doc.series]
    if not names:
        return "it has no series"
    shown = ", ".join(map(repr, names[:_LISTED]))
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    other = (
        f" ({key!r} there groups other runs: the run is not one of them)" if key in names else ""
    )
    return f"its series: {shown}{more}{other}"


def cmd_check_against_history(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``check RUN --against-history LOGDIR``: exit 1 when RUN's step time regressed
    against the current level of its series in LOGDIR (the history's rule), 0 when not,
    2 on unusable input (no series for it, unreadable run). A run of LOGDIR with the same
    name as RUN is left out of the level."""
    try:
        hist.check_options(args.group_by)  # before any trace is read
        thresholds = DEFAULT_THRESHOLDS.with_overrides(args.threshold)
        summaries = CachedSummaries(cli_cache_location(args.cache), thresholds=thresholds)
        # the new run alone: no headline index of its own folder (one per CI run)
        new_runs, skipped = collect_runs(discover(args.base), summaries)
        if not new_runs:
            why = "; ".join(skipped.values()) or "no trace file in it"
            err.write(f"error: no readable trace in {args.base}: {why}\n")
            return EXIT_UNUSABLE
        new = new_runs[0]
        if new.name == ".":  # named as the log directory's runs are (a byte not UTF-8: \xff)
            name = escaped_name(args.base.rstrip("/").rsplit("/", 1)[-1])
            new = dataclasses.replace(new, name=name)
        history_runs, skipped_paths = _discover(args.against_history)
        runs, _ = collect_runs(history_runs, summaries, args.against_history)
        runs = [r for r in runs if r.name != new.name]
        logdir_name = args.against_history.rstrip("/").rsplit("/", 1)[-1]
        doc = hist.build_history(
            runs,
            logdir=args.against_history,
            group_by=args.group_by,
            metrics=["step_time"],
            thresholds=thresholds,
        )
        # the new run joins the series of its name's stem when the history has one
        stems = {s.name for s in doc.series if s.grouped_by == "name"}
        key, how = hist.series_key(new, logdir_name, args.group_by, stems)
    except (ValueError, LogdirError, ImportError) as exc:
        err.write(f"error: {exc}\n")
        return EXIT_UNUSABLE
    # under --group-by, the series of the new run's grouping too (as build_history keys)
    series = next(
        (s for s in doc.series if s.name == key and (not args.group_by or s.grouped_by == how)),
        None,
    )
    if series is None:
        err.write(
            terminal_safe(
                f"error: no series {key!r} in {args.against_history} (the run's series, "
                f"{_series_by(how, args.group_by)}); {_series_listed(doc, key)}"
                f"{'; ' + skipped_paths if skipped_paths else ''}"
            )
            + "\n"
        )
        return EXIT_UNUSABLE
    level = hist.current_level(series, "step_time", thresholds)
    if level is None:
        err.write(
            f"error: no run of series {key!r} in {args.against_history} has a step time "
            f"({len(series.runs)} run(s))\n"
        )
        return EXIT_UNUSABLE
    run = hist.combine_run(new)
    result = hist.judge_against_level(level, run, "step_time", thresholds)
    if result is None:
        err.write(f"error: {args.base} has no step time\n")
        return EXIT_UNUSABLE
    pct = result["change_fraction"]
    shown = "" if pct is None else f" ({100 * pct:+.1f} %)"
    out.write(
        f"step time {fmt_duration_us(result['base'])} (current level of {series.name}: "
        f"{level[2]} steps since its last change) -> {fmt_duration_us(result['exp'])}{shown} "
        f"[{result['verdict']}]\n"
    )
    if result["verdict"] == "regressed":
        out.write(f"FAIL: step time regressed against the history of {series.name}\n")
        return EXIT_REGRESSION
    out.write("OK: no regression against the history\n")
    return EXIT_OK
