"""Structure-aware fuzzing of the whole analysis (issue 32 §8): ``summarize_file`` must
return a Summary that fits its schema, or raise a ``TraceError``, whatever the trace.

Random byte mutations (``fuzz_reader.py``) mostly break the JSON and stop at the
reader; real users' traces are valid JSON with odd *values*. So each input here is a
real trace (the first events of the small ``sample_logs`` traces and of a DDP rank
with NCCL collectives), parsed, with 1-4 mutations of its parsed events and
top-level keys, written back as JSON:

- a value replaced by another type or an extreme: booleans for numbers, ``null``,
  strings, 20-digit and 2**64 integers, ``±1e308``, ``NaN``/``Infinity`` (bare tokens,
  as some writers emit), negative numbers, deep nesting (lists and objects 10-1,200
  levels), lone surrogates, control characters;
- literals the JSON encoder cannot make: ``1e400``, ``-1E+999``, 30-digit decimals in
  ``ts``/``dur`` (the exact-ns path), ``-0``;
- odd names: ``ProfilerStep#`` with 20+ digits or none, collective names, control and
  bidi characters, 10 KB names;
- keys dropped, events duplicated, phases changed;
- top-level keys: ``distributedInfo`` (``world_size``/``rank`` as booleans, huge,
  negative, strings), ``deviceProperties`` (``totalGlobalMem`` as a boolean...),
  Kineto ``INFO`` lines;
- the file written as 1-3 gzip members cut at random bytes, or plain.

Checks per input: no exception other than ``TraceError``; the summary encodes and
decodes with ``schema.summary_decoder()`` (fits the schema); it takes at most 5 s.
Prints counts and every failure (kind, message, seed, mutation), exit 1 on any.

    python benchmarks/fuzz_structured.py [--count 100000] [--seed 0] [--seconds S]
        [--events 400] [--workers N] [--surfaces]

``--surfaces`` (issue 47): each summary also goes through the window cut of its first
step, the diff against a real summary (both ways) and the run view of the two, and so
does a forged copy of it (1-3 numbers hostile, as a cache entry could hold them, when it
passes the cache's range checks): :func:`check_surfaces`.

Everything runs in-process (no subprocess per input): each input is decoded afresh
from the base trace's msgspec bytes (not ``copy.deepcopy``), written to ``/dev/shm``
where there is one, and summarised by the calling process. ``--workers N`` forks N
processes; worker ``w`` takes inputs ``w, w + N, w + 2N, ...`` of the one index space,
so input ``i`` is the same whatever N is and :func:`replay` finds it from ``(seed, i,
events)``. ``--events`` keeps fewer events of each base trace (smaller, cheaper inputs:
the 10^6 run uses 60 with ``--coherent``, which picks kernels with their runtime calls
and CPU ops instead of the first events: see :func:`_coherent_pick`). An input still
running after :data:`HARD_SECONDS` is stopped by ``SIGALRM`` and counted as a failure.

tests/test_fuzz_structured.py runs it on a fixed budget; the large figure (inputs,
seed, result) goes to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import copy
import functools
import gzip
import itertools
import json
import math
import os
import random
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: Events kept of each base trace (the analysis of each input stays in milliseconds).
BASE_EVENTS = 400
#: An input that takes longer than this is a failure.
MAX_SECONDS = 5.0
#: ... and one still running after this is stopped (SIGALRM) so the run goes on.
HARD_SECONDS = 60

HUGE_INTS = [10**20, -(10**20), 2**63, 2**64, -(2**63) - 1, 10**30]
EXTREMES: list[Any] = [
    True,
    False,
    None,
    "",
    "x",
    "12",
    -1,
    0,
    1e308,
    -1e308,
    5e-324,
    float("nan"),
    float("inf"),
    float("-inf"),
    [],
    {},
    [1, "a"],
    {"a": 1},
    "\udc80",
    "\x1b]0;owned\x07\u202e",
    *HUGE_INTS,
]
#: Raw literals substituted into the JSON text (the encoder cannot write them).
RAW_LITERALS = [
    "1e400",
    "-1E+999",
    "123456789012345678901234567890.123456",
    "-0",
    "1.5e-400",
    "99999999999999999999",
    "-99999999999999999999.5",
]
NAMES = [
    "ProfilerStep#99999999999999999999",
    "ProfilerStep#",
    "ProfilerStep#-3",
    "ProfilerStep#1e3",
    "ProfilerStep#" + "9" * 400,
    "nccl:all_reduce",
    "ncclKernel_AllReduce_RING_LL_Sum_float",
    "record_param_comms",
    "\x1b[2J\x1b[31mFAKE\n",
    "\u202egnp.exe",
    "a" * 10_000,
    "",
]
_RAW_MARK = "@@raw%d@@"


def _deep(depth: int, kind: str) -> str:
    """``depth`` nested lists or objects as JSON text (the encoder itself recurses)."""
    if kind == "list":
        return "[" * depth + "1" + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


@dataclass
class Input:
    """One mutated trace: its JSON text (raw literals substituted) and how it was made."""

    doc: dict[str, Any]
    raws: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def raw(self, literal: str) -> str:
        """A placeholder string for ``literal``, swapped into the text when written."""
        self.raws.append(literal)
        return _RAW_MARK % (len(self.raws) - 1)

    def text(self) -> str:
        text = json.dumps(self.doc, allow_nan=True)
        for i, literal in enumerate(self.raws):
            text = text.replace(json.dumps(_RAW_MARK % i), literal)
        return text


def _value(rng: random.Random, inp: Input) -> Any:
    roll = rng.random()
    if roll < 0.15:
        return inp.raw(rng.choice(RAW_LITERALS))
    if roll < 0.22:
        return inp.raw(_deep(rng.choice([10, 100, 600, 1200]), rng.choice(["list", "dict"])))
    if roll < 0.3:
        return rng.choice(NAMES)
    return copy.deepcopy(rng.choice(EXTREMES))


def _event(rng: random.Random, doc: dict[str, Any]) -> dict[str, Any] | None:
    events = doc.get("traceEvents")
    if not isinstance(events, list) or not events:
        return None
    event = rng.choice(events)
    return event if isinstance(event, dict) else None


def m_event_value(rng: random.Random, inp: Input) -> None:
    event = _event(rng, inp.doc)
    if event is None:
        return
    keys = [*event, "ts", "dur", "pid", "tid", "name", "ph", "cat", "id"]
    key = rng.choice(keys)
    event[key] = _value(rng, inp)
    inp.notes.append(f"event.{key}")


def m_args_value(rng: random.Random, inp: Input) -> None:
    event = _event(rng, inp.doc)
    if event is None:
        return
    args = event.get("args")
    if not isinstance(args, dict):
        args = event["args"] = {}
    keys = [
        *args,
        "In msg nelems",
        "Out msg nelems",
        "Group size",
        "stream",
        "device",
        "correlation",
        "External id",
        "Total Allocated",
        "Total Reserved",
        "Bytes",
        "Addr",
        "Collective name",
        "dtype",
        "Process Group Ranks",
        "Seq",
        "grid",
        "block",
        "registers per thread",
        "shared memory",
        "est. achieved occupancy %",
        "Input Dims",
    ]
    key = rng.choice(keys)
    args[key] = _value(rng, inp)
    inp.notes.append(f"args.{key}")


def m_name(rng: random.Random, inp: Input) -> None:
    event = _event(rng, inp.doc)
    if event is None:
        return
    event["name"] = rng.choice(NAMES)
    if rng.random() < 0.5:
        event["cat"] = rng.choice(["user_annotation", "kernel", "cpu_op", "gpu_memcpy"])
    inp.notes.append(f"name={event['name'][:40]!r}")


def m_drop_key(rng: random.Random, inp: Input) -> None:
    event = _event(rng, inp.doc)
    if event:
        key = rng.choice(list(event))
        del event[key]
        inp.notes.append(f"drop.{key}")


def m_duplicate(rng: random.Random, inp: Input) -> None:
    events = inp.doc.get("traceEvents")
    if isinstance(events, list) and events:
        events.insert(rng.randrange(len(events) + 1), copy.deepcopy(rng.choice(events)))
        inp.notes.append("duplicate")


def m_phase(rng: random.Random, inp: Input) -> None:
    event = _event(rng, inp.doc)
    if event is not None:
        event["ph"] = rng.choice(["X", "B", "E", "i", "s", "f", "C", "M", "b", "e", "x", ""])
        inp.notes.append(f"ph={event['ph']}")


def m_distributed(rng: random.Random, inp: Input) -> None:
    info = inp.doc.get("distributedInfo")
    if not isinstance(info, dict):
        info = inp.doc["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 2}
    key = rng.choice(["world_size", "rank", "backend", "pg_count", "nccl_version"])
    info[key] = _value(rng, inp)
    inp.notes.append(f"distributedInfo.{key}")


def m_device(rng: random.Random, inp: Input) -> None:
    props = inp.doc.get("deviceProperties")
    if not isinstance(props, list) or not props:
        props = inp.doc["deviceProperties"] = [{"id": 0, "name": "GPU", "totalGlobalMem": 1 << 34}]
    entry = rng.choice(props)
    if isinstance(entry, dict):
        key = rng.choice([*entry, "totalGlobalMem", "id", "numSms", "computeMajor"])
        entry[key] = _value(rng, inp)
        inp.notes.append(f"deviceProperties.{key}")


def m_top(rng: random.Random, inp: Input) -> None:
    key = rng.choice(["INFO", "WARNING", "ERROR", "baseTimeNanoseconds", "schemaVersion"])
    if key in ("INFO", "WARNING", "ERROR") and rng.random() < 0.7:
        inp.doc[key] = [
            rng.choice(
                [
                    "Record counts: " + " " * 2000 + "x",
                    "Record counts: a = 99999999999999999999, b = " + "9" * 5000,
                    "Record counts: x = 1" + ", y = 2" * 2000,
                ]
            )
        ]
    else:
        inp.doc[key] = _value(rng, inp)
    inp.notes.append(f"top.{key}")


MUTATORS: list[Callable[[random.Random, Input], None]] = [
    m_event_value,
    m_event_value,
    m_args_value,
    m_args_value,
    m_name,
    m_drop_key,
    m_duplicate,
    m_phase,
    m_distributed,
    m_device,
    m_top,
]


#: Base traces: the sample_logs traces of at most this stored size (parsed at each
#: start, so the fixed-budget test spends its time on inputs) ...
BASE_MAX_STORED_BYTES = 120_000
#: ... and these larger ones (a DDP rank with NCCL collectives and a straggler).
BASE_EXTRA = ("ddp2_straggler/rank0.",)


_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def _coherent_pick(events: list[Any], n: int) -> list[Any]:
    """About ``n`` non-metadata events that still form a small trace of every kind: the
    first 3 ``ProfilerStep#`` annotations, the first GPU events (``n // 4``) and the
    first 2 NCCL kernels, the runtime calls and flow events that share their
    ``correlation``, the CPU ops whose ``External id`` those calls carry, then the first
    other events up to ``n``; in the file's order. (The first ``n`` events of a Kineto
    trace are CPU ops alone: a small input needs its kernels picked.)"""

    def args(e: Any) -> dict[str, Any]:
        a = e.get("args") if isinstance(e, dict) else None
        return a if isinstance(a, dict) else {}

    rows = [e for e in events if isinstance(e, dict)]
    keep: set[int] = set()
    steps = [i for i, e in enumerate(rows) if str(e.get("name", "")).startswith("ProfilerStep#")]
    keep.update(steps[:3])
    gpu = [i for i, e in enumerate(rows) if e.get("cat") in _GPU_CATS]
    nccl = [i for i in gpu if "nccl" in str(rows[i].get("name", "")).lower()]
    keep.update(gpu[: max(1, n // 4)] + nccl[:2])
    corr = {args(rows[i]).get("correlation") for i in keep} - {None}
    linked = [
        i
        for i, e in enumerate(rows)
        if args(e).get("correlation") in corr or (e.get("cat") == "ac2g" and e.get("id") in corr)
    ]
    keep.update(linked)
    external = {args(rows[i]).get("External id") for i in linked} - {None}
    keep.update(
        i
        for i, e in enumerate(rows)
        if e.get("cat") in ("cpu_op", "user_annotation") and args(e).get("External id") in external
    )
    for i in range(len(rows)):
        if len(keep) >= n:
            break
        keep.add(i)
    return [rows[i] for i in sorted(keep)]


def base_traces(events: int = BASE_EVENTS, coherent: bool = False) -> list[bytes]:
    """The metadata events and first ``events`` other events (and every top-level key)
    of the small ``sample_logs`` traces (:data:`BASE_MAX_STORED_BYTES`,
    :data:`BASE_EXTRA`) (``coherent``: :func:`_coherent_pick`'s ``events`` instead of
    the first), each as msgspec JSON bytes (decoded afresh per input: a deep
    copy for a fraction of ``copy.deepcopy``'s time)."""
    import msgspec

    files = [
        path
        for path in sorted((REPO / "sample_logs").rglob("*.pt.trace.json*"))
        if path.stat().st_size <= BASE_MAX_STORED_BYTES
        or any(mark in str(path) for mark in BASE_EXTRA)
    ]
    bases = []
    for path in files:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as fh:  # type: ignore[operator]
            doc = json.load(fh)
        all_events = doc.get("traceEvents", [])
        # every metadata event and a stretch of the rest (steps, ops, kernels)
        meta = [e for e in all_events if isinstance(e, dict) and e.get("ph") == "M"]
        rest = [e for e in all_events if not (isinstance(e, dict) and e.get("ph") == "M")]
        doc["traceEvents"] = meta + (_coherent_pick(rest, events) if coherent else rest[:events])
        bases.append(msgspec.json.encode(doc))
    if not bases:
        raise SystemExit("no base traces found under sample_logs/")
    return bases


def make_input(rng: random.Random, bases: list[bytes]) -> Input:
    import msgspec

    inp = Input(msgspec.json.decode(rng.choice(bases)))
    for _ in range(rng.randint(1, 4)):
        rng.choice(MUTATORS)(rng, inp)
    return inp


def write_input(inp: Input, rng: random.Random, folder: Path) -> Path:
    """The input as a file: plain, or 1-3 gzip members cut at random bytes."""
    data = inp.text().encode("utf-8", "surrogatepass")
    roll = rng.random()
    if roll < 0.4:
        path = folder / "w.1.pt.trace.json"
        path.write_bytes(data)
        return path
    cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randint(0, 2)))
    bounds = [0, *cuts, len(data)]
    path = folder / "w.1.pt.trace.json.gz"
    members = (gzip.compress(data[a:b], compresslevel=1) for a, b in itertools.pairwise(bounds))
    path.write_bytes(b"".join(members))
    inp.notes.append(f"gzip members={len(bounds) - 1}")
    return path


