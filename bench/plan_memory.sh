#!/usr/bin/env bash
# Peak memory per rank, predicted against measured (issue 16): a GPT whose
# model state and activations dominate the runtime (25.4M parameters) at 1, 2
# and 4 ranks on this host, under ZeRO 0/1/2/3, --tp 2 (and --sequence-parallel) and --pp 2 (1F1B, GPipe, interleaved,
# --recompute). The host is described once (`dtrain plan --calibrate`: its
# base_mb and mpi_mb are what a rank holds besides dtrain's own allocations),
# every world planned (`dtrain plan --json`, the layout matched by dp, tp, pp,
# ZeRO, micro-batches, schedule and recomputation), each layout run for two
# steps, and the run's end-of-run memory line (metrics.jsonl: every rank's own
# bytes and peak resident set) set beside the prediction: own bytes (the
# prediction less the base) against the largest rank's own count, and the
# predicted resident set against the largest rank's ru_maxrss. Prints a
# markdown table and last the worst absolute error of each (target 10%).
#   bench/plan_memory.sh [BUILD_DIR]     (about 5 minutes on two cores)
set -u
build=$(cd "${1:-build}" && pwd) || exit 2
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
export OPENBLAS_NUM_THREADS=1
cores=$(nproc)
set_="n_layer=8,n_embd=512,block_size=64"
batch=8
run_flags="--steps 2 --eval-max 1 --log-every 1"
# Layouts: n:dp:tp:pp:zero:micro:schedule:recompute[:sp]; schedule gpipe,
# 1f1b or ilV (interleaved, V chunks a stage); sp: --sequence-parallel
layouts="1:1:1:1:0:1:1f1b:0
  2:2:1:1:0:1:1f1b:0 2:2:1:1:1:1:1f1b:0 2:2:1:1:2:1:1f1b:0 2:1:2:1:0:1:1f1b:0
  2:1:1:2:0:4:1f1b:0 2:1:1:2:0:4:gpipe:0 2:1:1:2:0:4:1f1b:1
  2:2:1:1:3:1:1f1b:0 2:1:1:2:0:4:il2:0 2:1:2:1:0:1:1f1b:0:sp
  4:4:1:1:0:1:1f1b:0 4:4:1:1:1:1:1f1b:0 4:4:1:1:2:1:1f1b:0 4:4:1:1:3:1:1f1b:0 4:2:2:1:0:1:1f1b:0
  4:2:1:2:1:4:1f1b:0 4:1:2:2:0:4:1f1b:0 4:2:1:2:2:4:gpipe:1 4:2:1:2:3:4:il2:0 4:2:2:1:0:1:1f1b:0:sp"

cat > "$tmp/pm.py" <<'PY'
import json, sys

def cluster(src, dst, n, cores):
    """the calibrated description with the world of n ranks on this host"""
    c = json.load(open(src))
    c["hosts"], c["ranks_per_host"], c["cores"] = 1, int(n), int(cores)
    c.pop("speed", None)
    json.dump(c, open(dst, "w"))

def calibrated(path):
    c = json.load(open(path))
    note = "" if "base_mb" in c else " (this dtrain plan --calibrate measures no base: resident sets predicted without it)"
    print(f'# calibrated: base {c.get("base_mb", 0):.1f} MB, MPI {c.get("mpi_mb", 0):.1f} MB a rank{note}')

def base(path, n):
    """the base the planner adds: base_mb, and mpi_mb in a world of more than one rank"""
    c = json.load(open(path))
    print(1e6 * (c.get("base_mb", 0) + (c.get("mpi_mb", 0) if int(n) > 1 else 0)))

def fields(layout):
    """n, dp, tp, pp, zero, micro, schedule, V, recompute, sequence parallel"""
    n, dp, tp, pp, zero, micro, sched, rc, *sp = layout.split(":")
    V = int(sched[2:]) if sched.startswith("il") else 1
    return n, dp, tp, pp, zero, micro, "interleaved" if V > 1 else sched, V, rc, sp == ["sp"]

def match(plan, layout):
    """the predicted row of a layout: memory bytes and the pipeline partition"""
    n, dp, tp, pp, zero, micro, sched, V, rc, sp = fields(layout)
    for x in json.load(open(plan)):
        same = (x["dp"], x["tp"], x["pp"], x["zero"]) == (int(dp), int(tp), int(pp), int(zero))
        same &= x.get("compress", "none") in ("none", "") and not x.get("servers") and not x.get("balance")
        same &= x.get("sequence_parallel", False) == sp
        if int(pp) > 1:
            same &= (x["micro_batches"], x["schedule"], x["recompute"], x.get("virtual_stages", 1)) == \
                    (int(micro), sched, rc == "1", V)
        if same: return print(f'{x["memory_bytes"]:.0f}\t{x.get("partition", "")}')
    print("none\t")

def label(layout):
    n, dp, tp, pp, zero, micro, sched, V, rc, sp = fields(layout)
    s = f"{dp} x {tp} x {pp}, ZeRO-{zero}"
    if int(pp) > 1: s += f", M {micro}, {sched}" + (f" (V {V})" if V > 1 else "") + (", recompute" if rc == "1" else "")
    return s + (", sequence parallel" if sp else "")

