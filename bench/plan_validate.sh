#!/usr/bin/env bash
# dtrain plan's predictions against measured runs on this machine (issue 16):
# the machine calibrated once per workload (`dtrain plan --calibrate`: the
# model's training step timed here, links from `dtrain bench allreduce --fit`),
# then every layout below run for real and its step time set beside the
# prediction. Prints markdown and a last line with the median and worst
# absolute error. One host only: the emulated 2-host cluster is not in it yet (issue 16).
#   bench/plan_validate.sh [BUILD_DIR]     (about 5 minutes on two cores)
set -u
build=${1:-build}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1
cores=$(nproc)
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'
echo "# flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '), $cores cores"
"$dt" bench allreduce -n 2 --fit 2>/dev/null | tail -1 > "$tmp/fit.json"
# workload: name, flags, layouts (n:dp:tp:pp:zero:micro:sched:recompute)
W1="--model mlp --batch 128 --steps 60 --log-every 10"
W2="--model gpt --batch 16 --steps 24 --log-every 4"
L1="1:1:1:1:0:1:1f1b:0 2:2:1:1:0:1:1f1b:0 2:2:1:1:1:1:1f1b:0 2:2:1:1:2:1:1f1b:0 2:1:2:1:0:1:1f1b:0 2:1:1:2:0:4:1f1b:0 2:1:1:2:0:4:gpipe:0 4:4:1:1:0:1:1f1b:0 4:2:2:1:0:1:1f1b:0 4:2:1:2:1:4:1f1b:0"
L2="1:1:1:1:0:1:1f1b:0 2:2:1:1:0:1:1f1b:0 2:2:1:1:2:1:1f1b:0 2:1:2:1:0:1:1f1b:0 2:1:1:2:0:4:1f1b:0 2:1:1:2:0:4:1f1b:1 4:2:2:1:0:1:1f1b:0 4:1:2:2:0:4:1f1b:0"
echo
echo "| workload | layout (dp x tp x pp, ZeRO, M, schedule) | predicted ms | measured ms | error |"
echo "|---|---|---|---|---|"
: > "$tmp/errs"
for w in W1 W2; do
  flags=${!w}; lay=L${w#W}; model=$(sed 's/.*--model \([a-z]*\).*/\1/' <<<"$flags"); batch=$(sed 's/.*--batch \([0-9]*\).*/\1/' <<<"$flags")
  for l in ${!lay}; do
    IFS=: read -r n dp tp pp zero mb sched rc <<<"$l"
    "$dt" plan --calibrate "$tmp/c.json" --model "$model" --batch "$batch" --fit "$tmp/fit.json" --ranks-per-host "$n" --cores "$cores" > /dev/null 2>&1
    "$dt" plan --cluster "$tmp/c.json" --model "$model" --batch "$batch" --json --top 100000 > "$tmp/p.json" 2>/dev/null
    extra=""; [ "$tp" -gt 1 ] && extra="$extra --tp $tp"; [ "$pp" -gt 1 ] && extra="$extra --pp $pp --micro-batches $mb --schedule $sched"
    [ "$rc" = 1 ] && extra="$extra --recompute"; [ "$zero" -gt 0 ] && extra="$extra --zero $zero"
    "$dt" train -n "$n" $flags $extra --quiet --out "$tmp/run" > "$tmp/run.log" 2>&1 || { echo "| $w | $l | run failed | | |"; continue; }
    python3 - "$tmp/p.json" "$tmp/run/metrics.jsonl" "$w" "$dp" "$tp" "$pp" "$zero" "$mb" "$sched" "$rc" "$batch" "$model" >> "$tmp/rows" <<'PY'
import json, statistics, sys
plan, metrics, w, dp, tp, pp, zero, mb, sched, rc, batch, model = sys.argv[1:]
dp, tp, pp, zero, mb, rc, batch = map(int, (dp, tp, pp, zero, mb, rc, batch))
pred = [x for x in json.load(open(plan)) if (x["dp"], x["tp"], x["pp"], x["zero"]) == (dp, tp, pp, zero)
        and (pp == 1 or (x["micro_batches"], x["schedule"], x["recompute"]) == (mb, sched, bool(rc)))]
rates = [json.loads(l)["items_per_s"] for l in open(metrics) if '"items_per_s"' in l]
per = batch * (128 if model == "gpt" else 1)
meas = statistics.median(rates[1:]) if len(rates) > 1 else rates[0]
m_ms, p_ms = 1e3 * per / meas, 1e3 * pred[0]["step_s"]
err = 100 * (p_ms - m_ms) / m_ms
lay = f"{dp} x {tp} x {pp}, ZeRO-{zero}" + (f", M {mb}, {sched}{', recompute' if rc else ''}" if pp > 1 else "")
print(f"| {w} | {lay} | {p_ms:.1f} | {m_ms:.1f} | {err:+.0f}% |")
print(f"ERR {abs(err):.2f}", file=sys.stderr)
PY
  done
done 2>> "$tmp/errs"
cat "$tmp/rows"
sort -g -k2 "$tmp/errs" | awk '{ e[NR] = $2 } END { printf "\nmedian absolute error %.1f%%, worst %.1f%% over %d layouts (targets: 10%%, 25%%)\n", e[int((NR + 1) / 2)], e[NR], NR }'
