"""The view across ranks at scale: wall time, peak memory and JSON size for 64, 256 and
1,024 ranks, from per-rank summaries (no trace re-read; built by ``synth_ranks.py`` from
the real ``ddp_straggler`` / ``ddp_default`` ranks of ``../shared/traces/h200x2``).

Each size runs in a fresh child process so that its peak RSS (``ru_maxrss`` of the
child) is its own: the baseline (interpreter, imports, the per-rank input summaries) is
measured before the view, and the view's peak above it is reported too.

Target (issue 15 §4): 1,024 ranks in ≤ 5 s on a 2-core machine, bounded memory, JSON of
kilobytes to a few MB.

    python benchmarks/bench_ranks.py [--sizes 64 256 1024] [--balanced]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child(n: int, balanced: bool, profile: bool) -> None:
    """Build ``n`` ranks, run the view once; print one JSON line of measurements."""
    sys.path.insert(0, str(HERE))
    import synth_ranks

    from tb_kineto_insights.store.cache import encode_json
    from tb_kineto_insights.summary import summarize_run

    workers = synth_ranks.balanced_run(n) if balanced else synth_ranks.straggler_run(n, n // 3)
    before = _rss_mib()
    t0 = time.perf_counter()
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
    run = summarize_run(workers)
    wall = time.perf_counter() - t0
    if profile:
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    body = encode_json(run)
    s = run.straggler
    print(
        json.dumps(
            {
                "ranks": n,
                "wall_s": round(wall, 3),
                "rss_before_mib": round(before, 1),
                "peak_rss_mib": round(_rss_mib(), 1),
                "json_bytes": len(body),
                "matched": run.matched_count,
                "straggler": None if s is None else s.rank,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--balanced", action="store_true", help="ddp_default copies")
    parser.add_argument("--profile", action="store_true", help="cProfile the view")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.balanced, args.profile)
        return
    print("ranks  view s  RSS before MiB  peak RSS MiB  view MiB  JSON KiB  matched  straggler")
    for n in args.sizes:
        cmd = [sys.executable, __file__, "--child", str(n)]
        cmd += ["--balanced"] * args.balanced + ["--profile"] * args.profile
        out = subprocess.run(cmd, check=True, capture_output=not args.profile, text=True)
        if args.profile:
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{r['ranks']:5d}  {r['wall_s']:6.2f}  {r['rss_before_mib']:14.0f}  "
            f"{r['peak_rss_mib']:12.0f}  {r['peak_rss_mib'] - r['rss_before_mib']:8.0f}  "
            f"{r['json_bytes'] / 1024:8.0f}  {r['matched']:7d}  {r['straggler']}"
        )


if __name__ == "__main__":
    main()
