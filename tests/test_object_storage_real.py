"""Issue 15 §1: object storage for real. A moto S3-API server on loopback (one per test
session, see ``conftest.s3_server``), reached through fsspec's standard configuration
(``FSSPEC_S3_ENDPOINT_URL`` ...): discovery, ``report``, ``diff`` and a real
TensorBoard's ``/summary`` on an ``s3://`` log directory give what the same files give
on local disk; one listing per scan; traces read with ranged GETs, no temporary file."""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import S3Server, as_json
from test_plugin import (
    PREFIX,
    WAIT,
    get_json,
    needs_tensorboard,
    running_tensorboard,
    summary_url,
    tail,
)

from tb_kineto_insights.cli import main as cli
from tb_kineto_insights.logdir.discovery import LogdirError, discover
from tb_kineto_insights.store.cache import encode_json
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace.errors import TraceError

#: Two real 2-rank runs (2 x H200, ~430 KB each file): a healthy DDP run, a straggler.
RUNS = ("ddp_default", "ddp_straggler")


class S3Calls:
    """Counts S3 API calls made through s3fs (method name and request arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def clear(self) -> None:
        self.calls.clear()


@pytest.fixture
def s3_calls(monkeypatch: pytest.MonkeyPatch, s3_server: S3Server) -> S3Calls:
    import s3fs

    calls = S3Calls()
    original = s3fs.S3FileSystem._call_s3

    async def counting(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        calls.calls.append((method, {k: v for k, v in kwargs.items() if k != "Body"}))
        return await original(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counting)
    return calls


def s3fs_client() -> Any:
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)


def upload(local_root: Path, bucket: str, prefix: str, runs: tuple[str, ...] = RUNS) -> str:
    """Each ``*.json.gz`` of ``runs`` under ``local_root``, as objects under
    ``s3://bucket/prefix``; returns that URL."""
    fs = s3fs_client()
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    for run in runs:
        for path in sorted((local_root / run).glob("*.json.gz")):
            fs.pipe_file(f"{bucket}/{prefix}/{run}/{path.name}", path.read_bytes())
    return f"s3://{bucket}/{prefix}"


@pytest.fixture
def local_logdir(h200x2: Path, tmp_path: Path) -> Path:
    """The same files on local disk (copied to a temporary folder: discovery refuses
    links that lead out of the log directory)."""
    root = tmp_path / "local-logs"
    for run in RUNS:
        (root / run).mkdir(parents=True)
        for path in sorted((h200x2 / run).glob("*.json.gz")):
            shutil.copy2(path, root / run / path.name)
    return root


@pytest.fixture
def s3_logdir(s3_server: S3Server, h200x2: Path) -> Iterator[str]:
    bucket = f"logs-{secrets.token_hex(4)}"
    yield upload(h200x2, bucket, "team/logs")


