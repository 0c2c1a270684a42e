#!/usr/bin/env bash
# dtrain plan (issue 16): every layout of a cluster predicted and ranked, the
# best one's command line; --json for tools; one clear line for every bad input.
# The predictions' accuracy against measured runs is the benchmark's to show.
source "$(dirname "$0")/lib.sh" "$@"
cat > "$tmp/c.json" <<'J'
{"hosts": 2, "ranks_per_host": 2, "gflops": 50, "memory_gb": 12,
 "local": {"latency_us": 5, "bandwidth_gbit": 40}, "cross": {"latency_us": 60, "bandwidth_gbit": 1}}
J
out=$("$dt" plan --cluster "$tmp/c.json" --model gpt --top 100 2>&1); rc=$?
n=$(grep -Ec '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9] ' <<<"$out")
if [ $rc -eq 0 ] && grep -q '^  dtrain train -n 4 --model gpt --batch 16' <<<"$out" && [ "$n" -ge 20 ]; then
  ok "gpt on 2 x 2: $n layouts ranked; best: $(tail -1 <<<"$out" | sed 's/^ *//')"
else fail "plan gpt (rc=$rc)"; indent <<<"$out"; fi
# every dp x tp x pp of 4 ranks appears, tp never across hosts, steps ascending among those that fit
# (a parameter-server row, variant ps:S, has dp workers plus S servers)
awk '/^ *[0-9]+ +[0-9]+ +[0-9]+ +[0-9] / { s = $8 ~ /^ps:/ ? substr($8, 4) : 0; if ($1 * $2 * $3 + s != 4 || $2 > 2) bad = 1
  if ($NF == "yes") { if ($10 + 0 < prev) bad = 1; prev = $10 } } END { exit bad }' <<<"$out" &&
  ok "layouts are the world's, tp inside a host, sorted by predicted step" || fail "layout table out of order or invalid"
for l in "1 1 4" "4 1 1" "2 2 1" "1 2 2"; do
  grep -Eq "^ +${l// / +} " <<<"$out" && ok "layout dp tp pp = $l listed" || fail "layout $l missing"
done
"$dt" plan --cluster "$tmp/c.json" --model llama --set n_layer=2 --json --top 3 > "$tmp/p.json" 2>&1 &&
  python3 -c "import json,sys; a=json.load(open(sys.argv[1])); assert len(a)==3 and all(x['step_s']>0 and 'command' in x for x in a)" "$tmp/p.json" &&
  ok "--json: 3 layouts with step_s and a command" || { fail "--json"; indent < "$tmp/p.json"; }
# the interleaved schedule: listed as ilV, in --json as "interleaved" with its
# V, a partition of pp x V chunks and --schedule interleaved --virtual-stages V
grep -Eq '^ +[0-9]+ +[0-9]+ +2 +[0-9] +[0-9]+ il2 ' <<<"$out" && ok "interleaved rows listed (il2)" ||
  { fail "no il2 row"; indent <<<"$out"; }
"$dt" plan --cluster "$tmp/c.json" --model gpt --json --top 100000 > "$tmp/il.json" 2>&1 &&
  python3 - "$tmp/il.json" <<'PY' && ok "--json: interleaved rows with V, pp x V chunks and the runtime's flags; sequence-parallel rows with --sequence-parallel" || { fail "--json interleaved"; head -c 2000 "$tmp/il.json" | indent; }
import json, sys
a = [x for x in json.load(open(sys.argv[1])) if x["schedule"] == "interleaved"]
assert a
for x in a:
    V, pp, M = x["virtual_stages"], x["pp"], x["micro_batches"]
    assert V in (2, 4) and pp > 1 and M % pp == 0
    assert len(x["partition"].split(",")) == pp * V
    assert f"--schedule interleaved --virtual-stages {V}" in x["command"]
