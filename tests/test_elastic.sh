#!/usr/bin/env bash
# Elastic restarts: with --hostfile and no -n the supervisor reads the hostfile
# again before each restart, so a job that lost a machine resumes on the slots
# listed now; --min-nproc refuses to run on fewer.
source "$(dirname "$0")/lib.sh" "$@"
M="--model mlp --hidden 64,32 --batch 48 --steps 12 --optim adamw --lr 3e-3 --log-every 1 --quiet"
hf="$tmp/hosts"
echo "localhost slots=4" > "$hf"

"$dt" train $M --hostfile "$hf" --zero 1 --ckpt-dir "$tmp/ck" --ckpt-every 4 --max-restarts 2 --restart-backoff 0.3 \
   --inject slow:rank=0:factor=40 --inject crash:rank=3:step=7 --out "$tmp/el" > "$tmp/el.log" 2>&1 &
job=$!
wait_until 60 test -f "$tmp/ck/ckpt-0000000004/manifest.json"
echo "localhost slots=2   # one machine lost" > "$hf"
wait $job; rc=$?
ranks=$(grep -o '"ranks":[0-9]*' "$tmp/el/metrics.jsonl" | sed 's/.*://' | uniq | tr '\n' ' ')
if [ $rc -eq 0 ] && grep -q "lists 2 slots now" "$tmp/el.log" && grep -q "written by 4 ranks" "$tmp/el.log" && [ "$ranks" = "4 2 " ]; then
  ok "lost 2 of 4 slots: resumed the 4-rank checkpoint on 2 ranks and finished (ranks per logged step: $ranks)"
else fail "elastic resume rc=$rc ranks='$ranks'"; cat "$tmp/el.log"; fi

echo "localhost slots=1" > "$hf"
err=$("$dt" train $M --hostfile "$hf" --min-nproc 2 --max-restarts 1 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && grep -q "fewer than --min-nproc 2" <<<"$err"; then ok "--min-nproc: $err"; else fail "--min-nproc rc=$rc: $err"; fi
finish
