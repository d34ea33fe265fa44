"""Load progress is the share of the stored file read (issue 14): bytes read / file
size, compressed bytes for ``.gz``, so a long load does not sit at 0.99 early."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import cpu, kernel, write_trace

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.service.worker_pool import LoadTask, WorkerSlot
from tb_kineto_insights.store.cache import Identity, settings_fingerprint
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.source import (
    BLOCK_BYTES,
    COMPRESSED_READ_BYTES,
    DEFAULT_MAX_JSON_BYTES,
    reading_progress,
)


def _big_trace(path: Path, n: int, gz: bool = False) -> None:
    events = [cpu("ProfilerStep#1", 0.0, 10.0 * n + 10.0)]
    events += [kernel(f"kernel_{i % 97}", 1.0 + 10.0 * i, 5.0, corr=i) for i in range(n)]
    write_trace(path, events, gz=gz)


def _check_monotone(seen: list[tuple[int, int]], size: int) -> list[float]:
    assert seen, "no progress reported"
    assert all(total == size for _, total in seen)
    read = [r for r, _ in seen]
    assert read == sorted(read)  # monotone
    assert read[-1] == size  # the last report before the load ends: the whole file, 1.0
    return [r / size for r in read]


def test_progress_is_bytes_read_over_file_size(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    _big_trace(path, 60_000)  # about 9 MiB of JSON: 9 or 10 reads of 1 MiB
    size = os.path.getsize(path)
    seen: list[tuple[int, int]] = []
    with reading_progress(lambda r, t: seen.append((r, t))):
        trace = read_trace(str(path))
    assert len(trace.tables["kernel"]) == 60_000
    fractions = _check_monotone(seen, size)
    blocks = -(-size // BLOCK_BYTES)
    assert len(fractions) in (blocks, blocks + 1)  # one per read (+ the empty last read)
    # the k-th report is exactly k blocks (not a time estimate); half-way reads ~0.5
    assert seen[0][0] == BLOCK_BYTES
    middle = fractions[len(fractions) // 2 - 1]
    assert abs(middle - 0.5) <= BLOCK_BYTES / size + 0.01, fractions
    # outside the block nothing is reported
    read_trace(str(path))
    assert len(seen) == len(fractions)


def test_progress_counts_compressed_bytes(tmp_path: Path) -> None:
    path = tmp_path / "big.json.gz"
    _big_trace(path, 400_000, gz=True)  # ~60 MiB of JSON, a few MiB of gzip
    size = os.path.getsize(path)
    assert size > 2 * COMPRESSED_READ_BYTES
    seen: list[tuple[int, int]] = []
    with reading_progress(lambda r, t: seen.append((r, t))):
        summarize_file(str(path))
    fractions = _check_monotone(seen, size)
    assert fractions[0] == COMPRESSED_READ_BYTES / size  # stored bytes, not JSON bytes
    assert len(fractions) >= 3


def test_worker_process_reports_progress(tmp_path: Path) -> None:
    """Through a worker process: progress frames arrive before the answer."""
    path = tmp_path / "w.json"
    _big_trace(path, 30_000)
    size = os.path.getsize(path)
    st = path.stat()
    task = LoadTask(
        ident=Identity(str(path), size, st.st_mtime),
        max_json_bytes=DEFAULT_MAX_JSON_BYTES,
        thresholds=DEFAULT_THRESHOLDS,
        settings=settings_fingerprint(DEFAULT_MAX_JSON_BYTES, DEFAULT_THRESHOLDS),
        cache_folder=None,
        summarize=summarize_file,
    )
    slot = WorkerSlot(use_process=True)
    seen: list[tuple[int, int]] = []
    try:
        outcome = slot.run(task, lambda r, t: seen.append((r, t)))
    finally:
        slot.stop(kill=True)
    assert outcome.kind is None and outcome.data is not None
    _check_monotone(seen, size)
