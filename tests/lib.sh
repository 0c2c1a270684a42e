# Shared helpers of the shell tests (sourced; $dt and $tmp set by the caller).
fails=0; passes=0
ok()   { echo "ok   $*"; passes=$((passes+1)); }
fail() { echo "FAIL $*"; fails=$((fails+1)); }
# run NAME FLAGS...: dtrain train FLAGS --out $tmp/NAME, log in $tmp/NAME.log.
# A run that fails counts as a failed check by itself (callers skip what
# depended on it), so `run X && { ...checks... }` cannot pass by not running.
run() { local out=$1; shift; timeout 600 "$dt" train "$@" --out "$tmp/$out" > "$tmp/$out.log" 2>&1 || { fail "run $out exited $?:"; tail -5 "$tmp/$out.log"; return 1; }; }
# "step loss" lines of a run's metrics
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step":\([0-9]*\).*"loss":\([-0-9.e]*\).*/\1 \2/'; }
# close_after A B S TOL: B's losses after step S within relative TOL of A's
close_after() {
  awk -v s="$3" -v tol="$4" 'NR == FNR { a[$1] = $2; next }
    ($1 in a) && $1 > s { n++; d = a[$1] - $2; if (d < 0) d = -d; r = d / (a[$1] < 0 ? -a[$1] : a[$1]); if (r > w) w = r }
    END { printf "%d steps after %d, worst relative loss difference %.2g\n", n, s, w; exit !(n > 0 && w <= tol) }' \
    <(losses "$1") <(losses "$2")
}
# the last test accuracy of a run
acc() { grep -o '"test_acc":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
# expect PATTERN FLAGS...: dtrain train FLAGS fails with PATTERN on stderr
expect() { local pat=$1; shift; local err; err=$("$dt" train "$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -ne 0 ] && grep -q -- "$pat" <<<"$err"; then ok "refused: $err"; else fail "rc=$rc for $*: $err"; fi; }
finish() { echo "$passes passed, $fails failed"; [ "$fails" -eq 0 ]; }
