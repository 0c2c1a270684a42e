#!/usr/bin/env bash
# ZeRO-3 (--zero 3): parameters sharded and gathered around their use.
# Bitwise equal to ZeRO-2 on the same layout (the same reduce-scatters, the
# same update of the same shard; the gathers only move the parameters) and
# within 1e-5 of -n 1, for the mlp, the gpt (tied embedding and output) and a
# description-file model (llama), at -n 2 and -n 4; with --zero3-keep, gradient
# accumulation, a rank with no samples, --tp 2, --pp 2 (the gpt's tied
# embedding and head on different stages), compression, bf16 and fp16
# overflow; checkpoints written under ZeRO-3 resumed under ZeRO-1 on another
# world size and layout and back; the memory line's parameters at 1/N plus the
# gathered bound; --max-memory that refuses ZeRO-2 and admits ZeRO-3; a rank
# missing from a gather named; bad requests refused in one line.
export OMPI_MCA_btl=self,vader,tcp
source "$(dirname "$0")/lib.sh" "$@"

MLP="--model mlp --hidden 64,32 --batch 32 --steps 8 --lr 0.05 --log-every 1 --eval-every 0 --quiet"
GPT="--model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch 8 --steps 6 --lr 3e-3 --warmup 2 --log-every 1 --eval-max 16 --quiet"
LLAMA="--model llama --set n_layer=2,n_embd=64,ffn=160 --batch 8 --steps 5 --lr 3e-3 --log-every 1 --eval-max 16 --quiet"
B="--bucket-mb 0.02"

# bitwise A B: the same final weights and the same losses, byte for byte
bitwise() {
  if cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" && [ "$(losses "$tmp/$1")" = "$(losses "$tmp/$2")" ]; then
    ok "$3: bitwise equal to $2"; else fail "$3: differs from $2"; fi
}

for model in mlp gpt llama; do
  case $model in mlp) args=$MLP;; gpt) args=$GPT;; llama) args=$LLAMA;; esac
  run ${model}_n1 $args || continue
  for n in 2 4; do
    run ${model}_n${n}_z2 -n $n --zero 2 $B $args || continue
    same_run ${model}_n1 1e-5 ${model}_n${n}_z3 -n $n --zero 3 $B $args &&
      bitwise ${model}_n${n}_z3 ${model}_n${n}_z2 "$model -n $n --zero 3"
  done
done

run gpt_keep -n 2 --zero 3 --zero3-keep $B $GPT && bitwise gpt_keep gpt_n2_z2 "gpt --zero3-keep"
run gpt_sync -n 2 --zero 3 --no-overlap $B $GPT && bitwise gpt_sync gpt_n2_z2 "gpt --zero 3 --no-overlap"

# each variant against ZeRO-2 on the same layout
pair() { # name, then the flags of both runs
  local name=$1; shift
  run ${name}_z2 --zero 2 "$@" && run ${name}_z3 --zero 3 "$@" && bitwise ${name}_z3 ${name}_z2 "$name"
}
pair accum -n 2 --accum 2 $B $MLP
pair empty_rank -n 4 $B $MLP --batch 3          # rank 3 has no sample: it still joins every gather
pair tp2 -n 4 --tp 2 $B $GPT
pair pp2 -n 4 --pp 2 $B $MLP
pair pp2_gpt -n 4 --pp 2 $B $GPT                 # the embedding tied to the head across stages
pair int8 -n 2 --compress int8 $B $MLP
pair bf16 -n 2 --precision bf16 $B $GPT
pair fp16 -n 2 --precision fp16 --inject overflow:rank=1:step=3 $B $GPT

# checkpoints: ZeRO-3 on 2 ranks -> ZeRO-1 on 3, ZeRO-1 on 3 -> ZeRO-3 on 4,
# ZeRO-3 -> ZeRO-3 (bitwise against the run that was never interrupted)
CK="$GPT --optim adamw --steps 8 --ckpt-every 4"
run ck_full -n 2 --zero 3 $B $CK --ckpt-dir "$tmp/ckdir_full"
resume_from() { # name, writer's -n and --zero, reader's -n and --zero, the writer's other flags
  local d="$tmp/ckdir_$1"
  run ck_w_$1 -n $2 --zero $3 ${6:-} $B $CK --ckpt-dir "$d" || return 1
  rm -rf "$d/ckpt-0000000008"
  run ck_r_$1 -n $4 --zero $5 $B $CK --ckpt-dir "$d" --resume auto || return 1
  [ "$(losses "$tmp/ck_r_$1" | head -1 | cut -d' ' -f1)" = 5 ] || { fail "$1: did not resume at step 4"; return 1; }
  msg=$(close_after "$tmp/ck_full" "$tmp/ck_r_$1" 4 1e-5) && ok "checkpoint ZeRO-$3 -n $2 ${6:-}-> ZeRO-$5 -n $4: $msg" ||
    fail "checkpoint ZeRO-$3 -n $2 ${6:-}-> ZeRO-$5 -n $4: $msg"
}
resume_from a 2 3 3 1
resume_from b 3 1 4 3
resume_from d 4 3 2 1 "--pp 2 "  # ZeRO-3 in each of two stages -> ZeRO-1, no pipeline
resume_from c 2 3 2 3 && if cmp -s "$tmp/ck_r_c/model.safetensors" "$tmp/ck_full/model.safetensors"; then
  ok "ZeRO-3 resumed under ZeRO-3: final weights bitwise equal to the run never interrupted"
