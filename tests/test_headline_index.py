"""The headline index of a log directory (store/headline_index.py): ``history`` reads one
file for every run it listed before, adds a new run without reading the others again,
drops a changed file's entry, and ignores an index that is damaged or of another version."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import msgspec
import pytest
from test_history import DAY_NS, T0, tiny_trace

from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.schema.history import HistoryDocument
from tb_kineto_insights.service.headlines import collect_runs
from tb_kineto_insights.store import headline_index as hi
from tb_kineto_insights.store.cache import DiskCache, encode_json, sealed, settings_fingerprint
from tb_kineto_insights.store.cached_summaries import CachedSummaries
from tb_kineto_insights.trace.source import DEFAULT_MAX_JSON_BYTES

SETTINGS = settings_fingerprint(DEFAULT_MAX_JSON_BYTES, DEFAULT_THRESHOLDS)


def _logdir(tmp_path: Path, steps: tuple[float, ...]) -> Path:
    logdir = tmp_path / "logs"
    for i, step in enumerate(steps):
        tiny_trace(logdir / f"exp_{i}" / "w.1.pt.trace.json", step, T0 + i * DAY_NS)
    return logdir


def _index_file(cache: Path, logdir: Path) -> Path:
    return cache / hi.index_name(SETTINGS, str(logdir.resolve()))


def _stored_entries(path: Path) -> list[Any]:
    body = path.read_bytes().split(b"\n", 1)[1]
    return list(msgspec.json.decode(body)["entries"])


def _no_per_file_headlines(monkeypatch: pytest.MonkeyPatch, seen: list[str]) -> None:
    """Record every per-file headline read (the index should make them unnecessary)."""
    load = DiskCache.load_file_headline

    def spy(self: DiskCache, ident: Any) -> Any:
        seen.append(ident.path)
        return load(self, ident)

    monkeypatch.setattr(DiskCache, "load_file_headline", spy)


def test_history_reads_one_index_and_adds_a_new_run_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logdir = _logdir(tmp_path, (200.0, 200.0, 300.0))
    cache = tmp_path / "cache"
    first = CachedSummaries(str(cache))
    runs, skipped = collect_runs(discover(str(logdir)), first, str(logdir))
    assert skipped == {} and first.parsed == 3
    index = _index_file(cache, logdir)
    assert index.is_file()
    entries = _stored_entries(index)
    assert sorted(h["path"] for _, h in entries) == sorted(
        str(logdir / f"exp_{i}" / "w.1.pt.trace.json") for i in range(3)
    )
    assert [h["mean_step_us"] for _, h in sorted(entries, key=lambda e: e[1]["path"])] == [
        200.0,
        200.0,
        300.0,
    ]

    # again: every headline from the index, no per-file headline read, nothing written
    seen: list[str] = []
    _no_per_file_headlines(monkeypatch, seen)
    written = index.stat().st_mtime_ns
    second = CachedSummaries(str(cache))
    again, _ = collect_runs(discover(str(logdir)), second, str(logdir))
    assert again == runs and seen == [] and second.parsed == 0 and second.headlines_read == 3
    assert index.stat().st_mtime_ns == written

    # a run added: only its headline is made (one parse, one per-file look-up), the
    # index is written again with all four
    tiny_trace(logdir / "exp_3" / "w.1.pt.trace.json", 300.0, T0 + 3 * DAY_NS)
    third = CachedSummaries(str(cache))
    more, _ = collect_runs(discover(str(logdir)), third, str(logdir))
    assert [r.name for r in more] == ["exp_0", "exp_1", "exp_2", "exp_3"]
    assert third.parsed == 1 and seen == [str(logdir / "exp_3" / "w.1.pt.trace.json")]
    assert len(_stored_entries(index)) == 4


def test_a_changed_or_removed_file_leaves_the_index(tmp_path: Path) -> None:
    import shutil

    logdir = _logdir(tmp_path, (200.0, 200.0, 300.0))
    cache = tmp_path / "cache"
    collect_runs(discover(str(logdir)), CachedSummaries(str(cache)), str(logdir))
    shutil.rmtree(logdir / "exp_1")
    tiny_trace(logdir / "exp_2" / "w.1.pt.trace.json", 500.0, T0 + 2 * DAY_NS)  # rewritten
    summaries = CachedSummaries(str(cache))
    runs, _ = collect_runs(discover(str(logdir)), summaries, str(logdir))
    assert summaries.parsed == 1  # the rewritten file; exp_0 from the index
    assert [r.workers["w"].mean_step_us for r in runs] == [200.0, 500.0]
    entries = _stored_entries(_index_file(cache, logdir))
    assert sorted(h["mean_step_us"] for _, h in entries) == [200.0, 500.0]


@pytest.mark.parametrize("damage", ["flipped byte", "other analysis version", "other root"])
def test_a_damaged_or_stale_index_is_ignored_and_written_again(tmp_path: Path, damage: str) -> None:
    logdir = _logdir(tmp_path, (200.0, 300.0))
    cache = tmp_path / "cache"
    collect_runs(discover(str(logdir)), CachedSummaries(str(cache)), str(logdir))
    path = _index_file(cache, logdir)
    body = msgspec.json.decode(path.read_bytes().split(b"\n", 1)[1])
    # the index says exp_1 took 999 µs: served only if the index were trusted
    for _, h in body["entries"]:
        h["mean_step_us"] = 999.0
    if damage == "flipped byte":
        data = bytearray(sealed(encode_json(body)))
        data[-5] ^= 1
        path.write_bytes(bytes(data))
    else:
        if damage == "other analysis version":
            body["analysis_version"] += 1
        else:
            body["root"] = "/elsewhere"
        path.write_bytes(sealed(encode_json(body)))
    summaries = CachedSummaries(str(cache))
    runs, _ = collect_runs(discover(str(logdir)), summaries, str(logdir))
    assert [r.workers["w"].mean_step_us for r in runs] == [200.0, 300.0]
    assert summaries.parsed == 0  # the per-file headlines answered
    fresh = _stored_entries(path)
    assert sorted(h["mean_step_us"] for _, h in fresh) == [200.0, 300.0]


def test_history_cli_writes_and_uses_the_index(tmp_path: Path) -> None:
    from tb_kineto_insights.cli.main import _parser

    logdir = _logdir(tmp_path, (200.0, 200.0, 200.0, 300.0, 300.0))
    cache = str(tmp_path / "cache")

    def run(*argv: str) -> tuple[int, str]:
        args = _parser().parse_args(list(argv))
        out, err = io.StringIO(), io.StringIO()
        return int(args.func(args, out, err)), out.getvalue()

    code, out = run("history", str(logdir), "--format", "json", "--cache", cache)
    assert code == 0
    assert len(_stored_entries(_index_file(Path(cache), logdir))) == 5
    code, again = run("history", str(logdir), "--format", "json", "--cache", cache)
    assert code == 0 and again == out
    doc = msgspec.json.decode(again, type=HistoryDocument)
    assert [(c.run, c.verdict) for c in doc.series[0].changes if c.metric == "step_time"] == [
        ("exp_3", "regressed")
    ]


def test_without_a_cache_nothing_is_written(tmp_path: Path) -> None:
    logdir = _logdir(tmp_path, (200.0,))
    index = CachedSummaries(None).headline_index(str(logdir))
    assert index.backend is None and index.save() is False


def test_a_forged_value_in_the_index_or_a_headline_is_damage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Attack run: an index entry resealed with ``median_step_us = -1e308`` (the
    checksum is plain SHA-256) was printed as a 300-digit negative step time. Now the
    entry is dropped with one log line naming the index, found again from its per-file
    headline, and the index written again; a per-file headline forged alike is damage
    too (recomputed from the summary)."""
    logdir = _logdir(tmp_path, (200.0, 300.0))
    cache = tmp_path / "cache"
    collect_runs(discover(str(logdir)), CachedSummaries(str(cache)), str(logdir))
    path = _index_file(cache, logdir)
    body = msgspec.json.decode(path.read_bytes().split(b"\n", 1)[1])
    body["entries"][0][1]["median_step_us"] = -1e308
    path.write_bytes(sealed(encode_json(body)))
    caplog.set_level("WARNING")
    summaries = CachedSummaries(str(cache))
    runs, _ = collect_runs(discover(str(logdir)), summaries, str(logdir))
    assert [r.workers["w"].median_step_us for r in runs] == [200.0, 300.0]
    lines = [r.getMessage() for r in caplog.records]
    name = hi.index_name(SETTINGS, str(logdir.resolve()))
    assert len(lines) == 1 and lines[0].startswith(
        f"Kineto Insights: damaged headline index {cache}/{name} "
        "(1 of 2 entries out of range, the first "
    )
    assert "median_step_us = -1e+308 is out of range [0, 1e+13]" in lines[0]
    assert sorted(h["median_step_us"] for _, h in _stored_entries(path)) == [200.0, 300.0]
    # every per-file headline forged too (and the index): each is damage, logged by name
    forged = 0
    for file in (cache / "headlines").rglob("*.headline"):
        stored = msgspec.json.decode(file.read_bytes().split(b"\n", 1)[1])
        stored["headline"]["mean_step_us"] = -5.0
        file.write_bytes(sealed(encode_json(stored)))
        forged += 1
    path.unlink()
    caplog.clear()
    summaries = CachedSummaries(str(cache))
    runs, _ = collect_runs(discover(str(logdir)), summaries, str(logdir))
    assert [r.workers["w"].mean_step_us for r in runs] == [200.0, 300.0]
    damaged = [r.getMessage() for r in caplog.records if "damaged cache file" in r.getMessage()]
    assert damaged and all("mean_step_us = -5.0 is out of range" in m for m in damaged)
    assert forged >= 2


def test_a_damaged_index_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A flipped byte was repaired silently: now one line names the index."""
    logdir = _logdir(tmp_path, (200.0,))
    cache = tmp_path / "cache"
    collect_runs(discover(str(logdir)), CachedSummaries(str(cache)), str(logdir))
    path = _index_file(cache, logdir)
    data = bytearray(path.read_bytes())
    data[-5] ^= 1
    path.write_bytes(bytes(data))
    caplog.set_level("WARNING")
    collect_runs(discover(str(logdir)), CachedSummaries(str(cache)), str(logdir))
    assert [r.getMessage() for r in caplog.records] == [
        f"Kineto Insights: damaged headline index {cache}/{path.relative_to(cache)} "
        "(its checksum does not match: damaged, or sealed with a cache key this process "
        "does not have (KINETO_INSIGHTS_CACHE_KEY_FILE)): computing it again"
    ]
