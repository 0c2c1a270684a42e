#!/usr/bin/env bash
# Synchronous data parallelism: -n 2 and -n 4 with the same global batch, seed
# and steps give the losses and final weights of -n 1 (losses within relative
# 1e-5), for the mlp and the gpt, with ZeRO 0, 1 and 2, also through the
# hierarchical collectives on ranks that pretend to sit on 2 hosts; two runs of
# one layout are bitwise identical; a stalled rank makes the others time out
# naming it; a rank killed inside a shared-memory collective leaves nothing in
# /dev/shm.
export OMPI_MCA_btl=self,vader,tcp
source "$(dirname "$0")/lib.sh" "$@"

MLP="--model mlp --hidden 64,32 --batch 32 --steps 12 --lr 0.05 --log-every 1 --eval-every 0 --quiet"
GPT="--model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch 8 --steps 8 --lr 3e-3 --warmup 2 --log-every 1 --eval-max 16 --quiet"

# compare_losses A B: every step's loss within relative 1e-5
compare_losses() { close_after "$1" "$2" 0 1e-5; }


# Does this host give the ranks shared memory (a memory file opened through
# /proc)? Without it shm and hier refuse, and their checks are skipped.
SHM=1
if ! "$dt" train -n 2 $MLP --steps 1 --allreduce shm > "$tmp/shm_probe.log" 2>&1; then
  SHM=0
  if grep -q 'no shared memory' "$tmp/shm_probe.log"; then echo "skip the shared-memory checks: $(grep -m1 'no shared memory' "$tmp/shm_probe.log")"
  else fail "-n 2 --allreduce shm:"; tail -3 "$tmp/shm_probe.log" | indent; fi
fi

for model in mlp gpt; do
  if [ $model = mlp ]; then args=$MLP; else args=$GPT; fi
  run ${model}_n1 $args
  for n in 2 4; do
    for z in 0 1 2; do
      same_run ${model}_n1 1e-5 ${model}_n${n}_z${z} -n $n --zero $z --bucket-mb 0.02 $args
    done
  done
  # 4 ranks that pretend to sit on 2 hosts: the hierarchical collectives
  for z in 0 1 2; do
    [ $SHM = 1 ] && same_run ${model}_n1 1e-5 ${model}_hier_z${z} -n 4 --pretend-hosts 2 --allreduce hier --zero $z --bucket-mb 0.02 $args
  done
done

# the same layout twice: bitwise identical weights and losses
run rep_a -n 3 --zero 1 --bucket-mb 0.02 $MLP && run rep_b -n 3 --zero 1 --bucket-mb 0.02 $MLP
if cmp -s "$tmp/rep_a/model.safetensors" "$tmp/rep_b/model.safetensors" && [ "$(losses "$tmp/rep_a")" = "$(losses "$tmp/rep_b")" ]; then
  ok "two -n 3 runs are bitwise identical"; else fail "two -n 3 runs differ"; fi

# gradient accumulation: 2 ranks x 2 micro-batches = 1 rank x 1 batch
run acc -n 2 --accum 2 $MLP && { msg=$(compare_losses "$tmp/mlp_n1" "$tmp/acc") && ok "accumulation: $msg" || fail "accumulation: $msg"; }

# uneven batches: global batch 30 over 4 ranks (8,7,8,7 samples) = 1 rank
run unev1 $MLP --batch 30 && run unev4 -n 4 $MLP --batch 30 && {
  msg=$(compare_losses "$tmp/unev1" "$tmp/unev4") && ok "uneven shards: $msg" || fail "uneven shards: $msg"; }

# every algorithm gives the same training
for a in ring rhd $([ $SHM = 1 ] && echo shm hier) native; do
  run alg_$a -n 3 --allreduce $a $MLP && { msg=$(compare_losses "$tmp/mlp_n1" "$tmp/alg_$a") && ok "--allreduce $a: $msg" || fail "--allreduce $a: $msg"; }
done

