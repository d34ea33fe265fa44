"""The disk cache and the background loader: hits without re-parsing, changed and corrupt
files, reader errors, priorities, worker processes (bounded, reused, dying, idle).
Real traces: ``test_cache_real.py``."""

from __future__ import annotations

import gzip
import json
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import real_summary, wait_until

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.service.loader import SummaryLoader
from tb_kineto_insights.service.worker_pool import (
    LOAD_TIMEOUT_ENV,
    LOAD_TIMEOUT_PER_MIB_ENV,
    WORKERS_ENV,
    LoadDeadline,
    load_deadline_from_env,
    workers_from_env,
)
from tb_kineto_insights.store import cache as cache_module
from tb_kineto_insights.store.cache import (
    CACHE_DIR_ENV,
    DiskCache,
    Identity,
    cache_dir_from_env,
    decode_entry,
    encode_json,
    settings_fingerprint,
)
from tb_kineto_insights.summary import ANALYSIS_VERSION
from tb_kineto_insights.trace.errors import TraceFormatError
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

TESTS = Path(__file__).resolve().parent
SETTINGS = settings_fingerprint(DEFAULT_MAX_JSON_BYTES, DEFAULT_THRESHOLDS)


def write_trace(path: Path, steps: int = 2, step_us: float = 1000.0) -> Path:
    events: list[dict[str, Any]] = []
    for n in range(1, steps + 1):
        ts = 1000.0 + (n - 1) * step_us
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{n}",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": step_us,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": ts + 10.0,
                "dur": 20.0,
                "args": {"device": 0, "stream": 7, "correlation": n},
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def ident_of(path: Path) -> Identity:
    """The identity discovery gives a local file (its target's stat for a link)."""
    st = path.stat()
    return Identity(
        str(path),
        st.st_size,
        st.st_mtime,
        device=st.st_dev,
        inode=st.st_ino,
        mtime_ns=st.st_mtime_ns,
        root=str(path.parent.resolve()),
    )


