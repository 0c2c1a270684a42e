#!/usr/bin/env bash
# Data-parallel scaling on this machine: W1 (mlp, global batch 256, SGD momentum)
# and W2 (gpt defaults, batch 16 x 128 tokens, AdamW) with -n 2 (one BLAS thread
# per rank) against -n 1 (one BLAS thread), interleaved, best of ROUNDS.
# Also: the fraction of communication hidden behind backward, and ZeRO-1's
# optimizer bytes per rank against ZeRO-0's.
# Usage: bench/dp_scaling.sh [BUILD_DIR] [ROUNDS]
set -eu
build=${1:-build}
rounds=${2:-2}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1

W1="--model mlp --batch 256 --steps 120 --lr 0.1 --eval-max 1 --log-every 1000 --quiet"
W2="--model gpt --batch 16 --steps 12 --warmup 2 --eval-max 16 --log-every 1000 --quiet"

ips() { grep -o '"items_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
field() { grep '"memory"' "$1/metrics.jsonl" | sed "s/.*\"$2\":\([0-9.]*\).*/\1/"; }
best() { awk -v a="$1" -v b="$2" 'BEGIN{print (a > b ? a : b)}'; }

declare -A B
for w in W1 W2; do B[$w,1]=0; B[$w,2]=0; done
for r in $(seq "$rounds"); do
  for w in W1 W2; do
    args=${!w}
    "$dt" train $args --threads 1 --out "$tmp/${w}_1" >/dev/null
    B[$w,1]=$(best "${B[$w,1]}" "$(ips "$tmp/${w}_1")")
    "$dt" train -n 2 $args --out "$tmp/${w}_2" >/dev/null
    B[$w,2]=$(best "${B[$w,2]}" "$(ips "$tmp/${w}_2")")
    c=$(field "$tmp/${w}_2" comm_s); e=$(field "$tmp/${w}_2" comm_exposed_s); bw=$(field "$tmp/${w}_2" backward_s)
    echo "round $r $w: -n 1 $(ips "$tmp/${w}_1")/s, -n 2 $(ips "$tmp/${w}_2")/s; comm ${c}s, exposed ${e}s, backward ${bw}s" >&2
  done
done

echo "| workload | -n 1 (items/s) | -n 2 (items/s) | speed-up | target | communication hidden behind backward |"
echo "|---|---|---|---|---|---|"
for w in W1 W2; do
  c=$(field "$tmp/${w}_2" comm_s); e=$(field "$tmp/${w}_2" comm_exposed_s)
  awk -v w=$w -v a="${B[$w,1]}" -v b="${B[$w,2]}" -v c="$c" -v e="$e" 'BEGIN{
    s = b / a; ov = (c > 0) ? 1 - e / c : 0; if (ov < 0) ov = 0;
    printf "| %s | %.0f | %.0f | %.2fx | >= 1.8x %s | %.0f%% (comm %.2f s, exposed %.2f s) |\n", w, a, b, s, (s >= 1.8 ? "met" : "MISSED"), 100 * ov, c, e }'
done

# ZeRO-1 optimizer state per rank = 1/N of ZeRO-0 (AdamW, gpt)
"$dt" train -n 2 $W2 --steps 2 --zero 0 --out "$tmp/z0" >/dev/null
"$dt" train -n 2 $W2 --steps 2 --zero 1 --out "$tmp/z1" >/dev/null
o0=$(field "$tmp/z0" optim_bytes); o1=$(field "$tmp/z1" optim_bytes)
awk -v a="$o0" -v b="$o1" 'BEGIN{printf "\nZeRO-1 optimizer bytes per rank: %d vs ZeRO-0 %d (ratio %.4f, ideal 0.5 on 2 ranks)\n", b, a, b / a}'
