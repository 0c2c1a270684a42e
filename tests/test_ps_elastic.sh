#!/usr/bin/env bash
# Elastic parameter server (ASP; restart-based elasticity of the synchronous
# modes is test_elastic.sh): a job of 2 workers gains a third
# (dtrain train --join) after step S and loses one (OUT/leave.1) after step T,
# and still trains exactly the samples of a static run (every clock's global
# batch split over that clock's workers), to within 1 accuracy point of it;
# the step lines show the worker count over time. A process with the wrong
# secret is refused and the job goes on; the refusals of bad flags.
source "$(dirname "$0")/lib.sh" "$@"
acc() { grep '"test_acc"' "$1/metrics.jsonl" | tail -1 | grep -o '"test_acc":[0-9.e-]*' | cut -d: -f2; }
samples() { grep '"staleness"' "$1/metrics.jsonl" | grep -o '"samples":[0-9]*' | cut -d: -f2; }
step_of() { grep '"loss"' "$1/metrics.jsonl" 2>/dev/null | tail -1 | grep -o '"step":[0-9]*' | cut -d: -f2; }
# wait_for DIR STEP SECONDS: until rank 0 has logged STEP (0: gave up)
wait_for() {
  local i; for ((i = 0; i < $3 * 10; i++)); do
    local s; s=$(step_of "$1"); [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0; sleep 0.1; done; return 1; }

L="--model mlp --hidden 256,256 --batch 128 --steps 800 --lr 0.05 --log-every 10 --quiet --strategy ps --servers 1 --consistency asp"
# Slowed (sleeps only) so the joiner, whose start takes seconds (mpirun, MPI's
# connect), joins while the job runs: at factor 8 a Zen 5 ran steps 200-800 in 5 s,
# the job ended before the joiner was in; at 24 it joined at step 391 of 800.
SLOW="--inject slow:rank=0:factor=40 --inject slow:rank=1:factor=40"
# the joined worker (slot 2; its own flags come after the job's) as slow as the
# others: a leave takes effect
# after the furthest clock any worker was given its share of (src/ps/elastic.c)
JSLOW="--inject slow:rank=2:factor=40"
run static -n 3 $L $SLOW

E="$tmp/el"
timeout 300 "$dt" train -n 3 $L $SLOW --elastic 4 --out "$E" > "$tmp/el.log" 2>&1 &
job=$!
for ((i = 0; i < 100; i++)); do [ -f "$E/join.json" ] && break; sleep 0.1; done
[ -f "$E/join.json" ] && ok "the job published its join port" || fail "no $E/join.json after 10 s"
mode=$(stat -c %a "$E/join.token" 2>/dev/null)
[ "$mode" = 600 ] && ok "the job's secret is a 0600 token file" || fail "join.token mode '$mode'"

# A stranger: the job's port and name server, a secret of its own.
F="$tmp/stranger"; mkdir -p "$F"; cp "$E/join.json" "$E/ompi-server.uri" "$F/"
(umask 077; echo 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef > "$F/join.token")
timeout 60 "$dt" train --join "$F" > "$tmp/stranger.log" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "refused this worker: wrong secret" "$tmp/stranger.log" \
  && ok "a process without the job's secret is refused: $(grep -o 'refused.*' "$tmp/stranger.log" | head -1 | cut -c1-70)" \
  || { fail "stranger: exit $rc"; indent < "$tmp/stranger.log"; }
chmod 644 "$F/join.token"
timeout 60 "$dt" train --join "$F" > "$tmp/open.log" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "readable by others" "$tmp/open.log" && ok "a token others can read is refused before connecting" \
  || { fail "open token: exit $rc"; indent < "$tmp/open.log"; }

# The job's files copied while it runs (a job killed outright leaves them):
# joining them once it has ended is refused at once (G); a port that never
# answers (H: the job's name server, a port nobody opened) within --timeout.
G="$tmp/ended"; mkdir -p "$G"; cp -p "$E/join.json" "$E/ompi-server.uri" "$E/join.token" "$G/"
H="$tmp/noport"; mkdir -p "$H"; cp -p "$E/ompi-server.uri" "$E/join.token" "$H/"
sed 's/"port":"[^"]*"/"port":"1.2:3"/' "$E/join.json" > "$H/join.json"
timeout 60 "$dt" train --join "$H" --timeout 3 > "$tmp/noport.log" 2>&1 &
noport=$!

S=200 T=550
wait_for "$E" $S 60 || fail "the job did not reach step $S"
timeout 300 "$dt" train --join "$E" $JSLOW > "$tmp/joiner.log" 2>&1 &
joiner=$!
wait $noport; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "no answer from the job at port 1.2:3 within 3 s" "$tmp/noport.log" \
  && ok "a port that never answers: exit $rc, $(grep -o 'no answer.*' "$tmp/noport.log" | cut -c1-60)" \
  || { fail "joining a port that never answers: exit $rc"; indent < "$tmp/noport.log"; }
for ((i = 0; i < 300; i++)); do grep -q "joined; it starts at clock" "$tmp/el.log" && break; sleep 0.1; done
wait_for "$E" $T 120 || fail "the job did not reach step $T"
touch "$E/leave.1"
wait $joiner; jrc=$?
wait $job; rc=$?
[ $rc -eq 0 ] && [ $jrc -eq 0 ] && ok "the job and the joined worker finished (exit 0)" \
  || { fail "job exit $rc, joiner exit $jrc"; tail -5 "$tmp/el.log" | indent; tail -5 "$tmp/joiner.log" | indent; }
timeout 30 "$dt" train --join "$G" > "$tmp/ended.log" 2>&1; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "the job there has ended" "$tmp/ended.log" \
  && ok "joining a job that has ended (its files left behind) is refused: exit $rc" \
  || { fail "joining an ended job: exit $rc"; indent < "$tmp/ended.log"; }
j=$(grep -o "worker 2 joined; it starts at clock [0-9]*" "$tmp/el.log"); l=$(grep -o "worker 1 left at clock [0-9]*" "$tmp/el.log")
[ -n "$j" ] && [ -n "$l" ] && ok "$j, $l" || { fail "no join or leave in the job's log"; indent < "$tmp/el.log"; }
grep -q "refused a process that tried to join without the job's secret" "$tmp/el.log" \
  && ok "the server logged the stranger it refused" || fail "the stranger's refusal is not in the job's log"
w=$(grep -o '"workers":[0-9]*' "$E/metrics.jsonl" | cut -d: -f2 | uniq | tr '\n' ' ')
[ "$w" = "2 3 2 " ] && ok "the step lines show the worker count over time: $w" || fail "worker counts over time: '$w' (expected 2 3 2)"
s0=$(samples "$tmp/static"); s1=$(samples "$E")
[ -n "$s0" ] && [ "$s0" = "$s1" ] && ok "samples trained: $s1, as the static run" || fail "samples trained: static $s0, elastic $s1"
a0=$(acc "$tmp/static"); a1=$(acc "$E")
awk -v a="$a0" -v b="$a1" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0.5 && d <= 0.01) }' \
  && ok "accuracy $a1 against the static run's $a0 (within 1 point)" || fail "accuracy elastic $a1, static $a0"

expect() { # expect MESSAGE FLAGS...: the run is refused with MESSAGE
  local msg=$1; shift
  timeout 60 "$dt" train "$@" > "$tmp/refuse.log" 2>&1 && { fail "accepted: $*"; return; }
  grep -q -- "$msg" "$tmp/refuse.log" && ok "refused: $(head -1 "$tmp/refuse.log" | cut -c1-100)" || { fail "$*"; indent < "$tmp/refuse.log"; }
}
expect "synchronous runs change size by restarting" -n 3 --strategy ps --consistency bsp --elastic 4 --steps 2 --out "$tmp/x"
expect "needs --out DIR" -n 3 --strategy ps --consistency asp --elastic 4 --steps 2
expect "fewer than the job's 2 workers" -n 3 --strategy ps --consistency asp --elastic 1 --steps 2 --out "$tmp/y" --quiet
expect "no job to join there\|ompi-server.uri" --join "$tmp/nothing"
finish
