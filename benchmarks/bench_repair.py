"""Repair and salvage cost on pathological inputs, against a clean file of the same size.

Builds, in a temporary folder, pairs of traces of about the same uncompressed size:

1. ``no_boundary``: one event whose ``args`` hold a list of small objects with Windows
   paths (``{"file": "C:\\work\\m.py"}, {...}`` over ~27 MB: many ``}, {`` that are not
   event boundaries, each cut lands inside the event and the JSON needs repair), gzip;
   clean twin: the same bytes with escaped backslashes;
2. ``windows_paths``: ~54 MB of ordinary events whose names hold lone backslashes
   (``C:\\work\\model.py(12): forward``); clean twin: escaped backslashes;
3. ``damaged``: the clean ~54 MB trace with a raw quote in one name every 1,000 events
   (salvage resumes after each); clean twin: the clean trace.

Prints, per input: JSON MB, best-of-N read time, the clean twin's time and the ratio.
Target (issue 13 §6): every ratio within 3x (repair work linear in the input).

    python benchmarks/bench_repair.py [--repeat 3] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from pathlib import Path

from tb_kineto_insights.trace.reader import read_trace


def _event(i: int, name: str) -> str:
    ts = 1_000_000 + 10 * i
    return (
        f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": {ts}, '
        f'"dur": 3, "args": {{"External id": {i}}}}}'
    )


def no_boundary(target_bytes: int, escaped: bool) -> bytes:
    path = "C:\\\\work\\\\m.py" if escaped else "C:\\work\\m.py"
    item = f'{{"file": "{path}", "line": 12}}'
    n = target_bytes // (len(item) + 2)
    body = ", ".join([item] * n)
    big = (
        '{"ph": "X", "cat": "cpu_op", "name": "big", "pid": 1, "tid": 1, "ts": 1000000, '
        '"dur": 5, "args": {"frames": [' + body + "]}}"
    )
    events = [big] + [_event(i, "aten::add") for i in range(1, 1000)]
    return ('{"traceEvents": [' + ", ".join(events) + "]}").encode()


def windows_paths(target_bytes: int, escaped: bool, raw_quote_every: int = 0) -> bytes:
    sep = "\\\\" if escaped else "\\"
    name = f"C:{sep}work{sep}project{sep}model.py(12): forward"
    one = len(_event(0, name)) + 2
    events = []
    for i in range(target_bytes // one):
        if raw_quote_every and i % raw_quote_every == raw_quote_every - 1:
            events.append(_event(i, 'bad "quote" name'))
        else:
            events.append(_event(i, name))
    return ('{"traceEvents": [' + ", ".join(events) + "]}").encode()


def best_of(path: Path, repeat: int) -> tuple[float, int]:
    best = float("inf")
    events = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        tr = read_trace(str(path))
        best = min(best, time.perf_counter() - t0)
        events = tr.health.event_count
    return best, events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply input sizes")
    args = ap.parse_args()
    mb = 1024 * 1024
    cases = [
        ("no_boundary", lambda e: no_boundary(int(27.7 * mb * args.scale), e), True),
        ("windows_paths", lambda e: windows_paths(int(54 * mb * args.scale), e), False),
        (
            "damaged",
            lambda e: windows_paths(int(54 * mb * args.scale), True, 0 if e else 1000),
            False,
        ),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'input':<15}{'JSON MB':>9}{'events':>9}{'time s':>9}{'clean s':>9}{'ratio':>7}")
        for label, build, gz in cases:
            times = []
            events = 0
            size = 0
            for escaped in (False, True):
                data = build(escaped)
                size = len(data)
                p = Path(tmp) / f"{label}_{int(escaped)}.pt.trace.json{'.gz' if gz else ''}"
                p.write_bytes(gzip.compress(data, 6) if gz else data)
                t, n = best_of(p, args.repeat)
                times.append(t)
                if not escaped:
                    events = n
            ratio = times[0] / times[1]
            print(
                f"{label:<15}{size / mb:>9.1f}{events:>9}{times[0]:>9.2f}{times[1]:>9.2f}"
                f"{ratio:>7.1f}"
            )


if __name__ == "__main__":
    main()
