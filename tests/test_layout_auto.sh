#!/usr/bin/env bash
# dtrain train --layout auto (issue 16): the planner's best fitting layout for
# the launch's world, printed in one line, then run exactly as the same flags
# typed by hand (bitwise), recorded concretely in config.json (a rerun from it
# repeats the layout); this machine measured when no --cluster is given; one
# clear line and nothing started for every request it cannot take.
source "$(dirname "$0")/lib.sh" "$@"
# Two clusters that make a layout other than plain dp win. slow: links of 10
# Mbit/s and batch 16, where all-reducing the mlp's 7.5 MB of gradients (dp,
# even top-k's 1%) or a layer's activations (tp) costs far more than one stage
# boundary's activations, 64 KB each way a step: 2 pipeline stages. hosts2: one rank on each of 2 hosts of 2
# cores joined at 100 Mbit/s, batch 512 (8x the compute to hide behind): dp
# with top-k, its coding on the spare core.
cat > "$tmp/slow.json" <<'J'
{"hosts": 1, "ranks_per_host": 2, "gflops": 50, "memory_gb": 12,
 "local": {"latency_us": 5, "bandwidth_gbit": 0.01}, "cross": {"latency_us": 60, "bandwidth_gbit": 0.01}}
J
cat > "$tmp/hosts2.json" <<'J'
{"hosts": 2, "ranks_per_host": 1, "cores": 2, "gflops": 50, "memory_gb": 12,
 "local": {"latency_us": 5, "bandwidth_gbit": 0.1}, "cross": {"latency_us": 60, "bandwidth_gbit": 0.1}}
J
# config_has FILE FLAGS...: config.json holds every flag of FLAGS, the other layout flags at their defaults
config_has() {
  python3 - "$@" <<'P'
import json, sys
c = json.load(open(sys.argv[1]))
want = {"tp": 1, "pp": 1, "zero": 0, "recompute": False, "compress": "none", "strategy": "sync", "balance": "static"}
a = sys.argv[2:]
for i, f in enumerate(a):
    if f == "--recompute": want["recompute"] = True
    elif f.startswith("--"): want[f[2:]] = int(a[i + 1]) if a[i + 1].isdigit() else a[i + 1]
got = {k: c.get(k) for k in want}
print(got)
sys.exit(got != want)
P
}
# auto_vs_hand NAME CLUSTER WANT B FLAGS...: `dtrain plan`'s best on CLUSTER at
# batch B has /WANT/; --layout auto (a) prints it, (b) config.json records it,
# (c) its weights are bitwise those of the plan's flags typed by hand.
auto_vs_hand() {
  local name=$1 cl=$2 want=$3 b=$4 best flags line; shift 4
  best=$("$dt" plan --cluster "$cl" --model mlp --batch "$b" 2>&1 | tail -1)
  flags=$(sed -n "s/^ *dtrain train -n [0-9]* --model mlp --batch $b//p" <<<"$best")
  grep -q -- "$want" <<<"$flags" && ok "$name: dtrain plan's best:$flags" ||
    { fail "$name: dtrain plan's best is not /$want/:"; indent <<<"$best"; }
  run "$name" "$@" --model mlp --batch "$b" --steps 3 --no-progress --layout auto --cluster "$cl" || return 1
  line=$(grep '^layout auto:' "$tmp/$name.log")
  grep -Eq '^layout auto: dp [0-9]+ x tp [0-9]+ x pp [0-9]+.*, ZeRO-[0-2].* \(predicted [0-9.]+ ms/step, [0-9]+ MB/rank; .dtrain plan --cluster .* lists all [0-9]+\)$' <<<"$line" &&
    ok "$name: $line" || { fail "$name: the line of --layout auto:"; head -3 "$tmp/$name.log" | indent; }
  config_has "$tmp/$name/config.json" $flags > "$tmp/cfg.txt" 2>&1 &&
    ok "$name: config.json records it: $(cat "$tmp/cfg.txt")" || { fail "$name: config.json:"; indent < "$tmp/cfg.txt"; }
  run "$name-hand" "$@" --model mlp --batch "$b" --steps 3 --no-progress $flags || return 1
  cmp "$tmp/$name/model.safetensors" "$tmp/$name-hand/model.safetensors" &&
    ok "$name: model.safetensors bitwise that of the same flags by hand" || fail "$name: --layout auto and$flags differ"
}
auto_vs_hand pipe "$tmp/slow.json" "--pp 2" 16 -n 2
grep -q '^layout auto: dp 1 x tp 1 x pp 2 (blocks [0-9,]*), [0-9]* micro-batch' "$tmp/pipe.log" &&
  ok "pipe: the line names the stages and micro-batches" || fail "pipe: the line lacks the pipeline"
if [ -f "$tmp/pipe/model.safetensors" ] && run again -n 2 --config "$tmp/pipe/config.json"; then
  if grep -q '^layout auto' "$tmp/again.log"; then fail "a rerun from config.json planned again"
  elif cmp "$tmp/pipe/model.safetensors" "$tmp/again/model.safetensors"; then
    ok "--config pipe/config.json reruns the layout bitwise, without planning"
  else fail "a rerun from config.json differs"; fi