def cli_json(argv: list[str]) -> tuple[int, Any]:
    """Run the CLI in this process (it reads the moto endpoint from fsspec's config)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(argv)
    return code, json.loads(out.getvalue()) if out.getvalue().strip() else None


def without_locations(value: Any) -> Any:
    """The document with file paths and the logdir argument left out (they differ by
    storage), everything else kept."""
    if isinstance(value, dict):
        return {k: without_locations(v) for k, v in value.items() if k not in ("file", "path")}
    if isinstance(value, list):
        return [without_locations(v) for v in value]
    return value


# --------------------------------------------------------------------------- discovery


def test_discover_on_s3_matches_local_in_one_listing(
    s3_logdir: str, local_logdir: Path, s3_calls: S3Calls
) -> None:
    s3_calls.clear()
    remote = discover(s3_logdir)
    # One scan = one ListObjectsV2 (4 files < 1,000 keys): no request per file or folder.
    assert s3_calls.names() == ["list_objects_v2"]
    local = discover(str(local_logdir))
    assert [r.name for r in remote] == list(RUNS) == [r.name for r in local]

    def keys(runs: list[Any]) -> list[tuple[str, str, str, int]]:
        return [
            (r.name, w.name, s.span, s.size_bytes) for r in runs for w in r.workers for s in w.spans
        ]

    assert keys(remote) == keys(local)
    assert len(keys(remote)) == 4
    for run in remote:
        for worker in run.workers:
            for span in worker.spans:
                assert span.path.startswith(s3_logdir + "/" + run.name + "/")
                assert len(span.version) == 32  # the ETag (MD5 of a single-part PUT)
                assert span.mtime > 0 and span.inode == 0 and span.root == ""
    # A second scan lists again (new files are found), still once.
    s3_calls.clear()
    discover(s3_logdir)
    assert s3_calls.names() == ["list_objects_v2"]


def test_discover_on_a_missing_s3_prefix_is_a_typed_error(s3_server: S3Server) -> None:
    bucket = f"empty-{secrets.token_hex(4)}"
    s3fs_client().mkdir(bucket)
    with pytest.raises(LogdirError, match="does not exist"):
        discover(f"s3://{bucket}/nothing/here")


# --------------------------------------------------------------------------- reading


def test_trace_is_read_with_ranged_gets_only(
    s3_logdir: str,
    s3_calls: S3Calls,
    h200x2: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trace on S3 is streamed from ranged GETs (never a whole-object download to a
    temporary file), and gives the summary the local file gives."""
    span = discover(s3_logdir)[0].workers[0].spans[0]
    s3_calls.clear()
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    remote = as_json(summarize_file(span.path))
    gets = [kwargs for name, kwargs in s3_calls.calls if name == "get_object"]
    assert gets and all("Range" in kwargs for kwargs in gets)
    assert list(private_tmp.iterdir()) == []  # no temporary download
    local_path = h200x2 / span.run / span.path.rsplit("/", 1)[1]
    local = as_json(summarize_file(str(local_path)))
    assert remote["health"]["path"] == span.path and local["health"]["path"] == str(local_path)
    assert without_locations(remote) == without_locations(local)
    assert remote["steps"]["count"] > 0


# --------------------------------------------------------------------------- CLI


def test_report_on_s3_equals_report_on_local_disk(s3_logdir: str, local_logdir: Path) -> None:
    code_s3, remote = cli_json(["report", s3_logdir, "--format", "json", "--cache", "none"])
    code_local, local = cli_json(
        ["report", str(local_logdir), "--format", "json", "--cache", "none"]
    )
    assert code_s3 == code_local == 0
    assert without_locations(remote) == without_locations(local)
    # Real content, not two empty documents: 2 runs x 2 ranks, each with a run view.
    assert [len(r["workers"]) for r in remote["runs"]] == [2, 2]
    assert all(r["run_summary"] is not None for r in remote["runs"])
    files = [s["file"] for r in remote["runs"] for w in r["workers"] for s in w["spans"]]
    assert all(f.startswith("s3://") for f in files)


def test_diff_on_s3_equals_diff_on_local_disk(s3_logdir: str, local_logdir: Path) -> None:
    base, exp = f"{s3_logdir}/ddp_default", f"{s3_logdir}/ddp_straggler"
    code_s3, remote = cli_json(["diff", base, exp, "--format", "json", "--cache", "none"])
    local_args = [str(local_logdir / "ddp_default"), str(local_logdir / "ddp_straggler")]
    code_local, local = cli_json(["diff", *local_args, "--format", "json", "--cache", "none"])
    assert code_s3 == code_local == 0
    assert remote["headline"] == local["headline"]
    assert remote["headline"]["exp_step_us"] > remote["headline"]["base_step_us"] > 0

    def sideless(doc: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in doc.items() if k not in ("base", "exp", "base_label", "exp_label")}

    assert without_locations(sideless(remote)) == without_locations(sideless(local))
    # LOGDIR:RUN on an s3:// URL (its own ':' is not the separator).
    code, by_run = cli_json(
        ["diff", f"{s3_logdir}:ddp_default", exp, "--format", "json", "--cache", "none"]
    )
    assert code == 0 and by_run["headline"] == remote["headline"]


