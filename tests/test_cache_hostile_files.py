"""A cache folder is data, not trusted code (issue 47, item 7): whatever is planted at
an entry's name (a FIFO, a link to a device, a huge sparse file) is refused at once, and
the reader computes the answer again, instead of waiting forever for a FIFO's writer or
reading ``/dev/zero`` until the memory runs out."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_cache import SETTINGS, Counting, ident_of, loaders, make_loader, write_trace  # noqa: F401

from tb_kineto_insights.service.loader import SummaryLoader
from tb_kineto_insights.store import backends
from tb_kineto_insights.store.backends import LocalStore, read_bounded
from tb_kineto_insights.store.cache import DiskCache
from tb_kineto_insights.store.headline_index import HeadlineIndex

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs: POSIX only")


def _within(seconds: float, call: Any) -> Any:
    """``call()``'s value or exception, or a failure when it has not returned within
    ``seconds`` (a daemon thread: a read that hangs does not hang the tests)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("value", call()))
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            out.append(("error", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"still waiting after {seconds} s"
    kind, value = out[0]
    if kind == "error":
        raise value
    return value


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "entry.summary")
    with pytest.raises(OSError, match="entry.summary: not a regular file"):
        _within(5, lambda: LocalStore(tmp_path).read("entry.summary"))


def test_a_link_to_a_device_is_refused(tmp_path: Path) -> None:
    (tmp_path / "entry.summary").symlink_to("/dev/null")  # /dev/zero in the attack
    with pytest.raises(OSError, match="not a regular file"):
        LocalStore(tmp_path).read("entry.summary")


def test_a_file_larger_than_any_entry_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backends, "MAX_ENTRY_BYTES", 1000)
    with open(tmp_path / "entry.summary", "wb") as out:
        out.truncate(10**12)  # sparse: a terabyte claimed, no byte on the disk
    with pytest.raises(OSError, match="larger than any cache entry"):
        LocalStore(tmp_path).read("entry.summary")
    (tmp_path / "small").write_bytes(b"x" * 1000)
    assert LocalStore(tmp_path).read("small") == b"x" * 1000
    assert LocalStore(tmp_path).read("absent") is None
    assert read_bounded(tmp_path / "small", 2000) == b"x" * 1000


def test_a_fifo_at_a_summary_entry_is_computed_again(
    tmp_path: Path,
    loaders: list[SummaryLoader],  # noqa: F811
) -> None:
    trace = write_trace(tmp_path / "logs" / "w.1.pt.trace.json.gz")
    ident = ident_of(trace)
    folder = tmp_path / "cache"
    count = Counting()
    make_loader(loaders, folder, count).get(ident, wait_s=20)
    entry = DiskCache(folder, SETTINGS).summary_file(ident)
    entry.unlink()
    os.mkfifo(entry)
    fresh = make_loader(loaders, folder, count)
    started = time.monotonic()
    status, result = _within(30, lambda: fresh.get(ident, wait_s=20))
    assert status.state == "ready" and result is not None
    assert time.monotonic() - started < 20
    assert len(count.calls) == 2  # parsed again, and the entry written over the FIFO
    assert entry.is_file() and DiskCache(folder, SETTINGS).load(ident) is not None


@pytest.mark.parametrize("planted", ["fifo", "device"])
def test_a_hostile_headline_index_is_an_empty_index(tmp_path: Path, planted: str) -> None:
    store = LocalStore(tmp_path)
    index = HeadlineIndex(store, "settings", "/logs")
    path = tmp_path / index.name
    path.parent.mkdir(parents=True, exist_ok=True)
    if planted == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/null")
    read = _within(5, lambda: HeadlineIndex(store, "settings", "/logs"))
    assert read.loaded == 0
