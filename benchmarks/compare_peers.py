"""Ours against HTA and the old PyTorch Profiler plugin, on the same real Kineto traces.

    python benchmarks/compare_peers.py [--repeat 3] [--quick] [--inputs PATH ...]
        [--data-dir benchmarks/data] [--peer-max-mb 300] [--no-scaled] [--no-profile]
        [--tools ours hta tbp] [--merge-json OLD.json] [--cpus TOOL=CPULIST ...] [--parallel]

On a quiet machine, all of it in one command: ``benchmarks/device_peers.sh`` (README).

Tools (each run is a fresh subprocess, started the same way for all three):

* ``ours``: ``tb-kineto-insights report FILE --format json --cache none`` (read + every
  panel + the JSON written to a file), with ``KINETO_INSIGHTS_CACHE_DIR`` unset, so
  nothing is cached between runs.
* ``hta``: HolisticTraceAnalysis ``TraceAnalysis(trace_dir=D)`` (load: parse into
  DataFrames) then ``get_temporal_breakdown``, ``get_idle_time_breakdown`` and
  ``get_comm_comp_overlap`` (``visualize=False``); one that raises is named in the table
  (HTA 0.5.0's temporal breakdown asserts a non-negative non-compute time and fails on
  some real traces) and the others still run. HTA reads a directory of rank traces:
  ``D`` is a fresh temporary directory holding one symlink ``rank0.json[.gz]`` to FILE.
* ``tbp``: torch-tb-profiler's ``RunLoader(name, D, Cache()).load()``, what the plugin
  does for one run directory (``RunProfileData.parse`` = read + process + analyze, then
  ``RunGenerator.generate_run_profile``, then the distributed views), ``D`` a fresh
  temporary directory holding one symlink ``worker0.pt.trace.json[.gz]`` to FILE.

The peers run with ``--bench-python`` (default ``.bench-venv/bin/python``, made by
``make bench-setup``), never with our environment.

Measured per run: *wall* = seconds from starting the child process to reaping it,
interpreter start and imports included (the same for all three tools); *peak RSS* =
``ru_maxrss`` of the reaped child from ``os.wait4``, which is the largest resident set of
the child or any of its reaped descendants (HTA parses in a forked pool worker, the old
plugin in a ``multiprocessing`` child: their peak is the largest single process, not the
sum). Each tool is run ``--repeat`` times (runs of the three tools interleaved; with
``--parallel`` each ``--cpus`` worker runs all repeats of one input at a time on its own
CPUs, ``taskset -c``) and the median of each quantity is reported; a cell with fewer runs
(a run stopped midway) says ``(k of n runs)``. Every sample is also written as JSON
(``--json``), which ``--merge-json`` reads back to fill in the tools not in ``--tools``.
A run that exits non-zero or prints no ``OK`` line is
``failed: <last stderr line>``; a failed tool has no ratio.

Ratios: ``time x`` = peer median wall / ours; ``RSS frac`` = ours median peak RSS / peer.
Targets (issue 14), on every input of at least 10 MB of JSON: ``time x >= 10`` and
``RSS frac <= 1/3`` against each peer that succeeded; on the ~1 GB scaled input, ours
``<= 15 s`` and ``<= 1.5 GB`` peak RSS. Sizes are in MB = 10^6 bytes (uncompressed JSON;
for ``.gz`` the ISIZE trailer). Slope: least-squares line of ours' median wall against
JSON GB over the scaled inputs, in seconds per GB, with r^2.

Inputs: every Kineto trace (a ``.json``/``.json.gz`` whose first 64 KiB name
``traceEvents``) under ``sample_logs/``, ``../shared/traces/public``,
``../shared/traces/h200x2`` and ``--data-dir`` (the recorded GPT trace, see
``scripts/record_gpt_trace.py``), plus scaled traces made from ``--scale-src`` by
``benchmarks/scale_trace.py`` into ``<data-dir>/scaled/`` at 100, 250, 500 and 1000 MiB.
Peers run only on inputs of at most ``--peer-max-mb`` (each takes minutes and GBs
above that). Writes ``benchmarks/RESULTS.md`` (``--out``) and prints it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
DEFAULT_ROOTS = (REPO / "sample_logs", SHARED / "public", SHARED / "h200x2")
DEFAULT_SCALE_SRC = SHARED / "public" / "hta_df_index_resolver" / "df_index_resolver.json.gz"
SCALED_MIB = (100, 250, 500, 1000)
MB = 1_000_000
BIG_INPUT_BYTES = 10 * MB  # the speed/RSS targets apply from here on
TIME_RATIO_TARGET = 10.0  # peer wall / ours, at least
RSS_FRACTION_TARGET = 1.0 / 3.0  # ours peak RSS / peer peak RSS, at most
GB_TARGET_WALL_S = 15.0
GB_TARGET_RSS_BYTES = 1_500 * MB
PEERS = ("hta", "tbp")
TOOLS = ("ours", *PEERS)
TOOL_LABEL = {"ours": "ours", "hta": "HTA", "tbp": "torch-tb-profiler"}

HTA_CHILD = r"""
import os, sys, tempfile, logging
logging.disable(logging.CRITICAL)
path = os.path.abspath(sys.argv[1])
d = tempfile.mkdtemp(prefix="bench_hta_")
os.symlink(path, os.path.join(d, "rank0.json.gz" if path.endswith(".gz") else "rank0.json"))
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=d)
failed = []
for name, call in (
    ("temporal", lambda: a.get_temporal_breakdown(visualize=False)),
    ("idle", lambda: a.get_idle_time_breakdown(visualize=False)),
    ("comm_comp_overlap", lambda: a.get_comm_comp_overlap(visualize=False)),
):
    try:
        call()
    except Exception as exc:  # a breakdown that raises is named, the others still run
        failed.append("%s: %s" % (name, type(exc).__name__))
n = sum(len(df) for df in a.t.traces.values())
print("OK events=%d" % n)
if failed:
    print("PARTIAL " + "; ".join(failed))
"""

TBP_CHILD = r"""
import os, sys, tempfile, logging
logging.disable(logging.CRITICAL)
path = os.path.abspath(sys.argv[1])
d = tempfile.mkdtemp(prefix="bench_tbp_")
name = "worker0.pt.trace.json" + (".gz" if path.endswith(".gz") else "")
os.symlink(path, os.path.join(d, name))
from torch_tb_profiler import io
from torch_tb_profiler.profiler.loader import RunLoader
run = RunLoader("bench", d, io.Cache(tempfile.mkdtemp(prefix="bench_tbp_cache_"))).load()
profiles = [p for p in run.profiles.values() if getattr(p, "overview", None) is not None]
if not profiles:
    sys.exit("the plugin produced no profile (it logs parse failures and goes on)")
print("OK profiles=%d" % len(profiles))
"""

PROFILE_CHILD = r"""
import cProfile, io, pstats, sys, contextlib
from tb_kineto_insights.cli.main import main
pr = cProfile.Profile()
with open(sys.argv[2], "w") as out, contextlib.redirect_stdout(out):
    pr.enable()
    rc = main(["report", sys.argv[1], "--format", "json", "--cache", "none"])
    pr.disable()
