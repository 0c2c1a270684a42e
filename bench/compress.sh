#!/usr/bin/env bash
# Gradient compression benchmarks (issue 7), 2 data-parallel ranks, mlp on
# Fashion-MNIST (W1 model, batch 128, SGD momentum 0.9, lr 0.1 cosine):
#
#  conv    unshaped: every compressor against none after the same steps (test
#          accuracy at the end, bar: within 1 point of none);
#  shaped  inside scripts/netbed.sh at each rate: time per step, wire bytes per
#          step, compression ratio, encode/decode time, time to 85% test
#          accuracy, and none/top-k time-to-85% at 100 Mbit/s against the 3x target;
#  gpt     inside the bed at 100 Mbit/s: a small gpt's time to a validation-loss
#          target, none vs top-k 1% vs PowerSGD rank 4.
#
# Usage: bench/compress.sh [BUILD_DIR]          (the shaped parts need root)
#
# Environment (defaults in brackets):
#   COMP_QUICK=1          quick mode: 1 epoch, 5 convergence rows, 100 Mbit/s only,
#                         none and top-k only, target 84% (top-k + EF ends one epoch
#                         at 84.25%), no gpt (about 6 minutes)
#   COMP_PARTS            which parts ["conv shaped gpt"]
#   COMP_EPOCHS           mlp run length in epochs of 469 steps [2]
#   COMP_CONV             convergence rows [none none+m0 fp16 bf16 int8 topk:0.01
#                         powersgd:4 sign+m0 sign sign-noef]
#   COMP_SHAPED           shaped rows [none fp16 bf16 int8 topk:0.01 powersgd:4 sign+m0]
#                         A row is a --compress value, optionally with "+m0" (adds
#                         --momentum 0 --lr 0.6) and/or "-noef" (--error-feedback off).
#   COMP_RATES            netbed --rate values [2gbit 200mbit]: the bed's loopback is
#                         one queue shared by both directions, so --rate 2R stands for
#                         two machines on a full-duplex link of R (docs/TESTBED.md)
#   COMP_TARGET           test accuracy to reach [0.85; quick 0.84]
#   COMP_EVAL             evaluate (and log) every K steps [25]
#   COMP_SEED             mlp seed [1]
#   COMP_STOP             1: end a shaped run at its first evaluation at or above the
#                         target (the rest of its schedule is not needed) [1]
#   COMP_RUN_TIMEOUT      seconds before a shaped run is ended and reported as such [1500]
#   COMP_GPT_RATE         [200mbit]; COMP_GPT_ROWS [none topk:0.01 topk:0.01-noef powersgd:4]
#   COMP_GPT_TARGET       validation loss to reach [2.65]; COMP_GPT_STEPS [300]
#   COMP_GPT_EVAL         [20]
#
# Times are training time from metrics.jsonl (evaluation excluded): the time_s of
# the log line at the evaluation's step (the evaluation lines' own time_s is
# short by that evaluation's duration). Logs and metrics: BUILD_DIR/compress-bench/.
set -u

build=${1:-build}
dt="$build/dtrain"
here=$(cd "$(dirname "$0")/.." && pwd)
netbed="$here/scripts/netbed.sh"
[ -x "$dt" ] || { echo "compress.sh: $dt not found: build first (cmake --build $build)" >&2; exit 2; }

quick=${COMP_QUICK:-0}
if [ "$quick" = 1 ]; then
  d_epochs=1 d_conv="none int8 topk:0.01 powersgd:4 sign+m0" d_shaped="none topk:0.01"
  d_rates="200mbit" d_parts="conv shaped" d_target=0.84
else
  d_epochs=2 d_conv="none none+m0 fp16 bf16 int8 topk:0.01 powersgd:4 sign+m0 sign sign-noef"
  d_shaped="none fp16 bf16 int8 topk:0.01 powersgd:4 sign+m0" d_rates="2gbit 200mbit" d_parts="conv shaped gpt" d_target=0.85
fi
parts=${COMP_PARTS:-$d_parts}
epochs=${COMP_EPOCHS:-$d_epochs}
conv_rows=${COMP_CONV:-$d_conv}
shaped_rows=${COMP_SHAPED:-$d_shaped}
rates=${COMP_RATES:-$d_rates}
target=${COMP_TARGET:-$d_target}
K=${COMP_EVAL:-25}
stop=${COMP_STOP:-1}
run_timeout=${COMP_RUN_TIMEOUT:-1500}
gpt_rate=${COMP_GPT_RATE:-200mbit}
gpt_rows=${COMP_GPT_ROWS:-none topk:0.01 topk:0.01-noef powersgd:4}
gpt_target=${COMP_GPT_TARGET:-2.65}
gpt_steps=${COMP_GPT_STEPS:-300}
gpt_K=${COMP_GPT_EVAL:-20}