class Counting:
    """A summarize function that counts its calls (thread mode: same process)."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[str] = []
        self.gate = gate
        self.started = threading.Event()

    def __call__(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(path)
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(20.0)
        if "broken" in path:
            raise TraceFormatError(path, "truncated: the file ends early")
        summary = real_summary(count=2, mean_step_us=1000.0, cv=math.nan)
        summary["health"]["event_count"] = np.int64(4)
        return summary


@pytest.fixture
def loaders() -> Iterator[list[SummaryLoader]]:
    made: list[SummaryLoader] = []
    yield made
    for loader in made:
        loader.close()


def make_loader(
    made: list[SummaryLoader], folder: Path | None, summarize: Any, **kwargs: Any
) -> SummaryLoader:
    loader = SummaryLoader(
        cache=None if folder is None else DiskCache(folder, SETTINGS),
        summarize=summarize,
        **{"workers": 0, **kwargs},
    )
    made.append(loader)
    return loader


# --------------------------------------------------------------------------- settings


def test_cache_dir_from_env(tmp_path: Path) -> None:
    assert cache_dir_from_env({CACHE_DIR_ENV: str(tmp_path)}) == tmp_path
    assert cache_dir_from_env({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "tb-kineto-insights"
    default = cache_dir_from_env({})
    assert default == Path("~/.cache/tb-kineto-insights").expanduser()


@pytest.mark.parametrize(("raw", "expected"), [("0", 0), ("3", 3), ("-1", None), ("x", None)])
def test_workers_from_env(raw: str, expected: int | None) -> None:
    default = max(1, min(4, len(os.sched_getaffinity(0))))  # one per usable core, at most 4
    assert workers_from_env({WORKERS_ENV: raw}) == (default if expected is None else expected)
    assert workers_from_env({}) == default
    assert workers_from_env({}) <= 4


def test_encode_json_is_strict() -> None:
    data = encode_json(
        {"a": math.nan, "b": [math.inf, np.float32(0.5)], 3: np.arange(2), "t": (1, 2)}
    )

    def reject(token: str) -> Any:
        raise AssertionError(token)

    assert json.loads(data, parse_constant=reject) == {
        "a": None,
        "b": [None, 0.5],
        "3": [0, 1],
        "t": [1, 2],
    }


def test_encode_json_writes_names_that_are_not_utf8_instead_of_raising() -> None:
    """A file name with the byte 0xff reaches Python as U+DCFF (surrogateescape); UTF-8
    cannot hold it: the byte is written as U+FFFD (what a terminal shows), any other
    lone surrogate as ``?``; everything else as before."""
    name = os.fsdecode(b"/logs/bad\xffrun/w\xfe.7.pt.trace.json")
    assert name == "/logs/bad\udcffrun/w\udcfe.7.pt.trace.json"
    data = encode_json({"path": name, "other": ["\ud800", "\u00e9", math.nan, np.int64(3)]})
    assert data == (
        b'{"path":"/logs/bad\xef\xbf\xbdrun/w\xef\xbf\xbd.7.pt.trace.json",'
        b'"other":["?","\xc3\xa9",null,3]}'
    )
    # inside tuples too: the headline index keeps (file, entry) pairs; a run folder that
    # is not UTF-8 made `history --cache` exit 2 and the plugin's /history and
    # /across_runs answer 500 (attack run)
    assert encode_json({"entries": [(name, 1)]}) == (
        b'{"entries":[["/logs/bad\xef\xbf\xbdrun/w\xef\xbf\xbd.7.pt.trace.json",1]]}'
    )


# --------------------------------------------------------------------------- disk cache


def test_disk_cache_round_trip_is_atomic_and_versioned(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    ident = ident_of(trace)
    cache = DiskCache(tmp_path / "cache", SETTINGS)
    assert not cache.has(ident)
    summary = real_summary()
    data = cache_module.entry_bytes(ident, SETTINGS, summary=summary)
    cache.store(ident, data, is_error=False)
    assert cache.has(ident)
    assert cache.summary_file(ident).parent == tmp_path / "cache" / f"v{ANALYSIS_VERSION}"
    # Only the final file: no temporary file left behind.
    assert [p.name for p in cache.summary_file(ident).parent.iterdir()] == [
        cache.summary_file(ident).name
    ]
    result = cache.load(ident)
    assert result is not None and result.error is None
    assert json.loads(result.summary or b"") == summary
    assert json.loads(result.panels["steps"]) == summary["steps"]
    assert summary["steps"]["count"] == 2
    # Another identity (size, mtime), or other settings: a miss.
    assert cache.load(Identity(ident.path, ident.size_bytes + 1, ident.mtime)) is None
    assert cache.load(Identity(ident.path, ident.size_bytes, ident.mtime + 1)) is None
    assert DiskCache(tmp_path / "cache", SETTINGS + "x").load(ident) is None


def test_decode_entry_rejects_corrupt_and_mismatched(tmp_path: Path) -> None:
    ident = Identity("/x.json", 10, 1.5, content="c1")  # content key given: no file read
    good = cache_module.entry_bytes(ident, SETTINGS, summary=real_summary())
    assert decode_entry(good, ident, SETTINGS) is not None
    for bad in (b"", b"{", b"null", b"[]", good[:-5], good.replace(b'"steps"', b"1")):
        assert decode_entry(bad, ident, SETTINGS) is None, bad
    # Issue 15: the same content at another path is the same entry; other content is not.
    assert decode_entry(good, Identity("/y.json", 10, 1.5, content="c1"), SETTINGS) is not None
    assert decode_entry(good, Identity("/x.json", 10, 1.5, content="c2"), SETTINGS) is None
    # A file that cannot be read for its content key: never served.
    assert decode_entry(good, Identity("/nonexistent/x.json", 10, 1.5), SETTINGS) is None
    other_version = good.replace(
        f'"analysis_version":{ANALYSIS_VERSION}'.encode(),
        f'"analysis_version":{ANALYSIS_VERSION + 1}'.encode(),
    )
    assert other_version != good
    assert decode_entry(other_version, ident, SETTINGS) is None


# --------------------------------------------------------------------------- loader


def test_hit_after_restart_does_not_reparse(tmp_path: Path, loaders: list[SummaryLoader]) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    ident = ident_of(trace)
    count = Counting()
    first = make_loader(loaders, tmp_path / "cache", count)
    status, result = first.get(ident, wait_s=20)
    assert status.state == "ready" and result is not None
    assert (
        json.loads(result.panels["steps"])
        == real_summary(count=2, mean_step_us=1000.0, cv=None)["steps"]
    )
    assert json.loads(result.panels["health"])["event_count"] == 4
    assert len(count.calls) == 1
    # Served from memory: no second parse.
    assert first.get(ident)[1] is not None and len(count.calls) == 1
    first.close()

    # "Restart" (or a teammate with the same cache folder): ready without reading.
    second_count = Counting()
    second = make_loader(loaders, tmp_path / "cache", second_count)
    second.note_discovered([ident], preload=True, settle_s=0)
    assert second.status(ident).state == "ready"
    status, again = second.get(ident)
    assert status.state == "ready" and again is not None
    assert again.summary == result.summary
    # still ready, so nothing is queued: no load can start later, and none has
    assert second.status(ident).state == "ready"
    assert second_count.calls == []
    assert second.loads_started == 0


def test_changed_file_is_read_again(tmp_path: Path, loaders: list[SummaryLoader]) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz", steps=2)
    count = Counting()
    loader = make_loader(loaders, tmp_path / "cache", count)
    assert loader.get(ident_of(trace), wait_s=20)[1] is not None
    write_trace(trace, steps=5)
    os.utime(trace, (time.time() + 10, time.time() + 10))
    changed = ident_of(trace)
    loader.note_discovered([changed], preload=False)
    assert loader.status(changed).state == "not_loaded"
    assert loader.get(changed, wait_s=20)[1] is not None
    assert len(count.calls) == 2


def test_corrupt_cache_file_is_ignored_and_rewritten(
    tmp_path: Path, loaders: list[SummaryLoader]
) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    ident = ident_of(trace)
    folder = tmp_path / "cache"
    count = Counting()
    make_loader(loaders, folder, count).get(ident, wait_s=20)
    cache = DiskCache(folder, SETTINGS)
    cache.summary_file(ident).write_bytes(b'{"format":1,"analysis_ver')  # a torn write
    fresh = make_loader(loaders, folder, count)
    fresh.note_discovered([ident], preload=False)
    assert fresh.status(ident).state == "ready"  # known from the file's existence only
    status, result = fresh.get(ident, wait_s=20)
    assert status.state == "ready" and result is not None
    assert len(count.calls) == 2  # parsed again
    assert cache.load(ident) is not None  # and the file rewritten


def test_reader_error_is_cached_on_disk(tmp_path: Path, loaders: list[SummaryLoader]) -> None:
    broken = tmp_path / "logs" / "broken.1.pt.trace.json"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b'{"traceEvents": [')
    ident = ident_of(broken)
    count = Counting()
    loader = make_loader(loaders, tmp_path / "cache", count)
    status, result = loader.get(ident, wait_s=20)
    assert result is None
    assert status.state == "error" and status.error_kind == "trace"
    assert "truncated" in (status.error or "")
    # Asking again does not re-read a file the reader rejected.
    assert loader.get(ident)[0].state == "error" and len(count.calls) == 1
    again = make_loader(loaders, tmp_path / "cache", count)
    again.note_discovered([ident], preload=True, settle_s=0)
    assert again.status(ident).state == "error"
    assert again.status(ident).error == status.error
    assert len(count.calls) == 1


def test_internal_error_is_retried_on_request(tmp_path: Path, loaders: list[SummaryLoader]) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    fail = [True]

    def flaky(path: str, **kwargs: Any) -> dict[str, Any]:
        if fail[0]:
            raise RuntimeError("analysis bug")
        return real_summary()

    loader = make_loader(loaders, tmp_path / "cache", flaky)
    status, _ = loader.get(ident_of(trace), wait_s=20)
    assert status.state == "error" and status.error_kind == "internal"
    assert "analysis bug" in (status.error or "")
    assert not DiskCache(tmp_path / "cache", SETTINGS).has(ident_of(trace))
    fail[0] = False
    status, result = loader.get(ident_of(trace), wait_s=20)
    assert status.state == "ready" and result is not None


def test_requests_go_before_preloading_and_states_are_visible(
    tmp_path: Path, loaders: list[SummaryLoader]
) -> None:
    traces = [write_trace(tmp_path / "logs" / f"w{i}.1.pt.trace.json.gz") for i in range(4)]
    idents = [ident_of(t) for t in traces]
    gate = threading.Event()
    count = Counting(gate)
    loader = make_loader(loaders, None, count)
    loader.note_discovered(idents, preload=True, settle_s=0)
    assert count.started.wait(10)
    states = [s.state for s in loader.statuses(idents)]
    assert states.count("loading") == 1 and states.count("queued") == 3
    first = count.calls[0]
    last = next(i for i in reversed(idents) if i.path != first)
    assert loader.request(last).state == "queued"
    t0 = time.perf_counter()
    loader.status(last)
    assert time.perf_counter() - t0 < 0.5  # status never waits for the load
    gate.set()
    status, result = loader.get(last, wait_s=20)
    assert status.state == "ready" and result is not None
    assert count.calls[1] == last.path  # the requested one went next
    for ident in idents:
        assert loader.get(ident, wait_s=20)[0].state == "ready"
    assert sorted(count.calls) == sorted(str(t) for t in traces)


def test_recent_files_settle_before_preloading(
    tmp_path: Path, loaders: list[SummaryLoader]
) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    loader = make_loader(loaders, None, Counting())
    loader.note_discovered([ident_of(trace)], preload=True, settle_s=3600)
    assert loader.status(ident_of(trace)).state == "not_loaded"
    assert loader.get(ident_of(trace), wait_s=20)[0].state == "ready"  # asked for: loaded


def test_vanished_files_are_forgotten(tmp_path: Path, loaders: list[SummaryLoader]) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    loader = make_loader(loaders, None, Counting())
    loader.get(ident_of(trace), wait_s=20)
    loader.note_discovered([], preload=True)
    assert loader.status(ident_of(trace)).state == "not_loaded"


def test_memory_only_loader_evicts_and_reloads(
    tmp_path: Path, loaders: list[SummaryLoader]
) -> None:
    traces = [write_trace(tmp_path / "logs" / f"w{i}.1.pt.trace.json.gz") for i in range(3)]
    count = Counting()
    loader = make_loader(loaders, None, count, memory_items=2)
    for t in traces:
        assert loader.get(ident_of(t), wait_s=20)[1] is not None
    assert len(count.calls) == 3
    # The first one was evicted from memory and there is no disk cache: read again.
    assert loader.get(ident_of(traces[0]), wait_s=20)[1] is not None
    assert len(count.calls) == 4


def test_progress_estimate_while_loading(tmp_path: Path, loaders: list[SummaryLoader]) -> None:
    a = write_trace(tmp_path / "logs" / "a.1.pt.trace.json.gz")
    b = write_trace(tmp_path / "logs" / "b.1.pt.trace.json.gz")
    gate = threading.Event()
    count = Counting()
    loader = make_loader(loaders, None, count)
    loader.get(ident_of(a), wait_s=20)
    count.gate, count.started = gate, threading.Event()
    loader.request(ident_of(b))
    assert count.started.wait(10)
    status = loader.status(ident_of(b))
    assert status.state == "loading"
    assert status.progress is not None
    assert status.progress["elapsed_s"] is not None and status.progress["elapsed_s"] >= 0
    fraction = status.progress["estimated_fraction"]
    assert fraction is not None and 0 <= fraction <= 0.99
    gate.set()


# --------------------------------------------------------------------------- processes


def dies_when_marked(path: str, **kwargs: Any) -> dict[str, Any]:
    """Runs in a worker process: SIGKILLs itself while a marker file exists."""
    if Path(path + ".die").exists():
        os.kill(os.getpid(), signal.SIGKILL)
    from tb_kineto_insights.summary import summarize_file

    return summarize_file(path, **kwargs)


@pytest.fixture
def tests_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes import this module by name (to unpickle the function)."""
    old = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(TESTS), old) if p))


