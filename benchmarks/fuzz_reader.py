"""Seeded mutation fuzzing of the reader: ``read_trace`` must return a ``Trace`` or raise
a ``TraceError``, whatever the bytes.

Each input is a small real-shaped trace (built here, or the first events of a given
file) with 1-3 mutations: a ``ts``/``dur``/``args``/id value replaced by another JSON
type or a huge number (``1e400``, ``-1e300``, 20-digit integers), a cut at any byte
(also of the gzip), a stray ``[`` ``]`` ``{`` ``}`` ``"`` ``,`` or ``:``, deep nesting, a
deleted range, a flipped byte, bare ``NaN``, raw control characters, a duplicated range.

Prints the count of inputs, how many returned a Trace, how many raised each TraceError
subclass, and every other exception (type, message, seed) — the last must be none.

    python benchmarks/fuzz_reader.py [--count 100000] [--seed 0] [--base FILE]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import random
import tempfile
import time
import traceback

from tb_kineto_insights.trace.errors import TraceError
from tb_kineto_insights.trace.reader import read_trace

VALUES = [
    '"a"',
    '""',
    "1e400",
    "-1e400",
    "1e300",
    "-1e300",
    "123456789012345678901234",
    "-0",
    "null",
    "true",
    "[]",
    "{}",
    "[1, [2]]",
    '{"x": {"y": []}}',
    "NaN",
    "Infinity",
    "0.000001",
    "5000000000.123456789",
    '"0x7"',
    '"\\u0000"',
]
STRAY = ["[", "]", "{", "}", '"', ",", ":", "\\", "\n", "\x00", "NaN", "N/A", "\xff"]


def base_trace(n: int = 40) -> bytes:
    """A small Kineto-shaped trace: steps, CPU ops, launches, kernels, flows, memory."""
    events: list[dict[str, object]] = []
    t = 5_000_000_000.0
    for i in range(n):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": 100.0,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": t + 1,
                "dur": 20.0,
                "args": {"External id": i, "Input Dims": [[2, 3], [3, 4]]},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": t + 2,
                "dur": 5.0,
                "args": {"correlation": i, "External id": i},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "sgemm",
                "pid": 0,
                "tid": 7,
                "ts": t + 10,
                "dur": 50.0,
                "args": {
                    "device": 0,
                    "stream": 7,
                    "correlation": i,
                    "Collective name": "allreduce",
                    "In msg nelems": 4,
                },
            }
        )
        events.append(
            {"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": t + 2, "cat": "ac2g", "name": "ac2g"}
        )
        events.append(
            {
                "ph": "f",
                "id": i,
                "pid": 0,
                "tid": 7,
                "ts": t + 10,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
        events.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": t + 3,
                "s": "t",
                "args": {
                    "Bytes": 512,
                    "Total Allocated": 1024 * i,
                    "Total Reserved": 4096,
                    "Device Type": 1,
                    "Device Id": 0,
                    "Addr": 1000 + i,
                },
            }
        )
        t += 100.0
    root = {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 1},
        "traceEvents": events,
        "traceName": "x",
        "displayTimeUnit": "ms",
    }
    return json.dumps(root, indent=1).encode()


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, bool]:
    """One to three mutations of ``data``; returns (bytes, gzip them?)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(9)
        n = len(out)
        if n == 0:
            break
        pos = rng.randrange(n)
        if kind == 0:  # a value replaced
            for key in (
                b'"ts": ',
                b'"dur": ',
                b'"args": ',
                b'"id": ',
                b'"stream": ',
                b'"pid": ',
                b'"name": ',
                b'"ph": ',
                b'"cat": ',
                b'"Bytes": ',
            ):
                at = out.find(key, pos)
                if at >= 0:
                    start = at + len(key)
                    end = start
                    while end < n and out[end] not in b",}\n":
                        end += 1
                    out[start:end] = rng.choice(VALUES).encode()
                    break
        elif kind == 1:  # cut
            del out[pos:]
        elif kind == 2:  # stray token
            out[pos:pos] = rng.choice(STRAY).encode("latin-1")
        elif kind == 3:  # deep nesting
            depth = rng.choice([10, 1000, 100_000])
            out[pos:pos] = b"[" * depth + (b"]" * depth if rng.random() < 0.5 else b"")
        elif kind == 4:  # deleted range
            del out[pos : pos + rng.randint(1, 200)]
        elif kind == 5:  # flipped byte
            out[pos] ^= 1 << rng.randrange(8)
        elif kind == 6:  # duplicated range
            piece = out[pos : pos + rng.randint(1, 500)]
            out[pos:pos] = piece
        elif kind == 7:  # huge number anywhere a digit is
            at = out.find(b"5000000", pos)
            if at >= 0:
                out[at : at + 7] = rng.choice([b"1e400", b"9" * 30, b"-1e300", b"0"])
        else:  # raw control characters inside a name
            at = out.find(b'"name": "', pos)
            if at >= 0:
                out[at + 9 : at + 9] = rng.choice([b"\n", b"\t", b'"', b"\\", b"\x01"])
    return bytes(out), rng.random() < 0.2


def run(count: int, seed: int, base: bytes) -> dict[str, object]:
    """Fuzz ``count`` inputs; returns the tallies (see module docstring)."""
    rng = random.Random(seed)
    ok = 0
    typed: collections.Counter[str] = collections.Counter()
    untyped: list[tuple[int, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(count):
            data, gz = mutate(base, rng)
            if gz:
                data = gzip.compress(data, 1)
                if rng.random() < 0.3:
                    data = data[: rng.randrange(len(data) + 1)]
            path = os.path.join(tmp, f"f{i % 8}.pt.trace.json" + (".gz" if gz else ""))
            with open(path, "wb") as f:
                f.write(data)
            try:
                read_trace(path)
                ok += 1
            except TraceError as exc:
                typed[type(exc).__name__] += 1
            except Exception as exc:  # noqa: BLE001 (this is what the fuzz looks for)
                untyped.append((i, f"{type(exc).__name__}: {exc}"[:300], traceback.format_exc()))
    return {"inputs": count, "trace": ok, "typed_errors": dict(typed), "untyped": untyped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base", help="trace file whose bytes are mutated (default: built)")
    ap.add_argument("--steps", type=int, default=8, help="steps in the built base trace")
    args = ap.parse_args()
    base = base_trace(args.steps)
    if args.base:
        with open(args.base, "rb") as f:
            raw = f.read()
        base = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    t0 = time.perf_counter()
    result = run(args.count, args.seed, base)
    untyped = result["untyped"]
    assert isinstance(untyped, list)
    print(
        f"inputs {result['inputs']}  trace {result['trace']}  "
        f"typed errors {result['typed_errors']}  untyped {len(untyped)}  "
        f"({time.perf_counter() - t0:.0f} s, seed {args.seed}, base {len(base)} bytes)"
    )
    for i, message, tb in untyped[:20]:
        print(f"--- input {i}: {message}\n{tb}")


if __name__ == "__main__":
    main()
