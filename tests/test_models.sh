#!/usr/bin/env bash
# Models as description files (docs/MODELS.md): the shipped llama trains and
# every layout of it agrees with -n 1; a user's description (grouped-query
# attention, tanh, rmsnorm, pooling) trains; a bad description of every kind is
# one line naming the layer and what is wrong, exit 2, never a crash.
# Usage: test_models.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$@"

# final step loss and evaluation of a run
last() { grep '"loss"' "$tmp/$1/metrics.jsonl" | tail -1 | grep -o '"loss":[-0-9.e]*' | cut -d: -f2; }
same() { # NAME A B TOL: |a - b| <= TOL * max(1, |a|)
  awk -v a="$2" -v b="$3" -v t="$4" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; exit !(a != "" && d <= t * (m > 1 ? m : 1)) }' \
    && ok "$1: $2 vs $3" || fail "$1: $2 vs $3 (tolerance $4)"
}

# ---- the shipped LLaMA-style decoder on every layout ------------------------------
lf="--model llama --steps 20 --batch 8 --seed 3 --eval-max 32 --log-every 5"
if run l1 $lf; then
  ref=$(last l1)
  run l_tp -n 2 --tp 2 $lf && same "llama --tp 2 vs -n 1" "$ref" "$(last l_tp)" 1e-4
  run l_pp -n 2 --pp 2 --micro-batches 2 $lf && same "llama --pp 2 vs -n 1" "$ref" "$(last l_pp)" 1e-4
  run l_z1 -n 2 --zero 1 $lf && same "llama -n 2 --zero 1 vs -n 1" "$ref" "$(last l_z1)" 1e-4
  run l_z2 -n 2 --zero 2 $lf && same "llama -n 2 --zero 2 vs -n 1" "$ref" "$(last l_z2)" 1e-4
  first=$(grep '"step"' "$tmp/l1/metrics.jsonl" | head -1 | grep -o '"loss":[-0-9.e]*' | cut -d: -f2)
  awk -v a="$first" -v b="$ref" 'BEGIN { exit !(b < a - 0.5) }' && ok "llama learns: loss $first -> $ref" || fail "llama does not learn: $first -> $ref"
  python3 - "$tmp/l1/model.safetensors" <<'PY' && ok "llama weights carry the description's names" || fail "llama weight names"
import json, struct, sys
h = open(sys.argv[1], "rb"); n = struct.unpack("<Q", h.read(8))[0]; names = set(json.loads(h.read(n)))
need = {"model.embed_tokens.weight", "model.layers.3.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.down_proj.weight", "model.norm.weight", "lm_head.weight", "model.layers.1.input_layernorm.weight"}
sys.exit(0 if need <= names else 1)
PY
fi

# ---- a user's description: GQA with rope, tanh, pooling --------------------------
cat > "$tmp/gqa.json" <<'J'
{"vars": {"T": 32, "C": 64},
 "input": {"tokens": "T", "vocab": 256}, "loss": "cross_entropy",
 "layers": [
  {"type": "embedding", "name": "emb", "num": 256, "dim": "C"},
  {"type": "repeat", "name": "h", "count": 2, "layers": [
    {"type": "residual", "layers": [
      {"type": "rmsnorm", "name": "n1"},
      {"type": "linear", "name": "qkv", "out": "(4 + 2 * 2) * 16", "bias": false},
      {"type": "attention", "heads": 4, "kv_heads": 2, "rope": true},
      {"type": "linear", "name": "o", "out": "C"}]},
    {"type": "residual", "layers": [
      {"type": "layernorm", "name": "n2"}, {"type": "linear", "name": "fc", "out": 128},
      {"type": "tanh"}, {"type": "linear", "name": "proj", "out": "C"}]}]},
  {"type": "linear", "name": "head", "out": 256, "tie": "emb.weight"}]}
J
sed -i 's/"name": "head", "out": 256, "tie": "emb.weight"/"name": "head", "out": 256, "bias": false, "tie": "emb.weight"/' "$tmp/gqa.json"
if run g1 --model "$tmp/gqa.json" --steps 10 --batch 8 --eval-max 16 --log-every 5; then
  run g2 -n 2 --pp 2 --model "$tmp/gqa.json" --steps 10 --batch 8 --eval-max 16 --log-every 5 && same "gqa description --pp 2 (tied head across stages)" "$(last g1)" "$(last g2)" 1e-4
