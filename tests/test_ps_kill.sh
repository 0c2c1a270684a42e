#!/usr/bin/env bash
# Parameter server with a worker that dies (1 server + 3 workers, mlp):
# under ASP and SSP the servers drop it after --timeout of silence and the run
# finishes with the other two (exit 0, the lost worker named, metrics to the last
# step, a sane final evaluation, no process left); a real kill -9 of a worker
# held by SSP; losing worker 0 (the one that writes the outputs) fails the job
# without hanging.
source "$(dirname "$0")/lib.sh" "$@"

M="--model mlp --hidden 64 --batch 64 --lr 0.05 --log-every 20 --timeout 4 --quiet"
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
# go NAME FLAGS...: runs dtrain (at most 60 s); sets rc and secs
go() { local out=$1; shift; local t0=$(date +%s.%N)
  timeout 60 "$dt" train "$@" --out "$tmp/$out" > "$tmp/$out.log" 2>&1; rc=$?
  secs=$(since "$t0"); }
last_step() { grep -o '"step":[0-9]*' "$tmp/$1/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2; }
left() { pgrep -f "$tmp/$1" | tr '\n' ' '; }
# judge NAME RANK CLOCK STEPS WHAT: the run completed without worker RANK lost at CLOCK
judge() { local n=$1 r=$2 clk=$3 steps=$4 what=$5 a; a=$(acc "$tmp/$n")
  local why=""
  [ "$rc" -eq 0 ] || why+=" rc=$rc"
  grep -q "warning: parameter server: worker rank $r is lost (.*); its last clock was $clk;" "$tmp/$n.log" || why+=" no warning naming rank $r at clock $clk"
  [ "$(grep -c 'is lost' "$tmp/$n.log")" = 1 ] || why+=" not exactly one 'is lost' line"
  grep -q "the run completed without the lost worker rank $r at clock $clk" "$tmp/$n.log" || why+=" no launcher line"
  [ "$(last_step "$n")" = "$steps" ] || why+=" metrics end at step $(last_step "$n")"
  grep -q "\"lost_workers\":\[$r\]" "$tmp/$n/metrics.jsonl" 2>/dev/null || why+=" metrics do not list the lost worker"
  [ -s "$tmp/$n/model.safetensors" ] || why+=" no weights"
  awk -v a="${a:-0}" 'BEGIN { exit !(a > 0.5) }' || why+=" final accuracy ${a:-none}"
  [ -z "$(left "$n")" ] || why+=" processes left: $(left "$n")"
  if [ -z "$why" ]; then ok "$what: exit 0 in ${secs%.*} s, worker rank $r lost at clock $clk, metrics to step $steps, accuracy $a"
  else fail "$what:$why"; tail -5 "$tmp/$n.log"; fi; }

# ASP: worker rank 2 kills itself at step 20 of 200
go asp -n 4 --strategy ps --servers 1 --consistency asp $M --steps 200 --inject crash:rank=2:step=20
judge asp 2 19 200 "ASP, a worker crashed at step 20"

# SSP:1: without the drop the others would wait for its clock forever
go ssp -n 4 --strategy ps --servers 1 --consistency ssp:1 $M --steps 100 --inject crash:rank=1:step=10
judge ssp 1 9 100 "SSP:1, a worker crashed at step 10"
s=$(grep '"staleness"' "$tmp/ssp/metrics.jsonl" | grep -o '"max":[0-9]*' | cut -d: -f2)
[ "${s:-9}" -le 1 ] && ok "SSP:1 bound kept with a lost worker: max staleness $s" || fail "SSP:1 staleness ${s:-none}"

# SSP:2 with a slow worker 0: kill -9 of worker rank 2 (mostly held by the
# server, waiting for the slow one) once step 40 is logged; with checkpoints
timeout 60 "$dt" train -n 4 --strategy ps --servers 1 --consistency ssp:2 $M --steps 300 --inject slow:rank=0:factor=20 \
    --ckpt-dir "$tmp/ck" --ckpt-every 50 --out "$tmp/kill" > "$tmp/kill.log" 2>&1 &
job=$!
t0=$(date +%s.%N)
victim=""
wait_until 15 grep -q '"step":40,' "$tmp/kill/metrics.jsonl" 2>/dev/null && victim=$(rank_pid "$tmp/kill" 2)
[ -n "$victim" ] && kill -9 "$victim"
wait $job; rc=$?
secs=$(since "$t0")
clk=$(grep -o 'worker rank 2 is lost (.*); its last clock was [0-9]*' "$tmp/kill.log" | grep -o '[0-9]*$')
if [ -n "$victim" ] && [ -n "$clk" ] && [ "$clk" -lt 300 ]; then
  judge kill 2 "$clk" 300 "SSP:2, kill -9 of a worker (pid $victim)"
  [ -f "$tmp/ck/ckpt-0000000300/manifest.json" ] && "$dt" inspect "$tmp/ck/ckpt-0000000300" > /dev/null \
    && ok "the final checkpoint is complete and verifies" || fail "final checkpoint after a lost worker"
else fail "kill -9 under SSP: victim=$victim rc=$rc clock=$clk"; tail -5 "$tmp/kill.log"; fi

# worker 0 writes the outputs: losing it ends the job with an error, no hang
go lead -n 4 --strategy ps --servers 1 --consistency asp $M --steps 200 --inject crash:rank=0:step=20
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "worker 0 (rank 0, which writes .*) is gone" "$tmp/lead.log" && [ -z "$(left lead)" ]; then
  ok "ASP, worker 0 lost: the job fails (rc=$rc) in ${secs%.*} s, saying why"
else fail "ASP, worker 0 lost: rc=$rc"; tail -3 "$tmp/lead.log"; fi

finish
