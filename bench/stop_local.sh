#!/usr/bin/env bash
# Stopping well (issue 22), on this machine through dtrain's own launcher: for
# each strategy, an uninterrupted run against the same run sent SIGTERM half
# way and resumed with --resume auto, ROUNDS interleaved rounds. Prints the
# stop's latency (the signal to the job's end, checkpoint included) and the
# time lost per stop ((stopped + resumed) - uninterrupted: the stop, the
# second start-up, the checkpoint's verification), median and range. Markdown.
# Usage: bench/stop_local.sh [BUILD_DIR] [ROUNDS]
set -u
build=${1:-build}
rounds=${2:-3}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'
echo "# flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')cores: $(nproc)"
now() { date +%s.%N; }
M="--model mlp --hidden 256 --eval-every 0 --quiet"
declare -A CMD=(
  [sync_n2]="train $M --steps 6000 -n 2"
  [sync_n4_zero1]="train $M --steps 4000 -n 4 --zero 1"
  [ps_bsp_n3]="train $M --steps 3000 -n 3 --strategy ps"
  [hogwild_t2]="train $M --steps 12000 --strategy hogwild --threads 2"
  [rl_n3]="rl --env cartpole --updates 4000 --eval-every 0 --quiet -n 3"
)
CASES="sync_n2 sync_n4_zero1 ps_bsp_n3 hogwild_t2 rl_n3"
for r in $(seq "$rounds"); do
  for k in $CASES; do
    rm -rf "$tmp/$k"*
    t0=$(now); "$dt" ${CMD[$k]} --out "$tmp/${k}_ref" > /dev/null 2>&1; t1=$(now)
    full=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
    t0=$(now); "$dt" ${CMD[$k]} --out "$tmp/$k" > "$tmp/$k.log" 2>&1 & pid=$!
    sleep "$(awk -v f="$full" 'BEGIN { print f / 2 }')"; ts=$(now); kill -TERM $pid; wait $pid; rc=$?; t1=$(now)
    t2=$(now); "$dt" ${CMD[$k]} --out "$tmp/$k" --resume auto > /dev/null 2>&1; t3=$(now)
    [ $rc -eq 75 ] || { echo "# $k round $r: rc $rc, not stopped: $(tail -1 "$tmp/$k.log")"; continue; }
    awk -v k="$k" -v full="$full" -v a="$t0" -v s="$ts" -v b="$t1" -v c="$t2" -v d="$t3" \
      'BEGIN { printf "%s %.3f %.3f %.3f\n", k, b - s, (b - a) + (d - c) - full, full }' >> "$tmp/res"
  done
done
med() { sort -g | awk '{ v[NR] = $1 } END { printf "%.2f (%.2f-%.2f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
echo; echo "| case | uninterrupted (s) | signal to exit (s) | time lost per stop (s) |"; echo "|---|---|---|---|"
for k in $CASES; do
  grep -q "^$k " "$tmp/res" 2>/dev/null || continue
  echo "| \`dtrain ${CMD[$k]}\` | $(awk -v k="$k" '$1 == k { print $4 }' "$tmp/res" | med) | $(awk -v k="$k" '$1 == k { print $2 }' "$tmp/res" | med) | $(awk -v k="$k" '$1 == k { print $3 }' "$tmp/res" | med) |"
done
