"""The reader's column building (``columns.Builder``): orders and counts that its
per-distinct-key bookkeeping must reproduce exactly (names interned in first-seen
order, categories counted in first-seen order, flow phase and launch taken from the
(phase, category) pair, instants sorted by name), on tiny hand-written traces.
Real traces: ``test_reader_builder_real.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.trace.columns import Builder
from tb_kineto_insights.trace.decode import event_decoder
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.values import MISSING_ID


def _decoded(events: list[dict[str, Any]]) -> list[Any]:
    return event_decoder.decode(json.dumps(events).encode())


def test_names_are_interned_by_kind_within_a_piece_and_in_piece_order_across() -> None:
    """Within one piece, names are interned kind by kind (kinds in order of first
    appearance), each kind's events in order; a later piece adds its new names after.
    A name shared by two kinds and two categories of one kind gets one id."""
    one = [
        kernel("k1", 10, 1),
        cpu("c1", 11, 1),
        kernel("k2", 12, 1),
        cpu("k2", 13, 1),  # same name as a kernel: same id
        {**cpu("launch", 14, 1, cat="cuda_runtime")},
        {**cpu("launch", 15, 1, cat="cuda_driver")},  # runtime too: same name, same id
    ]
    two = [cpu("c2", 20, 1), kernel("k1", 21, 1), kernel("k3", 22, 1), cpu("c1", 23, 1)]
    b = Builder(exact=False)
    b.add_events(_decoded(one))
    assert list(b.names) == ["k1", "k2", "c1", "launch"]
    b.add_events(_decoded(two))
    assert list(b.names) == ["k1", "k2", "c1", "launch", "c2", "k3"]
    tables = b.tables_out()
    names = list(b.names)
    assert [names[i] for i in tables["kernel"].name.tolist()] == ["k1", "k2", "k1", "k3"]
    assert [names[i] for i in tables["cpu_op"].name.tolist()] == ["c1", "k2", "c2", "c1"]
    assert [names[i] for i in tables["runtime"].name.tolist()] == ["launch", "launch"]


def test_category_counts_keep_first_seen_order_across_pieces(tmp_path: Path) -> None:
    """Categories counted per (phase, category) pair, listed in the order their first
    event came, whatever phase brought them (as ``Counter.update`` over every event)."""
    b = Builder(exact=False)
    b.add_events(
        _decoded(
            [
                cpu("a", 1, 1),
                {"ph": "i", "cat": "cpu_instant_event", "name": "x", "ts": 2, "pid": 1, "tid": 1},
                kernel("k", 3, 1),
                {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "ts": 1, "pid": 1, "tid": 1},
            ]
        )
    )
    b.add_events(
        _decoded(
            [
                {"ph": "i", "cat": "cpu_op", "name": "y", "ts": 4, "pid": 1, "tid": 1},
                {"ph": "X", "name": "no category", "ts": 5, "dur": 1, "pid": 1, "tid": 1},
                {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "ts": 4, "pid": 0, "tid": 7},
                cpu("b", 6, 1, cat="Trace"),  # a new category, first met in this piece
                kernel("k", 7, 1),
            ]
        )
    )
    assert list(b.category_counts.items()) == [
        ("cpu_op", 2),
        ("cpu_instant_event", 1),
        ("kernel", 2),
        ("ac2g", 2),
        (None, 1),
        ("Trace", 1),
    ]
    assert b.skipped == {"missing_cat": 1}
    assert b.kind_counts == {"cpu_op": 1, "instant": 2, "kernel": 2, "flow": 2, "other": 1}


def test_flow_phase_and_launch_come_from_the_pair(tmp_path: Path) -> None:
    """``s`` → 0, ``f`` → 1, ``t`` → 2; launch for ac2g/async/async_cpu_to_gpu in any
    case, not for fwdbwd."""

    def flow(ph: str, cat: str, ts: float) -> dict[str, Any]:
        return {"ph": ph, "cat": cat, "name": cat, "id": 5, "ts": ts, "pid": 1, "tid": 2}

    events = [
        flow("s", "ac2g", 1),
        flow("f", "AC2G", 2),
        flow("t", "fwdbwd", 3),
        flow("s", "fwdbwd", 4),
        flow("f", "async_cpu_to_gpu", 5),
        kernel("k", 6, 1),
    ]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    assert tr.flows.phase.tolist() == [0, 1, 2, 0, 1]
    assert tr.flows.launch.tolist() == [True, True, False, False, True]
    assert tr.flows.ts_ns.tolist() == [1000, 2000, 3000, 4000, 5000]


def test_instants_without_a_string_name_are_memory_rows_as_before(tmp_path: Path) -> None:
    """Pins the rule the reader has always applied (``"[memory]".__eq__(name)``, whose
    NotImplemented counts as true): an instant whose name is missing or not a string
    becomes a memory row; other named instants are only counted."""
    mem = {"ph": "i", "cat": "cpu_instant_event", "ts": 1, "pid": 1, "tid": 1}
    events = [
        {**mem, "name": "[memory]", "args": {"Bytes": 512, "Total Allocated": 512}},
        {**mem, "ts": 2, "args": {"Bytes": 64}},  # no name
        {**mem, "ts": 3, "name": 7, "args": {"Bytes": 32}},  # not a string
        {**mem, "ts": 4, "name": "[memory] "},  # another name: counted only
        kernel("k", 5, 1),
    ]
    tr = read_trace(str(write_trace(tmp_path / "t.json", events)))
    assert tr.memory.bytes.tolist() == [512, 64, 32]
    assert tr.memory.total_allocated_bytes.tolist() == [512, -1, -1]
    assert tr.health.kind_counts["memory"] == 3
    assert tr.health.kind_counts["instant"] == 1


def test_id_columns_all_ints_all_missing_mixed_and_large() -> None:
    """``_ids``: ints exactly (also beyond 2^53), all ``None`` → the missing value,
    ints with ``None`` through float64, large ints with ``None`` value by value."""
    b = Builder(exact=False)
    big = 2**60 + 1
    assert b._ids([1, 2, big]).tolist() == [1, 2, big]
    assert b._ids([None, None], -1).tolist() == [-1, -1]
    assert b._ids([None, 3, 4.0], -1).tolist() == [-1, 3, 4]
    assert b._ids([big, None], -1).tolist() == [big, -1]
    assert b._ids(["0x10", None, "12"], -1).tolist() == [16, -1, 12]
    assert b.string_id_count == 2
    assert np.array_equal(b._ids([]), np.zeros(0, dtype=np.int64))


def test_string_ids_are_converted_once_per_distinct_value_in_first_seen_order() -> None:
    """``_ids`` on old Kineto thread ids: numeric and hex strings parsed, other strings
    interned as ``-1 - index`` in the order they first come, every string counted;
    ``1``, ``1.0``, ``True`` the same id, ``-2**63`` kept but ``-2.0**63`` missing (as
    :func:`_as_int` gives them one by one); an unhashable value still converts."""
    b = Builder(exact=False)
    values: list[object] = ["stream 7", "5555", "stream 7", 1, True, 1.0, None, "0x10", "b", "5555"]
    assert b._ids(values, -1).tolist() == [-1, 5555, -1, 1, 1, 1, -1, 16, -2, 5555]
    assert b.strings == {"stream 7": 0, "b": 1}
    assert b.string_id_count == 6
    assert b._ids(["b", "c", "stream 7"]).tolist() == [-2, -3, -1]
    assert b.strings == {"stream 7": 0, "b": 1, "c": 2}
    assert b._ids([[1], "c", 2**70], -1).tolist() == [-4, -3, -1]  # a list: str() interned
    assert b.string_id_count == 10
    # equal values of different types convert apart: the int is in range, the float not
    assert b._ids([-(2**63), -(2.0**63), "d"], -1).tolist() == [-(2**63), -1, -5]


def _metadata_one_by_one(events: list[Any]) -> Builder:
    ref = Builder(exact=False)
    for e in events:
        ref.kind_counts["metadata"] += 1
        ref._metadata_label(e)
    return ref


def test_metadata_names_match_the_event_by_event_path() -> None:
    """Process and thread names: the last label of an id wins, ids keep first-seen
    order, events whose label is not a string are ignored, other metadata names
    (``process_labels``, sort indexes) change nothing; the same dicts as event by event
    on ints (the vectorised path) and on string, float and huge ids (the fallback, which
    interns string ids in event order)."""

    def meta(name: str, pid: object, tid: object, label: object) -> dict[str, Any]:
        return {"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": 0, "args": {"name": label}}

    ints = [
        meta("process_name", 9, 0, "MTIA 9"),
        meta("process_labels", 9, 0, None),
        meta("thread_name", 9, 3, "queue 3"),
        meta("process_name", 2, 0, "CPU"),
        meta("process_name", 9, 0, "MTIA 9 again"),
        meta("thread_name", 9, 3, 17),  # not a string: ignored
        meta("thread_sort_index", 9, 3, "x"),
        meta("thread_name", 2, 5, "main"),
    ]
    b = Builder(exact=False)
    b.add_events(_decoded(ints))
    assert b.process_names == {9: "MTIA 9 again", 2: "CPU"}
    assert list(b.process_names) == [9, 2]
    assert b.thread_names == {(9, 3): "queue 3", (2, 5): "main"}
    assert b.kind_counts["metadata"] == 8
    ref = _metadata_one_by_one(_decoded(ints))
    assert (b.process_names, b.thread_names) == (ref.process_names, ref.thread_names)

    odd = [
        meta("process_labels", "Traces", 0, "x"),  # interned first, though no name
        meta("thread_name", 1, "stream 7", "stream"),
        meta("process_name", "Traces", 0, "traces"),
        meta("process_name", 3.0, 0, "float pid"),
        meta("process_name", 2**64, 0, "huge pid"),
    ]
    b = Builder(exact=False)
    b.add_events(_decoded(odd))
    assert b.strings == {"Traces": 0, "stream 7": 1}
    assert b.process_names == {-1: "traces", 3: "float pid", MISSING_ID: "huge pid"}
    assert b.thread_names == {(1, -2): "stream"}
    ref = _metadata_one_by_one(_decoded(odd))
    assert (b.process_names, b.thread_names, b.strings) == (
        ref.process_names,
        ref.thread_names,
        ref.strings,
    )

    # int pids, a string tid: event by event; a thread without a string label interns
    # nothing
    tids = [
        meta("thread_name", 1, "no label", None),
        meta("thread_name", 1, "stream 7", "stream"),
        meta("process_name", 1, 0, "p"),
        meta("thread_name", 1, 4, "four"),
    ]
    b = Builder(exact=False)
    b.add_events(_decoded(tids))
    assert b.strings == {"stream 7": 0}
    assert b.thread_names == {(1, -1): "stream", (1, 4): "four"}
    assert b.process_names == {1: "p"}
