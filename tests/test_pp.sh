#!/usr/bin/env bash
# Pipeline parallelism: equivalence to one process (losses within relative 1e-4
# for 20 steps, mlp and gpt, GPipe and 1F1B, pp 2 and 4, dp x pp, ZeRO-1,
# recompute); activation memory of 1F1B vs GPipe; checkpoints across layouts. The
# checks that judge measured time (the bubble, the auto partition against every
# split) are test_pp_timing.sh's.
source "$(dirname "$0")/lib.sh" "$@"
pfield() { grep '"pipeline"' "$1/metrics.jsonl" | sed "s/.*\"$2\":\[\([^]]*\)\].*/\1/"; }

MLP="--model mlp --hidden 64,48,32 --batch 32 --steps 20 --lr 0.05 --log-every 1 --quiet"
GPT="--model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch 8 --steps 20 --lr 3e-3 --warmup 2 --log-every 1 --eval-max 16 --quiet"

for model in mlp gpt; do
  if [ $model = mlp ]; then args=$MLP; else args=$GPT; fi
  run ${model}_1 $args
  for layout in "-n 2 --pp 2 --schedule gpipe --micro-batches 4" "-n 2 --pp 2 --schedule 1f1b --micro-batches 4" \
                "-n 4 --pp 4 --micro-batches 8" "-n 4 --pp 2 --micro-batches 2" "-n 4 --pp 2 --micro-batches 4 --zero 1" \
                "-n 2 --pp 2 --micro-batches 4 --recompute"; do
    same_run ${model}_1 1e-4 ${model}_$(echo "$layout" | tr -d ' -') $layout $args
  done
done

# (the bubble against (P-1)/(M+P-1): test_pp_timing.sh, run alone)

# activation memory at a fixed micro-batch of 4 rows: 1F1B keeps at most P-s micro-batches alive, GPipe all M
for M in 2 8; do
  for sch in gpipe 1f1b; do
    run mem_${sch}_$M -n 4 --pp 4 --schedule $sch --micro-batches $M --model mlp --hidden 32,32,32 --batch $((4 * M)) --steps 2 --quiet
  done
done
g2=$(pfield "$tmp/mem_gpipe_2" acts_alive_peak); g8=$(pfield "$tmp/mem_gpipe_8" acts_alive_peak)
f2=$(pfield "$tmp/mem_1f1b_2" acts_alive_peak); f8=$(pfield "$tmp/mem_1f1b_8" acts_alive_peak)
gb2=$(pfield "$tmp/mem_gpipe_2" act_bytes | cut -d, -f2); gb8=$(pfield "$tmp/mem_gpipe_8" act_bytes | cut -d, -f2)
fb2=$(pfield "$tmp/mem_1f1b_2" act_bytes | cut -d, -f2); fb8=$(pfield "$tmp/mem_1f1b_8" act_bytes | cut -d, -f2)
if [ "$g8" = "8,8,8,8" ] && [ "$f8" = "4,3,2,1" ] && [ "$gb8" -gt "$gb2" ] && [ "$fb8" -eq "$(pfield "$tmp/mem_1f1b_8" act_bytes | cut -d, -f2)" ] && [ "$fb8" -le $((fb2 * 2)) ]; then
  ok "activations alive per stage: GPipe M=2 [$g2] M=8 [$g8]; 1F1B M=2 [$f2] M=8 [$f8]; stage-1 bytes GPipe $gb2 -> $gb8, 1F1B $fb2 -> $fb8"
else fail "activation memory: GPipe [$g2] [$g8] $gb2 $gb8; 1F1B [$f2] [$f8] $fb2 $fb8"; fi

# checkpoint at dp=1 x pp=2 resumes at dp=4 and at 1 rank
run ck_pp -n 2 --pp 2 --micro-batches 4 $GPT --ckpt-dir "$tmp/ckpp" --ckpt-every 10
for layout in "-n 4" "-n 1" "-n 4 --pp 2 --micro-batches 2"; do
  name=res_$(echo "$layout" | tr -d ' -')
  if run $name $layout $GPT --resume "$tmp/ckpp/ckpt-0000000010" && msg=$(close_after "$tmp/ck_pp" "$tmp/$name" 10 1e-4); then
    ok "pp=2 checkpoint resumed with $layout: $msg"; else fail "pp=2 checkpoint -> $layout: ${msg:-}"; fi
done

# (the auto partition against every split, timed: test_pp_timing.sh, run alone)

finish
