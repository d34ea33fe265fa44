"""trace/source.py's inflate: zlib-ng when it loads, else the stdlib's zlib; both give
the same blocks and the same damage (offset and problem) on whole, truncated and
corrupt gzip files of a real trace. Real traces: ``test_source_inflate_real.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tb_kineto_insights.trace import source

# --------------------------------------------------------------------------- issue 32 §2


def _zcat(path: Path) -> bytes:
    import shutil
    import subprocess

    if shutil.which("zcat") is None:
        pytest.skip("needs zcat")
    return subprocess.run(["zcat", str(path)], capture_output=True, check=True).stdout


def _member_payload(size: int, seed: int, random_bytes: bool) -> bytes:
    import random

    if random_bytes:  # incompressible: its member straddles the compressed read sizes
        return random.Random(seed).randbytes(size)
    return (b'{"name": "aten::add", "ts": %d}, ' % seed * (size // 30 + 1))[:size]


MIB = 1024 * 1024
#: Members (uncompressed sizes) around the output block (1 MiB), the compressed read
#: (1 MiB) and the inflate step (64 KiB): the issue's cases are a member just past 1 MiB
#: followed by a short one, and two members that each inflate past 1 MiB.
MEMBER_CASES = {
    "one_byte_past_a_block_then_short": [(MIB + 1, False), (10, False)],
    "two_members_past_a_block": [(1536 * 1024, False), (1536 * 1024, False)],
    "exactly_blocks": [(MIB, False), (MIB, False), (2 * MIB, False)],
    "random_straddling_reads": [(MIB + 7, True), (64 * 1024 - 1, True), (MIB - 3, True)],
    "tiny_and_empty_members": [(1, False), (0, False), (5, True), (0, False)],
    "many_small_random": [(40_000 + 997 * i, i % 2 == 0) for i in range(40)],
}


@pytest.mark.parametrize("case", sorted(MEMBER_CASES))
def test_multi_member_gzip_reads_as_zcat(tmp_path: Path, case: str) -> None:
    """RFC 1952: a gzip file is members back to back; every byte of every member once,
    nothing fed twice (the reader used to re-feed zlib's stale `unconsumed_tail` at a
    member's end: a member read twice, or forever up to the size cap)."""
    import gzip

    members = [_member_payload(n, i, r) for i, (n, r) in enumerate(MEMBER_CASES[case])]
    path = tmp_path / "multi.json.gz"
    path.write_bytes(b"".join(gzip.compress(m, compresslevel=6) for m in members))
    reader = source.BlockReader(str(path), max_json_bytes=64 * MIB)
    got = b"".join(reader)
    assert got == _zcat(path) == b"".join(members)
    assert reader.stream_damage is None
    assert all(len(b) <= source.BLOCK_BYTES for b in reader)


def test_multi_member_trace_has_no_data_loss(tmp_path: Path) -> None:
    """A valid trace cut into two gzip members (the second starting one byte past a
    1 MiB block) reads as the single-member file does, with no damage reported."""
    import gzip
    import json

    from tb_kineto_insights.trace.reader import read_trace

    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i % 5}", "pid": 0, "tid": 7,
         "ts": 1000.0 + i, "dur": 0.5, "args": {"stream": 7, "correlation": i}}
        for i in range(20_000)
    ]  # fmt: skip
    text = json.dumps({"traceEvents": events}).encode()
    assert len(text) > 2 * MIB
    whole, split = tmp_path / "whole.json.gz", tmp_path / "split.json.gz"
    whole.write_bytes(gzip.compress(text))
    split.write_bytes(gzip.compress(text[: MIB + 1]) + gzip.compress(text[MIB + 1 :]))
    assert _zcat(split) == text
    one, two = read_trace(str(whole), workers=1), read_trace(str(split), workers=1)
    assert two.health.damage == [] and two.health.lost_events == 0
    assert len(two.kernels) == len(one.kernels) == 20_000