@dataclass
class Result:
    inputs: int = 0
    summaries: int = 0
    trace_errors: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    slowest_s: float = 0.0


def _untyped(exc: BaseException, where: str = "") -> str:
    tb = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{where}{type(exc).__name__}: {str(exc)[:200]} at {tb.filename}:{tb.lineno}"


def check_one(
    path: Path, surfaces: bool = False, rng: random.Random | None = None
) -> tuple[str, str | None]:
    """``("summary" | "<TraceError subclass>", failure or None)`` for one file; with
    ``surfaces``, a summary also goes through :func:`check_surfaces` (``rng``: its
    forged numbers)."""
    import msgspec

    from tb_kineto_insights import schema
    from tb_kineto_insights.summary import summarize_file
    from tb_kineto_insights.trace.errors import TraceError

    try:
        summary = summarize_file(str(path))
    except TraceError as exc:
        return type(exc).__name__, None
    except Exception as exc:  # noqa: BLE001 (what the fuzzer looks for)
        return "untyped", _untyped(exc)
    try:
        decoded = schema.summary_decoder().decode(msgspec.json.encode(summary))
    except (msgspec.ValidationError, msgspec.EncodeError, TypeError, ValueError) as exc:
        return "schema", f"summary fails its schema: {str(exc)[:200]}"
    if surfaces:
        failure = check_surfaces(path, decoded, rng or random.Random(0))
        if failure is not None:
            return "untyped", failure
    return "summary", None


