#!/usr/bin/env bash
# Convergence of the asynchronous modes on Fashion-MNIST (mlp): ASP and SSP:2
# parameter servers and Hogwild! threads each reach 84% test accuracy; BSP
# aggregates robustly on the server.
source "$(dirname "$0")/lib.sh" "$@"
stale() { grep '"staleness"' "$1/metrics.jsonl" | grep -o '"max":[0-9]*' | cut -d: -f2; }

# convergence: two epochs of the mlp with 256 hidden units (about 1 point above the bar)
for cons in asp ssp:2; do
  run conv_${cons%%:*} -n 3 --strategy ps --servers 1 --consistency $cons --model mlp --hidden 256 --epochs 2 --quiet && {
    a=$(acc "$tmp/conv_${cons%%:*}"); awk -v a="$a" 'BEGIN { exit !(a >= 0.84) }' && ok "$cons: test accuracy $a after two epochs" || fail "$cons accuracy $a"; }
done
run hog --strategy hogwild --threads 2 --model mlp --hidden 256 --epochs 2 --quiet && {
  a=$(acc "$tmp/hog"); awk -v a="$a" 'BEGIN { exit !(a >= 0.84) }' && ok "hogwild, 2 threads: test accuracy $a after two epochs" || fail "hogwild accuracy $a"; }

# BSP aggregates robustly on the server: 1 of 5 workers sends sign-flipped gradients
R="--model mlp --hidden 128 --batch 100 --steps 150 --lr 0.1 --quiet"
run rb_clean -n 6 --strategy ps --servers 1 --consistency bsp $R && run rb_med -n 6 --strategy ps --servers 1 --consistency bsp $R \
    --aggregate median --inject byzantine:rank=2:mode=signflip && {
  a=$(acc "$tmp/rb_med"); c=$(acc "$tmp/rb_clean")
  awk -v a="$a" -v c="$c" 'BEGIN { exit !(a >= c - 0.06) }' && ok "BSP + median with a sign-flipping worker: $a vs clean $c" || fail "BSP median: $a vs $c"; }

finish