s = io.StringIO()
st = pstats.Stats(pr, stream=s)
print("TOTAL %.2f" % st.total_tt)
st.sort_stats("tottime").print_stats(12)
print(s.getvalue())
"""


HTA_LOGDIR_CHILD = r"""
import json, os, sys, tempfile, logging
logging.disable(logging.CRITICAL)
runs = json.load(open(sys.argv[1]))
from hta.trace_analysis import TraceAnalysis
failed, events = [], 0
for name, files in runs:  # as HTA's users do: one TraceAnalysis per run, in a loop
    d = tempfile.mkdtemp(prefix="bench_hta_")
    for i, path in enumerate(files):
        ext = ".gz" if path.endswith(".gz") else ""
        os.symlink(path, os.path.join(d, "rank%d.json%s" % (i, ext)))
    try:
        a = TraceAnalysis(trace_dir=d)
    except Exception as exc:
        failed.append("%s load: %s" % (name, type(exc).__name__))
        continue
    for what, call in (
        ("temporal", lambda: a.get_temporal_breakdown(visualize=False)),
        ("idle", lambda: a.get_idle_time_breakdown(visualize=False)),
        ("comm_comp_overlap", lambda: a.get_comm_comp_overlap(visualize=False)),
    ):
        try:
            call()
        except Exception as exc:
            failed.append("%s %s: %s" % (name, what, type(exc).__name__))
    events += sum(len(df) for df in a.t.traces.values())
    del a
print("OK events=%d runs=%d" % (events, len(runs)))
if failed:
    hit = len({f.split(" ")[0] for f in failed})
    print("PARTIAL %d of %d runs: %s" % (hit, len(runs), "; ".join(failed)))
"""

TBP_LOGDIR_CHILD = r"""
import json, os, sys, tempfile, logging
logging.disable(logging.CRITICAL)
runs = json.load(open(sys.argv[1]))
from torch_tb_profiler import io
from torch_tb_profiler.profiler.loader import RunLoader
cache = io.Cache(tempfile.mkdtemp(prefix="bench_tbp_cache_"))
missing = []
profiles = 0
for name, files in runs:  # the plugin's RunLoader on each run folder, one after another
    d = tempfile.mkdtemp(prefix="bench_tbp_")
    for i, path in enumerate(files):
        ext = ".gz" if path.endswith(".gz") else ""
        os.symlink(path, os.path.join(d, "w%d.pt.trace.json%s" % (i, ext)))
    run = RunLoader(name, d, cache).load()
    got = [p for p in run.profiles.values() if getattr(p, "overview", None) is not None]
    profiles += len(got)
    if not got:
        missing.append(name)
print("OK profiles=%d runs=%d" % (profiles, len(runs)))
if missing:
    names = ", ".join(missing)
    print("PARTIAL no profile for %d of %d runs: %s" % (len(missing), len(runs), names))
"""

#: The decode floor: every file inflated and decoded by msgspec into the typed events of
#: the fields any analysis needs (ours: ``trace/events.py``'s ``PhaseRoot``), one after
#: another on one core, nothing else (no columns, no analysis, no output).
FLOOR_CHILD = r"""
import json, sys
import msgspec
try:
    from zlib_ng import zlib_ng as zlib
except ImportError:
    import zlib
from tb_kineto_insights.trace.events import PhaseRoot, Root
typed, loose = msgspec.json.Decoder(PhaseRoot), msgspec.json.Decoder(Root)
events = 0
for path in json.load(open(sys.argv[1])):
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = zlib.decompress(data, 31)
    try:
        root = typed.decode(data)
    except msgspec.ValidationError:
        root = loose.decode(data)
    events += len(root.traceEvents)
    del root, data
print("OK events=%d" % events)
"""


# ---------------------------------------------------------------- pure parts (tested)


@dataclass(frozen=True)
class Input:
    """One trace file: ``json_bytes`` uncompressed, ``file_bytes`` on disk, ``group``."""

    path: Path
    json_bytes: int
    file_bytes: int
    group: str  # "real" or "scaled"


@dataclass
class Runs:
    """The runs of one tool on one input: ``(wall_s, peak_rss_bytes)`` each, or a failure."""

    samples: list[tuple[float, int]] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None
    partial: str | None = None  # parts of the tool's analysis that raised (time still counted)
    cpus: str | None = None  # the ``taskset -c`` CPU list it ran on, None = not pinned
    previous: str | None = None  # taken from an earlier result file (``--merge-json``)

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped is None and bool(self.samples)

    def median_wall_s(self) -> float:
        """Median wall seconds; ValueError when there is no successful sample."""
        return median([s[0] for s in self.samples])

    def median_rss_bytes(self) -> float:
        """Median peak RSS in bytes; ValueError when there is no successful sample."""
        return median([float(s[1]) for s in self.samples])


def median(values: Sequence[float]) -> float:
    """Median of ``values`` (mean of the two middle ones for an even count).

    Raises ValueError on an empty sequence.
    """
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def time_ratio(peer: Runs, ours: Runs) -> float | None:
    """Peer median wall / ours (how many times faster we are); None if either failed."""
    if not (peer.ok and ours.ok):
        return None
    return peer.median_wall_s() / ours.median_wall_s()


def rss_fraction(ours: Runs, peer: Runs) -> float | None:
    """Ours median peak RSS / the peer's (<= 1/3 is the target); None if either failed."""
    if not (peer.ok and ours.ok):
        return None
    return ours.median_rss_bytes() / peer.median_rss_bytes()


@dataclass(frozen=True)
class Verdict:
    """One target on one input: ``passed`` and a sentence saying by how much."""

    input_name: str
    target: str
    passed: bool
    detail: str


def evaluate_targets(inp: Input, runs: dict[str, Runs]) -> list[Verdict]:
    """The issue-14 targets that apply to ``inp`` given each tool's ``runs``.

    Inputs under 10 MB of JSON get none. From 10 MB: per peer that succeeded,
    ``time x >= 10`` and ``RSS frac <= 1/3``. A scaled input of at least 900 MB also gets
    ours ``<= 15 s`` and ``<= 1.5 GB``. A failed ``ours`` is a failed target.
    """
    name = inp.path.name
    out: list[Verdict] = []
    ours = runs.get("ours", Runs(error="not run"))
    if inp.json_bytes >= BIG_INPUT_BYTES:
        for peer in PEERS:
            pr = runs.get(peer)
            if pr is None or not pr.ok:
                continue
            label = TOOL_LABEL[peer]
            if not ours.ok:
                out.append(Verdict(name, f"10x {label}", False, f"ours failed: {ours.error}"))
                continue
            tr = time_ratio(pr, ours)
            rf = rss_fraction(ours, pr)
            assert tr is not None and rf is not None  # both ok, checked above
            miss_t = "" if tr >= TIME_RATIO_TARGET else f", {TIME_RATIO_TARGET / tr:.2f}x short"
            out.append(Verdict(name, f"10x {label}", tr >= TIME_RATIO_TARGET, f"{tr:.1f}x{miss_t}"))
            miss_r = "" if rf <= RSS_FRACTION_TARGET else f", {rf / RSS_FRACTION_TARGET:.2f}x over"
            out.append(
                Verdict(name, f"RSS <= 1/3 {label}", rf <= RSS_FRACTION_TARGET, f"{rf:.2f}{miss_r}")
            )
    if inp.group == "scaled" and inp.json_bytes >= 900 * MB:
        if not ours.ok:
            out.append(Verdict(name, "1 GB in 15 s, 1.5 GB", False, f"ours failed: {ours.error}"))
        else:
            w, r = ours.median_wall_s(), ours.median_rss_bytes()
            ok_w, ok_r = w <= GB_TARGET_WALL_S, r <= GB_TARGET_RSS_BYTES
            out.append(Verdict(name, "1 GB in <= 15 s", ok_w, f"{w:.1f} s"))
            out.append(Verdict(name, "1 GB peak RSS <= 1.5 GB", ok_r, f"{r / MB:.0f} MB"))
    return out


