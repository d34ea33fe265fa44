"""Tests for tb_kineto_insights.logdir.discovery: discovery of runs / workers / spans."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tb_kineto_insights.logdir import discovery as logdir_module
from tb_kineto_insights.logdir import sniff as sniff_module
from tb_kineto_insights.logdir.discovery import (
    LogdirError,
    Run,
    Span,
    Worker,
    describe_skipped,
    discover,
    find_span,
    is_kineto_head,
)

SHARED_PUBLIC = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "public"

KINETO: dict[str, Any] = {
    "schemaVersion": 1,
    "traceEvents": [{"ph": "X", "name": "k", "ts": 1.0, "dur": 2.0, "pid": 0, "tid": 0}],
}
# deviceProperties longer than the default 4096-byte sniff window, traceEvents after it
LONG_DEVICE_PROPS: list[dict[str, Any]] = [
    {"id": i, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 84990623744, "pad": "x" * 300}
    for i in range(32)
]


def _encode(obj: Any, *, gz: bool) -> bytes:
    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return gzip.compress(data) if gz else data


def write(path: Path, obj: Any = None, *, gz: bool = False) -> Path:
    """Write JSON (or raw bytes) to ``path``, gzipped when ``gz``; creates folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_encode(KINETO if obj is None else obj, gz=gz))
    return path


def shape(runs: list[Run]) -> dict[str, dict[str, list[str]]]:
    """{run: {worker: [span ids in order]}} with workers in order (dicts keep order)."""
    return {r.name: {w.name: [s.span for s in w.spans] for w in r.workers} for r in runs}


def all_spans(runs: list[Run]) -> list[Span]:
    return [s for r in runs for w in r.workers for s in w.spans]


@pytest.fixture(autouse=True)
def _fresh_sniff_cache() -> Iterator[None]:
    sniff_module._SNIFF_CACHE.clear()
    yield
    sniff_module._SNIFF_CACHE.clear()


@pytest.fixture
def memfs() -> Iterator[tuple[Any, str]]:
    """fsspec's in-memory filesystem with a unique root; removed after the test."""
    fs = fsspec.filesystem("memory")
    root = f"/kineto-insights-test-{uuid.uuid4().hex}"
    yield fs, root
    for key in [k for k in fs.store if k == root or k.startswith(root + "/")]:
        del fs.store[key]
    fs.pseudo_dirs[:] = [d for d in fs.pseudo_dirs if not (d == root or d.startswith(root + "/"))]
    assert not any(k.startswith(root) for k in fs.store)


# --------------------------------------------------------------------------- layout


def test_nested_runs_workers_and_root_run(tmp_path: Path) -> None:
    write(tmp_path / "a" / "b" / "run1" / "host_1.1700000000001.pt.trace.json.gz", gz=True)
    write(tmp_path / "run2" / "host_2.1700000000002.pt.trace.json")
    write(tmp_path / "run2" / "host_3.1700000000003.pt.trace.json")
    write(tmp_path / "top_9.1700000000009.pt.trace.json")
    (tmp_path / "empty" / "deeper").mkdir(parents=True)

    runs = discover(str(tmp_path))

    assert [r.name for r in runs] == [".", "a/b/run1", "run2"]
    assert shape(runs) == {
        ".": {"top_9": ["1700000000009"]},
        "a/b/run1": {"host_1": ["1700000000001"]},
        "run2": {"host_2": ["1700000000002"], "host_3": ["1700000000003"]},
    }
    span = find_span(runs, "a/b/run1", "host_1", "1700000000001")
    assert span is not None
    path = tmp_path / "a" / "b" / "run1" / "host_1.1700000000001.pt.trace.json.gz"
    assert span.path == str(path)
    assert span.run == "a/b/run1"
    assert span.size_bytes == path.stat().st_size
    assert span.mtime == pytest.approx(path.stat().st_mtime)
    assert all(isinstance(r, Run) for r in runs)
    assert all(isinstance(w, Worker) for r in runs for w in r.workers)


def test_many_spans_ordered_numerically(tmp_path: Path) -> None:
    stamps = ["9", "10", "100", "2", "1000", "11", "99", "3", "20", "1", "5", "1623143089861"]
    for stamp in stamps:
        write(tmp_path / "run" / f"host_1234.{stamp}.pt.trace.json.gz", gz=True)

    runs = discover(str(tmp_path))

    assert shape(runs) == {
        "run": {
            "host_1234": [
                "1",
                "2",
                "3",
                "5",
                "9",
                "10",
                "11",
                "20",
                "99",
                "100",
                "1000",
                "1623143089861",
            ]
        }
    }


