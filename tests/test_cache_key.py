"""Issue 47: the cache folder's trust model and its optional shared key. Without a key a
cache file's first line is a SHA-256 (damage, not forgery: a re-sealed forged entry is
served, as documented); with ``KINETO_INSIGHTS_CACHE_KEY_FILE`` /
``--kineto_insights_cache_key_file`` it is an HMAC-SHA256, and a file sealed without the
key is dropped and computed again. A key file that cannot be used is a clear error."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import real_summary
from test_cache import SETTINGS, ident_of, write_trace

from tb_kineto_insights.cli.main import main
from tb_kineto_insights.store import cache as cache_module
from tb_kineto_insights.store import seal
from tb_kineto_insights.store.cache import DiskCache
from tb_kineto_insights.store.seal import CACHE_KEY_FILE_ENV, CacheKeyError

#: RFC 4231, test case 4: key 0x01..0x19, data 50 bytes of 0xcd.
RFC4231_KEY = bytes(range(1, 26))
RFC4231_DATA = b"\xcd" * 50
RFC4231_HMAC_SHA256 = b"82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"


@pytest.fixture(autouse=True)
def no_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(CACHE_KEY_FILE_ENV, raising=False)
    seal.use_key_file(None)
    yield
    seal.use_key_file(None)


def key_file(tmp_path: Path, key: bytes, name: str = "cache.key") -> Path:
    path = tmp_path / name
    path.write_bytes(key)
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)  # opened non-blocking: no writer, no hang
    return path


def plain_seal(body: bytes) -> bytes:
    """What anyone with write access can compute: the keyless checksum line."""
    return hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def test_the_seal_is_sha256_without_a_key_and_rfc4231_hmac_with_one(tmp_path: Path) -> None:
    assert seal.sealed(b"abc") == plain_seal(b"abc")
    assert seal.unsealed(plain_seal(b"abc")) == b"abc"
    seal.use_key_file(str(key_file(tmp_path, RFC4231_KEY + b"\n")))  # the newline stripped
    assert os.environ[CACHE_KEY_FILE_ENV] == str(tmp_path / "cache.key")  # for the workers
    assert seal.sealed(RFC4231_DATA) == RFC4231_HMAC_SHA256 + b"\n" + RFC4231_DATA
    assert seal.unsealed(seal.sealed(b"abc")) == b"abc"
    # sealed without the key, or with another key: refused
    assert seal.unsealed(plain_seal(b"abc")) is None
    other = seal.sealed(b"abc")
    seal.use_key_file(str(key_file(tmp_path, b"another key of 16+ bytes", "other.key")))
    assert seal.unsealed(other) is None
    assert seal.seal_problem().startswith("its seal does not match the cache key")
    seal.use_key_file(None)
    assert seal.seal_problem() == (
        "its checksum does not match: damaged, or sealed with a cache key this process "
        "does not have (KINETO_INSIGHTS_CACHE_KEY_FILE)"
    )


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda d: d / "missing.key", "cannot be used: No such file or directory"),
        (lambda d: d, "cannot be used: not a regular file"),
        (lambda d: fifo(d / "fifo.key"), "cannot be used: not a regular file"),
        (lambda d: key_file(d, b"  short  \n"), "holds 5 bytes of key, fewer than the 16"),
        (lambda d: key_file(d, b"k" * 5000), "5,000 bytes, larger than any cache key file (4,096"),
    ],
    ids=["missing", "folder", "fifo", "short", "huge"],
)
def test_a_key_file_that_cannot_be_used_is_named_with_its_problem(
    tmp_path: Path, make: object, why: str
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(CacheKeyError) as caught:
        seal.read_key_file(str(path))
    assert str(caught.value).startswith(f"{path}: the cache key file ")
    assert why in str(caught.value)
    with pytest.raises(CacheKeyError):  # nothing changes: the process keeps no key
        seal.use_key_file(str(path))
    assert seal.current_key() is None


def forged(entry: bytes) -> bytes:
    """A genuine entry with its mean step time changed from 1 ms to 7 ms, re-sealed the
    keyless way: schema-valid, in range, and false."""
    body = entry.split(b"\n", 1)[1]
    assert body.count(b'"mean_step_us":1000.0,') == 1
    return plain_seal(body.replace(b'"mean_step_us":1000.0,', b'"mean_step_us":7000.0,'))


def test_a_forged_entry_is_served_without_a_key_and_recomputed_with_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    ident = ident_of(trace)
    folder = tmp_path / "cache"
    genuine = cache_module.entry_bytes(ident, SETTINGS, summary=real_summary(count=2))
    cache = DiskCache(folder, SETTINGS)
    # no key: the trust model's limit, as documented (the folder's writers are trusted)
    cache.store(ident, forged(genuine), is_error=False)
    served = cache.load(ident)
    assert served is not None and json.loads(served.panels["steps"])["mean_step_us"] == 7000.0
    # a key: the genuine entry written with it is served, the forged one is not
    seal.use_key_file(str(key_file(tmp_path, b"0123456789abcdef0123456789abcdef")))
    keyed = cache_module.entry_bytes(ident, SETTINGS, summary=real_summary(count=2))
    first, body = keyed.split(b"\n", 1)
    assert first == seal._seal_of(body, b"0123456789abcdef0123456789abcdef")
    cache.store(ident, keyed, is_error=False)
    served = cache.load(ident)
    assert served is not None and json.loads(served.panels["steps"])["mean_step_us"] == 1000.0
    cache.store(ident, forged(genuine), is_error=False)
    with caplog.at_level(logging.WARNING):
        assert cache.load(ident) is None  # the loader computes it again
    assert not cache.has(ident)  # dropped
    assert (
        f"dropping corrupt or stale cache file {cache.summary_file(ident)} (its seal does not "
        "match the cache key (written without it, or edited since)): computing it again"
    ) in caplog.text


def test_report_with_a_cache_key_seals_its_entries_and_refuses_a_bad_key_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_KEY_FILE_ENV, str(tmp_path / "nowhere.key"))
    code = main(["report", str(trace), "--cache", str(folder)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err == (
        f"error: {tmp_path / 'nowhere.key'}: the cache key file cannot be used: "
        "No such file or directory\n"
    )
    assert not folder.exists()  # refused before any work
    key = b"a shared key for the team's cache"
    monkeypatch.setenv(CACHE_KEY_FILE_ENV, str(key_file(tmp_path, key)))
    assert main(["report", str(trace), "--cache", str(folder), "--format", "json"]) == 0
    [entry] = folder.rglob("*.summary")
    data = entry.read_bytes()
    first, body = data.split(b"\n", 1)
    assert first == seal._seal_of(body, key) and first != hashlib.sha256(body).hexdigest().encode()


def test_the_tensorboard_flag_refuses_a_bad_key_file(tmp_path: Path) -> None:
    import argparse  # noqa: PLC0415

    from tensorboard.plugins import base_plugin  # noqa: PLC0415

    from tb_kineto_insights.serve.plugin_loader import KinetoInsightsLoader  # noqa: PLC0415

    loader = KinetoInsightsLoader()
    parser = argparse.ArgumentParser()
    loader.define_flags(parser)
    flags = parser.parse_args(["--kineto_insights_cache_key_file", str(tmp_path)])
    with pytest.raises(base_plugin.FlagsError, match="not a regular file"):
        loader.fix_flags(flags)
    good = key_file(tmp_path, b"0123456789abcdef")
    loader.fix_flags(parser.parse_args(["--kineto_insights_cache_key_file", str(good)]))


def test_a_cache_that_is_a_file_is_one_error_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_bytes(b"x")
    assert main(["report", str(trace), "--cache", str(not_a_folder)]) == 2
    assert capsys.readouterr().err == (
        f"error: cache '{not_a_folder}' cannot be written: it is not a folder\n"
    )
    assert not_a_folder.read_bytes() == b"x"


def test_the_plugin_seals_with_the_flags_key_and_its_workers_inherit_it(tmp_path: Path) -> None:
    """``--kineto_insights_cache_key_file``: the plugin's settings take the key (and put
    the file into the environment its worker processes start with); without the flag,
    a bad ``KINETO_INSIGHTS_CACHE_KEY_FILE`` stops the plugin's start with its reason."""
    from types import SimpleNamespace  # noqa: PLC0415

    from tb_kineto_insights.serve.settings import use_cache_key  # noqa: PLC0415

    key = key_file(tmp_path, b"the team's shared key, 32 bytes")
    context = SimpleNamespace(flags=SimpleNamespace(kineto_insights_cache_key_file=str(key)))
    use_cache_key(context.flags.kineto_insights_cache_key_file)
    assert seal.current_key() == b"the team's shared key, 32 bytes"
    assert os.environ[CACHE_KEY_FILE_ENV] == str(key)
    seal.use_key_file(None)
    os.environ[CACHE_KEY_FILE_ENV] = str(tmp_path / "gone.key")
    with pytest.raises(CacheKeyError, match="gone.key: the cache key file cannot be used"):
        use_cache_key(None)