fi
auto_vs_hand topk "$tmp/hosts2.json" "--compress topk" 512 -n 2 --pretend-hosts 2

# this machine measured, one rank (no launcher) and two
if run here1 --model mlp --steps 2 --no-progress --layout auto; then
  grep -q '^layout auto: dp 1 x tp 1 x pp 1, ZeRO-0 (predicted .* on this machine as measured, links assumed' "$tmp/here1.log" &&
    ok "one rank: $(grep '^layout auto' "$tmp/here1.log" | cut -c1-90)..." || { fail "one rank, measured:"; head -2 "$tmp/here1.log" | indent; }
fi
if run here2 -n 2 --model mlp --steps 2 --no-progress --layout auto; then
  line=$(grep '^layout auto' "$tmp/here2.log")
  read -r tp pp < <(sed -E 's/^layout auto: dp [0-9]+ x tp ([0-9]+) x pp ([0-9]+).*/\1 \2/' <<<"$line")
  python3 -c "import json,sys; c=json.load(open(sys.argv[1])); sys.exit((c['tp'], c['pp']) != (int(sys.argv[2]), int(sys.argv[3])))" \
    "$tmp/here2/config.json" "$tp" "$pp" && ok "two ranks, measured: $(cut -c1-70 <<<"$line")..., as config.json says" ||
    { fail "two ranks, measured: config.json does not match:"; indent <<<"$line"; }
fi

# refusals: one line, the exit code, nothing started (no --out folder)
refuse() { # CODE PATTERN -- ARGS (env VAR=V allowed first)
  local code=$1 pat=$2; shift 3
  local err rc; rm -rf "$tmp/r"
  err=$(env "$@" --out "$tmp/r" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq "$code" ] && grep -q -- "$pat" <<<"$err" && [ "$(grep -c . <<<"$err")" -eq 1 ] && [ ! -e "$tmp/r" ]; then
    ok "refused ($rc): $err"
  else fail "(rc=$rc, want $code and /$pat/): $*"; indent <<<"$err"; fi
}
T=("$dt" train -n 2 --model mlp --steps 1)
for f in "--tp 2" "--pp=2" "--zero 1" "--micro-batches 4" "--schedule 1f1b" "--virtual-stages 2" "--recompute" "--pp-partition auto" \
         "--compress fp16" "--strategy ps" "--servers 1" "--balance dynamic"; do
  n=${f%%[ =]*}
  refuse 2 "--layout auto chooses $n itself: drop $n" -- "${T[@]}" --layout auto $f
done
[ -f "$tmp/pipe/config.json" ] &&
  refuse 2 "--layout auto chooses --tp itself, and --config .* sets it" -- "${T[@]}" --layout auto --config "$tmp/pipe/config.json"
for f in "--strategy localsgd:2" "--strategy hogwild --threads 2"; do
  s=${f#--strategy }
  refuse 2 "the planner does not model --strategy ${s%%[: ]*} yet" -- "${T[@]}" --layout auto $f
done
for f in "--aggregate median" "--accum 2"; do
  refuse 2 "the planner does not model ${f%% *} yet" -- "${T[@]}" --layout auto $f
done
refuse 2 "--layout 'fast': expects auto" -- "${T[@]}" --layout fast
refuse 2 "--cluster .* is what --layout auto plans on" -- "${T[@]}" --cluster "$tmp/slow.json"
refuse 1 "--layout auto: .*none.json" -- "${T[@]}" --layout auto --cluster "$tmp/none.json"
echo '{"hosts": 1, "ranks_per_host": 2}' > "$tmp/bad.json"
refuse 1 '"gflops" must be a number' -- "${T[@]}" --layout auto --cluster "$tmp/bad.json"
refuse 2 "describes 2 ranks (1 host x 2), the launch has 1 (1 host x 1): give -n 2" -- "$dt" train --model mlp --layout auto --cluster "$tmp/slow.json"
sed 's/"memory_gb": 12/"memory_gb": 0.001/' "$tmp/slow.json" > "$tmp/tiny.json"
refuse 1 "no layout of 2 ranks fits in memory: the smallest needs [0-9.]* MB per rank (.*), the cluster has 1.0 MB per rank" -- "${T[@]}" --layout auto --cluster "$tmp/tiny.json"
refuse 2 "--pretend-hosts 2 does not divide the 3 ranks" -- "$dt" train -n 3 --model mlp --layout auto --pretend-hosts 2
printf 'localhost slots=2\nnode2 slots=1\n' > "$tmp/hosts"
refuse 2 "the 3 ranks fill the hosts of --hostfile .* unevenly (2 on localhost, 1 on node2)" -- "$dt" train -n 3 --hostfile "$tmp/hosts" --model mlp --layout auto
refuse 2 "plans before the ranks start" -- OMPI_COMM_WORLD_SIZE=2 "$dt" train --model mlp --layout auto
finish
