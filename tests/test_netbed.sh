#!/usr/bin/env bash
# scripts/netbed.sh, the shaped-network test bed (docs/TESTBED.md): refusals
# (not root, bad flags, no namespaces, a burst below one packet) always or as
# far as this machine allows; as root with namespaces, dtrain bench allreduce -n 2
# inside a 40 Mbit/s bed stays under the cap while the same bench outside is far
# faster, every byte crosses the qdisc, and no namespace outlives the script:
# when the wrapped command succeeds, fails (its status passed through) or is
# interrupted.
source "$(dirname "$0")/lib.sh" "$@"
chmod 755 "$tmp"
# A copy that an unprivileged user can read whatever the checkout's permissions.
bed="$tmp/netbed.sh"
cp ../scripts/netbed.sh "$bed" && chmod 755 "$bed"

# one_line RC WANT_RC PATTERN ERR: exit status WANT_RC and one stderr line matching PATTERN
one_line() { [ "$1" -eq "$2" ] && [ "$(wc -l <<<"$4")" -eq 1 ] && grep -q -- "$3" <<<"$4"; }
# refused NAME PATTERN ARGS...: the bed refuses ARGS with exit 2 and one line
refused() { local name=$1 pat=$2; shift 2; local err rc
  err=$("$bed" "$@" 2>&1 >/dev/null); rc=$?
  if one_line $rc 2 "$pat" "$err"; then ok "$name: $err"; else fail "$name: rc=$rc: $err"; fi; }
# gone NS: NS is not among the namespaces any more
gone() { [ -n "$1" ] && ! ip netns list 2>/dev/null | grep -qw -- "$1"; }
# bed_name LOG: the namespace the bed announced in LOG
bed_name() { grep -o 'dtrain-bed-[0-9]*' "$1" | head -1; }
# busbw_mbs LOG COLUMN: MB/s of one algorithm's column (1 = first) on the bench's
# single data line, from its time (the GB/s columns have too few digits here)
busbw_mbs() { awk -v c="$2" '/^ *[0-9]/ { split($0, f, "|"); split(f[c + 1], t, " "); printf "%.3f", $1 / t[1] }' "$1"; }

