#!/usr/bin/env bash
# dtrain rl (actor-learner, issue 14): CartPole learns in one process, with 2
# actor ranks synchronously (bitwise repeatable) and asynchronously (IMPALA):
# the greedy policy's return well above a random policy's ~22; Acrobot learns
# in one process (return well above -500); the outputs;
# an actor that dies (dropped under --async); refusals.
source "$(dirname "$0")/lib.sh" "$@"
ret() { grep -o '"eval_return":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
rl() { local out=$1; shift; timeout 300 "$dt" rl "$@" --out "$tmp/$out" > "$tmp/$out.log" 2>&1 ||
  { fail "dtrain rl $out exited $?:"; tail -3 "$tmp/$out.log" | indent; return 1; }; }

R="--env cartpole --updates 300 --eval-every 100 --eval-episodes 20 --seed 1"
rl one $R && {
  r=$(ret "$tmp/one")
  awk -v r="$r" 'BEGIN { exit !(r > 100) }' && [ -s "$tmp/one/policy.safetensors" ] &&
    [ "$(grep -c '"eval_return"' "$tmp/one/metrics.jsonl")" -ge 3 ] &&
    ok "one process, 300 updates (76800 env steps): greedy return $r over 20 episodes (random: ~22); metrics and policy written" ||
    fail "one process: return $r"; }
rl two_a -n 3 $R && rl two_b -n 3 $R && {
  r=$(ret "$tmp/two_a")
  awk -v r="$r" 'BEGIN { exit !(r > 100) }' && ok "learner + 2 actor ranks: greedy return $r" || fail "2 actors: return $r"
  cmp -s "$tmp/two_a/policy.safetensors" "$tmp/two_b/policy.safetensors" && ok "the same layout twice: bitwise identical policy" ||
    fail "two runs of -n 3 differ"; }
# IMPALA (--async): actors never wait for each other; V-trace corrects the lag
rl async -n 3 --async $R && {
  r=$(ret "$tmp/async"); lag=$(grep -o '"lag_hist":\[[0-9,]*\]' "$tmp/async/metrics.jsonl")
  awk -v r="$r" 'BEGIN { exit !(r > 100) }' && [ -n "$lag" ] && ok "async, learner + 2 actors: greedy return $r; $lag" ||
    fail "async: return $r, lag ${lag:-none}"; }
# Acrobot (rewards scaled by its default 0.01 in the learner): well above the -500
# a random or collapsed policy gets, within 200 updates
rl acrobot --env acrobot --updates 200 --eval-every 100 --eval-episodes 20 --seed 1 && {
  r=$(grep -o '"eval_return":[-0-9.]*' "$tmp/acrobot/metrics.jsonl" | tail -1 | cut -d: -f2)
  awk -v r="$r" 'BEGIN { exit !(r > -150) }' && grep -q '"reward_scale"' "$tmp/acrobot/policy.safetensors" &&
    ok "acrobot, one process, 200 updates (51200 env steps): greedy return $r over 20 episodes (random: ~-500)" ||
    fail "acrobot: return $r"; }
# an actor that dies (--inject crash) is dropped under --async and the run goes on
timeout 300 "$dt" rl -n 4 --async $R --updates 600 --timeout 2 --inject crash:rank=2:step=40 --out "$tmp/lost" > "$tmp/lost.log" 2>&1; rc=$?
r=$(ret "$tmp/lost")
[ $rc -eq 0 ] && grep -q "rl: actor rank 2 is lost (no rollout for" "$tmp/lost.log" &&
  grep -q '"lost_actors":"rank 2 at update' "$tmp/lost/metrics.jsonl" && awk -v r="$r" 'BEGIN { exit !(r > 100) }' &&
  ok "async: actor rank 2 crashed at its 40th rollout, was dropped, and the run finished with the others (exit 0, return $r)" ||
  { fail "async with a lost actor: rc=$rc, return $r:"; tail -3 "$tmp/lost.log" | indent; }
# synchronously the learner waits for every actor: the job ends, restarts are the supervisor's
timeout 300 "$dt" rl -n 3 $R --timeout 2 --inject crash:rank=1:step=20 > "$tmp/lost_sync.log" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "inject crash: rank 1" "$tmp/lost_sync.log" && ok "synchronous: a crashed actor ends the job (rc $rc)" ||
  { fail "synchronous with a crashed actor: rc=$rc"; tail -3 "$tmp/lost_sync.log" | indent; }
err=$("$dt" rl --inject byzantine:rank=1:mode=signflip 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && grep -q "crash, hang or slow" <<<"$err" && ok "refused: $err" || fail "--inject byzantine: rc=$rc $err"
err=$("$dt" rl --env pong 2>&1 >/dev/null); rc=$?
[ $rc -ne 0 ] && grep -q "the environments are cartpole" <<<"$err" && ok "refused: $err" || fail "--env pong: rc=$rc $err"
err=$("$dt" rl --envs 0 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && grep -q "expects a number" <<<"$err" && ok "refused: $err" || fail "--envs 0: rc=$rc $err"
finish