def test_workers_in_natural_order(tmp_path: Path) -> None:
    for worker in ["rank10", "rank2", "rank1", "Rank3", "rank2_b"]:
        write(tmp_path / "job" / f"{worker}.5.pt.trace.json")
    runs = discover(str(tmp_path))
    assert [w.name for w in runs[0].workers] == ["rank1", "rank2", "rank2_b", "Rank3", "rank10"]


def test_runs_in_natural_order(tmp_path: Path) -> None:
    for run in ["run10", "run2", "run1/sub", "run1"]:
        write(tmp_path / run / "w.1.pt.trace.json")
    write(tmp_path / "w.1.pt.trace.json")
    assert [r.name for r in discover(str(tmp_path))] == [".", "run1", "run1/sub", "run2", "run10"]


def test_worker_names_with_dots_and_underscores(tmp_path: Path) -> None:
    write(tmp_path / "r" / "host.example_123.1700000000000.pt.trace.json.gz", gz=True)
    write(tmp_path / "r" / "host.example_123.1700000000500.pt.trace.json.gz", gz=True)
    write(tmp_path / "r" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", gz=True)
    write(tmp_path / "r" / "no_stamp.pt.trace.json")
    write(tmp_path / "r" / "stamp.v2.pt.trace.json")  # last part not all digits

    runs = discover(str(tmp_path))

    assert shape(runs) == {
        "r": {
            "host.example_123": ["1700000000000", "1700000000500"],
            "no_stamp": ["0"],
            "rank-34.Jul_15_10_52_41": ["1074"],
            "stamp.v2": ["0"],
        }
    }


def test_named_files_are_taken_without_sniffing(tmp_path: Path) -> None:
    write(tmp_path / "r" / "broken.1.pt.trace.json", b"not json at all")
    write(tmp_path / "r" / "empty.2.pt.trace.json.gz", b"")
    assert shape(discover(str(tmp_path))) == {"r": {"broken": ["1"], "empty": ["2"]}}


# --------------------------------------------------------------------------- sniffing


def test_odd_names_kineto_included_others_excluded(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # traceEvents after a deviceProperties far longer than the sniff window
    long_head = {"schemaVersion": 1, "deviceProperties": LONG_DEVICE_PROPS, **KINETO}
    assert len(json.dumps(long_head)) > 4096 + 1000
    write(run / "rank0.json.gz", long_head, gz=True)
    # deviceProperties as first key, no schemaVersion
    write(run / "rank1.json.gz", {"deviceProperties": LONG_DEVICE_PROPS, **KINETO}, gz=True)
    # legacy bare array root
    write(run / "legacy.json", KINETO["traceEvents"])
    # traceEvents first, other keys after it
    write(run / "trace.json", {"traceEvents": [], "traceName": "x", "distributedInfo": {}})
    # export_chrome_trace output renamed: .pt.trace.json inside the odd-name rule
    write(run / "exported.pt.trace.JSON", KINETO)
    # BOM and whitespace before the root
    write(run / "bom.json", b"\xef\xbb\xbf \n\t" + json.dumps(KINETO).encode())
    # not Kineto
    write(run / "config.json", {"lr": 0.1})
    write(run / "metrics.json.gz", {"loss": [1.0, 0.5], "step": [1, 2]}, gz=True)
    write(run / "nested.json", {"meta": {"traceEvents": []}})
    write(run / "numbers.json", [1, 2, 3])
    write(run / "objects.json", [{"name": "no ph here"}])
    write(run / "empty.json", b"")
    write(run / "garbage.json.gz", b"\x1f\x8b\x08\x00garbage that is not deflate")
    write(run / "events.out.tfevents.1700000000.host.1", KINETO)
    write(run / "notes.txt", KINETO)
    write(run / "trace.json.bak", KINETO)

    runs = discover(str(tmp_path))

    assert shape(runs) == {
        "run": {
            "bom": ["0"],
            "exported": ["0"],
            "legacy": ["0"],
            "rank0": ["0"],
            "rank1": ["0"],
            "trace": ["0"],
        }
    }
    span = find_span(runs, "run", "rank0", "0")
    assert span is not None and span.path == str(run / "rank0.json.gz")


def test_gzip_detected_by_magic_not_suffix(tmp_path: Path) -> None:
    write(tmp_path / "r" / "x.json", KINETO, gz=True)  # gzipped, plain suffix
    write(tmp_path / "r" / "y.json.gz", KINETO, gz=False)  # plain, .gz suffix
    write(tmp_path / "r" / "z.json", {"lr": 0.1}, gz=True)  # gzipped, not Kineto
    assert shape(discover(str(tmp_path))) == {"r": {"x": ["0"], "y": ["0"]}}


def test_truncated_gzip_head_still_sniffed(tmp_path: Path) -> None:
    full = gzip.compress(json.dumps({"schemaVersion": 1, **KINETO}).encode() * 50)
    write(tmp_path / "r" / "partial.json.gz", full[: len(full) // 2])
    assert shape(discover(str(tmp_path))) == {"r": {"partial": ["0"]}}


def test_small_sniff_window(tmp_path: Path) -> None:
    # traceEvents after an unknown first key: visible with a large window only
    obj = {"meta": "m" * 5000, **KINETO}
    write(tmp_path / "r" / "late.json", obj)
    assert discover(str(tmp_path), sniff_bytes=64) == []
    assert shape(discover(str(tmp_path), sniff_bytes=8192)) == {"r": {"late": ["0"]}}
    with pytest.raises(ValueError):
        discover(str(tmp_path), sniff_bytes=0)


def test_unreadable_file_while_sniffing_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "r" / "locked.json", KINETO)
    write(tmp_path / "r" / "fine.json", KINETO)
    write(tmp_path / "r" / "locked_named.1.pt.trace.json", KINETO)
    real_open = sniff_module.open_local  # local heads are opened as loads are

    def failing_open(path: str) -> Any:
        if "locked" in path:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path)

    monkeypatch.setattr(sniff_module, "open_local", failing_open)
    assert shape(discover(str(tmp_path))) == {"r": {"fine": ["0"], "locked_named": ["1"]}}


def test_same_key_from_two_files(tmp_path: Path) -> None:
    write(tmp_path / "r" / "w.json", KINETO)
    write(tmp_path / "r" / "w.json.gz", KINETO, gz=True)
    write(tmp_path / "s" / "v.json", KINETO)
    write(tmp_path / "s" / "v.pt.trace.json", KINETO)
    runs = discover(str(tmp_path))
    assert shape(runs) == {
        "r": {"w": ["0"], "w.json.gz": ["0"]},
        "s": {"v": ["0"], "v.json": ["0"]},
    }
    span = find_span(runs, "s", "v", "0")
    assert span is not None and span.path.endswith("v.pt.trace.json")


# --------------------------------------------------------------------------- skipping


def test_hidden_and_pycache_folders_skipped(tmp_path: Path) -> None:
    write(tmp_path / ".hidden" / "w.1.pt.trace.json")
    write(tmp_path / "run" / ".git" / "w.2.pt.trace.json")
    write(tmp_path / "__pycache__" / "w.3.pt.trace.json")
    write(tmp_path / "run" / ".w.4.pt.trace.json")  # hidden file
    write(tmp_path / "run" / "w.5.pt.trace.json")
    assert shape(discover(str(tmp_path))) == {"run": {"w": ["5"]}}


def test_hidden_logdir_itself_is_fine(tmp_path: Path) -> None:
    write(tmp_path / ".cache" / "log" / "run" / "w.5.pt.trace.json")
    assert shape(discover(str(tmp_path / ".cache" / "log"))) == {"run": {"w": ["5"]}}


#: What a refused link's reason adds: how to follow it.
HINT = " (to follow it: KINETO_INSIGHTS_FOLLOW_SYMLINKS, or --kineto_insights_follow_symlinks)"


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks on this platform")
def test_symlinks_outside_logdir_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside / "w.1.pt.trace.json")
    logdir = tmp_path / "log"
    write(logdir / "run" / "w.2.pt.trace.json")
    (logdir / "linked_run").symlink_to(outside, target_is_directory=True)
    (logdir / "run" / "x.3.pt.trace.json").symlink_to(outside / "w.1.pt.trace.json")
    (logdir / "run" / "inside.4.pt.trace.json").symlink_to(logdir / "run" / "w.2.pt.trace.json")
    (logdir / "run" / "dangling.5.pt.trace.json").symlink_to(tmp_path / "nope.json")
    (logdir / "loop").symlink_to(logdir, target_is_directory=True)

    skipped: list[tuple[str, str]] = []
    assert shape(discover(str(logdir), skipped=skipped)) == {"run": {"inside": ["4"], "w": ["2"]}}
    # harden attack run: the run folder linked in from outside was passed over silently;
    # the link to a folder inside (a loop) is not named (its runs are read where they are)
    assert sorted(skipped) == [
        (
            str(logdir / "linked_run"),
            f"a symlink to the folder {outside} outside the log directory, not entered{HINT}",
        ),
        (str(logdir / "run" / "dangling.5.pt.trace.json"), "a symlink to a missing file, not read"),
        (
            str(logdir / "run" / "x.3.pt.trace.json"),
            f"a symlink to a file outside the log directory, not read{HINT}",
        ),
    ]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks on this platform")
def test_report_names_a_run_folder_linked_from_outside(
    tmp_path: Path, capsys: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Attack run: ``report DIR`` with only a symlinked run folder said only "no Kineto
    trace files found"."""
    from tb_kineto_insights.cli.main import main

    outside = tmp_path / "elsewhere" / "run1"
    write(outside / "w.1.pt.trace.json")
    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / "run1").symlink_to(outside, target_is_directory=True)
    caplog.set_level("WARNING")
    assert main(["report", str(logdir)]) == 2
    # the warning is a log line (stderr on the command line, through logging's last
    # resort handler), the error a line on stderr
    assert [r.getMessage() for r in caplog.records] == [
        f"warning: {logdir}: skipped 1 path(s): {logdir / 'run1'} (a symlink to the folder "
        f"{outside} outside the log directory, not entered{HINT})"
    ]
    assert capsys.readouterr().err == f"error: no Kineto trace files found under {logdir}\n"


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks on this platform")
def test_symlinked_span_identity_is_its_targets(tmp_path: Path) -> None:
    """Issue 13 §2: size, mtime, device, inode and mtime_ns are the target's (the file
    that is read), not the link's; a rewrite of the target of the same size is another
    identity. ``root`` is the log directory's real path (checked again at open)."""
    logdir = tmp_path / "log"
    target = write(logdir / ".data" / "t.json")
    (logdir / "run").mkdir()
    link = logdir / "run" / "w.1.pt.trace.json"
    link.symlink_to("../.data/t.json")
    os.utime(link, ns=(1, 1), follow_symlinks=False)  # the link's own time: ignored
    (span,) = all_spans(discover(str(logdir)))
    st = target.stat()
    assert (span.size_bytes, span.mtime_ns, span.inode, span.device) == (
        st.st_size,
        st.st_mtime_ns,
        st.st_ino,
        st.st_dev,
    )
    assert span.mtime == st.st_mtime and span.root == str(logdir.resolve())
    target.write_bytes(target.read_bytes().replace(b"1", b"2"))
    os.utime(target, ns=(st.st_mtime_ns + 10**9, st.st_mtime_ns + 10**9))
    (again,) = all_spans(discover(str(logdir)))
    assert again.size_bytes == span.size_bytes and again.mtime_ns == span.mtime_ns + 10**9


def test_remote_spans_carry_no_local_identity(memfs: tuple[Any, str]) -> None:
    fs, root = memfs
    fs.pipe(f"{root}/run/w.1.pt.trace.json", b"{}")
    (span,) = all_spans(discover(f"memory://{root}"))
    assert (span.device, span.inode, span.mtime_ns, span.root) == (0, 0, 0, "")


# --------------------------------------------------------------------------- re-scan


def test_file_added_later_is_found(tmp_path: Path) -> None:
    write(tmp_path / "run" / "w.1.pt.trace.json")
    first = discover(str(tmp_path))
    assert shape(first) == {"run": {"w": ["1"]}}

    write(tmp_path / "run" / "w.2.pt.trace.json")
    write(tmp_path / "run2" / "odd.json", KINETO)
    second = discover(str(tmp_path))

    assert shape(second) == {"run": {"w": ["1", "2"]}, "run2": {"odd": ["0"]}}
    assert shape(first) == {"run": {"w": ["1"]}}  # results are values, not live views


def test_file_url_logdir(tmp_path: Path) -> None:
    write(tmp_path / "run" / "w.1.pt.trace.json.gz", gz=True)
    runs = discover(tmp_path.as_uri())
    span = find_span(runs, "run", "w", "1")
    assert span is not None
    assert span.path.startswith("file://")
    with fsspec.open(span.path, "rb", compression="gzip") as f:
        assert json.load(f) == KINETO


# --------------------------------------------------------------------------- memory://


def test_memory_filesystem(memfs: tuple[Any, str]) -> None:
    fs, root = memfs
    url = f"memory://{root}"
    fs.pipe(f"{root}/a/b/run1/host_1.10.pt.trace.json.gz", gzip.compress(b"{}"))
    fs.pipe(f"{root}/a/b/run1/host_1.9.pt.trace.json.gz", gzip.compress(b"{}"))
    fs.pipe(f"{root}/run2/rank0.json.gz", _encode(KINETO, gz=True))
    fs.pipe(f"{root}/run2/y.json.gz", _encode(KINETO, gz=False))
    fs.pipe(f"{root}/run2/config.json", b'{"lr": 0.1}')
    fs.pipe(f"{root}/top.1.pt.trace.json", b"{}")
    fs.pipe(f"{root}/.hidden/w.1.pt.trace.json", b"{}")

    runs = discover(url)

    assert shape(runs) == {
        ".": {"top": ["1"]},
        "a/b/run1": {"host_1": ["9", "10"]},
        "run2": {"rank0": ["0"], "y": ["0"]},
    }
    span = find_span(runs, "run2", "rank0", "0")
    assert span is not None
    assert span.path == f"memory://{root}/run2/rank0.json.gz"
    assert span.size_bytes == len(_encode(KINETO, gz=True))
    with fsspec.open(span.path, "rb", compression="gzip") as f:
        assert json.load(f) == KINETO

    fs.pipe(f"{root}/run2/host_5.3.pt.trace.json", b"{}")
    assert shape(discover(url))["run2"] == {"host_5": ["3"], "rank0": ["0"], "y": ["0"]}


def test_memory_missing_logdir(memfs: tuple[Any, str]) -> None:
    _, root = memfs
    with pytest.raises(LogdirError, match="does not exist") as info:
        discover(f"memory://{root}/nothing-here")
    assert "nothing-here" in str(info.value)


# --------------------------------------------------------------------------- find_span


def test_find_span_hits_and_misses(tmp_path: Path) -> None:
    write(tmp_path / "a" / "b" / "run1" / "w.1.pt.trace.json")
    write(tmp_path / "run2" / "w.2.pt.trace.json")
    write(tmp_path / "w.3.pt.trace.json")
    runs = discover(str(tmp_path))

    hit = find_span(runs, "a/b/run1", "w", "1")
    assert hit is not None and hit.path == str(tmp_path / "a" / "b" / "run1" / "w.1.pt.trace.json")
    root_hit = find_span(runs, ".", "w", "3")
    assert root_hit is not None and root_hit.run == "."

    assert find_span(runs, "run2", "w", "1") is None  # span of another run
    assert find_span(runs, "run2", "x", "2") is None
    assert find_span(runs, "nope", "w", "2") is None
    assert find_span(runs, "run2", "w", "02") is None  # keys compare as strings
    assert find_span(runs, "..", "w", "2") is None
    assert find_span(runs, "a/b/run1/..", "w", "1") is None
    assert find_span(runs, "a/b/../../run2", "w", "2") is None
    assert find_span(runs, "run2", "../run2/w", "2") is None
    assert find_span(runs, "run2", "w", "../2") is None
    assert find_span(runs, "./run2", "w", "2") is None
    assert find_span([], "run2", "w", "2") is None


# --------------------------------------------------------------------------- errors


def test_missing_logdir_raises(tmp_path: Path) -> None:
    missing = tmp_path / "does-not-exist"
    with pytest.raises(LogdirError) as info:
        discover(str(missing))
    assert str(missing) in str(info.value)
    assert "does not exist" in str(info.value)
    assert info.value.logdir == str(missing)


def test_logdir_that_is_a_file_raises(tmp_path: Path) -> None:
    f = write(tmp_path / "w.1.pt.trace.json")
    with pytest.raises(LogdirError, match="not a folder"):
        discover(str(f))


def test_unreadable_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "ok" / "w.1.pt.trace.json")
    write(tmp_path / "locked" / "w.2.pt.trace.json")
    real_scandir = os.scandir
    locked = {str(tmp_path / "locked")}

    def scandir(path: Any = ".") -> Any:
        if str(path).rstrip("/") in locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert shape(discover(str(tmp_path))) == {"ok": {"w": ["1"]}}  # sub-folder skipped

    locked.add(str(tmp_path))
    with pytest.raises(LogdirError, match="cannot list: PermissionError") as info:
        discover(str(tmp_path))
    assert str(tmp_path) in str(info.value)


