#!/usr/bin/env bash
# Sequence parallelism (--sequence-parallel) against plain tensor parallelism,
# side by side on this machine: W2 (gpt defaults: 4 layers x 256, 4 heads,
# 128 positions, batch 16, AdamW) at -n 2 --tp 2, with and without the flag,
# interleaved for ROUNDS rounds. Per round: each run's step time (the median
# of the logged steps' time_s after the first two) and throughput, and the
# activation bytes dtrain counts on a rank (the end-of-run memory line's
# act_bytes: boundaries, saved activations, scratch, gradient buffers, the
# training and the evaluation sets of them).
# Usage: bench/seqpar.sh [BUILD_DIR] [ROUNDS] [STEPS]   (defaults: build 5 12; about a minute a round on 2 cores)
set -u
build=$(cd "${1:-build}" && pwd) || exit 2
rounds=${2:-5}
steps=${3:-12}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
export OPENBLAS_NUM_THREADS=1

W2="--model gpt --batch 16 --steps $steps --warmup 2 --eval-max 1 --log-every 1 --quiet"
ips() { grep -o '"items_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
act() { grep '"memory"' "$1/metrics.jsonl" | grep -o '"act_bytes":[0-9]*' | cut -d: -f2; }
# the median step time of the steps after the first two (time_s is the time since the start)
step_s() { grep '"loss"' "$1/metrics.jsonl" | grep -o '"time_s":[0-9.e+-]*' | cut -d: -f2 |
  awk 'NR > 1 { print $1 - prev } { prev = $1 }' | tail -n +2 | sort -g |
  awk '{ v[NR] = $1 } END { printf "%.4f", NR ? v[int((NR + 1) / 2)] : 0 }'; }

grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'
echo "# $(nproc) cores"
echo
echo "## W2 at -n 2 --tp 2: --sequence-parallel against plain tensor parallelism ($rounds interleaved rounds)"
echo "# dtrain train -n 2 --tp 2 [--sequence-parallel] $W2"
echo
echo "| round | tp step s | tp tokens/s (last interval) | tp activations MiB | sp step s | sp tokens/s (last interval) | sp activations MiB | step time sp / tp |"
echo "|---|---|---|---|---|---|---|---|"
ratios=""
for r in $(seq "$rounds"); do
  for v in tp sp; do
    o="$tmp/$v"
    rm -rf "$o"
    flag=""; [ $v = sp ] && flag="--sequence-parallel"
    # shellcheck disable=SC2086
    "$dt" train -n 2 --tp 2 $flag $W2 --out "$o" > "$o.log" 2>&1 || { echo "run failed: $(tail -1 "$o.log")"; exit 1; }
  done
  a=$(step_s "$tmp/tp"); b=$(step_s "$tmp/sp")
  x=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", (a > 0) ? b / a : 0 }')
  ratios="$ratios $x"
  echo "| $r | $a | $(awk -v v="$(ips "$tmp/tp")" 'BEGIN { printf "%.0f", v }') | $(awk -v v="$(act "$tmp/tp")" 'BEGIN { printf "%.2f", v / 1048576 }') |" \
    "$b | $(awk -v v="$(ips "$tmp/sp")" 'BEGIN { printf "%.0f", v }') | $(awk -v v="$(act "$tmp/sp")" 'BEGIN { printf "%.2f", v / 1048576 }') | ${x}x |"
done
echo
echo "$ratios" | tr ' ' '\n' | sed '/^$/d' | sort -n |
  awk '{ v[NR] = $1 } END { printf "step time, sequence-parallel / plain tp: %.3fx to %.3fx, median %.3fx\n", v[1], v[NR], v[int((NR + 1) / 2)] }'
a=$(act "$tmp/tp"); b=$(act "$tmp/sp")
awk -v a="$a" -v b="$b" 'BEGIN { printf "activations a rank (dtrain count): %d bytes with plain tp, %d with --sequence-parallel (%.1f%% less)\n", a, b, 100 * (a - b) / a }'
