#!/usr/bin/env bash
# Local SGD, Byzantine-robust aggregation and dynamic load balancing.
set -u
dt="$1/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_MCA_btl=self,vader,tcp OPENBLAS_NUM_THREADS=1
fails=0; passes=0
ok()   { echo "ok   $*"; passes=$((passes+1)); }
fail() { echo "FAIL $*"; fails=$((fails+1)); }
run() { local out=$1; shift; "$dt" train "$@" --out "$tmp/$out" > "$tmp/$out.log" 2>&1 || { echo "  run $out failed:"; tail -3 "$tmp/$out.log"; return 1; }; }
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step":\([0-9]*\).*"loss":\([-0-9.e]*\).*/\1 \2/'; }
close_after() {
  awk -v s="$3" -v tol="$4" 'NR == FNR { a[$1] = $2; next }
    ($1 in a) && $1 > s { n++; d = a[$1] - $2; if (d < 0) d = -d; r = d / (a[$1] < 0 ? -a[$1] : a[$1]); if (r > w) w = r }
    END { printf "%d steps, worst relative loss difference %.2g\n", n, w; exit !(n > 0 && w <= tol) }' \
    <(losses "$1") <(losses "$2")
}
acc() { grep -o '"test_acc":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }

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
expect() { local pat=$1; shift; local err; err=$("$dt" train "$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -ne 0 ] && grep -q -- "$pat" <<<"$err"; then ok "refused: $err"; else fail "rc=$rc for $*: $err"; fi; }
expect "needs more than 4 workers" -n 4 $S --aggregate trimmed:2
expect "needs at least 5 workers" -n 4 $S --aggregate krum:1
expect "needs at least 3 workers" -n 2 $S --aggregate median
expect "plain data parallelism" -n 2 $S --strategy localsgd:2 --zero 1
expect "must be mean, median" $S --aggregate best

echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
