#!/usr/bin/env bash
# The pipeline's checks that judge measured time, run alone (RUN_SERIAL,
# tests.cmake): the schedules' bubble, and the auto partition against every
# split.
#
# The bubble: with stages of fixed cost (--pp-stage-cost-us:
# 80 ms forward, 160 ms backward per micro-batch and stage, split over its
# chunks), the mean idle share of a step against the run's bubble_formula,
# (P-1)/(M+P-1) for GPipe and 1F1B, (P-1)/(VM+P-1) interleaved. Within 10% of
# it, or within 0.015 (P = 2's interleaved bubble is 0.059: the messages add a
# few ms a step). The schedules a check tells apart are far further apart than
# that (P = 4, M = 8 against M = 4: 0.27 against 0.43; no pipelining 0.75).
#
# Beside test_dp's ranks on CI's 2 cores GPipe P = 4, M = 8 measured 15% over
# the formula twice (5% here alone): every wake-up after a message waits for a
# core; and the auto partition's split (1,5, the best by design) measured 0.114 s
# against another split's 0.068 in both sweeps (alone: 0.050, the best).
# A run outside is measured once more and the closer judged (both printed).
source "$(dirname "$0")/lib.sh" "$@"
pfield() { grep '"pipeline"' "$1/metrics.jsonl" | sed "s/.*\"$2\":\[\([^]]*\)\].*/\1/"; }

bubble() { # NAME TRY FLAGS...: prints "mean idle ... (x%)", exit 0 within 10% or 0.015
  local name=$1_$2; shift 2
  run bub_$name "$@" --pp-stage-cost-us 80000 --model mlp --batch 32 --steps 2 --quiet || return 2
  awk -v l="$(pfield "$tmp/bub_$name" idle_frac)" \
      -v f="$(grep -o '"bubble_formula":[0-9.e-]*' "$tmp/bub_$name/metrics.jsonl" | cut -d: -f2)" \
      'BEGIN { n = split(l, a, ","); s = 0; for (i = 1; i <= n; i++) s += a[i]; m = s / n;
       d = m - f; if (d < 0) d = -d;
       printf "mean idle %.4f vs formula %.4f (%.1f%%)", m, f, 100 * (m - f) / f; exit !(f > 0 && (d <= 0.1 * f || d <= 0.015)) }'
}
check() { # LABEL FLAGS...
  local label=$1; shift
  if [ $sanitized = 1 ]; then skip "$label bubble"; return; fi
  local key msg msg2
  key=$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_')
  if msg=$(bubble "$key" 1 "$@"); then ok "$label bubble: $msg"
  elif msg2=$(bubble "$key" 2 "$@"); then ok "$label bubble: $msg2 (a first run, on a busy machine: $msg)"
  else fail "$label bubble: $msg; measured again: $msg2"; fi
}

for sch in gpipe 1f1b; do
  for M in 4 8; do
    check "$sch P=4 M=$M" -n 4 --pp 4 --schedule $sch --micro-batches $M --hidden 32,32,32
  done
done
for P in 2 4; do
  check "interleaved P=$P V=2 M=8" -n $P --pp $P --schedule interleaved --virtual-stages 2 --micro-batches 8 \
        --hidden 32,32,32,32,32,32,32
done

# auto partition of deliberately uneven blocks vs every possible 2-stage split:
# two big blocks first (784x640, 640x640) then small ones, so one split (1,5)
# is ~1.8x better than every other and the check does not hang on noise (with
# one big block, as before, every split cost within ~5% and a loaded machine
# decided which was "best")
U="--model mlp --hidden 640,640,32,32 --batch 64 --steps 10 --lr 0.01 --quiet -n 2 --pp 2 --micro-batches 4"
# Every split is timed once; the auto partition is then judged by the time its
# split took in that same sweep (a second, separate run would compare two noisy
# measurements of the same thing).
if [ $sanitized = 1 ]; then skip "auto partition against every split"; else
best=""
declare -A tsplit
for k in 1 2 3 4 5; do
  run split_$k $U --pp-partition $k,$((6 - k)) || continue
  tsplit[$k]=$(pfield "$tmp/split_$k" busy_s | tr ',' '\n' | sort -g | tail -1)
  best=$(awk -v a="${tsplit[$k]}" -v b="${best:-1e9}" 'BEGIN { print (a < b ? a : b) }')
done
run split_auto $U --pp-partition auto
part=$(pfield "$tmp/split_auto" blocks_per_stage)
ka=${part%%,*}
ta=${tsplit[$ka]:-1e9}
if ! awk -v a="$ta" -v b="$best" 'BEGIN { exit !(a <= 1.15 * b) }'; then
  # A loaded machine can make one sweep lie: time every split once more and
  # keep each split's better time.
  best=""
  for k in 1 2 3 4 5; do
    run split2_$k $U --pp-partition $k,$((6 - k)) || continue
    t2=$(pfield "$tmp/split2_$k" busy_s | tr ',' '\n' | sort -g | tail -1)
    tsplit[$k]=$(awk -v a="${tsplit[$k]:-1e9}" -v b="$t2" 'BEGIN { print (a < b ? a : b) }')
    best=$(awk -v a="${tsplit[$k]}" -v b="${best:-1e9}" 'BEGIN { print (a < b ? a : b) }')
  done
  ta=${tsplit[$ka]:-1e9}
fi
if awk -v a="$ta" -v b="$best" 'BEGIN { exit !(a <= 1.15 * b) }'; then
  ok "auto partition chose $part: that split's bottleneck stage took ${ta}s, the best split ${best}s"
else fail "auto partition chose $part: ${ta}s vs best ${best}s"; fi
fi

finish