def test_unknown_protocol_raises() -> None:
    with pytest.raises(LogdirError) as info:
        discover("nosuchproto://bucket/logs")
    message = str(info.value)
    assert "nosuchproto" in message
    assert "unknown protocol" in message


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed")
def test_missing_driver_names_package() -> None:
    with pytest.raises(LogdirError) as info:
        discover("s3://some-bucket/logs")
    message = str(info.value)
    assert "'s3'" in message
    assert "s3fs" in message
    assert "s3://some-bucket/logs" in message


# --------------------------------------------------------------------------- is_kineto_head


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b'{"traceEvents": [', True),
        (b'\xef\xbb\xbf  \n{"schemaVersion": 1, "deviceProperties": [{"id": 0, "na', True),
        (b'{"deviceProperties": [{"id": 0, "name": "A', True),
        (b'{"traceName": "x", "traceEvents": []}', True),
        (b'{"a": {"b": "}"}, "c": "\\"traceEvents\\"", "traceEvents": []}', True),
        (b'[{"name": "x", "ph": "X", "ts": 1}]', True),
        (b'  [ {"ph": "i"', True),
        (b"", False),
        (b"   ", False),
        (b"{}", False),
        (b'{"lr": 0.1}', False),
        (b'{"meta": {"traceEvents": []}}', False),
        (b'{"note": "traceEvents"}', False),
        (b'{"lr": 0.1, "schemaVersion": 1}', False),
        (b"[1, 2, 3]", False),
        (b'[{"name": "x", "args": {"ph": 1}}]', False),
        (b'[{"name": "x"}, {"ph": "X"}]', False),
        (b'"traceEvents"', False),
        (b"\x1f\x8b\x08\x00", False),
        (b'{"traceEv', False),
    ],
)
def test_is_kineto_head(head: bytes, expected: bool) -> None:
    assert is_kineto_head(head) is expected


