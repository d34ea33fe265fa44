"""trace/source.py's inflate: zlib-ng when it loads, else the stdlib's zlib; both give
the same blocks and the same damage (offset and problem) on whole, truncated and
corrupt gzip files of a real trace."""

from __future__ import annotations

import importlib.util
import sys
import zlib
from pathlib import Path
from types import ModuleType

import pytest
from conftest import SAMPLE_LOGS

from tb_kineto_insights.trace import source


def _source_without_zlib_ng(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh copy of trace/source.py imported while ``zlib_ng`` cannot be imported."""
    monkeypatch.setitem(sys.modules, "zlib_ng", None)  # None: import raises ImportError
    spec = importlib.util.find_spec("tb_kineto_insights.trace.source")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _blocks(module: ModuleType, path: Path) -> tuple[list[bytes], object]:
    reader = module.BlockReader(str(path))
    return list(reader), reader.stream_damage


def _variants(tmp_path: Path) -> dict[str, Path]:
    raw = sorted((SAMPLE_LOGS / "transformer_eager").glob("*.json.gz"))[0].read_bytes()  # 12.7 MB
    crc, middle = bytearray(raw), bytearray(raw)
    crc[-6] ^= 0xFF  # the trailer's CRC32
    for i in range(len(raw) // 2, len(raw) // 2 + 200):
        middle[i] ^= 0x5A
    out = {}
    for name, data in {
        "whole": raw,
        "truncated": raw[: len(raw) // 2],
        "bad_crc": bytes(crc),
        "corrupt_middle": bytes(middle),
        "two_members": raw + raw,
    }.items():
        out[name] = tmp_path / f"{name}.json.gz"
        out[name].write_bytes(data)
    return out


def test_fallback_is_the_stdlib_zlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fallback = _source_without_zlib_ng(monkeypatch)
    assert fallback.zlib is zlib
    files = _variants(tmp_path)
    blocks, damage = _blocks(fallback, files["whole"])
    assert damage is None
    assert b"".join(blocks) == zlib.decompress(files["whole"].read_bytes(), wbits=31)
    assert max(map(len, blocks)) <= source.BLOCK_BYTES
    _, damage = _blocks(fallback, files["truncated"])
    assert damage is not None and damage[1].startswith("gzip stream ends early")


def test_zlib_ng_and_stdlib_give_the_same_blocks_and_damage(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("zlib_ng")
    assert source.zlib is not zlib  # the fast one is in use when it loads
    fallback = _source_without_zlib_ng(monkeypatch)
    for name, path in _variants(tmp_path).items():
        fast_blocks, fast_damage = _blocks(source, path)
        std_blocks, std_damage = _blocks(fallback, path)
        assert [len(b) for b in fast_blocks] == [len(b) for b in std_blocks], name
        assert fast_blocks == std_blocks, name
        assert len(fast_blocks) > 3, name  # several blocks: the boundaries are compared
        assert fast_damage == std_damage, name
        if name in ("truncated", "bad_crc", "corrupt_middle"):
            assert fast_damage is not None, name
        else:
            assert fast_damage is None, name


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


def test_inflate_on_this_thread_gives_the_same_blocks_without_a_helper_thread(
    tmp_path: Path,
) -> None:
    """Inside ``inflate_on_this_thread`` a reader starts no ``trace-gunzip`` thread and
    yields the blocks and damage of the reader that inflates ahead; outside, the helper
    thread runs while the blocks are read."""
    import threading

    def helpers() -> int:
        return sum(t.name == "trace-gunzip" for t in threading.enumerate())

    for name, path in _variants(tmp_path).items():
        ahead = source.BlockReader(str(path))
        seen_ahead = []
        blocks_ahead = []
        for block in ahead:
            seen_ahead.append(helpers())
            blocks_ahead.append(block)
        with source.inflate_on_this_thread():
            inline = source.BlockReader(str(path))
        seen_inline = []
        blocks_inline = []
        for block in inline:  # made inside the block: inflates here even after it
            seen_inline.append(helpers())
            blocks_inline.append(block)
        assert blocks_inline == blocks_ahead, name
        assert inline.stream_damage == ahead.stream_damage, name
        assert max(seen_ahead) == 1 and max(seen_inline) == 0, name
