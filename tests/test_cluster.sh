#!/usr/bin/env bash
# The emulated cluster (scripts/cluster.sh, issue 12): its refusals; 2 hosts x
# 2 ranks train exactly as 4 ranks on one host (pretending 2 hosts); the
# hierarchical all-reduce puts its theoretical bytes on the links (issue 13) and
# trains as one rank with ZeRO 0, 1, 2; a host that dies under the
# supervisor is named with its ranks and the job finishes on the host left,
# bitwise equal to an uninterrupted run on that layout from the same
# checkpoint; a host that hangs (power loss: link down, processes frozen) is
# named by the hang report and left out; a link that comes back within the
# deadline costs time only. Needs root, iproute2 and namespaces; says why when
# it skips. The cluster is taken down on every exit path.
source "$(dirname "$0")/lib.sh" "$@"
chmod 755 "$tmp"
cl=$(cd .. && pwd)/scripts/cluster.sh
export DTRAIN_CLUSTER_DIR=$tmp/cluster
S=$DTRAIN_CLUSTER_DIR
# one_line RC WANT PATTERN ERR: exit status WANT and one stderr line matching PATTERN
one_line() { [ "$1" -eq "$2" ] && [ "$(wc -l <<<"$4")" -eq 1 ] && grep -q -- "$3" <<<"$4"; }
refused() { local name=$1 pat=$2; shift 2; local err rc
  err=$("$cl" "$@" 2>&1 >/dev/null); rc=$?
  if one_line $rc 2 "$pat" "$err"; then ok "$name: $err"; else fail "$name: rc=$rc:"; indent <<<"$err"; fi; }

refused "too many hosts" "--hosts expects 1 to 8" up --hosts 9
refused "no netem" "no netem" up --latency 5
refused "bad rate" "--rate expects" up --rate fast
refused "nothing up" "no cluster is up" exec node1 true
expect "--ckpt-replicas needs --ckpt-dir" --model mlp --steps 1 --ckpt-replicas 1
expect "--ckpt-replicas 9 is out of range" --model mlp --steps 1 --ckpt-dir "$tmp/ck" --ckpt-replicas 9
if [ "$(id -u)" -ne 0 ]; then
  refused "not root" "must run as root" up
  echo "skip the cluster runs: they need root (network and UTS namespaces)"; finish; exit
fi
if command -v setpriv > /dev/null; then
  # a copy nobody can read, whatever the checkout's permissions
  cp "$cl" "$tmp/cluster.sh" && chmod 755 "$tmp/cluster.sh"
  err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$tmp/cluster.sh" up 2>&1 >/dev/null); rc=$?
  one_line $rc 2 "must run as root" "$err" && ok "as nobody: $err" || { fail "as nobody: rc=$rc:"; indent <<<"$err"; }
fi
if ip netns list 2>/dev/null | grep -q '^dtc-'; then
  echo "skip the cluster runs: another emulated cluster is up (scripts/cluster.sh down ends it)"; finish; exit
fi
trap '"$cl" down; cleanup' EXIT
hf=$("$cl" up --hosts 2 --slots 2 --rate 1gbit 2> "$tmp/up.err"); rc=$?
if [ $rc -ne 0 ]; then
  echo "skip the cluster runs: scripts/cluster.sh up failed here (rc $rc): $(tail -1 "$tmp/up.err")"; finish; exit
fi
[ "$(cat "$hf")" = "node1 slots=2"$'\n'"node2 slots=2" ] && ok "up: 2 hosts, hostfile $hf" || { fail "hostfile $hf:"; indent < "$hf"; }
refused "second up" "already up" up
# isolated: nothing of it in this namespace, and no way out from a host
if ! ip -o addr show | grep -q ' 10\.77\.' && ! "$cl" exec node1 ip route get 1.1.1.1 > /dev/null 2>&1 &&
   [ "$("$cl" exec node2 hostname)" = node2 ]; then ok "isolated: no cluster address here, no route out of node1; node2 is named node2"
else fail "isolation: $(ip -o addr show | grep ' 10\.77\.'; "$cl" exec node1 ip route get 1.1.1.1 2>&1)"; fi

# in_cluster NAME FLAGS...: dtrain train FLAGS on node1 with the hostfile (as run)
in_cluster() { local out=$1; shift
  timeout 300 "$cl" exec node1 "$dt" train --hostfile "$hf" "$@" --out "$tmp/$out" > "$tmp/$out.log" 2>&1 ||
    { fail "cluster run $out exited $?:"; tail -5 "$tmp/$out.log" | indent; return 1; }; }
