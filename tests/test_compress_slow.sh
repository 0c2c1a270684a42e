#!/usr/bin/env bash
# Convergence with gradient compression (issue 7), short CI version of
# bench/compress.sh: the mlp on Fashion-MNIST, 2 ranks, 300 steps. Each
# compressor ends within a loose bar of the uncompressed run's test accuracy
# (the bench measures the 1-point bar at full length), and scaled sign without
# error feedback ends visibly below scaled sign with it under plain SGD, which
# is why error feedback exists.
source "$(dirname "$0")/lib.sh" "$@"

C="--model mlp --hidden 128 --steps 300 --quiet --eval-every 0"
BAR=3.5 # points below uncompressed, at 300 steps
run none -n 2 $C
base=$(acc "$tmp/none")
within() { # NAME FLAGS...
  local name=$1; shift
  run "$name" -n 2 $C "$@" || return
  local a; a=$(acc "$tmp/$name")
  awk -v a="$a" -v b="$base" -v bar="$BAR" 'BEGIN { exit !(a >= b - bar / 100) }' &&
    ok "$*: test accuracy $a vs $base uncompressed (bar: within $BAR points)" || fail "$*: $a vs $base"
}
within fp16 --compress fp16
within int8 --compress int8
within topk --compress topk:0.01
within powersgd --compress powersgd:4
# Scaled sign with error feedback, with plain SGD (see docs/COMPRESSION.md: with
# heavy-ball momentum its residual lags and it trains worse than without)
within sign_ef --compress sign --momentum 0 --lr 0.6

# Why error feedback: the same scaled sign, plain SGD at lr 0.1, with and without it
run sign_on -n 2 $C --compress sign --momentum 0 --error-feedback on &&
  run sign_off -n 2 $C --compress sign --momentum 0 --error-feedback off && {
  on=$(acc "$tmp/sign_on"); off=$(acc "$tmp/sign_off")
  awk -v a="$on" -v b="$off" 'BEGIN { exit !(a >= b + 0.02) }' &&
    ok "sign with error feedback $on vs without $off: at least 2 points better" || fail "sign EF $on vs no EF $off"; }
finish
