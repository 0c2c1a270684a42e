#!/usr/bin/env bash
# The interleaved 1F1B schedule (--schedule interleaved --virtual-stages V):
# the same training as one process (losses within relative 1e-4) and bitwise
# the same weights and validation losses as 1F1B on the same layout (each
# chunk adds its micro-batches' gradients in the same order), mlp and gpt, P 2
# and 4, V 2 and 3, with tensor parallelism, ZeRO-1/2 data parallelism and
# recomputation; ZeRO-3 bitwise ZeRO-2 under the interleaved schedule (its
# bubble: test_pp_timing.sh); the activation sets each stage keeps (Megatron's 2(P-s-1)+(V-1)P+1); a
# checkpoint (ZeRO-3, -n 4) resumed under 1F1B and on one rank; every refusal
# in one line.
source "$(dirname "$0")/lib.sh" "$@"
pfield() { grep '"pipeline"' "$1/metrics.jsonl" | sed "s/.*\"$2\":\[\([^]]*\)\].*/\1/"; }
vals() { grep -o '"val_loss":[-0-9.e]*' "$1/metrics.jsonl"; }

MLP="--model mlp --hidden 64,48,32 --batch 32 --steps 20 --lr 0.05 --log-every 1 --quiet"
GPT="--model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch 8 --steps 20 --lr 3e-3 --warmup 2 --log-every 1 --eval-every 10 --eval-max 16 --quiet"
GPT6="${GPT/--n-layer 2/--n-layer 6}"
IL="--schedule interleaved --virtual-stages"

# pair MODEL ARGS NAME LAYOUT V: LAYOUT under 1F1B and interleaved with V
# chunks per stage; the interleaved run is -n 1's training and 1F1B's weights.
pair() {
  local model=$1 args=$2 name=$3 layout=$4 V=$5
  run ${name}_1f1b $layout $args || return
  same_run ${model}_1 1e-4 ${name}_il$V $layout $IL $V $args || return
  if cmp -s "$tmp/${name}_1f1b/model.safetensors" "$tmp/${name}_il$V/model.safetensors" &&
     [ "$(vals "$tmp/${name}_1f1b")" = "$(vals "$tmp/${name}_il$V")" ]; then
    ok "$name: interleaved V=$V = 1F1B bitwise (weights, $(vals "$tmp/${name}_il$V" | wc -l) validation losses)"
  else fail "$name: interleaved V=$V differs from 1F1B ($layout)"; fi
}
run mlp_1 $MLP
run gpt_1 $GPT
run gpt6_1 $GPT6
pair gpt "$GPT" gpt_p2 "-n 2 --pp 2 --micro-batches 4" 2
pair gpt6 "$GPT6" gpt6_p4 "-n 4 --pp 4 --micro-batches 8" 2
pair gpt6 "$GPT6" gpt6_p2tp "-n 4 --pp 2 --tp 2 --micro-batches 2" 3
pair mlp "$MLP" mlp_p2z2 "-n 4 --pp 2 --micro-batches 4 --zero 2" 2
pair mlp "$MLP" mlp_p2z1rc "-n 4 --pp 2 --micro-batches 2 --zero 1 --recompute" 2

# ZeRO-3 inside each stage's data-parallel group, buckets of a block or two:
# bitwise the interleaved ZeRO-2 run (the same reduce-scatters), with and
# without --zero3-keep
for k in "" "--zero3-keep"; do
  run mlp_p2z3$k -n 4 --pp 2 --micro-batches 4 $IL 2 --zero 3 $k --bucket-mb 0.01 $MLP &&
  run mlp_p2z2s -n 4 --pp 2 --micro-batches 4 $IL 2 --zero 2 --bucket-mb 0.01 $MLP &&
  if cmp -s "$tmp/mlp_p2z2s/model.safetensors" "$tmp/mlp_p2z3$k/model.safetensors"; then
    ok "interleaved ZeRO-3 $k = interleaved ZeRO-2 bitwise (mlp, -n 4 --pp 2, V=2)"
  else fail "interleaved ZeRO-3 $k differs from ZeRO-2"; fi
done
if run gpt_z3 -n 4 --pp 2 --micro-batches 4 $IL 2 --zero 3 --bucket-mb 0.01 $GPT &&
   run gpt_z2 -n 4 --pp 2 --micro-batches 4 $IL 2 --zero 2 --bucket-mb 0.01 $GPT &&
   cmp -s "$tmp/gpt_z2/model.safetensors" "$tmp/gpt_z3/model.safetensors"; then
  ok "interleaved ZeRO-3 = ZeRO-2 bitwise (gpt: its embedding tied across stages 0 and 1)"
else fail "interleaved ZeRO-3 gpt differs from ZeRO-2"; fi

# the activation sets kept per stage: P=4, V=2, M=8: 2(P-s-1) + (V-1)P + 1
a=$(pfield "$tmp/gpt6_p4_il2" acts_alive_peak); f=$(pfield "$tmp/gpt6_p4_1f1b" acts_alive_peak)
if [ "$a" = "11,9,7,5" ] && [ "$f" = "4,3,2,1" ]; then ok "micro-batches alive per stage: interleaved [$a], 1F1B [$f]"
else fail "micro-batches alive per stage: interleaved [$a] (want 11,9,7,5), 1F1B [$f] (want 4,3,2,1)"; fi

# (the bubble against (P-1)/(VM+P-1): test_pp_timing.sh, run alone)

# a checkpoint written under the interleaved schedule with ZeRO-3 resumes under 1F1B and on one rank
run ck_il -n 4 --pp 2 --micro-batches 4 $IL 2 --zero 3 $GPT --ckpt-dir "$tmp/ckil" --ckpt-every 10
for layout in "-n 2 --pp 2 --micro-batches 4" "-n 1"; do
  name=res_$(echo "$layout" | tr -d ' -')
  if run $name $layout $GPT --resume "$tmp/ckil/ckpt-0000000010" && msg=$(close_after "$tmp/ck_il" "$tmp/$name" 10 1e-4); then
    ok "interleaved checkpoint resumed with $layout: $msg"; else fail "interleaved checkpoint -> $layout: ${msg:-}"; fi
done

# refusals
S="--model gpt --n-layer 2 --steps 1 --quiet --out $tmp/x"
expect "virtual-stages V in \[2, 16\]" -n 2 --pp 2 --schedule interleaved --micro-batches 2 $S
expect "is for --schedule interleaved" -n 2 --pp 2 --virtual-stages 2 --micro-batches 2 $S
expect "give --pp P >= 2" $IL 2 --micro-batches 2 $S
expect "not a multiple of 2 (try 4)" -n 2 --pp 2 $IL 2 --micro-batches 3 $S
expect "= 32 chunks, but the model has 5 blocks" -n 2 --pp 2 $IL 16 --micro-batches 2 $S
expect "give 4 block counts, one per chunk" -n 2 --pp 2 $IL 2 --micro-batches 2 --pp-partition 2,3 $S
finish
