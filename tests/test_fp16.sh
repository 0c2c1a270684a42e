#!/usr/bin/env bash
# --precision fp16 with dynamic loss scaling (issue 17): fp16 trains close to
# fp32; an overflow (injected on one rank, or natural from a scale far too
# large) drops the step on every rank, so the weights equal those of the run
# one step shorter, bitwise, and halves the scale; clean steps double it; the
# scale is checkpointed and a resumed run equals the uninterrupted one
# bitwise; layouts agree with -n 1 in fp16; a run that overflows at scale 1 is
# a divergence, said in one line; bad values and strategies that cannot agree
# on dropping a step are refused.
source "$(dirname "$0")/lib.sh" "$@"

M="--model mlp --hidden 64,32 --batch 32 --lr 0.05 --lr-schedule constant --log-every 1 --eval-every 0 --quiet"
TOL=2e-3
# scale_at DIR STEP: the loss scale in the metrics line of STEP
scale_at() { grep "\"step\":$2,\"epoch\"" "$1/metrics.jsonl" | grep -o '"loss_scale":[0-9.e+]*' | cut -d: -f2; }

run fp32 $M --steps 20 && run fp16 $M --steps 20 --precision fp16 && {
  if cmp -s "$tmp/fp32/model.safetensors" "$tmp/fp16/model.safetensors"; then fail "fp16 trained exactly as fp32"
  elif l=$(close_after "$tmp/fp32" "$tmp/fp16" 0 0.02); then ok "mlp fp16 differs from fp32 and trains as it: $l"
  else fail "mlp fp16 vs fp32: $l"; fi; }
"$dt" train ${M/--quiet/} --steps 1 --precision fp16 2>&1 | grep -q -- "--precision fp16: .*IEEE half" &&
  ok "the run says what fp16 runs on" || fail "no --precision fp16 line in the log"

# An injected overflow on one rank: every rank drops the step, the weights are
# those after the step before, bitwise; the scale halves; the run goes on.
for n in 1 2; do
  run "short_$n" $M --steps 6 --precision fp16 -n $n &&
    run "ovf_$n" $M --steps 7 --precision fp16 -n $n --inject overflow:rank=$((n - 1)):step=7 && {
    s6=$(scale_at "$tmp/ovf_$n" 6) s7=$(scale_at "$tmp/ovf_$n" 7)
    if "$dt" diff "$tmp/short_$n/model.safetensors" "$tmp/ovf_$n/model.safetensors" > /dev/null && [ "$s6" = 65536.0 ] && [ "$s7" = 32768.0 ] &&
       grep -q '"event":"overflow","step":7' "$tmp/ovf_$n/metrics.jsonl" && grep -q "1 overflowed step dropped" "$tmp/ovf_$n.log"; then
      ok "-n $n, overflow on rank $((n - 1)) at step 7: weights = the 6-step run's bitwise, scale $s6 -> $s7, event and summary"
    else fail "-n $n overflow: scale $s6 -> $s7:"; grep -E 'overflow|trained' "$tmp/ovf_$n.log" | indent; fi; }
done
run ovf_more $M --steps 20 --precision fp16 -n 2 --inject overflow:rank=1:step=7 &&
  { l=$(close_after "$tmp/fp16" "$tmp/ovf_more" 7 0.1) && ok "the run goes on after the dropped step: $l" || fail "after the overflow: $l"; }

