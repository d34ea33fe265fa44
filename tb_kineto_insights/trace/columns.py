"""Decoded events → numpy columns and counts, one piece at a time, with no Python per
event on the normal path.

:class:`Builder` takes the pieces of one file in file order (:meth:`Builder.add_events`,
or :meth:`Builder.merge` of a builder that added later pieces elsewhere; both give the
same columns, name ids and counts) and gives the tables (``*_out``). Name ids, interned
string ids and the order of ``process_names``/``thread_names`` are first-seen order
over the events in file order. Every event is counted once: as a row of a table, or in
``kind_counts``, ``skipped`` or ``quarantined``.

No Python runs per event on the normal path (all loops in C). An
event costs one dict lookup of its key (phase, category, name; one ``attrgetter``
tuple); Python runs once per distinct key (``__missing__``, numbering keys in first-seen
order), fixing its route (duration kind, flow, instant), category, name id and whether
it is a ``[memory]`` instant, so routing, counts and name ids need no pass over the
events. A column is one ``np.fromiter(map(attrgetter(field), events), dtype)``: no list
in between, no type discovery (a column that does not convert takes the list path).
Fetching several fields per event at once (one tuple per event,
``msgspec.structs.astuple``) and transposing is slower: each field costs the same memory
traffic either way and the tuples cost more; so is one (pid, tid) key per event.

``Input Dims`` (``record_shapes=True``, on most CPU ops), and ``Input type`` and
``Concrete Inputs`` of the ops the analysis reads them for (:mod:`.op_names`), are kept
as their literal texts,
one blob per piece (:class:`~tb_kineto_insights.trace.rowjson.RowJson`); a nested list
is built only when the analysis looks one up. Building them all would be the largest
single cost of decoding such a trace, and a parallel read would pay as much again to
unpickle them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any

import msgspec
import numpy as np

from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace import op_names
from tb_kineto_insights.trace.chunks import Columns, event_table
from tb_kineto_insights.trace.routes import LAUNCH_FLOW_CATEGORIES, R_INSTANT, ROUTES, route_of
from tb_kineto_insights.trace.rowjson import RowJson
from tb_kineto_insights.trace.timestamps import MAX_TS_US, decimals_ns, literals_ns, us_to_ns
from tb_kineto_insights.trace.values import MISSING_ID, as_int, opt_int, opt_str, plain_int64s

#: Durations above this are quarantined as implausible (7 days, in µs).
MAX_DURATION_US = 7 * 24 * 3600 * 1e6


# -- per-event work in C: attribute getters and routes ------------------------------------
_PH = attrgetter("ph")
_CAT = attrgetter("cat")
_NAME = attrgetter("name")
_TS = attrgetter("ts")
_DUR = attrgetter("dur")
_PID = attrgetter("pid")
_TID = attrgetter("tid")
_ID = attrgetter("id")
_ARGS = attrgetter("args")
_EXTERNAL_ID = attrgetter("external_id")
_CORRELATION = attrgetter("correlation")
_DEVICE = attrgetter("device")
_STREAM = attrgetter("stream")
_COLLECTIVE_NAME = attrgetter("collective_name")
_IN_MSG_NELEMS = attrgetter("in_msg_nelems")
_INPUT_DIMS = attrgetter("input_dims")
_INPUT_TYPE = attrgetter("input_type")
_CONCRETE_INPUTS = attrgetter("concrete_inputs")
_FLOPS = attrgetter("flops")
_BYTES = attrgetter("bytes")
_TOTAL_ALLOCATED = attrgetter("total_allocated")
_TOTAL_RESERVED = attrgetter("total_reserved")
_DEVICE_TYPE = attrgetter("device_type")
_DEVICE_ID = attrgetter("device_id")
_ADDR = attrgetter("addr")
_MEMORY_NAME = "[memory]"
_NO_TEXT = msgspec.Raw(b"")  # an absent JSON-text arg (typed decoders' default)
_NULL = np.frombuffer(b"null", dtype=np.uint8)
_FLOW_PHASE = {"s": 0, "f": 1}


def _take(items: list[Any], at: np.ndarray) -> list[Any]:
    """``[items[i] for i in at]``, with the loop in C."""
    if len(at) == len(items):
        return items
    return list(map(items.__getitem__, at.tolist()))


def _take_ts(
    ts: tuple[np.ndarray, np.ndarray, np.ndarray], at: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if len(at) == len(ts[0]):
        return ts
    return ts[0][at], ts[1][at], ts[2][at]


def _present(values: list[object]) -> np.ndarray:
    """bool mask: the value is not ``None`` (the loop in C)."""
    return np.fromiter(map(is_not, values, repeat(None)), np.bool_, count=len(values))


#: (phase, category, name) of an event, one tuple per event built in C: the event's key.
_EVENT_KEY = attrgetter("ph", "cat", "name")


#: The args that make an event a collective (:meth:`Builder._comm`), absent.
_COMM_KEYS = attrgetter("collective_name", "in_msg_nelems")
_NO_COMM = (None, None)


class _FirstSeen(dict):
    """Numbers keys in first-seen order as they are looked up: a missing key gets the
    next number (``__missing__``: Python runs once per distinct key, the lookups of
    known keys stay in C) and is listed in ``new`` until the caller takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.new: list[Any] = []

    def __missing__(self, key: Any) -> int:
        number = self[key] = len(self)
        self.new.append(key)
        return number


