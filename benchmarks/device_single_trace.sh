#!/usr/bin/env bash
# One trace on 1, 2 and every CPU of an idle machine (issue 46), in one go: the GPT trace
# (benchmarks/traces/gpt_h100.pt.trace.json.gz) and a 1 GB trace scaled from it, each
# mode of bench_single_trace.py pinned with taskset; HTA's load of the GPT trace on 2 CPUs
# when its wheels are given. Run from the repository root, on a machine with python3 and
# numpy and no network:
#
#   benchmarks/device_single_trace.sh WHEELS [ROUNDS]
#
# WHEELS: a folder of wheels for that python: msgspec, fsspec, xxhash, zlib-ng, google-re2
# (installed into /tmp/tki_deps); WHEELS/hta, optional: HolisticTraceAnalysis 0.5.0,
# plotly, narwhals, pydot, pyparsing (into /tmp/tki_hta, seen only by HTA's runs). ROUNDS
# (default 3) for the GPT trace, 2 for the 1 GB one. Results on stdout (and $OUT/log.txt
# when OUT is set): what the read planned for each CPU set, then one Markdown table per
# run (wall, CPU, peak RSS of the largest process, against serial and a bare gzip read).
set -uo pipefail
WHEELS=${1:?usage: device_single_trace.sh WHEELS [ROUNDS]}
ROUNDS=${2:-3}
if [ -n "${OUT:-}" ]; then exec > >(tee "$OUT/log.txt") 2>&1; fi
export PYTHONUNBUFFERED=1
PY=$(command -v python3)
ALL=$(($(nproc) - 1))
echo "== machine"; date -u; nproc; grep -m1 'model name' /proc/cpuinfo; cat /proc/loadavg
"$PY" --version

echo "== dependencies"
"$PY" -m pip install -q --no-index --no-deps --target /tmp/tki_deps "$WHEELS"/*.whl || exit 1
echo /tmp/tki_deps >"$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/tki_deps.pth"
HTA_MODE=""
if compgen -G "$WHEELS/hta/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --target /tmp/tki_hta "$WHEELS"/hta/*.whl || exit 1
  printf '#!/bin/sh\nPYTHONPATH=/tmp/tki_hta exec %s "$@"\n' "$PY" >/tmp/tki_hta/python
  chmod +x /tmp/tki_hta/python
  if /tmp/tki_hta/python -c "import hta.trace_analysis"; then HTA_MODE=",hta"; fi
fi

GPT=benchmarks/traces/gpt_h100.pt.trace.json.gz
BIG=/tmp/gpt_1gb.pt.trace.json.gz
echo "== the 1 GB trace"
time "$PY" benchmarks/scale_trace.py "$GPT" -o "$BIG" --target-mb 1000 || exit 1
ls -l "$GPT" "$BIG"

echo "== what the read plans"
for cpus in 0 0-1 "0-$ALL"; do
  for f in "$GPT" "$BIG"; do
    if [ "$cpus" = 0 ] && [ "$f" = "$BIG" ]; then continue; fi  # one CPU: one process
    echo "-- CPUs $cpus, $(basename "$f")"
    taskset -c "$cpus" "$PY" -m tb_kineto_insights.cli report "$f" --format json \
      --cache none --verbose 2>&1 >/dev/null | grep -m1 'read:'
  done
done

echo "== the GPT trace"
for cpus in 0 0-1 "0-$ALL"; do
  modes=start,gzip,floor,serial,default
  if [ "$cpus" = 0-1 ]; then modes=$modes$HTA_MODE; fi
  echo "-- CPUs $cpus"; cat /proc/loadavg
  "$PY" benchmarks/bench_single_trace.py "$GPT" --rounds "$ROUNDS" --cpus "$cpus" \
    --modes "$modes" --hta-python /tmp/tki_hta/python
done

echo "== the 1 GB trace"
for cpus in 0-1 "0-$ALL" 0; do
  echo "-- CPUs $cpus"; cat /proc/loadavg
  "$PY" benchmarks/bench_single_trace.py "$BIG" --rounds 2 --cpus "$cpus" \
    --modes gzip,floor,serial,default
done
date -u
