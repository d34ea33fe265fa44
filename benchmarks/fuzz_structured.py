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

tests/test_fuzz_structured.py runs it on a fixed budget; the overnight figure (inputs,
seed, result) goes to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import itertools
import json
import os
import random
import sys
import tempfile
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


def base_traces() -> list[dict[str, Any]]:
    """The metadata events and first :data:`BASE_EVENTS` other events (and every
    top-level key) of the small ``sample_logs`` traces (:data:`BASE_MAX_STORED_BYTES`,
    :data:`BASE_EXTRA`)."""
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
        events = doc.get("traceEvents", [])
        # every metadata event and a stretch of the rest (steps, ops, kernels)
        meta = [e for e in events if isinstance(e, dict) and e.get("ph") == "M"]
        rest = [e for e in events if not (isinstance(e, dict) and e.get("ph") == "M")]
        doc["traceEvents"] = meta + rest[:BASE_EVENTS]
        bases.append(doc)
    if not bases:
        raise SystemExit("no base traces found under sample_logs/")
    return bases


def make_input(rng: random.Random, bases: list[dict[str, Any]]) -> Input:
    inp = Input(copy.deepcopy(rng.choice(bases)))
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
    path.write_bytes(b"".join(gzip.compress(data[a:b]) for a, b in itertools.pairwise(bounds)))
    inp.notes.append(f"gzip members={len(bounds) - 1}")
    return path


@dataclass
class Result:
    inputs: int = 0
    summaries: int = 0
    trace_errors: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    slowest_s: float = 0.0


def check_one(path: Path) -> tuple[str, str | None]:
    """``("summary" | "<TraceError subclass>", failure or None)`` for one file."""
    import msgspec

    from tb_kineto_insights import schema
    from tb_kineto_insights.summary import summarize_file
    from tb_kineto_insights.trace.errors import TraceError

    try:
        summary = summarize_file(str(path))
    except TraceError as exc:
        return type(exc).__name__, None
    except Exception as exc:  # noqa: BLE001 (what the fuzzer looks for)
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        return "untyped", f"{type(exc).__name__}: {str(exc)[:200]} at {tb.filename}:{tb.lineno}"
    try:
        schema.summary_decoder().decode(msgspec.json.encode(summary))
    except (msgspec.ValidationError, msgspec.EncodeError, TypeError, ValueError) as exc:
        return "schema", f"summary fails its schema: {str(exc)[:200]}"
    return "summary", None


def replay(seed: int, index: int) -> tuple[str, str | None, list[str]]:
    """Input ``index`` of the run from ``seed`` alone: ``(kind, failure, mutations)``
    as :func:`check_one` gives them (a failure found overnight becomes a test)."""
    bases = base_traces()
    rng = random.Random(seed * 1_000_003 + index)
    inp = make_input(rng, bases)
    with tempfile.TemporaryDirectory(prefix="fuzz-structured-") as tmp:
        kind, failure = check_one(write_input(inp, rng, Path(tmp)))
    return kind, failure, inp.notes


def run(
    count: int, seed: int, seconds: float | None = None, out: Any = None
) -> Result:  # pragma: no cover - exercised by the test on a budget
    """Fuzz ``count`` inputs (or until ``seconds`` pass) from ``seed``; one RNG per input
    (``random.Random(seed * 1_000_003 + i)``), so any failure is replayed alone."""
    started = time.monotonic()  # (the budget includes parsing the base traces)
    bases = base_traces()
    result = Result()
    with tempfile.TemporaryDirectory(prefix="fuzz-structured-") as tmp:
        folder = Path(tmp)
        for i in range(count):
            if seconds is not None and time.monotonic() - started > seconds:
                break
            rng = random.Random(seed * 1_000_003 + i)
            inp = make_input(rng, bases)
            path = write_input(inp, rng, folder)
            t0 = time.monotonic()
            kind, failure = check_one(path)
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
                line = f"input {i} (seed {seed}): {failure} [{', '.join(inp.notes)}]"
                result.failures.append(line)
                if out is not None:
                    print(line, file=out, flush=True)
    return result


def main() -> int:  # pragma: no cover
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=None)
    args = parser.parse_args()
    os.environ.setdefault("KINETO_INSIGHTS_READ_WORKERS", "1")
    started = time.monotonic()
    result = run(args.count, args.seed, args.seconds, out=sys.stdout)
    print(
        f"{result.inputs} inputs (seed {args.seed}) in {time.monotonic() - started:.0f} s: "
        f"{result.summaries} summaries, trace errors {dict(result.trace_errors)}, "
        f"{len(result.failures)} failures, slowest {result.slowest_s:.2f} s"
    )
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