def test_worker_processes_are_bounded_reused_and_stop_when_idle(
    tmp_path: Path, loaders: list[SummaryLoader]
) -> None:
    traces = [
        write_trace(tmp_path / "logs" / f"w{i}.1.pt.trace.json.gz", steps=2 + i) for i in range(5)
    ]
    loader = SummaryLoader(
        cache=DiskCache(tmp_path / "cache", SETTINGS), workers=2, idle_shutdown_s=1.0
    )
    loaders.append(loader)
    idents = [ident_of(t) for t in traces]
    loader.note_discovered(idents, preload=True, settle_s=0)
    seen: set[int] = set()

    def all_ready() -> bool:
        pids = loader.worker_pids
        assert len(pids) <= 2
        seen.update(pids)
        return all(s.state == "ready" for s in loader.statuses(idents))

    wait_until(all_ready, 60, lambda: f"five files ready: {loader.statuses(idents)}")
    assert [s.state for s in loader.statuses(idents)] == ["ready"] * 5
    assert 1 <= len(seen) <= 2  # five files, at most two processes, reused
    for n, ident in enumerate(idents):
        _, result = loader.get(ident)
        assert result is not None and json.loads(result.panels["steps"])["count"] == 2 + n
    assert DiskCache(tmp_path / "cache", SETTINGS).has(idents[0])  # written by the worker
    # idle (1 s): no process holds memory
    wait_until(lambda: loader.worker_pids == [], 15, "the idle worker processes to exit")