def fit_slope(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Least-squares line ``y = a + b x`` through ``(x, y)`` points: ``(b, a, r^2)``.

    With x = JSON GB and y = seconds, ``b`` is seconds per GB. Raises ValueError with
    fewer than 2 points or all x equal. r^2 = 1 - SS_res / SS_tot (1.0 when all y equal).
    """
    if len(points) < 2:
        raise ValueError("a slope needs at least 2 points")
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        raise ValueError("a slope needs 2 different x")
    sxy = sum((p[0] - mx) * (p[1] - my) for p in points)
    b = sxy / sxx
    a = my - b * mx
    ss_tot = sum((p[1] - my) ** 2 for p in points)
    ss_res = sum((p[1] - a - b * p[0]) ** 2 for p in points)
    r2 = 1.0 if ss_tot == 0 else 1.0 - ss_res / ss_tot
    return b, a, r2


def json_size_bytes(path: Path) -> int:
    """Uncompressed size: the file size of a ``.json``, the gzip ISIZE trailer of a ``.gz``.

    ISIZE is the size modulo 2^32 of the last gzip member: exact for one-member files under
    4 GiB, which is what Kineto and scale_trace.py write. Raises OSError if unreadable.
    """
    if path.suffix != ".gz":
        return path.stat().st_size
    with path.open("rb") as f:
        f.seek(-4, os.SEEK_END)
        return int(struct.unpack("<I", f.read(4))[0])


def is_kineto_trace(path: Path) -> bool:
    """True when ``path`` is a ``.json``/``.json.gz`` whose first 64 KiB hold ``traceEvents``."""
    name = path.name
    if not (name.endswith(".json") or name.endswith(".json.gz")):
        return False
    try:
        if name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                head = f.read(65536)
        else:
            with path.open("rb") as f:
                head = f.read(65536)
    except (OSError, EOFError):
        return False
    return b'"traceEvents"' in head


def discover_inputs(roots: Iterable[Path], group: str = "real") -> list[Input]:
    """Every Kineto trace under ``roots`` (recursively, symlinks followed), sorted by size.

    Missing roots are skipped. A file found twice (two roots) is listed once.
    """
    seen: set[Path] = set()
    found: list[Input] = []
    for root in roots:
        if not root.exists():
            continue
        files = [root] if root.is_file() else sorted(root.rglob("*.json*"))
        for p in files:
            real = p.resolve()
            if real in seen or not p.is_file() or not is_kineto_trace(p):
                continue
            seen.add(real)
            found.append(Input(p, json_size_bytes(p), p.stat().st_size, group))
    return sorted(found, key=lambda i: (i.json_bytes, str(i.path)))


def _fmt_s(r: Runs | None, repeat: int = 0) -> str:
    if r is None:
        return "–"
    if r.skipped:
        return f"skipped: {r.skipped}"
    if not r.ok:
        return "not finished" if r.error is None else f"failed: {r.error}"
    few = f" ({len(r.samples)} of {repeat} runs)" if len(r.samples) < repeat else ""
    if r.partial:
        return f"{r.median_wall_s():.2f}{few} (raised in {r.partial})"
    return f"{r.median_wall_s():.2f}{few}"


def _fmt_mb(r: Runs | None) -> str:
    if r is None or not r.ok:
        return "–"
    return f"{r.median_rss_bytes() / MB:.0f}"


def _fmt_ratio(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _display_name(inp: Input) -> str:
    for base in (REPO, REPO.parent):
        try:
            return str(inp.path.absolute().relative_to(base))
        except ValueError:
            continue
    return inp.path.name


def render_results(
    machine: dict[str, str],
    inputs: Sequence[Input],
    results: dict[Path, dict[str, Runs]],
    repeat: int,
    command: str,
    profile_text: str | None = None,
) -> str:
    """RESULTS.md as Markdown: the machine, how it was measured, one row per input
    (median wall s and peak RSS MB per tool, ratios), the scaled inputs with ours' slope
    (s per GB, r^2), every target with pass/fail, the misses with by how much, and an
    optional profile summary of ours."""
    lines = ["# Peer benchmark: tb-kineto-insights vs HTA vs torch-tb-profiler", ""]
    lines.append(f"Made by `{command}`; every number below is the median of {repeat} runs.")
    lines.append("")
    lines.append("## Machine")
    lines.append("")
    for k, v in machine.items():
        lines.append(f"- {k}: {v}")
    lines.append("")
    lines.append("## How")
    lines.append("")
    lines.append(
        "Each run is a fresh process. Wall = seconds from starting the process to reaping "
        "it, interpreter start and imports included, for all three tools alike. Peak RSS "
        "= `ru_maxrss` of the reaped child (`os.wait4`): the largest single process of the "
        "child and its reaped descendants. Ours = `tb-kineto-insights report FILE --format "
        "json --cache none` (read + every panel). HTA = `TraceAnalysis(trace_dir)` + "
        "temporal, idle-time and comm/comp-overlap breakdowns, the trace symlinked as "
        "`rank0.json[.gz]` into a fresh directory. torch-tb-profiler = its `RunLoader` "
        "on a fresh run directory holding the trace as `worker0.pt.trace.json[.gz]` "
        "(parse, process, analyze, run profile). `time x` = peer wall / ours; `RSS frac` "
        "= ours peak RSS / peer. MB = 10^6 bytes of uncompressed JSON. An HTA breakdown "
        "that raises is named in its cell (`raised in temporal: AssertionError`): the other "
        "breakdowns still ran and the time counts, so that peer did less work than asked."
    )
    lines.append("")
    header = (
        "| input | JSON MB | ours s | ours RSS MB | HTA s | HTA RSS MB | tbp s | tbp RSS MB "
        "| time x HTA | time x tbp | RSS frac HTA | RSS frac tbp |"
    )
    sep = "|" + "---|" * 12
    verdicts: list[Verdict] = []
    for title, group in (("Real traces", "real"), ("Scaled traces", "scaled")):
        rows = [i for i in inputs if i.group == group and i.path in results]
        if not rows:
            continue
        lines += [f"## {title}", "", header, sep]
        for inp in rows:
            r = results[inp.path]
            ours = r.get("ours")
            cells = [
                _display_name(inp),
                f"{inp.json_bytes / MB:.1f}",
                _fmt_s(ours, repeat),
                _fmt_mb(ours),
                _fmt_s(r.get("hta"), repeat),
                _fmt_mb(r.get("hta")),
                _fmt_s(r.get("tbp"), repeat),
                _fmt_mb(r.get("tbp")),
            ]
            for peer in PEERS:
                pr = r.get(peer)
                ok = ours is not None and pr is not None
                cells.append(_fmt_ratio(time_ratio(pr, ours) if ok else None))  # type: ignore[arg-type]
            for peer in PEERS:
                pr = r.get(peer)
                ok = ours is not None and pr is not None
                cells.append(_fmt_ratio(rss_fraction(ours, pr) if ok else None, 2))  # type: ignore[arg-type]
            lines.append("| " + " | ".join(cells) + " |")
            verdicts += evaluate_targets(inp, r)
        lines.append("")
    scaled = [
        (i.json_bytes / 1e9, results[i.path]["ours"].median_wall_s())
        for i in inputs
        if i.group == "scaled" and i.path in results and results[i.path].get("ours", Runs()).ok
    ]
    if len(scaled) >= 3:  # through 2 points r² = 1 says nothing
        b, a, r2 = fit_slope(scaled)
        lines.append(
            f"Ours over the {len(scaled)} scaled inputs: {b:.2f} s per GB of JSON "
            f"(intercept {a:.2f} s, r² = {r2:.4f})."
        )
        lines.append("")
    taken = sorted(
        {
            f"{TOOL_LABEL[t]} from {r.previous}"
            for row in results.values()
            for t, r in row.items()
            if r.previous
        }
    )
    if taken:
        lines.append(
            "Not measured in this run, taken from an earlier one (`--merge-json`): "
            + "; ".join(taken)
            + "."
        )
        lines.append("")
    lines += ["## Targets", ""]
    if not verdicts:
        lines.append("No input of 10 MB or more was measured: no target applies.")
    else:
        n_pass = sum(v.passed for v in verdicts)
        lines.append(f"{n_pass} of {len(verdicts)} passed.")
        lines.append("")
        lines += ["| input | target | result | value |", "|---|---|---|---|"]
        for v in verdicts:
            res = "pass" if v.passed else "**miss**"
            lines.append(f"| {v.input_name} | {v.target} | {res} | {v.detail} |")
    lines.append("")
    if profile_text:
        lines += ["## Profile of ours", "", "```", profile_text.rstrip(), "```", ""]
    return "\n".join(lines)


def parse_cpus(specs: Sequence[str]) -> dict[str, list[str]]:
    """``["ours=0,1", "hta=2,3", "hta=4,5"]`` -> ``{"ours": ["0,1"], "hta": ["2,3", "4,5"]}``.

    Each ``TOOL=LIST`` pins one worker of ``TOOL`` to the ``taskset -c`` CPU list ``LIST``
    (digits, commas and ranges such as ``0-1``); a tool named twice gets two workers that
    measure different inputs at the same time. Raises ValueError naming a bad spec.
    """
    out: dict[str, list[str]] = {}
    for spec in specs:
        tool, sep, cpus = spec.partition("=")
        if not sep or tool not in TOOLS or not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", cpus):
            raise ValueError(f"--cpus {spec!r}: want TOOL=CPULIST, TOOL one of {', '.join(TOOLS)}")
        out.setdefault(tool, []).append(cpus)
    return out


def input_key(inp: Input) -> str:
    """How an input is matched between two result files: file name and JSON bytes."""
    return f"{inp.path.name}:{inp.json_bytes}"


def results_to_json(
    machine: dict[str, str],
    inputs: Sequence[Input],
    results: dict[Path, dict[str, Runs]],
    repeat: int,
    command: str,
) -> dict[str, object]:
    """The measurements as a JSON-able dict (``RESULTS.json``): ``machine``, ``repeat``,
    ``command`` and one entry per measured input with its ``key`` (:func:`input_key`),
    ``name``, ``json_bytes``, ``file_bytes``, ``group`` and per tool its ``samples``
    (``[wall_s, peak_rss_bytes]`` each) and ``error``/``skipped``/``partial``/``cpus``/
    ``previous``. Every sample is kept, so a reader can recompute the medians."""
    rows = []
    for inp in inputs:
        if inp.path not in results:
            continue
        tools = {
            t: {
                "samples": [[w, r] for w, r in runs.samples],
                "error": runs.error,
                "skipped": runs.skipped,
                "partial": runs.partial,
                "cpus": runs.cpus,
                "previous": runs.previous,
            }
            for t, runs in results[inp.path].items()
        }
        rows.append(
            {
                "key": input_key(inp),
                "name": _display_name(inp),
                "json_bytes": inp.json_bytes,
                "file_bytes": inp.file_bytes,
                "group": inp.group,
                "tools": tools,
            }
        )
    return {"machine": machine, "repeat": repeat, "command": command, "inputs": rows}


def runs_from_json(doc: dict[str, object], source: str) -> dict[str, dict[str, Runs]]:
    """``{input key: {tool: Runs}}`` from a :func:`results_to_json` dict; each Runs'
    ``previous`` says ``source`` (and the date of that run, from its ``machine``) unless
    it already names an earlier one. Raises ValueError naming ``source`` when the dict
    does not have that shape."""
    try:
        machine = doc.get("machine") or {}
        date = machine.get("date", "?") if isinstance(machine, dict) else "?"
        out: dict[str, dict[str, Runs]] = {}
        for row in doc["inputs"]:  # type: ignore[attr-defined]
            per_tool: dict[str, Runs] = {}
            for tool, d in row["tools"].items():
                per_tool[tool] = Runs(
                    samples=[(float(w), int(r)) for w, r in d["samples"]],
                    error=d.get("error"),
                    skipped=d.get("skipped"),
                    partial=d.get("partial"),
                    cpus=d.get("cpus"),
                    previous=d.get("previous") or f"{source}, run of {date}",
                )
            out[str(row["key"])] = per_tool
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{source}: not a compare_peers result file ({exc!r})") from exc
    return out


def merge_previous(
    inputs: Sequence[Input],
    results: dict[Path, dict[str, Runs]],
    previous: dict[str, dict[str, Runs]],
    tools_run: Sequence[str],
) -> int:
    """Fill in, for each input of ``results``, the tools NOT in ``tools_run`` from
    ``previous`` (matched by :func:`input_key`: same file name and JSON size). Tools that
    ran now are never overwritten. Returns how many (input, tool) cells were taken."""
    taken = 0
    for inp in inputs:
        row = results.get(inp.path)
        old = previous.get(input_key(inp))
        if row is None or old is None:
            continue
        for tool, runs in old.items():
            if tool in tools_run or tool not in TOOLS:
                continue
            row[tool] = runs
            taken += 1
    return taken


def failure_reason(stderr: str, exit_code: int) -> str:
    """One line saying why a child failed: the last stderr line (the exception), and for
    a bare exception name (``AssertionError``) where it was raised (file:line, function),
    at most 200 characters; ``exit N`` with no stderr."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    if not lines:
        return f"exit {exit_code}"
    last = lines[-1]
    if ":" not in last:
        where = [ln for ln in lines if ln.startswith('File "')]
        if where:
            m = re.match(r'File "(?:.*/)?([^/"]+)", line (\d+), in (\S+)', where[-1])
            if m:
                last += f" at {m.group(1)}:{m.group(2)} in {m.group(3)}"
    return last[:200]


# ---------------------------------------------------------------- measuring (not tested)


def _run_child(
    cmd: list[str],
    env: dict[str, str],
    timeout_s: float,
    needs_ok: bool,
    on_start: Callable[[int], None] | None = None,
) -> tuple[float, int, str]:
    """Run ``cmd``; returns ``(wall_s, peak_rss_bytes, error or "")``; with ``needs_ok`` a
    run whose stdout has no line starting ``OK`` is an error (the peers' child scripts).
    ``on_start(pid)`` is told the child's pid once it runs."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=REPO)
        if on_start is not None:
            on_start(proc.pid)
        deadline = t0 + timeout_s
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                return 0.0, 0, f"timeout after {timeout_s:.0f} s"
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        rss = int(ru.ru_maxrss) * 1024  # Linux: KiB
        out.seek(0)
        stdout = out.read().decode(errors="replace")
        err.seek(0)
        stderr = err.read().decode(errors="replace").strip()
    if proc.returncode != 0:
        return wall, rss, failure_reason(stderr, proc.returncode)
    if needs_ok and not any(line.startswith("OK") for line in stdout.splitlines()):
        return wall, rss, "no OK line"
    partial = [ln[len("PARTIAL ") :] for ln in stdout.splitlines() if ln.startswith("PARTIAL ")]
    return wall, rss, ("PARTIAL " + partial[0]) if partial else ""


def tool_command(
    tool: str, path: Path, ours_exe: Path, bench_python: Path, cpus: str | None = None
) -> list[str]:
    """The child command line measuring ``tool`` on ``path``, under ``taskset -c CPUS``
    when ``cpus`` is given (the child and everything it starts stay on those CPUs)."""
    pin = ["taskset", "-c", cpus] if cpus else []
    if tool == "ours":
        return [*pin, str(ours_exe), "report", str(path), "--format", "json", "--cache", "none"]
    code = HTA_CHILD if tool == "hta" else TBP_CHILD
    return [*pin, str(bench_python), "-c", code, str(path)]


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KINETO_INSIGHTS_CACHE_DIR"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _skip_reason(tool: str, inp: Input, bench_python: Path, peer_max_bytes: int) -> str | None:
    if tool == "ours":
        return None
    if not bench_python.exists():
        return f"no {bench_python} (make bench-setup)"
    if inp.json_bytes > peer_max_bytes:
        return f"> {peer_max_bytes / MB:.0f} MB"
    return None


def _run_once(
    tool: str, inp: Input, r: Runs, k: int, ours_exe: Path, bench_python: Path, timeout_s: float
) -> None:
    cmd = tool_command(tool, inp.path, ours_exe, bench_python, r.cpus)
    wall, rss, err = _run_child(cmd, _child_env(), timeout_s, needs_ok=tool != "ours")
    if err.startswith("PARTIAL "):
        r.partial, err = err[len("PARTIAL ") :], ""
    if err:
        r.error = err
    else:
        r.samples.append((wall, rss))
    print(
        f"  {_display_name(inp)} {tool} run {k + 1}"
        + (f" [cpus {r.cpus}]" if r.cpus else "")
        + ": "
        + (f"failed: {err}" if err else f"{wall:.2f} s, {rss / MB:.0f} MB"),
        file=sys.stderr,
        flush=True,
    )


def measure_input(
    inp: Input,
    repeat: int,
    ours_exe: Path,
    bench_python: Path,
    peer_max_bytes: int,
    timeout_s: float,
    tools: Sequence[str] = TOOLS,
    cpus: dict[str, list[str]] | None = None,
) -> dict[str, Runs]:
    """Each of ``tools`` ``repeat`` times on ``inp``, one after the other (the tools
    interleaved, so a change of load hits all of them), each pinned to its first CPU list
    in ``cpus``; a failure stops that tool on that input."""
    runs = {t: Runs(cpus=(cpus or {}).get(t, [None])[0]) for t in tools}
    for t in tools:
        runs[t].skipped = _skip_reason(t, inp, bench_python, peer_max_bytes)
    for k in range(repeat):
        for tool in tools:
            r = runs[tool]
            if not (r.error or r.skipped):
                _run_once(tool, inp, r, k, ours_exe, bench_python, timeout_s)
    return runs


def measure_parallel(
    inputs: Sequence[Input],
    repeat: int,
    ours_exe: Path,
    bench_python: Path,
    peer_max_bytes: int,
    timeout_s: float,
    tools: Sequence[str],
    cpus: dict[str, list[str]],
    results: dict[Path, dict[str, Runs]],
    on_done: Callable[[], None],
) -> None:
    """Every tool on every input at once: one worker thread per CPU list in ``cpus``
    (``tool -> [list, ...]``), each taking its tool's inputs, largest first, from a shared
    queue and running all ``repeat`` runs of one input on its own CPUs (so a median comes
    from one CPU set). ``results`` is filled in place; ``on_done`` is called (under a
    lock) after each (input, tool) is finished, e.g. to rewrite RESULTS.md."""
    lock = threading.Lock()
    queues: dict[str, list[Input]] = {}
    for tool in tools:
        if tool not in cpus:
            raise ValueError(f"--parallel: no --cpus {tool}=LIST")
        queues[tool] = sorted(inputs, key=lambda i: -i.json_bytes)
    for inp in inputs:
        results.setdefault(inp.path, {})

    def worker(tool: str, cpu_list: str) -> None:
        while True:
            with lock:
                if not queues[tool]:
                    return
                inp = queues[tool].pop(0)
            r = Runs(cpus=cpu_list, skipped=_skip_reason(tool, inp, bench_python, peer_max_bytes))
            with lock:  # listed at once: a run stopped midway still shows its samples
                results[inp.path][tool] = r
            for k in range(repeat):
                if r.error or r.skipped:
                    break
                _run_once(tool, inp, r, k, ours_exe, bench_python, timeout_s)
                with lock:
                    on_done()

    threads = [
        threading.Thread(target=worker, args=(t, c), daemon=True) for t in tools for c in cpus[t]
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def make_scaled(
    src: Path, data_dir: Path, scale_script: Path, sizes_mib: Sequence[int]
) -> list[Input]:
    """``<data_dir>/scaled/scaled_<MiB>mib.json.gz`` for each size, made once by
    ``scale_script SRC -o OUT --target-mb MiB`` (kept between runs). Raises
    FileNotFoundError naming what is missing, RuntimeError if the script fails."""
    if not src.exists():
        raise FileNotFoundError(f"--scale-src {src}: no such file")
    if not scale_script.exists():
        raise FileNotFoundError(f"--scale-script {scale_script}: no such file")
    out_dir = data_dir / "scaled"
    out_dir.mkdir(parents=True, exist_ok=True)
    made: list[Input] = []
    for mib in sizes_mib:
        out = out_dir / f"{src.name.split('.')[0]}_x{mib}mib.json.gz"
        tmp = out.with_suffix(".part.gz")
        while not out.exists() and tmp.exists() and time.time() - tmp.stat().st_mtime < 30:
            time.sleep(5)  # another maker is writing it (a concurrent run): wait for it
        if not out.exists():
            cmd = [
                sys.executable,
                str(scale_script),
                str(src),
                "-o",
                str(tmp),
                "--target-mb",
                str(mib),
            ]
            print(f"making {out} ...", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"{scale_script} failed on {src}: {proc.stderr.strip()[-300:]}")
            tmp.rename(out)
        made.append(Input(out, json_size_bytes(out), out.stat().st_size, "scaled"))
    return made


def _read(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"


def machine_info(bench_python: Path, ours_exe: Path) -> dict[str, str]:
    """CPU model, cores, RAM, Python and tool versions, date, ``uptime`` (load average)."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = int(
            next(
                ln.split()[1]
                for ln in Path("/proc/meminfo").read_text().splitlines()
                if ln.startswith("MemTotal")
            )
        )
        ram = f"{mem_kib / 2**20:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        ram = "unknown"
    ver = (
        "import importlib.metadata as m\n"
        "for n in ('HolisticTraceAnalysis', 'torch-tb-profiler', 'pandas'):\n"
        "    try: print(n, m.version(n))\n"
        "    except Exception as e: print(n, 'missing')\n"
    )
    peers = (
        _read([str(bench_python), "-c", ver]).replace("\n", ", ")
        if bench_python.exists()
        else "not installed"
    )
    return {
        "CPU": f"{cpu}, {os.cpu_count()} logical cores",
        "RAM": ram,
        "OS": platform.platform(),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "ours": _read([str(ours_exe), "--version"]) + f", Python {platform.python_version()}",
        "peers": peers
        + (
            ", Python "
            + _read([str(bench_python), "-c", "import platform; print(platform.python_version())"])
            if bench_python.exists()
            else ""
        ),
        "uptime at start": _read(["uptime"]),
    }