# --------------------------------------------------------------------------- real traces

EXPECTED_PUBLIC: dict[str, dict[str, list[str]]] = {
    "hta_amd_mi250": {"mi250_minitoy_train_ROCm6_2_kineto": ["0"]},
    "hta_cpu_only": {"rank-34.Jul_15_10_52_41": ["1074"]},
    "hta_cuda_graphs_small_kernels": {"rank0": ["0"]},
    "hta_df_index_resolver": {"df_index_resolver": ["0"]},
    "hta_mtia": {"mtia_rank_0": ["0"]},
    "hta_nccl_a100": {"nccl_data": ["0"]},
    "hta_no_distributed_info": {"distributed_info_not_found": ["0"]},
    "hta_ns_resolution": {"rank-0.Apr_03_18_51_38": ["1102"]},
    "hta_sampled_2ranks": {"sampled_rank-0": ["0"], "sampled_rank-1": ["0"]},
    "hta_trace_diff/control": {"control": ["0"]},
    "hta_trace_diff/test": {"test": ["0"]},
    "hta_triton": {"triton_example": ["0"]},
    "kineto_resnet50/resnet50_num_workers_0": {"worker0": ["1623143089861", "1623143566756"]},
    "kineto_resnet50/resnet50_num_workers_4": {"worker0": ["1623212756351", "1623213129365"]},
}