# A scale far too large overflows naturally: halved step by step until the
# gradient fits (the mlp's batch of 32 puts |p - y| / 32 times the scale into
# fp16, so 2^21 is the largest that fits), each of those steps dropped, then
# training as usual.
run huge $M --steps 32 --precision fp16 --loss-scale 1099511627776 && {
  k=$(grep -c '"event":"overflow"' "$tmp/huge/metrics.jsonl")
  last=$(grep -o '"event":"overflow","step":[0-9]*' "$tmp/huge/metrics.jsonl" | tail -1 | grep -o '[0-9]*$')
  scale=$(scale_at "$tmp/huge" 32)
  l1=$(losses "$tmp/huge" | awk '$1 == 1 { print $2; exit }') l32=$(losses "$tmp/huge" | awk '$1 == 32 { print $2; exit }')
  if [ "$k" -ge 5 ] && [ "$k" = "$last" ] && awk -v s="$scale" -v a="$l1" -v b="$l32" \
       'BEGIN { exit !(s >= 1 && s <= 2^35 && b < 0.92 * a) }'; then
    ok "--loss-scale 2^40: steps 1..$k overflowed and were dropped, the scale down to $scale; then it trains (loss $l1 -> $l32)"
  else fail "natural overflow: $k overflows (the last at step $last), scale $scale, loss $l1 -> $l32"; fi; }

# Clean steps double the scale: window 3, no overflow.
run grow $M --steps 9 --precision fp16 --loss-scale-window 3 && {
  got="$(scale_at "$tmp/grow" 1) $(scale_at "$tmp/grow" 3) $(scale_at "$tmp/grow" 6) $(scale_at "$tmp/grow" 9)"
  [ "$got" = "65536.0 131072.0 262144.0 524288.0" ] && ok "window 3: the scale after steps 1, 3, 6, 9: $got" ||
    fail "window 3: scales after steps 1, 3, 6, 9: $got"; }
run static $M --steps 8 --precision fp16 --loss-scale 1024 --loss-scale-window 0 --inject overflow:rank=0:step=4 &&
  { s="$(scale_at "$tmp/static" 3) $(scale_at "$tmp/static" 4) $(scale_at "$tmp/static" 8)"
    [ "$s" = "1024.0 1024.0 1024.0" ] && grep -q '"event":"overflow","step":4' "$tmp/static/metrics.jsonl" &&
      ok "a static scale stays $s through an overflow (the step still dropped)" || fail "static scale: $s"; }

# The scale is checkpointed: 10 steps (scale 524288, 1 clean step toward the
# next doubling; the learning rate is constant, so they are the first 10 of 20),
# resumed to 20 = the uninterrupted run, bitwise.
W="$M --precision fp16 --loss-scale-window 3"
if run whole $W --steps 20 && run first $W --steps 10 --ckpt-dir "$tmp/ck" --ckpt-every 10 &&
   run resumed $W --steps 20 --resume "$tmp/ck/ckpt-0000000010"; then
  a=$(scale_at "$tmp/whole" 15) b=$(scale_at "$tmp/resumed" 15)
  if tr -d ' \n' < "$tmp/ck/ckpt-0000000010/manifest.json" | grep -q '"loss_scale":{"scale":524288.0,"clean":1}' && [ "$a" = "$b" ] &&
     "$dt" diff "$tmp/whole/model.safetensors" "$tmp/resumed/model.safetensors" > /dev/null; then
    ok "the scale in the checkpoint (524288, 1 clean step); resumed at 10 = the uninterrupted run bitwise (scale at 15: $b)"
  else fail "fp16 resume: scale at 15 $a vs $b:"; grep -A3 '"loss_scale"' "$tmp/ck/ckpt-0000000010/manifest.json" | indent; fi
fi
# Local SGD: a dropped averaging step still averages (the checkpoint there holds
# one worker's copy): resumed from it = the uninterrupted run, bitwise.
L="$M --precision fp16 --strategy localsgd:4 -n 2 --inject overflow:rank=1:step=8 --momentum 0"
run lw $L --steps 12 && run lf $L --steps 8 --ckpt-dir "$tmp/lck" --ckpt-every 4 &&
  run lr $L --steps 12 --resume "$tmp/lck/ckpt-0000000008" && {
  grep -q '"event":"overflow","step":8' "$tmp/lw/metrics.jsonl" &&
    "$dt" diff "$tmp/lw/model.safetensors" "$tmp/lr/model.safetensors" > /dev/null &&
    ok "localsgd:4, overflow at the averaging step 8: resumed there = the uninterrupted run, bitwise" ||
    fail "localsgd overflow at an averaging step: $("$dt" diff "$tmp/lw/model.safetensors" "$tmp/lr/model.safetensors" 2>&1)"; }
