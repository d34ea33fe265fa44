"""What one read gathered → :class:`~tb_kineto_insights.trace.model.Trace`: the tables,
and the health that accounts for the file.

A read's ``Trace`` is its builder's tables (rows sorted by start), far events
quarantined and GPU work overlapping on a stream clipped (:mod:`.timing`), with a
``TraceHealth`` that says what was read and what was not: rows per kind, events
skipped, quarantined (far ones included), repaired, the damaged regions with the bytes
and events they lost, and the file's own metadata. What is copied into every summary
is capped: top-level objects (:data:`ROOT_OBJECT_MAX_BYTES`), names
(:data:`MAX_NAME_CHARS`) and the damaged regions listed (:data:`MAX_DAMAGE_LISTED`;
all are counted).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import numpy as np

from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace import timing
from tb_kineto_insights.trace.errors import TraceFormatError
from tb_kineto_insights.trace.events import METADATA_KEYS
from tb_kineto_insights.trace.salvage import Damage
from tb_kineto_insights.trace.source import BlockReader, file_size

if TYPE_CHECKING:
    from tb_kineto_insights.trace.columns import Builder

#: Largest top-level ``deviceProperties`` / ``distributedInfo`` / ``tb_kineto_insights``
#: object kept (bytes of its JSON). These are copied into every summary as they are, so
#: a bigger one is left out and counted in ``TraceHealth.skipped`` as
#: ``oversized_<key>``; Kineto's and ``capture``'s own are a few KiB.
ROOT_OBJECT_MAX_BYTES = 64 * 1024
#: Names longer than this (characters) are cut, with "…" appended, and counted.
MAX_NAME_CHARS = 16384
#: Damaged regions listed one by one in ``TraceHealth.damage`` (all are counted).
MAX_DAMAGE_LISTED = 20
#: What starts the counts in a line of Kineto's log.
_RECORD_COUNTS = "Record counts:"


class ReadNotes(Protocol):
    """What a read of one file gathered (the reader is one): where it read from, the
    builder of its columns, and what it noted on the way."""

    path: str
    source: BlockReader
    builder: Builder | None
    damage: list[Damage]
    repairs: Counter[str]
    invalid_events: int
    non_objects: int
    root_kind: str
    root_fields: dict[str, Any]


def assemble(read: ReadNotes) -> m.Trace:
    """The :class:`~.model.Trace` of a read that is done: its builder's tables, far events
    quarantined and stream overlaps clipped (:mod:`.timing`), and the health of the read.

    Raises:
        TraceFormatError: nothing usable was read from a damaged file, or the file
            holds entries but no trace event (``[1, 2, 3]``).
    """
    b = read.builder
    assert b is not None
    tables, memory, flows, far, lost_corr = timing.quarantine_far_events(
        b.tables_out(), b.memory_out(), b.flows_out()
    )
    for kind, n in far.items():
        b.quarantine(kind, timing.FAR_REASON, n)
        b.kind_counts[kind] -= n
    clipped = timing.clip_stream_overlaps(tables)
    damage = sorted(read.damage, key=lambda d: d.offset)
    listed = damage[:MAX_DAMAGE_LISTED]
    if read.source.stream_damage is not None:  # always listed: it ends the file
        at, problem = read.source.stream_damage
        ended = Damage(at, at, 0, 0, problem)
        damage.append(ended)
        listed = [*listed[: MAX_DAMAGE_LISTED - 1], ended]
    usable = sum(len(t) for t in tables.values()) + len(memory) + len(flows)
    if damage and not usable:
        first = min(damage, key=lambda d: d.offset)
        raise TraceFormatError(read.path, f"nothing usable: {first.problem}", first.offset)
    objects = b.event_count + read.invalid_events - read.non_objects
    if read.non_objects and not objects:  # e.g. [1, 2, 3]: JSON, but not a trace
        n = read.non_objects
        raise TraceFormatError(
            read.path,
            f"holds no trace event: {n:,} {'entry' if n == 1 else 'entries'}, "
            f"{'not an object' if n == 1 else 'none an object'}",
        )
    names = [str(n) for n in b.names]
    long_names = sum(len(n) > MAX_NAME_CHARS for n in names)
    if long_names:  # keep summaries and tables small whatever a name holds
        names = [n if len(n) <= MAX_NAME_CHARS else n[:MAX_NAME_CHARS] + "…" for n in names]
        read.repairs["long_name_truncated"] += long_names
    health = m.TraceHealth(
        path=read.path,
        compressed=read.source.compressed,
        json_bytes=read.source.json_bytes,
        root=read.root_kind,
        event_count=b.event_count + read.invalid_events,
        category_counts={
            ("(none)" if k is None else str(k)): v for k, v in b.category_counts.items()
        },
        kind_counts=dict(b.kind_counts),
        skipped={
            k: v
            for k, v in (b.skipped + Counter(invalid_field_type=read.invalid_events)).items()
            if v
        },
        quarantined={k: v for k, v in b.quarantined.items() if v},
        quarantined_by_kind={
            kind: dict(reasons) for kind, reasons in b.quarantined_by_kind.items() if reasons
        },
        stream_overlap_clipped=clipped,
        damage=[d.to_dict() for d in listed],
        damaged_regions=len(damage),
        lost_bytes=sum(d.bytes for d in damage),
        lost_events=sum(d.events for d in damage),
        repairs=dict(read.repairs),
        exact_ns_timestamps=b.exact,
        string_ids=b.string_id_count,
    )
    try:
        health.file_bytes = file_size(read.path)
    except Exception:  # noqa: BLE001 (size is informative only)
        health.file_bytes = 0
    fields = read.root_fields
    _add_root_fields(health, fields)
    python = tables[m.PYTHON]
    health.flags = {
        "has_kernels": len(tables[m.KERNEL]) > 0,
        "has_steps": _has_profiler_steps(names, tables),
        "has_memory": len(memory) > 0,
        "has_memory_totals": bool(len(memory) and (memory.total_allocated_bytes >= 0).any()),
        "has_memory_addresses": bool(len(memory) and (memory.addr >= 0).any()),
        "has_stacks": len(python) > 0 or bool(fields.get("with_stack")),
        "has_shapes": bool(fields.get("record_shapes")),
        "has_correlation": bool(
            len(tables[m.KERNEL]) and (tables[m.KERNEL].correlation >= 0).any()
        ),
        "has_device_properties": bool(health.device_properties),
        "has_distributed_info": health.distributed_info is not None,
    }
    return m.Trace(
        names=names,
        tables=tables,
        memory=memory,
        flows=flows,
        health=health,
        process_names=b.process_names,
        thread_names=b.thread_names,
        string_ids=list(b.strings),
        quarantined_correlations=lost_corr,
    )


def _add_root_fields(health: m.TraceHealth, fields: dict[str, Any]) -> None:
    """The file's top-level fields into ``health``: ``deviceProperties``,
    ``distributedInfo`` and ``tb_kineto_insights`` (one larger than
    :data:`ROOT_OBJECT_MAX_BYTES` is dropped from ``fields`` and counted in
    ``skipped``), the metadata keys with a scalar value, and Kineto's log lines with
    their record counts."""
    for key in ("deviceProperties", "distributedInfo", "tb_kineto_insights"):
        if key in fields and len(msgspec.json.encode(fields[key])) > ROOT_OBJECT_MAX_BYTES:
            # copied into every summary as is: a huge one is left out, and said so
            del fields[key]
            health.skipped[f"oversized_{key}"] = 1
    props = fields.get("deviceProperties")
    health.device_properties = (
        [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
    )
    dist = fields.get("distributedInfo")
    health.distributed_info = dist if isinstance(dist, dict) else None
    run_meta = fields.get("tb_kineto_insights")
    health.run_metadata = run_meta if isinstance(run_meta, dict) else None
    health.metadata = {
        k: fields[k]
        for k in METADATA_KEYS
        if k in fields and isinstance(fields[k], (str, int, float, bool))
    }
    for level in ("INFO", "WARNING", "ERROR"):
        for line in fields.get(level, []):
            health.kineto_log.append(line if line.startswith(level) else f"{level}: {line}")
            health.kineto_record_counts.update(record_counts(line))


#: How the names of the profiler's step annotations start (``ProfilerStep#12``).
STEP_PREFIX = "ProfilerStep#"


def _has_profiler_steps(names: list[str], tables: dict[str, m.EventTable]) -> bool:
    step_ids = {i for i, n in enumerate(names) if n.startswith(STEP_PREFIX)}
    if not step_ids:
        return False
    for kind in (m.USER_ANNOTATION, m.CPU_OP):
        if np.isin(tables[kind].name, list(step_ids)).any():
            return True
    return False


#: Digits read of one record count (larger numbers are no count Kineto writes).
_MAX_COUNT_DIGITS = 18


def record_counts(line: str) -> dict[str, int]:
    """The counts of a Kineto log line ``... Record counts: name = 12, other = 3``:
    ``{"name": 12, "other": 3}`` (names stripped; an item without ``=`` and digits, or
    with more than 18 digits, is left out; text after the first newline is not read).

    Parsed by hand in one pass (``str.find``/``split``), not with a regex: a pattern
    such as ``\\s*([^=,]+?)\\s*=`` backtracks polynomially on a line of spaces
    without ``=`` (1.8 KB of such trace text costs it minutes of CPU)."""
    at = line.find(_RECORD_COUNTS)
    if at < 0:
        return {}
    rest = line[at + len(_RECORD_COUNTS) :].split("\n", 1)[0]
    counts: dict[str, int] = {}
    for item in rest.split(","):
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or not key:
            continue
        value = value.lstrip()
        digits = len(value) - len(value.lstrip("0123456789"))
        if 0 < digits <= _MAX_COUNT_DIGITS:
            counts[key] = int(value[:digits])
    return counts
