#!/usr/bin/env bash
# Every code path of the trainer once, for the sanitizer build (tests.cmake adds
# this test to that build only). The matrix tests (test_dp, test_pp, test_tp,
# test_ckpt, test_ps, test_async, test_compress_train) check that each layout
# gives the same numbers, many runs per path: the optimised build runs them.
# Under AddressSanitizer and UBSan what matters is that each path runs clean
# once (a sanitizer report ends the rank with an error, so the run fails), so
# here every strategy, schedule, codec, aggregate, checkpoint and fault path
# runs once, small, and a run counts when it exits 0 and logged its last step
# (or, for the fault paths, failed the way it should).
# Two halves, two ctest tests run side by side (under ASan the whole took 357 s on a
# 2-core Zen 5, the sanitizer pass's longest by far): PATHS_PART=a (this script's
# default: data, pipeline and tensor parallelism, model descriptions) and b
# (test_paths_b.sh: the parameter server onwards); PATHS_PART=all runs both.
source "$(dirname "$0")/lib.sh" "$@"
part=${PATHS_PART:-a}
in_part() { [ "$part" = all ] || [ "$part" = "$1" ]; }

MLP="--model mlp --hidden 48,32 --batch 32 --steps 6 --lr 0.05 --log-every 1 --eval-every 0 --quiet"
GPT="--model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch 8 --steps 4 --lr 3e-3 --warmup 1 --log-every 1 --eval-max 16 --quiet"
# path NAME FLAGS...: one run that must finish and log its last step
path() {
  local name=$1; shift
  run "$name" "$@" || return 1
  local last; last=$(losses "$tmp/$name" | tail -1 | cut -d' ' -f1)
  local want; want=$(sed -n 's/.*--steps \([0-9]*\).*/\1/p' <<<"$*" | tail -1)
  if [ -n "$last" ] && { [ -z "$want" ] || [ "$last" = "$want" ]; }; then ok "$name (to step $last)"
  else fail "$name: last logged step '$last', want '$want':"; tail -3 "$tmp/$name.log" | indent; fi
}

if in_part a; then
# ---- data parallelism, ZeRO, collectives, accumulation, uneven shards -----------
path dp1_ckpt $MLP --ckpt-dir "$tmp/ck1" --ckpt-every 3 --optim adamw
path dp_z2_resume -n 2 --zero 2 $MLP --optim adamw --resume "$tmp/ck1/ckpt-0000000003"
path dp_z1_accum -n 2 --zero 1 --accum 2 --bucket-mb 0.02 $MLP
path dp_gpt_ring -n 3 --zero 2 --allreduce ring $GPT
path dp_rhd_uneven -n 3 --allreduce rhd $MLP --batch 30
path dp_native_trace -n 2 --allreduce native $MLP --trace "$tmp/trace.json"
# ---- pipeline and tensor parallelism ------------------------------------------------
path pp_gpipe_recompute -n 2 --pp 2 --schedule gpipe --micro-batches 4 --recompute $GPT
path pp_1f1b_z1 -n 4 --pp 2 --schedule 1f1b --micro-batches 2 --zero 1 $MLP
path pp_auto -n 2 --pp 2 --pp-partition auto --micro-batches 2 $MLP
path pp_interleaved_z3 -n 4 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 2 --zero 3 --pp-partition auto $GPT
path tp_gpt_clip -n 2 --tp 2 --clip 0.3 $GPT
# --precision bf16: the bf16 GEMM (where the CPU has AVX512-BF16) and the rounded copies
path bf16_gpt_tp -n 2 --tp 2 --precision bf16 $GPT
# (the CNN's bf16 path runs in test_precision: here its evaluation of the 10000 test
# images alone would outlast the watchdog)
path bf16_emulated_zero1 -n 2 --zero 1 --precision bf16-emulated $MLP
# --precision fp16: the rounding, the scaler's drop on an overflow, its checkpoint and resume
path fp16_z2_overflow -n 2 --zero 2 --precision fp16 --inject overflow:rank=1:step=2 $MLP --ckpt-dir "$tmp/ck16" --ckpt-every 3
path fp16_resume --precision fp16 $MLP --steps 8 --resume "$tmp/ck16/ckpt-0000000003"
path fp16_gpt --precision fp16 $GPT
path tp_pp_mlp -n 4 --tp 2 --pp 2 --micro-batches 2 $MLP --ckpt-dir "$tmp/cktp" --ckpt-every 3
path tp_resume_dp -n 2 $MLP --resume "$tmp/cktp/ckpt-0000000003"
# ---- model descriptions: llama (rmsnorm, swiglu, rope, gqa) under tp x pp; batch norm,
# dropout, pooling on 2 ranks with a checkpoint; data from a CSV -----------------------
path desc_llama -n 4 --tp 2 --pp 2 --micro-batches 2 --model llama --set n_layer=2,n_kv_head=4,n_embd=32,ffn=48,block_size=16 \
  --batch 8 --steps 3 --log-every 1 --eval-max 16 --quiet