out="$build/compress-bench"
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1
seed=${COMP_SEED:-1}
MLP="--model mlp -n 2 --epochs $epochs --seed $seed --quiet"
GPT="--model gpt -n 2 --n-layer 2 --n-head 4 --n-embd 128 --block-size 64 --batch 16 --steps $gpt_steps --eval-max 64 --seed 1 --quiet"
t_start=$(date +%s)
pct() { awk -v t="$1" 'BEGIN { printf "%g", 100 * t }'; }

echo "compress.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$here" rev-parse --short HEAD 2>/dev/null), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "mlp: dtrain train $MLP (= $((469 * epochs)) steps of global batch 128)"

# row -> dtrain flags
flags() {
  local r=$1 f=""
  case $r in *+m0*) f="$f --momentum 0 --lr 0.6"; r=${r/+m0/} ;; esac
  case $r in *-noef*) f="$f --error-feedback off"; r=${r/-noef/} ;; esac
  echo "--compress $r$f"
}
# row -> what error feedback it runs with
ef() {
  case $1 in *-noef*) echo off; return ;; esac
  case $1 in none*|fp16*|bf16*) echo "-" ;; *) echo on ;; esac
}
# rate -> what it stands for (half of it per direction)
stands() {
  echo "$1" | awk '{ n = $0 + 0; u = $0; sub(/^[0-9.]+/, "", u); h = n / 2;
    if (u == "gbit" && h < 1) { h *= 1000; u = "mbit" }
    sub(/bit$/, "bit/s", u); print h " " toupper(substr(u, 1, 1)) substr(u, 2) }'
}