def test_dead_worker_fails_only_its_file_and_is_retried(
    tmp_path: Path, loaders: list[SummaryLoader], tests_importable: None
) -> None:
    good = write_trace(tmp_path / "logs" / "good.1.pt.trace.json.gz")
    doomed = write_trace(tmp_path / "logs" / "doomed.1.pt.trace.json.gz")
    marker = Path(str(doomed) + ".die")
    marker.write_text("x")
    loader = SummaryLoader(cache=None, workers=1, summarize=dies_when_marked, retry_backoff_s=0.0)
    loaders.append(loader)
    status, result = loader.get(ident_of(doomed), wait_s=30)
    assert result is None
    assert status.state == "error" and status.error_kind == "worker"
    assert "died" in (status.error or "") and "out of memory" in (status.error or "")
    # The next file gets a fresh process.
    assert loader.get(ident_of(good), wait_s=30)[0].state == "ready"
    # Asked again after the cause is gone: read again.
    marker.unlink()
    assert loader.get(ident_of(doomed), wait_s=30)[0].state == "ready"


def test_close_kills_a_load_in_progress(tmp_path: Path, tests_importable: None) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    loader = SummaryLoader(cache=None, workers=1, summarize=sleeps_forever)
    try:
        loader.request(ident_of(trace))
        wait_until(
            lambda: loader.status(ident_of(trace)).state == "loading" and loader.worker_pids,
            20,
            "the load to start in a worker process",
        )
        pid = loader.worker_pids[0]
    finally:
        started = time.monotonic()
        loader.close()
    assert time.monotonic() - started < 10
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def sleeps_forever(path: str, **kwargs: Any) -> dict[str, Any]:
    # the input under test: a load (in a worker process) that never ends by itself
    time.sleep(3600)
    return {}


