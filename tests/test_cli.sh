#!/usr/bin/env bash
# Bad input of every kind gets one clear line and a non-zero exit (1: the run
# failed, 2: usage), never a crash; good input works end to end.
# Usage: test_cli.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$@"
fm=/usr/share/datasets/fashion-mnist

# expect_rc CODE PATTERN -- command...: exit code CODE and stderr matching
# PATTERN; a failure (CODE != 0) says so in at most 3 lines. A failing check
# prints the whole stderr it judged.
expect_rc() {
  local code=$1 pat=$2; shift 3
  local err rc lines
  err=$("$@" 2>&1 >/dev/null); rc=$?
  lines=$(grep -c . <<<"$err")
  if [ "$rc" -ne "$code" ] || ! grep -qiE -- "$pat" <<<"$err"; then
    fail "(rc=$rc, want $code; want /$pat/): $*"; indent <<<"$err"
  elif [ "$code" -ne 0 ] && [ "$lines" -gt 3 ]; then
    fail "(more than a clear line: $lines lines): $*"; indent <<<"$err"
  else
    ok "rc=$rc $(head -1 <<<"$err" | cut -c1-150)"
  fi
}

# usage errors
expect_rc 2 "unknown command" -- "$dt" frobnicate
expect_rc 2 "unknown flag '--bogus'" -- "$dt" train --bogus
expect_rc 2 "unknown model 'vgg'" -- "$dt" train --model vgg
expect_rc 2 "--batch 0 is out of range" -- "$dt" train --batch 0
expect_rc 2 "--lr expects a number" -- "$dt" train --lr fast
expect_rc 2 "--lr -1 is out of range" -- "$dt" train --lr -1
expect_rc 2 "--epochs expects an integer" -- "$dt" train --epochs 1.5
expect_rc 2 "--steps needs a value" -- "$dt" train --steps
expect_rc 2 "--momentum 1.5 is out of range" -- "$dt" train --momentum 1.5
expect_rc 2 "--hidden expects" -- "$dt" train --hidden 10,x
expect_rc 2 "--optim must be sgd or adamw" -- "$dt" train --optim rmsprop
expect_rc 2 "nesterov" -- "$dt" train --nesterov --momentum 0
expect_rc 2 "divisible" -- "$dt" train --model gpt --n-embd 30 --n-head 4
expect_rc 2 "--weights FILE is required" -- "$dt" eval --model mlp
expect_rc 2 "unknown flag" -- "$dt" eval --weights x --lr 1
expect_rc 2 "--lr expects a number, got 'fast'" -- "$dt" train --lr=fast
expect_rc 2 "--batch 0 is out of range" -- "$dt" train --batch=0
expect_rc 2 "--recompute takes no value" -- "$dt" train --recompute=maybe
# --config FILE: bad files and keys get one line naming the file, exit 2
printf '{"model": "mlp", "lrr": 0.1}' > "$tmp/unknown.json"
expect_rc 2 "^dtrain train: --config .*unknown.json: unknown key 'lrr'" -- "$dt" train --config "$tmp/unknown.json"
printf '{"lr": "fast"}' > "$tmp/badval.json"
expect_rc 2 "--config .*badval.json: --lr expects a number, got 'fast'" -- "$dt" train --steps 1 --config="$tmp/badval.json"
printf '{"lr": ' > "$tmp/broken.json"
expect_rc 2 "--config .*broken.json:1: " -- "$dt" train --config "$tmp/broken.json"
expect_rc 2 "--config .*nosuch.json: No such file" -- "$dt" train --config "$tmp/nosuch.json"
expect_rc 2 "--config needs a value" -- "$dt" train --steps 1 --config
# every command answers --help on stdout with exit 0
for c in train eval diff inspect export "bench allreduce"; do
  # shellcheck disable=SC2086
  if out=$("$dt" $c --help 2>/dev/null) && grep -q "^usage: dtrain $c" <<<"$out"; then
    ok "dtrain $c --help"
  else fail "dtrain $c --help:"; head -3 <<<"$out" | indent; fi
done