# --sequence-parallel: the gpt under tp x pp with recompute and clipping, llama's swiglu pairs
path sp_gpt -n 4 --tp 2 --pp 2 --micro-batches 2 --recompute --clip 0.3 --sequence-parallel $GPT
path sp_llama -n 2 --tp 2 --sequence-parallel --model llama --set n_layer=2,n_kv_head=4,n_embd=32,ffn=48,block_size=16 \
  --batch 8 --steps 3 --log-every 1 --eval-max 16 --quiet
cat > "$tmp/bnd.json" <<'J'
{"input": {"image": [1, 28, 28]}, "loss": "cross_entropy",
 "layers": [{"type": "sequential", "layers": [{"type": "conv2d", "name": "c", "out": 4, "kernel": 3, "stride": 2, "pad": 1},
   {"type": "batchnorm2d", "name": "bn", "sync": true}, {"type": "silu"}, {"type": "avgpool2d", "kernel": 2}, {"type": "dropout", "p": 0.2}]},
  {"type": "sequential", "layers": [{"type": "global_avgpool"}, {"type": "batchnorm1d", "name": "bn1"}, {"type": "tanh"},
   {"type": "linear", "name": "fc", "out": 10}]}]}
J
path desc_bn_ckpt -n 2 --model "$tmp/bnd.json" --batch 16 --steps 4 --log-every 1 --eval-max 32 --quiet --ckpt-dir "$tmp/ckbn" --ckpt-every 2
path desc_bn_resume --model "$tmp/bnd.json" --batch 16 --steps 4 --log-every 1 --eval-max 32 --quiet --resume "$tmp/ckbn/ckpt-0000000002"
printf 'a,b,y\n' > "$tmp/t.csv"; for i in $(seq 60); do echo "$i,$((i % 7)),$((i * 2 % 5))" >> "$tmp/t.csv"; done
path desc_csv --model regressor --set in=2,hidden=8 --data "$tmp/t.csv" --target y --batch 8 --steps 4 --log-every 1 --quiet
# the other commands on what these runs left
"$dt" eval --weights "$tmp/dp1_ckpt/model.safetensors" > "$tmp/eval.log" 2>&1 && ok "eval: $(cat "$tmp/eval.log")" || { fail "eval:"; indent < "$tmp/eval.log"; }
"$dt" export "$tmp/cktp/ckpt-0000000006" --out "$tmp/exp.safetensors" > "$tmp/exp.log" 2>&1 &&
  "$dt" diff "$tmp/exp.safetensors" "$tmp/tp_pp_mlp/model.safetensors" > "$tmp/diff.log" 2>&1 &&
  ok "export of a tensor x pipeline checkpoint equals its run's weights" || { fail "export/diff:"; cat "$tmp/exp.log" "$tmp/diff.log" | indent; }
fi
in_part b || { finish; exit; }
# ---- parameter server, local SGD, Hogwild!, balancing ---------------------------------
path ps_bsp_ckpt -n 3 --strategy ps --servers 1 --consistency bsp $MLP --ckpt-dir "$tmp/ckps" --ckpt-every 3
path ps_resume -n 3 --strategy ps --servers 1 --consistency bsp $MLP --steps 8 --resume "$tmp/ckps/ckpt-0000000003"
path ps_ssp_2servers -n 4 --strategy ps --servers 2 --consistency ssp:1 $MLP --inject slow:rank=0:factor=2
path ps_asp -n 3 --strategy ps --servers 1 --consistency asp $MLP
path ps_alie_median -n 6 --strategy ps --servers 1 --consistency bsp $MLP --aggregate median --inject byzantine:rank=1:mode=alie:1
path localsgd -n 2 --strategy localsgd:2 $MLP
path hogwild --strategy hogwild --threads 2 $MLP
path balance -n 2 --balance dynamic --inject slow:rank=1:factor=2 $MLP --batch 48
# ---- robust aggregation and worker momentum ------------------------------------------
path nnm_trimmed -n 5 $MLP --momentum 0.9 --aggregate trimmed:1 --pre-aggregate nnm --inject byzantine:rank=3:mode=signflip
path krum -n 5 $MLP --aggregate krum:1 --inject byzantine:rank=2:mode=random
path cclip_ckpt -n 3 $MLP --momentum 0.9 --aggregate cclip --inject byzantine:rank=2:mode=scale:-3 --ckpt-dir "$tmp/ckcc" --ckpt-every 3
path cclip_resume4 -n 4 $MLP --momentum 0.9 --aggregate cclip --steps 8 --resume "$tmp/ckcc/ckpt-0000000003"
# ---- compression ----------------------------------------------------------------------
for spec in topk:0.05:fp16 bf16 int8 sign powersgd:2; do
  path "gc_${spec//:/_}" -n 2 $MLP --compress "$spec"