tx() { "$cl" exec "$1" cat /sys/class/net/cl0/statistics/tx_bytes; }

# ---- 2 hosts x 2 ranks = 4 ranks on one host, bit for bit ----------------------------
M="--model mlp --hidden 64,32 --batch 64 --steps 20 --lr 0.05 --log-every 1 --eval-every 0"
b0=$(tx node2)
# (the one-host runs pretend to be 2 hosts: the same hierarchical sums)
run one_host -n 4 --pretend-hosts 2 --zero 1 $M && in_cluster two_hosts -n 4 --zero 1 $M && {
  crossed=$(( $(tx node2) - b0 ))
  if cmp -s "$tmp/one_host/model.safetensors" "$tmp/two_hosts/model.safetensors" &&
     [ "$(losses "$tmp/one_host")" = "$(losses "$tmp/two_hosts")" ] &&
     grep -q "4 ranks on 2 hosts: node1 (ranks 0-1), node2 (ranks 2-3)" "$tmp/two_hosts.log" && [ "$crossed" -gt 100000 ]; then
    ok "2 hosts x 2 ranks, ZeRO-1 = 4 ranks on one host pretending 2 hosts, bit for bit; $crossed bytes left node2; $(grep -o '4 ranks on 2 hosts.*' "$tmp/two_hosts.log")"
  else fail "2 hosts vs 1 host ($crossed bytes from node2):"; head -3 "$tmp/two_hosts.log" | indent; fi; }

# ---- every strategy across the 2 hosts = the same layout on one host, bit for bit --------
# (tensor parallelism inside a host, pipeline stages across them, the parameter
# server's 2 servers on node2, compression on the wire)
for lay in "--zero 2" "--tp 2 --zero 1" "--pp 2 --micro-batches 2" "--strategy ps --servers 2 --consistency bsp" "--compress topk:0.05"; do
  k=$(tr -dc 'a-z0-9' <<<"$lay")
  run "one_$k" -n 4 --pretend-hosts 2 $lay $M && in_cluster "two_$k" -n 4 $lay $M && {
    if cmp -s "$tmp/one_$k/model.safetensors" "$tmp/two_$k/model.safetensors" && [ "$(losses "$tmp/one_$k")" = "$(losses "$tmp/two_$k")" ]; then
      ok "$lay: 2 hosts x 2 ranks = one host, bit for bit"
    else fail "$lay: 2 hosts vs one host: $("$dt" diff "$tmp/one_$k/model.safetensors" "$tmp/two_$k/model.safetensors" 2>&1)"; fi; }
done

# ---- the hierarchical collectives across the 2 hosts ---------------------------------------
# Bytes on the links: hier sends n per host per all-reduce of n bytes (each of
# the 2 local ranks all-reduces n/2 with its peer on the other host), the flat
# ring 2(p-1)/p.n = 1.5n; 7 calls of 16 MiB (2 warm-up + 5 timed).
b0=$(tx node1)
if timeout 120 "$cl" exec node1 "$dt" bench allreduce --hostfile "$hf" -n 4 --algo hier --alone --min-bytes 16M --max-bytes 16M \
     --iters 5 > "$tmp/hier_bench.log" 2>&1; then
  sent=$(( $(tx node1) - b0 )); want=$((7 * 16 * 1048576))
  if awk -v s="$sent" -v w="$want" 'BEGIN { d = s / w - 1; exit !(d > -0.05 && d < 0.05) }' &&
     grep -q "2 hosts x 2 ranks, shared memory inside a host" "$tmp/hier_bench.log"; then
    ok "hier all-reduce, 7 x 16 MiB: $sent bytes left node1, $(awk -v s="$sent" -v w="$want" 'BEGIN { printf "%+.2f%%", 100 * (s / w - 1) }') of the algorithm's $want"
  else fail "hier bytes on node1's link: $sent, want $want (within 5%)"; indent < "$tmp/hier_bench.log"; fi
