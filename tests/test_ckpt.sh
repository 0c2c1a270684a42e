#!/usr/bin/env bash
# Fault tolerance end to end: checkpoints, resume (same layout: bitwise; other
# layouts: within tolerance), the supervisor restarting after kill -9, injected
# crash and hang, and damaged checkpoints detected and skipped.
source "$(dirname "$0")/lib.sh" "$@"
same_bits() { cmp -s "$1/model.safetensors" "$2/model.safetensors" && [ "$(losses "$1")" = "$(losses "$2")" ]; }
# losses of B after step S within relative TOL of A's

M="--model mlp --hidden 64,32 --batch 48 --steps 16 --optim adamw --lr 3e-3 --log-every 1 --quiet"

# --- reference runs --------------------------------------------------------------
run ref2 -n 2 --zero 1 $M

# --- kill -9 of one rank mid-run under the supervisor: bitwise identical ----------
"$dt" train -n 2 --zero 1 $M --steps 16 --ckpt-dir "$tmp/ck_kill" --ckpt-every 4 --max-restarts 2 --inject slow:rank=0:factor=50 \
    --restart-backoff 0.2 --out "$tmp/kill" > "$tmp/kill.log" 2>&1 &
sup=$!
victim=""
# rank 1, once the step-4 checkpoint is complete
ready() { [ -f "$tmp/ck_kill/ckpt-0000000004/manifest.json" ] && victim=$(rank_pid ck_kill 1); }
wait_until 10 ready
if [ -n "$victim" ]; then kill -9 "$victim"; fi
wait $sup; rc=$?
if [ -z "$victim" ]; then fail "kill -9: never found rank 1 to kill"
elif [ $rc -eq 0 ] && grep -q "restarting from the newest valid checkpoint" "$tmp/kill.log" && same_bits "$tmp/ref2" "$tmp/kill"; then
  ok "kill -9 of rank 1 (pid $victim): restarted, final weights and losses bitwise identical"
else fail "kill -9: rc=$rc"; tail -5 "$tmp/kill.log"; fi

# --- injected crash and hang -----------------------------------------------------
run crash -n 2 --zero 1 $M --ckpt-dir "$tmp/ck_crash" --ckpt-every 4 --max-restarts 2 --restart-backoff 0.2 \
    --inject crash:rank=0:step=10
if same_bits "$tmp/ref2" "$tmp/crash"; then ok "--inject crash: bitwise identical after restart"; else fail "--inject crash"; fi

start=$SECONDS
run hang -n 2 --zero 1 $M --ckpt-dir "$tmp/ck_hang" --ckpt-every 4 --max-restarts 2 --restart-backoff 0.2 \
    --timeout 2 --inject hang:rank=1:step=7
took=$((SECONDS - start))
if same_bits "$tmp/ref2" "$tmp/hang" && grep -q "rank 1 did not" "$tmp/hang.log" && grep -q "step 7" "$tmp/hang.log"; then
  ok "--inject hang: detected ($(grep -o 'timed out after [0-9.]* s' "$tmp/hang.log" | head -1)), late rank named, bitwise identical after restart (${took}s total)"
else fail "--inject hang"; cat "$tmp/hang.log" | head; fi

# --- resume on other layouts -------------------------------------------------------
run ref4 -n 4 --zero 1 $M --ckpt-dir "$tmp/ck4" --ckpt-every 8
cp -r "$tmp/ck4/ckpt-0000000008" "$tmp/c8"
for layout in "-n 2 --zero 0" "-n 1 --zero 0" "-n 2 --zero 2" "-n 3 --zero 1"; do
  name=res_$(echo "$layout" | tr -d ' -')
  if run $name $layout $M --resume "$tmp/c8"; then
    if msg=$(close_after "$tmp/ref4" "$tmp/$name" 8 1e-4); then ok "4 ranks ZeRO-1 -> $layout: $msg"; else fail "4 -> $layout: $msg"; fi
  else fail "resume 4 -> $layout"; fi
done
run z0 -n 2 --zero 0 $M --ckpt-dir "$tmp/ckz0" --ckpt-every 8 && run z0to2 -n 2 --zero 2 $M --resume "$tmp/ckz0/ckpt-0000000008" && {
  msg=$(close_after "$tmp/z0" "$tmp/z0to2" 8 1e-4) && ok "ZeRO 0 -> 2: $msg" || fail "ZeRO 0 -> 2: $msg"; }
run one -n 1 $M --ckpt-dir "$tmp/ck1" --ckpt-every 8 && run one_same -n 1 $M --resume "$tmp/ck1/ckpt-0000000008" && {
  cmp -s "$tmp/one/model.safetensors" "$tmp/one_same/model.safetensors" && msg=$(close_after "$tmp/one" "$tmp/one_same" 8 0) \
    && ok "1 rank resumed at step 8: bitwise identical weights, $msg" || fail "1-rank resume not bitwise"; }