#: Numbers a forged cache entry holds (:func:`forge_numbers`).
HOSTILE_NUMBERS: list[Any] = [
    1e308, -1e308, 0, 0.0, -1, 3 * 10**7, 2**62, 2**63 - 1, 1e-308, 5e-324, 10**18
]  # fmt: skip


@functools.cache
def _base_summary() -> Any:
    """A real summary to diff against: the first base trace's (cached per process)."""
    from tb_kineto_insights.summary import summarize_file

    [path] = sorted((REPO / "sample_logs" / "memory_fixed").glob("*.pt.trace.json*"))
    return summarize_file(str(path))


def _number_paths(doc: Any, path: list[Any], out: list[list[Any]]) -> None:
    if len(path) > 12:  # metadata copied from the file may nest 1,000 deep: no panel does
        return
    if isinstance(doc, dict):
        for key, value in doc.items():
            _number_paths(value, [*path, key], out)
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:6]):
            _number_paths(value, [*path, i], out)
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        out.append(path)


def forge_numbers(doc: Any, rng: random.Random) -> None:
    """Set 1-3 numbers of a summary's plain JSON ``doc`` (in place; at most 12 levels
    deep, the first 6 items of a list) to :data:`HOSTILE_NUMBERS`, an integer field to
    an integer: what a forged cache entry can hold and still fit the schema."""
    paths: list[list[Any]] = []
    _number_paths(doc, [], paths)
    for _ in range(rng.randint(1, 3) if paths else 0):
        at = rng.choice(paths)
        holder = doc
        for key in at[:-1]:
            holder = holder[key]
        value: Any = rng.choice(HOSTILE_NUMBERS)
        if isinstance(holder[at[-1]], int) and isinstance(value, float):
            value = 2**63 - 1 if not math.isfinite(value) or abs(value) > 2**63 else int(value)
        holder[at[-1]] = value