def profile_ours(path: Path, ours_python: Path, cpus: str | None = None) -> str:
    """cProfile of ours' ``report`` on ``path`` (under ``taskset -c cpus`` if given): the
    total and the 12 costliest functions by own time (pstats text)."""
    pin = ["taskset", "-c", cpus] if cpus else []
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        proc = subprocess.run(
            [*pin, str(ours_python), "-c", PROFILE_CHILD, str(path), out.name],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
    if proc.returncode != 0:
        return f"profile failed: {proc.stderr.strip()[-300:]}"
    keep = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return f"cProfile of `report {_display_name(Input(path, 0, 0, 'real'))}`\n" + "\n".join(keep)


# ---------------------------------------------------------------- log directories (issue 34)

LOGDIR_TOOLS = ("ours", "ours1", "before", "hta", "tbp", "floor")
LOGDIR_LABEL = {
    **TOOL_LABEL,
    "ours1": "ours, one core",
    "before": "ours before (--ours-before)",
    "floor": "decode floor",
}
#: The mixed log directory: real runs (by folder) and scaled traces, made under --data-dir.
MIXED_REAL = (
    SHARED / "public" / "hta_df_index_resolver",
    SHARED / "public" / "kineto_resnet50" / "resnet50_num_workers_0",
    SHARED / "h200x2" / "ddp_default",
    SHARED / "h200x2" / "fsdp",
    REPO / "sample_logs" / "transformer_eager",
    REPO / "sample_logs" / "dataloader_workers0",
)
MIXED_SCALED_MIB = (100,)
PSS_SAMPLE_S = 0.05


def logdir_runs(root: Path) -> list[tuple[str, list[str]]]:
    """The runs of a log directory as the peers' users would loop over them: every folder
    directly holding Kineto traces (:func:`is_kineto_trace`), by its path under ``root``,
    with its trace files (absolute, symlinks resolved), sorted."""
    by_dir: dict[Path, list[str]] = {}
    for p in sorted(root.rglob("*.json*")):
        if p.is_file() and is_kineto_trace(p):
            by_dir.setdefault(p.parent, []).append(str(p.resolve()))
    return [(str(d.relative_to(root)) or ".", files) for d, files in sorted(by_dir.items())]


def make_mixed_logdir(data_dir: Path, scale_src: Path, scale_script: Path) -> Path:
    """``<data_dir>/mixed_logdir``: one folder per real run of :data:`MIXED_REAL` (its
    trace files copied: ours does not follow symlinks out of a log directory), the GPT
    trace of ``<data_dir>/gpt`` when there, and scaled traces of
    :data:`MIXED_SCALED_MIB` (:func:`make_scaled`), one folder each."""
    root = data_dir / "mixed_logdir"
    sources: list[tuple[str, list[Path]]] = []
    for run in MIXED_REAL:
        files = [p for p in sorted(run.glob("*.json*")) if is_kineto_trace(p)]
        if files:
            sources.append((run.name, files))
    for extra in (data_dir / "gpt", REPO.parent.parent / "main" / "benchmarks" / "data" / "gpt"):
        gpt = [p for p in sorted(extra.glob("*.json*")) if is_kineto_trace(p)]
        if gpt:
            sources.append(("gpt", gpt))
            break
    for inp in make_scaled(scale_src, data_dir, scale_script, list(MIXED_SCALED_MIB)):
        sources.append((f"scaled_{inp.json_bytes // MB}mb", [inp.path]))
    for name, files in sources:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for f in files:
            copy = folder / f.name
            if copy.is_symlink():
                copy.unlink()
            if not copy.exists():
                shutil.copy2(f.resolve(), copy)
    return root


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except OSError:
            continue
    return out


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def tree_pss_bytes(pid: int) -> int:
    """Proportional set size (``smaps_rollup`` ``Pss``) summed over ``pid`` and every
    process under it: what a tool holds in memory at once, its worker processes
    included, pages shared between them counted once."""
    return sum(_pss_bytes(p) for p in _descendants(pid))


def run_sampled(
    cmd: list[str], timeout_s: float, needs_ok: bool, env: dict[str, str] | None = None
) -> tuple[float, int, int, str]:
    """:func:`_run_child` with the tree's memory sampled every :data:`PSS_SAMPLE_S`:
    ``(wall_s, ru_maxrss_bytes, peak_tree_pss_bytes, error or "")``."""
    peak = [0]
    stop = threading.Event()
    started: list[int] = []

    def sample() -> None:
        while not stop.wait(PSS_SAMPLE_S):
            if started:
                peak[0] = max(peak[0], tree_pss_bytes(started[0]))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        wall, rss, err = _run_child(cmd, env or _child_env(), timeout_s, needs_ok, started.append)
    finally:
        stop.set()
        thread.join()
    return wall, rss, peak[0], err


@dataclass
class LogdirRuns:
    """One tool on one log directory: ``(wall_s, ru_maxrss_bytes, tree_pss_bytes)`` each."""

    samples: list[tuple[float, int, int]] = field(default_factory=list)
    error: str | None = None
    partial: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.samples)

    def median(self, k: int) -> float:
        return median([float(s[k]) for s in self.samples])


