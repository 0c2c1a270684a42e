#!/usr/bin/env bash
# shellcheck disable=SC2034  # the workloads and lists are read by name: ${!w}
# dtrain plan's predictions against measured runs (issue 16). For each group
# (a workload on one world: 1, 2 or 4 ranks on this host, or 2 emulated hosts x
# 1 or 2 ranks at 1 Gbit/s and 100 Mbit/s) the world is described once
# (`dtrain plan --calibrate`: the model's training step timed here, the links
# from `dtrain bench allreduce --fit` on that world), then every layout of the
# group's list, and the planner's top-ranked fitting layout, is run for real
# and its median step time set beside the prediction. Prints markdown: one
# table per part, the planner's top choice against the measured best layout of
# each group, and last the median and worst absolute error and the top choice's
# worst gap. Compressed layouts count only once the planner predicts them (its
# --json rows carry "compress"); before, they are shown "not predicted yet".
#
# The cluster part (scripts/cluster.sh, network namespaces) needs root; without
# it the part is skipped with one line. PARTS="host" or PARTS="cluster" runs one;
# PV_RATES ("1gbit 100mbit") the cluster part's link rates.
# Each layout runs in PV_ROUNDS (2) interleaved rounds; its row is the fastest.
#   bench/plan_validate.sh [BUILD_DIR]     (40 minutes on two cores at 2 rounds:
#                                           one host 14, each link rate about 13)
set -u
build=$(cd "${1:-build}" && pwd) || exit 2
dt="$build/dtrain"
root=$(cd "$(dirname "$0")/.." && pwd)
cl="$root/scripts/cluster.sh"
tmp=$(mktemp -d)
chmod 755 "$tmp"
export OPENBLAS_NUM_THREADS=1 DTRAIN_CLUSTER_DIR="$tmp/cluster"
cluster=down
cleanup() { [ "$cluster" = up ] && "$cl" down > /dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
cores=$(nproc)
ROUNDS=${PV_ROUNDS:-2}

# Workloads (model flags) and their run lengths: STEPS:LOG_EVERY. The first
# logged interval is left out, the median of the others is the step time. At
# 100 Mbit/s a step is wire-bound (0.5-2 s) and its intervals agree within a
# few percent, so fewer steps do. W1's 20 ms steps on this shared machine
# vary by a third between 10-step intervals, so it runs 9 intervals of 20.
W1="--model mlp --batch 128"
W2="--model gpt --batch 16 --eval-max 1"
steps_W1=200:20 steps_W1_100mbit=12:3
steps_W2=16:4 steps_W2_100mbit=6:2

# Layouts: n:dp:tp:pp:zero:micro:schedule:recompute[:compression]; schedule
# gpipe, 1f1b or ilV (interleaved 1F1B, V chunks a stage); compression
# "seqpar" stands for --sequence-parallel (with tp)
H1="1:1:1:1:0:1:1f1b:0 2:2:1:1:0:1:1f1b:0 2:2:1:1:1:1:1f1b:0 2:2:1:1:2:1:1f1b:0 2:2:1:1:3:1:1f1b:0 2:1:2:1:0:1:1f1b:0
    2:1:1:2:0:4:1f1b:0 2:1:1:2:0:4:gpipe:0 2:1:1:2:0:4:il2:0 2:2:1:1:0:1:1f1b:0:int8 4:4:1:1:0:1:1f1b:0
    4:2:2:1:0:1:1f1b:0 4:2:1:2:1:4:1f1b:0"
H2="1:1:1:1:0:1:1f1b:0 2:2:1:1:0:1:1f1b:0 2:2:1:1:2:1:1f1b:0 2:2:1:1:3:1:1f1b:0 2:1:2:1:0:1:1f1b:0 2:1:1:2:0:4:1f1b:0
    2:1:1:2:0:4:1f1b:1 2:1:1:2:0:4:il2:0 2:2:1:1:0:1:1f1b:0:int8 4:2:2:1:0:1:1f1b:0 4:1:2:2:0:4:1f1b:0
    4:2:1:2:0:4:il2:0 2:1:2:1:0:1:1f1b:0:seqpar 4:2:2:1:0:1:1f1b:0:seqpar"
# On 2 hosts ranks fill node1 first, and the mesh puts tp innermost, pp
# outermost: dp over 2 x 1 or 2 x 2 crosses the hosts; --pp 2 puts a stage on
# each host (with dp or tp inside it); --tp 2 on 2 x 2 keeps tp inside a host.
C2="2:2:1:1:0:1:1f1b:0 2:2:1:1:1:1:1f1b:0 2:2:1:1:2:1:1f1b:0 2:2:1:1:3:1:1f1b:0 2:1:1:2:0:4:1f1b:0
    2:1:1:2:0:4:il2:0 2:2:1:1:0:1:1f1b:0:fp16 2:2:1:1:0:1:1f1b:0:int8"
C4="4:4:1:1:0:1:1f1b:0 4:4:1:1:1:1:1f1b:0 4:4:1:1:2:1:1f1b:0 4:2:1:2:0:4:1f1b:0 4:2:1:2:0:4:il2:0 4:1:2:2:0:4:1f1b:0
    4:2:2:1:0:1:1f1b:0 4:4:1:1:0:1:1f1b:0:topk:0.01"

# ---- helpers ------------------------------------------------------------------
pv() { python3 "$tmp/pv.py" "$@"; }
# layout_flags LAYOUT: dtrain train's flags for a layout of the lists above
layout_flags() {
  local tp pp zero mb sched rc comp f=""
  IFS=: read -r _ _ tp pp zero mb sched rc comp <<<"$1"
  [ "$tp" -gt 1 ] && f="$f --tp $tp"
  case $sched in il*) sched="interleaved --virtual-stages ${sched#il}" ;; esac
  [ "$pp" -gt 1 ] && f="$f --pp $pp --micro-batches $mb --schedule $sched"
  [ "$rc" = 1 ] && f="$f --recompute"
  [ "$zero" -gt 0 ] && f="$f --zero $zero"
  [ "$comp" = seqpar ] && f="$f --sequence-parallel" && comp=""
  [ -n "$comp" ] && f="$f --compress $comp"
  echo "$f"
}
# train N HOSTFILE FLAGS...: one bounded run into $tmp/run; HOSTFILE empty: this host
train() {
  local n=$1 hf=$2; shift 2
  rm -rf "$tmp/run"
  if [ -z "$hf" ]; then
    timeout -k 10 300 "$dt" train -n "$n" "$@" --quiet --out "$tmp/run" > "$tmp/run.log" 2>&1
  else
    timeout -k 10 300 "$cl" exec node1 "$dt" train --hostfile "$hf" -n "$n" "$@" --quiet --out "$tmp/run" > "$tmp/run.log" 2>&1
  fi
}
# fit N HOSTFILE: the links of that world into $tmp/fit.json, its table on stdout as comments
fit() {
  local cmd=("$dt" bench allreduce -n "$1" --fit)
  [ -n "$2" ] && cmd=("$cl" exec node1 "${cmd[@]}" --hostfile "$2")
  timeout -k 10 300 "${cmd[@]}" > "$tmp/fit.txt" 2>&1 || { echo "# fit failed: $(tail -1 "$tmp/fit.txt")"; return 1; }
  tail -1 "$tmp/fit.txt" > "$tmp/fit.json"
  grep -E "^(local|cross|burst|  )" "$tmp/fit.txt" | sed 's/^/#   /'
}
# plan W HOSTS PER CORES [--emulated]: describe the world (emulated hosts share
# this machine's CORES), then every layout into $tmp/plan.json
plan() {
  local model batch
  model=$(sed 's/.*--model \([a-z]*\).*/\1/' <<<"${!1}"); batch=$(sed 's/.*--batch \([0-9]*\).*/\1/' <<<"${!1}")
  rm -f "$tmp/plan.json"
  "$dt" plan --calibrate "$tmp/c.json" --model "$model" --batch "$batch" --fit "$tmp/fit.json" --hosts "$2" \
    --ranks-per-host "$3" --cores "$4" ${5-} > "$tmp/cal.log" 2>&1 &&
    "$dt" plan --cluster "$tmp/c.json" --model "$model" --batch "$batch" --json --top 100000 > "$tmp/plan.json" 2>> "$tmp/cal.log" ||
    { echo "| $1 | planner failed: $(tail -1 "$tmp/cal.log") | | | | |"; echo '[]' > "$tmp/plan.json"; }
}
# measure W N HOSTFILE STEPS FLAGS: run a layout once, print its median step in
# ms, or "failed (...)"
measure() {
  local w=$1 n=$2 hf=$3 steps=${4%:*} every=${4#*:} flags=$5
  # shellcheck disable=SC2086
  if train "$n" "$hf" ${!w} $flags --steps "$steps" --log-every "$every"; then pv ms "$tmp/run/metrics.jsonl" "${!w}"
  else echo "failed (exit $?: $(tail -1 "$tmp/run.log" | cut -c1-80))"; fi
}
# group W WHERE N HOSTFILE STEPS LAYOUTS...: the layouts of one world and the
# planner's top choice, each run in $ROUNDS interleaved rounds (a slow spell of
# the shared machine lands on one round of every layout, not on all of one
# layout's runs), each row the fastest round beside the prediction. A layout is
# known by its flags (pv key); a pipeline runs with the partition the planner
# predicted it with, unless the flags (the planner's own command) name one.
group() {
  local w=$1 where=$2 n=$3 hf=$4 steps=$5 g="$1, $2" l flags top k pred part r i
  local -a keys=() fl=() preds=() tops=()
  shift 5
  for l in "$@"; do
    flags=$(layout_flags "$l"); keys+=("$(pv key "-n $n $flags")"); fl+=("$flags"); tops+=("")
  done
  IFS=$'\t' read -r top flags < <(pv top "$tmp/plan.json")
  if [ -n "$top" ]; then
    printf '%s\t%s\n' "$g" "$top" >> "$tmp/tops"
    k=-1; for i in "${!keys[@]}"; do [ "${keys[$i]}" = "$top" ] && k=$i; done
    if [ $k -lt 0 ]; then keys+=("$top"); fl+=("$flags"); tops+=(top); fi
  fi
  for i in "${!keys[@]}"; do
    IFS=$'\t' read -r pred part < <(pv match "$tmp/plan.json" "${keys[$i]}")
    preds+=("$pred")
    [[ -n $part && ${fl[$i]} != *--pp-partition* ]] && fl[$i]="${fl[$i]} --pp-partition $part"
  done
  : > "$tmp/rounds"
  for r in $(seq 1 "$ROUNDS"); do
    for i in "${!keys[@]}"; do printf '%s\t%s\n' "$i" "$(measure "$w" "$n" "$hf" "$steps" "${fl[$i]}")" >> "$tmp/rounds"; done
  done
  for i in "${!keys[@]}"; do
    pv row "$tmp/results" "$g" "$w" "$where" "${keys[$i]}" "${preds[$i]}" "$(pv fastest "$tmp/rounds" "$i")" "${tops[$i]}"
  done
}
header() {
  echo
  echo "| workload | where | layout (dp x tp x pp, ZeRO, M, schedule, compression) | predicted ms | measured ms | error |"
  echo "|---|---|---|---|---|---|"
}
# layouts_of N LIST: the layouts of LIST with N ranks
layouts_of() { local l; for l in $2; do [ "${l%%:*}" = "$1" ] && echo "$l"; done; }

cat > "$tmp/pv.py" <<'PY'
import json, shlex, statistics, sys

def key(flags):
    """a layout's flags in one spelling: defaults and the pipeline partition left
    out, micro-batches and schedule only with a pipeline, the rest sorted"""
    t, f = flags.split(), {}
    for i, a in enumerate(t):
        if a.startswith("-") and not a.lstrip("-").replace(".", "").isdigit():
            f[a] = t[i + 1] if i + 1 < len(t) and not t[i + 1].startswith("--") else ""
    for a, d in (("--tp", "1"), ("--pp", "1"), ("--zero", "0"), ("--compress", "none"), ("--pp-partition", None)):
        if f.get(a, d) == d or d is None: f.pop(a, None)
    if "--pp" not in f: f.pop("--micro-batches", None); f.pop("--schedule", None); f.pop("--virtual-stages", None)
    return " ".join(f"{a} {v}".strip() for a, v in sorted(f.items()))

def key_cmd(x):
    c = shlex.split(x["command"])
    return c[c.index("--batch") + 2:], key(" ".join(["-n", c[c.index("-n") + 1]] + c[c.index("--batch") + 2:]))

def label(k):
    t = k.split(); f = {a: t[i + 1] if i + 1 < len(t) and not t[i + 1].startswith("--") else "" for i, a in enumerate(t) if a.startswith("-")}
    tp, pp = int(f.pop("--tp", 1)), int(f.pop("--pp", 1))
    s = f'{int(f.pop("-n")) // (tp * pp)} x {tp} x {pp}, ZeRO-{f.pop("--zero", 0)}'
    if pp > 1: s += f', M {f.pop("--micro-batches", 1)}, {f.pop("--schedule", "1f1b")}'
    if "--virtual-stages" in f: s += f' (V {f.pop("--virtual-stages")})'
    if "--recompute" in f: f.pop("--recompute"); s += ", recompute"
    if "--compress" in f: s += ", " + f.pop("--compress")
    return s + "".join(f", {a} {v}".rstrip() for a, v in f.items())

def match(plan, k):
    """prints the predicted ms and the pipeline partition, or why there is none"""
    rows = json.load(open(plan))
    hit = [x for x in rows if key_cmd(x)[1] == k]
    if hit: print(f'{1e3 * hit[0]["step_s"]:.1f}\t{hit[0].get("partition", "")}')
    elif "--compress" in k and not any("compress" in x for x in rows): print("not predicted yet\t")
    else: print("no prediction\t")

def top(plan):
    """the first fitting row: its key and the flags of its command after --batch B"""
    for x in json.load(open(plan)):
        if x["fits"]:
            flags, k = key_cmd(x)
            return print(f'{k}\t{" ".join(flags)}')

def ms(metrics, flags):
    f = flags.split()
    per = int(f[f.index("--batch") + 1]) * (128 if "gpt" in f else 1)
    try: rates = [json.loads(l)["items_per_s"] for l in open(metrics) if '"items_per_s"' in l]
    except (OSError, ValueError): rates = []
    if not rates: return print("no metrics")
    print(f"{1e3 * per / statistics.median(rates[1:] if len(rates) > 1 else rates):.1f}")

def fastest(rounds, i):
    """the fastest of a layout's rounds, or its last failure"""
    got = [l.rstrip("\n").split("\t", 1)[1] for l in open(rounds) if l.split("\t", 1)[0] == i]
    ok = [float(x) for x in got if num(x)]
    print(f"{min(ok):.1f}" if ok else (got[-1] if got else "not run"))

def row(results, group, w, where, key, pred, meas, top):
    with open(results, "a") as f: f.write("\t".join((group, key, pred, meas)) + "\n")
    err = f"{100 * (float(pred) - float(meas)) / float(meas):+.0f}%" if num(pred) and num(meas) else ""
    print(f"| {w} | {where} | {label(key)}{' (top choice)' if top else ''} | {pred} | {meas} | {err} |", flush=True)

def num(s):
    try: return float(s) > 0
    except ValueError: return False

def summary(results, tops):
    rows = [l.rstrip("\n").split("\t") for l in open(results)]
    if not rows: return print("\nno layout was run")
    errs = {}
    for g, key, pred, meas in rows:
        if num(pred) and num(meas):
            errs.setdefault("cluster" if "hosts" in g else "one host", []).append(abs(float(pred) - float(meas)) / float(meas) * 100)
    print("\n## The planner's top choice against the measured best layout\n")
    print("| group | top choice | measured ms | measured best (of the layouts it predicts) | measured ms | gap |")
    print("|---|---|---|---|---|---|")
    gaps = []
    for g, t in (l.rstrip("\n").split("\t") for l in open(tops)):
        mine = [r for r in rows if r[0] == g]
        ok = [r for r in mine if num(r[3]) and num(r[2])]
        tm = next((float(r[3]) for r in mine if r[1] == t and num(r[3])), None)
        best = min(ok, key=lambda r: float(r[3]), default=None)
        other = min((r for r in mine if num(r[3]) and not num(r[2])), key=lambda r: float(r[3]), default=None)
        note = f" (unpredicted {label(other[1])}: {float(other[3]):.1f} ms)" if other and best and float(other[3]) < float(best[3]) else ""
        if tm is None or best is None:
            print(f"| {g} | {label(t)} | run failed | {label(best[1]) if best else '-'}{note} | {best[3] if best else '-'} | n/a |")
            gaps.append(float("inf"))
            continue
        gap = 100 * (tm - float(best[3])) / float(best[3])
        gaps.append(gap)
        print(f"| {g} | {label(t)} | {tm:.1f} | {label(best[1])}{note} | {float(best[3]):.1f} | {gap:+.1f}% |")
    print()
    unpred = sum(1 for r in rows if r[2] == "not predicted yet")
    for part, e in errs.items():
        e.sort()
        print(f"{part}: median absolute error {e[(len(e) - 1) // 2]:.1f}%, worst {e[-1]:.1f}% over {len(e)} layouts")
    e = sorted(x for v in errs.values() for x in v)
    failed = sum(1 for r in rows if not num(r[3]))
    extra = "".join((f"; {unpred} not predicted yet" if unpred else "", f"; {failed} failed runs" if failed else ""))
    if e: print(f"\nmedian absolute error {e[(len(e) - 1) // 2]:.1f}%, worst {e[-1]:.1f}% over {len(e)} layouts{extra} (targets: 10%, 25%)")
    if gaps: print(f"top choice within {max(gaps):.1f}% of the measured best (worst group; target 5%)")

{"key": lambda f: print(key(f)), "match": match, "top": top, "ms": ms, "row": row, "fastest": fastest, "summary": summary}[sys.argv[1]](*sys.argv[2:])
PY

# ---- one host -------------------------------------------------------------------
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'
echo "# flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '), $cores cores"
: > "$tmp/results"; : > "$tmp/tops"
if [[ " ${PARTS-host cluster} " == *" host "* ]]; then
  echo; echo "## One host"; echo; echo "# links: dtrain bench allreduce -n 2 --fit"
  fit 2 "" || echo '{"local": {"alpha": 0, "beta": 0}, "cross": {"alpha": 0, "beta": 0}, "gamma": 0}' > "$tmp/fit.json"
  header
  for w in W1 W2; do
    list=H${w#W}; steps=steps_$w
    for n in 1 2 4; do
      plan "$w" 1 "$n" "$cores"
      # shellcheck disable=SC2046
      group "$w" "1 host x $n" "$n" "" "${!steps}" $(layouts_of "$n" "${!list}")
    done
  done
fi

# ---- two emulated hosts ---------------------------------------------------------
# The 2 hosts share this machine's $cores cores and the kernel does not pin
# them: a host whose ranks wait lends its cores to the other. The description
# says so (--emulated: "shared_cores"), and the step is profiled by all four
# ranks at once.
cluster_part() {
  local rate per hf w steps list
  [ "$(id -u)" -eq 0 ] || { echo; echo "# the 2-host part skipped: it needs root (network namespaces)"; return; }
  cluster=up
  "$cl" up --hosts 2 --slots 2 --rate 1gbit > "$tmp/up.log" 2>&1 || { echo "# the 2-host part skipped: cluster up failed: $(tail -1 "$tmp/up.log")"; return; }
  printf 'node1 slots=1\nnode2 slots=1\n' > "$tmp/hosts2x1"
  printf 'node1 slots=2\nnode2 slots=2\n' > "$tmp/hosts2x2"
  for rate in ${PV_RATES:-1gbit 100mbit}; do
    if ! "$cl" link node1 rate $rate || ! "$cl" link node2 rate $rate; then echo "# could not set the links to $rate"; continue; fi
    echo; echo "## 2 emulated hosts, links at $rate (sharing this machine's $cores cores)"
    for per in 1 2; do
      hf=$tmp/hosts2x$per
      echo; echo "# links, 2 hosts x $per: dtrain bench allreduce -n $((2 * per)) --hostfile --fit"
      fit $((2 * per)) "$hf" > "$tmp/fit$per.txt" || { cat "$tmp/fit$per.txt"; continue; }
      cat "$tmp/fit$per.txt"; cp "$tmp/fit.json" "$tmp/fit$per.json"
    done
    header
    for w in W1 W2; do
      steps=steps_$w; [ $rate = 100mbit ] && steps=steps_${w}_100mbit
      for per in 1 2; do
        [ -f "$tmp/fit$per.json" ] || continue
        cp "$tmp/fit$per.json" "$tmp/fit.json"; list=C$((2 * per))
        plan "$w" 2 "$per" "$cores" --emulated
        # shellcheck disable=SC2086
        group "$w" "2 hosts x $per, $rate" $((2 * per)) "$tmp/hosts2x$per" "${!steps}" ${!list}
      done
    done
    rm -f "$tmp"/fit[12].json
  done
}
[[ " ${PARTS-host cluster} " == *" cluster "* ]] && cluster_part

pv summary "$tmp/results" "$tmp/tops"
echo "# took $((SECONDS / 60)) min $((SECONDS % 60)) s"