class Builder:
    """Turns decoded event pieces into columns and counts (:meth:`add_events`, one
    piece at a time, or :meth:`merge` of a builder made elsewhere); the ``*_out``
    methods give the tables."""

    def __init__(self, exact: bool) -> None:
        self.exact = exact
        self.names: dict[object, int] = {}
        self._arg_flags: list[tuple[bool, bool]] = []
        self._arg_flag_arrays = (np.zeros(1, dtype=np.bool_), np.zeros(1, dtype=np.bool_))
        self.strings: dict[str, int] = {}
        self.tables: dict[str, Columns] = {kind: Columns() for kind in m.DURATION_KINDS}
        self.memory = Columns()
        self.flows = Columns()
        self.event_count = 0
        self.category_counts: Counter[object] = Counter()
        self.kind_counts: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.quarantined: Counter[str] = Counter()
        self.quarantined_by_kind: dict[str, Counter[str]] = defaultdict(Counter)
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.string_id_count = 0
        self._launch_cache: dict[object, bool] = {}
        self._clear_keys()

    def _clear_keys(self) -> None:
        """Empty the per-key caches (:meth:`add_events`); :meth:`merge` needs none."""
        # each distinct (phase, category, name), numbered in first-seen order: its
        # (phase, category) number, its name, and the name's id (-1: no name; -2: not
        # interned yet: names are interned when a duration kind's events are added)
        self._keys = _FirstSeen()
        self._key_pair = np.zeros(0, dtype=np.intp)
        self._key_name: list[object] = []
        self._key_name_id = np.zeros(0, dtype=np.int64)
        self._key_is_memory = np.zeros(0, dtype=np.bool_)
        # per key: 1 if its name is "process_name", 2 if "thread_name", else 0
        self._key_metadata_name = np.zeros(0, dtype=np.int8)
        # each distinct (phase, category), numbered in first-seen order: its route
        # (index in ROUTES) and its category (the key of category_counts)
        self._pairs: dict[tuple[object, object], int] = {}
        self._pair_route: list[int] = []
        self._pair_cat: list[object] = []
        self._pair_routes = np.zeros(0, dtype=np.int16)

    # -- columns -----------------------------------------------------------------------
    def _ids_of(self, get: Any, objs: list[Any], missing: int = MISSING_ID) -> np.ndarray:
        """:meth:`_ids` of ``list(map(get, objs))`` (``get``: an ``attrgetter``), the
        common case (all ints) in one pass without the list."""
        try:
            return np.fromiter(map(get, objs), np.int64, count=len(objs))
        except (TypeError, ValueError, OverflowError):
            return self._ids(list(map(get, objs)), missing, ints_tried=True)

    def _ids(
        self, values: list[object], missing: int = MISSING_ID, ints_tried: bool = False
    ) -> np.ndarray:
        """int64 column from id-like values (ints, numeric or hex strings, None):
        ``missing`` where a value is ``None``; a non-numeric string is interned as a
        negative number (:func:`as_int`) and counted in ``string_id_count``.

        One C call in the common cases: all ints (``np.fromiter``: numpy's own
        conversion, the same as ``np.array(values, dtype=np.int64)`` value for value),
        all ``None`` (``list.count``); ints mixed with ``None`` go through float64
        (exact below 2^53), anything else value by value. ``ints_tried``: the caller
        already failed to convert them as ints.

        Otherwise :func:`as_int` runs once per distinct (type, value) pair
        (``dict.fromkeys``), not per value. Old Kineto traces name
        threads ``"stream 7"`` or ``"5555"`` (``kineto_resnet50``: 51,168 string
        ``tid`` values, 5 distinct); converting each, with two caught exceptions per
        non-numeric string, would be a large share of that read (see ``benchmarks/RESULTS.md``)."""
        n = len(values)
        if not ints_tried:
            try:
                return np.fromiter(values, np.int64, count=n)
            except (TypeError, ValueError, OverflowError):
                pass
        if values.count(None) == n:
            return np.full(n, missing, dtype=np.int64)
        try:
            arr = np.fromiter(values, np.float64, count=n)
            if np.all(np.abs(arr[~np.isnan(arr)]) < 2.0**53):
                out = np.where(np.isnan(arr), float(missing), arr)
                return out.astype(np.int64)
        except (TypeError, ValueError, OverflowError):
            pass
        self.string_id_count += sum(map(isinstance, values, repeat(str)))
        # each distinct (type, value) once, in first-seen order (strings interned in the
        # order a value-by-value pass interns them); the type in the key keeps -2**63
        # (int, kept) apart from -2.0**63 (float, missing), which compare equal
        typed = list(zip(map(type, values), values, strict=True))
        try:
            distinct = dict.fromkeys(typed)
        except TypeError:  # an unhashable value (a list from a loose decode)
            distinct = None
        if distinct is not None:
            for key in distinct:
                iv = as_int(key[1], self.strings)
                distinct[key] = missing if iv == MISSING_ID else iv
            return np.fromiter(map(distinct.__getitem__, typed), np.int64, count=n)
        out_list = []
        for v in values:
            iv = as_int(v, self.strings)
            out_list.append(missing if iv == MISSING_ID else iv)
        return np.array(out_list, dtype=np.int64)

    def _floats_of(self, get: Any, objs: list[Any]) -> np.ndarray:
        """:meth:`_floats` of ``list(map(get, objs))``, in one pass when all convert."""
        try:
            return np.fromiter(map(get, objs), np.float64, count=len(objs))
        except (TypeError, ValueError, OverflowError):
            return self._floats(list(map(get, objs)))

    def _floats(self, values: list[object]) -> np.ndarray:
        """float64 column; ``None`` and values that are not numbers → NaN.
        ``np.fromiter`` converts as ``np.array(values, dtype=np.float64)`` does (``None``
        → NaN, numeric strings parsed) without its type discovery pass."""
        try:
            return np.fromiter(values, np.float64, count=len(values))
        except (TypeError, ValueError, OverflowError):
            out = []
            for v in values:
                try:
                    out.append(float(v) if v is not None else np.nan)  # type: ignore[arg-type]
                except (TypeError, ValueError, OverflowError):
                    out.append(np.nan)
            return np.array(out, dtype=np.float64)

    def _ts_ns(self, values: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Timestamps (µs: float, ``Decimal``, or the literal as ``msgspec.Raw``) →
        (int64 ns, missing mask, out-of-range mask). Values beyond the int64 ns range
        (|ts| ≥ :data:`MAX_TS_US`, ±inf from ``1e400``) are unusable; the caller
        quarantines them as ``ts_out_of_range``. Literals are converted vectorised
        (:func:`~tb_kineto_insights.trace.numbers.parse_us_literals_to_ns`), truncated
        toward zero like ``int(Decimal(ts).scaleb(3))``; floats as :func:`us_to_ns`."""
        n = len(values)
        if not self.exact:
            us = self._floats(values)
            missing = np.isnan(us)
            huge = ~missing & ~(np.abs(us) < MAX_TS_US)
            return us_to_ns(np.where(missing | huge, 0.0, us)), missing, huge
        is_raw = np.fromiter(map(isinstance, values, repeat(msgspec.Raw)), np.bool_, count=n)
        if is_raw.all():
            return literals_ns(values)
        ns = np.zeros(n, dtype=np.int64)
        missing = np.zeros(n, dtype=np.bool_)
        huge = np.zeros(n, dtype=np.bool_)
        raw_at = np.flatnonzero(is_raw)
        if len(raw_at):
            raws = list(map(values.__getitem__, raw_at.tolist()))
            ns[raw_at], missing[raw_at], huge[raw_at] = literals_ns(raws)
        dec_at = np.flatnonzero(~is_raw)  # Decimal (or None): the top-level decode
        if len(dec_at):
            ns[dec_at], missing[dec_at], huge[dec_at] = decimals_ns(
                list(map(values.__getitem__, dec_at.tolist()))
            )
        return ns, missing, huge

    def quarantine(self, kind: str, reason: str, n: int) -> None:
        """Count ``n`` events of ``kind`` quarantined for ``reason`` (none when 0)."""
        if n:
            self.quarantined[reason] += n
            self.quarantined_by_kind[kind][reason] += n

    def _name_ids(self, keys: np.ndarray) -> np.ndarray:
        """Name ids of events given their key numbers (:meth:`add_events`): a name not
        interned yet gets the next id, in the order its events come (first-seen order,
        as looking names up one by one would give); Python runs per new key only."""
        ids = self._key_name_id[keys]
        new = ids == -2
        if new.any():
            todo = keys[new]
            unique, first_at = np.unique(todo, return_index=True)
            names, key_name, key_name_id = self.names, self._key_name, self._key_name_id
            for k in unique[np.argsort(first_at, kind="stable")].tolist():
                key_name_id[k] = names.setdefault(key_name[k], len(names))
            ids = key_name_id[keys]
        return ids

    def _add_keys(self) -> None:
        """Number the (phase, category) pairs and note the names of the keys that the
        last piece brought (in first-seen order)."""
        new, self._keys.new = self._keys.new, []
        pairs = self._pairs
        pair_of, name_id, is_memory, metadata_name = [], [], [], []
        for ph, cat, name in new:
            pair = pairs.get((ph, cat))
            if pair is None:
                pair = pairs[(ph, cat)] = len(pairs)
                self._pair_route.append(route_of(ph, cat))
                self._pair_cat.append(cat)
            pair_of.append(pair)
            self._key_name.append(name)
            name_id.append(-1 if name is None else -2)
            # as `"[memory]".__eq__(name)` taken as a truth value: NotImplemented (a
            # name that is not a string, or none) counts as true
            is_memory.append(name == _MEMORY_NAME or not isinstance(name, str))
            metadata_name.append(1 if name == "process_name" else 2 if name == "thread_name" else 0)
        self._pair_routes = np.array(self._pair_route, dtype=np.int16)
        self._key_pair = np.concatenate([self._key_pair, np.array(pair_of, dtype=np.intp)])
        self._key_name_id = np.concatenate([self._key_name_id, np.array(name_id, dtype=np.int64)])
        self._key_is_memory = np.concatenate(
            [self._key_is_memory, np.array(is_memory, dtype=np.bool_)]
        )
        self._key_metadata_name = np.concatenate(
            [self._key_metadata_name, np.array(metadata_name, dtype=np.int8)]
        )

    # -- pieces -------------------------------------------------------------------------
    def add_events(self, events: list[Any]) -> None:
        """One decoded piece (a list, or a :class:`~.decode.Piece` with its timestamps) →
        columns. Per-event work runs in C (``map`` with ``attrgetter``, dict lookups,
        numpy); Python runs per kind and per distinct (phase, category, name), not per
        event (see the module docstring)."""
        n = len(events)
        if not n:
            return
        self.event_count += n
        keys = self._keys
        key = np.fromiter(map(keys.__getitem__, map(_EVENT_KEY, events)), np.intp, count=n)
        if keys.new:
            self._add_keys()
        pair = self._key_pair[key]
        per_pair = np.bincount(pair, minlength=len(self._pairs))
        # categories in first-seen order, as Counter.update(cats) made them: pairs are
        # numbered in first-seen order and a new category comes with a new pair
        category_counts, pair_cat = self.category_counts, self._pair_cat
        seen = np.flatnonzero(per_pair)
        for p, count in zip(seen.tolist(), per_pair[seen].tolist(), strict=True):
            category_counts[pair_cat[p]] += count
        code = self._pair_routes[pair]
        counts = np.bincount(code, minlength=len(ROUTES))
        present, first_at = np.unique(code, return_index=True)
        # the order the reader always used: metadata and skips as met, then each
        # duration kind in order of first appearance, then flows, then instants
        order = [int(c) for c in present[np.argsort(first_at, kind="stable")]]
        ts_all = getattr(events, "ts", None)
        if ts_all is None and counts[: R_INSTANT + 1].any():
            ts_all = self._ts_ns(list(map(_TS, events)))
        later: list[tuple[str, np.ndarray]] = []
        for c in order:
            route = ROUTES[c]
            at = np.flatnonzero(code == c) if counts[c] != n else np.arange(n)
            if route == "metadata":
                self._metadata_events(_take(events, at), key if len(at) == n else key[at])
            elif route == "missing_cat" or route == "missing_ph":
                self.skipped[route] += int(counts[c])
            elif route == "unsupported":  # counted per phase
                self.skipped.update(f"unsupported_phase_{ph}" for ph in map(_PH, _take(events, at)))
            else:
                later.append((route, at))
        rank = {"flow": 1, "instant": 2}
        for route, at in sorted(later, key=lambda item: rank.get(item[0], 0)):
            assert ts_all is not None
            evs, ts = _take(events, at), _take_ts(ts_all, at)
            if route == "flow":
                self._flows(evs, ts, pair if len(at) == n else pair[at])
            elif route == "instant":
                self._instants(evs, ts, key if len(at) == n else key[at])
            else:
                self._duration(route, evs, ts, key if len(at) == n else key[at])

    def _metadata_events(self, evs: list[Any], keys: np.ndarray) -> None:
        """Metadata (``M``) events of a piece (``keys``: their key numbers) →
        ``process_names`` / ``thread_names``, as :meth:`_metadata_label` event by event
        gives (the last label of an id wins, ids in first-seen order, strings interned in
        event order), with no Python per event when every ``pid`` (and every ``tid`` of a
        named thread) is a plain int in int64 range: then nothing is interned, only the
        events whose key names ``process_name`` / ``thread_name`` are looked at, and each
        dict takes one ``dict.update``. Anything else (a string id, a float, a huge int)
        goes event by event. ``hta_mtia`` has 310,046 metadata events (of
        455,739), repeating the names of 2 processes and their threads, so reading them
        one by one is a measurable part of its read (see ``benchmarks/RESULTS.md``)."""
        self.kind_counts["metadata"] += len(evs)
        pids = list(map(_PID, evs))
        if not plain_int64s(pids):
            for e in evs:
                self._metadata_label(e)
            return
        which = self._key_metadata_name[keys]
        named: list[tuple[list[Any], list[Any], list[Any]]] = []
        for code in (1, 2):
            at = np.flatnonzero(which == code).tolist()
            labels = list(map(attrgetter("args.name"), map(evs.__getitem__, at)))
            is_str = np.fromiter(map(isinstance, labels, repeat(str)), np.bool_, count=len(at))
            if not is_str.all():
                keep = np.flatnonzero(is_str).tolist()
                at, labels = list(map(at.__getitem__, keep)), list(map(labels.__getitem__, keep))
            named.append((at, list(map(pids.__getitem__, at)), labels))
        (_, process_pids, process_labels), (thread_at, thread_pids, thread_labels) = named
        tids = list(map(_TID, map(evs.__getitem__, thread_at)))
        if not plain_int64s(tids):
            for e in evs:
                self._metadata_label(e)
            return
        self.process_names.update(zip(process_pids, process_labels, strict=True))
        thread_ids = zip(thread_pids, tids, strict=True)
        self.thread_names.update(zip(thread_ids, thread_labels, strict=True))

    def _metadata_label(self, e: Any) -> None:
        """One metadata event with a string label (``args.name``), event by event."""
        label = e.args.name
        if not isinstance(label, str):
            return
        pid = as_int(e.pid, self.strings)
        if e.name == "process_name":
            self.process_names[pid] = label
        elif e.name == "thread_name":
            self.thread_names[(pid, as_int(e.tid, self.strings))] = label

    def _duration(
        self,
        kind: str,
        evs: list[Any],
        ts: tuple[np.ndarray, np.ndarray, np.ndarray],
        keys: np.ndarray,
    ) -> None:
        """Events of one duration kind (``keys``: their key numbers, which give their
        names) → rows of its table; events without name, ts or dur are skipped, broken
        ones quarantined."""
        start_ns, ts_missing, ts_huge = ts
        if ts_huge.any():
            self.quarantine(kind, "ts_out_of_range", int(ts_huge.sum()))
        dur_us = self._floats_of(_DUR, evs)
        name = self._name_ids(keys)
        dur_missing = ~np.isfinite(dur_us)
        name_missing = name < 0
        bad = name_missing | ts_missing | dur_missing
        if bad.any():
            self.skipped["missing_name"] += int(name_missing.sum())
            self.skipped["missing_ts"] += int((ts_missing & ~name_missing).sum())
            self.skipped["missing_dur"] += int((dur_missing & ~ts_missing & ~name_missing).sum())
        bad |= ts_huge  # quarantined as ts_out_of_range above
        negative = ~bad & (dur_us < 0)
        too_long = ~bad & (dur_us > MAX_DURATION_US)
        if negative.any() or too_long.any():
            self.quarantine(kind, "negative_duration", int(negative.sum()))
            self.quarantine(kind, "duration_over_7_days", int(too_long.sum()))
        keep = ~(bad | negative | too_long)
        if not keep.any():
            return
        args = list(map(_ARGS, evs))
        pid = self._ids_of(_PID, evs)
        tid = self._ids_of(_TID, evs)
        dur_ns = np.rint(np.where(keep, dur_us, 0.0) * 1000.0).astype(np.int64)
        cols: dict[str, np.ndarray] = {
            "name": name,
            "start_ns": start_ns,
            "dur_ns": dur_ns,
            "pid": pid,
            "tid": tid,
            "external_id": self._ids_of(_EXTERNAL_ID, args, -1),
        }
        if kind in m.GPU_KINDS or kind == m.RUNTIME:
            cols["correlation"] = self._ids_of(_CORRELATION, args, -1)
        if kind in m.GPU_KINDS:
            device = self._ids_of(_DEVICE, args)
            stream = self._ids_of(_STREAM, args)
            cols["device"] = np.where(device == MISSING_ID, pid, device)
            cols["stream"] = np.where(stream == MISSING_ID, tid, stream)
        table = self.tables[kind]
        if kind in (m.KERNEL, m.CPU_OP, m.USER_ANNOTATION):
            self._comm(table, args, keep)
        if kind == m.CPU_OP:
            self._input_dims(table.input_dims, list(map(_INPUT_DIMS, args)), keep, table.rows)
            # Input type and Concrete Inputs only where the analysis reads them
            typed, scalars = self._arg_names()
            for flags, getter, into in (
                (typed, _INPUT_TYPE, table.input_types),
                (scalars, _CONCRETE_INPUTS, table.concrete_inputs),
                (typed, _FLOPS, table.flops),
            ):
                wanted = np.flatnonzero(flags[name] & keep)
                if wanted.size:
                    texts: list[Any] = [_NO_TEXT] * len(args)
                    for i in wanted.tolist():
                        texts[i] = getter(args[i])
                    self._input_dims(into, texts, keep, table.rows)
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
        n = int(keep.sum())
        for key in ("correlation", "device", "stream"):
            cols.setdefault(key, np.full(n, -1, dtype=np.int64))
        table.add(cols)
        self.kind_counts[kind] += n

    def _arg_names(self) -> tuple[np.ndarray, np.ndarray]:
        """Bool per name id (one extra slot, False, for a missing name, -1): the op's
        ``Input type`` is kept (:func:`~.op_names.has_formula`), its ``Concrete Inputs``
        are kept (:func:`~.op_names.needs_scalars`); extended as names are interned."""
        flags = self._arg_flags
        if len(flags) < len(self.names):
            for name in list(self.names)[len(flags) :]:
                text = name if isinstance(name, str) else ""
                flags.append((op_names.has_formula(text), op_names.needs_scalars(text)))
            table = np.array([*flags, (False, False)], dtype=np.bool_).reshape(-1, 2)
            self._arg_flag_arrays = (table[:, 0].copy(), table[:, 1].copy())
        return self._arg_flag_arrays

    def _comm(self, table: Columns, args: list[Any], keep: np.ndarray) -> None:
        # one pass, one tuple per event; list.count compares in C
        if list(map(_COMM_KEYS, args)).count(_NO_COMM) == len(args):  # most pieces
            return
        has = _present(list(map(_COLLECTIVE_NAME, args))) | _present(
            list(map(_IN_MSG_NELEMS, args))
        )
        has &= keep
        if not has.any():
            return
        kept_rows = np.cumsum(keep) - 1 + table.rows
        for i in np.flatnonzero(has).tolist():
            a = args[i]
            table.comm[int(kept_rows[i])] = m.CommArgs(
                collective_name=opt_str(a.collective_name),
                in_msg_nelems=opt_int(a.in_msg_nelems),
                out_msg_nelems=opt_int(a.out_msg_nelems),
                in_msg_size_bytes=opt_int(a.in_msg_size),
                dtype=opt_str(a.dtype),
                group_size=opt_int(a.group_size),
                process_group_name=opt_str(a.pg_name),
                process_group_ranks=None if a.pg_ranks is None else str(a.pg_ranks),
                seq=opt_int(a.seq),
            )

    def _input_dims(self, into: RowJson, dims: list[Any], keep: np.ndarray, rows: int) -> None:
        """``Input Dims`` (or ``Input type``) of the kept rows into ``into`` (row numbers
        after the table's first ``rows``): literal texts (``msgspec.Raw``, from the
        typed decoders) joined into one blob (:class:`RowJson`), objects (from a loose
        decode) as they are; absent (empty text, ``null``, ``None``) is left out."""
        n = len(dims)
        kept_rows = np.cumsum(keep) - 1 + rows
        try:  # all texts (the typed decoders), the common case: no type test per value
            joined: bytes | None = b"".join(dims)
        except TypeError:  # objects from a loose decode (a list, None) among them
            joined = None
        if joined is not None:
            is_raw = np.ones(n, dtype=np.bool_)
        else:
            is_raw = np.fromiter(map(isinstance, dims, repeat(msgspec.Raw)), np.bool_, count=n)
        raw_at = np.arange(n) if is_raw.all() else np.flatnonzero(is_raw)
        if len(raw_at):
            raws = dims if len(raw_at) == n else list(map(dims.__getitem__, raw_at.tolist()))
            lengths = np.fromiter(map(len, raws), np.int64, count=len(raws))
            has = (lengths > 0) & keep[raw_at]
            if has.any():
                blob = joined if joined is not None else b"".join(raws)
                ends = np.cumsum(lengths)
                starts = ends - lengths
                four = np.flatnonzero(has & (lengths == 4))
                if len(four):  # a literal null is absent, as a decoded None is
                    text = np.frombuffer(blob, dtype=np.uint8)
                    at = starts[four][:, None] + np.arange(4)
                    has[four[(text[at] == _NULL).all(axis=1)]] = False
                into.add_texts(kept_rows[raw_at[has]], starts[has], ends[has], blob)
        if len(raw_at) < n:
            objects = np.flatnonzero(~is_raw & keep & _present(dims))
            for i in objects.tolist():
                into.add_object(int(kept_rows[i]), dims[i])

    def _instants(
        self, evs: list[Any], ts: tuple[np.ndarray, np.ndarray, np.ndarray], keys: np.ndarray
    ) -> None:
        """Instant events (``keys``: their key numbers): ``[memory]`` ones → rows of the
        memory table, the others only counted."""
        is_mem = self._key_is_memory[keys]
        others = len(evs) - int(is_mem.sum())
        if others:
            self.kind_counts["instant"] += others
        if not is_mem.any():
            return
        at = np.flatnonzero(is_mem)
        mem = _take(evs, at) if others else evs
        ts_ns, missing, huge = _take_ts(ts, at) if others else ts
        if huge.any():
            self.quarantine("memory", "ts_out_of_range", int(huge.sum()))
        if missing.any():
            self.skipped["missing_ts"] += int(missing.sum())
        keep = ~missing & ~huge
        args = list(map(_ARGS, mem))
        cols = {
            "ts_ns": ts_ns,
            "bytes": self._ids_of(_BYTES, args, 0),
            "total_allocated_bytes": self._ids_of(_TOTAL_ALLOCATED, args, -1),
            "total_reserved_bytes": self._ids_of(_TOTAL_RESERVED, args, -1),
            "device_type": self._ids_of(_DEVICE_TYPE, args, -1),
            "device_id": self._ids_of(_DEVICE_ID, args, -1),
            "addr": self._ids_of(_ADDR, args, -1),
            "pid": self._ids_of(_PID, mem),
            "tid": self._ids_of(_TID, mem),
        }
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
        self.memory.add(cols)
        self.kind_counts["memory"] += int(keep.sum())

    def _flows(
        self, evs: list[Any], ts: tuple[np.ndarray, np.ndarray, np.ndarray], pair: np.ndarray
    ) -> None:
        """Flow events (``pair``: their (phase, category) numbers, which give the phase
        and whether the flow is a launch without reading either field again)."""
        ts_ns, missing, huge = ts
        if huge.any():
            self.quarantine("flow", "ts_out_of_range", int(huge.sum()))
        ids = self._ids_of(_ID, evs)
        keep = ~missing & ~huge & (ids != MISSING_ID)
        if (~keep & ~huge).any():
            self.skipped["flow_missing_id_or_ts"] += int((~keep & ~huge).sum())
        launch_of = self._launch_cache
        phase_of, launch_of_pair = [], []
        for ph, cat in self._pairs:  # in number order
            phase_of.append(_FLOW_PHASE.get(ph, 2))  # type: ignore[call-overload]
            if cat not in launch_of:
                launch_of[cat] = str(cat).lower() in LAUNCH_FLOW_CATEGORIES
            launch_of_pair.append(launch_of[cat])
        cols = {
            "id": ids,
            "ts_ns": ts_ns,
            "pid": self._ids_of(_PID, evs),
            "tid": self._ids_of(_TID, evs),
            "phase": np.array(phase_of, dtype=np.int8)[pair],
            "launch": np.array(launch_of_pair, dtype=np.bool_)[pair],
        }
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
        self.flows.add(cols)
        self.kind_counts["flow"] += int(keep.sum())

    def drop_caches(self) -> None:
        """Empty the per-key caches and the launch cache: :meth:`merge` needs neither,
        and a builder sent back from a worker is smaller without them."""
        self._clear_keys()
        self._launch_cache.clear()

    # -- merging a piece built elsewhere ----------------------------------------------
    def merge(self, piece: Builder) -> None:
        """Add a piece built by :func:`build_piece` (the pieces before it already
        added): names get global ids in first-seen order (one ``np.take`` per name
        column), row-keyed comm/shape args are shifted by the rows already held, counts
        are added. The result equals :meth:`add_events` on the same events."""
        names = self.names
        remap = np.empty(len(piece.names) + 1, dtype=np.int64)
        remap[-1] = -1  # a missing name (-1) stays missing
        for name, local in piece.names.items():
            remap[local] = names.setdefault(name, len(names))
        for kind, cols in piece.tables.items():
            table = self.tables[kind]
            if not cols.rows:
                continue
            base = table.rows
            for key, chunks in cols.chunks.items():
                if key == "name":
                    chunks = [np.take(remap, c) for c in chunks]
                table.chunks[key].extend(chunks)
            table.comm.update(zip(map(base.__add__, cols.comm), cols.comm.values(), strict=True))
            table.input_dims.extend(cols.input_dims, base)
            table.input_types.extend(cols.input_types, base)
            table.concrete_inputs.extend(cols.concrete_inputs, base)
            table.flops.extend(cols.flops, base)
            table.rows += cols.rows
        for own, other in ((self.memory, piece.memory), (self.flows, piece.flows)):
            for key, chunks in other.chunks.items():
                own.chunks[key].extend(chunks)
            own.rows += other.rows
        self.event_count += piece.event_count
        self.string_id_count += piece.string_id_count
        self.category_counts.update(piece.category_counts)
        self.kind_counts.update(piece.kind_counts)
        self.skipped.update(piece.skipped)
        self.quarantined.update(piece.quarantined)
        for kind, reasons in piece.quarantined_by_kind.items():
            self.quarantined_by_kind[kind].update(reasons)
        self.process_names.update(piece.process_names)
        self.thread_names.update(piece.thread_names)

    # -- result -------------------------------------------------------------------------
    def tables_out(self) -> dict[str, m.EventTable]:
        """Every duration kind's table, rows sorted by start (:func:`~.chunks.event_table`)."""
        return {kind: event_table(cols) for kind, cols in self.tables.items()}

    def memory_out(self) -> m.MemoryTable:
        """The ``[memory]`` instants, rows sorted by ``ts_ns`` (stable)."""
        c = self.memory
        ts = c.concat("ts_ns", np.int64)
        order = np.argsort(ts, kind="stable")
        return m.MemoryTable(
            **{
                key: c.concat(key, np.int64)[order]
                for key in (
                    "ts_ns",
                    "bytes",
                    "total_allocated_bytes",
                    "total_reserved_bytes",
                    "device_type",
                    "device_id",
                    "addr",
                    "pid",
                    "tid",
                )
            }
        )

    def flows_out(self) -> m.FlowTable:
        """The flow events, in file order."""
        c = self.flows
        return m.FlowTable(
            id=c.concat("id", np.int64),
            ts_ns=c.concat("ts_ns", np.int64),
            pid=c.concat("pid", np.int64),
            tid=c.concat("tid", np.int64),
            phase=c.concat("phase", np.int8),
            launch=c.concat("launch", np.bool_),
        )
