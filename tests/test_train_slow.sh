#!/usr/bin/env bash
# Training reaches real results: the MLP passes 84% Fashion-MNIST test accuracy
# within one epoch; the GPT's validation loss falls well below ln(256) = 5.545
# (uniform guessing). Metrics and weights are written and re-evaluate the same.
source "$(dirname "$0")/lib.sh" "$@"

if run mlp --model mlp --epochs 1 --quiet; then
  cat "$tmp/mlp.log"
  a=$(acc "$tmp/mlp")
  awk -v a="$a" 'BEGIN{exit !(a >= 0.84)}' && ok "mlp test accuracy after one epoch: $a (need >= 0.84)" || fail "mlp test accuracy after one epoch: $a (need >= 0.84)"
  for k in step loss lr items_per_s; do
    grep -q "\"$k\":" "$tmp/mlp/metrics.jsonl" && ok "metrics.jsonl has $k" || { fail "metrics.jsonl lacks $k:"; tail -2 "$tmp/mlp/metrics.jsonl" | indent; }
  done
  ev=$("$dt" eval --weights "$tmp/mlp/model.safetensors" 2>&1)
  want=$(awk -v a="$a" 'BEGIN{printf "%.2f%%", 100*a}')
  grep -q "test accuracy $want" <<<"$ev" && ok "eval of the saved weights: $ev" ||
    { fail "eval of the saved weights gives another accuracy than training's final evaluation ($want):"; indent <<<"$ev"; }
fi

if run gpt --model gpt --n-layer 2 --n-head 4 --n-embd 64 --block-size 64 --batch 16 \
    --steps 120 --lr 3e-3 --warmup 10 --eval-max 64 --quiet; then
  vl=$(grep -o '"val_loss":[0-9.]*' "$tmp/gpt/metrics.jsonl" | tail -1 | cut -d: -f2)
  awk -v a="$vl" 'BEGIN{exit !(a <= 3.0)}' && ok "gpt validation loss: $vl (ln 256 = 5.545; need <= 3.0)" ||
    fail "gpt validation loss: $vl (ln 256 = 5.545; need <= 3.0)"
fi
finish
