"""Issue 15 §2: one shared cache keyed on the trace's content, wherever it is mounted.

The content key (``content_id.py``) against its documented formula; two copies of one
log directory at different paths and one cache: the second ``report`` (and ``diff``,
``check``, a TensorBoard) parses nothing; the cache folder on S3 (moto); a worker that
finds the entry another process stored meanwhile does not parse again; concurrent
writers leave one whole entry. Real traces: ``test_shared_cache_real.py``."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import xxhash
from conftest import pair, real_summary

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.cli import main as cli
from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.service import worker_pool
from tb_kineto_insights.store import cache as cache_module
from tb_kineto_insights.store.cache import (
    CACHE_DIR_ENV,
    DiskCache,
    Identity,
    decode_entry,
    settings_fingerprint,
)
from tb_kineto_insights.store.cached_summaries import CachedSummaries, cli_cache_location
from tb_kineto_insights.store.content_id import HASH_BYTES, content_key
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

SETTINGS = settings_fingerprint(DEFAULT_MAX_JSON_BYTES, DEFAULT_THRESHOLDS)


def by_hand(path: Path, version: str = "") -> str:
    """The content key as the module docstring of content_id.py says to compute it."""
    st = os.stat(path)
    data = path.read_bytes()
    h = xxhash.xxh3_128(b"kineto-insights-content/1\n")
    h.update(b"size=%d\n" % st.st_size)
    token = version or f"mtime={round(st.st_mtime * 1e6)}"
    h.update(b"version=" + token.encode() + b"\n")
    h.update(data[: 2**20])
    if len(data) > 2**20:
        h.update(b"\n--tail--\n")
        h.update(data[max(2**20, len(data) - 2**20) :])
    return h.hexdigest()


@pytest.mark.parametrize("size", [0, 1000, HASH_BYTES, HASH_BYTES + 7, 3 * HASH_BYTES + 5])
def test_content_key_is_the_documented_formula(tmp_path: Path, size: int) -> None:
    path = tmp_path / "a.pt.trace.json"
    path.write_bytes(os.urandom(size))
    st = path.stat()
    assert content_key(str(path), st.st_size, st.st_mtime) == by_hand(path)
    assert content_key(str(path), st.st_size, st.st_mtime, '"etag1"') == by_hand(path, '"etag1"')


def test_content_key_ignores_place_and_follows_content(tmp_path: Path) -> None:
    original = tmp_path / "a" / "w.1.pt.trace.json"
    original.parent.mkdir()
    original.write_bytes(os.urandom(3 * HASH_BYTES))
    copy = tmp_path / "elsewhere" / "deeper" / "w.1.pt.trace.json"
    copy.parent.mkdir(parents=True)
    shutil.copy2(original, copy)  # another path, device/inode; same bytes and mtime

    def key(path: Path) -> str:
        st = path.stat()
        return content_key(str(path), st.st_size, st.st_mtime)

    assert original.stat().st_ino != copy.stat().st_ino
    assert key(original) == key(copy)
    # The last MiB changed (same size, same mtime put back): another key.
    data = bytearray(copy.read_bytes())
    data[-10] ^= 0xFF
    st = copy.stat()
    copy.write_bytes(bytes(data))
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert key(copy) != key(original)
    # Only the mtime changed (a plain `cp`, a touch): another key.
    shutil.copy2(original, copy)
    os.utime(copy, (st.st_atime + 5, st.st_mtime + 5))
    assert key(copy) != key(original)


# --------------------------------------------------------------------------- two copies


def test_cli_cache_location_defaults() -> None:
    assert cli_cache_location(None, {}) is None  # no cache unless asked
    assert cli_cache_location(None, {CACHE_DIR_ENV: "/c"}) == "/c"
    assert cli_cache_location("/flag", {CACHE_DIR_ENV: "/c"}) == "/flag"
    assert cli_cache_location("none", {CACHE_DIR_ENV: "/c"}) is None
    assert cli_cache_location(None, {CACHE_DIR_ENV: "None"}) is None
    assert cli_cache_location("s3://b/cache", {}) == "s3://b/cache"


# --------------------------------------------------------------------------- concurrency


def write_small_trace(path: Path) -> Path:
    from test_plugin import write_good

    return write_good(path)


def ident_of(path: Path) -> Identity:
    """The identity discovery gives a local file (test_cache's helper)."""
    from test_cache import ident_of as local_ident

    return local_ident(path)


def test_a_load_finds_the_entry_another_process_stored_meanwhile(tmp_path: Path) -> None:
    """No duplicated parse when a teammate's TensorBoard stored the entry after this
    one queued the file: the worker looks once more before parsing."""
    trace = write_small_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    ident = ident_of(trace)
    folder = tmp_path / "cache"
    other = CachedSummaries(str(folder))  # the other process
    span = discover(str(tmp_path / "logs"))[0].workers[0].spans[0]
    assert not other.cached(span)
    summary, error = pair(other.summarize(span))
    assert error is None and summary is not None and other.parsed == 1
    assert other.cached(span) and not CachedSummaries(None).cached(span)

    def must_not_parse(path: str, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError(f"parsed {path} again")

    task = worker_pool.LoadTask(
        ident=ident,
        max_json_bytes=DEFAULT_MAX_JSON_BYTES,
        thresholds=DEFAULT_THRESHOLDS,
        settings=SETTINGS,
        cache_folder=str(folder),
        summarize=must_not_parse,
        key=cache_module.entry_key(ident, SETTINGS),
    )
    outcome = worker_pool._run_task(task)
    assert outcome.from_cache and outcome.data is not None
    result = decode_entry(outcome.data, ident, SETTINGS)
    assert result is not None and result.decoded().steps.count == summary.steps.count


def test_concurrent_writers_leave_one_whole_entry(tmp_path: Path) -> None:
    trace = write_small_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    ident = ident_of(trace)
    cache = DiskCache(tmp_path / "cache", SETTINGS)
    entries = [
        cache_module.entry_bytes(ident, SETTINGS, summary=real_summary(mean_step_us=1000.0 + n))
        for n in range(8)
    ]
    start = threading.Barrier(8)

    def writer(data: bytes) -> Callable[[], None]:
        def run() -> None:
            start.wait()
            for _ in range(20):
                cache.store(ident, data, is_error=False)

        return run

    threads = [threading.Thread(target=writer(e)) for e in entries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result = cache.load(ident)
    assert result is not None  # a whole, valid entry: one of the writers' (last wins)
    assert result.decoded().steps.mean_step_us in [1000.0 + n for n in range(8)]
    folder = cache.summary_file(ident).parent
    assert [p.name for p in folder.iterdir()] == [cache.summary_file(ident).name]  # no .tmp


def test_report_with_an_unusable_cache_url_is_a_clear_error(tmp_path: Path) -> None:
    trace = write_small_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(["report", str(trace), "--cache", "nosuchprotocol://bucket/cache"])
    assert code == 2
    assert "--cache nosuchprotocol://bucket/cache" in err.getvalue()
    assert "nosuchprotocol" in err.getvalue().split(":", 2)[-1]
