#!/usr/bin/env bash
# Sequence parallelism (--sequence-parallel, Korthikanti et al. 2022) on top of
# --tp: the same training as plain tensor parallelism and as one process
# (losses within relative 1e-4 for 20 steps, final weights within rtol 1e-3)
# for the built-in gpt, with --pp 2, with data parallelism, with ZeRO-1 and 3,
# --recompute; a description with dropout (masks keyed by a row's place in its
# sample: the same in every layout) and the shipped llama (rmsnorm, rope,
# swiglu); the activations dtrain counts below plain tp's; checkpoints resume
# across the flag; clear refusals.
source "$(dirname "$0")/lib.sh" "$@"

GPT="--model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch 8 --steps 20 --lr 3e-3 --warmup 2 --log-every 1 --eval-max 16 --quiet"
SP="--sequence-parallel"

run g1 $GPT
run gtp -n 2 --tp 2 $GPT
same_run gtp 1e-4 gsp -n 2 --tp 2 $SP $GPT
same_run g1 1e-4 gsp1 -n 2 --tp 2 $SP $GPT
same_run g1 1e-4 gsp_pp -n 4 --tp 2 --pp 2 --micro-batches 2 $SP $GPT
same_run g1 1e-4 gsp_dp -n 4 --tp 2 --zero 1 $SP $GPT
same_run g1 1e-4 gsp_z3 -n 4 --tp 2 --zero 3 $SP $GPT
same_run g1 1e-4 gsp_rc -n 4 --tp 2 --pp 2 --micro-batches 2 --recompute $SP $GPT
# accumulation: each micro-batch's partial layer-norm gradients summed once
run gtp_acc -n 2 --tp 2 --accum 2 --clip 0.3 $GPT
same_run gtp_acc 1e-4 gsp_acc -n 2 --tp 2 --accum 2 --clip 0.3 $SP $GPT

# activations: layer norms, residuals and block boundaries on half the rows
act() { grep '"memory"' "$tmp/$1/metrics.jsonl" | grep -o '"act_bytes":[0-9]*' | cut -d: -f2; }
a=$(act gtp); b=$(act gsp)
if [ -n "$a" ] && [ -n "$b" ] && [ "$b" -lt "$a" ]; then ok "activations counted: --tp 2 $a bytes, with $SP $b"
else fail "activations: --tp 2 '$a' bytes, with $SP '$b' (want fewer)"; fi

# a description with dropout in the sequence-parallel region and a linear without tp on its rows
# (c_attn without a bias: the key bias has no gradient but rounding noise, which AdamW
# turns into steps of the learning rate, different in every layout)
cat > "$tmp/gd.json" <<'JSON'
{"name": "gptdrop", "vars": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 256},
 "input": {"tokens": "block_size", "vocab": "vocab_size"}, "loss": "cross_entropy",
 "layers": [
  {"type": "sequential", "name": "transformer", "layers": [
    {"type": "embedding", "name": "wte", "num": "vocab_size", "dim": "n_embd", "init": {"normal": 0.02}},
    {"type": "pos_embedding", "name": "wpe", "init": {"normal": 0.02}}]},
  {"type": "repeat", "name": "h", "count": "n_layer", "layers": [
    {"type": "residual", "layers": [
      {"type": "layernorm", "name": "ln_1"},
      {"type": "linear", "name": "c_attn", "out": "3 * n_embd", "tp": "column", "tp_parts": 3, "bias": false},
      {"type": "attention", "heads": "n_head"},
      {"type": "linear", "name": "c_proj", "out": "n_embd", "tp": "row"},
      {"type": "dropout", "p": 0.2}]},
    {"type": "residual", "layers": [
      {"type": "layernorm", "name": "ln_2"},
      {"type": "linear", "name": "c_fc", "out": "4 * n_embd", "tp": "column"},
      {"type": "gelu"},
      {"type": "linear", "name": "c_proj2", "out": "n_embd", "tp": "row"},
      {"type": "dropout", "p": 0.2},
      {"type": "linear", "name": "mix", "out": "n_embd"}]}]},
  {"type": "sequential", "layers": [
    {"type": "layernorm", "name": "ln_f"},
    {"type": "linear", "name": "lm_head", "out": "vocab_size", "bias": false}]}]}
