"""Every before/after pair of real runs: the step the before run's fix predicts against
the steady step the after run measures.

    python benchmarks/what_if_pairs.py [--shared ../shared] [--json out.json]

For each pair (the same job, recorded before and after one fix): the diagnoses of the
before run whose fix the after run applied (``fixes``), their predicted step (one fix:
its ``prediction``; several: the changes replayed together, as the What-if section's
``combined``), the after run's measured mean steady-state step, and the error
(predicted / measured - 1). A pair whose before run raises none of its fixes is listed
as such (the rule did not fire: nothing to check). Results go to
``benchmarks/RESULTS.md`` by hand; ``tests/test_what_if_real.py`` holds the shared pairs
to their figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("KINETO_INSIGHTS_READ_WORKERS", "1")


@dataclass(frozen=True)
class Pair:
    """A before/after pair: run folders (``sample_logs/x`` or ``shared/...``), the
    diagnosis ids whose fixes the after run applied, and what the fix was."""

    before: str
    after: str
    fixes: tuple[str, ...]
    what: str


PAIRS: tuple[Pair, ...] = (
    Pair(
        "sample_logs/dataloader_workers0",
        "sample_logs/dataloader_workers4",
        ("gpu_idle_dataloader",),
        "DataLoader 0 → 4 workers",
    ),
    Pair(
        "sample_logs/optimizer_per_param",
        "sample_logs/optimizer_fused",
        ("optimizer_step_bound",),
        "Adam per parameter → fused",
    ),
    Pair(
        "sample_logs/optimizer_per_param",
        "sample_logs/optimizer_foreach",
        ("optimizer_step_bound",),
        "Adam per parameter → foreach",
    ),
    Pair(
        "sample_logs/transformer_eager",
        "sample_logs/transformer_compile",
        ("small_kernel_flood", "optimizer_step_bound"),
        "eager → torch.compile + fused AdamW",
    ),
    Pair(
        "sample_logs/compiled_eager",
        "sample_logs/compiled_reduce_overhead",
        ("small_kernel_flood",),
        "eager → torch.compile(mode='reduce-overhead')",
    ),
    Pair(
        "sample_logs/compiled_default",
        "sample_logs/compiled_reduce_overhead",
        ("small_kernel_flood",),
        "compile default → reduce-overhead (CUDA graphs)",
    ),
    Pair(
        "sample_logs/eff_mlp_fp32",
        "sample_logs/eff_mlp_bf16",
        ("matmul_without_tensor_cores",),
        "fp32 MLP → bf16 autocast",
    ),
    Pair(
        "sample_logs/backlog_mlp_fp32",
        "sample_logs/backlog_mlp_bf16",
        ("matmul_without_tensor_cores",),
        "fp32 MLP (host ahead) → bf16 autocast",
    ),
    Pair(
        "sample_logs/hf_gpt2_fp32",
        "sample_logs/hf_gpt2_bf16",
        ("matmul_without_tensor_cores",),
        "transformers GPT-2 fp32 → bf16 autocast",
    ),
    Pair(
        "sample_logs/eff_ddp_fp32",
        "sample_logs/eff_ddp_bf16",
        ("matmul_without_tensor_cores",),
        "DDP MLP fp32 → bf16 autocast",
    ),
    Pair(
        "sample_logs/resnet50_fp32_nchw",
        "sample_logs/resnet50_bf16_cl",
        ("matmul_without_tensor_cores", "low_kernel_efficiency"),
        "ResNet-50 fp32 NCHW → bf16 channels_last",
    ),
    Pair(
        "sample_logs/eff_resnet_fp32_nchw",
        "sample_logs/eff_resnet_fp32_cl",
        ("low_kernel_efficiency",),
        "ResNet-like fp32 NCHW → channels_last",
    ),
    Pair(
        "sample_logs/eff_cnn_fp32_nchw",
        "sample_logs/eff_cnn_fp32_cl",
        ("low_kernel_efficiency",),
        "small CNN fp32 NCHW → channels_last",
    ),
    Pair(
        "sample_logs/eff_gemm_odd",
        "sample_logs/eff_gemm_aligned",
        ("low_kernel_efficiency",),
        "bf16 4095³ → 4096³ GEMM",
    ),
    Pair(
        "sample_logs/eff_sdpa_efficient_bf16",
        "sample_logs/eff_sdpa_flash_bf16",
        ("low_kernel_efficiency",),
        "SDPA memory-efficient → flash backend",
    ),
    Pair(
        "sample_logs/allocator_no_caching",
        "sample_logs/allocator_caching",
        ("allocator_churn",),
        "PYTORCH_NO_CUDA_MEMORY_CACHING=1 → caching allocator",
    ),
    Pair(
        "sample_logs/allocator_empty_cache",
        "sample_logs/allocator_cached",
        ("allocator_churn",),
        "empty_cache() every step → removed",
    ),
    Pair(
        "sample_logs/empty_cache_every_step",
        "sample_logs/empty_cache_removed",
        ("allocator_churn",),
        "empty_cache() every step → removed (GPU-bound)",
    ),
    Pair(
        "sample_logs/cudnn_autotune_varying",
        "sample_logs/cudnn_autotune_fixed",
        ("cudnn_autotune_in_step",),
        "cuDNN benchmark with varying shapes → fixed shape",
    ),
    Pair(
        "sample_logs/sync_isnan_check",
        "sample_logs/sync_isnan_removed",
        ("gpu_idle_host_sync",),
        "12 isnan().any() syncs per step → removed",
    ),
    Pair(
        "sample_logs/attention_by_hand",
        "sample_logs/attention_sdpa",
        ("attention_not_fused",),
        "attention by hand → SDPA",
    ),
    Pair(
        "sample_logs/recompile_every_step",
        "sample_logs/recompile_mark_dynamic",
        ("compile_in_step",),
        "recompiling every step → mark_dynamic",
    ),
    Pair(
        "sample_logs/ddp2_straggler",
        "sample_logs/ddp2_default",
        ("communication_straggler",),
        "2 ranks: 20 ms straggler → balanced",
    ),
    Pair(
        "shared/traces/h200x2/ddp_straggler",
        "shared/traces/h200x2/ddp_default",
        ("communication_straggler",),
        "2 × H200: straggler → balanced",
    ),
    Pair(
        "shared/traces/h200x2/ddp_default",
        "shared/traces/h200x2/ddp_tuned",
        ("exposed_communication",),
        "2 × H200: DDP default buckets → tuned",
    ),
)


def _path(run: str, shared: Path) -> Path:
    return shared / run.removeprefix("shared/") if run.startswith("shared/") else REPO / run


def evaluate(pair: Pair, shared: Path) -> dict[str, object]:
    """The pair's prediction and measurement (module docstring)."""
    from tb_kineto_insights.service.reports import build_report

    before = build_report(str(_path(pair.before, shared)))
    after = build_report(str(_path(pair.after, shared)))
    return compare(pair, before, after)


