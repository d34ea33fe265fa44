"""The tests of ``test_cache.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from test_cache import SETTINGS, ident_of, loaders, write_trace

from tb_kineto_insights.service.loader import SummaryLoader
from tb_kineto_insights.service.worker_pool import LoadDeadline
from tb_kineto_insights.store.cache import DiskCache, Identity, decode_entry

#: Fixtures of test_cache.py that these tests take: pytest looks them up
#: among the names of the test's module (this use of them keeps the import).
FIXTURES = (loaders,)


def real_cache_entry(tmp_path: Path, trace: Path) -> tuple[Identity, bytes]:
    """The cache file the loader writes for a real trace, read back."""
    folder = tmp_path / "cache"
    loader = SummaryLoader(cache=DiskCache(folder, SETTINGS), workers=0)
    try:
        ident = ident_of(trace)
        status, result = loader.get(ident, wait_s=120)
        assert status.state == "ready" and result is not None, status
    finally:
        loader.close()
    data = DiskCache(folder, SETTINGS).summary_file(ident).read_bytes()
    assert decode_entry(data, ident, SETTINGS) is not None
    return ident, data


def test_every_flipped_byte_of_a_real_cache_file_is_rejected(
    tmp_path: Path, shared_traces: Path
) -> None:
    """Issue 13 §3: a single-byte change anywhere (every position of a real entry with
    a random mask, plus the case bit and the lowest bit at every byte of the checksum
    line and 1,000 random positions), truncation, extra bytes or another identity:
    never decoded."""
    trace = shared_traces / "hta_cpu_only"
    trace = sorted(p for p in trace.rglob("*.json*") if p.is_file())[0]
    ident, data = real_cache_entry(tmp_path, trace)
    rng = np.random.default_rng(13)
    masks = rng.integers(1, 256, len(data))  # one random change at every position
    flips = [(pos, int(mask)) for pos, mask in enumerate(masks)]
    sample = set(range(65)) | set(rng.integers(0, len(data), 1000).tolist())
    flips += [(pos, mask) for pos in sorted(sample) for mask in (0x20, 0x01)]  # case, lsb
    accepted = []
    for pos, mask in flips:
        flipped = bytearray(data)
        flipped[pos] ^= mask
        if decode_entry(bytes(flipped), ident, SETTINGS) is not None:
            accepted.append((pos, mask))
    assert accepted == []
    assert len(data) > 10_000 and len(flips) > len(data) + 2000
    for cut in (0, 1, 64, 65, len(data) // 2, len(data) - 1):
        assert decode_entry(data[:cut], ident, SETTINGS) is None
    assert decode_entry(data + b" ", ident, SETTINGS) is None
    for other in (
        Identity(ident.path, ident.size_bytes + 1, ident.mtime),
        Identity(ident.path, ident.size_bytes, ident.mtime + 1),
        Identity(ident.path + "x", ident.size_bytes, ident.mtime),  # no such file
        Identity(ident.path, ident.size_bytes, ident.mtime, content="0" * 32),
    ):
        assert decode_entry(data, other, SETTINGS) is None
    # Issue 15: device, inode and mtime_ns decide freshness, not the cache key.
    same = Identity(ident.path, ident.size_bytes, ident.mtime, inode=ident.inode + 1)
    assert decode_entry(data, same, SETTINGS) is not None


def test_worker_stopped_in_the_middle_of_a_real_load_is_killed_at_the_deadline(
    tmp_path: Path, loaders: list[SummaryLoader], shared_traces: Path
) -> None:
    """Issue 13 §4 as reported: a worker stopped (SIGSTOP) with a real trace (ResNet-50,
    1.1 MB gzip) to read; the load ends at its 2 s deadline instead of staying
    ``loading``; with the default deadline, asking again reads it. The worker is stopped
    before the task reaches it, so the outcome does not depend on how fast the machine
    reads (a stop after a fixed sleep raced a fast read: issue 25)."""
    trace = shared_traces / "kineto_resnet50" / "resnet50_num_workers_0"
    trace = trace / "worker0.1623143089861.pt.trace.json.gz"
    warm = write_trace(tmp_path / "logs" / "a.1.pt.trace.json.gz")
    loader = SummaryLoader(cache=None, workers=1, retry_backoff_s=0.0)
    loaders.append(loader)
    assert loader.get(ident_of(warm), wait_s=60)[0].state == "ready"  # a worker is ready
    loader.deadline = LoadDeadline(2.0, 0.0)
    ident = ident_of(trace)
    (pid,) = loader.worker_pids
    os.kill(pid, signal.SIGSTOP)
    loader.request(ident)
    status, result = loader.get(ident, wait_s=30)
    assert result is None and status.error_kind == "timeout", status
    assert "deadline of 2.0 s" in (status.error or "")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    loader.deadline = LoadDeadline()
    status, result = loader.get(ident, wait_s=120)
    assert status.state == "ready" and result is not None
    assert json.loads(result.panels["steps"])["count"] > 0
