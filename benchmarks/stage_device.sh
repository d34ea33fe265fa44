#!/usr/bin/env bash
# Stage what benchmarks/device_peers.sh needs into DEST (run here, before carrying DEST to
# the machine): our package source, benchmarks/, the scale source, the real inputs and the
# wheels for Python 3.12 manylinux x86_64 (pip download, so this side needs the network).
#
#   benchmarks/stage_device.sh DEST [--ours-only] [INPUT.json.gz ...]
#
# INPUTs (default: benchmarks/data/*/*.json.gz, the GPT trace of scripts/record_gpt_trace.py,
# plus the two largest shared traces) are copied into DEST/data/. --ours-only skips the peer
# wheels (for `device_peers.sh --tools ours`).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${1:?usage: stage_device.sh DEST [--ours-only] [INPUT ...]}; shift
PEERS=1
if [ "${1:-}" = --ours-only ]; then PEERS=0; shift; fi
INPUTS=("$@")
if [ ${#INPUTS[@]} -eq 0 ]; then
  shopt -s nullglob
  INPUTS=("$REPO"/benchmarks/data/*/*.json.gz
          "$REPO"/../shared/traces/public/hta_mtia/mtia_rank_0.json.gz
          "$REPO"/../shared/traces/public/hta_df_index_resolver/df_index_resolver.json.gz)
fi
rm -rf "$DEST/tb_kineto_insights" "$DEST/benchmarks" "$DEST/sample_logs" "$DEST/data"
mkdir -p "$DEST/sample_logs" "$DEST/data" "$DEST/whl_ours" "$DEST/whl_peers"
cp -r "$REPO/tb_kineto_insights" "$REPO/benchmarks" "$DEST/"
rm -rf "$DEST/benchmarks/data"
find "$DEST" -name __pycache__ -prune -exec rm -rf {} +
cp -r "$REPO/sample_logs/transformer_eager" "$DEST/sample_logs/"
for f in "${INPUTS[@]}"; do
  d="$DEST/data/$(basename "$(dirname "$f")")"
  mkdir -p "$d" && cp "$f" "$d/"
done
PLAT=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
dl() { python3 -m pip download -q --no-deps --only-binary=:all: "${PLAT[@]}" -d "$@"; }
dl "$DEST/whl_ours" msgspec==0.23.0 watchdog==7.1.0 zlib-ng==1.1.0
if [ "$PEERS" = 1 ]; then
  dl "$DEST/whl_peers" HolisticTraceAnalysis==0.5.0 torch-tb-profiler==0.4.3 plotly==7.1.0 pydot==4.0.1
fi
du -sh "$DEST"