else fail "ZeRO-3 resumed under ZeRO-3: final weights differ from the run never interrupted"; fi

# memory: parameters per rank = this rank's chunks + the gathered bound, below
# ZeRO-2's 4P; the arena's measured resident peak within the bound (plus the
# partial 4 KiB pages at the buckets' edges), never the whole model
field() { grep '"memory"' "$1/metrics.jsonl" | sed "s/.*\"$2\":\([0-9]*\).*/\1/"; }
G8="--model gpt --n-layer 4 --n-head 4 --n-embd 128 --block-size 16 --batch 4 --steps 2 --optim adamw --eval-max 8 --bucket-mb 0.25 --quiet"
if run mem_z2 -n 4 --zero 2 $G8 && run mem_z3 -n 4 --zero 3 $G8; then
  P=$(field "$tmp/mem_z3" params); p2=$(field "$tmp/mem_z2" param_bytes); p3=$(field "$tmp/mem_z3" param_bytes)
  g3=$(field "$tmp/mem_z3" grad_bytes); o3=$(field "$tmp/mem_z3" optim_bytes); gp=$(field "$tmp/mem_z3" param_gathered_peak_bytes)
  bound=$((p3 - g3))  # the shard equals the gradient shard: what is left is the gathered bound
  if [ "$p2" -eq $((4 * P)) ] && [ "$p3" -lt "$p2" ] && [ "$o3" -eq $((2 * g3)) ] && [ -n "$gp" ] &&
     [ "$gp" -le $((bound + 16 * 4096)) ] && [ "$gp" -lt "$p2" ]; then
    ok "ZeRO-3 parameters per rank $p3 B (shard $g3 + gathered bound $bound; measured gathered peak $gp) < ZeRO-2's $p2"
  else fail "ZeRO-3 memory: P=$P z2 params $p2, z3 params $p3, grads $g3, optimizer $o3, gathered peak '$gp'"; fi
fi
# --max-memory between the two: ZeRO-2 refused naming --zero 3, ZeRO-3 trains
z2total=$(grep -o 'total [0-9.]* MiB' "$tmp/mem_z2.log" 2>/dev/null | head -1)
G9="--model gpt --n-layer 8 --n-head 4 --n-embd 256 --block-size 32 --batch 4 --steps 2 --optim adamw --eval-max 8 --bucket-mb 2"
expect "with ZeRO-2; would fit on 4 ranks:.*--zero 3" -n 4 --zero 2 $G9 --max-memory 115M
run maxmem_z3 -n 4 --zero 3 $G9 --max-memory 115M --quiet && ok "--max-memory 115M: ZeRO-3 trains the gpt ZeRO-2 cannot"

# a rank that stops: the others' gather times out naming it
"$dt" train -n 3 --zero 3 $B $MLP --timeout 2 --inject hang:rank=2:step=3 > "$tmp/hang.out" 2> "$tmp/hang.err"
rc=$?
if [ $rc -eq 3 ] && grep -qE "ranks? ([0-9]+, )*2 did not" "$tmp/hang.err" && grep -q "at step 3" "$tmp/hang.err"; then
  ok "stalled rank under ZeRO-3: exit 3: $(grep -m1 'timed out' "$tmp/hang.err" | cut -c1-160)"
else fail "stalled rank under ZeRO-3: rc=$rc"; head -5 "$tmp/hang.err" | indent; fi

# bad requests
expect "zero3-keep is for --zero 3" -n 2 --zero 2 --zero3-keep $MLP
expect "--zero" -n 2 --zero 3 --strategy ps $MLP
expect "--zero 4 is out of range \\[0, 3\\]" -n 2 --zero 4 $MLP

finish
