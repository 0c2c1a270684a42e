# Shared helpers of the shell tests. A test begins with
#   source "$(dirname "$0")/lib.sh" "$@"
# (its $1 is the build directory) and ends with `finish`.
#
# ---- prelude ------------------------------------------------------------------
# $dt: the build's dtrain. $tmp: a private directory, removed at exit with any
# process still running from it (a rank a failed check left behind); KEEP=1
# keeps it and says where. Ranks talk over shared memory and TCP only (no
# network hardware is probed) and use one BLAS thread each.
set -u
dt="$1/dtrain"
tmp=$(mktemp -d)
cleanup() {
  pkill -9 -f "$tmp" 2>/dev/null
  if [ -n "${KEEP:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
export OMPI_MCA_btl=self,vader,tcp OPENBLAS_NUM_THREADS=1
fails=0; passes=0
# sanitized=1 in the sanitizer build: checks that judge measured time (a
# schedule's bubble, which split is fastest) are left to the optimised build's
# pass; under ASan, two tests at once, time measures the instrumentation.
sanitized=0
grep -q '^DT_SANITIZE:BOOL=ON' "$1/CMakeCache.txt" 2>/dev/null && sanitized=1
# skip WHAT: a check this build leaves to the optimised build, said so
skip() { echo "skip $* (sanitizer build: timing is left to the optimised build's pass)"; }

# ---- checks -------------------------------------------------------------------
# Every failing check prints its evidence: the lines, values or log tail it judged.
ok()   { echo "ok   $*"; passes=$((passes+1)); }
fail() { echo "FAIL $*"; fails=$((fails+1)); }
# indent: the evidence under a FAIL line
indent() { sed 's/^/    /'; }
finish() { echo "$passes passed, $fails failed"; [ "$fails" -eq 0 ]; }

# run NAME FLAGS...: dtrain train FLAGS --out $tmp/NAME, log in $tmp/NAME.log.
# A run that fails counts as a failed check by itself (callers skip what
# depended on it), so `run X && { ...checks... }` cannot pass by not running.
run() { local out=$1; shift; timeout 600 "$dt" train "$@" --out "$tmp/$out" > "$tmp/$out.log" 2>&1 || { fail "run $out exited $?:"; tail -5 "$tmp/$out.log" | indent; return 1; }; }
# "step loss" lines of a run's metrics
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"step":\([0-9]*\).*"loss":\([-0-9.e]*\).*/\1 \2/'; }
# close_after A B S TOL: B's losses after step S within relative TOL of A's
close_after() {
  awk -v s="$3" -v tol="$4" 'NR == FNR { a[$1] = $2; next }
    ($1 in a) && $1 > s { n++; d = a[$1] - $2; if (d < 0) d = -d; r = d / (a[$1] < 0 ? -a[$1] : a[$1]); if (r > w) w = r }
    END { printf "%d steps after %d, worst relative loss difference %.2g\n", n, s, w; exit !(n > 0 && w <= tol) }' \
    <(losses "$1") <(losses "$2")
}
# same_run REF TOL NAME FLAGS...: runs NAME (see run) and checks that it is the
# same training as the finished run REF in another layout: every step's loss
# within relative TOL of REF's, the final weights within rtol 1e-3, atol 1e-5
# (dtrain diff). One check; a failure prints both comparisons.
same_run() {
  local ref=$1 tol=$2 name=$3; shift 3
  run "$name" "$@" || return 1
  local l w lrc wrc
  l=$(close_after "$tmp/$ref" "$tmp/$name" 0 "$tol"); lrc=$?
  w=$("$dt" diff "$tmp/$ref/model.safetensors" "$tmp/$name/model.safetensors" --rtol 1e-3 --atol 1e-5 2>&1); wrc=$?
  if [ $lrc -eq 0 ] && [ $wrc -eq 0 ]; then ok "$name = $ref: losses: $l; weights: $w"
  else fail "$name vs $ref ($*):"; printf 'losses (tolerance %s): %s\nweights (rtol 1e-3, atol 1e-5): %s\n' "$tol" "$l" "$w" | indent; fi
}
# the last test accuracy of a run
acc() { grep -o '"test_acc":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
# expect PATTERN FLAGS...: dtrain train FLAGS fails with PATTERN on stderr
expect() { local pat=$1; shift; local err; err=$("$dt" train "$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -ne 0 ] && grep -q -- "$pat" <<<"$err"; then ok "refused: $err"; else fail "rc=$rc for $*, want /$pat/:"; indent <<<"$err"; fi; }

# ---- waiting ------------------------------------------------------------------
# wait_until SECONDS COMMAND...: runs COMMAND (in this shell: a function may set
# variables) every 50 ms until it succeeds (returns 0) or SECONDS have passed
# (returns 1). Tests wait for a condition, never for a fixed time.
wait_until() {
  local end=$(($(date +%s%N) + ${1%.*} * 1000000000)); shift
  until "$@"; do
    [ "$(date +%s%N)" -ge "$end" ] && return 1
    sleep 0.05
  done
}
# rank_pid PATTERN RANK: the pid of a process whose command line matches
# PATTERN and whose environment makes it MPI rank RANK (nothing if none).
rank_pid() {
  local p
  for p in $(pgrep -f "$1"); do
    grep -qz "^OMPI_COMM_WORLD_RANK=$2\$" "/proc/$p/environ" 2>/dev/null && { echo "$p"; return 0; }
  done
  return 1
}
