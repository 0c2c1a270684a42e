#!/usr/bin/env bash
# Delay-tolerant asynchronous SGD (issue 14): the parameter server with 3 workers,
# one 3x and one 10x slower (--inject slow), 1 server; plain ASP, SSP:2, ASP with
# --staleness-lr and ASP with --dc-asgd LAMBDA, on the mlp (target: test accuracy)
# and a small gpt (target: validation loss), over SEEDS. Rank 0 (a fast worker)
# evaluates; the time to the target is its first evaluation line that reaches it.
# Prints markdown tables.
# Usage: [MODELS="mlp gpt"] bench/delay_tolerant.sh [BUILD_DIR] [SEEDS] [LAMBDA]
set -u
build=${1:-build}
seeds=${2:-"1 2 3"}
lambda=${3:-0.5}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'
SLOW="--inject slow:rank=1:factor=3 --inject slow:rank=2:factor=10"
MLP="--model mlp --hidden 128 --batch 96 --steps 300 --lr 0.1 --eval-every 20 --eval-max 2000 --quiet"
GPT="--model gpt --n-layer 2 --n-head 2 --n-embd 64 --block-size 64 --batch 12 --steps 150 --lr 3e-3 --warmup 10 --clip 0 --eval-every 10 --eval-max 32 --quiet"
# last KEY RUN: the run's last value of KEY; reach RUN KEY OP TARGET: the first
# time_s of an evaluation line whose KEY meets the target ("-": never)
last() { grep -o "\"$1\":[-0-9.e]*" "$2/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2; }
reach() { grep "\"$2\"" "$1/metrics.jsonl" 2>/dev/null | grep '"time_s"' | awk -v key="\"$2\"" -v op="$3" -v tgt="$4" -F'[:,}]' '
  { for (i = 1; i < NF; i++) { if ($i == key) v = $(i + 1); if ($i == "\"time_s\"") t = $(i + 1) }
    if (!done && ((op == ">=" && v >= tgt) || (op == "<=" && v <= tgt))) { printf "%.1f", t; done = 1 } }
  END { if (!done) printf "-" }'; }

# run MODEL METHOD SEED
bench() { local model=$1 method=$2 seed=$3 args
  [ "$model" = mlp ] && args=$MLP || args=$GPT
  case $method in
    asp) m="--consistency asp" ;;
    ssp2) m="--consistency ssp:2" ;;
    slr) m="--consistency asp --staleness-lr" ;;
    dc) m="--consistency asp --dc-asgd $lambda" ;;
  esac
  "$dt" train -n 4 --strategy ps --servers 1 $m $args $SLOW --seed "$seed" --out "$tmp/${model}_${method}_$seed" > /dev/null 2>&1 ||
    echo "run $model $method seed $seed failed" >&2
}

table() { local model=$1 key=$2 op=$3 tgt=$4
  echo; echo "## $model: time (s) to $key $op $tgt and the final $key, seeds $seeds (one 3x and one 10x slower worker)"
  echo "| method | time to target per seed | final $key per seed | mean final |"
  echo "|---|---|---|---|"
  for method in asp ssp2 slr dc; do
    local t="" f="" sum=0 n=0
    for s in $seeds; do
      local d="$tmp/${model}_${method}_$s" v
      t="$t $(reach "$d" "$key" "$op" "$tgt")"; v=$(last "$key" "$d"); f="$f ${v:--}"
      [ -n "$v" ] && { sum=$(awk -v a="$sum" -v b="$v" 'BEGIN { print a + b }'); n=$((n + 1)); }
    done
    local name=$method
    case $method in asp) name="ASP" ;; ssp2) name="SSP:2" ;; slr) name="ASP --staleness-lr" ;; dc) name="ASP --dc-asgd $lambda" ;; esac
    echo "| $name |$t |$f | $(awk -v a="$sum" -v n="$n" 'BEGIN { if (n) printf "%.4f", a / n; else print "-" }') |"
  done
}

models=${MODELS:-"mlp gpt"}
if [[ " $models " == *" mlp "* ]]; then
  for s in $seeds; do for method in asp ssp2 slr dc; do bench mlp $method "$s"; done; done
  table mlp test_acc ">=" 0.80
fi
if [[ " $models " == *" gpt "* ]]; then
  for s in $seeds; do for method in asp ssp2 slr dc; do bench gpt $method "$s"; done; done
  table gpt val_loss "<=" 3.30
fi
