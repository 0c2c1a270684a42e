#!/usr/bin/env bash
# dtrain rl (issue 14, synchronous mode): environment steps per second with 1, 2
# and 4 actor ranks (16 CartPole copies each, unroll 16) against one process
# doing everything, interleaved, ROUNDS rounds; then the time to solve CartPole
# (greedy return >= 475 over 100 episodes, evaluated every 100 updates) per
# seed, one process and 2 actors. Prints markdown.
# Usage: bench/rl.sh [BUILD_DIR] [ROUNDS] [SEEDS]
set -u
build=${1:-build}
rounds=${2:-3}
seeds=${3:-"1 2 3"}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'; echo "# cores: $(nproc)"
sps() { grep -o '"env_steps_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
echo; echo "## Environment steps per second (200 updates, median and range over $rounds rounds)"
echo "| layout | steps/s | range | vs one process |"; echo "|---|---|---|---|"
for r in $(seq "$rounds"); do
  for n in 1 2 3 5; do
    "$dt" rl -n $n --env cartpole --updates 200 --eval-every 0 --eval-episodes 1 --quiet --out "$tmp/t$n" > /dev/null 2>&1
    echo "$n $(sps "$tmp/t$n")" >> "$tmp/sps"
  done
done
one=$(awk '$1 == 1 { print $2 }' "$tmp/sps" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
for n in 1 2 3 5; do
  awk -v n=$n '$1 == n { print $2 }' "$tmp/sps" | sort -g | awk -v n=$n -v one="$one" '{ v[++k] = $1 } END { m = v[int((k + 1) / 2)];
    name = n == 1 ? "one process" : sprintf("learner + %d actor%s", n - 1, n > 2 ? "s" : "");
    printf "| %s | %.0f | %.0f-%.0f | %.2fx |\n", name, m, v[1], v[k], m / one }'
done
echo; echo "## Time to solve (greedy return >= 475 over 100 episodes), seeds $seeds"
echo "| layout | seconds (env steps) to solve per seed | final return per seed |"; echo "|---|---|---|"
for n in ${SOLVE_LAYOUTS:-1 3}; do
  t=""; f=""
  for s in $seeds; do
    "$dt" rl -n $n --env cartpole --updates 2000 --eval-every 100 --eval-episodes 100 --seed "$s" --quiet --out "$tmp/s" > /dev/null 2>&1
    t="$t $(grep '"eval_return"' "$tmp/s/metrics.jsonl" | grep '"update"' | awk -F'[:,}]' '{ for (i = 1; i < NF; i++) { if ($i == "\"eval_return\"") r = $(i+1); if ($i == "\"time_s\"") x = $(i+1); if ($i == "\"env_steps\"") e = $(i+1) } if (!d && r >= 475) { printf "%.1f (%d)", x, e; d = 1 } } END { if (!d) printf "-" }')"
    f="$f $(grep -o '"eval_return":[0-9.]*' "$tmp/s/metrics.jsonl" | tail -1 | cut -d: -f2)"
  done
  echo "| $([ $n = 1 ] && echo "one process" || echo "learner + 2 actors") |$t |$f |"
done
