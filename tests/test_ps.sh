#!/usr/bin/env bash
# Parameter server: BSP with 1 server and 2 workers equals synchronous data
# parallelism; SSP:0 synchronises like BSP; recorded staleness never exceeds
# K under SSP:K with a slow worker; ASP finishes with a worker 5x slower;
# robust aggregation on the
# server; refusals.
set -u
dt="$1/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_MCA_btl=self,vader,tcp OPENBLAS_NUM_THREADS=1
source "$(dirname "$0")/lib.sh"
stale() { grep '"staleness"' "$1/metrics.jsonl" | grep -o '"max":[0-9]*' | cut -d: -f2; }

S="--model mlp --hidden 64,32 --batch 32 --steps 20 --lr 0.05 --log-every 1 --quiet"
run sync -n 2 $S && run bsp -n 3 --strategy ps --servers 1 --consistency bsp $S && {
  m=$("$dt" diff "$tmp/sync/model.safetensors" "$tmp/bsp/model.safetensors" --rtol 1e-4 --atol 1e-6) && ok "BSP, 1 server + 2 workers = synchronous DP (SGD momentum on the server): $m" || fail "BSP vs sync: $m"; }
run bsp2 -n 4 --strategy ps --servers 2 --consistency bsp $S && {
  m=$("$dt" diff "$tmp/sync/model.safetensors" "$tmp/bsp2/model.safetensors" --rtol 1e-4 --atol 1e-6) && ok "BSP with 2 servers (key ranges split by bytes) = synchronous DP: $m" || fail "BSP 2 servers: $m"; }
P="$S --momentum 0"
# SSP:0 synchronises like BSP (no gradient staler than 0) but applies each
# worker's gradient as it comes, so a fast worker's update may already be in what
# a slow one reads: the same training, not the same bits.
run bsp0 -n 3 --strategy ps --servers 1 --consistency bsp $P && run ssp0 -n 3 --strategy ps --servers 1 --consistency ssp:0 $P && {
  s=$(stale "$tmp/ssp0"); m=$("$dt" diff "$tmp/bsp0/model.safetensors" "$tmp/ssp0/model.safetensors" --rtol 0.05 --atol 1e-3); rc=$?
  [ "$s" = 0 ] && [ $rc -eq 0 ] && ok "SSP:0 behaves as BSP: max staleness $s; weights $m" || fail "SSP:0 vs BSP: staleness $s; $m"; }

# a worker 3x slower: SSP:2 never applies a gradient staler than 2; ASP finishes with a worker 5x slower
L="--model mlp --hidden 64 --batch 64 --steps 40 --lr 0.05 --quiet"
run ssp2 -n 4 --strategy ps --servers 1 --consistency ssp:2 $L --inject slow:rank=1:factor=3 && {
  s=$(stale "$tmp/ssp2"); [ "$s" -le 2 ] && ok "SSP:2 with a 3x slower worker: max recorded staleness $s" || fail "SSP:2 staleness $s"; }
run asp -n 3 --strategy ps --servers 1 --consistency asp $L --inject slow:rank=1:factor=5 && ok "ASP with a 5x slower worker finished (max staleness $(stale "$tmp/asp"))" || fail "ASP with a slow worker"

expect "needs --consistency bsp" -n 4 --strategy ps --consistency asp --aggregate median $S
expect "ssp:K needs" --strategy ps --consistency ssp:x $S
expect "leaves no worker" -n 2 --strategy ps --servers 2 $S
expect "drop -n" -n 2 --strategy hogwild --threads 2 $S

finish