def _require_shared() -> None:
    if SHARED_PUBLIC.is_dir():
        return
    reason = f"shared public traces not found at {SHARED_PUBLIC}"
    if os.environ.get("KINETO_INSIGHTS_REQUIRE_SHARED") == "1":
        pytest.fail(f"{reason} (KINETO_INSIGHTS_REQUIRE_SHARED=1)")
    pytest.skip(reason)


def test_shared_public_traces() -> None:
    _require_shared()
    runs = discover(str(SHARED_PUBLIC))

    assert shape(runs) == EXPECTED_PUBLIC
    assert [r.name for r in runs] == list(EXPECTED_PUBLIC)

    resnet = find_span(runs, "kineto_resnet50/resnet50_num_workers_0", "worker0", "1623143089861")
    assert resnet is not None
    assert resnet.path == str(
        SHARED_PUBLIC
        / "kineto_resnet50"
        / "resnet50_num_workers_0"
        / "worker0.1623143089861.pt.trace.json.gz"
    )
    assert resnet.size_bytes > 0 and resnet.mtime > 0

    # every trace file in the folder is found, and nothing else
    on_disk = {
        str(Path(dirpath) / name)
        for dirpath, _, names in os.walk(SHARED_PUBLIC)
        for name in names
        if name.endswith(".json.gz")
    }
    assert {s.path for s in all_spans(runs)} == on_disk
    assert len(on_disk) == 17