else fail "bench allreduce hier on the cluster:"; tail -3 "$tmp/hier_bench.log" | indent; fi
# Training through hier across the hosts = one rank (the tolerances of test_dp)
MLP="--model mlp --hidden 64,32 --batch 32 --steps 12 --lr 0.05 --log-every 1 --eval-every 0 --quiet"
GPT="--model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch 8 --steps 8 --lr 3e-3 --warmup 2 --log-every 1 --eval-max 16 --quiet"
for model in mlp gpt; do
  if [ $model = mlp ]; then args=$MLP; else args=$GPT; fi
  run "${model}_1" $args || continue
  for z in 0 1 2; do
    in_cluster "${model}_hz$z" -n 4 --allreduce hier --zero $z --bucket-mb 0.02 $args || continue
    l=$(close_after "$tmp/${model}_1" "$tmp/${model}_hz$z" 0 1e-5) &&
      w=$("$dt" diff "$tmp/${model}_1/model.safetensors" "$tmp/${model}_hz$z/model.safetensors" --rtol 1e-3 --atol 1e-5 2>&1) &&
      ok "$model, ZeRO-$z, --allreduce hier on 2 hosts x 2 ranks = 1 rank: $l; $w" || fail "$model ZeRO-$z hier vs 1 rank: $l $w"
  done
done

# ---- a host dies with its disk, under the supervisor: the replicas carry it ----------------
# Checkpoints go to each host's own disk ($S/local is node K's hosts/nodeK/local
# inside the cluster), every file also kept on the other host (--ckpt-replicas 1).
B="--model mlp --hidden 64 --batch 64 --steps 300 --lr 0.05 --log-every 100 --eval-every 0 --zero 1 --timeout 10"
K="$B --ckpt-every 25 --ckpt-keep 0"
"$cl" exec node1 "$dt" train --hostfile "$hf" $K --ckpt-dir "$S/local/ck" --ckpt-replicas 1 --max-restarts 1 --restart-backoff 0.1 \
  --inject slow:rank=0:factor=3 --out "$tmp/kill" > "$tmp/kill.log" 2>&1 &
job=$!
if wait_until 60 test -f "$S/hosts/node2/local/ck/ckpt-0000000050/manifest.json"; then "$cl" kill node2 --wipe; fi
wait $job; rc=$?
from=$(grep -o 'resuming from [^ ]*' "$tmp/kill.log" | head -1 | cut -d' ' -f3)
from=${from:+$S/local/ck/$(basename "$from")}   # node1's disk copy (the load may read through a view of its memory)
left=$(ls "$S/hosts/node2/local" | wc -l)
if [ $rc -eq 0 ] && grep -q "lost host node2 (ranks 2-3)" "$tmp/kill.log" && grep -q "host node2 (ranks 2-3 in a full job) cannot be reached" "$tmp/kill.log" &&
   grep -q '"ranks":2' "$tmp/kill/metrics.jsonl" && [ -n "$from" ] && [ "$left" = 0 ] && grep -q "local to each of the 2 hosts: .* a copy of them on the next host" "$tmp/kill.log" &&
   grep -q "of the checkpoint's files from this host's memory" "$tmp/kill.log" && [ -z "$(ls /dev/shm | grep '^dtrain-ckpt-node1-')" ]; then
  ok "node2 killed and its disk wiped: named with its ranks; resumed from $(basename "$from") ($(grep -o 'resuming: [0-9]* of the checkpoint.s files from this host.s memory' "$tmp/kill.log" | head -1)) and finished; the memory copies freed at the end"
  "$cl" exec node1 "$dt" train -n 2 $B --resume "$from" --out "$tmp/kill_ref" > "$tmp/kill_ref.log" 2>&1 &&
    cmp -s "$tmp/kill/model.safetensors" "$tmp/kill_ref/model.safetensors" &&
    ok "... bitwise equal to an uninterrupted 2-rank run from that checkpoint" || { fail "kill vs uninterrupted from $from:"; tail -3 "$tmp/kill_ref.log" | indent; }
else fail "host kill: rc=$rc, node2's disk holds $left entries:"; grep -v '^dtrain\[' "$tmp/kill.log" | tail -8 | indent; fi
"$cl" boot node2

# ---- the parameter server on per-host disks: rank 0's host loses its disk -------------------
# The servers (node2) and rank 0 write, and under BSP with error feedback every
# worker too; each file also goes to the other host. node1's disk wiped (and
# node2's newest checkpoint): --resume auto assembles step 40 from node2.
P="--hostfile $hf -n 4 --strategy ps --servers 1 --consistency bsp --compress topk:0.1 --model mlp --hidden 64 --batch 64
   --steps 60 --lr 0.05 --log-every 20 --eval-every 0 --ckpt-every 20 --ckpt-dir $S/local/ck_ps --ckpt-replicas 1"
