#!/usr/bin/env bash
# Peer benchmark on a quiet machine in one go (issue 14): install ours and the peers from
# carried wheels into two separate --target directories (ours never sees the peers'
# packages, nor they ours), make the scaled traces there, and run compare_peers.py with
# every tool pinned to its own 2 CPUs (taskset -c).
#
#   benchmarks/device_peers.sh [--tools "ours hta tbp"] [--repeat 3] [--out DIR]
#                              [--merge-json FILE] [--sequential] [--limit-s S]
#                              [--no-scaled]
#
# ROOT = the folder above this script. It must hold:
#   ROOT/tb_kineto_insights/      our package source
#   ROOT/benchmarks/              this folder (compare_peers.py, scale_trace.py)
#   ROOT/whl_ours/*.whl           our dependencies missing on the machine (msgspec, watchdog)
#   ROOT/whl_peers/*.whl          HolisticTraceAnalysis 0.5.0, torch-tb-profiler 0.4.3, plotly,
#                                 pydot (only when a peer is in --tools)
#   ROOT/data/**.json.gz          the real inputs (the GPT trace of scripts/record_gpt_trace.py,
#                                 the largest shared traces)
#   ROOT/sample_logs/transformer_eager/   the source of the scaled traces (also an input)
# The machine needs python3 (3.12) with numpy, pandas, tensorboard, fsspec, xxhash, and
# nothing else. Results: DIR/RESULTS.md, DIR/RESULTS.json (every sample), DIR/log.txt;
# DIR defaults to $OUT when set, else ROOT/benchmarks.
#
# --tools ours: re-measure ours only (about 1-2 min) and take HTA's and
# torch-tb-profiler's numbers from --merge-json (default ROOT/benchmarks/RESULTS.json,
# the result file of the last full run, matched per input by file name and JSON size).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS="ours hta tbp"
REPEAT=3
DEST=${OUT:-$ROOT/benchmarks}
MERGE=""
PARALLEL=1
LIMIT=""
SCALED=1
while [ $# -gt 0 ]; do
  case $1 in
    --tools) TOOLS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --out) DEST=$2; shift 2 ;;
    --merge-json) MERGE=$2; shift 2 ;;
    --sequential) PARALLEL=0; shift ;;
    --limit-s) LIMIT=$2; shift 2 ;;
    --no-scaled) SCALED=0; shift ;;  # the real inputs only (no scaled traces, no profile)  # Ctrl-C compare_peers after S s: it writes what it has
    *) echo "device_peers.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ "$TOOLS" != "ours hta tbp" ] && [ -z "$MERGE" ]; then
  MERGE=$ROOT/benchmarks/RESULTS.json
fi
mkdir -p "$DEST"
# compare_peers writes RESULTS.json next to RESULTS.md: keep the file to merge from apart
if [ -n "$MERGE" ]; then
  cp "$MERGE" /tmp/bench_previous.json
  MERGE=/tmp/bench_previous.json
fi
exec > >(tee "$DEST/log.txt") 2>&1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
T=/tmp/bench
rm -rf "$T" && mkdir -p "$T/ours/bin" "$T/peers/bin" "$T/data" "$T/shim"
PY=$(command -v python3)
echo "== machine"; date -u; nproc; grep -m1 'model name' /proc/cpuinfo; cat /proc/loadavg
cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null || true
"$PY" --version

