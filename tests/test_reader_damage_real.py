"""The tests of ``test_reader_damage.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import H200X2, SAMPLE_LOGS, as_json, write_trace

from tb_kineto_insights.cli.main import main as cli_main
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace.errors import TraceError, TraceFormatError
from tb_kineto_insights.trace.reader import read_trace


def _one(folder: Path) -> str:
    files = sorted(folder.glob("worker0*.json*"))
    assert files, folder
    return str(files[0])


def _ids(summary: dict[str, Any]) -> set[str]:
    return {d["id"] for d in summary["diagnoses"]}


def _same_tables(a: Any, b: Any) -> None:
    for kind in a.tables:
        ta, tb = a.tables[kind], b.tables[kind]
        for col in ("start_ns", "dur_ns", "device", "stream", "correlation"):
            assert np.array_equal(getattr(ta, col), getattr(tb, col)), (kind, col)


def test_b5_kernels_ts_zero(shared_cases: Path) -> None:
    path = _one(shared_cases / "B5_kernels_ts_zero")
    tr = read_trace(path)
    assert len(tr.kernels) == 50
    assert tr.health.quarantined_by_kind == {
        "kernel": {"ts_far_outside_trace": 30},
        "flow": {"ts_far_outside_trace": 30},
    }
    assert int(tr.kernels.start_ns.min()) > 4_000_000_000 * 1000  # none left at ts 0
    assert tr.quarantined_correlations.size == 30
    b5 = as_json(summarize_file(path))
    b0 = as_json(summarize_file(_one(shared_cases / "B0_baseline")))
    # the two steps whose kernels lost their timestamps are left out of every panel:
    # their GPU time is unknown, and counting it as idle gave 37.5 % utilization
    assert b5["health"]["steps_without_gpu_data"] == [10, 11]  # ProfilerStep#10, #11
    assert b5["steps"]["count"] == 2 and b0["steps"]["count"] == 4
    for key in ("mean_step_us", "min_step_us", "max_step_us", "gpu_utilization_fraction"):
        assert b5["steps"][key] == b0["steps"][key], key
    sev0 = {d["id"]: d["severity"] for d in b0["diagnoses"]}
    sev5 = {d["id"]: d["severity"] for d in b5["diagnoses"]}
    assert "low_gpu_utilization" not in sev5
    # idle 24.7 % of the step after syncs; without them (replayed) it saves 32-36 %: high
    assert sev5["gpu_idle_host_sync"] == sev0["gpu_idle_host_sync"] == "high"
    # and, with 2 of its 4 steps left out for lost GPU data, too few for the noise rule
    assert set(sev5) - set(sev0) == {"trace_data_loss", "trace_too_few_steps"}
    assert set(sev0) - set(sev5) == set()
    # host-side panels keep every step: a broken kernel timestamp does not touch the
    # [memory] events, so the growth is B0's, over all 4 steps
    (mem5,), (mem0,) = b5["memory"]["devices"], b0["memory"]["devices"]
    assert mem5["growth"] == mem0["growth"]
    assert mem5["growth"]["steps_used"] == 4 and mem5["growth"]["bytes_per_step"] == 4 * 2**20
    assert mem5["per_step"] == mem0["per_step"]
    loss = [d for d in b5["diagnoses"] if d["id"] == "trace_data_loss"]
    assert loss[0]["evidence"]["quarantined_events"] == 60
    assert "trace_data_loss" not in _ids(b0)


def test_b7_kernel_dur_overflow(shared_cases: Path) -> None:
    path = _one(shared_cases / "B7_kernel_dur_overflow_same_stream")
    tr = read_trace(path)
    clipped = tr.health.stream_overlap_clipped
    assert clipped["events"] == 1 and clipped["overran_whole_events"] == 1
    assert 1_599_000_000 < clipped["removed_ns"] < 1_600_000_000  # 1.6 s less ~300 µs
    b7 = as_json(summarize_file(path))
    b0 = as_json(summarize_file(_one(shared_cases / "B0_baseline")))
    assert b7["steps"]["count"] == b0["steps"]["count"] == 4
    assert b7["steps"]["min_step_us"] > 0
    assert b7["steps"]["max_step_us"] == pytest.approx(b0["steps"]["max_step_us"], rel=0.02)
    assert b7["steps"]["mean_step_us"] == pytest.approx(b0["steps"]["mean_step_us"], rel=0.02)
    gpu = b7["steps"]["gpu_utilization_fraction"]
    assert gpu == pytest.approx(b0["steps"]["gpu_utilization_fraction"], abs=0.01)
    assert "trace_data_loss" in _ids(b7)
    (loss,) = [d for d in b7["diagnoses"] if d["id"] == "trace_data_loss"]
    assert loss["title"].startswith("1 GPU event(s) had a duration running over")
    assert "clipped, 1.6 s removed" in loss["title"]  # issue 17 §10: the unit that fits


@pytest.mark.parametrize("run", ["ddp_default", "ddp_tuned", "ddp_straggler", "fsdp"])
def test_real_h200_traces_have_no_broken_timestamps(run: str) -> None:
    folder = H200X2 / run
    if not folder.is_dir():
        pytest.skip("../shared/traces/h200x2 not found")
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        h = read_trace(str(path)).health
        assert h.quarantined == {} and h.damaged_regions == 0
        assert h.stream_overlap_clipped["overran_whole_events"] == 0


def test_real_partial_overlaps_are_small() -> None:
    # H200 sample: 175 kernels overlap the next on their stream by at most 4.7 µs
    # (programmatic dependent launch style); clipped, but no data loss
    folder = SAMPLE_LOGS / "dataloader_workers0"
    if not folder.is_dir():
        pytest.skip("sample_logs missing")
    path = _one(folder)
    h = read_trace(path).health
    clip = h.stream_overlap_clipped
    assert 100 <= clip["events"] <= 300 and clip["overran_whole_events"] == 0
    assert clip["removed_ns"] < clip["events"] * 5_000
    assert "trace_data_loss" not in _ids(as_json(summarize_file(path)))


# -- damaged files ----------------------------------------------------------------------


def test_b1_unescaped_quote_is_salvaged(shared_cases: Path) -> None:
    folder = shared_cases / "B1_unescaped_quote_in_name"
    bad = read_trace(str(folder / "worker0.1700000000000.pt.trace.json"))
    good = read_trace(str(folder / "worker1.1700000000001.pt.trace.json"))
    clean = read_trace(_one(shared_cases / "B0_baseline"))
    h = bad.health
    assert (h.damaged_regions, h.lost_events, h.event_count) == (1, 1, 431)
    assert h.damage[0]["offset"] == 109296  # the raw quote's next byte
    assert h.damage[0]["start"] == 109205  # the python_function event holding it
    assert good.health.damaged_regions == 0 and good.health.event_count == 431
    _same_tables(good, clean)
    _same_tables(bad, clean)  # only the extra python_function event was lost
    assert "trace_data_loss" in _ids(
        as_json(summarize_file(str(folder / "worker0.1700000000000.pt.trace.json")))
    )


def test_b4_empty_value_is_salvaged(shared_cases: Path) -> None:
    folder = shared_cases / "B4_empty_pg_description"
    path = str(folder / "worker0.1700000000000.pt.trace.json")
    h = read_trace(path).health
    assert (h.damaged_regions, h.lost_events, h.event_count) == (2, 2, 434)
    assert [d["offset"] for d in h.damage] == [1067, 2025]  # each ", " after the key
    assert h.lost_bytes == 376 + 772
    s = as_json(summarize_file(path))
    loss = [d for d in s["diagnoses"] if d["id"] == "trace_data_loss"]
    assert loss and loss[0]["evidence"]["lost_events"] == 2
    assert loss[0]["severity"] == "medium"
    good = read_trace(str(folder / "worker1.1700000000001.pt.trace.json"))
    _same_tables(good, read_trace(_one(shared_cases / "B0_baseline")))


def test_truncated_gzip_of_a_real_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(_one(SAMPLE_LOGS / "dataloader_workers0"))
    raw = path.read_bytes()
    cut = tmp_path / "w.1.pt.trace.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    prefix = zlib.decompressobj(wbits=31).decompress(raw[: len(raw) // 2])
    full, part = read_trace(str(path)), read_trace(str(cut))
    assert any("gzip stream ends early" in d["problem"] for d in part.health.damage)
    began = prefix.count(b'"ph":')
    assert part.health.event_count in (began - 1, began)  # the cut event is lost
    assert 0.2 * full.health.event_count < part.health.event_count < full.health.event_count
    ops_full, ops_part = full.cpu_ops, part.cpu_ops
    whole = set(zip(ops_full.start_ns.tolist(), ops_full.dur_ns.tolist(), strict=True))
    kept = set(zip(ops_part.start_ns.tolist(), ops_part.dur_ns.tolist(), strict=True))
    assert kept and kept <= whole
    # the diagnosis says the rest is missing, and a diff against the file warns
    loss = next(
        d for d in as_json(summarize_file(str(cut)))["diagnoses"] if d["id"] == "trace_data_loss"
    )
    # half of the gzip holds only the host section: every GPU event is lost (high)
    (ended,) = [d for d in part.health.damage if d["problem"].startswith("gzip stream ends")]
    end = loss["evidence"]["file_ends_at_byte"]  # the start of the cut event
    assert ended["offset"] - 1000 < end <= ended["offset"]
    # a gzip file says which bytes count: the compressed file's end and the inflated
    # JSON's offset (the attack run found an inflated offset past the file's end)
    assert loss["title"].startswith(
        f"The gzip file ends at byte {len(raw) // 2:,} (compressed; its JSON breaks at "
        f"byte {end:,}, inflated), before its GPU events"
    )
    assert loss["severity"] == "high" and loss["evidence"]["gpu_events_lost"] is True
    assert cli_main(["diff", str(cut), str(path)]) in (0, 1)
    assert "warning: the base side lost trace data" in capsys.readouterr().out


def test_corrupt_gzip_keeps_what_comes_before_the_damage(tmp_path: Path) -> None:
    """A bad CRC at the very end loses nothing but is reported; corrupt deflate data in
    the middle keeps the events before it (zlib raises for a whole call, so the data
    before the damage is recovered by bisection); a valid two-member gzip split inside an
    event reads as the original."""
    path = Path(_one(SAMPLE_LOGS / "memory_leak"))
    raw = path.read_bytes()
    full = read_trace(str(path))
    crc = bytearray(raw)
    crc[-6] ^= 0xFF  # the CRC32 of the trailer
    bad_crc = read_trace(
        str(write_trace(tmp_path / "crc" / "w.1.pt.trace.json.gz", text=bytes(crc)))
    )
    assert bad_crc.health.event_count == full.health.event_count
    assert len(bad_crc.kernels) == len(full.kernels)
    assert [d["problem"][:18] for d in bad_crc.health.damage] == ["corrupt gzip data "]
    middle = bytearray(raw)
    for i in range(len(raw) // 2, len(raw) // 2 + 200):
        middle[i] ^= 0x5A
    bad_mid = read_trace(
        str(write_trace(tmp_path / "mid" / "w.1.pt.trace.json.gz", text=bytes(middle)))
    )
    assert any(d["problem"].startswith("corrupt gzip data") for d in bad_mid.health.damage)
    assert 0.2 * full.health.event_count < bad_mid.health.event_count < full.health.event_count
    json_text = gzip.decompress(raw)
    half = json_text.index(b'"ph"', len(json_text) // 2) + 2  # inside an event
    two = gzip.compress(json_text[:half]) + gzip.compress(json_text[half:])
    joined = read_trace(str(write_trace(tmp_path / "two" / "w.1.pt.trace.json.gz", text=two)))
    assert joined.health.event_count == full.health.event_count
    assert joined.health.damage == []


def test_shared_fuzz_inputs_give_only_typed_errors(shared_cases: Path) -> None:
    fuzz = shared_cases / "fuzz"
    with pytest.raises(TraceFormatError, match="nothing usable") as err:
        read_trace(str(fuzz / "hand_decodeerror_truncated.json"))
    assert err.value.offset is not None and str(fuzz) in str(err.value)
    tr = read_trace(str(fuzz / "hand_stray_bracket_array_root.json"))
    assert [tr.names[i] for i in tr.cpu_ops.name] == ["a"]  # "b" sits in a nested array
    assert tr.health.skipped == {"invalid_field_type": 1} and tr.health.damaged_regions == 1
    tr = read_trace(str(fuzz / "hand_validation_number_out_of_range.json"))
    assert tr.health.event_count == 2 and len(tr.kernels) == 0
    for path in sorted(fuzz.iterdir()):  # any file added there later: typed or a Trace
        try:
            result = read_trace(str(path))
        except TraceError as exc:
            assert str(path) in str(exc)
        else:
            assert result.health.event_count >= 0


def test_a_whole_gzip_of_cut_json_says_the_json_ends_early(tmp_path: Path) -> None:
    """Attack run: a complete gzip (``gzip -t`` passes) of JSON cut short was said to
    be "The gzip file ends at byte 2,264 … (cut short)". The negative: a gzip stream
    cut short still says where the gzip file ends (the test above)."""
    source = next((SAMPLE_LOGS / "eff_gemm_skinny").glob("*.gz"))
    text = gzip.decompress(source.read_bytes())[:30000]
    cut = tmp_path / "r" / "w.1.pt.trace.json.gz"
    cut.parent.mkdir()
    cut.write_bytes(gzip.compress(text))
    loss = next(
        d for d in as_json(summarize_file(str(cut)))["diagnoses"] if d["id"] == "trace_data_loss"
    )
    end = loss["evidence"]["file_ends_at_byte"]
    assert 29_000 < end <= 30_000
    assert loss["title"] == (
        f"The JSON inside the gzip file ends early, at byte {end:,} (inflated; the gzip "
        f"data itself is whole): lost every event written after byte {end:,}"
    )