done
path gc_z1_ckpt -n 2 --zero 1 $MLP --compress topk:0.05 --ckpt-dir "$tmp/ckgc" --ckpt-every 3
path gc_resume3 -n 3 --zero 1 $MLP --compress topk:0.05 --steps 8 --resume "$tmp/ckgc/ckpt-0000000003"
path gc_ps -n 3 --strategy ps --servers 1 --consistency bsp $MLP --compress int8
# ---- faults: a crash restarted by the supervisor, a hang diagnosed ----------------------
path crash_restart -n 2 $MLP --ckpt-dir "$tmp/ckcr" --ckpt-every 2 --max-restarts 1 --restart-backoff 0.1 --inject crash:rank=1:step=4
"$dt" train -n 3 $MLP --timeout 2 --inject hang:rank=2:step=3 --out "$tmp/hang" > "$tmp/hang.log" 2>&1; rc=$?
if [ $rc -eq 3 ] && grep -qE "ranks? ([0-9]+, )*2 did not" "$tmp/hang.log"; then ok "hang diagnosed: $(grep -o 'ranks* [0-9, ]* reached it.*' "$tmp/hang.log" | head -1)"
else fail "hang: rc=$rc, want 3 and 'rank 2 did not':"; tail -5 "$tmp/hang.log" | indent; fi
# ---- stopping: a signal (checkpoint, exit 75, resume), a time limit, a rewind, a skip ---
"$dt" train -n 2 --zero 1 $MLP --steps 400 --inject slow:rank=0:factor=20 --out "$tmp/stop" > "$tmp/stop.log" 2>&1 &
sp=$!
wait_until 120 grep -q '"step"' "$tmp/stop/metrics.jsonl" 2>/dev/null; kill -TERM $sp; wait $sp; rc=$?
if [ $rc -eq 75 ] && grep -q "stopped at step [0-9]* on SIGTERM; checkpoint" "$tmp/stop.log"; then
  path stop -n 2 --zero 1 $MLP --steps 400 --resume auto
else fail "stop on SIGTERM: rc=$rc:"; tail -3 "$tmp/stop.log" | indent; fi
"$dt" train $MLP --steps 1000000 --time-limit 3s --out "$tmp/tl" > "$tmp/tl.log" 2>&1; rc=$?
[ $rc -eq 75 ] && grep -q '"stopped":true' "$tmp/tl/metrics.jsonl" && ok "time limit: $(grep -o 'stopped at step [0-9]* before the time limit' "$tmp/tl.log")" ||
  { fail "time limit: rc=$rc:"; tail -3 "$tmp/tl.log" | indent; }
# the parameter server (2 servers), Hogwild! and dtrain rl stop too (a time
# limit shorter than the margin: after their first step), then resume
stop_then() { # NAME ARGS...: stopped by --time-limit 1s (exit 75, a checkpoint), then ARGS... --resume auto
  local name=$1; shift
  timeout 300 "$dt" "$@" --time-limit 1s --out "$tmp/$name" > "$tmp/$name.log" 2>&1; local rc=$?
  if [ $rc -eq 75 ] && grep -q "stopped a.* before the time limit; checkpoint" "$tmp/$name.log" &&
     timeout 300 "$dt" "$@" --out "$tmp/$name" --resume auto > "$tmp/$name.resume.log" 2>&1; then ok "$name: stopped, resumed"
  else fail "$name: rc=$rc:"; tail -3 "$tmp/$name.log" "$tmp/$name.resume.log" 2>/dev/null | indent; fi
}
stop_then stop_ps train -n 4 --strategy ps --servers 2 $MLP
stop_then stop_hogwild train --strategy hogwild --threads 2 --optim adamw $MLP --steps 200
stop_then stop_rl rl -n 3 --env cartpole --updates 20 --eval-every 0 --eval-episodes 2 --log-every 5 --quiet
path rewind -n 2 $MLP --steps 20 --inject spike:step=12:scale=1e30 --on-divergence rewind:4:3 --ckpt-dir "$tmp/ckrw" --ckpt-every 4
path skip -n 2 --zero 2 $MLP --steps 20 --inject spike:step=12:scale=1e30 --on-divergence skip
# ---- the other commands on what the runs left --------------------------------------------
"$dt" inspect "$tmp/ckps/ckpt-0000000006" > "$tmp/inspect.log" 2>&1 && ok "inspect of a parameter-server checkpoint" || { fail "inspect:"; tail -3 "$tmp/inspect.log" | indent; }
finish