sp = [x for x in json.load(open(sys.argv[1])) if x["sequence_parallel"]]
assert sp and all(x["tp"] > 1 and "--sequence-parallel" in x["command"] for x in sp)
PY
# one runs as planned, its memory what the planner predicted (no base in the file: dtrain's own bytes)
cat > "$tmp/one.json" <<'J'
{"hosts": 1, "ranks_per_host": 2, "gflops": 50, "memory_gb": 12,
 "local": {"latency_us": 5, "bandwidth_gbit": 40}, "cross": {"latency_us": 60, "bandwidth_gbit": 1}}
J
"$dt" plan --cluster "$tmp/one.json" --model mlp --json --top 100000 > "$tmp/il1.json" 2>&1
IFS=$'\t' read -r cmd want < <(python3 -c "import json,sys
a = [x for x in json.load(open(sys.argv[1])) if x['schedule'] == 'interleaved' and x['micro_batches'] == 8 and
     x['zero'] == 0 and not x['recompute']]
print(a[0]['command'].split(' ', 2)[2], int(a[0]['memory_bytes']), sep='\t')" "$tmp/il1.json")
# shellcheck disable=SC2086
if "$dt" train $cmd --steps 2 --quiet --out "$tmp/il" > "$tmp/il.log" 2>&1; then
  got=$(python3 -c "import json,sys
print(next(json.loads(l)['own_max_bytes'] for l in open(sys.argv[1]) if '\"memory\"' in l))" "$tmp/il/metrics.jsonl")
  [ "$got" = "$want" ] && ok "the planned interleaved run ($cmd): $got bytes, as predicted" ||
    fail "interleaved run: $got bytes, predicted $want"
else fail "the planned interleaved run failed: $cmd"; indent < "$tmp/il.log"; fi
sed 's/"memory_gb": 12/"memory_gb": 0.001/' "$tmp/c.json" > "$tmp/small.json"
out=$("$dt" plan --cluster "$tmp/small.json" --model gpt 2>"$tmp/err"); rc=$?
if [ $rc -eq 1 ] && grep -q "none fits in memory" <<<"$out" && [ "$(grep -c . "$tmp/err")" -eq 1 ] &&
   grep -q "no layout fits 0.001 GB per rank: the smallest needs .* GB (dp .*); give more ranks or memory" "$tmp/err"; then
  ok "nothing fits 1 MB: exit 1, $(cat "$tmp/err")"
else fail "tiny memory (rc=$rc)"; indent <<<"$out"; indent < "$tmp/err"; fi
sed 's/"hosts": 2,/"hosts": 2, "speed": [1, 0.5],/' "$tmp/c.json" > "$tmp/het.json"
out=$("$dt" plan --cluster "$tmp/het.json" --model gpt --top 200 2>&1)
grep -q "assumed, hosts of unequal speed (1, 0.5)" <<<"$out" && grep -Eq '^ +4 +1 +1 +0 +1 +- +no +balance ' <<<"$out" &&
  ok "unequal hosts: the assumption said, a batch split by speed listed" || { fail "unequal hosts"; indent <<<"$out"; }
# no core to spare, and more ranks than cores: the table says what it assumed; a spare core: nothing
out=$("$dt" plan --cluster "$tmp/c.json" --model gpt 2>&1)
grep -q "^assumed, 2 ranks on a host's 2 cores: no core to spare" <<<"$out" && ! grep -q "time-sliced" <<<"$out" &&
  ok "2 ranks on 2 cores: $(grep '^assumed' <<<"$out")" || { fail "2 ranks on 2 cores"; indent <<<"$out"; }
sed 's/"hosts": 2,/"hosts": 2, "cores": 4,/' "$tmp/c.json" > "$tmp/spare.json"
grep -q "^assumed" <<<"$("$dt" plan --cluster "$tmp/spare.json" --model gpt 2>&1)" &&
  fail "a spare core: an assumption line" || ok "2 ranks on 4 cores: no assumption line"
sed 's/"hosts": 2,/"hosts": 2, "shared_cores": 2,/' "$tmp/c.json" > "$tmp/emu.json"
out=$("$dt" plan --cluster "$tmp/emu.json" --model gpt 2>&1)
grep -q "^assumed, 4 ranks (all hosts) sharing 2 cores" <<<"$out" && grep -q "time-sliced" <<<"$out" &&
  ok "emulated hosts sharing 2 cores: $(grep '^assumed' <<<"$out")" || { fail "shared cores: no assumption line"; indent <<<"$out"; }
# refusals: one line, non-zero
refuse() { # CODE PATTERN -- ARGS
  local code=$1 pat=$2; shift 3
  local err rc; err=$("$dt" plan "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq "$code" ] && grep -q -- "$pat" <<<"$err" && [ "$(grep -c . <<<"$err")" -eq 1 ]; then ok "refused: $err"
  else fail "(rc=$rc, want $code and /$pat/): plan $*"; indent <<<"$err"; fi
}
refuse 2 "--cluster FILE (or --calibrate OUT) is required" -- --model gpt
refuse 1 "No such file" -- --cluster "$tmp/none.json"
echo '{"hosts": 2, "ranks_per_host": 2}' > "$tmp/bad.json"
refuse 1 '"gflops" must be a number' -- --cluster "$tmp/bad.json"
echo '{"hosts": 2,' > "$tmp/bad2.json"
refuse 1 "not a cluster description" -- --cluster "$tmp/bad2.json"
refuse 2 "unknown model 'vgg'" -- --cluster "$tmp/c.json" --model vgg
refuse 2 "bad flag or value '--batch'" -- --cluster "$tmp/c.json" --batch 0
refuse 2 "--emulated only describes a machine: give it with --calibrate OUT" -- --cluster "$tmp/c.json" --emulated
refuse 2 "--fit only describes a machine" -- --cluster "$tmp/c.json" --fit "$tmp/c.json"
sed 's/"hosts": 2,/"hosts": 2, "staging_ns_per_byte": -1,/' "$tmp/c.json" > "$tmp/st.json"
refuse 1 '"staging_ns_per_byte" must be a number in \[0' -- --cluster "$tmp/st.json"
# --calibrate: this machine described, the re-fault cost of ZeRO-2/3's released
# pages measured (>= 0) and read back; a ZeRO-2 row costs that much more ZeRO time
"$dt" plan --calibrate "$tmp/cal.json" --model mlp --batch 16 > "$tmp/cal.log" 2>&1 &&
  s=$(python3 -c "import json,sys; v=json.load(open(sys.argv[1]))['staging_ns_per_byte']; assert 0 <= v < 100; print(v)" "$tmp/cal.json") &&
  "$dt" plan --cluster "$tmp/cal.json" --model mlp --batch 16 > /dev/null 2>&1 &&
  ok "--calibrate: staging_ns_per_byte $s, read back" || { fail "--calibrate"; indent < "$tmp/cal.log"; }
# the measured step sizes --calibrate wrote (mlp's, ascending) price mlp's
# micro-batches; planning another model says in one line that the line serves
a="measured step sizes are of a model of"
n=$(python3 -c "import json,sys; r=[p[0] for p in json.load(open(sys.argv[1]))['step']['measured_ms']]; assert r == sorted(r); print(len(r))" "$tmp/cal.json" 2>/dev/null)
if [ "${n:-0}" -ge 2 ] && ! "$dt" plan --cluster "$tmp/cal.json" --model mlp --batch 16 2>&1 | grep -q "$a" &&
   "$dt" plan --cluster "$tmp/cal.json" --model gpt --batch 16 2>&1 | grep -q "$a .*: micro-batches priced by micro_overhead_us"; then
  ok "--calibrate: $n measured step sizes, used for mlp; gpt told they are another model's"
else fail "measured step sizes (n=${n:-none})"; fi
sed 's/"hosts": 2,/"hosts": 2, "speed": [1],/' "$tmp/c.json" > "$tmp/sp.json"
refuse 1 '"speed" must list one factor per host' -- --cluster "$tmp/sp.json"
sed 's/"hosts": 2,/"hosts": 2, "step": {"flops_per_sample": 1e6, "measured_ms": [[8, 1], [4, 2]]},/' "$tmp/c.json" > "$tmp/ss.json"
refuse 1 'step.measured_ms\[1\] must be \[rows, ms\], rows ascending' -- --cluster "$tmp/ss.json"
finish