def check_surfaces(path: Path, summary: Any, rng: random.Random) -> str | None:
    """The surfaces past the summary, on one fuzzed input (issue 47): the summary passes
    the cache's range checks (``store.checked.summary_problem``: else every read of it
    from a cache would drop it and compute it again); the window cut of
    its first step (``window_of_step``: a TraceError or ValueError at most); the diff of
    its summary against a real one, both ways, and the run view of the two; the same
    with its summary forged as a cache entry could be (1-3 numbers set to
    :data:`HOSTILE_NUMBERS`, kept when it fits the schema and passes
    ``store.checked.summary_problem``, as a read from the cache would). The first
    untyped error as a failure line, else None."""
    import msgspec

    from tb_kineto_insights import schema
    from tb_kineto_insights.compare.diff import diff
    from tb_kineto_insights.service.windows import window_of_step
    from tb_kineto_insights.store.checked import summary_problem
    from tb_kineto_insights.summary import summarize_run
    from tb_kineto_insights.trace.errors import TraceError

    problem = summary_problem(summary)
    if problem is not None:  # what the analysis made must pass the cache's own checks
        return f"a genuine summary fails the cache's range checks: {problem}"
    steps = [int(s.number) for s in summary.steps.steps] if summary.steps.steps else [0]
    try:
        window_of_step(str(path), steps[0])
    except (TraceError, ValueError):
        pass
    except Exception as exc:  # noqa: BLE001
        return _untyped(exc, "window: ")
    doc = msgspec.to_builtins(summary)
    forge_numbers(doc, rng)
    sides = [("as read", summary)]
    try:
        forged = schema.summary_decoder().decode(msgspec.json.encode(doc))
        if summary_problem(forged) is None:
            sides.append(("forged", forged))
    except msgspec.ValidationError:
        pass
    base = _base_summary()
    for what, side in sides:
        try:
            diff([("base/1", base)], [("fuzz/1", side)])
            diff([("fuzz/1", side)], [("base/1", base)])
            msgspec.json.encode(summarize_run([("w0", base), ("w1", side)]))
        except ValueError:
            pass
        except Exception as exc:  # noqa: BLE001
            return _untyped(exc, f"diff/run view ({what}): ")
    return None


