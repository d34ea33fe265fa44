"""The tests of ``test_source_inflate.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

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