# --------------------------------------------------------------------------- TensorBoard


@needs_tensorboard
def test_real_tensorboard_serves_an_s3_logdir(
    s3_logdir: str, local_logdir: Path, tmp_path: Path, h200x2: Path
) -> None:
    """``tensorboard --logdir s3://...`` (endpoint from FSSPEC_S3_ENDPOINT_URL in its
    environment): /runs lists what local discovery lists, /summary gives the local
    file's summary."""
    log_path = tmp_path / "tensorboard.log"
    expected = discover(str(local_logdir))
    with running_tensorboard(
        s3_logdir,  # type: ignore[arg-type]
        log_path,
        tmp_path / "tb-cache",
        "30",
        "--kineto_insights_workers",
        "1",
    ) as base:
        status, runs = get_json(f"{base}{PREFIX}/runs")
        assert status == 200, tail(log_path)
        assert [r["run"] for r in runs["runs"]] == [r.name for r in expected], tail(log_path)
        span = expected[0].workers[0].spans[0]
        status, summary = get_json(
            base + summary_url(span.run, span.worker, span.span, wait=WAIT), timeout=180
        )
        assert status == 200, (summary, tail(log_path))
        local_file = h200x2 / span.run / Path(span.path).name
        local = msgspec.json.decode(encode_json(summarize_file(str(local_file))))
        assert summary["health"]["path"] == span.path.replace(str(local_logdir), s3_logdir)
        assert without_locations(summary) == without_locations(local)
        assert summary["steps"]["count"] > 0


