"""``attention_not_fused`` (``analysis/attention_unfused.py``): exact numbers on tiny
traces with shapes. Real traces: ``test_attention_unfused_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import cpu, kernel, write_trace
from test_efficiency import H200, _launch, _op

from tb_kineto_insights.summary import summarize_file

BF = "c10::BFloat16"
Q = [2, 4, 512, 64]
S = [2, 4, 512, 512]


def _attention(
    by_hand: bool, starts: tuple[float, float] = (1000.0, 2000.0), marker_us: float = 1000.0
) -> list[dict[str, Any]]:
    """Two steps (``ProfilerStep`` ranges of ``marker_us`` at ``starts``); in each,
    attention over q, k, v of ``Q`` (B 2, H 4, L 512, D 64): by hand, ``matmul`` (``bmm``
    100 µs) → ``div`` (50 µs) → ``softmax`` (``_softmax`` 100 µs) → ``matmul`` (``bmm``
    100 µs), the kernels back to back from 50 to 400 µs into the step; else one flash
    SDPA kernel of 40 µs."""
    events: list[dict[str, Any]] = []
    for n, t in enumerate(starts, 1):
        events.append(cpu(f"ProfilerStep#{n}", t, marker_us, cat="user_annotation"))
        c = 100 * n
        if not by_hand:
            events += [
                _op("aten::scaled_dot_product_attention", t + 10, 30, [Q, Q, Q], [BF, BF, BF]),
                _op("aten::_scaled_dot_product_flash_attention", t + 11, 28, [Q, Q, Q], [BF] * 3),
                _launch(t + 15, c),
                kernel("flash_fwd_kernel", t + 50, 40.0, corr=c),
            ]
            continue
        kt = [B := [8, 512, 64], [8, 64, 512]]
        events += [
            _op("aten::matmul", t + 10, 30, [Q, [2, 4, 64, 512]], [BF, BF]),
            _op("aten::bmm", t + 12, 20, kt, [BF, BF]),
            _launch(t + 15, c),
            kernel("gemm_qk", t + 50, 100.0, corr=c),
            _op("aten::div", t + 45, 10, [S, []], [BF, "double"]),
            _launch(t + 47, c + 1),
            kernel("div_kernel", t + 150, 50.0, corr=c + 1),
            _op("aten::softmax", t + 60, 10, [S, [], []], [BF, "Scalar", ""]),
            _op("aten::_softmax", t + 61, 8, [S, [], []], [BF, "Scalar", "Scalar"]),
            _launch(t + 62, c + 2),
            kernel("softmax_kernel", t + 200, 100.0, corr=c + 2),
            _op("aten::matmul", t + 75, 20, [S, Q], [BF, BF]),
            _op("aten::bmm", t + 76, 15, [[8, 512, 512], B], [BF, BF]),
            _launch(t + 78, c + 3),
            kernel("gemm_pv", t + 300, 100.0, corr=c + 3),
        ]
    return events


def test_attention_by_hand_is_named_with_its_cost(tmp_path: Path) -> None:
    """GPU-bound steps [1000, 1400) and [1400, 1800) (100 µs host markers): 350 µs of
    kernels a step in the four ops (the two ``bmm``, ``div``, ``_softmax``); SDPA computes
    2·N·(D + Dv) = 2·2 097 152·128 FLOPs a call (no backward), at 0.28 of the H200's 989
    TFLOP/s: 1.94 µs. The fix replayed: the four kernels keep 1.94/350 of their time; each
    then starts 35 µs (the launch latency, the median measured) after its launch at 15,
    47, 62, 78 µs into the step, so the last ends at 113 + 0.55 µs; step 1 ends there,
    step 2 starts at its marker (1400: the host's time between the steps stays) and ends
    at 1513.55: (1513.55 − 1000) / 2 = 256.78 µs a step for 400, a 35.8 % saving."""
    events = _attention(True, starts=(1000.0, 1400.0), marker_us=100.0)
    s = summarize_file(str(write_trace(tmp_path / "w.json", events, deviceProperties=[H200])))
    d = next(d for d in s.diagnoses if d.id == "attention_not_fused")
    ev = d.evidence
    assert ev["score_shape"] == S and ev["dtype"] == "bf16"
    assert (ev["head_dim"], ev["value_dim"], ev["calls_per_step"]) == (64, 64, 1.0)
    assert ev["backward"] is False and ev["kernel_us_per_step"] == 350.0
    flops = 2.0 * 2 * 4 * 512 * 512 * 128
    assert ev["sdpa_flops_per_step"] == flops
    fused = flops / (0.28 * 989e12) * 1e6
    assert ev["fused_estimate_us_per_step"] == pytest.approx(fused, abs=0.05)
    assert s.steps is not None and s.steps.mean_step_us == 400.0
    last_end = 113.0 + 100.0 * fused / 350.0
    predicted = (400.0 + last_end) / 2.0  # (1400 + last_end − 1000) / 2
    assert d.prediction is not None and d.prediction.method == "replay"
    assert d.prediction.predicted_step_us == pytest.approx(predicted, abs=0.01)
    assert d.impact_fraction == pytest.approx(1.0 - predicted / 400.0, abs=1e-4)
    assert d.severity == "high"
    assert ev["score_bytes"] == 2 * 2 * 4 * 512 * 512
    assert "[2, 4, 512, 512] scores" in d.title
    assert "scaled_dot_product_attention" in d.recommendation


def test_attention_by_hand_off_the_critical_path_is_quiet(tmp_path: Path) -> None:
    """The same attention in 1000 µs host-bound steps (the host's ``ProfilerStep`` ends
    600 µs after the last kernel): faster kernels would not shorten the step, the fix
    replayed saves nothing: no verdict (the ops are still found)."""
    s = summarize_file(
        str(write_trace(tmp_path / "w.json", _attention(True), deviceProperties=[H200]))
    )
    assert "attention_not_fused" not in {d.id for d in s.diagnoses}


def test_sdpa_and_a_vocabulary_softmax_are_quiet(tmp_path: Path) -> None:
    """SDPA's fused kernel: nothing; nor a softmax over logits ``[2, 512, 50257]``
    (no ``p @ v`` consumes it)."""
    sdpa = write_trace(tmp_path / "a.json", _attention(False), deviceProperties=[H200])
    assert "attention_not_fused" not in {d.id for d in summarize_file(str(sdpa)).diagnoses}
    logits = [2, 512, 50257]
    events = [
        e for e in _attention(True) if e.get("name") not in ("aten::softmax", "aten::_softmax")
    ]
    for n in (1, 2):
        events.append(
            _op("aten::softmax", 1000.0 * n + 60, 10, [logits, [], []], [BF, "Scalar", ""])
        )
    vocab = write_trace(tmp_path / "b.json", events, deviceProperties=[H200])
    assert "attention_not_fused" not in {d.id for d in summarize_file(str(vocab)).diagnoses}
