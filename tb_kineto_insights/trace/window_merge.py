"""The windows of one step of several ranks → one trace, for Perfetto UI or chrome://tracing.

Every event of every rank's cut (:func:`~tb_kineto_insights.trace.window.cut_window`) is
kept as it is but for its process id and, for flows, its id: each rank's processes are
renumbered so that no two ranks share a ``pid``, and named and sorted after the rank;
flow ids are made distinct per rank. Timestamps are the files' own.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tb_kineto_insights.trace.window import WindowCut, id_key


def merge_windows(parts: list[tuple[str, WindowCut]]) -> dict[str, Any]:
    """One trace of the windows of several ranks (``parts``: ``(rank label, its cut)``,
    in the order to show), for Perfetto UI or chrome://tracing: every event of every cut
    kept, each rank's processes renumbered so that no two ranks share a ``pid`` (1, 2,
    … in order of appearance), their ``process_name`` prefixed with the rank's label
    (``"rank1: python 1234"``; a process without one is named ``"rank1: pid 1234"``) and
    sorted by rank (``process_sort_index``), and flow ids made distinct per rank (an
    integer id plus ``k · 2^40`` for the k-th rank, a string prefixed ``"r<k>:"``).
    Timestamps are the files' own: ranks of one host share its clock; ranks on several
    hosts are as aligned as their clocks are. Top-level keys: ``traceEvents``,
    ``deviceProperties`` of the first cut that has them, and ``traceName``.

    Raises:
        ValueError: no parts.
    """
    if not parts:
        raise ValueError("no windows to merge")
    events: list[Any] = []
    pids: dict[tuple[int, Any], int] = {}
    named: set[int] = set()
    for k, (label, cut) in enumerate(parts):
        for raw in cut.document.get("traceEvents", []):
            event = msgspec.json.decode(raw) if isinstance(raw, msgspec.Raw) else dict(raw)
            if not isinstance(event, dict):
                continue
            key = (k, id_key(event.get("pid")))
            pid = pids.get(key)
            if pid is None:
                pid = pids[key] = len(pids) + 1
            original = event.get("pid")
            event["pid"] = pid
            if event.get("ph") == "M" and event.get("name") == "process_name":
                given = event.get("args")
                args: dict[str, Any] = given if isinstance(given, dict) else {}
                event["args"] = {**args, "name": f"{label}: {args.get('name', original)}"}
                named.add(pid)
            elif event.get("ph") == "M" and event.get("name") == "process_sort_index":
                continue  # replaced: by rank
            if "id" in event and event.get("ph") in ("s", "t", "f"):
                fid = event["id"]
                event["id"] = fid + k * 2**40 if type(fid) is int else f"r{k}:{fid}"
            events.append(event)
    for (k, original), pid in pids.items():
        if pid not in named:
            label = parts[k][0]
            events.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": pid,
                    "args": {"name": f"{label}: pid {original}"},
                }
            )
        events.append(
            {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}
        )
    out: dict[str, Any] = {"traceEvents": events}
    device = next(
        (c.document["deviceProperties"] for _, c in parts if "deviceProperties" in c.document),
        None,
    )
    if device is not None:
        out["deviceProperties"] = device
    out["traceName"] = "ranks: " + ", ".join(label for label, _ in parts)
    return out