# --------------------------------------------------------------------------- issue 13


def test_a_sealed_entry_with_a_forged_checksum_for_another_identity_is_rejected(
    tmp_path: Path,
) -> None:
    """A valid, correctly sealed entry copied under another identity's file name (a
    teammate's mix-up, or on purpose) is not served: the key inside names its identity."""
    ident = Identity("/logs/a.1.pt.trace.json", 10, 1.5, device=1, inode=2, content="a")
    other = Identity("/logs/b.1.pt.trace.json", 10, 1.5, device=1, inode=4, content="b")
    cache = DiskCache(tmp_path / "cache", SETTINGS)
    cache.store(
        ident, cache_module.entry_bytes(ident, SETTINGS, summary=real_summary()), is_error=False
    )
    cache.summary_file(other).write_bytes(cache.summary_file(ident).read_bytes())
    assert cache.load(ident) is not None
    assert cache.load(other) is None
    assert not cache.summary_file(other).exists()  # dropped


def test_flipped_value_in_cache_is_recomputed_not_served(
    tmp_path: Path, loaders: list[SummaryLoader]
) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz", steps=2, step_us=1000.0)
    ident = ident_of(trace)
    folder = tmp_path / "cache"
    from tb_kineto_insights.summary import summarize_file

    first = make_loader(loaders, folder, summarize_file)
    assert first.get(ident, wait_s=30)[1] is not None
    path = DiskCache(folder, SETTINGS).summary_file(ident)
    data = path.read_bytes()
    at = data.index(b'"mean_step_us":1000.0') + len(b'"mean_step_us":')
    path.write_bytes(data[:at] + b"9" + data[at + 1 :])  # 1000.0 -> 9000.0, valid JSON
    fresh = make_loader(loaders, folder, summarize_file)
    fresh.note_discovered([ident], preload=False)
    status, result = fresh.get(ident, wait_s=30)
    assert status.state == "ready" and result is not None
    assert result.decoded().steps.mean_step_us == 1000.0
    rewritten = decode_entry(path.read_bytes(), ident, SETTINGS)  # the true value again
    assert rewritten is not None and rewritten.decoded().steps.mean_step_us == 1000.0


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_cache_files_follow_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    """Issue 13 §3: a shared cache folder is readable by the group as the umask says
    (tempfile.mkstemp gave 0600 whatever the umask)."""
    ident = Identity("/x.1.pt.trace.json", 10, 1.5, content="c1")
    cache = DiskCache(tmp_path / "cache", SETTINGS)
    old = os.umask(umask)
    try:
        cache.store(ident, cache_module.entry_bytes(ident, SETTINGS, summary={}), is_error=False)
    finally:
        os.umask(old)
    assert cache.summary_file(ident).stat().st_mode & 0o777 == mode
    assert [p.name for p in cache.summary_file(ident).parent.iterdir()] == [
        cache.summary_file(ident).name
    ]


