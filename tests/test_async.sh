#!/usr/bin/env bash
# Local SGD, Byzantine-robust aggregation and dynamic load balancing.
set -u
dt="$1/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_MCA_btl=self,vader,tcp OPENBLAS_NUM_THREADS=1
source "$(dirname "$0")/lib.sh"

# local SGD with H = 1 and plain SGD is synchronous data parallelism
S="--model mlp --hidden 64,32 --batch 32 --steps 20 --lr 0.05 --momentum 0 --log-every 1 --quiet"
run sync -n 2 $S && run lsgd1 -n 2 $S --strategy localsgd:1 && {
  if msg=$(close_after "$tmp/sync" "$tmp/lsgd1" 0 1e-5) && "$dt" diff "$tmp/sync/model.safetensors" "$tmp/lsgd1/model.safetensors" --rtol 1e-4 --atol 1e-6 > /dev/null; then
    ok "localsgd:1 equals synchronous SGD: $msg"; else fail "localsgd:1 vs sync: $msg"; fi; }
# dynamic balance keeps the mathematics of the global batch (exact averaging by sample counts)
D="--model mlp --hidden 64,32 --batch 48 --steps 12 --lr 0.05 --log-every 1 --quiet"
run bstatic -n 2 $D && run bdyn -n 2 $D --balance dynamic --inject slow:rank=1:factor=3 && {
  msg=$(close_after "$tmp/bstatic" "$tmp/bdyn" 0 1e-4) && ok "--balance dynamic with a 3x slower worker: same training, $msg" || fail "dynamic balance: $msg"; }

# configurations whose guarantee cannot hold are refused
expect "needs more than 4 workers" -n 4 $S --aggregate trimmed:2
expect "needs at least 5 workers" -n 4 $S --aggregate krum:1
expect "needs at least 3 workers" -n 2 $S --aggregate median
expect "plain data parallelism" -n 2 $S --strategy localsgd:2 --zero 1
expect "must be mean, median" $S --aggregate best

finish