def replay(
    seed: int,
    index: int,
    events: int = BASE_EVENTS,
    coherent: bool = False,
    surfaces: bool = False,
) -> tuple[str, str | None, list[str]]:
    """Input ``index`` of the run from ``seed`` (with ``events`` per base trace) alone:
    ``(kind, failure, mutations)`` as :func:`check_one` gives them (a failure found in a
    long run becomes a test)."""
    bases = base_traces(events, coherent)
    rng = random.Random(seed * 1_000_003 + index)
    inp = make_input(rng, bases)
    with tempfile.TemporaryDirectory(prefix="fuzz-structured-") as tmp:
        kind, failure = check_one(write_input(inp, rng, Path(tmp)), surfaces, rng)
    return kind, failure, inp.notes


class _HardTimeout(BaseException):
    """Raised by SIGALRM in an input past :data:`HARD_SECONDS` (a BaseException, so no
    ``except Exception`` in the code under test swallows it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise _HardTimeout


def _scratch_dir() -> str | None:
    """``/dev/shm`` where there is one (inputs never touch a disk), else the default."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run(
    count: int,
    seed: int,
    seconds: float | None = None,
    out: Any = None,
    *,
    events: int = BASE_EVENTS,
    coherent: bool = False,
    worker: int = 0,
    workers: int = 1,
    surfaces: bool = False,
) -> Result:  # pragma: no cover - exercised by the test on a budget
    """Fuzz inputs ``worker, worker + workers, ...`` below ``count`` (or until ``seconds``
    pass) from ``seed``; one RNG per input (``random.Random(seed * 1_000_003 + i)``), so
    any failure is replayed alone (:func:`replay`)."""
    started = time.monotonic()  # (the budget includes parsing the base traces)
    bases = base_traces(events, coherent)
    result = Result()
    hard_alarm = threading.current_thread() is threading.main_thread()
    if hard_alarm:
        signal.signal(signal.SIGALRM, _alarm)
    with tempfile.TemporaryDirectory(prefix="fuzz-structured-", dir=_scratch_dir()) as tmp:
        folder = Path(tmp)
        for i in range(worker, count, workers):
            if seconds is not None and time.monotonic() - started > seconds:
                break
            rng = random.Random(seed * 1_000_003 + i)
            inp = make_input(rng, bases)
            path = write_input(inp, rng, folder)
            t0 = time.monotonic()
            if hard_alarm:
                signal.alarm(HARD_SECONDS)
            try:
                kind, failure = check_one(path, surfaces, rng)
            except _HardTimeout:
                kind, failure = "untyped", f"still running after {HARD_SECONDS} s (stopped)"
            finally:
                if hard_alarm:
                    signal.alarm(0)
            took = time.monotonic() - t0
            path.unlink()
            result.inputs += 1
            result.slowest_s = max(result.slowest_s, took)
            if kind == "summary":
                result.summaries += 1
            elif failure is None:
                result.trace_errors[kind] += 1
            if took > MAX_SECONDS:
                failure = (failure + "; " if failure else "") + f"took {took:.1f} s"
            if failure is not None:
                made = f"seed {seed}, events {events}{', coherent' if coherent else ''}"
                line = f"input {i} ({made}): {failure} [{', '.join(inp.notes)}]"
                result.failures.append(line)
                if out is not None:
                    print(line, file=out, flush=True)
    return result


