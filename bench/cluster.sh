#!/usr/bin/env bash
# dtrain on the emulated cluster (scripts/cluster.sh, docs/CLUSTER.md), as root:
#  1. data-parallel W1 and W2 on 2 hosts x 1 rank with 10 Gbit/s, 1 Gbit/s and
#     100 Mbit/s links, against 1 host x 2 ranks: throughput, communication
#     (total and exposed, dtrain's own timers) and bytes per step on node2's
#     link, read from its veth counters;
#  2. checkpoints on each host's own disk with one replica on the other host
#     (--ckpt-replicas 1, 1 Gbit/s) against no checkpoint;
#  3. the time from a host kill to training again (supervisor, hostfile probe,
#     resume from the replicas).
# Best of ROUNDS interleaved runs. Usage: bench/cluster.sh [BUILD_DIR] [ROUNDS]
set -eu
build=$(cd "${1:-build}" && pwd)
rounds=${2:-2}
dt="$build/dtrain"
cl=$(cd "$(dirname "$0")/.." && pwd)/scripts/cluster.sh
[ "$(id -u)" -eq 0 ] || { echo "bench/cluster.sh: needs root (network namespaces)" >&2; exit 2; }
tmp=$(mktemp -d)
chmod 755 "$tmp"
export DTRAIN_CLUSTER_DIR=$tmp/cluster
S=$DTRAIN_CLUSTER_DIR
trap '"$cl" down; rm -rf "$tmp"' EXIT
"$cl" up --hosts 2 --slots 2 --rate 1gbit > /dev/null
printf 'node1 slots=1\nnode2 slots=1\n' > "$tmp/hosts2x1"