# fp16 <-> fp32 resume: the fp32 masters carry over, the scale starts afresh
run to_fp32 $M --steps 15 --resume "$tmp/ck/ckpt-0000000010" && run fp32ck $M --steps 10 --ckpt-dir "$tmp/ck32" &&
  run to_fp16 $M --steps 15 --precision fp16 --resume "$tmp/ck32/ckpt-0000000010" && {
  if grep -q resuming "$tmp/to_fp32.log" && [ "$(scale_at "$tmp/to_fp16" 11)" = 65536.0 ] &&
     ! grep -q loss_scale "$tmp/to_fp32/metrics.jsonl"; then ok "an fp16 checkpoint resumed in fp32, an fp32 one in fp16 (scale 65536)"
  else fail "fp16 <-> fp32 resume"; tail -2 "$tmp/to_fp32.log" "$tmp/to_fp16.log" | indent; fi; }

# Layouts agree with -n 1 in fp16 (the same overflow checks on every rank):
# losses at TOL, weights at fp16's resolution. A sum in another order moves a
# weight across an fp16 rounding boundary now and then, which moves its operand
# by 2^-11 relative, and a hidden unit near ReLU's kink amplifies that (here
# one row of fc2 ends 3.5e-4 apart at -n 2, about 1e-7 in fp32): atol 1e-3 is
# an fp16 ulp at 1.
same16() { local name=$1; shift
  run "$name" $M --steps 20 --precision fp16 "$@" || return
  local l w
  if l=$(close_after "$tmp/fp16" "$tmp/$name" 0 $TOL) &&
     w=$("$dt" diff "$tmp/fp16/model.safetensors" "$tmp/$name/model.safetensors" --rtol 1e-2 --atol 1e-3 2>&1); then
    ok "fp16 $* = -n 1: $l; $w"
  else fail "fp16 $* vs -n 1: $l; $w"; fi; }
for lay in "-n 2" "-n 2 --zero 2" "-n 2 --tp 2" "-n 2 --pp 2 --micro-batches 2" "--strategy localsgd:2 -n 2" \
           "-n 2 --compress fp16"; do
  k=$(tr -dc 'a-z0-9' <<<"$lay")
  case $lay in
    *localsgd*|*compress*) run "l_$k" $M --steps 20 --precision fp16 $lay &&
      { l=$(close_after "$tmp/fp16" "$tmp/l_$k" 5 0.5) && ok "$lay --precision fp16: trains ($l)" || fail "$lay in fp16: $l"; } ;;
    *) same16 "l_$k" $lay ;;
  esac
done
run gpt16 --model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch 8 --steps 6 --warmup 2 --log-every 1 \
  --eval-max 16 --quiet --precision fp16 && ok "gpt trains in fp16 (attention on fp16 operands)"

# Overflowing at scale 1 is not fp16's range: one line, non-zero exit.
expect "the gradient is inf or NaN at step 3 with the loss scale at 1 .*diverging run" $M --steps 5 --precision fp16 \
  --loss-scale 1 --inject overflow:rank=0:step=3
expect "needs the synchronous strategies" $M --steps 2 --precision fp16 --strategy ps -n 3
expect "needs the synchronous strategies" $M --steps 2 --precision fp16 --strategy hogwild --threads 2
expect "with error feedback" $M --steps 2 --precision fp16 -n 2 --compress topk:0.1
expect "are for --precision fp16" $M --steps 2 --loss-scale 128
expect "are for --precision fp16" $M --steps 2 --precision bf16 --loss-scale-window 10
expect "tests the fp16 loss scaler" $M --steps 2 --inject overflow:rank=0:step=1
expect "loss-scale" $M --steps 2 --precision fp16 --loss-scale 0.5
expect "rank 3 does not exist" $M --steps 2 --precision fp16 -n 2 --inject overflow:rank=3:step=1
finish