# data errors
expect_rc 1 "nosuch" -- "$dt" train --data "$tmp/nosuch" --steps 1
mkdir -p "$tmp/empty"
expect_rc 1 "train-images-idx3-ubyte" -- "$dt" train --data "$tmp/empty" --steps 1
if [ -d "$fm" ]; then
  mkdir -p "$tmp/trunc" "$tmp/magic"
  cp "$fm"/*.gz "$tmp/trunc/"; cp "$fm"/*.gz "$tmp/magic/"
  gzip -dc "$fm/train-images-idx3-ubyte.gz" | head -c 100000 > "$tmp/trunc/train-images-idx3-ubyte"
  rm "$tmp/trunc/train-images-idx3-ubyte.gz"
  expect_rc 1 "truncat" -- "$dt" train --data "$tmp/trunc" --steps 1
  printf '\x01\x02\x08\x03\x00\x00\x00\x01' > "$tmp/magic/t10k-labels-idx1-ubyte"
  rm "$tmp/magic/t10k-labels-idx1-ubyte.gz"
  expect_rc 1 "t10k-labels" -- "$dt" train --data "$tmp/magic" --steps 1
  head -c 5000 "$fm/t10k-images-idx3-ubyte.gz" > "$tmp/magic/t10k-images-idx3-ubyte.gz"
  expect_rc 1 "t10k-images" -- "$dt" train --data "$tmp/magic" --steps 1

  # --flag=value, then OUT/config.json -> --config reproduces the run bitwise;
  # the command line wins over the file wherever it stands
  expect_rc 0 "" -- "$dt" train --hidden=32 --steps=4 --lr=0.05 --batch=64 --seed=7 --quiet --out="$tmp/cfgA"
  if [ -s "$tmp/cfgA/config.json" ] && grep -q '"lr": 0.05' "$tmp/cfgA/config.json" && ! grep -q '"out"' "$tmp/cfgA/config.json"; then
    ok "OUT/config.json holds the resolved flags (lr 0.05, no out)"
  else fail "OUT/config.json:"; head -20 "$tmp/cfgA/config.json" 2>&1 | indent; fi
  expect_rc 0 "" -- "$dt" train --config "$tmp/cfgA/config.json" --out "$tmp/cfgB"
  if d=$("$dt" diff "$tmp/cfgA/model.safetensors" "$tmp/cfgB/model.safetensors" 2>&1); then
    ok "rerun with --config OUT/config.json is bitwise equal: $d"
  else fail "rerun with --config OUT/config.json differs: $d"; fi
  expect_rc 0 "" -- "$dt" train --seed 8 --config "$tmp/cfgA/config.json" --out "$tmp/cfgC"
  if grep -q '"seed": 8' "$tmp/cfgC/config.json" && ! "$dt" diff "$tmp/cfgA/model.safetensors" "$tmp/cfgC/model.safetensors" >/dev/null 2>&1; then
    ok "--seed before --config overrides the file's"
  else fail "--seed 8 --config: $(grep seed "$tmp/cfgC/config.json" 2>&1)"; fi
  # weights errors: make a small valid file first
  expect_rc 0 "" -- "$dt" train --hidden 32 --steps 3 --quiet --out "$tmp/w32"
  expect_rc 0 "" -- "$dt" eval --weights "$tmp/w32/model.safetensors"
  expect_rc 1 "holds a mlp model, not a cnn" -- "$dt" eval --model cnn --weights "$tmp/w32/model.safetensors"
  expect_rc 1 "fc1.weight' has shape \[32,784\]" -- "$dt" train --hidden 64 --steps 1 --init "$tmp/w32/model.safetensors"
  expect_rc 1 "has shape|missing|not part of" -- "$dt" train --hidden 32,32 --steps 1 --init "$tmp/w32/model.safetensors"
  head -c 300 "$tmp/w32/model.safetensors" > "$tmp/cut.safetensors"
  expect_rc 1 "cut.safetensors" -- "$dt" eval --weights "$tmp/cut.safetensors"
  head -c 4096 /dev/urandom > "$tmp/noise.safetensors"
  expect_rc 1 "noise.safetensors" -- "$dt" eval --weights "$tmp/noise.safetensors" --model mlp
  expect_rc 1 "nosuch.safetensors" -- "$dt" eval --weights "$tmp/nosuch.safetensors"
  : > "$tmp/file"
  expect_rc 1 "not a directory|cannot create" -- "$dt" train --hidden 8 --steps 1 --out "$tmp/file/sub"
fi
# corpus errors
printf 'tiny' > "$tmp/tiny.txt"
expect_rc 1 "tiny.txt" -- "$dt" train --model gpt --data "$tmp/tiny.txt" --steps 1
# the fp32 GEMM's library (src/nn/sgemm.c): a name it does not know, refused
# before anything runs; each known one trains (the same loss to 1e-4)
DTRAIN_SGEMM=mkl expect_rc 2 "DTRAIN_SGEMM=mkl: expected auto, openblas or onednn" -- "$dt" train --hidden 8 --steps 1
for lib in openblas onednn; do
  if DTRAIN_SGEMM=$lib "$dt" train --hidden 16 --steps 3 --log-every 3 --quiet --out "$tmp/gemm_$lib" > "$tmp/gemm_$lib.log" 2>&1; then
    ok "DTRAIN_SGEMM=$lib trains"
  elif [ $lib = onednn ] && grep -q "has no oneDNN" "$tmp/gemm_$lib.log"; then
    echo "skip DTRAIN_SGEMM=onednn: this build has no oneDNN"
  else fail "DTRAIN_SGEMM=$lib:"; indent < "$tmp/gemm_$lib.log"; fi
done
if [ -f "$tmp/gemm_onednn/metrics.jsonl" ]; then
  l1=$(grep -o '"loss":[0-9.e+-]*' "$tmp/gemm_openblas/metrics.jsonl" | tail -1 | cut -d: -f2)
  l2=$(grep -o '"loss":[0-9.e+-]*' "$tmp/gemm_onednn/metrics.jsonl" | tail -1 | cut -d: -f2)
  if awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; exit !(a != "" && (d < 0 ? -d : d) <= 1e-4) }'; then
    ok "openblas and onednn: loss $l1 and $l2"
  else fail "openblas and onednn differ: loss $l1 and $l2"; fi
fi
# MPI that cannot start (no transport between the ranks): one line, not silence
OMPI_MCA_btl=self expect_rc 1 "MPI could not start the 2 ranks" -- "$dt" train -n 2 --hidden 8 --steps 1 --quiet

finish
