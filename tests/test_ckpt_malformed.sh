#!/usr/bin/env bash
# A table of hand-made malformed checkpoints: each is refused by `dtrain inspect`
# (and so by --resume) with one clear line, exit 1, never a crash.
source "$(dirname "$0")/lib.sh" "$@"
"$dt" train -n 2 --zero 1 --model mlp --hidden 16 --batch 16 --steps 2 --optim adamw --quiet \
    --ckpt-dir "$tmp/ck" > "$tmp/base.log" 2>&1 || { fail "base run:"; indent < "$tmp/base.log"; exit 1; }
good="$tmp/ck/ckpt-0000000002"
err=$("$dt" inspect "$good" 2>&1 >/dev/null) || { fail "the good checkpoint does not verify:"; indent <<<"$err"; exit 1; }

# case NAME PATTERN EDIT...: copy the good checkpoint, apply EDIT in it, expect PATTERN
case_() {
  local name=$1 pat=$2; shift 2
  local d="$tmp/$name"; rm -rf "$d"; cp -r "$good" "$d"
  ( cd "$d" && eval "$*" )
  local err rc
  err=$("$dt" inspect "$d" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 1 ] && grep -qiE -- "$pat" <<<"$err" && [ "$(grep -c . <<<"$err")" -eq 1 ]; then
    ok "$name: $err"
  else
    fail "$name (rc=$rc, want one line matching /$pat/):"; indent <<<"$err"
  fi
}
man=manifest.json
case_ no_manifest      "no manifest.json"            "rm $man"
case_ manifest_junk    "not valid JSON"              "echo 'not json {' > $man"
case_ manifest_array   "not a JSON object"       "echo '[1,2]' > $man"
case_ wrong_format     "format is 'other-1'"         "sed -i 's/dtrain-ckpt-1/other-1/' $man"
case_ no_step          "no integer 'step'"           "sed -i 's/\"step\"/\"stepx\"/' $man"
case_ negative_step    "'step' = -5 is out of range" "sed -i 's/\"step\": [0-9]*/\"step\": -5/' $man"
case_ bad_zero         "'zero' = 7 is out of range"  "sed -i 's/\"zero\": [0-9]*/\"zero\": 7/' $man"
case_ bad_optim        "'optim' must be sgd or adamw" "sed -i 's/\"adamw\"/\"lion\"/' $man"
case_ no_files         "no file list"                "sed -i 's/\"files\"/\"filez\"/' $man"
case_ path_in_name     "file entry 0 is malformed"   "sed -i 's/\"rank-00000.safetensors\"/\"..\\/x\"/' $man"
case_ missing_file     "rank-00001.safetensors: No such file" "rm rank-00001.safetensors"
case_ size_mismatch    "bytes but the manifest says" "echo x >> rank-00001.safetensors"
case_ truncated        "bytes but the manifest says" "truncate -s 100 rank-00000.safetensors"
case_ flipped_tensor   "is corrupted"                "printf '\\x77' | dd of=rank-00000.safetensors bs=1 seek=\$((\$(stat -c %s rank-00000.safetensors) - 8)) conv=notrunc 2>/dev/null"
case_ flipped_header   "rank-00000.safetensors"      "printf '\\x7b' | dd of=rank-00000.safetensors bs=1 seek=20 conv=notrunc 2>/dev/null"
case_ header_len       "rank-00001.safetensors"      "printf '\\xff\\xff\\xff\\xff' | dd of=rank-00001.safetensors bs=1 seek=0 conv=notrunc 2>/dev/null"
case_ zero_file        "bytes but the manifest says" ": > rank-00001.safetensors"
case_ dir_as_file      "rank-00001.safetensors"      "rm rank-00001.safetensors && mkdir rank-00001.safetensors"
finish