def test_io_errors_are_answered_but_never_cached(
    tmp_path: Path, loaders: list[SummaryLoader]
) -> None:
    """Issue 13 §2: a missing file is an ``io`` error, kept in memory only; asked again
    after the file is back, it is read."""
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    ident = ident_of(trace)
    backup = trace.read_bytes()
    trace.unlink()
    from tb_kineto_insights.summary import summarize_file

    loader = make_loader(loaders, tmp_path / "cache", summarize_file)
    status, result = loader.get(ident, wait_s=30)
    assert result is None and status.state == "error" and status.error_kind == "io"
    assert "file not found" in (status.error or "")
    assert not DiskCache(tmp_path / "cache", SETTINGS).has(ident)
    trace.write_bytes(backup)
    os.utime(trace, ns=(ident.mtime_ns, ident.mtime_ns))
    status, result = loader.get(ident_of(trace), wait_s=30)
    assert status.state == "ready" and result is not None


def test_an_old_io_error_entry_is_not_a_verdict(tmp_path: Path) -> None:
    """An error entry recording an I/O error (as older versions wrote) is ignored."""
    from tb_kineto_insights.summary import span_failed
    from tb_kineto_insights.trace.errors import TraceIOError

    ident = Identity("/x.1.pt.trace.json", 10, 1.5, content="c1")
    gone = span_failed(TraceIOError(ident.path, "gone"), ident.path)
    entry = cache_module.entry_bytes(ident, SETTINGS, error=gone)
    assert decode_entry(entry, ident, SETTINGS) is None
    bad = span_failed(TraceFormatError(ident.path, "x"), ident.path)
    content = cache_module.entry_bytes(ident, SETTINGS, error=bad)
    decoded = decode_entry(content, ident, SETTINGS)
    assert decoded is not None and decoded.error_type == "TraceFormatError"


def test_load_deadline_is_base_plus_seconds_per_mib() -> None:
    deadline = LoadDeadline(base_s=10.0, per_mib_s=3.0)
    assert deadline.for_size(0) == 10.0
    assert deadline.for_size(2 * 1024**2) == 16.0
    assert deadline.for_size(512 * 1024) == 11.5
    assert LoadDeadline(0.0, 0.0).for_size(10**9) is None  # both 0: no deadline
    assert LoadDeadline().for_size(1024**3) == 120.0 + 2.0 * 1024
    env = {LOAD_TIMEOUT_ENV: "5", LOAD_TIMEOUT_PER_MIB_ENV: "0.5"}
    assert load_deadline_from_env(env) == LoadDeadline(5.0, 0.5)
    bad = {LOAD_TIMEOUT_ENV: "-1", LOAD_TIMEOUT_PER_MIB_ENV: "nan"}
    assert load_deadline_from_env(bad) == LoadDeadline()
    assert load_deadline_from_env({}) == LoadDeadline(120.0, 2.0)


