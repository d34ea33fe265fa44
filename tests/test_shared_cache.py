"""Issue 15 §2: one shared cache keyed on the trace's content, wherever it is mounted.

The content key (``content_id.py``) against its documented formula; two copies of one
log directory at different paths and one cache: the second ``report`` (and ``diff``,
``check``, a TensorBoard) parses nothing; the cache folder on S3 (moto); a worker that
finds the entry another process stored meanwhile does not parse again; concurrent
writers leave one whole entry."""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import xxhash
from conftest import Parses, S3Server, pair, real_summary
from werkzeug.test import Client

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
from tb_kineto_insights.summary import ANALYSIS_VERSION
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

SETTINGS = settings_fingerprint(DEFAULT_MAX_JSON_BYTES, DEFAULT_THRESHOLDS)
RUNS = ("ddp_default", "ddp_straggler")


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


@pytest.fixture
def two_copies(h200x2: Path, tmp_path: Path) -> tuple[Path, Path]:
    """One log directory (two real 2-rank runs) and a copy of it elsewhere, times kept
    (``cp -a``, ``rsync -a``: as a team's shared folder mounted at two places reads)."""
    first = tmp_path / "mnt" / "team" / "logs"
    for run in RUNS:
        shutil.copytree(h200x2 / run, first / run)
    second = tmp_path / "home" / "me" / "logs-copy"
    shutil.copytree(first, second)
    return first, second


def cli_run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(argv)
    return code, out.getvalue()


def no_paths(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: no_paths(v) for k, v in value.items() if k not in ("file", "path")}
    if isinstance(value, list):
        return [no_paths(v) for v in value]
    return value


def test_second_report_on_a_copy_parses_nothing(
    two_copies: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two_copies
    cache = tmp_path / "shared-cache"
    parses = Parses(monkeypatch)
    code, out_first = cli_run(["report", str(first), "--format", "json", "--cache", str(cache)])
    assert code == 0
    assert len(parses.paths) == 4 and all(p.startswith(str(first)) for p in parses.paths)
    entries = sorted((cache / f"v{ANALYSIS_VERSION}").iterdir())
    assert len(entries) == 4 and all(p.suffix == ".summary" for p in entries)

    parses.paths.clear()
    code, out_second = cli_run(["report", str(second), "--format", "json", "--cache", str(cache)])
    assert code == 0
    assert parses.paths == []  # every span from the cache: nothing parsed
    assert len(sorted((cache / f"v{ANALYSIS_VERSION}").iterdir())) == 4  # nothing added
    report_first, report_second = json.loads(out_first), json.loads(out_second)
    assert no_paths(report_first) == no_paths(report_second)
    # The cached summaries name the copy's files, not the files they were computed from.
    for run in report_second["runs"]:
        for worker in run["workers"]:
            for span in worker["spans"]:
                assert span["file"].startswith(str(second))
                assert span["summary"]["health"]["path"] == span["file"]
    assert all(r["run_summary"] is not None for r in report_second["runs"])

    # The same cache through the plugin's environment variable (no --cache): diff and
    # check on the copy parse nothing either.
    monkeypatch.setenv(CACHE_DIR_ENV, str(cache))
    base, exp = str(second / "ddp_default"), str(second / "ddp_straggler")
    assert cli_run(["diff", base, exp, "--format", "json"])[0] == 0
    assert cli_run(["check", base, exp, "--max-step-time-regression", "1000%"])[0] == 0
    assert parses.paths == []
    # Without a cache (none), the copy is read again: the counter does count.
    assert cli_run(["report", str(second), "--cache", "none"])[0] == 0
    assert len(parses.paths) == 4


def test_cli_cache_location_defaults() -> None:
    assert cli_cache_location(None, {}) is None  # no cache unless asked
    assert cli_cache_location(None, {CACHE_DIR_ENV: "/c"}) == "/c"
    assert cli_cache_location("/flag", {CACHE_DIR_ENV: "/c"}) == "/flag"
    assert cli_cache_location("none", {CACHE_DIR_ENV: "/c"}) is None
    assert cli_cache_location(None, {CACHE_DIR_ENV: "None"}) is None
    assert cli_cache_location("s3://b/cache", {}) == "s3://b/cache"


def test_tensorboard_on_the_copy_serves_from_the_cache(
    two_copies: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A teammate's TensorBoard on the other mount point: ready without reading."""
    from test_plugin import PRELOAD_ENV, RecordingLoader, make_app, summary_url, the_plugin

    from tb_kineto_insights.service import loader as loader_module

    first, second = two_copies
    cache = tmp_path / "shared-cache"
    assert cli_run(["report", str(first), "--cache", str(cache)])[0] == 0  # fills the cache

    parses: list[str] = []
    real = loader_module.summarize_file_with_timeline

    def counting(path: str, **kwargs: Any) -> Any:
        parses.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(loader_module, "summarize_file_with_timeline", counting)
    monkeypatch.setenv(PRELOAD_ENV, "1")
    RecordingLoader.made = []
    try:
        client = Client(make_app(second, "--kineto_insights_cache_dir", str(cache)))
        plugin = the_plugin()
        assert plugin.rescan()
        spans = [s for r in discover(str(second)) for w in r.workers for s in w.spans]
        assert len(spans) == 4
        for span in spans:
            response = client.get(summary_url(span.run, span.worker, span.span, wait="30"))
            assert response.status_code == 200
            summary = json.loads(response.get_data(as_text=True))
            assert summary["health"]["path"] == span.path
            assert summary["steps"]["count"] > 0
        response = client.get(f"/data/plugin/kineto_insights/run_summary?run={RUNS[1]}&wait=30")
        assert response.status_code == 200
        assert parses == []
        assert plugin.loader.loads_started == 0
    finally:
        for instance in RecordingLoader.made:
            instance.close()


# --------------------------------------------------------------------------- S3 cache


def test_cache_folder_on_s3(
    two_copies: tuple[Path, Path], s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    first, second = two_copies
    bucket = f"cache-{secrets.token_hex(4)}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir(bucket)
    url = f"s3://{bucket}/team/cache"
    parses = Parses(monkeypatch)
    assert cli_run(["report", str(first), "--cache", url])[0] == 0
    assert len(parses.paths) == 4
    found = fs.find(f"{bucket}/team/cache")
    headlines = [p for p in found if p.startswith(f"{bucket}/team/cache/headlines/")]
    stored = [p for p in found if p not in headlines]
    assert len(headlines) == 8  # each summary's headline, by content key and by file
    assert len(stored) == 4
    assert all(p.startswith(f"{bucket}/team/cache/v{ANALYSIS_VERSION}/") for p in stored)
    assert all(p.endswith(".summary") for p in stored)
    parses.paths.clear()
    assert cli_run(["report", str(second), "--cache", url])[0] == 0
    assert parses.paths == []


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
        cache_module.entry_bytes(ident, SETTINGS, summary=real_summary(count=n)) for n in range(8)
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
    assert result.decoded().steps.count in range(8)
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