# Summary of one metrics.jsonl: step_ms bytes ratio enc_ms dec_ms comm_ms reach_s reach_step last_eval last_step
# The first log window is left out of the medians (start-up; its bytes also count
# the parameter broadcast before step 1). MODE acc: first eval >= target; loss: <= target.
summary() {
  awk -v tgt="$2" -v mode="$3" '
    function get(k,   m) { if (match($0, "\"" k "\":[-0-9.e+]+")) { m = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", m); return m + 0 } return "" }
    function med(a, n,   i, j, t) { if (n == 0) return -1
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    /"epoch"/ { s = get("step"); t = get("time_s"); T[s] = t; nl++
      if (nl > 1) { w++; st[w] = 1000 * (t - pt) / (s - ps); by[w] = get("bytes_sent"); cm[w] = 1000 * get("comm_s")
        r = get("compress_ratio"); ra[w] = (r == "" ? 1 : r); en[w] = 1000 * get("encode_s"); de[w] = 1000 * get("decode_s") }
      ps = s; pt = t; next }
    /"test_acc"|"val_loss"/ { s = get("step"); v = (mode == "acc") ? get("test_acc") : get("val_loss"); le = v; ls = s
      if (!hit && ((mode == "acc" && v >= tgt) || (mode == "loss" && v <= tgt))) { hit = 1; hs = s } }
    END { rs = (hit && (hs in T)) ? sprintf("%.1f", T[hs]) : "-"
      printf "%.1f %d %.1f %.2f %.2f %.1f %s %s %s %s\n", med(st, w), med(by, w), med(ra, w), med(en, w), med(de, w), med(cm, w),
             rs, (hit ? hs : "-"), (le == "" ? "-" : le), (ls == "" ? "-" : ls) }' "$1/metrics.jsonl"
}

# Run dtrain train inside the bed in the background; end it at the target
# (COMP_STOP) or after COMP_RUN_TIMEOUT s. Sets run_rc, run_why, run_wall.
bed_run() { # rate dir mode target dtrain-args...
  local rate=$1 dir=$2 mode=$3 tgt=$4 pid t0
  shift 4
  rm -rf "$dir"; mkdir -p "$dir"
  t0=$(date +%s)
  "$netbed" --rate "$rate" -- "$dt" train "$@" --out "$dir" >"$dir/run.log" 2>&1 &
  pid=$!
  run_why=""
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ "$stop" = 1 ] && [ -f "$dir/metrics.jsonl" ] && [ "$(summary "$dir" "$tgt" "$mode" | cut -d' ' -f8)" != "-" ]; then
      run_why="stopped at target"; kill -TERM "$pid" 2>/dev/null; break
    fi
    if [ $(($(date +%s) - t0)) -ge "$run_timeout" ]; then
      run_why="TIMED OUT after ${run_timeout} s"; kill -TERM "$pid" 2>/dev/null; break
    fi
  done
  wait "$pid"; run_rc=$?
  run_wall=$(($(date +%s) - t0))
  if [ -z "$run_why" ]; then
    if [ "$run_rc" = 0 ]; then run_why="ran to the end"; else run_why="FAILED (exit $run_rc; see $dir/run.log)"; fi
  fi
}

bed_ok() {
  if [ "$(id -u)" != 0 ]; then echo "SKIPPED: the shaped test bed needs root (scripts/netbed.sh)"; return 1; fi
  local e
  if ! e=$("$netbed" --rate 1gbit -- true 2>&1); then
    echo "SKIPPED: scripts/netbed.sh cannot make its bed here: $(echo "$e" | tail -1)"; return 1
  fi
  return 0
}

# ---------------------------------------------------------------- convergence
if [[ " $parts " == *" conv "* ]]; then
  echo
  echo "## Convergence, unshaped (shared memory), $((469 * epochs)) steps, test accuracy at the end"
  echo "bar: within 1 percentage point of none (the issue names top-k 1% + EF, int8, sign + EF, PowerSGD rank 4)"
  echo
  echo "| row | flags | error feedback | test accuracy | vs none (points) | within 1 point? | wall s |"
  echo "|---|---|---|---:|---:|---|---:|"
  base=""
  for r in $conv_rows; do
    dir="$out/conv-${r//[:+]/_}"
    rm -rf "$dir"; mkdir -p "$dir"
    t0=$(date +%s)
    # shellcheck disable=SC2046,SC2086  # word splitting of the flag strings is meant
    if "$dt" train $MLP $(flags "$r") --out "$dir" >"$dir/run.log" 2>&1; then
      a=$(grep -o '"test_acc":[0-9.]*' "$dir/metrics.jsonl" | tail -1 | cut -d: -f2)
      [ "$r" = none ] && base=$a
      awk -v r="$r" -v f="$(flags "$r")" -v e="$(ef "$r")" -v a="$a" -v b="$base" -v w=$(($(date +%s) - t0)) 'BEGIN {
        if (r == "none" || b == "") { printf "| %s | `%s` | %s | %.2f%% | | | %d |\n", r, f, e, 100 * a, w; exit }
        d = 100 * (a - b)
        if (r ~ /^none/) { printf "| %s | `%s` | %s | %.2f%% | %+.2f | (uncompressed reference) | %d |\n", r, f, e, 100 * a, d, w; exit }
        printf "| %s | `%s` | %s | %.2f%% | %+.2f | %s | %d |\n", r, f, e, 100 * a, d, (d >= -1 ? "yes" : "MISSED"), w }'
    else
      echo "| $r | \`$(flags "$r")\` | $(ef "$r") | FAILED (exit $?; $dir/run.log: $(tail -1 "$dir/run.log")) | | | $(($(date +%s) - t0)) |"
    fi
  done
fi

# ---------------------------------------------------------------- shaped mlp
if [[ " $parts " == *" shaped "* ]]; then
  echo
  echo "## Shaped network (scripts/netbed.sh), mlp, time to $(pct "$target")% test accuracy"
  if bed_ok; then
    echo "evaluated every $K steps (time at the first evaluation at or above the target); run length $((469 * epochs)) steps$([ "$stop" = 1 ] && echo ", ended at the target")"
    declare -A reach
    for rate in $rates; do
      echo
      echo "### --rate $rate (stands for 2 machines on a full-duplex $(stands "$rate") link)"
      echo
      echo "| row | error feedback | ms/step (median) | wire bytes/step (rank 0) | ratio | encode ms/step | decode ms/step | comm ms/step | time to $(pct "$target")% | speed-up vs none | last eval | run |"
      echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
      for r in $shaped_rows; do
        dir="$out/bed-$rate-${r//[:+]/_}"
        # shellcheck disable=SC2046,SC2086  # word splitting of the flag strings is meant
        bed_run "$rate" "$dir" acc "$target" $MLP $(flags "$r") --eval-every "$K" --log-every "$K"
        if [ ! -s "$dir/metrics.jsonl" ]; then
          echo "| $r | $(ef "$r") | | | | | | | | | | $run_why: no metrics; $(tail -1 "$dir/run.log") |"
          continue
        fi
        read -r sms by ra en de cm rs rstep le ls <<<"$(summary "$dir" "$target" acc)"
        reach[$rate,$r]=$rs
        awk -v r="$r" -v e="$(ef "$r")" -v sms="$sms" -v by="$by" -v ra="$ra" -v en="$en" -v de="$de" -v cm="$cm" -v rs="$rs" -v rstep="$rstep" \
            -v b="${reach[$rate,none]:--}" -v le="$le" -v ls="$ls" -v why="$run_why" -v w="$run_wall" 'BEGIN {
          t = (rs == "-") ? "not reached" : sprintf("%s s (step %s)", rs, rstep)
          sp = (rs == "-" || b == "-" || r == "none") ? "" : sprintf("%.2fx", b / rs)
          printf "| %s | %s | %s | %d | %.1f | %.2f | %.2f | %s | %s | %s | %.2f%% at step %s | %s, %d s wall |\n",
                 r, e, sms, by, ra, en, de, cm, t, sp, 100 * le, ls, why, w }'
      done
    done
    # the issue's target: top-k 1% + EF at 100 Mbit/s at least 3x sooner than none
    for rate in $rates; do
      [ "$rate" = 200mbit ] || continue
      tk=$(for r in $shaped_rows; do case $r in topk:0.01) echo "$r" ;; esac; done | head -1)
      [ -n "$tk" ] || continue
      awk -v a="${reach[$rate,none]:--}" -v b="${reach[$rate,$tk]:--}" 'BEGIN {
        printf "\nTarget (100 Mbit/s = --rate 200mbit): none / top-k 1%% + EF time to the accuracy >= 3x: "
        if (a == "-" || b == "-") { print "cannot be judged (" (a == "-" ? "none" : "top-k") " did not reach the target)"; exit }
        printf "%.1f s / %.1f s = %.2fx: %s\n", a, b, a / b, (a / b >= 3 ? "met" : "MISSED") }'
    done
  fi