def test_sniffing_never_blocks_on_a_fifo_nor_leaves_the_logdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file listed as a regular file (or a link inside) but a FIFO, or a link leading
    outside, when its head is read: skipped, without blocking (issue 13 §1)."""
    logdir = tmp_path / "log"
    outside = write(tmp_path / "outside" / "secret.json")
    write(logdir / "run" / "odd.json")
    (logdir / "run" / "link.json").symlink_to(logdir / "run" / "odd.json")
    os.mkfifo(tmp_path / "fifo")
    real_list = logdir_module._list_local

    def swapped_after_listing(fs: Any, root: str, *args: Any) -> dict[str, dict[str, Any]]:
        listing = real_list(fs, root, *args)
        (logdir / "run" / "odd.json").unlink()
        os.symlink(tmp_path / "fifo", logdir / "run" / "odd.json")
        (logdir / "run" / "link.json").unlink()
        os.symlink(outside, logdir / "run" / "link.json")
        return listing

    monkeypatch.setattr(logdir_module, "_list_local", swapped_after_listing)
    sniff_module._SNIFF_CACHE.clear()
    assert discover(str(logdir)) == []


# --------------------------------------------------------------------------- issue 32 §4


def _nested(root: Path, depth: int) -> Path:
    """``depth`` nested folders ``a/a/...`` under ``root`` (made one by one:
    ``os.makedirs`` itself recurses)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root
    for _ in range(depth):
        path = path / "a"
        path.mkdir()
    return path