def test_stopped_worker_is_killed_at_the_deadline_and_retried(
    tmp_path: Path, loaders: list[SummaryLoader]
) -> None:
    """Issue 13 §4: SIGSTOP the worker; the load ends at its deadline (1.5 s + 0 s/MiB)
    with a ``timeout`` error naming it, the worker is replaced, asking again reads."""
    first = write_trace(tmp_path / "logs" / "a.1.pt.trace.json.gz", steps=2)
    second = write_trace(tmp_path / "logs" / "b.1.pt.trace.json.gz", steps=3)
    loader = SummaryLoader(
        cache=None, workers=1, deadline=LoadDeadline(1.5, 0.0), retry_backoff_s=0.0
    )
    loaders.append(loader)
    assert loader.get(ident_of(first), wait_s=60)[0].state == "ready"
    (pid,) = loader.worker_pids
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    status, result = loader.get(ident_of(second), wait_s=30)
    elapsed = time.monotonic() - started
    assert result is None and status.state == "error" and status.error_kind == "timeout"
    assert "deadline of 1.5 s" in (status.error or "") and "retry" in (status.error or "")
    assert 1.4 <= elapsed < 10.0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped
    status, result = loader.get(ident_of(second), wait_s=60)
    assert status.state == "ready" and result is not None
    assert json.loads(result.panels["steps"])["count"] == 3
    assert loader.worker_pids and loader.worker_pids != [pid]


def test_thread_mode_has_no_deadline(tmp_path: Path, loaders: list[SummaryLoader]) -> None:
    """A load in a thread cannot be stopped, so none is promised: progress says null."""
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    gate = threading.Event()
    count = Counting(gate)
    loader = make_loader(loaders, None, count, deadline=LoadDeadline(0.1, 0.0))
    loader.request(ident_of(trace))
    assert count.started.wait(20)

    def past_the_deadline() -> bool:  # or no longer loading, which the asserts catch
        progress = loader.status(ident_of(trace)).progress
        return progress is None or progress["elapsed_s"] >= 0.3  # the deadline is 0.1 s

    wait_until(past_the_deadline, 20, "the load to run past its deadline")
    status = loader.status(ident_of(trace))
    assert status.state == "loading" and status.progress is not None
    assert status.progress["deadline_s"] is None
    gate.set()
    assert loader.get(ident_of(trace), wait_s=20)[0].state == "ready"


# --------------------------------------------------------------------------- issue 32 §3


def sleeps_when_bad(path: str, **kwargs: Any) -> Any:
    """Runs in a worker process: a file named ``bad*`` never finishes (as the 1.8 KB
    trace whose regex backtracked for minutes); others are summarised."""
    if Path(path).name.startswith("bad"):
        time.sleep(3600)  # the input under test: a load that never ends by itself
    from tb_kineto_insights.summary import summarize_file

    return summarize_file(path, **kwargs)


def test_a_timed_out_file_is_not_retried_by_every_poll(
    tmp_path: Path, loaders: list[SummaryLoader], tests_importable: None
) -> None:
    """Past its deadline a file is not read again by each request of a polling page:
    for ``retry_backoff_s`` (then 2x, 4x, ...) requests answer its error, which says so."""
    bad = ident_of(write_trace(tmp_path / "logs" / "bad.1.pt.trace.json.gz"))
    loader = SummaryLoader(
        cache=None,
        workers=1,
        summarize=sleeps_when_bad,
        deadline=LoadDeadline(1.0, 0.0),
        retry_backoff_s=2.0,
    )
    loaders.append(loader)
    status, _ = loader.get(bad, wait_s=60)
    failed_at = time.monotonic()
    assert status.error_kind == "timeout", status
    assert "failed so once: asking again within 2 s answers this error" in (status.error or "")
    started = loader.loads_started
    for _ in range(5):  # a page polling
        assert loader.request(bad).state == "error"
    assert loader.loads_started == started  # not read again

    def read_again() -> bool:
        """A page polling on: refused (and not read) during the back-off, which began
        before ``failed_at``; read again when asked after it."""
        asked_at = time.monotonic()
        state = loader.request(bad).state
        if state == "error":
            assert asked_at < failed_at + 2.0, "still refused after its 2 s back-off"
            assert loader.loads_started == started  # not read again
            return False
        assert state in ("queued", "loading"), state  # after the back-off: again
        return True

    wait_until(read_again, 30, "the file read again after its back-off")
    status, _ = loader.get(bad, wait_s=60)
    assert loader.loads_started == started + 1
    assert "2 times in a row: asking again within 4 s" in (status.error or ""), status