JSON
D="--model $tmp/gd.json --steps 20 --batch 8 --lr 3e-3 --log-every 1 --eval-max 16 --quiet"
run d1 $D
run dtp -n 2 --tp 2 $D
same_run dtp 1e-4 dsp -n 2 --tp 2 $SP $D
run dtp_dp -n 4 --tp 2 $D
same_run dtp_dp 1e-4 dsp_dp -n 4 --tp 2 $SP $D
close_after "$tmp/d1" "$tmp/dsp" 0 1e-4 >/dev/null && ok "dropout: $SP's losses = one process's" || fail "dropout: $SP's losses differ from one process's"

# the shipped llama: rmsnorm, rotary attention, swiglu pairs
L="--model llama --set n_layer=2,n_embd=64,ffn=160,block_size=16 --steps 20 --batch 8 --lr 3e-3 --log-every 1 --eval-max 16 --quiet"
run l1 $L
same_run l1 1e-4 lsp -n 2 --tp 2 $SP $L

# checkpoints change nothing: one written under $SP resumes at plain tp and on 1 rank
run ck -n 2 --tp 2 $SP $GPT --ckpt-dir "$tmp/ck" --ckpt-every 10
for layout in "-n 1" "-n 2 --tp 2" "-n 4 --tp 2 $SP"; do
  name=res_$(echo "$layout" | tr -d ' -')
  if run $name $layout $GPT --resume "$tmp/ck/ckpt-0000000010" && msg=$(close_after "$tmp/ck" "$tmp/$name" 10 1e-4); then
    ok "$SP checkpoint resumed with $layout: $msg"; else fail "$SP checkpoint -> $layout: ${msg:-}"; fi
done

# refusals, one line each
expect "needs --tp T" $SP $GPT --steps 1
expect "needs --tp T" -n 2 $SP $GPT --steps 1
expect "--layout auto chooses --sequence-parallel itself" -n 2 --layout auto $SP $GPT --steps 1
expect "the mlp has none" -n 2 --tp 2 $SP --model mlp --hidden 64,48 --steps 1
expect "must divide --block-size 15" -n 2 --tp 2 $SP $GPT --block-size 15 --steps 1
cat > "$tmp/plain.json" <<'JSON'
{"input": {"tokens": 16, "vocab": 256}, "loss": "cross_entropy",
 "layers": [{"type": "embedding", "name": "wte", "num": 256, "dim": 32},
  {"type": "residual", "layers": [{"type": "layernorm", "name": "ln"}, {"type": "linear", "name": "fc", "out": 32}]},
  {"type": "linear", "name": "head", "out": 256}]}
JSON
expect "marks no tensor-parallel layers" -n 2 --tp 2 $SP --model "$tmp/plain.json" --steps 1
cat > "$tmp/tail.json" <<'JSON'
{"input": {"tokens": 16, "vocab": 256}, "loss": "cross_entropy",
 "layers": [{"type": "embedding", "name": "wte", "num": 256, "dim": 32},
  {"type": "sequential", "layers": [{"type": "linear", "name": "a", "out": 64, "tp": "column"},
                                    {"type": "linear", "name": "b", "out": 256, "tp": "row"}]}]}
JSON
expect "end the model with a block without them" -n 2 --tp 2 $SP --model "$tmp/tail.json" --steps 1
cat > "$tmp/att.json" <<'JSON'
{"input": {"tokens": 16, "vocab": 256}, "loss": "cross_entropy",
 "layers": [{"type": "embedding", "name": "wte", "num": 256, "dim": 32},
  {"type": "sequential", "layers": [{"type": "layernorm", "name": "ln"},
    {"type": "linear", "name": "qkv", "out": 96, "tp": "column", "tp_parts": 3}, {"type": "linear", "name": "o", "out": 48, "tp": "row"},
    {"type": "attention", "heads": 2}]},
  {"type": "linear", "name": "head", "out": 256}]}
JSON
expect "needs every position" -n 2 --tp 2 $SP --model "$tmp/att.json" --steps 1

finish
