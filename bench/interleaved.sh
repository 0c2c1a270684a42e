#!/usr/bin/env bash
# The interleaved 1F1B schedule (issue 20) against 1F1B, side by side.
# Bubble: stages of a fixed cost (--pp-stage-cost-us: 20 ms forward, 40 ms
# backward per micro-batch and stage, split evenly over a stage's chunks; the
# real compute is a tiny mlp), P = 2 and 4, V = 2, M = 4 and 8: the measured
# idle share of the step (mean over stages) against (P-1)/(VM+P-1), and the
# bubble over the ideal time, idle/(1-idle), against Megatron's (P-1)/(VM);
# the step time of each schedule.
# Step time: W2 (gpt defaults: 4 layers x 256, batch 16 x 128 tokens, AdamW)
# at -n 2 --pp 2, M = 4 and 8, 1F1B against interleaved V = 2 (partitions
# auto and uniform), for ROUNDS interleaved rounds: tokens/s, the ratio, and
# each run's measured idle share.
# (P = 4 on real compute would put 4 ranks on this machine's 2 cores.)
# Usage: bench/interleaved.sh [BUILD_DIR] [ROUNDS]    (about 6 minutes on 2 cores at 5 rounds)
set -u
build=$(cd "${1:-build}" && pwd) || exit 2
rounds=${2:-5}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

pf() { grep '"pipeline"' "$1/metrics.jsonl" | grep -o "\"$2\":[^]]*" | sed 's/.*\[//; s/.*://'; }
mean() { echo "$1" | tr ',' '\n' | awk '{ s += $1 } END { printf "%.4f", s / NR }'; }
ips() { grep -o '"items_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
train() { local o=$1; shift; rm -rf "$tmp/$o"
  "$dt" train "$@" --out "$tmp/$o" > "$tmp/$o.log" 2>&1 || { echo "run $o failed: $(tail -1 "$tmp/$o.log")"; exit 1; }; }

grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'
echo "# flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')$(nproc) cores"
echo
echo "## Bubble with stages of fixed cost"
echo "# dtrain train -n P --pp P --schedule 1f1b|interleaved --virtual-stages 2 --micro-batches M --pp-stage-cost-us 20000 --model mlp --hidden 32,32,32,32,32,32,32 --batch 32 --steps 3"
echo
echo "| P | M | schedule | idle share measured | (P-1)/(VM+P-1) | bubble / ideal measured | (P-1)/(VM) | pipeline span s/step |"
echo "|---|---|---|---|---|---|---|---|"
FIX="--pp-stage-cost-us 20000 --model mlp --hidden 32,32,32,32,32,32,32 --batch 32 --steps 3 --log-every 1 --quiet"
for P in 2 4; do
  for M in 4 8; do
    for V in 1 2; do
      s="1f1b"; [ $V = 2 ] && s="interleaved --virtual-stages 2"
      # shellcheck disable=SC2086
      train fix_${P}_${M}_$V -n $P --pp $P --schedule $s --micro-batches $M $FIX
      idle=$(mean "$(pf "$tmp/fix_${P}_${M}_$V" idle_frac)")
      busy=$(pf "$tmp/fix_${P}_${M}_$V" busy_s | tr ',' '\n' | sort -g | tail -1)
      awk -v P=$P -v M=$M -v V=$V -v i="$idle" -v b="$busy" -v s="${s%% *}" 'BEGIN {
        printf "| %d | %d | %s | %.4f | %.4f | %.4f | %.4f | %.3f |\n", P, M, s, i, (P-1)/(V*M+P-1), i/(1-i), (P-1)/(V*M), b / (1 - i) / 3 }'
    done
  done
done
echo
W2="--model gpt --batch 16 --steps 12 --warmup 2 --eval-max 1 --log-every 1000 --quiet"
IL="--schedule interleaved --virtual-stages 2"
echo "## W2 at -n 2 --pp 2: interleaved (V = 2) against 1F1B ($rounds interleaved rounds)"
echo "# dtrain train -n 2 --pp 2 --micro-batches M --pp-partition auto|uniform [$IL] $W2"
echo "# (W2's 7 blocks: embedding, 4 layers, head, loss; uniform cuts them by count: with 4 chunks"
echo "# the embedding is a chunk of its own; auto cuts by measured block times)"
echo
echo "| round | M | 1F1B auto tokens/s | idle | interleaved uniform tokens/s | idle | ratio | interleaved auto tokens/s | idle | ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|"
ru4="" ru8="" ra4="" ra8=""
for r in $(seq "$rounds"); do
  for M in 4 8; do
    # shellcheck disable=SC2086
    train w_1_$M -n 2 --pp 2 --micro-batches $M --pp-partition auto $W2
    # shellcheck disable=SC2086
    train w_u_$M -n 2 --pp 2 --micro-batches $M $IL $W2
    # shellcheck disable=SC2086
    train w_a_$M -n 2 --pp 2 --micro-batches $M $IL --pp-partition auto $W2
    a=$(ips "$tmp/w_1_$M"); b=$(ips "$tmp/w_u_$M"); c=$(ips "$tmp/w_a_$M")
    x=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }'); y=$(awk -v a="$a" -v b="$c" 'BEGIN { printf "%.3f", b / a }')
    if [ $M = 4 ]; then ru4="$ru4 $x" ra4="$ra4 $y"; else ru8="$ru8 $x" ra8="$ra8 $y"; fi
    echo "| $r | $M | $(printf %.0f "$a") | $(mean "$(pf "$tmp/w_1_$M" idle_frac)") | $(printf %.0f "$b") |" \
         "$(mean "$(pf "$tmp/w_u_$M" idle_frac)") | ${x}x | $(printf %.0f "$c") | $(mean "$(pf "$tmp/w_a_$M" idle_frac)") | ${y}x |"
  done
done
echo
range() { echo "$2" | tr ' ' '\n' | sed '/^$/d' | sort -n |
  awk -v what="$1" '{ v[NR] = $1 } END { printf "%s: %.3fx to %.3fx, median %.3fx\n", what, v[1], v[NR], v[int((NR + 1) / 2)] }'; }
range "interleaved (auto) / 1F1B (auto) throughput, M = 4" "$ra4"
range "interleaved (auto) / 1F1B (auto) throughput, M = 8" "$ra8"
range "interleaved (uniform) / 1F1B (auto) throughput, M = 4" "$ru4"
range "interleaved (uniform) / 1F1B (auto) throughput, M = 8" "$ru8"