# ZeRO memory per rank, fp32 AdamW, P parameters (arena floats), N ranks:
# ZeRO-0 4P + 4P + 8P, ZeRO-1 4P + 4P + 8P/N, ZeRO-2 4P + 4P/N + 8P/N; a rank's
# shard is chunk r of every bucket, so it may exceed P/N by up to one float per bucket.
field() { grep '"memory"' "$1/metrics.jsonl" | sed "s/.*\"$2\":\([0-9]*\).*/\1/"; }
for z in 0 1 2; do
  run mem_z$z -n 2 --zero $z --bucket-mb 0.05 $GPT --optim adamw || continue
  d="$tmp/mem_z$z"; P=$(field $d params); nb=$(field $d buckets)
  pb=$(field $d param_bytes); gb=$(field $d grad_bytes); ob=$(field $d optim_bytes)
  case $z in
    0) want_g=$((4*P)); want_o=$((8*P));;
    1) want_g=$((4*P)); want_o=$((8*P/2));;
    2) want_g=$((4*P/2)); want_o=$((8*P/2));;
  esac
  slack=$((8*nb + 8))
  if [ "$pb" -eq $((4*P)) ] && [ $((gb - want_g)) -le $slack ] && [ $((want_g - gb)) -le $slack ] \
     && [ $((ob - want_o)) -le $slack ] && [ $((want_o - ob)) -le $slack ]; then
    ok "ZeRO-$z per rank (P=$P): params $pb, grads $gb (want $want_g), optimizer $ob (want $want_o)"
  else
    fail "ZeRO-$z per rank (P=$P): params $pb, grads $gb (want $want_g), optimizer $ob (want $want_o)"
  fi
done

# the timeline: one process row per rank, forward/backward/bucket collectives
run tr -n 2 $MLP --trace "$tmp/trace.json"
if [ -s "$tmp/trace.json" ] && grep -q '"traceEvents"' "$tmp/trace.json" \
   && grep -q '"pid":0' "$tmp/trace.json" && grep -q '"pid":1' "$tmp/trace.json" \
   && grep -q '"name":"backward"' "$tmp/trace.json" && grep -q '"name":"allreduce"' "$tmp/trace.json"; then
  ok "trace has rows for both ranks with backward and allreduce events"
else fail "trace file incomplete"; fi

# a stalled rank: the others time out and name it; exit code 3
start=$(date +%s)
"$dt" train -n 3 $MLP --steps 6 --timeout 2 --inject hang:rank=2:step=3 > "$tmp/hang.out" 2> "$tmp/hang.err"
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -eq 3 ] && grep -qE "ranks? ([0-9]+, )*2 did not" "$tmp/hang.err" && grep -qi "timed out" "$tmp/hang.err"; then
  ok "stalled rank: exit 3 after ${took}s: $(grep -i 'timed out' "$tmp/hang.err" | head -1)"
else
  fail "stalled rank: rc=$rc after ${took}s"; cat "$tmp/hang.err" | head -20
fi

# a rank killed inside a shared-memory all-reduce: the job ends, and nothing of
# ours stays in /dev/shm (the segment is a memory file without a name)
before=$(ls /dev/shm 2>/dev/null | grep -v '^vader_segment\|^sm_segment' | sort)
"$dt" train -n 3 $MLP --steps 40 --allreduce $([ $SHM = 1 ] && echo shm || echo auto) --inject crash:rank=2:step=5 > "$tmp/crash.out" 2> "$tmp/crash.err"
rc=$?
sleep 1
after=$(ls /dev/shm 2>/dev/null | grep -v '^vader_segment\|^sm_segment' | sort)
if [ $rc -ne 0 ] && [ "$before" = "$after" ]; then
  ok "a rank killed inside a shm all-reduce: exit $rc, /dev/shm as before ($(ls /dev/shm 2>/dev/null | wc -l) entries)"
else fail "rank killed inside shm: rc=$rc; new in /dev/shm: $(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' ')"; fi

finish
