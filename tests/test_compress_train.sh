#!/usr/bin/env bash
# Gradient compression in training (issue 7): every codec trains on 2 ranks
# with the compression ratio and wire bytes it should have; resumes from a
# checkpoint are bit-exact with the error-feedback residuals (and PowerSGD's Q)
# in the checkpoint, with ZeRO-0/1/2 and with the parameter server; a resume on
# another rank count shares the residuals out; bad flags are refused.
# (Convergence bars: tests/test_compress_slow.sh.)
source "$(dirname "$0")/lib.sh" "$@"
field() { grep -o "\"$2\":[0-9.e+-]*" "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }

# ---- refusals ------------------------------------------------------------------
S="--model mlp --hidden 64 --batch 64 --steps 4 --quiet"
expect "topk:RATIO\[:fp16\] needs 0 < RATIO <= 1" $S --compress topk:0
expect "topk:RATIO\[:fp16\] needs 0 < RATIO <= 1" $S --compress topk:1.5
expect "powersgd:RANK needs 1 <= RANK <= 256" $S --compress powersgd:0
expect "must be none, fp16, bf16, int8, topk:RATIO, sign or powersgd:RANK" $S --compress gzip
expect "error-feedback must be on or off" $S --compress sign --error-feedback yes
expect "compress-warmup" $S --compress sign --compress-warmup -1
expect "applies to synchronous data parallelism" $S --compress topk:0.01 --tp 2 -n 2
expect "applies to synchronous data parallelism" $S --compress int8 --aggregate median -n 3
expect "powersgd needs an all-reduce" $S --compress powersgd:2 --strategy ps --servers 1 -n 3

# ---- every codec trains, with its ratio on the wire -------------------------------
T="--model mlp --hidden 256 --batch 64 --steps 30 --log-every 10 --quiet --eval-every 0"
run none -n 2 $T
none_bytes=$(field "$tmp/none" bytes_sent)
for spec in "topk:0.01:fp16 80 160" "fp16 1.9 2.1" "bf16 1.9 2.1" "int8 3.5 4.1" "topk:0.01 40 120" "sign 20 32" "powersgd:4 5 1000"; do
  set -- $spec
  name=${1//:/_}
  if run "$name" -n 2 $T --compress "$1"; then
    r=$(field "$tmp/$name" compress_ratio); b=$(field "$tmp/$name" bytes_sent); l=$(field "$tmp/$name" loss)
    awk -v r="$r" -v lo="$2" -v hi="$3" -v l="$l" 'BEGIN { exit !(r >= lo && r <= hi && l > 0 && l < 3) }' &&
      ok "$1: compression ratio $r (expected $2-$3), wire bytes per step $b (uncompressed $none_bytes), loss $l" ||
      fail "$1: ratio $r (expected $2-$3), loss $l"
  else
    fail "$1 did not train"
  fi
done
# what goes on the wire shrinks with the ratio (the count includes the small exact
# parts: size exchange, vectors)
awk -v a="$none_bytes" -v b="$(field "$tmp/topk_0.01" bytes_sent)" 'BEGIN { exit !(b * 20 < a) }' &&
  ok "top-k 1% sends over 20x fewer bytes than uncompressed" || fail "top-k bytes not 20x below uncompressed"
# ZeRO-1 on 3 ranks (uneven chunks), the all-to-all reduce-scatter
run z1 -n 3 $T --compress int8 --zero 1 && l=$(field "$tmp/z1" loss) &&
  awk -v l="$l" 'BEGIN { exit !(l > 0 && l < 3) }' && ok "int8 with ZeRO-1 on 3 ranks trains (loss $l)" || fail "int8 ZeRO-1 3 ranks"

# ---- resume is exact: residuals in the checkpoint ------------------------------------
R="--model mlp --hidden 64 --batch 64 --steps 40 --quiet --eval-every 0"
exact() { # NAME FLAGS...: 40 straight steps vs a crash at 38 resumed from a checkpoint
  # (every 10 steps; a save waits for the previous persist, so when a rank is at
  # step 38 the checkpoint of step 20 is complete)
  local name=$1; shift
  run "${name}_a" "$@" $R || return
  run "${name}_b" "$@" $R --ckpt-dir "$tmp/${name}_ck" --ckpt-every 10 --inject crash:rank=1:step=38 --max-restarts 1 --resume auto ||
    { fail "$name: supervised run"; return; }
  grep -q "resuming" "$tmp/${name}_b.log" || { fail "$name: never resumed"; return; }
  m=$("$dt" diff "$tmp/${name}_a/model.safetensors" "$tmp/${name}_b/model.safetensors" --rtol 0 --atol 0) &&
    ok "$name: killed at step 38, $(grep -o 'resuming [a-z ]*from [^ ]*' "$tmp/${name}_b.log" | sed 's|.*/||'), bitwise equal to the run without a crash ($m)" || fail "$name: $m"
}
exact topk_zero1 -n 2 --compress topk:0.01 --zero 1
exact sign_zero2 -n 2 --compress sign --zero 2
exact powersgd_zero0 -n 2 --compress powersgd:2
exact ps_bsp_topk -n 3 --strategy ps --servers 1 --consistency bsp --compress topk:0.01
"$dt" inspect "$tmp/topk_zero1_ck/ckpt-0000000040" > "$tmp/inspect.txt" 2>&1 &&
  grep -q "compress.error.0" "$tmp/inspect.txt" && grep -q "compress.error.1" "$tmp/inspect.txt" &&
  ok "the checkpoint holds both ranks' error-feedback residuals" || fail "no residuals in the checkpoint"
grep -q "compress.powersgd_q" <("$dt" inspect "$tmp/powersgd_zero0_ck/ckpt-0000000040" 2>&1) &&
  ok "PowerSGD's warm-start Q is in the checkpoint" || fail "no PowerSGD Q in the checkpoint"
# and the residual matters: without error feedback the same run ends elsewhere
run topk_noef -n 2 --compress topk:0.01 --zero 1 --error-feedback off $R &&
  ! "$dt" diff "$tmp/topk_zero1_a/model.safetensors" "$tmp/topk_noef/model.safetensors" --rtol 0 --atol 0 > /dev/null &&
  ok "error feedback changes the trajectory (so a lost residual would show)" || fail "error feedback made no difference"

# ---- resume on another rank count: the residuals are shared out -----------------------
run grow -n 3 --compress topk:0.01 $R --resume "$tmp/topk_zero1_ck/ckpt-0000000020" --ckpt-dir "$tmp/grow_ck" &&
  grep -q "residuals of 2 replicas shared out over 3" "$tmp/grow.log" &&
  ok "a 2-rank checkpoint resumes on 3 ranks with the residuals shared out" || fail "resume 2 -> 3 ranks"
finish
