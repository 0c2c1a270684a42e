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
# local SGD every 4 steps converges (one epoch of the default mlp)
run lsgd4 -n 2 --model mlp --epochs 1 --quiet --strategy localsgd:4 && {
  a=$(acc "$tmp/lsgd4"); awk -v a="$a" 'BEGIN { exit !(a >= 0.84) }' && ok "localsgd:4: test accuracy $a after one epoch (>= 0.84)" || fail "localsgd:4 accuracy $a"; }

# dynamic balance keeps the mathematics of the global batch (exact averaging by sample counts)
D="--model mlp --hidden 64,32 --batch 48 --steps 12 --lr 0.05 --log-every 1 --quiet"
run bstatic -n 2 $D && run bdyn -n 2 $D --balance dynamic --inject slow:rank=1:factor=3 && {
  msg=$(close_after "$tmp/bstatic" "$tmp/bdyn" 0 1e-4) && ok "--balance dynamic with a 3x slower worker: same training, $msg" || fail "dynamic balance: $msg"; }

# Byzantine workers: 1 of 5 sends a sign-flipped or random gradient (short CI version of the bench)
B="--model mlp --hidden 128 --batch 100 --steps 150 --lr 0.1 --quiet"
run clean -n 5 $B || fail "clean run"
c=$(acc "$tmp/clean")
for attack in signflip random; do
  if "$dt" train -n 5 $B --aggregate mean --inject byzantine:rank=2:mode=$attack --out "$tmp/mean_$attack" > "$tmp/m.log" 2>&1; then
    a=$(acc "$tmp/mean_$attack")
    awk -v a="$a" -v c="$c" 'BEGIN { exit !(a < c - 0.1) }' && ok "mean under $attack: accuracy $a vs clean $c (fails visibly)" || fail "mean under $attack did not fail: $a vs $c"
  else
    grep -q "loss became" "$tmp/m.log" && ok "mean under $attack: training diverged ($(grep -o 'the loss became [^:]*' "$tmp/m.log"))" || fail "mean under $attack: $(tail -1 "$tmp/m.log")"
  fi
  for agg in median trimmed:1 krum:1; do
    if run "${agg%%:*}_$attack" -n 5 $B --aggregate $agg --inject byzantine:rank=2:mode=$attack; then
      a=$(acc "$tmp/${agg%%:*}_$attack")
      awk -v a="$a" -v c="$c" 'BEGIN { exit !(a >= c - 0.06) }' && ok "$agg under $attack: accuracy $a vs clean $c" || fail "$agg under $attack: $a vs clean $c"
    else fail "$agg under $attack did not run"; fi
  done
done

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
