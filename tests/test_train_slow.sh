#!/usr/bin/env bash
# Training reaches real results: the MLP passes 84% Fashion-MNIST test accuracy
# within one epoch; the GPT's validation loss falls well below ln(256) = 5.545
# (uniform guessing). Metrics and weights are written and re-evaluate the same.
set -eu
dt="$1/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

"$dt" train --model mlp --epochs 1 --quiet --out "$tmp/mlp" > "$tmp/mlp.txt"
cat "$tmp/mlp.txt"
acc=$(grep -o '"test_acc":[0-9.]*' "$tmp/mlp/metrics.jsonl" | tail -1 | cut -d: -f2)
echo "mlp test accuracy after one epoch: $acc (need >= 0.84)"
awk -v a="$acc" 'BEGIN{exit !(a >= 0.84)}' || { echo "FAIL: mlp accuracy"; fail=1; }
for k in step loss lr items_per_s; do
  grep -q "\"$k\":" "$tmp/mlp/metrics.jsonl" || { echo "FAIL: metrics.jsonl lacks $k"; fail=1; }
done
ev=$("$dt" eval --weights "$tmp/mlp/model.safetensors")
echo "$ev"
want=$(awk -v a="$acc" 'BEGIN{printf "%.2f%%", 100*a}')
grep -q "test accuracy $want" <<<"$ev" || { echo "FAIL: eval of the saved weights gives another accuracy than training's final evaluation ($want)"; fail=1; }

"$dt" train --model gpt --n-layer 2 --n-head 4 --n-embd 64 --block-size 64 --batch 16 \
    --steps 120 --lr 3e-3 --warmup 10 --eval-max 64 --quiet --out "$tmp/gpt"
vl=$(grep -o '"val_loss":[0-9.]*' "$tmp/gpt/metrics.jsonl" | tail -1 | cut -d: -f2)
echo "gpt validation loss: $vl (ln 256 = 5.545; need <= 3.0)"
awk -v a="$vl" 'BEGIN{exit !(a <= 3.0)}' || { echo "FAIL: gpt validation loss"; fail=1; }
exit $fail