fi

# ---------------------------------------------------------------- shaped gpt
if [[ " $parts " == *" gpt "* ]]; then
  echo
  echo "## Shaped network, gpt: time to validation loss <= $gpt_target"
  if bed_ok; then
    echo "dtrain train $GPT (AdamW defaults), --rate $gpt_rate (stands for $(stands "$gpt_rate") full duplex), evaluated every $gpt_K steps"
    echo
    echo "| row | ms/step (median) | wire bytes/step (rank 0) | ratio | encode ms/step | decode ms/step | time to val loss <= $gpt_target | speed-up vs none | last eval | run |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"
    gnone=-
    for r in $gpt_rows; do
      dir="$out/gpt-$gpt_rate-${r//[:+]/_}"
      # shellcheck disable=SC2046,SC2086  # word splitting of the flag strings is meant
      bed_run "$gpt_rate" "$dir" loss "$gpt_target" $GPT $(flags "$r") --eval-every "$gpt_K" --log-every "$gpt_K"
      if [ ! -s "$dir/metrics.jsonl" ]; then
        echo "| $r | | | | | | | | | $run_why: no metrics; $(tail -1 "$dir/run.log") |"
        continue
      fi
      read -r sms by ra en de cm rs rstep le ls <<<"$(summary "$dir" "$gpt_target" loss)"
      [ "$r" = none ] && gnone=$rs
      awk -v r="$r" -v sms="$sms" -v by="$by" -v ra="$ra" -v en="$en" -v de="$de" -v rs="$rs" -v rstep="$rstep" -v b="$gnone" \
          -v le="$le" -v ls="$ls" -v why="$run_why" -v w="$run_wall" 'BEGIN {
        t = (rs == "-") ? "not reached" : sprintf("%s s (step %s)", rs, rstep)
        sp = (rs == "-" || b == "-" || r == "none") ? "" : sprintf("%.2fx", b / rs)
        printf "| %s | %s | %d | %.1f | %.2f | %.2f | %s | %s | %.4f at step %s | %s, %d s wall |\n", r, sms, by, ra, en, de, t, sp, le, ls, why, w }'
    done
  fi
fi

echo
echo "total wall time: $(($(date +%s) - t_start)) s; load average at the end $(cut -d' ' -f1-3 /proc/loadavg); logs and metrics in $out/"
