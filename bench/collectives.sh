#!/usr/bin/env bash
# The topology-aware collectives against Open MPI's MPI_Allreduce (issue 13),
# side by side in each round, ROUNDS rounds:
#   1. one host, 2 ranks: shm against native and against one core's memcpy, 4 KiB-64 MiB;
#   2. one host, 4 ranks on the 2 cores: shm against native;
#   3. (root, iproute2) the emulated cluster, 2 hosts x 2 ranks at 1 Gbit/s,
#      64 MiB: hier against our flat ring and native; bytes on node1's link.
#   4. `dtrain bench allreduce --fit` on the cluster (or on one host).
# Prints markdown tables: per size the ratio's median and range over rounds.
# Usage: bench/collectives.sh [BUILD_DIR] [ROUNDS]
set -u
build=$(cd "${1:-build}" && pwd)
rounds=${2:-3}
dt="$build/dtrain"
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); chmod 755 "$tmp"
cl=$root/scripts/cluster.sh
export DTRAIN_CLUSTER_DIR=$tmp/cluster
trap '[ -e "$DTRAIN_CLUSTER_DIR" ] && "$cl" down; rm -rf "$tmp"' EXIT
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'
echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o 'avx512[a-z_]*\|avx2\|fma\|bmi2' | sort -u | tr '\n' ' ')"

# summary FILE: "bytes ratio" lines of every round -> "bytes median min max" per size
summary() {
  sort -n -k1,1 -k2,2g "$1" | awk '{ r[$1] = r[$1] " " $2 } END { for (b in r) { n = split(r[b], v, " ");
      printf "%d %s %s %s\n", b, v[int((n + 1) / 2)], v[1], v[n] } }' | sort -n
}
human() { awk '{ b = $1; u = "B"; if (b >= 1048576) { b /= 1048576; u = "MiB" } else if (b >= 1024) { b /= 1024; u = "KiB" }
  printf "| %g %s | %.2f | %.2f-%.2f |\n", b, u, $2, $3, $4 }'; }

one_host() { # NP
  local np=$1 r
  : > "$tmp/native_$np"; : > "$tmp/memcpy_$np"
  for r in $(seq "$rounds"); do
    "$dt" bench allreduce -n "$np" --algo shm --min-bytes 4K --max-bytes 64M > "$tmp/round" 2>&1 || { cat "$tmp/round"; return 1; }
    # columns: bytes count | shm us algbw busbw | native us algbw busbw | memcpy
    awk '$1 ~ /^[0-9]+$/ { print $1, $6 / $10 >> "'"$tmp/native_$np"'"; print $1, $6 / $12 >> "'"$tmp/memcpy_$np"'" }' "$tmp/round"
    echo "round $r, -n $np: $(awk '$1 == 67108864 { print "64 MiB shm " $6 " GB/s busbw, native " $10 ", memcpy " $12 }' "$tmp/round")" >&2
  done
}

echo; echo "## One host, 2 ranks: shm busbw / native busbw (median, range over $rounds rounds)"
one_host 2 && { echo "| size | shm / native | range |"; echo "|---|---|---|"; summary "$tmp/native_2" | human
  echo; echo "shm busbw / one core's memcpy bandwidth, same round:"; echo "| size | shm / memcpy | range |"; echo "|---|---|---|"
  summary "$tmp/memcpy_2" | human; }
echo; echo "## One host, 4 ranks on $(nproc) cores: shm busbw / native busbw"
one_host 4 && { echo "| size | shm / native | range |"; echo "|---|---|---|"; summary "$tmp/native_4" | human; }

if [ "$(id -u)" -ne 0 ] || ! command -v ip > /dev/null; then
  echo; echo "## Cluster: skipped (needs root and iproute2)"; exit 0
fi
hf=$("$cl" up --hosts 2 --slots 2 --rate 1gbit 2> /dev/null) || { echo "## Cluster: scripts/cluster.sh up failed"; exit 0; }
tx() { "$cl" exec node1 cat /sys/class/net/cl0/statistics/tx_bytes; }
echo; echo "## Emulated cluster, 2 hosts x 2 ranks, 1 Gbit/s links, 64 MiB (3 timed calls each, $rounds rounds)"
echo "| round | hier ms | ring ms | native ms | hier / ring | hier / native | node1 tx per hier call / theory n |"
echo "|---|---|---|---|---|---|---|"
for r in $(seq "$rounds"); do
  "$cl" exec node1 "$dt" bench allreduce --hostfile "$hf" -n 4 --algo ring --min-bytes 64M --max-bytes 64M --iters 3 > "$tmp/ring" 2>&1
  b0=$(tx)
  "$cl" exec node1 "$dt" bench allreduce --hostfile "$hf" -n 4 --algo hier --alone --min-bytes 64M --max-bytes 64M --iters 3 > "$tmp/hier" 2>&1
  sent=$(( $(tx) - b0 ))
  h=$(awk '$1 == 67108864 { print $4 / 1000 }' "$tmp/hier")
  read -r g n < <(awk '$1 == 67108864 { print $4 / 1000, $8 / 1000 }' "$tmp/ring")
  awk -v r="$r" -v h="$h" -v g="$g" -v n="$n" -v s="$sent" 'BEGIN { printf "| %d | %.0f | %.0f | %.0f | %.2fx | %.2fx | %.4f |\n", r, h, g, n, g / h, n / h, s / 5 / 67108864 }'
done
echo; echo "## Cost model on the cluster (\`dtrain bench allreduce --fit\`)"
echo '```'
"$cl" exec node1 "$dt" bench allreduce --hostfile "$hf" -n 4 --fit 2>&1
echo '```'