# ---- refusals anyone can check -------------------------------------------------
out=$("$bed" --help 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "^usage: scripts/netbed.sh" <<<"$out"; then ok "--help prints the usage"; else fail "--help rc=$rc"; fi
refused "unknown flag" "unknown flag '--bogus'" --bogus -- true
refused "rate without units" "--rate expects" --rate 100 -- true
refused "zero rate" "--rate expects" --rate 0mbit -- true
refused "bad burst" "--burst expects" --burst 10x -- true
refused "bad latency" "--latency expects" --latency soon -- true
refused "missing value" "--rate needs a value" --rate
refused "no command" "no command to run" --rate 1gbit --

drop=()
if command -v setpriv >/dev/null && [ "$(id -u)" -eq 0 ]; then drop=(setpriv --reuid=65534 --regid=65534 --clear-groups)
elif command -v runuser >/dev/null && [ "$(id -u)" -eq 0 ]; then drop=(runuser -u nobody --)
fi
if [ "$(id -u)" -ne 0 ]; then
  err=$("$bed" -- true 2>&1 >/dev/null); rc=$?
  if one_line $rc 2 "must run as root" "$err"; then ok "not root: $err"; else fail "not root: rc=$rc: $err"; fi
elif [ ${#drop[@]} -gt 0 ]; then
  err=$("${drop[@]}" "$bed" --rate 100mbit -- true 2>&1 >/dev/null); rc=$?
  if one_line $rc 2 "must run as root" "$err"; then ok "as nobody: $err"; else fail "as nobody: rc=$rc: $err"; fi
  err=$("${drop[@]}" "$bed" --rate fast -- true 2>&1 >/dev/null); rc=$?
  if one_line $rc 2 "--rate expects" "$err"; then ok "as nobody, bad rate: $err"; else fail "as nobody, bad rate: rc=$rc: $err"; fi
else
  echo "skip the unprivileged refusal: neither setpriv nor runuser is installed"
fi

# ---- the bed itself: root, iproute2, namespaces, mpirun ------------------------
probe=$("$bed" -- true 2>&1 >/dev/null); rc=$?
if [ "$(id -u)" -ne 0 ] || [ $rc -ne 0 ] || ! command -v mpirun >/dev/null; then
  echo "skip the shaped runs (they need root, ip netns, tc tbf and mpirun): rc=$rc: $probe"
  finish; exit
fi
host_lo="$(tc qdisc show dev lo) / $(ip -o link show lo)"

# No iproute2 on the PATH (only id, for the root check).
mkdir "$tmp/bin" && ln -s "$(command -v id)" "$tmp/bin/"
err=$(PATH="$tmp/bin" "$BASH" "$bed" -- true 2>&1 >/dev/null); rc=$?
if one_line $rc 2 "'ip' not found: install Debian's iproute2" "$err"; then ok "no iproute2: $err"; else fail "no iproute2: rc=$rc: $err"; fi

# No CAP_SYS_ADMIN (a container without namespaces): one line, nothing left.
if command -v setpriv >/dev/null; then
  err=$(setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin "$bed" -- true 2>&1 >/dev/null); rc=$?
  if one_line $rc 2 "cannot create network namespace" "$err" && gone "$(grep -o 'dtrain-bed-[0-9]*' <<<"$err")"; then
    ok "no namespaces: $err"; else fail "no namespaces: rc=$rc: $err"; fi
fi
refused "burst below one packet" "not above one loopback packet" --burst 10kb -- true

# The wrapped command's exit status comes back and the namespace goes.
"$bed" -- sh -c 'ip -o link show | wc -l; exit 7' > "$tmp/st.out" 2> "$tmp/st.log"; rc=$?
ns=$(bed_name "$tmp/st.log")
if [ $rc -eq 7 ] && [ "$(cat "$tmp/st.out")" = 1 ] && gone "$ns"; then ok "exit 7 passed through, lo was the only interface, $ns deleted"
else fail "exit status rc=$rc, links '$(cat "$tmp/st.out")', ns '$ns'"; cat "$tmp/st.log"; fi
"$bed" --rate 40mbit -- "$dt" train -n 2 --model mlp --steps 2 --data "$tmp/none" > /dev/null 2> "$tmp/fl.log"; rc=$?
ns=$(bed_name "$tmp/fl.log")
if [ $rc -eq 1 ] && grep -q "no such directory" "$tmp/fl.log" && gone "$ns"; then ok "a failing 2-rank dtrain train: rc 1 passed through, $ns deleted"
else fail "failing train rc=$rc ns '$ns'"; cat "$tmp/fl.log"; fi

# Shaped: 40 Mbit/s = 5 MB/s shared by everything on the namespace's loopback.
# With 2 ranks each rank sends the message size per all-reduce, both directions
# through lo's one queue, so busbw tops out at RATE/2 = 2.5 MB/s (docs/TESTBED.md).
# 512 KiB: 2 warm-up + 4 timed all-reduces each of ring and native, 12 MiB on lo.
cap=2.5
B="bench allreduce -n 2 --algo ring --min-bytes 512K --max-bytes 512K --iters 4"
t0=$(date +%s.%N)
# shellcheck disable=SC2086
"$bed" --rate 40mbit -- sh -c "\"$dt\" $B && tc -s -j qdisc show dev lo" > "$tmp/sh.out" 2> "$tmp/sh.log"; rc=$?
ns=$(bed_name "$tmp/sh.log")
secs=$(echo "$(date +%s.%N) - $t0" | bc)
ring=$(busbw_mbs "$tmp/sh.out" 1); native=$(busbw_mbs "$tmp/sh.out" 2)
sent=$(grep -o '"bytes":[0-9]*' "$tmp/sh.out" | head -1 | cut -d: -f2)
if [ $rc -eq 0 ] && awk -v r="$ring" -v n="$native" -v c=$cap 'BEGIN { exit !(r <= 1.15 * c && r >= 0.5 * c && n <= 1.15 * c) }'; then
  ok "40mbit bed: busbw ring $ring MB/s, native $native MB/s (cap $cap MB/s at 2 ranks; ${secs}s)"
else fail "40mbit bed rc=$rc: ring '$ring' native '$native' MB/s, cap $cap"; cat "$tmp/sh.out" "$tmp/sh.log"; fi
if [ -n "$sent" ] && [ "$sent" -ge $((12 * 1048576)) ]; then ok "both ranks' traffic crossed the tbf qdisc: $sent bytes sent (>= 12 MiB)"
else fail "qdisc sent '$sent' bytes, want >= $((12 * 1048576))"; fi
if gone "$ns"; then ok "$ns deleted after the bench"; else fail "$ns left behind"; fi

# shellcheck disable=SC2086
timeout 120 "$dt" $B > "$tmp/un.out" 2>&1; rc=$?
# Unshaped, the faster algorithm is far above the cap and neither is near it
# (on a loaded 2-core CI box the ring's polling ranks once measured 15x the cap
# while native measured 430x; CI's sanitizer build beside other tests measured
# 11x and 13x: scheduling, not a link, so the bar is on the best and stays well
# clear of the shaped run's 1.15x).
free=$(busbw_mbs "$tmp/un.out" 1); nfree=$(busbw_mbs "$tmp/un.out" 2)
if [ $rc -eq 0 ] && awk -v f="$free" -v n="$nfree" -v c=$cap \
     'BEGIN { b = f > n ? f : n; exit !(b >= 8 * c && f >= 4 * c && n >= 4 * c) }'; then
  ok "without the bed: busbw ring $free MB/s, native $nfree MB/s (best >= 8x the cap, both >= 4x)"
else fail "unshaped rc=$rc busbw ring '$free' native '$nfree'"; cat "$tmp/un.out"; fi

# Interrupted in the middle of a 2-rank bench (Ctrl-C, then a plain kill): the
# signal's status, nothing left running in the namespace, the namespace gone.
interrupt() { local sig=$1 want=$2; shift 2
  "$@" "$bed" --rate 40mbit -- "$dt" bench allreduce -n 2 --algo ring --min-bytes 4M --max-bytes 4M > /dev/null 2> "$tmp/$sig.log" &
  local pid=$! ns=dtrain-bed-$! pids=0
  ns_busy() { pids=$(ip netns pids "$ns" 2>/dev/null | wc -l); [ "$pids" -ge 3 ]; }
  wait_until 10 ns_busy
  kill -"$sig" $pid; wait $pid; local rc=$?
  if [ $rc -eq "$want" ] && [ "$pids" -ge 3 ] && gone "$ns"; then ok "SIG$sig with mpirun and 2 ranks running: rc $rc, $ns deleted"
  else fail "SIG$sig: rc=$rc (want $want), $pids processes seen, ns $ns: $(ip netns list | tr '\n' ' ')"; cat "$tmp/$sig.log"; fi; }
interrupt TERM 143
# A shell without job control starts background jobs with SIGINT ignored; the
# terminal's Ctrl-C reaches a foreground script, which env --default-signal mimics.
if env --default-signal=INT true 2>/dev/null; then interrupt INT 130 env --default-signal=INT
else echo "skip the SIGINT check: env has no --default-signal (coreutils < 9)"; fi

now="$(tc qdisc show dev lo) / $(ip -o link show lo)"
if [ "$now" = "$host_lo" ]; then ok "the host's lo untouched: $now"; else fail "host lo changed: '$host_lo' -> '$now'"; fi
left=$(ip netns list | grep -c '^dtrain-bed-' || true)
echo "(dtrain-bed namespaces now, any test's: $left)"
finish
