#!/usr/bin/env bash
# Tensor (Megatron) parallelism and the hybrid mesh: equivalence to one process
# (losses within relative 1e-4 for 20 steps, final weights within rtol 1e-3) for
# tp=2, dp=2 x tp=2, tp=2 x pp=2, with ZeRO-1 and with clipping; checkpoints
# written at tp=2 x pp=2 resume at dp=4 and on 1 rank; clear refusals.
source "$(dirname "$0")/lib.sh" "$@"

MLP="--model mlp --hidden 64,48,32 --batch 32 --steps 20 --lr 0.05 --log-every 1 --quiet"
GPT="--model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch 8 --steps 20 --lr 3e-3 --warmup 2 --log-every 1 --eval-max 16 --quiet"

for model in mlp gpt; do
  if [ $model = mlp ]; then args=$MLP; else args=$GPT; fi
  run ${model}_1 $args
  run ${model}_1c $args --clip 0.3
  for layout in "-n 2 --tp 2" "-n 4 --tp 2" "-n 4 --tp 2 --pp 2 --micro-batches 2" "-n 4 --tp 2 --zero 1" "-n 2 --tp 2 --clip 0.3"; do
    ref=${model}_1; case "$layout" in *clip*) ref=${model}_1c;; esac
    same_run $ref 1e-4 ${model}_$(echo "$layout" | tr -d ' -.') $layout $args
  done
done

# a checkpoint written at tp=2 x pp=2 (ZeRO-1) resumes at dp=4, at 1 rank, at tp=2
run ck -n 4 --tp 2 --pp 2 --micro-batches 2 --zero 1 $GPT --ckpt-dir "$tmp/ck" --ckpt-every 10
grep -q "dp=1 pp=2 tp=2" <("$dt" inspect "$tmp/ck/ckpt-0000000010") && ok "inspect shows the layout written from" || fail "inspect layout"
for layout in "-n 4" "-n 1" "-n 2 --tp 2"; do
  name=res_$(echo "$layout" | tr -d ' -')
  if run $name $layout $GPT --resume "$tmp/ck/ckpt-0000000010" && msg=$(close_after "$tmp/ck" "$tmp/$name" 10 1e-4); then
    ok "tp=2 x pp=2 checkpoint resumed with $layout: $msg"; else fail "tp x pp checkpoint -> $layout: ${msg:-}"; fi
done

# refusals, one line each
expect "must divide --n-head 2" --tp 4 $GPT
expect "supports the mlp and the gpt" --tp 2 --model cnn --steps 1
expect "do not split into --pp 1 x --tp 2" -n 3 --tp 2 $MLP
expect "must divide the hidden size 50" --tp 4 --model mlp --hidden 50,48 --steps 1

finish
