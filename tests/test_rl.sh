#!/usr/bin/env bash
# dtrain rl (actor-learner, issue 14): CartPole learns in one process, with 2
# actor ranks synchronously (bitwise repeatable) and asynchronously (IMPALA):
# the greedy policy's return well above a random policy's ~22; the outputs;
# refusals.
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
err=$("$dt" rl --env pong 2>&1 >/dev/null); rc=$?
[ $rc -ne 0 ] && grep -q "the environments are cartpole" <<<"$err" && ok "refused: $err" || fail "--env pong: rc=$rc $err"
err=$("$dt" rl --envs 0 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && grep -q "expects a number" <<<"$err" && ok "refused: $err" || fail "--envs 0: rc=$rc $err"
finish
