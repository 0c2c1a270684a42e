#!/usr/bin/env bash
# make demo: trains a real model on real data and shows the result.
set -euo pipefail
build=${1:-build}
dt="$build/dtrain"
out=${DEMO_OUT:-runs/demo}
mkdir -p "$out"

echo "== dtrain demo =="
echo "1) MLP 784-1024-1024-10 on Fashion-MNIST (Debian's dataset-fashion-mnist), one epoch, SGD momentum,"
echo "   data-parallel on 2 ranks (-n 2 starts them through mpirun; each trains on half of every batch"
echo "   and gradients are all-reduced with dtrain's own ring/halving-doubling collectives)"
"$dt" train -n 2 --model mlp --epochs 1 --batch 128 --lr 0.1 --out "$out/mlp" --log-every 50
echo
echo "   weights: $out/mlp/model.safetensors (loads in PyTorch with safetensors.torch.load_file)"
echo "   re-evaluating the saved file:"
"$dt" eval --weights "$out/mlp/model.safetensors"
echo
echo "2) a small byte-level GPT on Debian's fortunes, 150 steps (random guessing is ln(256) = 5.545)"
"$dt" train --model gpt --n-layer 2 --n-embd 128 --n-head 4 --block-size 64 --batch 16 \
    --steps 150 --lr 2e-3 --warmup 10 --eval-max 128 --out "$out/gpt" --log-every 25
echo
echo "metrics are JSON lines: $out/mlp/metrics.jsonl, $out/gpt/metrics.jsonl"
echo
echo "3) the two runs as one page of charts (open it in a browser; no network needed):"
"$dt" report "$out/mlp" "$out/gpt" --out "$out/report.html"
echo
echo "4) the same library from Python (build/python; docs/PYTHON.md):"
echo "   PYTHONPATH=$build/python python3 -c 'import dtrain; r = dtrain.train(model=\"mlp\", steps=50, quiet=True,"
echo "       on_step=lambda s: print(s[\"step\"], s[\"loss\"]) if s[\"step\"] % 10 == 0 else None); print(r[\"test_acc\"])'"
PYTHONPATH="$build/python" python3 -c 'import dtrain; r = dtrain.train(model="mlp", steps=50, quiet=True,
    on_step=lambda s: print("  ", s["step"], s["loss"]) if s["step"] % 10 == 0 else None); print("   test accuracy", r["test_acc"])'