def logdir_command(
    tool: str,
    root: Path,
    runs_file: Path,
    files_file: Path,
    ours: Path,
    bench_python: Path,
    before: Path | None = None,
) -> list[str]:
    """The child measuring ``tool`` on the log directory ``root`` (``ours1``: ours with
    ``KINETO_INSIGHTS_READ_WORKERS=1``, set by the caller; ``before``: another build of
    ours, e.g. main's)."""
    if tool in ("ours", "ours1", "before"):
        exe = before if tool == "before" and before is not None else ours
        return [str(exe), "report", str(root), "--format", "json", "--cache", "none"]
    if tool == "floor":
        return [str(ours.parent / "python"), "-c", FLOOR_CHILD, str(files_file)]
    code = HTA_LOGDIR_CHILD if tool == "hta" else TBP_LOGDIR_CHILD
    return [str(bench_python), "-c", code, str(runs_file)]


def measure_logdir(
    root: Path,
    repeat: int,
    tools: Sequence[str],
    ours: Path,
    bench_python: Path,
    timeout_s: float,
    before: Path | None = None,
) -> dict[str, LogdirRuns]:
    """Every tool ``repeat`` times on ``root``, the tools interleaved (a change of load
    hits all of them); a failure stops that tool there. Each time, two runs: one alone
    for the wall time and ``ru_maxrss``, then one with the memory sampler
    (:func:`run_sampled`) for the tree PSS. The sampler's reads of ``/proc`` take
    10-17 % of a core; on the 2-core machine a tool that keeps both cores busy paid for
    them in wall time (ours on ``sample_logs``: medians of 8 interleaved runs, 1.65 s
    alone against 1.90 s sampled), while a tool on one core leaves the sampler the other
    one."""
    runs = logdir_runs(root)
    results = {t: LogdirRuns() for t in tools}
    with tempfile.TemporaryDirectory() as tmp:
        runs_file, files_file = Path(tmp) / "runs.json", Path(tmp) / "files.json"
        runs_file.write_text(json.dumps(runs))
        files_file.write_text(json.dumps([f for _, files in runs for f in files]))
        for k in range(repeat):
            for tool in tools:
                r = results[tool]
                if r.error:
                    continue
                cmd = logdir_command(tool, root, runs_file, files_file, ours, bench_python, before)
                env = _child_env()
                if tool == "ours1":
                    env["KINETO_INSIGHTS_READ_WORKERS"] = "1"
                if tool == "before":
                    # the children run in this checkout, whose package a forkserver
                    # (started with ``python -c``: the working directory first on its
                    # path) imported instead of the other build's: its workers failed
                    # and it read serially (round 5 of issue 34)
                    env["PYTHONSAFEPATH"] = "1"
                needs_ok = tool in ("hta", "tbp", "floor")
                wall, rss, err = _run_child(cmd, env, timeout_s, needs_ok)
                pss = 0
                if not err or err.startswith("PARTIAL "):
                    _, _, pss, sampled_err = run_sampled(cmd, timeout_s, needs_ok, env)
                    if sampled_err and not sampled_err.startswith("PARTIAL "):
                        err = sampled_err
                if err.startswith("PARTIAL "):
                    r.partial, err = err[len("PARTIAL ") :], ""
                if err:
                    r.error = err
                else:
                    r.samples.append((wall, rss, pss))
                print(
                    f"  {root} {tool} run {k + 1}: "
                    + (f"failed: {err}" if err else f"{wall:.2f} s, {pss / MB:.0f} MB"),
                    file=sys.stderr,
                    flush=True,
                )
    return results


