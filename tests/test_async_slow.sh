#!/usr/bin/env bash
# Convergence checks of local SGD and of Byzantine-robust aggregation (slow: not
# run under the sanitizers).
source "$(dirname "$0")/lib.sh" "$@"

# local SGD every 4 steps converges (one epoch of the default mlp)
run lsgd4 -n 2 --model mlp --hidden 256 --epochs 1 --quiet --strategy localsgd:4 && {
  a=$(acc "$tmp/lsgd4"); awk -v a="$a" 'BEGIN { exit !(a >= 0.84) }' && ok "localsgd:4: test accuracy $a after one epoch (>= 0.84)" || fail "localsgd:4 accuracy $a"; }

# Byzantine workers: 1 of 5 sends a sign-flipped or random gradient (short CI version of the bench);
# the robust rules run with worker momentum (their default)
B="--model mlp --hidden 128 --batch 100 --steps 150 --lr 0.1 --quiet"
run clean -n 5 $B
c=$(acc "$tmp/clean")
for attack in signflip random; do
  if "$dt" train -n 5 $B --aggregate mean --inject byzantine:rank=2:mode=$attack --out "$tmp/mean_$attack" > "$tmp/m.log" 2>&1; then
    a=$(acc "$tmp/mean_$attack")
    awk -v a="$a" -v c="$c" 'BEGIN { exit !(a < c - 0.1) }' && ok "mean under $attack: accuracy $a vs clean $c (fails visibly)" || fail "mean under $attack did not fail: $a vs $c"
  else
    grep -q "loss became" "$tmp/m.log" && ok "mean under $attack: training diverged ($(grep -o 'the loss became [^:]*' "$tmp/m.log"))" || fail "mean under $attack: $(tail -1 "$tmp/m.log")"
  fi
  for agg in median trimmed:1 krum:1; do
    if run "${agg%%:*}_$attack" -n 5 $B --aggregate $agg --inject byzantine:rank=2:mode=$attack; then
      a=$(acc "$tmp/${agg%%:*}_$attack")
      awk -v a="$a" -v c="$c" 'BEGIN { exit !(a >= c - 0.06) }' && ok "$agg under $attack: accuracy $a vs clean $c" || fail "$agg under $attack: $a vs clean $c"
    else fail "$agg under $attack did not run"; fi
    # after nearest-neighbour mixing the honest vectors are their own mean: within 2 points
    if run "nnm_${agg%%:*}_$attack" -n 5 $B --aggregate $agg --pre-aggregate nnm:1 --inject byzantine:rank=2:mode=$attack; then
      a=$(acc "$tmp/nnm_${agg%%:*}_$attack")
      awk -v a="$a" -v c="$c" 'BEGIN { exit !(a >= c - 0.02) }' && ok "$agg after nnm:1 under $attack: accuracy $a vs clean $c" || fail "$agg after nnm:1 under $attack: $a vs clean $c"
    else fail "$agg after nnm:1 under $attack did not run"; fi
  done
done

finish