fi
cat > "$tmp/img.json" <<'J'
{"input": {"image": [1, 28, 28]}, "loss": "cross_entropy",
 "layers": [
  {"type": "sequential", "layers": [{"type": "conv2d", "name": "c1", "out": 8, "kernel": 3, "pad": 1}, {"type": "silu"},
                                    {"type": "avgpool2d", "kernel": 3, "stride": 2, "pad": 1}]},
  {"type": "sequential", "layers": [{"type": "global_avgpool"}, {"type": "linear", "name": "fc", "out": 10}]}]}
J
run i1 --model "$tmp/img.json" --steps 10 --batch 32 && ok "image description with silu, avgpool, global pool trains"

# ---- bad descriptions: one line, exit 2, the layer named -------------------------
bad() { # PATTERN JSON
  printf '%s' "$2" > "$tmp/bad.json"
  local err rc
  err=$("$dt" train --model "$tmp/bad.json" --steps 1 2>&1 >/dev/null); rc=$?
  if [ "$rc" -eq 2 ] && grep -qE -- "$1" <<<"$err" && [ "$(grep -c . <<<"$err")" -le 2 ]; then ok "refused: $(head -1 <<<"$err" | cut -c1-140)"
  else fail "(rc=$rc, want 2 and /$1/)"; indent <<<"$err"; fi
}
hdr='"input": {"features": 784}, "loss": "cross_entropy"'
bad "unknown type" "{$hdr, \"layers\": [{\"type\": \"linaer\", \"name\": \"a\", \"out\": 10}]}"
bad "layer 0 'a' \(linear\): needs 'out'" "{$hdr, \"layers\": [{\"type\": \"linear\", \"name\": \"a\"}]}"
bad "needs a \"name\"" "{$hdr, \"layers\": [{\"type\": \"linear\", \"out\": 10}]}"
bad "declared twice" "{$hdr, \"layers\": [{\"type\": \"linear\", \"name\": \"a\", \"out\": 20}, {\"type\": \"linear\", \"name\": \"a\", \"out\": 10}]}"
bad "ties its weight to 'zz.weight', which no earlier layer has" "{$hdr, \"layers\": [{\"type\": \"linear\", \"name\": \"a\", \"out\": 10, \"tie\": \"zz.weight\"}]}"
bad "of another shape" "{$hdr, \"layers\": [{\"type\": \"linear\", \"name\": \"a\", \"out\": 784}, {\"type\": \"linear\", \"name\": \"b\", \"out\": 10, \"tie\": \"a.weight\"}]}"
bad "'count' is 0" "{$hdr, \"layers\": [{\"type\": \"repeat\", \"count\": 0, \"layers\": [{\"type\": \"relu\"}]}, {\"type\": \"linear\", \"name\": \"a\", \"out\": 10}]}"
bad "needs a \(channels, height, width\) input, got 1" "{$hdr, \"layers\": [{\"type\": \"conv2d\", \"name\": \"c\", \"out\": 4, \"kernel\": 3}]}"
bad "a residual must keep it" "{$hdr, \"layers\": [{\"type\": \"residual\", \"layers\": [{\"type\": \"linear\", \"name\": \"a\", \"out\": 10}]}]}"
bad "unknown attribute 'outs'" "{$hdr, \"layers\": [{\"type\": \"linear\", \"name\": \"a\", \"out\": 10, \"outs\": 10}]}"
bad "unknown variable 'width'" "{$hdr, \"layers\": [{\"type\": \"linear\", \"name\": \"a\", \"out\": \"width\"}]}"
bad "not valid JSON" "{$hdr, \"layers\": [}"
bad "\"loss\" must be" "{\"input\": {\"features\": 784}, \"layers\": [{\"type\": \"linear\", \"name\": \"a\", \"out\": 10}]}"
bad "kv_heads' 3 must divide" "{\"input\": {\"tokens\": 8, \"vocab\": 256}, \"loss\": \"cross_entropy\", \"layers\": [{\"type\": \"embedding\", \"name\": \"e\", \"num\": 256, \"dim\": 32}, {\"type\": \"linear\", \"name\": \"q\", \"out\": 96}, {\"type\": \"attention\", \"heads\": 4, \"kv_heads\": 3}]}"
err=$("$dt" train --model "$tmp/none.json" --steps 1 2>&1 >/dev/null); rc=$?
[ "$rc" -ne 0 ] && grep -q "cannot open the model description" <<<"$err" && ok "missing file: $err" || { fail "missing file (rc=$rc)"; indent <<<"$err"; }
err=$("$dt" train -n 2 --tp 2 --model cnn --steps 1 2>&1 >/dev/null); rc=$?
[ "$rc" -ne 0 ] && ok "tp on a model with no marked pairs refused: $(head -1 <<<"$err")" || fail "cnn --tp 2 ran (rc=$rc)"
finish