def _run_worker(job: tuple[int, int, float | None, int, bool, int, int, bool]) -> Result:
    count, seed, seconds, events, coherent, worker, workers, surfaces = job
    return run(
        count,
        seed,
        seconds,
        sys.stdout,
        events=events,
        coherent=coherent,
        worker=worker,
        workers=workers,
        surfaces=surfaces,
    )


def run_parallel(
    count: int,
    seed: int,
    seconds: float | None,
    *,
    events: int,
    coherent: bool,
    workers: int,
    surfaces: bool = False,
) -> Result:  # pragma: no cover - the device run
    """:func:`run` over ``workers`` forked processes (one index space, split by residue),
    their results added."""
    import multiprocessing

    jobs = [(count, seed, seconds, events, coherent, w, workers, surfaces) for w in range(workers)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.map(_run_worker, jobs, chunksize=1)
    total = Result()
    for part in parts:
        total.inputs += part.inputs
        total.summaries += part.summaries
        total.trace_errors.update(part.trace_errors)
        total.failures.extend(part.failures)
        total.slowest_s = max(total.slowest_s, part.slowest_s)
    return total


def main() -> int:  # pragma: no cover
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--events", type=int, default=BASE_EVENTS)
    parser.add_argument("--coherent", action="store_true", help="pick kernels and their calls")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--surfaces",
        action="store_true",
        help="also the window cut, the diff and the run view, and forged cache entries",
    )
    args = parser.parse_args()
    os.environ.setdefault("KINETO_INSIGHTS_READ_WORKERS", "1")
    started = time.monotonic()
    if args.workers > 1:
        result = run_parallel(
            args.count,
            args.seed,
            args.seconds,
            events=args.events,
            coherent=args.coherent,
            workers=args.workers,
            surfaces=args.surfaces,
        )
    else:
        result = run(
            args.count,
            args.seed,
            args.seconds,
            out=sys.stdout,
            events=args.events,
            coherent=args.coherent,
            surfaces=args.surfaces,
        )
    print(
        f"{result.inputs} inputs (seed {args.seed}, events {args.events}"
        f"{' coherent' if args.coherent else ''}{' surfaces' if args.surfaces else ''}, "
        f"workers {args.workers}) in {time.monotonic() - started:.0f} s: "
        f"{result.summaries} summaries, trace errors {dict(result.trace_errors)}, "
        f"{len(result.failures)} failures, slowest {result.slowest_s:.2f} s"
    )
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
