"""Communication rows of the diff: collectives per step, bytes per collective, DDP
buckets, bandwidth with its basis and unit, waited vs transfer per step.
Real traces: ``test_diff_comm_real.py``."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.compare.diff_comm import communication_rows
from tb_kineto_insights.schema import RunView, Summary
from tb_kineto_insights.schema.communication import CommunicationPanel
from tb_kineto_insights.summary import summarize_file

MIB = 2**20


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Summary:
    """A real summary of a tiny trace: 5 steps (numbers 1..5) of 200 µs, no collectives."""
    events: list[dict[str, Any]] = []
    for s in range(5):
        t0 = 1000.0 + s * 200
        events.append(cpu(f"ProfilerStep#{s + 1}", t0, 200, cat="user_annotation"))
        events.append(kernel("A", t0 + 10, 150, corr=s + 1))
    path = write_trace(tmp_path_factory.mktemp("plain") / "w.1.pt.trace.json", events)
    return summarize_file(str(path))


def _with_comm(
    plain: Summary,
    sizes_per_step: list[int],
    *,
    busbw_gbps: float | None = None,
    basis: str | None = None,
) -> Summary:
    """``plain`` with a hand-built ``communication`` panel: the same AllReduce sizes in
    each of its 5 steps (DDP buckets); ``basis`` None: a bandwidth that states no basis
    (``""``, read as kernel time)."""
    seq = []
    for step in range(1, 6):
        for b in sizes_per_step:
            t = 1000.0 + step * 200 + len(seq)
            seq.append(
                {"pg": "0", "seq": len(seq), "kind": "all_reduce", "bytes": b, "step": step}
                | {"start_us": t, "start_ns": int(t * 1000), "dur_us": 1.0}
                | {"end_ns": int(t * 1000) + 1000, "size_bytes": b, "group_size": None}
                | {"exposed_us": 0.0, "exposed_ns": None}
            )
    sizes = sorted(sizes_per_step * 5)
    kind: dict[str, Any] = {
        "kind": "all_reduce",
        "count": len(seq),
        "calls_per_step": None,
        "kernel_count": len(seq),
        "bytes": sum(sizes),
        "out_bytes": None,
        "sized_count": len(seq),
        "median_bytes": None,
        "time_us": float(len(seq)),
        "mean_us": 1.0,
        "wait_estimate_us_total": 0.0,
        "exposed_us_per_step": None,
        "algbw_gbps": None,
        "busbw_gbps": busbw_gbps,
        "busbw_basis": basis or "",
        "kernel_time_algbw_gbps": None,
        "kernel_time_busbw_gbps": None,
        "group_sizes": [],
        "kind_from": {},
    }
    comm = as_json(plain.communication) | {
        "has_collectives": True,
        "collective_count": len(seq),
        "kinds": [kind],
        "sequence": seq,
        "sequence_truncated": False,
        "ddp_bucket_bytes": {
            "count": len(seq),
            "total_bytes": sum(sizes),
            "median_bytes": float(sizes[len(sizes) // 2]),
            "min_bytes": sizes[0],
            "max_bytes": sizes[-1],
            "histogram": {"edges_bytes": [], "counts": []},
            "distinct_count": len(set(sizes)),
            "sizes": [{"bytes": b, "count": 5 * sizes_per_step.count(b)} for b in set(sizes)],
        },
    }
    return msgspec.structs.replace(plain, communication=msgspec.convert(comm, CommunicationPanel))


_NO_STATS = {"count": 0, "mean_us": None, "median_us": None, "p90_us": None, "max_us": None}


def _run_view(kinds: list[dict[str, Any]], ranks: list[dict[str, Any]]) -> RunView:
    """A run view with these ``kinds`` (``kind``, ``busbw_gbps``, ``busbw_basis``) and
    ``ranks`` rows (the keys :func:`_ranks` gives), the rest empty."""
    rank_row = {
        "worker": "w",
        "step_count": 5,
        "mean_step_us": 200.0,
        "mean_comm_us": 0.0,
        "mean_exposed_us": 0.0,
        "exposed_fraction": None,
        "collective_count": 0,
        "matched_count": 0,
        "last_count": 0,
        "last_fraction": None,
        "wait_us_total": 0.0,
        "wait_us_per_collective": None,
        "lateness_us_per_collective": None,
        "wait_us_per_step": None,
        "transfer_us_per_step": None,
        "exposed_wait_us_per_step": None,
        "exposed_transfer_us_per_step": None,
        "delay_caused_us_per_step": None,
    }
    kind_row = {
        "matched_count": 0,
        "calls_per_step": None,
        "median_bytes": None,
        "total_bytes": 0,
        "median_transfer_us": 0.0,
        "transfer_us_total": 0.0,
        "algbw_gbps": None,
        "group_sizes": None,
    }
    view = {
        "worker_count": len(ranks),
        "world_size": len(ranks),
        "rank_source": "distributed_info",
        "match_key": "seq",
        "ranks": [rank_row | r for r in ranks],
        "process_groups": [],
        "matched_count": 0,
        "unmatched_count": 0,
        "kind_mismatches": 0,
        "matched_step_count": 5,
        "skew_us": _NO_STATS | {"total_us": 0.0},
        "transfer_us": _NO_STATS | {"total_us": 0.0},
        "kinds": [kind_row | k for k in kinds],
        "largest_skews": [],
        "steps": [],
        "straggler": None,
        "straggler_test": None,
        "notes": [],
        "diagnoses": [],
        "superseded_span_diagnoses": [],
    }
    return msgspec.convert(view, RunView)


def _ranks(*rows: tuple[float, float, float, float]) -> list[dict[str, Any]]:
    keys = (
        "wait_us_per_step",
        "transfer_us_per_step",
        "exposed_wait_us_per_step",
        "exposed_transfer_us_per_step",
    )
    return [
        {"rank": i, "step_count": 5, **dict(zip(keys, r, strict=True))} for i, r in enumerate(rows)
    ]


def _rows(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["key"]: r for r in rows}


def test_rows_from_run_views(plain: Summary) -> None:
    """Two ranks each side; 3 buckets per step (32, 32, 16 MiB) → 1 bucket of 96 MiB;
    matched-transfer busbw 240 → 266.4 GB/s (+11 %); waited 4 ms/0 → 0.5 ms/0."""
    base_s = _with_comm(plain, [32 * MIB, 32 * MIB, 16 * MIB])
    exp_s = _with_comm(plain, [96 * MIB])
    base = [("r0/1", base_s), ("r1/1", base_s)]
    exp = [("r0/1", exp_s), ("r1/1", exp_s)]
    bw = {"kind": "all_reduce", "busbw_basis": "matched_transfer"}
    base_run = _run_view(
        [{**bw, "busbw_gbps": 240.0}],
        _ranks((4000.0, 1000.0, 3000.0, 500.0), (0.0, 1000.0, 0.0, 500.0)),
    )
    exp_run = _run_view(
        [{**bw, "busbw_gbps": 266.4}],
        _ranks((500.0, 850.0, 300.0, 400.0), (0.0, 850.0, 0.0, 400.0)),
    )
    rows, parts = communication_rows(base, exp, base_run, exp_run, step_floor_us=1.0)
    section = as_json(parts)
    r = _rows(rows)
    calls = r["communication.calls_per_step.all_reduce"]
    assert (calls["base"], calls["exp"], calls["base_n"], calls["exp_n"]) == (3.0, 1.0, 10, 10)
    assert (calls["unit"], calls["verdict"], calls["label"]) == (
        "count",
        "changed",
        "all_reduce calls /step",
    )
    size = r["communication.bytes_per_collective.all_reduce"]
    assert (size["base"], size["exp"], size["verdict"]) == (32 * MIB, 96 * MIB, "changed")
    assert "per collective" in size["label"]
    bucket = r["communication.ddp_bucket_median_bytes"]
    assert (bucket["base"], bucket["exp"]) == (32 * MIB, 96 * MIB)
    assert section["ddp_buckets"]["base"]["count_per_step"] == 3.0
    assert section["ddp_buckets"]["exp"]["sizes"] == [{"bytes": 96 * MIB, "count": 5}]
    busbw = r["communication.busbw.all_reduce_gbps"]
    assert (busbw["unit"], busbw["base"], busbw["exp"]) == ("GB/s", 240.0, 266.4)
    assert busbw["change_fraction"] == pytest.approx(0.11)
    assert busbw["verdict"] == "improved"
    # one value per side: no noise test, so no standard error to show
    assert busbw["stderr"] is None and calls["stderr"] == 0.0
    assert busbw["label"] == "busbw all_reduce (matched transfer)"
    assert busbw["basis"] == {"base": "matched_transfer", "exp": "matched_transfer"}
    expected = {
        "communication.waited_us_per_step": (2000.0, 250.0),
        "communication.transfer_us_per_step": (1000.0, 850.0),
        "communication.exposed_waited_us_per_step": (1500.0, 150.0),
        "communication.exposed_transfer_us_per_step": (500.0, 400.0),
    }
    for key, (b, e) in expected.items():
        assert (r[key]["base"], r[key]["exp"], r[key]["verdict"]) == (b, e, "improved"), key
        assert r[key]["unit"] == "µs" and "/step" in r[key]["label"]
    assert section["rank_rows_from"] == "run_view"
    assert r["communication.waited_us_per_step"]["by_rank"] == {
        "base": {"0": 4000.0, "1": 0.0},
        "exp": {"0": 500.0, "1": 0.0},
    }


def test_bandwidth_basis_decides_the_verdict(plain: Summary) -> None:
    """A lone rank's least-wait estimate is judged; the old kernel-time bandwidth (no
    basis: it counts the wait) and a comparison across bases are not."""
    sizes = [32 * MIB]

    def busbw(b: float, e: float, b_basis: str | None, e_basis: str | None) -> dict[str, Any]:
        base = [("r0/1", _with_comm(plain, sizes, busbw_gbps=b, basis=b_basis))]
        exp = [("r0/1", _with_comm(plain, sizes, busbw_gbps=e, basis=e_basis))]
        rows, _ = communication_rows(base, exp, None, None, step_floor_us=1.0)
        return _rows(rows)["communication.busbw.all_reduce_gbps"]

    estimate = busbw(200.0, 150.0, "least_wait_estimate", "least_wait_estimate")
    assert (estimate["verdict"], estimate["label"]) == (
        "regressed",
        "busbw all_reduce (least wait estimate)",
    )
    legacy = busbw(59.4, 200.4, None, None)
    assert legacy["verdict"] == "not judged" and "wait" in legacy["note"]
    assert legacy["label"] == "busbw all_reduce (kernel time)"
    assert busbw(59.4, 59.4, None, None)["verdict"] == "unchanged"
    mixed = busbw(200.0, 100.0, "least_wait_estimate", None)
    assert mixed["verdict"] == "not judged" and "bases" in mixed["note"]


def test_waited_from_wait_total_and_lone_rank(plain: Summary) -> None:
    """A run view without a waited /step (no matched steps: ``wait_us_per_step`` None)
    gives it as ``wait_us_total`` / ``step_count``; a side of one rank gives no
    waited/transfer rows and says why."""
    s = _with_comm(plain, [32 * MIB])
    side = [("r0/1", s), ("r1/1", s)]
    old = _run_view([], [{"rank": 0, "wait_us_total": 1000.0}, {"rank": 1}])
    new = _run_view([], [{"rank": 0, "wait_us_total": 3000.0}, {"rank": 1}])
    rows, section = communication_rows(side, side, old, new, step_floor_us=1.0)
    r = _rows(rows)
    waited = r["communication.waited_us_per_step"]
    assert (waited["base"], waited["exp"], waited["verdict"]) == (100.0, 300.0, "regressed")
    assert "communication.transfer_us_per_step" not in r
    rows, parts = communication_rows(side[:1], side, None, new, step_floor_us=1.0)
    assert "communication.waited_us_per_step" not in _rows(rows)
    assert parts["rank_rows_from"].startswith("a side is one rank")
