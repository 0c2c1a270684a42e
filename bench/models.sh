#!/usr/bin/env bash
# Issue 15's model bars (a benchmark, not CI): the shipped ResNet description
# trains to >= 92% Fashion-MNIST test accuracy, and the LLaMA-style decoder
# reaches a lower validation loss than the GPT at the same step budget (same
# batch, context, width and depth, each with its defaults). The three runs go
# side by side (one BLAS thread each); their results do not depend on timing.
#
#   bench/models.sh [BUILD_DIR]     (about 25 minutes on two cores)
#
# Environment: STEPS (language models' budget, 600). Prints markdown; exits 1
# when a bar is missed.
set -u
build=${1:-build}
steps=${STEPS:-600}
dt="$build/dtrain"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OPENBLAS_NUM_THREADS=1
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'
echo "# flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
RESNET=(--model resnet --epochs 6 --batch 128 --lr 0.1 --weight-decay 5e-4 --seed 1 --threads 1)
GPT=(--model gpt --steps "$steps" --seed 1 --threads 1 --eval-every 100)
LLAMA=(--model llama --steps "$steps" --seed 1 --threads 1 --eval-every 100)
t0=$(date +%s)
"$dt" train "${RESNET[@]}" --out "$out/resnet" > "$out/resnet.log" 2>&1 &
"$dt" train "${GPT[@]}" --out "$out/gpt" > "$out/gpt.log" 2>&1 &
"$dt" train "${LLAMA[@]}" --out "$out/llama" > "$out/llama.log" 2>&1 &
wait
echo "# wall: $(( $(date +%s) - t0 )) s for the three side by side"
acc=$(grep -o '"test_acc":[0-9.]*' "$out/resnet/metrics.jsonl" | tail -1 | cut -d: -f2)
lg=$(grep -o '"val_loss":[0-9.]*' "$out/gpt/metrics.jsonl" | tail -1 | cut -d: -f2)
ll=$(grep -o '"val_loss":[0-9.]*' "$out/llama/metrics.jsonl" | tail -1 | cut -d: -f2)
params() { grep -o '"params":[0-9]*' "$1/metrics.jsonl" | head -1 | cut -d: -f2; }
curve() { grep -o '"step":[0-9]*,"val_loss":[0-9.]*' "$1/metrics.jsonl" | sed 's/"step"://; s/,"val_loss":/ /' | awk '{ printf "%s%d: %.3f", (NR > 1 ? ", " : ""), $1, $2 }'; }
echo
echo "| run | command | result | bar |"
echo "|---|---|---|---|"
ok=0
awk -v a="$acc" 'BEGIN { exit !(a >= 0.92) }' && r=met || { r=missed; ok=1; }
echo "| ResNet ($(params "$out/resnet") parameters) | \`dtrain train ${RESNET[*]}\` | test accuracy $acc | >= 0.92: $r |"
awk -v a="$ll" -v b="$lg" 'BEGIN { exit !(a < b) }' && r=met || { r=missed; ok=1; }
echo "| GPT ($(params "$out/gpt") parameters) | \`dtrain train ${GPT[*]}\` | validation loss $lg | |"
echo "| LLaMA-style ($(params "$out/llama") parameters) | \`dtrain train ${LLAMA[*]}\` | validation loss $ll | below the GPT's: $r |"
echo
echo "Validation loss by step: GPT $(curve "$out/gpt"); LLaMA-style $(curve "$out/llama")."
grep -h 'trained' "$out"/*.log | sed 's/^/    /'
exit $ok