echo "== ours into $T/ours"
# Byte code compiled at install, as pip does for a user (PYTHONDONTWRITEBYTECODE=1 below
# stops only new .pyc files): without it every run compiled every module of each tool
# again (about 0.3 s of CPU for ours on a 2-core machine), a cost no installed tool pays.
"$PY" -m pip install -q --no-index --no-deps --no-cache-dir --target "$T/ours" \
  "$ROOT"/whl_ours/*.whl
cp -r "$ROOT/tb_kineto_insights" "$T/ours/"
"$PY" -m compileall -q "$T/ours/tb_kineto_insights"
# The same guard as pip's console script: the reader's decode workers start by forkserver,
# which imports the main script in each worker; unguarded, each of them ran the whole
# report again (the run of 2026-12-01 04:00 measured that: GPT 3.9 s instead of 2.4 s).
printf 'import sys\nfrom tb_kineto_insights.cli.main import main\nif __name__ == "__main__":\n    sys.exit(main())\n' \
  >"$T/ours/bin/tb_kineto_insights_main.py"
printf '#!/bin/sh\nPYTHONPATH=%s exec %s %s "$@"\n' "$T/ours" "$PY" \
  "$T/ours/bin/tb_kineto_insights_main.py" >"$T/ours/bin/tb-kineto-insights"
printf '#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' "$T/ours" "$PY" >"$T/ours/bin/python"
chmod +x "$T/ours/bin/"*
"$T/ours/bin/tb-kineto-insights" --version

if [ "$TOOLS" != "ours" ]; then
  echo "== peers into $T/peers"
  "$PY" -m pip install -q --no-index --no-deps --no-cache-dir --target "$T/peers" \
    "$ROOT"/whl_peers/*.whl
  printf '#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' "$T/peers" "$PY" >"$T/peers/bin/python"
  chmod +x "$T/peers/bin/python"
  "$T/peers/bin/python" -c 'import hta.trace_analysis, torch_tb_profiler.profiler.loader; print("peers import")'
fi

if ! command -v taskset >/dev/null; then  # same effect as util-linux taskset -c LIST CMD...
  cat >"$T/shim/taskset" <<EOF
#!$PY
import os, sys
cpus = set()
for part in sys.argv[2].split(","):
    a, _, b = part.partition("-")
    cpus.update(range(int(a), int(b or a) + 1))
os.sched_setaffinity(0, cpus)
os.execvp(sys.argv[3], sys.argv[3:])
EOF
  chmod +x "$T/shim/taskset"
  export PATH=$T/shim:$PATH
  echo "no taskset here: using a sched_setaffinity shim"
fi

SRC=$(ls "$ROOT"/sample_logs/transformer_eager/*.json.gz | head -1)
if [ "$SCALED" = 1 ]; then
  STEM=$(basename "$SRC"); STEM=${STEM%%.*}
  echo "== scaled traces from $SRC (in parallel, on CPUs 10-15)"
  mkdir -p "$T/data/scaled"
  PIDS=()
  for mib in 100 250 500 1000; do
    (taskset -c 10-15 "$T/ours/bin/python" "$ROOT/benchmarks/scale_trace.py" "$SRC" \
       -o "$T/data/scaled/${STEM}_x${mib}mib.part.gz" --target-mb "$mib" --level 1 &&
     mv "$T/data/scaled/${STEM}_x${mib}mib.part.gz" "$T/data/scaled/${STEM}_x${mib}mib.json.gz") &
    PIDS+=($!)
  done
  wait "${PIDS[@]}"  # not a bare wait: that would also wait for the tee above, forever
  date -u
  ls -la "$T/data/scaled"
fi
echo "== compare_peers"; date -u
ARGS=(--repeat "$REPEAT" --inputs "$ROOT/data" "$ROOT/sample_logs/transformer_eager"
      --data-dir "$T/data" --scale-src "$SRC" --scale-script "$ROOT/benchmarks/scale_trace.py"
      --peer-max-mb 300 --timeout-s 400 --ours "$T/ours/bin/tb-kineto-insights"
      --bench-python "$T/peers/bin/python" --out "$DEST/RESULTS.md" --tools $TOOLS)
# Each tool on its own 2 CPUs; HTA and torch-tb-profiler get three workers each (three
# inputs at a time, each on its own pair) so that the whole run fits in about 4 minutes.
CPUS=()
for t in $TOOLS; do
  case $t in
    ours) CPUS+=(ours=0,1) ;;
    hta) CPUS+=(hta=2,3 hta=4,5 hta=6,7) ;;
    tbp) CPUS+=(tbp=8,9 tbp=10,11 tbp=12,13) ;;
  esac
done
[ "$PARALLEL" = 1 ] && ARGS+=(--parallel --cpus "${CPUS[@]}") || ARGS+=(--cpus ours=0,1 hta=0,1 tbp=0,1)
[ -n "$MERGE" ] && ARGS+=(--merge-json "$MERGE")
[ "$SCALED" = 0 ] && ARGS+=(--no-scaled --no-profile)
cd "$ROOT"
if [ -n "$LIMIT" ]; then
  timeout -s INT "$LIMIT" "$PY" benchmarks/compare_peers.py "${ARGS[@]}" || echo "compare_peers: exit $?"
else
  "$PY" benchmarks/compare_peers.py "${ARGS[@]}"
fi
echo "== done"; date -u; cat /proc/loadavg
