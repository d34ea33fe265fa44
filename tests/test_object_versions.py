"""Issue 32 §5: an object is read at one version. Every ranged fetch of a remote file
checks that the object is still the version it was opened at (its ETag): pieces of
two versions never make one summary, and the error says so. The CLI's cache path
checks the listed version after the read, as the plugin's workers do: the summary of
another version's bytes is neither stored under the listed version nor answered.

The object store is a fake fsspec filesystem (``fakeversioned://``): objects in
memory, an ETag per content, ranged reads through fsspec's ``AbstractBufferedFile``
with a small block size, and a hook that overwrites the object between two fetches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pytest
from conftest import pair
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from test_worker_death import write_plain_trace

from tb_kineto_insights.logdir.discovery import Span
from tb_kineto_insights.store.cached_summaries import CachedSummaries, identity_of
from tb_kineto_insights.trace.errors import TraceIOError
from tb_kineto_insights.trace.reader import read_trace

PROTOCOL = "fakeversioned"
BLOCK = 256 * 1024


class FakeVersionedFS(AbstractFileSystem):
    """Objects in memory with an ETag (md5 of the content, as S3 gives for a single
    upload); ``on_fetch(path, n)`` is called after the n-th ranged fetch of a read."""

    protocol = PROTOCOL
    objects: ClassVar[dict[str, bytes]] = {}
    fetches: ClassVar[list[tuple[str, int, int]]] = []
    on_fetch: ClassVar[Callable[[str, int], None] | None] = None

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        if path not in self.objects:
            raise FileNotFoundError(path)
        data = self.objects[path]
        return {
            "name": path,
            "size": len(data),
            "type": "file",
            "ETag": f'"{hashlib.md5(data).hexdigest()}"',
        }

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path).rstrip("/")
        found = [self.info(p) for p in self.objects if p.startswith(path + "/")]
        return found if detail else [f["name"] for f in found]

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any) -> Any:
        return FakeFile(self, path, mode, block_size=BLOCK, **kwargs)


class FakeFile(AbstractBufferedFile):
    def _fetch_range(self, start: int, end: int) -> bytes:
        path = self.fs._strip_protocol(self.path)
        data = FakeVersionedFS.objects[path][start:end]  # the object as it is now
        FakeVersionedFS.fetches.append((path, start, end))
        hook = FakeVersionedFS.on_fetch
        if hook is not None:
            hook(path, len(FakeVersionedFS.fetches))
        return data


fsspec.register_implementation(PROTOCOL, FakeVersionedFS, clobber=True)


@pytest.fixture(autouse=True)
def empty_store() -> Iterator[None]:
    FakeVersionedFS.objects.clear()
    FakeVersionedFS.fetches.clear()
    FakeVersionedFS.on_fetch = None
    yield
    FakeVersionedFS.on_fetch = None


@pytest.fixture
def two_versions(tmp_path: Path) -> tuple[bytes, bytes]:
    """Two plain-JSON traces of about 3 MB (about 12 fetches each): 40 and 41 steps."""
    first = write_plain_trace(tmp_path / "a.json", 40, 1500).read_bytes()
    second = write_plain_trace(tmp_path / "b.json", 41, 1500).read_bytes()
    assert len(first) > 8 * BLOCK
    return first, second


def put(key: str, data: bytes) -> str:
    FakeVersionedFS.objects[key] = data
    return f"{PROTOCOL}://{key}"


def test_an_unchanged_object_reads_as_the_local_file(
    tmp_path: Path, two_versions: tuple[bytes, bytes]
) -> None:
    url = put("bucket/run/w.1.pt.trace.json", two_versions[0])
    local = tmp_path / "w.1.pt.trace.json"
    local.write_bytes(two_versions[0])
    remote, here = read_trace(url), read_trace(str(local))
    assert len(FakeVersionedFS.fetches) >= 4  # read in pieces, each checked
    assert remote.health.event_count == here.health.event_count == 40 * 1501


def test_an_object_overwritten_between_two_pieces_is_an_error(
    two_versions: tuple[bytes, bytes],
) -> None:
    """The reproduction: the object is overwritten after the second ranged fetch of a
    read; the rest would come from the new version."""
    key = "bucket/run/w.1.pt.trace.json"
    url = put(key, two_versions[0])
    old_etag = hashlib.md5(two_versions[0]).hexdigest()
    new_etag = hashlib.md5(two_versions[1]).hexdigest()

    def overwrite(path: str, n: int) -> None:
        if n == 2:
            FakeVersionedFS.objects[key] = two_versions[1]

    FakeVersionedFS.on_fetch = overwrite
    with pytest.raises(TraceIOError) as caught:
        read_trace(url)
    message = str(caught.value)
    assert message.startswith(
        f"{url}: the object changed while it was read (version {old_etag} when opened, "
        f"{new_etag} after byte "
    )
    assert message.endswith(
        "its pieces would mix two versions; not read, read again at the next scan"
    )
    assert len(FakeVersionedFS.fetches) == 2  # stopped at the piece that saw it


def _span(url: str, version: str, size: int) -> Span:
    return Span(run="run", worker="w", span="1", path=url, size_bytes=size, mtime=0.0,
                version=version)  # fmt: skip


def test_cli_cache_path_checks_the_listed_version(
    tmp_path: Path, two_versions: tuple[bytes, bytes]
) -> None:
    """Listed at version 1, overwritten before it is read: the read is of one version
    (2), but not the listed one; the CLI's cached summaries neither store it under the
    listed version nor answer it. Listed again (version 2): read, stored, answered."""
    key = "bucket/run/w.1.pt.trace.json"
    url = put(key, two_versions[0])
    listed = FakeVersionedFS().info(key)
    span = _span(url, listed["ETag"].strip('"'), listed["size"])
    FakeVersionedFS.objects[key] = two_versions[1]  # overwritten after the listing
    summaries = CachedSummaries(str(tmp_path / "cache"))
    summary, error = pair(summaries.summarize(span))
    assert summary is None and error is not None
    assert error["type"] == "TraceIOError"
    assert "the object changed while it was read (listed version" in error["message"]
    assert summaries.cache is not None
    assert not summaries.cache.has(identity_of(span))  # nothing under the listed version
    now = FakeVersionedFS().info(key)
    span = _span(url, now["ETag"].strip('"'), now["size"])
    summary, error = pair(summaries.summarize(span))
    assert error is None and summary is not None and summary.steps.count == 41
    again, error = pair(CachedSummaries(str(tmp_path / "cache")).summarize(span))
    assert error is None and again is not None and again.steps.count == 41


def test_an_object_without_a_version_is_read_unchecked(
    two_versions: tuple[bytes, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that gives no ETag: nothing to compare, the read goes on (and is not
    refused for it)."""
    url = put("bucket/run/w.1.pt.trace.json", two_versions[0])
    real_info = FakeVersionedFS.info

    def no_etag(self: Any, path: str, **kwargs: Any) -> dict[str, Any]:
        info = real_info(self, path, **kwargs)
        info.pop("ETag")
        return info

    monkeypatch.setattr(FakeVersionedFS, "info", no_etag)
    assert read_trace(url).health.event_count == 40 * 1501
    assert len(FakeVersionedFS.fetches) >= 4  # read in pieces all the same
