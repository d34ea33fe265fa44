"""Make a larger Kineto trace from a real one by repeating its ProfilerStep window.

    python benchmarks/scale_trace.py SRC.json[.gz] -o OUT.json.gz (--repeat N | --target-mb MB)

The *window* is ``[W0, W1)``: from the start of the first ``ProfilerStep#K`` event to
the end of the last one (host timestamps, µs). An event belongs to the window by its
own ``ts``, except GPU work (anything whose ``args.correlation`` names a host
runtime/driver launch) and flow ends, which go with their launch / ``s`` end. The
period of one copy is ``P = max(W1, end of the window's last event) - W0`` (GPU work
may run on after the last step's host end). The output holds, in this order:

* every event before ``W0`` and every ``ph: "M"`` metadata event, unchanged;
* the window's events (every phase: host ops, kernels, memcpy, ``[memory]`` instants,
  flow ``s``/``f``) ``N`` times; copy ``k`` (``k = 0 … N-1``) has ``ts + k·P``,
  so the steps follow each other as in a longer run, ``ProfilerStep#K`` renumbered to
  ``K + k·S`` (``S`` = steps in the window), and every id the analysis matches on
  offset by ``k·(max + 1)`` of that id over the file: flow ``id``, ``args.correlation``,
  ``args.External id``, ``args.Seq`` (so correlation and flow links stay unique);
* the events after the window shifted by ``(N-1)·P``.

Copy 0 is the original window, so ``--repeat 1`` rewrites the trace unchanged (event
order aside). Numbers keep their literal digits: floats are decoded as ``Decimal`` and
written back as JSON numbers, so exact-ns epoch timestamps stay exact.

``--target-mb MB`` picks ``N`` so that the uncompressed output is about ``MB`` MiB:
``N = max(1, round((MB·2^20 - outside) / window))`` with ``outside`` / ``window`` the
encoded bytes of the events outside / inside the window.

The output is streamed: the source is held once (as Python objects), each copy is
encoded in batches and written through gzip, so memory does not grow with ``N``.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
#: ``args`` keys whose values link events to each other; offset per copy.
LINK_ARGS: tuple[str, ...] = ("correlation", "External id", "Seq")
BATCH_EVENTS = 20_000

_decoder = msgspec.json.Decoder(float_hook=Decimal)
_encoder = msgspec.json.Encoder(decimal_format="number")


class ScaleError(Exception):
    """The source cannot be scaled (not a trace, or no ProfilerStep window)."""


def load(path: Path) -> dict[str, Any]:
    """The source trace as a dict (floats as ``Decimal``).

    Raises:
        ScaleError: not a JSON object with a ``traceEvents`` list.
    """
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        doc = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise ScaleError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ScaleError(f"{path}: no traceEvents list")
    return doc


def _num(v: object) -> Decimal | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, Decimal)):
        return Decimal(v)
    return None


def window(events: list[dict[str, Any]]) -> tuple[Decimal, Decimal, int]:
    """``(W0, W1, steps)``: the ProfilerStep window in µs and how many steps it holds.

    Raises:
        ScaleError: no ``ProfilerStep#K`` duration event.
    """
    starts, ends, numbers = [], [], set()
    for e in events:
        name = e.get("name")
        if e.get("ph") != "X" or not isinstance(name, str):
            continue
        match = STEP_RE.match(name)
        ts, dur = _num(e.get("ts")), _num(e.get("dur"))
        if match is None or ts is None or dur is None:
            continue
        starts.append(ts)
        ends.append(ts + dur)
        numbers.add(int(match.group(1)))
    if not starts:
        raise ScaleError("no ProfilerStep#K events: nothing to repeat")
    return min(starts), max(ends), max(numbers) - min(numbers) + 1


def _max_link(events: list[dict[str, Any]]) -> dict[str, int]:
    """Largest integer value of each link id (flow ``id`` and :data:`LINK_ARGS`)."""
    top = {key: 0 for key in ("id", *LINK_ARGS)}
    for e in events:
        v = e.get("id")
        if isinstance(v, int) and not isinstance(v, bool):
            top["id"] = max(top["id"], v)
        args = e.get("args")
        if isinstance(args, dict):
            for key in LINK_ARGS:
                v = args.get(key)
                if isinstance(v, int) and not isinstance(v, bool):
                    top[key] = max(top[key], v)
    return top


def _shift(e: dict[str, Any], dt: Decimal, offsets: dict[str, int], step_add: int) -> dict:
    out = dict(e)
    ts = e.get("ts")
    if isinstance(ts, (int, Decimal)) and not isinstance(ts, bool):
        out["ts"] = ts + dt
    v = e.get("id")
    if isinstance(v, int) and not isinstance(v, bool) and offsets["id"]:
        out["id"] = v + offsets["id"]
    name = e.get("name")
    if step_add and isinstance(name, str) and name.startswith("ProfilerStep#"):
        match = STEP_RE.match(name)
        if match:
            out["name"] = f"ProfilerStep#{int(match.group(1)) + step_add}"
    args = e.get("args")
    if isinstance(args, dict) and any(k in args for k in LINK_ARGS):
        args = dict(args)
        for key in LINK_ARGS:
            v = args.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and offsets[key]:
                args[key] = v + offsets[key]
        out["args"] = args
    return out


def _launch_ts(events: list[dict[str, Any]]) -> tuple[dict[int, Decimal], dict[int, Decimal]]:
    """(correlation → ts of the host launch (runtime/driver event), flow id → ts of its
    ``s`` end): GPU work and flow ends go with the copy of the step that launched them."""
    corr: dict[int, Decimal] = {}
    flow: dict[int, Decimal] = {}
    for e in events:
        ts = _num(e.get("ts"))
        if ts is None:
            continue
        if e.get("ph") == "s" and isinstance(e.get("id"), int):
            flow.setdefault(e["id"], ts)
        cat = str(e.get("cat", "")).lower()
        args = e.get("args")
        if cat.endswith("runtime") or cat.endswith("driver"):
            c = args.get("correlation") if isinstance(args, dict) else None
            if isinstance(c, int):
                corr.setdefault(c, ts)
    return corr, flow


def _key_ts(
    e: dict[str, Any], corr: dict[int, Decimal], flow: dict[int, Decimal]
) -> Decimal | None:
    """The time that decides which part an event belongs to: its launch's for GPU work
    and flow ends, else its own ``ts``."""
    if e.get("ph") in ("s", "f", "t") and e.get("id") in flow:
        return flow[e["id"]]
    args = e.get("args")
    c = args.get("correlation") if isinstance(args, dict) else None
    if isinstance(c, int) and c in corr:
        return corr[c]
    return _num(e.get("ts"))


def _split(
    events: list[dict[str, Any]], w0: Decimal, w1: Decimal
) -> tuple[list[dict], list[dict], list[dict], Decimal]:
    """(before: metadata and ts < W0, inside: W0 <= ts < W1, after: ts >= W1, span):
    GPU work is placed by its launch's ``ts``; ``span`` = ``max(W1, end of the last
    inside event) - W0``, so copies of GPU work that lags its launch never overlap."""
    corr, flow = _launch_ts(events)
    before, inside, after = [], [], []
    end = w1
    for e in events:
        ts = _key_ts(e, corr, flow)
        if e.get("ph") == "M" or ts is None or ts < w0:
            before.append(e)
        elif ts < w1:
            inside.append(e)
            own, dur = _num(e.get("ts")), _num(e.get("dur"))
            if own is not None:
                end = max(end, own + (dur or 0))
        else:
            after.append(e)
    return before, inside, after, end - w0


def _encoded_size(events: list[dict[str, Any]]) -> int:
    return sum(len(_encoder.encode(e)) + 2 for e in events)


def scaled_events(doc: dict[str, Any], repeat: int) -> tuple[Iterator[list[dict[str, Any]]], int]:
    """Batches of the scaled trace's events, and the number of steps in the window."""
    events = doc["traceEvents"]
    w0, w1, steps = window(events)
    top = _max_link(events)
    before, inside, after, span = _split(events, w0, w1)

    def batches() -> Iterator[list[dict[str, Any]]]:
        yield before
        for k in range(repeat):
            offsets = {key: k * (top[key] + 1) for key in top}
            dt = span * k
            for i in range(0, len(inside), BATCH_EVENTS):
                chunk = inside[i : i + BATCH_EVENTS]
                yield chunk if k == 0 else [_shift(e, dt, offsets, k * steps) for e in chunk]
        last = {key: (repeat - 1) * (top[key] + 1) for key in top}
        yield [_shift(e, span * (repeat - 1), last, (repeat - 1) * steps) for e in after]

    return batches(), steps


