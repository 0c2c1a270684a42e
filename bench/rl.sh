#!/usr/bin/env bash
# dtrain rl (issue 14): environment steps per second with 1, 2 and 4 actor ranks
# (16 CartPole copies each, unroll 16), synchronous and --async (IMPALA), against
# one process doing everything, interleaved, ROUNDS rounds; then the time to
# solve CartPole (greedy return >= 475 over 100 episodes, evaluated every 100
# updates) per seed: one process, 2 actors synchronous and asynchronous; the
# same for Acrobot (greedy return >= -100 over 100 episodes, Gym's "solved"
# bar, evaluated every 10 updates; 500 updates). Prints markdown.
# Usage: bench/rl.sh [BUILD_DIR] [ROUNDS] [SEEDS]
# PARTS (env): which parts, of "sps cartpole acrobot" (all by default).
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
case " ${PARTS:-sps cartpole acrobot} " in *" sps "*)
echo; echo "## Environment steps per second (200 updates, median and range over $rounds rounds)"
echo "| layout | steps/s | range | vs one process |"; echo "|---|---|---|---|"
LAYOUTS="1 2 3 5 2a 3a 5a"   # N: synchronous on N ranks; Na: --async
for r in $(seq "$rounds"); do
  for l in $LAYOUTS; do
    n=${l%a}; a=; [ "$l" != "$n" ] && a=--async
    "$dt" rl -n $n $a --env cartpole --updates 200 --eval-every 0 --eval-episodes 1 --quiet --out "$tmp/t$l" > /dev/null 2>&1
    echo "$l $(sps "$tmp/t$l")" >> "$tmp/sps"
  done
done
one=$(awk '$1 == 1 { print $2 }' "$tmp/sps" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
for l in $LAYOUTS; do
  awk -v l=$l '$1 == l { print $2 }' "$tmp/sps" | sort -g | awk -v l=$l -v one="$one" '{ v[++k] = $1 } END { m = v[int((k + 1) / 2)];
    n = l + 0; name = n == 1 ? "one process" : sprintf("learner + %d actor%s%s", n - 1, n > 2 ? "s" : "", l ~ /a/ ? ", async" : ", sync");
    printf "| %s | %.0f | %.0f-%.0f | %.2fx |\n", name, m, v[1], v[k], m / one }'
done
;;
esac
# solve ENV BAR UPDATES EVAL_EVERY TITLE [held]: per layout and seed, the time
# (env steps) of the first evaluation at or above BAR, and the last evaluation;
# with "held", also how many of the evaluations from that one on were at or above BAR.
solve() {
  local env=$1 bar=$2 updates=$3 every=$4 held=${6:-}
  echo; echo "## $5, seeds $seeds"
  echo "| layout | seconds (env steps) to solve per seed | final return per seed |${held:+ evaluations at or above $bar from then on |}"
  echo "|---|---|---|${held:+---|}"
  for l in ${SOLVE_LAYOUTS:-1 3 3a}; do
    n=${l%a}; a=; [ "$l" != "$n" ] && a=--async
    t=""; f=""; h=""
    for s in $seeds; do
      rm -rf "$tmp/s"
      "$dt" rl -n $n $a --env $env --updates $updates --eval-every $every --eval-episodes 100 --seed "$s" --quiet --out "$tmp/s" > /dev/null 2>&1
      t="$t $(grep '"eval_return"' "$tmp/s/metrics.jsonl" | grep '"update"' | awk -F'[:,}]' -v bar="$bar" '{ for (i = 1; i < NF; i++) { if ($i == "\"eval_return\"") r = $(i+1); if ($i == "\"time_s\"") x = $(i+1); if ($i == "\"env_steps\"") e = $(i+1) } if (!d && r >= bar) { printf "%.1f (%d)", x, e; d = 1 } } END { if (!d) printf "-" }')"
      f="$f $(grep -o '"eval_return":[-0-9.]*' "$tmp/s/metrics.jsonl" | tail -1 | cut -d: -f2)"
      [ -n "$held" ] && h="$h $(grep '"update"' "$tmp/s/metrics.jsonl" | grep -o '"eval_return":[-0-9.]*' | cut -d: -f2 |
        awk -v bar="$bar" '$1 >= bar { d = 1 } d { n++; k += $1 >= bar } END { printf "%d/%d", k, n }')"
    done
    echo "| $([ $n = 1 ] && echo "one process" || echo "learner + 2 actors")${a:+, async} |$t |$f |${held:+$h |}"
  done
}
parts=${PARTS:-sps cartpole acrobot}
case " $parts " in *" cartpole "*) solve cartpole 475 2000 100 "Time to solve (greedy return >= 475 over 100 episodes)" ;; esac
case " $parts " in *" acrobot "*) solve acrobot -100 500 10 "Acrobot: time to a greedy return >= -100 over 100 episodes (evaluated every 10 updates)" held ;; esac
