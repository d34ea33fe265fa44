"""The pure parts of ``benchmarks/compare_peers.py``: medians, ratios, targets, the slope,
input discovery and RESULTS.md from fake measurements. No peer is installed or run.
Real traces: ``test_compare_peers_real.py``."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
from conftest import REPO, cpu, kernel, write_trace

sys.path.insert(0, str(REPO / "benchmarks"))
import compare_peers as cp  # noqa: E402

MB = 1_000_000


def _runs(*samples: tuple[float, int]) -> cp.Runs:
    return cp.Runs(samples=list(samples))


def test_median_odd_even_and_empty() -> None:
    assert cp.median([3.0, 1.0, 2.0]) == 2.0
    assert cp.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError, match="no values"):
        cp.median([])


def test_runs_medians_ignore_an_outlier() -> None:
    r = _runs((1.0, 100 * MB), (9.0, 300 * MB), (2.0, 200 * MB))
    assert r.median_wall_s() == 2.0
    assert r.median_rss_bytes() == 200 * MB


def test_ratios_use_medians_and_none_on_failure() -> None:
    ours = _runs((1.0, 100 * MB), (1.2, 110 * MB), (1.1, 90 * MB))
    peer = _runs((12.0, 600 * MB), (11.0, 660 * MB), (13.0, 630 * MB))
    assert cp.time_ratio(peer, ours) == pytest.approx(12.0 / 1.1)
    assert cp.rss_fraction(ours, peer) == pytest.approx(100 / 630)
    failed = cp.Runs(error="boom")
    assert cp.time_ratio(failed, ours) is None
    assert cp.rss_fraction(ours, failed) is None
    assert cp.time_ratio(peer, cp.Runs(skipped="> 300 MB")) is None


def _inp(name: str, mb: float, group: str = "real") -> cp.Input:
    return cp.Input(Path("/x") / name, int(mb * MB), int(mb * MB / 10), group)


def test_targets_pass_and_miss_with_how_much() -> None:
    inp = _inp("big.json.gz", 76)
    runs = {
        "ours": _runs((1.72, 116 * MB)),
        "hta": _runs((10.5, 478 * MB)),  # 6.1x: a miss, 10/6.1 = 1.64x short
        "tbp": _runs((20.0, 486 * MB)),  # 11.6x: a pass
    }
    v = {x.target: x for x in cp.evaluate_targets(inp, runs)}
    assert set(v) == {
        "10x HTA",
        "RSS <= 1/3 HTA",
        "10x torch-tb-profiler",
        "RSS <= 1/3 torch-tb-profiler",
    }
    assert not v["10x HTA"].passed
    assert v["10x HTA"].detail == "6.1x, 1.64x short"
    assert v["10x torch-tb-profiler"].passed
    assert v["10x torch-tb-profiler"].detail == "11.6x"
    assert v["RSS <= 1/3 HTA"].passed  # 116/478 = 0.24
    assert v["RSS <= 1/3 HTA"].detail == "0.24"


def test_rss_miss_says_by_how_much() -> None:
    runs = {"ours": _runs((1.0, 200 * MB)), "hta": _runs((20.0, 400 * MB))}
    v = {x.target: x for x in cp.evaluate_targets(_inp("a.json", 50), runs)}
    assert not v["RSS <= 1/3 HTA"].passed
    assert v["RSS <= 1/3 HTA"].detail == "0.50, 1.50x over"
    assert "10x torch-tb-profiler" not in v  # tbp not run: no target against it


def test_small_inputs_and_failed_peers_get_no_target() -> None:
    runs = {"ours": _runs((0.5, 80 * MB)), "hta": _runs((1.0, 300 * MB))}
    assert cp.evaluate_targets(_inp("small.json", 9.9), runs) == []
    failed = {"ours": _runs((1.0, 80 * MB)), "hta": cp.Runs(error="KeyError: 'ph'")}
    assert cp.evaluate_targets(_inp("big.json", 50), failed) == []


def test_failed_ours_fails_every_target() -> None:
    runs = {"ours": cp.Runs(error="crash"), "hta": _runs((10.0, 400 * MB))}
    v = cp.evaluate_targets(_inp("big.json", 50), runs)
    assert [(x.target, x.passed) for x in v] == [("10x HTA", False)]


def test_one_gb_target_on_scaled_input() -> None:
    inp = _inp("x1000.json.gz", 1048, group="scaled")
    ok = cp.evaluate_targets(inp, {"ours": _runs((14.0, 1400 * MB))})
    assert [(x.target, x.passed) for x in ok] == [
        ("1 GB in <= 15 s", True),
        ("1 GB peak RSS <= 1.5 GB", True),
    ]
    bad = cp.evaluate_targets(inp, {"ours": _runs((21.7, 944 * MB))})
    assert [(x.passed, x.detail) for x in bad] == [(False, "21.7 s"), (True, "944 MB")]
    # a real (not scaled) 1 GB trace gets the peer targets only
    assert cp.evaluate_targets(_inp("r.json", 1048), {"ours": _runs((1.0, 1))}) == []


def test_fit_slope_exact_line_and_noise() -> None:
    b, a, r2 = cp.fit_slope([(0.1, 1.5), (0.25, 3.0), (0.5, 5.5), (1.0, 10.5)])
    assert b == pytest.approx(10.0)
    assert a == pytest.approx(0.5)
    assert r2 == pytest.approx(1.0)
    b, _, r2 = cp.fit_slope([(0.0, 0.0), (1.0, 1.0), (2.0, 1.0)])
    assert b == pytest.approx(0.5)
    assert r2 == pytest.approx(0.75)  # SS_res = 1/6, SS_tot = 2/3
    with pytest.raises(ValueError):
        cp.fit_slope([(1.0, 2.0)])
    with pytest.raises(ValueError):
        cp.fit_slope([(1.0, 2.0), (1.0, 3.0)])


def test_json_size_from_gzip_trailer(tmp_path: Path) -> None:
    raw = json.dumps({"traceEvents": [{"ph": "X", "name": "a" * 1000}]}).encode()
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(raw))
    plain = tmp_path / "t.json"
    plain.write_bytes(raw)
    assert cp.json_size_bytes(gz) == len(raw)
    assert cp.json_size_bytes(plain) == len(raw)
    assert gz.stat().st_size < len(raw)


def test_discover_inputs_finds_traces_only(tmp_path: Path) -> None:
    events = [cpu("ProfilerStep#1", 0, 100), kernel("k", 10, 50)]
    a = write_trace(tmp_path / "run" / "w.pt.trace.json", events)
    b = write_trace(tmp_path / "run2" / "w.pt.trace.json.gz", events * 50, gz=True)
    (tmp_path / "recording_info.json").write_text('{"workers": 2}')
    (tmp_path / "notes.txt").write_text("traceEvents")
    (tmp_path / "broken.json.gz").write_bytes(b"not gzip")
    found = cp.discover_inputs([tmp_path, tmp_path / "run", tmp_path / "missing"])
    assert [i.path for i in found] == sorted([a, b], key=lambda p: cp.json_size_bytes(p))
    assert all(i.group == "real" for i in found)
    gz = next(i for i in found if i.path == b)
    assert gz.json_bytes == len(gzip.decompress(b.read_bytes()))
    assert gz.file_bytes == b.stat().st_size


def _machine() -> dict[str, str]:
    return {"CPU": "Test CPU, 2 logical cores", "uptime at start": "load average: 1.00"}


def test_render_results_tables_targets_and_slope() -> None:
    real = _inp("gpt.pt.trace.json.gz", 149.4)
    small = _inp("tiny.json", 2)
    scaled = [_inp(f"s{m}.json.gz", m, "scaled") for m in (105, 262, 524, 1048)]
    results = {
        real.path: {
            "ours": _runs((3.0, 200 * MB), (3.2, 210 * MB), (3.1, 220 * MB)),
            "hta": _runs((32.0, 1000 * MB), (31.0, 990 * MB), (33.0, 1010 * MB)),
            "tbp": cp.Runs(error="KeyError: 'ts'"),
        },
        small.path: {"ours": _runs((0.4, 60 * MB)), "hta": _runs((1.0, 200 * MB))},
    }
    for s in scaled:
        t = 0.4 + 10.5 * s.json_bytes / 1e9
        results[s.path] = {"ours": _runs((t, 500 * MB)), "hta": cp.Runs(skipped="> 300 MB")}
    text = cp.render_results(_machine(), [small, real, *scaled], results, 3, "cmd", "TOTAL 3.0")
    assert "- CPU: Test CPU, 2 logical cores" in text
    assert "median of 3 runs" in text
    row = next(ln for ln in text.splitlines() if "gpt.pt" in ln)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:] == [
        "149.4",
        "3.10",
        "210",
        "32.00",
        "1000",
        "failed: KeyError: 'ts'",
        "–",
        "10.3",
        "–",
        "0.21",
        "–",
    ]
    assert "skipped: > 300 MB" in text
    assert "10.50 s per GB" in text  # t = 0.4 + 10.5 * GB through the 4 points
    assert "r² = 1.0000" in text
    # targets: gpt vs HTA time (10.3x pass) + RSS (0.21 pass); 1 GB: 11.4 s pass, 500 MB pass
    assert "4 of 4 passed." in text
    assert "| gpt.pt.trace.json.gz | 10x HTA | pass | 10.3x |" in text
    assert "## Profile of ours" in text and "TOTAL 3.0" in text


def test_render_results_marks_misses() -> None:
    real = _inp("big.json", 76)
    results = {real.path: {"ours": _runs((1.72, 116 * MB)), "hta": _runs((10.5, 478 * MB))}}
    text = cp.render_results(_machine(), [real], results, 1, "cmd")
    assert "1 of 2 passed." in text
    assert "| big.json | 10x HTA | **miss** | 6.1x, 1.64x short |" in text
    assert "Scaled traces" not in text


def test_failure_reason_names_the_exception_and_where() -> None:
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/v/lib/python3.11/site-packages/hta/common/trace.py", line 512, in load_traces\n'
        "    assert self.is_parsed\n"
        "AssertionError\n"
    )
    assert cp.failure_reason(tb, 1) == "AssertionError at trace.py:512 in load_traces"
    assert cp.failure_reason("warn\nKeyError: 'ts'\n", 1) == "KeyError: 'ts'"
    assert cp.failure_reason("", 137) == "exit 137"
    assert len(cp.failure_reason("x" * 500 + ": y", 1)) == 200


def test_partial_peer_is_named_and_still_compared() -> None:
    real = _inp("gpt.json.gz", 149.4)
    hta = _runs((40.0, 900 * MB))
    hta.partial = "temporal: AssertionError"
    results = {real.path: {"ours": _runs((4.0, 200 * MB)), "hta": hta}}
    text = cp.render_results(_machine(), [real], results, 1, "cmd")
    assert "| 40.00 (raised in temporal: AssertionError) | 900 |" in text
    assert "| gpt.json.gz | 10x HTA | pass | 10.0x |" in text


def test_no_slope_through_two_points() -> None:
    scaled = [_inp(f"s{m}.json.gz", m, "scaled") for m in (85, 255)]
    results = {s.path: {"ours": _runs((20.0 + s.json_bytes / 1e8, 1))} for s in scaled}
    text = cp.render_results(_machine(), scaled, results, 1, "cmd")
    assert "per GB" not in text
    results[scaled[0].path]["ours"] = cp.Runs(error="x")
    assert "Scaled traces" in cp.render_results(_machine(), scaled, results, 1, "cmd")


def test_parse_cpus_workers_per_tool_and_bad_specs() -> None:
    got = cp.parse_cpus(["ours=0,1", "hta=2,3", "hta=4-5", "tbp=6,7"])
    assert got == {"ours": ["0,1"], "hta": ["2,3", "4-5"], "tbp": ["6,7"]}
    assert cp.parse_cpus([]) == {}
    for bad in ("ours", "nvtx=0,1", "ours=0,,1", "ours=a", "hta="):
        with pytest.raises(ValueError, match="want TOOL=CPULIST"):
            cp.parse_cpus([bad])


def test_tool_command_is_pinned_with_taskset() -> None:
    cmd = cp.tool_command("ours", Path("/t.json"), Path("/v/tbki"), Path("/p/python"), "0,1")
    assert cmd[:4] == ["taskset", "-c", "0,1", "/v/tbki"]
    assert cmd[-4:] == ["--format", "json", "--cache", "none"]
    peer = cp.tool_command("hta", Path("/t.json"), Path("/v/tbki"), Path("/p/python"), "2,3")
    assert peer[:5] == ["taskset", "-c", "2,3", "/p/python", "-c"]
    assert peer[5] == cp.HTA_CHILD and peer[6] == "/t.json"
    assert cp.tool_command("tbp", Path("/t.json"), Path("/v"), Path("/p"))[0] == "/p"


def test_results_json_round_trip_keeps_every_sample() -> None:
    real = _inp("gpt.json.gz", 149.4)
    hta = _runs((22.0, 1044 * MB), (21.1, 1040 * MB), (30.3, 1045 * MB))
    hta.partial, hta.cpus = "temporal: AssertionError", "2,3"
    results = {
        real.path: {
            "ours": _runs((3.3, 189 * MB), (3.5, 189 * MB), (3.4, 189 * MB)),
            "hta": hta,
            "tbp": cp.Runs(skipped="> 300 MB"),
        }
    }
    machine = {"date": "2026-12-01 01:08 UTC"}
    doc = json.loads(json.dumps(cp.results_to_json(machine, [real], results, 3, "cmd")))
    assert doc["inputs"][0]["key"] == f"gpt.json.gz:{int(149.4 * MB)}"
    back = cp.runs_from_json(doc, "RESULTS.json")[f"gpt.json.gz:{int(149.4 * MB)}"]
    assert back["hta"].samples == hta.samples
    assert back["hta"].median_wall_s() == 22.0
    assert back["hta"].partial == "temporal: AssertionError" and back["hta"].cpus == "2,3"
    assert back["tbp"].skipped == "> 300 MB" and not back["tbp"].ok
    assert back["ours"].previous == "RESULTS.json, run of 2026-12-01 01:08 UTC"
    with pytest.raises(ValueError, match="old.json: not a compare_peers result file"):
        cp.runs_from_json({"inputs": [{"tools": {}}]}, "old.json")


def test_merge_previous_fills_only_tools_not_rerun() -> None:
    gpt, other = _inp("gpt.json.gz", 149.4), _inp("x.json", 20)
    old = {
        cp.input_key(gpt): {
            "ours": _runs((9.0, 1)),
            "hta": _runs((22.0, 1044 * MB)),
            "tbp": _runs((18.7, 1020 * MB)),
        },
        "x.json:1": {"hta": _runs((5.0, 1))},  # other size: another input
    }
    for runs in old[cp.input_key(gpt)].values():
        runs.previous = "RESULTS.json, run of D"
    results = {gpt.path: {"ours": _runs((2.0, 189 * MB))}, other.path: {"ours": _runs((1.0, 1))}}
    taken = cp.merge_previous([gpt, other], results, old, ["ours"])
    assert taken == 2
    assert results[gpt.path]["ours"].median_wall_s() == 2.0  # the new run is kept
    assert results[gpt.path]["hta"].median_wall_s() == 22.0
    assert set(results[other.path]) == {"ours"}
    text = cp.render_results(_machine(), [gpt, other], results, 1, "cmd")
    assert "| 2.00 | 189 | 22.00 | 1044 | 18.70 | 1020 | 11.0 | 9.3 | 0.18 | 0.19 |" in text
    assert "taken from an earlier one (`--merge-json`): HTA from RESULTS.json, run of D" in text


def test_fewer_runs_than_asked_are_counted_in_the_cell() -> None:
    real = _inp("big.json", 76)
    unfinished = cp.Runs(cpus="2,3")  # listed, no run finished yet
    results = {real.path: {"ours": _runs((1.0, 1), (1.2, 1)), "hta": unfinished}}
    text = cp.render_results(_machine(), [real], results, 3, "cmd")
    assert "| 1.10 (2 of 3 runs) |" in text
    assert "| not finished |" in text


# ------------------------------------------------------------ log directories (issue 34)


def test_logdir_runs_are_the_folders_holding_traces(tmp_path: Path) -> None:
    """One run per folder that holds Kineto traces directly, its files listed; files
    that are not traces (no ``traceEvents``) and empty folders are no run."""
    trace = {"traceEvents": [kernel("k", 0, 10)]}
    write_trace(tmp_path / "a" / "w0.pt.trace.json", trace)
    write_trace(tmp_path / "a" / "w1.pt.trace.json", trace)
    write_trace(tmp_path / "b" / "c" / "rank0.json", trace)
    (tmp_path / "b" / "notes.json").write_text('{"x": 1}')
    (tmp_path / "empty").mkdir()
    runs = cp.logdir_runs(tmp_path)
    assert [name for name, _ in runs] == ["a", "b/c"]
    assert [len(files) for _, files in runs] == [2, 1]
    assert all(Path(f).is_absolute() for _, files in runs for f in files)


def test_logdir_table_and_targets() -> None:
    """Ratios from medians; 10x and 1/3 against each peer; the floor target only from
    100 MB of JSON; a failed peer has no verdict."""

    def runs(*samples: tuple[float, int, int]) -> cp.LogdirRuns:
        return cp.LogdirRuns(samples=list(samples))

    big = {
        "ours": runs(
            (2.0, 100 * MB, 150 * MB), (2.2, 100 * MB, 160 * MB), (1.8, 90 * MB, 140 * MB)
        ),
        "hta": runs((25.0, 900 * MB, 1000 * MB)),
        "tbp": runs((15.0, 500 * MB, 400 * MB)),
        "floor": runs((1.6, 50 * MB, 50 * MB)),
    }
    small = {
        "ours": runs((1.0, 50 * MB, 60 * MB)),
        "hta": cp.LogdirRuns(error="exit 1"),
        "tbp": runs((12.0, 300 * MB, 300 * MB)),
        "floor": runs((0.2, 20 * MB, 20 * MB)),
    }
    text = cp.render_logdir(
        {"date": "today"},
        [(Path("/x/mixed"), 8, 11, 400 * MB, big), (Path("/x/small"), 2, 2, 14 * MB, small)],
        3,
        "cmd",
    )
    assert "| mixed | 10x HTA | pass | 12.5x |" in text
    assert "| mixed | tree PSS <= 1/3 HTA | pass | 0.15 |" in text
    assert "| mixed | 10x torch-tb-profiler | **miss** | 7.5x |" in text
    assert "| mixed | tree PSS <= 1/3 torch-tb-profiler | **miss** | 0.38 |" in text
    assert "| mixed | <= 1.5x the decode floor | pass | 1.25x |" in text
    assert "| small | 10x torch-tb-profiler | pass | 12.0x |" in text
    assert "small | 10x HTA" not in text and "small | <= 1.5x" not in text
    assert "failed: exit 1" in text
