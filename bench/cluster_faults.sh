#!/usr/bin/env bash
# The longer fault matrix on the emulated cluster (docs/CLUSTER.md), as root,
# each case bounded in time; tests/test_cluster.sh keeps the short ones in
# `make test`. Prints one line per case with what it measured.
#  1. a slow link: node2 at 10 Mbit/s, node1 at 1 Gbit/s: the run completes and
#     its timers show the exposed communication; --balance dynamic and the
#     parameter server under SSP against their synchronous counterparts;
#  2. a skewed clock: node2's wall clock 90 s ahead (libfaketime), a rank on
#     node1 hangs: one hang report, naming the late rank;
#  3. Slurm: a --requeue batch job across both nodes; node2 set DOWN while it
#     runs; the job is requeued and finishes from its checkpoint;
#  4. the parameter server's host (node2, the server and a worker) killed with
#     its disk under the supervisor, checkpoints on per-host disks with one
#     replica: the job finishes on node1 (1 worker, 1 server), bitwise equal to
#     an uninterrupted run of that layout from the same checkpoint.
# Usage: bench/cluster_faults.sh [BUILD_DIR]
set -u
build=$(cd "${1:-build}" && pwd)
dt="$build/dtrain"
root=$(cd "$(dirname "$0")/.." && pwd)
cl=$root/scripts/cluster.sh
[ "$(id -u)" -eq 0 ] || { echo "bench/cluster_faults.sh: needs root (network namespaces)" >&2; exit 2; }
tmp=$(mktemp -d); chmod 755 "$tmp"
export DTRAIN_CLUSTER_DIR=$tmp/cluster
S=$DTRAIN_CLUSTER_DIR
trap '"$cl" down; rm -rf "$tmp"' EXIT
ips() { grep -o '"items_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
field() { grep '"memory"' "$1/metrics.jsonl" | sed "s/.*\"$2\":\([0-9.]*\).*/\1/"; }
on1() { "$cl" exec node1 "$@"; }

slurm=--slurm; command -v slurmctld > /dev/null || slurm=
"$cl" up --hosts 2 --slots 2 --rate 1gbit $slurm > /dev/null || exit 1
printf 'node1 slots=1\nnode2 slots=1\n' > "$tmp/h2"
# the parameter server is the last rank: node2's worker is rank 0, node1 holds a worker and the server
printf 'node2 slots=1\nnode1 slots=2\n' > "$tmp/h3"
want() { case " ${FAULTS:-1 2 3 4} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if want 1; then
echo "## 1. node2's link at 10 Mbit/s (node1 at 1 Gbit/s)"
"$cl" link node2 rate 10mbit
M="--model mlp --hidden 256 --batch 128 --steps 30 --lr 0.05 --log-every 10 --eval-max 1 --quiet"
s=$SECONDS; on1 "$dt" train --hostfile "$tmp/h2" -n 2 $M --trace "$tmp/slow.json" --out "$tmp/slow" > "$tmp/slow.log" 2>&1; rc=$?
echo "- data parallel, 2 hosts x 1 rank: exit $rc in $((SECONDS - s)) s, $(ips "$tmp/slow") samples/s; communication $(field "$tmp/slow" comm_s) s of which exposed $(field "$tmp/slow" comm_exposed_s) s; trace $(stat -c %s "$tmp/slow.json" 2>/dev/null) bytes"
on1 "$dt" train --hostfile "$tmp/h2" -n 2 $M --balance dynamic --out "$tmp/bal" > "$tmp/bal.log" 2>&1
echo "- --balance dynamic: exit $? , $(ips "$tmp/bal") samples/s (the slow link is in the all-reduce, which no sample split can shorten)"
P="--model mlp --hidden 256 --batch 128 --steps 60 --lr 0.05 --log-every 10 --eval-max 1 --quiet --strategy ps --servers 1"
for cons in bsp ssp:2 asp; do
  on1 "$dt" train --hostfile "$tmp/h3" -n 3 $P --consistency $cons --out "$tmp/ps_${cons%%:*}" > "$tmp/ps.log" 2>&1
  echo "- parameter server (a worker on node2 behind the slow link; the server and a worker on node1), $cons: exit $?, $(ips "$tmp/ps_${cons%%:*}") samples/s"
done
"$cl" link node2 rate 1gbit
fi

if want 2; then
echo "## 2. node2's wall clock 90 s ahead; rank 0 (node1) hangs at step 3"
"$cl" skew node2 +90s
on1 "$dt" train --hostfile "$S/hostfile" -n 4 --model mlp --hidden 32 --batch 64 --steps 6 --timeout 3 --inject hang:rank=0:step=3 \
  --out "$tmp/skew" > "$tmp/skew.log" 2>&1; rc=$?
n=$(grep -c "timed out" "$tmp/skew.log")
echo "- exit $rc, $n report(s): $(grep -o 'ranks* [0-9, ]* reached it.*' "$tmp/skew.log" | head -1)"
echo "  node2's clock inside the cluster: $("$cl" exec node2 date +%T), node1's: $("$cl" exec node1 date +%T)"
"$cl" skew node2 0
fi
if want 4; then
echo "## 4. the parameter server's host killed with its disk (checkpoints on per-host disks, 1 replica)"
B="--model mlp --hidden 64 --batch 64 --steps 300 --lr 0.05 --log-every 100 --eval-every 0 --strategy ps --servers 1 --consistency bsp --timeout 10"
s=$SECONDS
on1 "$dt" train --hostfile "$S/hostfile" $B --ckpt-every 25 --ckpt-keep 0 --ckpt-dir "$S/local/ck4" --ckpt-replicas 1 --max-restarts 1 \
  --restart-backoff 0.1 --inject slow:rank=0:factor=3 --out "$tmp/pskill" > "$tmp/pskill.log" 2>&1 &
job=$!
for _ in $(seq 600); do [ -f "$S/hosts/node2/local/ck4/ckpt-0000000050/manifest.json" ] && break; sleep 0.1; done
"$cl" kill node2 --wipe; killed=$SECONDS
wait $job; rc=$?
from=$(grep -o 'resuming the parameter server from [^ ]*' "$tmp/pskill.log" | head -1 | awk '{print $6}')
on1 "$dt" train -n 2 $B --resume "$S/local/ck4/$(basename "$from")" --out "$tmp/pskref" > "$tmp/pskref.log" 2>&1
same=no; cmp -s "$tmp/pskill/model.safetensors" "$tmp/pskref/model.safetensors" && same=yes
echo "- exit $rc ($((SECONDS - s)) s, node2 killed at +$((killed - s)) s); $(grep -o 'parameter server: 1 server, 1 worker' "$tmp/pskill.log" | head -1) after the restart; resumed from $(basename "$from"); $(grep -o 'resuming: [0-9]* of the checkpoint.s files from this host.s memory' "$tmp/pskill.log" | head -1); bitwise equal to the uninterrupted 2-rank run from it: $same"
"$cl" boot node2 > /dev/null
fi
want 3 || exit 0

if [ -z "$slurm" ]; then echo "## 3. Slurm: skipped (slurm-wlm and munge are not installed)"; exit 0; fi
echo "## 3. Slurm: a --requeue job, node2 set DOWN while it runs"
mkdir -p "$S/shared/job"; cd "$S/shared/job" || exit 1
ck=$S/shared/job/ck
job=$("$cl" exec node1 env DTRAIN="$dt" CKPT="$ck" OUT="$S/shared/job/out" \
      DTRAIN_FLAGS="--steps 400 --ckpt-every 50 --log-every 50 --inject slow:rank=0:factor=4" \
      sbatch --parsable "$root/docs/slurm/dtrain.sbatch")
s=$SECONDS
for _ in $(seq 600); do [ -f "$ck/ckpt-0000000100/manifest.json" ] && break; sleep 0.1; done
"$cl" exec node1 scontrol update nodename=node2 state=down reason=bench
down_at=$SECONDS
# Until the job has finished (its output says so), at most 4 minutes: a
# requeued job waits for its BeginTime (about 2 minutes); a bounded run starts
# it at once.
for _ in $(seq 1200); do
  grep -q '^trained' "$S/shared/job"/dtrain-*.out 2>/dev/null && break
  st=$("$cl" exec node1 squeue -h -j "$job" -o '%T %r' 2>&1)
  [ "$st" = "PENDING BeginTime" ] && "$cl" exec node1 scontrol update jobid="$job" starttime=now
  [ -n "${DEBUG:-}" ] && echo "  +$((SECONDS - s)) s: $st" >&2
  sleep 0.2
done
out=$(ls "$S/shared/job"/dtrain-*.out 2>/dev/null | head -1)
echo "- job $job: $(grep -c 'restart count' "$out") start(s) ($(grep -o 'restart count [0-9]*' "$out" | tr '\n' ' ')), $(grep -o 'resuming from [^ ]*' "$out" | head -1), finished: $(grep -c '^trained' "$out") ($((SECONDS - s)) s in all, requeued after node2 went down at +$((down_at - s)) s)"
grep -E '^trained|resuming' "$out" | sed 's/^/  /'