if timeout 120 "$cl" exec node1 "$dt" train $P --out "$tmp/ps_a" > "$tmp/ps_a.log" 2>&1 &&
   [ "$(ls "$S/hosts/node2/local/ck_ps/ckpt-0000000060" | tr '\n' ' ')" = "manifest.json $(printf 'rank-%05d.safetensors ' 0 1 2 3)" ]; then
  rm -rf "$S/hosts/node1/local/ck_ps" "$S/hosts/node2/local/ck_ps/ckpt-0000000060"
  timeout 120 "$cl" exec node1 "$dt" train $P --resume auto --out "$tmp/ps_b" > "$tmp/ps_b.log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "resuming the parameter server from $S/local/ck_ps/ckpt-0000000040 (step 40)" "$tmp/ps_b.log" &&
     cmp -s "$tmp/ps_a/model.safetensors" "$tmp/ps_b/model.safetensors"; then
    ok "parameter server, checkpoints on each host's disk with a replica on the other: node1's disk wiped, resumed from step 40 (from node2's copies), bitwise equal to the uninterrupted run"
  else fail "parameter server resume from the other host's copies: rc=$rc:"; grep -v '^dtrain\[' "$tmp/ps_b.log" | tail -4 | indent; fi
else fail "parameter server on per-host disks:"; tail -4 "$tmp/ps_a.log" | indent; ls "$S/hosts/node2/local/ck_ps/ckpt-0000000060" 2>&1 | indent; fi

# ---- a host hangs (power loss): the hang report names it; restart without it --------------
"$cl" exec node1 "$dt" train --hostfile "$hf" $K --timeout 4 --ckpt-dir "$S/shared/ck_freeze" --max-restarts 1 --restart-backoff 0.1 \
  --inject slow:rank=0:factor=3 --out "$tmp/freeze" > "$tmp/freeze.log" 2>&1 &
job=$!
start=$SECONDS
if wait_until 60 test -f "$S/shared/ck_freeze/ckpt-0000000050/manifest.json"; then "$cl" freeze node2; fi
wait $job; rc=$?
if [ $rc -eq 0 ] && grep -q "ranks 2, 3 on node2 did not" "$tmp/freeze.log" && grep -q "stopping mpirun" "$tmp/freeze.log" &&
   grep -q "host node2 (ranks 2-3 in a full job) cannot be reached" "$tmp/freeze.log"; then
  ok "node2 frozen: $(grep -o 'ranks 0, 1 reached it.*' "$tmp/freeze.log" | head -1); mpirun stopped; finished on node1 ($((SECONDS - start)) s)"
else fail "frozen host: rc=$rc:"; grep -v '^dtrain\[' "$tmp/freeze.log" | tail -8 | indent; fi
"$cl" thaw node2; "$cl" boot node2

# ---- a link down for 3 s, within the deadline: slower, same bits -------------------------
L="--model mlp --hidden 64 --batch 64 --steps 120 --lr 0.05 --log-every 10 --eval-every 0 --quiet --timeout 30"
in_cluster link_ref -n 4 $L && {
  "$cl" exec node1 "$dt" train --hostfile "$hf" -n 4 $L --inject slow:rank=0:factor=3 --out "$tmp/link" > "$tmp/link.log" 2>&1 &
  job=$!
  wait_until 60 grep -q '"step":30' "$tmp/link/metrics.jsonl" 2>/dev/null
  "$cl" link node2 down; sleep 3; "$cl" link node2 up
  wait $job; rc=$?
  if [ $rc -eq 0 ] && cmp -s "$tmp/link_ref/model.safetensors" "$tmp/link/model.safetensors"; then
    ok "node2's link down for 3 s within a 30 s deadline: finished, bitwise equal to the undisturbed run"
  else fail "link outage: rc=$rc:"; tail -4 "$tmp/link.log" | indent; fi; }

"$cl" down; [ -z "$(ip netns list | grep '^dtc-')" ] && [ ! -e "$S" ] && ok "down: no namespace or state left" || fail "down left: $(ip netns list | grep '^dtc-')"
"$cl" down && ok "down again: nothing to do, exit 0" || fail "a second down failed"
finish