def repeat_for_target(doc: dict[str, Any], target_mb: float) -> int:
    """``N`` that makes the uncompressed output about ``target_mb`` MiB."""
    events = doc["traceEvents"]
    w0, w1, _ = window(events)
    before, inside, after, _ = _split(events, w0, w1)
    inside_bytes = max(1, _encoded_size(inside))
    outside = _encoded_size(before) + _encoded_size(after)
    return max(1, round((target_mb * 2**20 - outside) / inside_bytes))


def write_scaled(doc: dict[str, Any], out: Path, repeat: int, level: int = 6) -> int:
    """Write the scaled trace to ``out`` (gzip when it ends in ``.gz``); returns the
    uncompressed bytes written."""
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    batches, _ = scaled_events(doc, repeat)
    written = 0
    gz = out.name.endswith(".gz")
    with gzip.open(out, "wb", compresslevel=level) if gz else open(out, "wb") as f:
        prefix = _encoder.encode(head)[:-1]
        text = prefix + (b', "traceEvents": [\n' if head else b'"traceEvents": [\n')
        f.write(text)
        written += len(text)
        first = True
        for batch in batches:
            if not batch:
                continue
            body = b",\n".join(_encoder.encode(e) for e in batch)
            text = (b"" if first else b",\n") + body
            first = False
            f.write(text)
            written += len(text)
        f.write(b"\n]}\n")
        written += 4
    return written


def main(argv: list[str] | None = None) -> int:
    """CLI entry; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("-o", "--out", type=Path, required=True)
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--repeat", type=int, help="copies of the ProfilerStep window (>= 1)")
    how.add_argument("--target-mb", type=float, help="about this many MiB of JSON")
    parser.add_argument("--level", type=int, default=6, help="gzip level (default 6)")
    args = parser.parse_args(argv)
    try:
        doc = load(args.src)
        repeat = args.repeat if args.repeat else repeat_for_target(doc, args.target_mb)
        if repeat < 1:
            raise ScaleError("--repeat must be >= 1")
        written = write_scaled(doc, args.out, repeat, args.level)
    except (ScaleError, OSError) as exc:
        print(f"scale_trace: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {repeat} copies, {written / 2**20:.1f} MiB of JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