def row(results, layout, pred, base_b, metrics):
    """one table row; appends the errors to results"""
    mem = None
    try:
        for l in open(metrics):
            if '"memory":true' in l: mem = json.loads(l)
    except OSError: pass
    lab = f"| {layout.split(':')[0]} | {label(layout)} |"
    if pred == "none" or mem is None or "own_bytes" not in mem:
        why = "no prediction" if pred == "none" else "run failed or no memory line"
        return print(f"{lab} {why} | | | | | | |")
    p_rss = float(pred); p_own = p_rss - float(base_b)
    m_own, m_rss = max(mem["own_bytes"]), max(mem["rss_peak_bytes"])
    e_own, e_rss = 100 * (p_own - m_own) / m_own, 100 * (p_rss - m_rss) / m_rss
    note = ""
    st = mem.get("by_rank", {}).get("staging", [0])
    if max(st) > 0: note = f"gradient staging measured {min(st) / 1e6:.0f}-{max(st) / 1e6:.0f} MB"
    if mem.get("param_gathered_peak_bytes"): note += f"; ZeRO-3 gathered peak {mem['param_gathered_peak_bytes'] / 1e6:.0f} MB"
    with open(results, "a") as f: f.write(f"{label(layout)}\t{e_own}\t{e_rss}\n")
    print(f"{lab} {p_own / 1e6:.1f} | {m_own / 1e6:.1f} | {e_own:+.1f}% | {p_rss / 1e6:.1f} | {m_rss / 1e6:.1f} "
          f"| {e_rss:+.1f}% | {note} |", flush=True)

def summary(results):
    rows = [l.rstrip("\n").split("\t") for l in open(results)]
    if not rows: return print("\nno layout was measured")
    o = max(rows, key=lambda r: abs(float(r[1]))); r = max(rows, key=lambda r: abs(float(r[2])))
    print(f"\nworst absolute error over {len(rows)} layouts: own bytes {abs(float(o[1])):.1f}% ({o[0]}), "
          f"resident set {abs(float(r[2])):.1f}% ({r[0]}) (target 10%)")

{"cluster": cluster, "calibrated": calibrated, "base": base, "match": match, "row": row, "summary": summary}[sys.argv[1]](*sys.argv[2:])
PY
pm() { python3 "$tmp/pm.py" "$@"; }

grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'
echo "# flags: $(grep -o -w 'avx2\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')$cores cores"
echo "# model: --model gpt --set $set_ --batch $batch; runs: $run_flags"
model=(--model gpt --set "$set_" --batch "$batch")
if ! "$dt" plan --calibrate "$tmp/c.json" "${model[@]}" --ranks-per-host 2 --cores "$cores" > "$tmp/cal.log" 2>&1; then
  echo "calibration failed: $(tail -1 "$tmp/cal.log")"; exit 1
fi
pm calibrated "$tmp/c.json"
echo
echo "| ranks | layout (dp x tp x pp) | predicted own MB | measured own MB | error | predicted RSS MB | measured peak RSS MB | error | note |"
echo "|---|---|---|---|---|---|---|---|---|"
: > "$tmp/results"
for n in 1 2 4; do
  pm cluster "$tmp/c.json" "$tmp/c$n.json" "$n" "$cores"
  "$dt" plan --cluster "$tmp/c$n.json" "${model[@]}" --json --top 100000 > "$tmp/plan$n.json" 2> "$tmp/plan.log" ||
    { echo "| $n | planner failed: $(tail -1 "$tmp/plan.log") | | | | | | | |"; echo '[]' > "$tmp/plan$n.json"; }
  base=$(pm base "$tmp/c$n.json" "$n")
  for l in $layouts; do
    [ "${l%%:*}" = "$n" ] || continue
    IFS=: read -r _ dp tp pp zero micro sched rc sp <<<"$l"
    IFS=$'\t' read -r pred part < <(pm match "$tmp/plan$n.json" "$l")
    flags=()
    [ "$tp" -gt 1 ] && flags+=(--tp "$tp")
    case $sched in il*) flags+=(--virtual-stages "${sched#il}"); sched=interleaved ;; esac
    [ "$pp" -gt 1 ] && flags+=(--pp "$pp" --micro-batches "$micro" --schedule "$sched")
    [ "$sp" = sp ] && flags+=(--sequence-parallel)
    [ -n "$part" ] && [ "$pp" -gt 1 ] && flags+=(--pp-partition "$part")
    [ "$rc" = 1 ] && flags+=(--recompute)
    [ "$zero" -gt 0 ] && flags+=(--zero "$zero")
    rm -rf "$tmp/run"
    # shellcheck disable=SC2086
    timeout -k 10 300 "$dt" train -n "$n" "${model[@]}" "${flags[@]}" $run_flags --quiet --out "$tmp/run" > "$tmp/run.log" 2>&1
    pm row "$tmp/results" "$l" "$pred" "$base" "$tmp/run/metrics.jsonl"
  done
done
pm summary "$tmp/results"
echo "# took $((SECONDS / 60)) min $((SECONDS % 60)) s"
