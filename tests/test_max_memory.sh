#!/usr/bin/env bash
# --max-memory (issue 20): the start-up log gives the largest rank's own count
# by kind; a layout over the budget is refused at setup in one line naming what
# would fit (ZeRO stages exactly: the count it predicts for --zero 2 is the one
# a --zero 2 run logs), and that layout then trains within it; on one rank the
# line says the activations are what is left; bad values are refused.
source "$(dirname "$0")/lib.sh" "$@"

G="--model gpt --n-layer 4 --n-head 4 --n-embd 256 --block-size 32 --batch 2 --steps 2 --log-every 1 --eval-max 2"
total() { grep -o "own count at setup.*total [0-9.]* MiB" "$1" | grep -o 'total [0-9.]*' | cut -d' ' -f2; }
run z0 $G -n 2 --max-memory 1G && run z2 $G -n 2 --zero 2 --max-memory 1G && {
  t0=$(total "$tmp/z0.log") t2=$(total "$tmp/z2.log")
  if [ -n "$t0" ] && [ -n "$t2" ] && awk -v a="$t0" -v b="$t2" 'BEGIN { exit !(b < a) }'; then
    ok "the start-up count: ZeRO-0 $t0 MiB, ZeRO-2 $t2 MiB per rank ($(grep -o 'parameters [^;]*' "$tmp/z0.log"))"
  else fail "no count in the logs: '$t0' '$t2'"; fi
  mid=$(awk -v a="$t0" -v b="$t2" 'BEGIN { printf "%.0f", (a + b) / 2 * 1048576 }')
  err=$("$dt" train $G -n 2 --max-memory "$mid" --out "$tmp/over" 2>&1 >/dev/null); rc=$?
  n=$(grep -c "^dtrain train: " <<<"$err")
  if [ $rc -ne 0 ] && [ "$n" = 1 ] && grep -q "would fit on 2 ranks: .*--zero 2 ($t2 MiB)" <<<"$err" && [ ! -e "$tmp/over/model.safetensors" ]; then
    ok "over the budget at ZeRO-0: refused in one line, --zero 2 named at its exact count: $(grep "^dtrain train: " <<<"$err")"
  else fail "over the budget: rc=$rc, $n lines:"; indent <<<"$err"; fi
  run fits $G -n 2 --zero 2 --max-memory "$mid" && ok "--zero 2 trains within --max-memory $mid bytes"; }
err=$("$dt" train $G --max-memory 3M 2>&1 >/dev/null); rc=$?
[ $rc -ne 0 ] && grep -q "its activations alone are" <<<"$err" && ok "one rank, 3 MiB: $err" || fail "one rank: rc=$rc $err"
expect "--max-memory expects bytes" $G --max-memory 10Q
expect "--max-memory counts the synchronous strategies" --model mlp --steps 2 --max-memory 1G --strategy ps -n 3
finish