W1="--model mlp --batch 256 --steps 60 --lr 0.1 --eval-max 1 --log-every 1000 --quiet"
W2="--model gpt --batch 16 --steps 8 --warmup 2 --eval-max 16 --log-every 1000 --quiet"
ips() { grep -o '"items_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
field() { grep '"memory"' "$1/metrics.jsonl" | sed "s/.*\"$2\":\([0-9.]*\).*/\1/"; }
best() { awk -v a="$1" -v b="$2" 'BEGIN{print (a > b ? a : b)}'; }
wire() { echo $(( $("$cl" exec node2 cat /sys/class/net/cl0/statistics/tx_bytes) + $("$cl" exec node2 cat /sys/class/net/cl0/statistics/rx_bytes) )); }
rate() { "$cl" link node1 rate "$1"; "$cl" link node2 rate "$1"; }
# run OUT N_OR_HOSTFILE FLAGS...: one run on node1 (prints nothing)
run() { local out=$1 where=$2; shift 2
  if [ "$where" = 2 ]; then set -- -n 2 "$@"; else set -- --hostfile "$where" -n 2 "$@"; fi
  "$cl" exec node1 "$dt" train "$@" --out "$tmp/$out" > "$tmp/$out.log" 2>&1 ||
    { echo "bench/cluster.sh: run $out failed:" >&2; tail -5 "$tmp/$out.log" >&2; exit 1; }; }

echo "## W1 and W2 across 2 hosts x 1 rank against 1 host x 2 ranks"
echo
echo "| workload | links | items/s | vs 1 host | communication (s) | exposed (s) | bytes per step on node2's link |"
echo "|---|---|---|---|---|---|---|"
for w in ${BENCH_W-W1 W2}; do
  args=${!w}; steps=$(sed 's/.*--steps \([0-9]*\).*/\1/' <<<"$args")
  one=0
  for r in $(seq "$rounds"); do run one 2 $args; one=$(best "$one" "$(ips "$tmp/one")"); done
  printf '| %s | 1 host (shared memory) | %.0f | 1.00x | %s | %s | - |\n' "$w" "$one" "$(field "$tmp/one" comm_s)" "$(field "$tmp/one" comm_exposed_s)"
  for rt in 10gbit 1gbit 100mbit; do
    rate $rt
    b=0; bytes=0
    for r in $(seq "$rounds"); do
      w0=$(wire); run two "$tmp/hosts2x1" $args; w1=$(wire)
      b=$(best "$b" "$(ips "$tmp/two")"); bytes=$(( (w1 - w0) / steps ))
    done
    awk -v w=$w -v rt=$rt -v b="$b" -v a="$one" -v c="$(field "$tmp/two" comm_s)" -v e="$(field "$tmp/two" comm_exposed_s)" -v by="$bytes" \
      'BEGIN { printf "| %s | 2 hosts, %s | %.0f | %.2fx | %s | %s | %.2f MB |\n", w, rt, b, b / a, c, e, by / 1e6 }'
  done
done
rate 1gbit

echo
echo "## Checkpoints on each host's disk with a replica on the other (1 Gbit/s)"
echo
echo "| workload | checkpoint every | without (items/s) | with, R=1 (items/s) | overhead | replica traffic |"
echo "|---|---|---|---|---|---|"
# (as bench/ckpt_overhead.sh: W1 every 50 steps, W2 every 10; longer runs, so
# that the checkpoint at the last step weighs as little as there)
for spec in "W1 50 200" "W2 10 30"; do
  set -- $spec; w=$1; every=$2; args="${!w} --zero 1 --steps $3"
  a=0; b=0
  for r in $(seq "$rounds"); do
    run plain "$tmp/hosts2x1" $args; a=$(best "$a" "$(ips "$tmp/plain")")
    "$cl" exec node1 rm -rf "$S/local/ck"; "$cl" exec node2 rm -rf "$S/local/ck"
    run ckpt "$tmp/hosts2x1" $args --ckpt-dir "$S/local/ck" --ckpt-every "$every" --ckpt-replicas 1
    b=$(best "$b" "$(ips "$tmp/ckpt")")
  done
  rep=$(awk -v b="$(field "$tmp/ckpt" ckpt_replica_bytes)" 'BEGIN { printf "%.1f MB", b / 1e6 }')
  awk -v w=$w -v e=$every -v a="$a" -v b="$b" -v rep="$rep" \
    'BEGIN { printf "| %s | %d steps | %.0f | %.0f | %.1f%% | %s in the run |\n", w, e, a, b, 100 * (a - b) / a, rep }'
done

echo
echo "## From a host kill to training again"
echo
# W1 on 2 hosts x 2 ranks, a checkpoint every 20 steps with one replica; node2
# is killed (link down, processes killed, disk wiped) once step 40's checkpoint
# is on its disk; the clock stops at the resumed attempt's first logged step.
K="--model mlp --batch 256 --steps 400 --lr 0.1 --eval-max 1 --log-every 1 --quiet --zero 1 --ckpt-every 20 --timeout 10"
for r in $(seq "$rounds"); do
  "$cl" exec node1 rm -rf "$S/local/ck"; "$cl" exec node2 rm -rf "$S/local/ck"; rm -rf "$tmp/kill"
  "$cl" exec node1 "$dt" train --hostfile "$S/hostfile" $K --ckpt-dir "$S/local/ck" --ckpt-replicas 1 --max-restarts 1 \
    --restart-backoff 0.1 --out "$tmp/kill" > "$tmp/kill.log" 2>&1 &
  job=$!
  for _ in $(seq 600); do [ -f "$S/hosts/node2/local/ck/ckpt-0000000040/manifest.json" ] && break; sleep 0.05; done
  t0=$(date +%s.%N); "$cl" kill node2 --wipe
  for _ in $(seq 2000); do grep -q '"ranks":2' "$tmp/kill/metrics.jsonl" 2>/dev/null && break; sleep 0.02; done
  t1=$(date +%s.%N)
  wait $job || true
  from=$(grep -o 'resuming from [^ ]*' "$tmp/kill.log" | head -1)
  awk -v a="$t0" -v b="$t1" -v f="$from" 'BEGIN { printf "- round: %.2f s from the kill to the first step on the host left (%s)\n", b - a, f }'
  "$cl" boot node2
done