def remove_nested(deepest: Path, root: Path) -> None:
    """Remove the empty chain ``root/a/.../deepest`` bottom up (pytest's clean-up of
    ``tmp_path``, ``shutil.rmtree``, recurses and fails on 1,000 levels)."""
    path = deepest
    while path != root:
        path.rmdir()
        path = path.parent


def _trace(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": []}))
    return path


@pytest.mark.parametrize("url", [False, True], ids=["local", "file_url"])
def test_a_thousand_nested_folders_hide_no_run(tmp_path: Path, url: bool) -> None:
    """The reproduction: 1,000 nested empty folders in a log directory made the walk
    raise RecursionError and list no run. Now the runs are listed and the chain is
    cut at 64 folders, and reported (local paths)."""
    root = tmp_path / "logs"
    _trace(root / "good" / "w.1.pt.trace.json")
    deepest = _nested(root, 1000)
    skipped: list[tuple[str, str]] = []
    try:
        runs = discover(f"file://{root}" if url else str(root), skipped=skipped)
    finally:
        remove_nested(deepest, root)
    assert [r.name for r in runs] == ["good"]
    if not url:
        assert skipped == [(str(root) + "/a" * 65, "deeper than 64 folders")]
        assert describe_skipped(skipped).startswith("skipped 1 path(s): ")


def test_folder_depth_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "logs"
    _trace(_nested(root, 3) / "w.1.pt.trace.json")  # in a/a/a: depth 3
    assert [r.name for r in discover(str(root))] == ["a/a/a"]
    skipped: list[tuple[str, str]] = []
    assert discover(str(root), max_depth=2, skipped=skipped) == []
    assert skipped == [(f"{root}/a/a/a", "deeper than 2 folders")]
    assert [r.name for r in discover(str(root), max_depth=3)] == ["a/a/a"]
    monkeypatch.setenv("KINETO_INSIGHTS_MAX_FOLDER_DEPTH", "2")
    assert discover(str(root)) == []
    monkeypatch.setenv("KINETO_INSIGHTS_MAX_FOLDER_DEPTH", "zero")  # not a number: 64
    assert [r.name for r in discover(str(root))] == ["a/a/a"]


def test_a_folder_that_cannot_be_listed_is_skipped_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Tests run as root, where permissions do not stop a listing: the listing of one
    folder fails by a patch instead.)"""
    from tb_kineto_insights.trace.local_paths import LocalTree

    root = tmp_path / "logs"
    _trace(root / "good" / "w.1.pt.trace.json")
    _trace(root / "locked" / "inner" / "w.1.pt.trace.json")
    listing = LocalTree._listing

    def refuse(folder: str) -> list[dict[str, Any]]:
        if folder.endswith("/locked"):
            raise PermissionError(13, "Permission denied", folder)
        return listing(folder)

    monkeypatch.setattr(LocalTree, "_listing", staticmethod(refuse))
    skipped: list[tuple[str, str]] = []
    assert [r.name for r in discover(str(root), skipped=skipped)] == ["good"]
    assert skipped == [(f"{root}/locked", "cannot be listed: Permission denied")]


def test_names_that_are_not_utf8_are_escaped_not_replaced(tmp_path: Path) -> None:
    """Issue 32 §9: bytes that are not UTF-8 in a run or worker name become ``\\xff``
    (so the name in /runs is the name a request sends back); the path stays real."""
    root = tmp_path / "logs"
    try:
        folder = Path(os.fsdecode(str(root).encode() + b"/r\xffun"))
        trace = _trace(folder / os.fsdecode(b"w\xfe.7.pt.trace.json"))
    except (OSError, UnicodeError):
        pytest.skip("this filesystem refuses names that are not UTF-8")
    (run,) = discover(str(root))
    assert run.name == "r\\xffun" and run.workers[0].name == "w\\xfe"
    span = find_span([run], "r\\xffun", "w\\xfe", "7")
    assert span is not None and span.path == str(trace)
    assert logdir_module.escaped_name("ok ✓") == "ok ✓"
    assert logdir_module.escaped_name("a\ud800b") == "a\\ud800b"


def test_a_folder_named_like_a_trace_is_reported_once(tmp_path: Path) -> None:
    """Attack run: a folder ``w.pt.trace.json`` was passed over silently; now it is
    named once in ``skipped`` (and the good trace beside it is listed)."""
    root = tmp_path / "logs"
    _trace(root / "run" / "good.1.pt.trace.json")
    (root / "run" / "w.pt.trace.json").mkdir()
    skipped: list[tuple[str, str]] = []
    runs = discover(str(root), skipped=skipped)
    assert [(r.name, [w.name for w in r.workers]) for r in runs] == [("run", ["good"])]
    folder = str(root / "run" / "w.pt.trace.json")
    assert skipped == [(folder, "a folder named like a trace file, not read")]
    assert describe_skipped(skipped) == (
        f"skipped 1 path(s): {folder} (a folder named like a trace file, not read)"
    )


def test_a_dangling_symlink_is_reported_once(tmp_path: Path) -> None:
    """Attack run: a symlink ``dangling.pt.trace.json`` to a missing file was passed
    over silently; now it is named in ``skipped``. A link named like no trace (``notes``)
    and a good link stay quiet."""
    root = tmp_path / "logs"
    good = _trace(root / "run" / "good.1.pt.trace.json")
    (root / "run" / "dangling.pt.trace.json").symlink_to(tmp_path / "missing.json")
    (root / "run" / "outside.pt.trace.json").symlink_to(_trace(tmp_path / "else.json"))
    (root / "run" / "notes").symlink_to(tmp_path / "missing.txt")
    (root / "run" / "link.2.pt.trace.json").symlink_to(good)
    skipped: list[tuple[str, str]] = []
    runs = discover(str(root), skipped=skipped)
    assert [w.name for w in runs[0].workers] == ["good", "link"]
    assert sorted(skipped) == [
        (str(root / "run" / "dangling.pt.trace.json"), "a symlink to a missing file, not read"),
        (
            str(root / "run" / "outside.pt.trace.json"),
            f"a symlink to a file outside the log directory, not read{HINT}",
        ),
    ]


def test_a_clean_log_directory_reports_nothing_skipped(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    _trace(root / "run" / "good.1.pt.trace.json")
    (root / "run" / "sub").mkdir()
    skipped: list[tuple[str, str]] = []
    discover(str(root), skipped=skipped)
    assert skipped == []


def test_a_fifo_named_like_a_trace_is_named_and_never_opened(tmp_path: Path) -> None:
    """A new user's trial: a FIFO named ``*.pt.trace.json.gz`` in a log directory was
    skipped without a word, and given directly it blocked ``report`` for ever. Now
    discovery names it among the skipped paths, and ``span_for_file`` refuses it."""
    import os

    from tb_kineto_insights.logdir.discovery import LogdirError, discover, span_for_file

    run = tmp_path / "logs" / "run"
    run.mkdir(parents=True)
    fifo = run / "w.5.pt.trace.json.gz"
    os.mkfifo(fifo)
    skipped: list[tuple[str, str]] = []
    assert discover(str(tmp_path / "logs"), skipped=skipped) == []
    assert skipped == [(str(fifo), "not a regular file (a fifo, socket or device), not read")]
    with pytest.raises(LogdirError, match="not a regular file"):
        span_for_file(str(fifo))


@pytest.mark.parametrize("command", ["report", "window"])
def test_a_fifo_given_to_the_command_line_is_refused_at_once(tmp_path: Path, command: str) -> None:
    """A second trial: ``report FIFO`` still blocked (the workers' warm-up opened it)
    and ``window FIFO`` too (the reader's open). Both now refuse it by name, exit 2,
    without waiting for a writer (a blocked open would run into the child's timeout)."""
    from conftest import python_child

    fifo = tmp_path / "w.1.pt.trace.json"
    os.mkfifo(fifo)
    argv = ["tb-kineto-insights", command, str(fifo)]
    if command == "window":
        argv += ["--step", "1", "--out", str(tmp_path / "out.json")]
    code = (
        f"import runpy, sys\nsys.argv = {argv!r}\n"
        "runpy.run_module('tb_kineto_insights.cli', run_name='__main__')\n"
    )
    proc = python_child(code, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "not a regular file (a fifo, socket or device)" in proc.stderr
    assert str(fifo) in proc.stderr and "Traceback" not in proc.stderr


def test_window_of_a_folder_names_it_a_folder(tmp_path: Path) -> None:
    """``window FOLDER`` (it reads trace files; ``report`` takes folders) says the path is
    a folder, not a fifo, socket or device, and exits 2 without a traceback."""
    from conftest import python_child

    folder = tmp_path / "run"
    folder.mkdir()
    argv = ["tb-kineto-insights", "window", str(folder), "--step", "1"]
    argv += ["--out", str(tmp_path / "out.json")]
    code = (
        f"import runpy, sys\nsys.argv = {argv!r}\n"
        "runpy.run_module('tb_kineto_insights.cli', run_name='__main__')\n"
    )
    proc = python_child(code, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"{folder}: is a folder, not a trace file" in proc.stderr, proc.stderr
    assert "fifo" not in proc.stderr and "Traceback" not in proc.stderr
