#!/usr/bin/env bash
# Checkpoint overhead with asynchronous persist, as a share of training
# throughput (target <= 5%), and the time to resume after a crash.
# Usage: bench/ckpt_overhead.sh [BUILD_DIR] [ROUNDS]
set -eu
build=${1:-build}
rounds=${2:-2}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1

ips() { grep -o '"items_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
best() { awk -v a="$1" -v b="$2" 'BEGIN{print (a > b ? a : b)}'; }

# name | flags | checkpoint every
W1="--model mlp --batch 128 --steps 400 --eval-max 1 --log-every 100000 --quiet"
W2="--model gpt --batch 16 --steps 40 --warmup 2 --eval-max 16 --log-every 100000 --quiet"
if [ -z "${SKIP_TABLE:-}" ]; then
echo "| workload | ranks | checkpoint every | checkpoint size | without (items/s) | with (items/s) | overhead |"
echo "|---|---|---|---|---|---|---|"
for spec in "W1 1 50" "W1 2 50" "W2 1 10" "W2 2 10"; do
  set -- $spec; w=$1; n=$2; every=$3; args=${!w}
  a=0; b=0
  for r in $(seq "$rounds"); do
    rm -rf "$tmp/ck"
    "$dt" train -n $n $args --out "$tmp/plain" > /dev/null
    a=$(best "$a" "$(ips "$tmp/plain")")
    "$dt" train -n $n $args --out "$tmp/ckpt" --ckpt-dir "$tmp/ck" --ckpt-every $every --ckpt-keep 2 > "$tmp/ck.log"
    b=$(best "$b" "$(ips "$tmp/ckpt")")
  done
  size=$(du -sb "$(ls -d "$tmp"/ck/ckpt-* | tail -1)" | cut -f1)
  awk -v w=$w -v n=$n -v e=$every -v s="$size" -v a="$a" -v b="$b" 'BEGIN{
    o = 100 * (1 - b / a); printf "| %s | %d | %d steps | %.1f MB | %.0f | %.0f | %.1f%% %s |\n", w, n, e, s / 1e6, a, b, o, (o <= 5 ? "(met)" : "(MISSED)") }'
done

fi

# Time to resume: a crash 10 steps after a checkpoint (so its asynchronous persist
# has finished), restarted at once by the
# supervisor; the extra wall time over a clean run is the cost of the restart
# (process and MPI start, data loading, checkpoint verification and load, and
# the 10 steps computed again).
for n in 1 2; do
  rm -rf "$tmp/ck"
  s0=$(date +%s.%N)
  "$dt" train -n $n $W1 --out "$tmp/clean" > /dev/null
  s1=$(date +%s.%N)
  "$dt" train -n $n $W1 --out "$tmp/crash" --ckpt-dir "$tmp/ck" --ckpt-every 200 --max-restarts 1 --restart-backoff 0 \
      --inject crash:rank=0:step=211 > /dev/null 2> "$tmp/crash.log"
  s2=$(date +%s.%N)
  load=$(grep -o 'loaded in [0-9.]* s' "$tmp/crash.log" | head -1)
  awk -v n=$n -v a="$s0" -v b="$s1" -v c="$s2" -v l="$load" 'BEGIN{
    printf "\ntime to resume after a crash (W1, %d rank%s): %.2f s over a clean run of %.2f s (checkpoint %s)\n", n, (n > 1 ? "s" : ""), (c - b) - (b - a), b - a, l }'
done