def render_logdir(
    machine: dict[str, str],
    rows: Sequence[tuple[Path, int, int, int, dict[str, LogdirRuns]]],
    repeat: int,
    command: str,
) -> str:
    """The log-directory table: per log directory (runs, files, JSON MB) each tool's
    median wall s, peak tree memory (PSS, MB) and largest process (RSS, MB); ratios of
    the peers' wall and memory to ours and ours over the floor; the targets of issue 34."""
    lines = ["## Log directories (issue 34)", ""]
    lines.append(f"Made by `{command}`; every number is the median of {repeat} runs.")
    lines.append("")
    for k, v in machine.items():
        lines.append(f"- {k}: {v}")
    lines += [
        "",
        "Wall = start of the process to its end, interpreter start and imports included, "
        "in a run of its own. "
        "Memory: *tree PSS* = the largest sum of the proportional set size of the process "
        "and every process under it (sampled every 50 ms in a second run of the same "
        "command, as the sampler's own CPU slowed a tool that uses every core; worker "
        "processes included, shared pages counted once), *RSS* = `ru_maxrss` (the largest "
        "single process, of the first run). "
        "Ours: `report LOGDIR --format json --cache none` (one core: with "
        "`KINETO_INSIGHTS_READ_WORKERS=1`; before: the same command of `--ours-before`). "
        "HTA: one `TraceAnalysis` per run "
        "folder + temporal, idle and comm/comp-overlap breakdowns, in a loop, one process. "
        "torch-tb-profiler: its `RunLoader` on each run folder in turn. Floor: every file "
        "inflated and decoded by msgspec into the typed events of the fields the analysis "
        "reads, one after another, one process (no columns, no analysis).",
        "",
        "| log dir | runs | files | JSON MB | tool | wall s | tree PSS MB | RSS MB "
        "| peer s / ours | ours PSS / peer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts: list[str] = []
    for root, n_runs, n_files, json_bytes, res in rows:
        ours = res.get("ours")
        for tool, r in res.items():
            if r.ok:
                wall, pss, rss = r.median(0), r.median(2), r.median(1)
                cells = [f"{wall:.2f}", f"{pss / MB:.0f}", f"{rss / MB:.0f}"]
                if r.partial:
                    cells[0] += f" (partial: {r.partial[:120]})"
            else:
                cells = [f"failed: {r.error}", "–", "–"]
            ratio = frac = "–"
            if tool in PEERS and r.ok and ours is not None and ours.ok:
                ratio = f"{r.median(0) / ours.median(0):.1f}x"
                frac = f"{ours.median(2) / r.median(2):.2f}"
            if tool == "floor" and r.ok and ours is not None and ours.ok:
                ratio = f"ours {ours.median(0) / r.median(0):.2f}x the floor"
            if tool in ("ours1", "before") and r.ok and ours is not None and ours.ok:
                ratio = f"{r.median(0) / ours.median(0):.2f}x ours"
            lines.append(
                f"| {root.name} | {n_runs} | {n_files} | {json_bytes / MB:.0f} | "
                f"{LOGDIR_LABEL[tool]} | " + " | ".join(cells) + f" | {ratio} | {frac} |"
            )
        if ours is None or not ours.ok:
            continue
        for peer in PEERS:
            r = res.get(peer)
            if r is None or not r.ok:
                continue
            x = r.median(0) / ours.median(0)
            f = ours.median(2) / r.median(2)
            verdicts.append(
                f"| {root.name} | 10x {TOOL_LABEL[peer]} | {'pass' if x >= 10 else '**miss**'} "
                f"| {x:.1f}x |"
            )
            verdicts.append(
                f"| {root.name} | tree PSS <= 1/3 {TOOL_LABEL[peer]} | "
                f"{'pass' if f <= RSS_FRACTION_TARGET else '**miss**'} | {f:.2f} |"
            )
        floor = res.get("floor")
        if floor is not None and floor.ok and json_bytes >= 100 * MB:
            x = ours.median(0) / floor.median(0)
            verdicts.append(
                f"| {root.name} | <= 1.5x the decode floor | {'pass' if x <= 1.5 else '**miss**'} "
                f"| {x:.2f}x |"
            )
    lines += ["", "| log dir | target | result | value |", "|---|---|---|---|", *verdicts, ""]
    return "\n".join(lines)


def compile_ours(exe: Path) -> None:
    """Byte-compile the package the console script ``exe`` runs (its venv's Python finds
    it), as ``pip install`` does for a user: the children run with
    ``PYTHONDONTWRITEBYTECODE=1``, so without ``.pyc`` files every start of ours would
    compile the whole package again (0.15-0.2 s of each start on the 2-core machine,
    and again in each worker process that imports the analysis)."""
    python = exe.parent / "python"
    if not python.exists():
        return
    code = "import os, tb_kineto_insights as t; print(os.path.dirname(t.__file__))"
    where = _read([str(python), "-c", code]).strip()
    if os.path.isdir(where):
        subprocess.run([str(python), "-m", "compileall", "-q", where], check=False)


def main_logdir(args: argparse.Namespace) -> int:
    """``--logdir``: ours, the peers and the floor on whole log directories."""
    for exe in (args.ours, args.ours_before):
        if exe is not None:
            compile_ours(exe)
    roots: list[Path] = []
    for item in args.logdir:
        if str(item) == "mixed":
            roots.append(make_mixed_logdir(args.data_dir, args.scale_src, args.scale_script))
        else:
            roots.append(item)
    tools = [t for t in LOGDIR_TOOLS if t in args.logdir_tools]
    if args.ours_before is None and "before" in tools:
        tools.remove("before")
    machine = machine_info(args.bench_python, args.ours)
    cmd = "python benchmarks/compare_peers.py " + " ".join(sys.argv[1:])
    rows = []
    for root in roots:
        runs = logdir_runs(root)
        files = [f for _, fs in runs for f in fs]
        json_bytes = sum(json_size_bytes(Path(f)) for f in files)
        res = measure_logdir(
            root, args.repeat, tools, args.ours, args.bench_python, args.timeout_s, args.ours_before
        )
        rows.append((root, len(runs), len(files), json_bytes, res))
        machine["uptime at end"] = _read(["uptime"])
        text = render_logdir(machine, rows, args.repeat, cmd.strip())
        args.out.write_text(text)
    print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool and input (median)")
    ap.add_argument(
        "--quick", action="store_true", help="1 run, the 3 smallest inputs >= 10 MB, no scaled"
    )
    ap.add_argument(
        "--inputs",
        nargs="+",
        type=Path,
        help="these files or folders (+ scaled unless --no-scaled)",
    )
    ap.add_argument("--data-dir", type=Path, default=REPO / "benchmarks" / "data")
    ap.add_argument("--scale-src", type=Path, default=DEFAULT_SCALE_SRC)
    ap.add_argument("--scale-script", type=Path, default=REPO / "benchmarks" / "scale_trace.py")
    ap.add_argument("--no-scaled", action="store_true", help="skip the scaled inputs")
    ap.add_argument(
        "--scaled-mib", type=int, nargs="+", default=list(SCALED_MIB), help="scaled sizes, MiB"
    )
    ap.add_argument("--peer-max-mb", type=float, default=300.0)
    ap.add_argument("--min-mb", type=float, default=10.0, help="real inputs from this JSON size")
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--bench-python", type=Path, default=REPO / ".bench-venv" / "bin" / "python")
    ap.add_argument("--ours", type=Path, default=REPO / ".venv" / "bin" / "tb-kineto-insights")
    ap.add_argument("--no-profile", action="store_true", help="no cProfile of ours")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "RESULTS.md")
    ap.add_argument("--json", type=Path, help="every sample as JSON (default: --out with .json)")
    ap.add_argument(
        "--tools", nargs="+", choices=TOOLS, default=list(TOOLS), help="measure only these"
    )
    ap.add_argument(
        "--merge-json",
        type=Path,
        help="take the tools not in --tools from this earlier result file (same inputs)",
    )
    ap.add_argument(
        "--cpus",
        nargs="+",
        default=[],
        metavar="TOOL=CPULIST",
        help="pin TOOL to these CPUs (taskset -c); name a tool twice for two workers",
    )
    ap.add_argument(
        "--parallel",
        action="store_true",
        help="run every --cpus worker at once (each on its own CPUs) instead of in turn",
    )
    ap.add_argument(
        "--logdir",
        nargs="+",
        type=Path,
        help="measure whole log directories instead (issue 34; 'mixed': make the mixed one)",
    )
    ap.add_argument("--logdir-tools", nargs="+", choices=LOGDIR_TOOLS, default=list(LOGDIR_TOOLS))
    ap.add_argument(
        "--ours-before", type=Path, help="--logdir: another build of ours to compare (main's)"
    )
    args = ap.parse_args(argv)
    if args.logdir:
        if args.out == REPO / "benchmarks" / "RESULTS.md":
            args.out = REPO / "benchmarks" / "data" / "RESULTS_logdir.md"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        return main_logdir(args)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    if not args.ours.exists():
        ap.error(f"--ours {args.ours}: no such file (make venv)")
    compile_ours(args.ours)
    try:
        cpus = parse_cpus(args.cpus)
    except ValueError as exc:
        ap.error(str(exc))
    tools: list[str] = [t for t in TOOLS if t in args.tools]
    if args.parallel and any(t not in cpus for t in tools):
        ap.error("--parallel needs --cpus TOOL=LIST for every tool in --tools")
    previous: dict[str, dict[str, Runs]] = {}
    if args.merge_json:
        try:
            previous = runs_from_json(json.loads(args.merge_json.read_text()), args.merge_json.name)
        except (OSError, ValueError) as exc:
            ap.error(f"--merge-json {args.merge_json}: {exc}")
    json_out = args.json or args.out.with_suffix(".json")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    skipped_small = 0
    if args.inputs:
        inputs = discover_inputs(args.inputs)
        if not inputs:
            ap.error(f"--inputs: no Kineto trace in {' '.join(map(str, args.inputs))}")
    else:
        found = [
            i
            for i in discover_inputs([*DEFAULT_ROOTS, args.data_dir])
            if "scaled" not in i.path.parts
        ]
        inputs = [i for i in found if i.json_bytes >= args.min_mb * MB]
        skipped_small = len(found) - len(inputs)
    repeat = args.repeat
    scaled_mib: list[int] = []
    if args.quick:
        repeat = 1
        inputs = inputs[:3]
    elif not args.no_scaled:
        scaled_mib = list(args.scaled_mib)
    machine = machine_info(args.bench_python, args.ours)
    machine["tools measured"] = ", ".join(TOOL_LABEL[t] for t in tools)
    machine["pinning"] = (
        "; ".join(f"{TOOL_LABEL[t]} on CPUs {' and '.join(cpus[t])}" for t in tools if t in cpus)
        + (" (the workers at the same time, each on its own CPUs)" if args.parallel else "")
        if cpus
        else "none"
    )
    cmd = "python benchmarks/compare_peers.py " + " ".join(sys.argv[1:] if argv is None else argv)
    results: dict[Path, dict[str, Runs]] = {}
    todo: list[Input | int] = [*inputs, *scaled_mib]

    def write(pending: Sequence[Input | int], profile_text: str | None = None) -> str:
        machine["uptime at end"] = _read(["uptime"])
        if previous:
            merge_previous(inputs, results, previous, tools)
        json_out.write_text(
            json.dumps(results_to_json(machine, inputs, results, repeat, cmd.strip()), indent=1)
            + "\n"
        )
        text = render_results(machine, inputs, results, repeat, cmd.strip(), profile_text)
        if skipped_small:
            text += (
                f"\n{skipped_small} real traces under {args.min_mb:g} MB of JSON (sample_logs/, "
                "shared/traces) were not measured: no target applies to them.\n"
            )
        if pending:
            names = [f"scaled {p} MiB" if isinstance(p, int) else _display_name(p) for p in pending]
            text += "\nNot measured (the run was stopped before them): " + ", ".join(names) + "\n"
        args.out.write_text(text)
        return text

    peer_max = int(args.peer_max_mb * MB)
    if args.parallel:
        if scaled_mib:
            inputs += make_scaled(args.scale_src, args.data_dir, args.scale_script, scaled_mib)

        def unfinished() -> list[Input | int]:
            def done(r: Runs | None) -> bool:
                return r is not None and bool(r.error or r.skipped or len(r.samples) >= repeat)

            return [i for i in inputs if not all(done(results[i.path].get(t)) for t in tools)]

        def on_done() -> None:
            write(unfinished())

        try:
            measure_parallel(
                inputs,
                repeat,
                args.ours,
                args.bench_python,
                peer_max,
                args.timeout_s,
                tools,
                cpus,
                results,
                on_done,
            )
        except KeyboardInterrupt:
            print(write(unfinished()))
            return 130
    for n, job in enumerate(todo if not args.parallel else []):
        try:
            if isinstance(job, int):
                job = make_scaled(args.scale_src, args.data_dir, args.scale_script, [job])[0]
                inputs.append(job)
            results[job.path] = measure_input(
                job, repeat, args.ours, args.bench_python, peer_max, args.timeout_s, tools, cpus
            )
        except KeyboardInterrupt:  # Ctrl-C: keep what was measured, name the rest
            print(write(todo[n:]))
            return 130
        write(todo[n + 1 :])
    profile_text = None
    if not args.no_profile and not args.quick and "ours" in tools:
        real = [i for i in inputs if i.group == "real"]
        if real:
            biggest = max(real, key=lambda i: i.json_bytes)
            ours_cpus = cpus.get("ours", [None])[0]
            profile_text = profile_ours(biggest.path, args.ours.parent / "python", ours_cpus)
    text = write([], profile_text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
