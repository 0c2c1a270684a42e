#!/usr/bin/env bash
# Issue 6 benchmarks: heterogeneity-aware balancing, time to 84% under BSP /
# SSP:2 / ASP with a slow worker, parameter-server throughput against the
# all-reduce path. Byzantine-robust aggregation has its own bench:
# bench/byzantine.sh.
# Usage: bench/async.sh [BUILD_DIR]
set -eu
build=${1:-build}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1
ips() { grep -o '"items_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
acc() { grep -o '"test_acc":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
# first time_s at which test_acc >= 0.84, or "not reached"
t84() { grep '"test_acc"' "$1/metrics.jsonl" | awk -F'[:,}]' '{ for (i = 1; i < NF; i++) { if ($i ~ /test_acc/) a = $(i+1); if ($i ~ /time_s/) t = $(i+1) } if (a >= 0.84 && !done) { print t " s (step " $2 ")"; done = 1 } } END { if (!done) print "not reached" }'; }

echo "## Heterogeneity: one of two workers 3x slower (W1 mlp, global batch 256, 60 steps)"
echo "| balance | samples/s | vs static |"
echo "|---|---|---|"
W1="--model mlp --batch 256 --steps 60 --lr 0.1 --eval-max 1 --log-every 1000 --quiet"
"$dt" train -n 2 $W1 --balance static --inject slow:rank=1:factor=3 --out "$tmp/st" > /dev/null
"$dt" train -n 2 $W1 --balance dynamic --inject slow:rank=1:factor=3 --out "$tmp/dy" > /dev/null
awk -v a="$(ips "$tmp/st")" -v b="$(ips "$tmp/dy")" 'BEGIN { printf "| static | %.0f | 1.00x |\n| dynamic | %.0f | %.2fx (target >= 1.7x: %s) |\n", a, b, b / a, (b / a >= 1.7 ? "met" : "MISSED") }'

echo
echo "## Time to 84% test accuracy, 2 workers, one 3x slower (mlp, batch 128, evaluated every 25 steps)"
echo "| mode | time to 84% | final accuracy | max staleness |"
echo "|---|---|---|---|"
E="--model mlp --epochs 2 --eval-every 25 --quiet --inject slow:rank=1:factor=3"
"$dt" train -n 2 $E --out "$tmp/sync" > /dev/null
echo "| sync DP (all-reduce) | $(t84 "$tmp/sync") | $(acc "$tmp/sync") | |"
for cons in bsp ssp:2 asp; do
  "$dt" train -n 3 --strategy ps --servers 1 --consistency $cons $E --out "$tmp/ps" > /dev/null
  echo "| PS $cons | $(t84 "$tmp/ps") | $(acc "$tmp/ps") | $(grep -o '"max":[0-9]*' "$tmp/ps/metrics.jsonl" | cut -d: -f2) |"
done

echo
echo "## Parameter server vs all-reduce (W1 mlp 1.86 M parameters, global batch 256, 2 workers, 60 steps)"
"$dt" train -n 2 $W1 --out "$tmp/ar" > /dev/null
"$dt" train -n 3 --strategy ps --servers 1 --consistency bsp $W1 --out "$tmp/psb" > /dev/null
awk -v a="$(ips "$tmp/ar")" -v b="$(ips "$tmp/psb")" 'BEGIN {
  P = 1863696 * 4; sa = a / 256; sb = b / 256;
  printf "| path | steps/s | pushes+pulls/s | parameter-server bytes/s |\n|---|---|---|---|\n";
  printf "| all-reduce (sync DP, 2 ranks) | %.1f | | |\n", sa;
  printf "| parameter server BSP (1 server, 2 workers) | %.1f | %.1f | %.2f GB/s |\n", sb, 4 * sb, 4 * sb * P / 1e9 }'