if "$dt" train -n 1 $M --resume "$tmp/c8" --batch 40 > /dev/null 2> "$tmp/err"; then fail "resume with another global batch accepted"
elif grep -q "global --batch 48" "$tmp/err"; then ok "another global batch refused: $(cat "$tmp/err")"; else fail "batch refusal message: $(cat "$tmp/err")"; fi

# --- damaged checkpoints are detected and skipped ------------------------------------
d="$tmp/ck_dmg"
run dmg -n 2 --zero 1 $M --ckpt-dir "$d" --ckpt-every 4 --ckpt-keep 0
"$dt" inspect "$d/ckpt-0000000016" > "$tmp/inspect.txt" && grep -q "every crc32c ok" "$tmp/inspect.txt" && ok "inspect verifies a good checkpoint" || fail "inspect"
# flipped byte in a tensor of the newest
f="$d/ckpt-0000000016/rank-00001.safetensors"
sz=$(stat -c %s "$f"); printf '\x5a' | dd of="$f" bs=1 seek=$((sz - 100)) conv=notrunc 2>/dev/null
# truncated file in the next
truncate -s 1000 "$d/ckpt-0000000012/rank-00000.safetensors"
# half-written (no manifest) in the next
rm "$d/ckpt-0000000008/manifest.json"
if "$dt" inspect "$d/ckpt-0000000016" > /dev/null 2> "$tmp/err"; then fail "inspect accepted a flipped byte"
else grep -q "corrupted" "$tmp/err" && ok "inspect: $(cat "$tmp/err")" || fail "inspect message: $(cat "$tmp/err")"; fi
run dmg_res -n 2 --zero 1 $M --ckpt-dir "$d" --resume auto 2> "$tmp/dmg.err"
log="$tmp/dmg_res.log"
if grep -q "skipping checkpoint .*ckpt-0000000016: .*corrupted" "$log" && grep -q "skipping checkpoint .*ckpt-0000000012: .*" "$log" \
   && grep -q "skipping checkpoint .*ckpt-0000000008: .*no manifest" "$log" && grep -q "resuming from .*ckpt-0000000004" "$log"; then
  ok "flipped byte, truncated file and missing manifest each skipped; resumed from step 4"
else fail "damaged checkpoints"; cat "$log"; fi
if msg=$(close_after "$tmp/ref2" "$tmp/dmg_res" 4 0) && cmp -s "$tmp/ref2/model.safetensors" "$tmp/dmg_res/model.safetensors"; then
  ok "resumed past damage: bitwise identical to the uninterrupted run"; else fail "after damage: $msg"; fi

# --- export ------------------------------------------------------------------------------
"$dt" export "$tmp/ck4/ckpt-0000000016" --out "$tmp/exp.safetensors" > /dev/null && \
  "$dt" diff "$tmp/exp.safetensors" "$tmp/ref4/model.safetensors" > /dev/null && ok "export equals the run's final weights" || fail "export"

# --- resumed at its end: nothing to run, the weights are still evaluated -----------------
for lay in "-n 2" "-n 3 --strategy ps"; do
  k=$(tr -dc a-z <<<"$lay")
  run end_a_$k $lay $M --ckpt-dir "$tmp/ck_end_$k" --ckpt-every 8 && run end_b_$k $lay $M --ckpt-dir "$tmp/ck_end_$k" --resume auto && {
    a=$(grep -o 'test accuracy [0-9.]*%' "$tmp/end_a_$k.log"); b=$(grep -o 'test accuracy [0-9.]*%' "$tmp/end_b_$k.log")
    grep -q "no step left to run (resumed at step 16)" "$tmp/end_b_$k.log" && [ -n "$a" ] && [ "$a" = "$b" ] \
      && ok "$lay resumed at its end: no step left, $b as before" || fail "$lay resumed at its end: '$a' vs '$b': $(tail -1 "$tmp/end_b_$k.log")"; }
done

# --- retention: only the newest K complete checkpoints -------------------------------------
run keep -n 1 $M --ckpt-dir "$tmp/ck_keep" --ckpt-every 2 --ckpt-keep 2
n=$(ls "$tmp/ck_keep" | grep -c ckpt-)
[ "$n" -eq 2 ] && [ -d "$tmp/ck_keep/ckpt-0000000016" ] && ok "--ckpt-keep 2 keeps 2 ($(ls "$tmp/ck_keep" | tr '\n' ' '))" || fail "--ckpt-keep: $(ls "$tmp/ck_keep")"

finish