def test_files_that_timed_out_leave_a_slot_to_good_ones(
    tmp_path: Path, loaders: list[SummaryLoader], tests_importable: None
) -> None:
    """Issue 32 §3's reproduction: two files that time out, asked for again with a good
    one by a polling page. Retries run in all slots but one, behind first requests, so
    the good file is read while the bad ones still hold their slot (it used to wait for
    their deadlines)."""
    bad = [ident_of(write_trace(tmp_path / "logs" / f"bad{i}.1.pt.trace.json.gz")) for i in (1, 2)]
    good = ident_of(write_trace(tmp_path / "logs" / "good.1.pt.trace.json.gz", steps=3))
    loader = SummaryLoader(
        cache=None,
        workers=2,
        summarize=sleeps_when_bad,
        deadline=LoadDeadline(8.0, 0.0),
        retry_backoff_s=0.0,
    )
    loaders.append(loader)
    loader.deadline = LoadDeadline(1.0, 0.0)  # the first failures, quickly
    for ident in bad:
        loader.request(ident)
    for ident in bad:
        assert loader.get(ident, wait_s=60)[0].error_kind == "timeout"
    loader.deadline = LoadDeadline(8.0, 0.0)
    for ident in bad:  # asked again first ...
        loader.request(ident)
    status, result = loader.get(good, wait_s=60)  # ... then the good file
    assert status.state == "ready" and result is not None
    assert json.loads(result.panels["steps"])["count"] == 3
    states = [s.state for s in loader.statuses(bad)]
    assert sorted(states) == ["loading", "queued"], states  # one bad file at a time


# --------------------------------------------------------------------------- issue 32 §9


def test_temporaries_left_by_killed_writers_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer killed between create and rename leaves ``.NAME.<hex>.tmp``; one older
    than an hour is removed by the next write in that folder (a young one may be a
    writer at work; other files are never touched)."""
    from tb_kineto_insights.store import backends

    folder = tmp_path / "cache" / "v1"
    folder.mkdir(parents=True)
    old = folder / ".abc.json.0123456789abcdef.tmp"
    young = folder / ".abd.json.fedcba9876543210.tmp"
    other = folder / ".notes.tmp"  # not one of ours
    for path in (old, young, other):
        path.write_bytes(b"x")
    two_hours_ago = time.time() - 7200
    for path in (old, other):
        os.utime(path, (two_hours_ago, two_hours_ago))
    monkeypatch.setattr(backends, "_last_sweep", {})
    backends.write_atomic(folder / "entry.json", b"{}")
    assert not old.exists() and young.exists() and other.exists()
    assert (folder / "entry.json").read_bytes() == b"{}"
    assert backends.remove_stale_temporaries(folder, now=time.time() + 7200) == 1  # young
    assert backends.remove_stale_temporaries(tmp_path / "missing") == 0


def test_a_resealed_summary_with_a_value_out_of_range_is_damage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The checksum is plain SHA-256: a summary rewritten with ``mean_step_us = -1e308``
    and sealed again fits the Struct; it is dropped with one log line naming the cache
    file and the field, and computed again. The negative: the true summary is served."""
    ident = Identity("/x.json", 10, 1.5, content="c1")
    summary = real_summary()
    cache = DiskCache(tmp_path / "cache", SETTINGS)
    cache.store(ident, cache_module.entry_bytes(ident, SETTINGS, summary=summary), is_error=False)
    assert cache.load(ident) is not None
    forged = json.loads(json.dumps(summary))
    forged["steps"]["mean_step_us"] = -1e308
    cache.store(ident, cache_module.entry_bytes(ident, SETTINGS, summary=forged), is_error=False)
    caplog.set_level("WARNING")
    assert cache.load(ident) is None
    name = cache.summary_file(ident).relative_to(tmp_path / "cache")
    assert [r.getMessage() for r in caplog.records] == [
        f"Kineto Insights: dropping corrupt or stale cache file {tmp_path / 'cache'}/{name} "
        "(its summary: steps.mean_step_us = -1e+308 is out of range [0, 1e+13]): "
        "computing it again"
    ]
    assert not cache.summary_file(ident).exists()
    for field, value in (("impact_fraction", 1e300), ("impact_fraction", -0.5)):
        bad = json.loads(json.dumps(summary))
        assert bad["diagnoses"], "the real summary has diagnoses"
        bad["diagnoses"][0][field] = value
        data = cache_module.entry_bytes(ident, SETTINGS, summary=bad)
        why: list[str] = []
        assert decode_entry(data, ident, SETTINGS, why=why) is None
        assert why[0].startswith("its summary: diagnoses[") and "out of range" in why[0]