def test_plugin_cache_folder_on_s3(
    s3_server: S3Server, local_logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--kineto_insights_cache_dir s3://bucket/cache``: entries are PUT there, and a
    second TensorBoard (another log directory path, same files) serves them unparsed."""
    from test_plugin import PRELOAD_ENV, RecordingLoader, make_app, the_plugin
    from werkzeug.test import Client

    from tb_kineto_insights.summary import ANALYSIS_VERSION

    bucket = f"cache-{secrets.token_hex(4)}"
    fs = s3fs_client()
    fs.mkdir(bucket)
    url = f"s3://{bucket}/tb-cache"
    monkeypatch.setenv(PRELOAD_ENV, "0")
    span = discover(str(local_logdir))[0].workers[0].spans[0]
    target = summary_url(span.run, span.worker, span.span, wait="60")
    RecordingLoader.made = []
    try:
        first = Client(make_app(local_logdir, "--kineto_insights_cache_dir", url))
        assert the_plugin().loader.cache is not None
        assert the_plugin().loader.cache.location == url
        response = first.get(target)
        assert response.status_code == 200
        stored = fs.find(f"{bucket}/tb-cache")
        summaries = [p for p in stored if "/headlines/" not in p]
        assert [p.rsplit("/", 2)[-2] for p in summaries] == [f"v{ANALYSIS_VERSION}"]
        assert summaries[0].endswith(".summary")
        # and the span's headline record for `history` (issue 31), beside it
        assert any(f"/headlines/v{ANALYSIS_VERSION}/" in p for p in stored), stored

        moved = local_logdir.parent / "mounted-elsewhere"
        shutil.copytree(local_logdir, moved)
        second = Client(make_app(moved, "--kineto_insights_cache_dir", url))
        plugin = the_plugin()
        response = second.get(target)
        assert response.status_code == 200
        assert json.loads(response.get_data(as_text=True))["health"]["path"] == str(
            moved.resolve() / span.run / Path(span.path).name
        )
        assert plugin.loader.loads_started == 0
    finally:
        for instance in RecordingLoader.made:
            instance.close()


# --------------------------------------------------------------------------- issue 32 §5

_OVERWRITE: dict[str, bytes] = {}


def summarize_then_overwrite(path: str, **kwargs: Any) -> Any:
    """Summarise, then overwrite the object (another writer, while the read ran)."""
    summary = summarize_file(path, **kwargs)
    if path in _OVERWRITE:
        s3fs_client().pipe_file(path.removeprefix("s3://"), _OVERWRITE.pop(path))
    return summary


def test_an_object_overwritten_while_read_is_not_cached_under_the_listed_version(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """The summary of an object whose ETag changed during the read is neither stored
    under the listed version's key nor served: an io error (not a verdict), and the
    next listing (new ETag) reads the new bytes."""
    from test_cache import SETTINGS, write_trace

    from tb_kineto_insights.service import workspace as workspace_module
    from tb_kineto_insights.service.loader import SummaryLoader
    from tb_kineto_insights.store.cache import DiskCache

    bucket = f"logs-{secrets.token_hex(4)}"
    fs = s3fs_client()
    fs.mkdir(bucket)
    first = write_trace(tmp_path / "a.json.gz", steps=2).read_bytes()
    second = write_trace(tmp_path / "b.json.gz", steps=3).read_bytes()
    fs.pipe_file(f"{bucket}/run/w.1.pt.trace.json.gz", first)
    url = f"s3://{bucket}"
    span = discover(url)[0].workers[0].spans[0]
    ident = workspace_module.listed_identity(span)
    assert ident.version  # listed with its ETag
    _OVERWRITE[span.path] = second
    cache = DiskCache(tmp_path / "cache", SETTINGS)
    loader = SummaryLoader(cache=cache, workers=0, summarize=summarize_then_overwrite)
    try:
        status, result = loader.get(ident, wait_s=60)
        assert result is None and status.error_kind == "io", status
        assert "changed while it was read" in (status.error or "")
        assert not cache.has(ident)  # nothing stored under the old version
        again = workspace_module.listed_identity(discover(url)[0].workers[0].spans[0])
        assert again.version != ident.version
        status, result = loader.get(again, wait_s=60)
        assert status.state == "ready" and result is not None
        assert json.loads(result.panels["steps"])["count"] == 3
    finally:
        loader.close()


def test_an_object_overwritten_between_two_ranged_gets_is_named(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s3fs pins each ranged GET to the ETag it opened (``If-Match``); when the object
    is overwritten between two GETs of one read, the error says the object changed
    while it was read (it was "cannot read: ... pre-conditions")."""
    import fsspec.config
    import s3fs
    from test_worker_death import write_plain_trace

    s3_conf = {**fsspec.config.conf.get("s3", {}), "default_block_size": 256 * 1024}
    monkeypatch.setitem(fsspec.config.conf, "s3", s3_conf)
    bucket = f"logs-{secrets.token_hex(4)}"
    fs = s3fs_client()
    fs.mkdir(bucket)
    first = write_plain_trace(tmp_path / "a.json", 40, 1500).read_bytes()
    second = write_plain_trace(tmp_path / "b.json", 41, 1500).read_bytes()
    key = f"{bucket}/run/w.1.pt.trace.json"
    fs.pipe_file(key, first)
    original = s3fs.S3FileSystem._call_s3
    gets: list[int] = []

    async def overwrite_after_first_get(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        answer = await original(self, method, *args, **kwargs)
        if method == "get_object":
            gets.append(1)
            if len(gets) == 1:
                await original(self, "put_object", Bucket=bucket, Key=key.split("/", 1)[1],
                               Body=second)  # fmt: skip
        return answer

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", overwrite_after_first_get)
    url = f"s3://{key}"
    with pytest.raises(TraceError) as caught:
        summarize_file(url)
    assert "the object changed while it was read" in str(caught.value), str(caught.value)
    assert len(gets) == 1  # the second GET was refused by its If-Match
    assert "when opened, another after byte" in str(caught.value)
