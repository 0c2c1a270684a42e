#!/usr/bin/env bash
# GPT (W2: 4 layers, 4 heads, width 256, context 128, batch 16 x 128 tokens,
# AdamW) on 2 ranks: data, tensor and pipeline parallelism side by side with the
# 1-rank figure; for the pipeline, the measured bubble next to (P-1)/(M+P-1) and
# the activation memory per stage. One BLAS thread per rank.
# Usage: bench/parallel_layouts.sh [BUILD_DIR] [STEPS]
set -eu
build=${1:-build}
steps=${2:-10}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1
W2="--model gpt --batch 16 --steps $steps --warmup 2 --eval-max 16 --log-every 100000 --quiet"
ips() { grep -o '"items_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
pf() { grep '"pipeline"' "$1/metrics.jsonl" | sed "s/.*\"$2\":\[\([^]]*\)\].*/\1/"; }

echo "| layout | tokens/s | vs 1 rank | bubble measured (mean of stages) | (P-1)/(M+P-1) | activation MB per stage |"
echo "|---|---|---|---|---|---|"
"$dt" train $W2 --threads 1 --out "$tmp/one" > /dev/null
base=$(ips "$tmp/one")
printf "| 1 rank | %.0f | 1.00x | | | |\n" "$base"
for layout in "-n 2" "-n 2 --tp 2" \
              "-n 2 --pp 2 --schedule gpipe --micro-batches 2" "-n 2 --pp 2 --schedule gpipe --micro-batches 4" "-n 2 --pp 2 --schedule gpipe --micro-batches 8" \
              "-n 2 --pp 2 --schedule 1f1b --micro-batches 2" "-n 2 --pp 2 --schedule 1f1b --micro-batches 4" "-n 2 --pp 2 --schedule 1f1b --micro-batches 8"; do
  "$dt" train $layout $W2 --out "$tmp/r" > /dev/null
  t=$(ips "$tmp/r")
  if grep -q '"pipeline"' "$tmp/r/metrics.jsonl"; then
    M=$(grep -o '"micro_batches":[0-9]*' "$tmp/r/metrics.jsonl" | cut -d: -f2)
    idle=$(pf "$tmp/r" idle_frac); act=$(pf "$tmp/r" act_bytes)
    awk -v l="$layout" -v t="$t" -v b="$base" -v i="$idle" -v a="$act" -v M="$M" 'BEGIN {
      n = split(i, x, ","); s = 0; for (k = 1; k <= n; k++) s += x[k];
      m = split(a, y, ","); as = ""; for (k = 1; k <= m; k++) as = as (k > 1 ? " / " : "") sprintf("%.1f", y[k] / 1e6);
      printf "| %s | %.0f | %.2fx | %.3f | %.3f | %s |\n", l, t, t / b, s / n, 1 / (M + 1), as }'
  else
    awk -v l="$layout" -v t="$t" -v b="$base" 'BEGIN { printf "| %s | %.0f | %.2fx | | | |\n", l, t, t / b }'
  fi
done