def compare(pair: Pair, before: object, after: object) -> dict[str, object]:
    """Predicted (from ``before``'s report) against measured (``after``'s)."""
    import msgspec

    b = msgspec.to_builtins(before)
    a = msgspec.to_builtins(after)
    predicted, measured, found = _predicted(b, pair.fixes), _measured(a), []
    for run in b["runs"]:
        for worker in run["workers"]:
            for span in worker["spans"]:
                for d in span.get("summary", {}).get("diagnoses", []):
                    if d["id"] in pair.fixes:
                        found.append(d["id"])
        for d in (run.get("run_summary") or {}).get("diagnoses", []):
            if d["id"] in pair.fixes:
                found.append(d["id"])
    out: dict[str, object] = {
        "pair": f"{pair.before} → {pair.after}",
        "what": pair.what,
        "fixes": list(pair.fixes),
        "raised": sorted(set(found)),
        "before_us": _measured(b),
        "predicted_us": predicted,
        "measured_us": measured,
    }
    if predicted and measured:
        out["error"] = predicted / measured - 1.0
    return out


def _spans(doc: dict) -> list[dict]:
    return [
        span["summary"]
        for run in doc["runs"]
        for worker in run["workers"]
        for span in worker["spans"]
        if "summary" in span
    ]


def _measured(doc: dict) -> float | None:
    """The mean steady step of the run (the slowest rank's: the job's pace)."""
    steps = [s["steps"]["mean_step_us"] for s in _spans(doc) if s["steps"]["mean_step_us"]]
    return max(steps) if steps else None


def _predicted(doc: dict, fixes: tuple[str, ...]) -> float | None:
    """The before run's predicted step with ``fixes`` (the slowest rank's)."""
    best: float | None = None
    for run in doc["runs"]:
        for d in (run.get("run_summary") or {}).get("diagnoses", []):
            p = d.get("prediction")
            if d["id"] in fixes and p:
                best = max(best or 0.0, p["predicted_step_us"])
    if best is not None:
        return best
    out: list[float] = []
    for s in _spans(doc):
        w = s.get("what_if") or {}
        mine = [f for f in w.get("fixes", []) if f["diagnosis"] in fixes]
        combined = w.get("combined")
        if (
            combined
            and set(combined["diagnoses"]) == {f["diagnosis"] for f in mine}
            and len(mine) > 1
        ):
            out.append(combined["predicted_step_us"])
        elif mine:
            out.append(min(f["predicted_step_us"] for f in mine))
    return max(out) if out else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    print(f"{'pair':62s} {'before':>9s} {'predicted':>10s} {'measured':>9s} {'error':>7s}  raised")
    for pair in PAIRS:
        if pair.before.startswith("shared/") and not args.shared.is_dir():
            continue
        r = evaluate(pair, args.shared)
        rows.append(r)

        def ms(x: object) -> str:
            return f"{x / 1000:.2f}" if isinstance(x, float) else "-"

        err = f"{100 * r['error']:+.1f}%" if "error" in r else "-"
        print(
            f"{pair.what[:62]:62s} {ms(r['before_us']):>9s} {ms(r['predicted_us']):>10s} "
            f"{ms(r['measured_us']):>9s} {err:>7s}  {','.join(r['raised']) or 'none'}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
