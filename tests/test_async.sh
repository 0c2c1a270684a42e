#!/usr/bin/env bash
# Local SGD, Byzantine-robust aggregation and dynamic load balancing.
source "$(dirname "$0")/lib.sh" "$@"

# local SGD with H = 1 and plain SGD is synchronous data parallelism
S="--model mlp --hidden 64,32 --batch 32 --steps 20 --lr 0.05 --momentum 0 --log-every 1 --quiet"
run sync -n 2 $S && run lsgd1 -n 2 $S --strategy localsgd:1 && {
  if msg=$(close_after "$tmp/sync" "$tmp/lsgd1" 0 1e-5) && "$dt" diff "$tmp/sync/model.safetensors" "$tmp/lsgd1/model.safetensors" --rtol 1e-4 --atol 1e-6 > /dev/null; then
    ok "localsgd:1 equals synchronous SGD: $msg"; else fail "localsgd:1 vs sync: $msg"; fi; }
# local SGD's optimizer state is each worker's own: every replica checkpoints it,
# so a resume is exact (SGD momentum, AdamW); on another world size each worker
# starts from their mean, said so
for o in "--momentum 0.9" "--optim adamw --lr 0.003"; do
  k=$(tr -dc 'a-z0-9' <<<"$o")
  L="-n 2 --model mlp --hidden 64,32 --batch 32 --steps 12 --lr-schedule constant --log-every 1 --quiet --eval-every 0 --strategy localsgd:4 $o"
  run "lw_$k" $L && run "lf_$k" $L --steps 8 --ckpt-dir "$tmp/lck_$k" --ckpt-every 4 &&
    run "lr_$k" $L --resume "$tmp/lck_$k/ckpt-0000000008" && {
    d=$("$dt" diff "$tmp/lw_$k/model.safetensors" "$tmp/lr_$k/model.safetensors" 2>&1) &&
      ok "localsgd:4 $o resumed at step 8 = the uninterrupted run, bitwise (each worker's optimizer state)" ||
      fail "localsgd:4 $o resume: $d"; }
done
run l3 ${L/-n 2/-n 3} --resume "$tmp/lck_optimadamwlr0003/ckpt-0000000008" &&
  { grep -q "every worker's optimizer state starts from the mean of the 2 workers'" "$tmp/l3.log" &&
    ok "localsgd on 3 workers from 2 workers' checkpoint: the mean of their optimizer states" || fail "localsgd 2 -> 3 workers"; }
# dynamic balance keeps the mathematics of the global batch (exact averaging by sample counts)
D="--model mlp --hidden 64,32 --batch 48 --steps 12 --lr 0.05 --log-every 1 --quiet"
run bstatic -n 2 $D && run bdyn -n 2 $D --balance dynamic --inject slow:rank=1:factor=3 && {
  msg=$(close_after "$tmp/bstatic" "$tmp/bdyn" 0 1e-4) && ok "--balance dynamic with a 3x slower worker: same training, $msg" || fail "dynamic balance: $msg"; }

# worker momentum: every worker keeps its own SGD momentum (weight decay, Nesterov)
# and sends that; with mean aggregation it is SGD with momentum on the mean
# gradient up to rounding, for data parallelism and the BSP parameter server
W="--model mlp --hidden 64,32 --batch 60 --steps 20 --lr 0.05 --momentum 0.9 --nesterov --weight-decay 1e-3 --log-every 1 --quiet --eval-every 0"
for kind in dp ps; do
  [ $kind = dp ] && L="-n 3" || L="-n 4 --strategy ps --servers 1 --consistency bsp"
  run ${kind}_wm_off $L $W --aggregate mean --worker-momentum off && run ${kind}_wm_on $L $W --aggregate mean --worker-momentum on && {
    if msg=$(close_after "$tmp/${kind}_wm_off" "$tmp/${kind}_wm_on" 0 1e-5) &&
       d=$("$dt" diff "$tmp/${kind}_wm_off/model.safetensors" "$tmp/${kind}_wm_on/model.safetensors" --rtol 1e-4 --atol 1e-6); then
      ok "$kind: worker momentum with mean aggregation equals server-side momentum: $msg ($d)"
    else fail "$kind: worker momentum vs optimizer momentum: $msg $d"; fi; }
done
# ... and with a robust aggregate it changes the run (the median of 3 momenta is not the momentum of the median)
run dp_med_off -n 3 $W --aggregate median --worker-momentum off && run dp_med_on -n 3 $W --aggregate median &&
  { cmp -s "$tmp/dp_med_off/model.safetensors" "$tmp/dp_med_on/model.safetensors" &&
      fail "--aggregate median: worker momentum (auto) changed nothing" ||
      ok "--aggregate median turns worker momentum on by itself (a different run from --worker-momentum off)"; }
# nearest-neighbour mixing on the BSP parameter server aggregates like data parallelism
run dp_nnm -n 5 $W --aggregate trimmed:1 --pre-aggregate nnm --inject byzantine:rank=3:mode=signflip &&
  run ps_nnm -n 6 --strategy ps --servers 1 --consistency bsp $W --aggregate trimmed:1 --pre-aggregate nnm --inject byzantine:rank=3:mode=signflip && {
    if msg=$("$dt" diff "$tmp/dp_nnm/model.safetensors" "$tmp/ps_nnm/model.safetensors" --rtol 1e-5 --atol 1e-7); then
      ok "nnm + trimmed:1 with a sign-flipping worker: parameter server = data parallelism ($msg)"
    else fail "nnm on the parameter server vs data parallelism: $msg"; fi; }
# "a little is enough": the attacker is simulated where every vector meets, so
# the BSP parameter server (2 servers: coordinate-wise per range) and data
# parallelism give the same bits, and the attack moves the run
run dp_alie -n 5 $W --aggregate median --inject byzantine:rank=1:mode=alie:1 &&
  run ps_alie -n 7 --strategy ps --servers 2 --consistency bsp $W --aggregate median --inject byzantine:rank=1:mode=alie:1 &&
  run dp_noalie -n 5 $W --aggregate median && {
    if "$dt" diff "$tmp/dp_alie/model.safetensors" "$tmp/ps_alie/model.safetensors" > /dev/null &&
       grep -q "mean - 1 x std" "$tmp/dp_alie.log" && grep -q "mean - 1 x std" "$tmp/ps_alie.log" &&
       ! "$dt" diff "$tmp/dp_alie/model.safetensors" "$tmp/dp_noalie/model.safetensors" > /dev/null; then
      ok "alie:1 with median: parameter server (2 servers) = data parallelism bit for bit, and not the clean run"
    else fail "alie: ps vs dp $("$dt" diff "$tmp/dp_alie/model.safetensors" "$tmp/ps_alie/model.safetensors")"; fi; }
# resume is exact: every worker's buffer is in the checkpoint (data parallelism and parameter server)
R="--model mlp --hidden 64 --batch 60 --steps 30 --lr 0.05 --quiet --eval-every 0 --aggregate median"
exact_wm() { local name=$1; shift
  run "${name}_a" "$@" $R || return
  run "${name}_b" "$@" $R --ckpt-dir "$tmp/${name}_ck" --ckpt-every 10 --inject crash:rank=1:step=28 --max-restarts 1 --resume auto ||
    { fail "$name: supervised run"; return; }
  grep -q "resuming" "$tmp/${name}_b.log" || { fail "$name: never resumed"; return; }
  if m=$("$dt" diff "$tmp/${name}_a/model.safetensors" "$tmp/${name}_b/model.safetensors" --rtol 0 --atol 0) &&
     "$dt" inspect "$tmp/${name}_ck/ckpt-0000000030" 2>&1 | grep -q "momentum.worker.2"; then
    ok "$name: killed at step 28, resumed with every worker's momentum, bitwise equal to the run without a crash ($m)"
  else fail "$name: $m"; fi; }
exact_wm wm_dp -n 3
exact_wm wm_ps -n 4 --strategy ps --servers 1 --consistency bsp
# centred clipping keeps the last aggregate: it is in the checkpoint, so a
# resume is bitwise exact; a checkpoint without it starts the centre at zero
CC="--model mlp --hidden 64 --batch 60 --steps 30 --lr 0.05 --quiet --eval-every 0 --aggregate cclip --inject byzantine:rank=2:mode=signflip"
run cc_a -n 3 $CC && run cc_b -n 3 $CC --ckpt-dir "$tmp/cc_ck" --ckpt-every 10 --inject crash:rank=1:step=28 --max-restarts 1 --resume auto && {
  if m=$("$dt" diff "$tmp/cc_a/model.safetensors" "$tmp/cc_b/model.safetensors") && grep -q "resuming" "$tmp/cc_b.log" &&
     "$dt" inspect "$tmp/cc_ck/ckpt-0000000030" 2>&1 | grep -q "aggregate.centre"; then
    ok "cclip: killed at step 28, resumed with its centre, bitwise equal to the run without a crash ($m)"
  else fail "cclip resume: $m"; fi; }
run cc_from_med -n 3 $CC --steps 40 --resume "$tmp/wm_dp_ck/ckpt-0000000030" &&
  { grep -q "has no centred-clipping centre" "$tmp/cc_from_med.log" && ok "cclip resumed from a median checkpoint: the centre starts from zero, and says so" ||
      fail "cclip from a checkpoint without a centre: $(tail -2 "$tmp/cc_from_med.log")"; }
run cc_nowm -n 3 $CC --steps 40 --worker-momentum off --resume "$tmp/cc_ck/ckpt-0000000030" &&
  { grep -q "centre is an aggregate of momenta, this run aggregates gradients" "$tmp/cc_nowm.log" &&
      ok "cclip: a centre of momenta is not carried into a run that aggregates gradients" || fail "cclip centre across worker momentum: $(tail -2 "$tmp/cc_nowm.log")"; }
run cc_mean -n 3 ${CC/cclip/mean} && {
  "$dt" diff "$tmp/cc_a/model.safetensors" "$tmp/cc_mean/model.safetensors" > /dev/null &&
    fail "cclip under sign-flip equals the mean" || ok "cclip under sign-flip is not the mean"; }
# another layout: 3 workers' momenta -> their mean on each of 4 workers, and the
# optimizer's momentum of a run without worker momentum -> every worker
run wm_4 -n 4 $R --steps 40 --resume "$tmp/wm_dp_ck/ckpt-0000000030" &&
  grep -q "every worker starts from the mean of the 3 worker momenta" "$tmp/wm_4.log" &&
  ok "3 -> 4 workers: every worker starts from the mean of the 3 momenta" || fail "3 -> 4 worker momentum resume: $(tail -2 "$tmp/wm_4.log")"
run srv_m -n 3 $R --aggregate mean --ckpt-dir "$tmp/srv_ck" &&
  run srv_to_wm -n 3 $R --aggregate median --steps 40 --resume "$tmp/srv_ck/ckpt-0000000030" &&
  grep -q "every worker starts from the optimizer's momentum" "$tmp/srv_to_wm.log" &&
  run wm_to_srv -n 3 $R --aggregate mean --steps 40 --resume "$tmp/wm_dp_ck/ckpt-0000000030" &&
  grep -q "the optimizer's momentum is the mean of the 3 workers' momenta" "$tmp/wm_to_srv.log" &&
  ok "optimizer momentum <-> worker momenta across a resume" || fail "momentum across worker/optimizer resume"
run wm_to_tp -n 2 --tp 2 --model mlp --hidden 64 --batch 60 --steps 40 --lr 0.05 --quiet --eval-every 0 --resume "$tmp/wm_dp_ck/ckpt-0000000030" &&
  grep -q "the optimizer's momentum is the mean of the 3 workers' momenta" "$tmp/wm_to_tp.log" &&
  ok "worker momenta -> a tensor-parallel run's optimizer momentum" || fail "worker momentum -> --tp 2 resume: $(tail -2 "$tmp/wm_to_tp.log")"

# configurations whose guarantee cannot hold are refused
expect "needs more than 4 workers" -n 4 $S --aggregate trimmed:2
expect "needs at least 5 workers" -n 4 $S --aggregate krum:1
expect "needs at least 3 workers" -n 2 $S --aggregate median
expect "plain data parallelism" -n 2 $S --strategy localsgd:2 --zero 1
expect "must be mean, median" $S --aggregate best
expect "pre-aggregate nnm needs a robust --aggregate" -n 3 $S --pre-aggregate nnm
expect "pre-aggregate nnm needs a robust --aggregate" -n 3 $S --aggregate mean --pre-aggregate nnm:1
expect "nnm:2 needs at least 5 workers" -n 4 $S --aggregate trimmed:1 --pre-aggregate nnm:2
expect "nnm:2 needs at least 5 workers" -n 5 --strategy ps --servers 1 --consistency bsp $S --timeout 20 --aggregate trimmed:1 --pre-aggregate nnm:2
expect "plans for no bad worker" -n 5 $S --aggregate krum:0 --pre-aggregate nnm
expect "must be none, nnm or nnm:F" -n 3 $S --aggregate median --pre-aggregate bucket
expect "cclip keeps the last aggregate" -n 4 --strategy ps --servers 1 --consistency bsp $S --aggregate cclip
expect "cclip:TAU needs a clipping radius" -n 3 $S --aggregate cclip:-1
expect "cclip:TAU needs a clipping radius" -n 3 $S --aggregate cclip:1e-50
expect "needs --consistency bsp with the parameter server" -n 3 --strategy ps --consistency asp $S --inject byzantine:rank=0:mode=alie
expect "paper's shift z is 0" -n 4 $S --aggregate mean --inject byzantine:rank=1:mode=alie
expect "alie:Z needs a shift Z in" -n 3 $S --inject byzantine:rank=1:mode=alie:200
expect "alie:Z needs a shift Z in" -n 3 $S --inject byzantine:rank=1:mode=alie:0
expect "collude on one shift" -n 5 $S --inject byzantine:rank=1:mode=alie:1 --inject byzantine:rank=2:mode=alie:2
expect "2 of 4 workers attack" -n 4 $S --inject byzantine:rank=1:mode=alie:1 --inject byzantine:rank=2:mode=alie:1
expect "byzantine takes rank and mode only" -n 3 $S --inject byzantine:rank=1:mode=alie:factor=2
expect "slow takes rank and factor only" -n 3 $S --inject slow:rank=1:factor=2:step=4
expect "mode must be signflip, random, scale:X or alie" -n 3 $S --inject byzantine:rank=1:mode=alien
expect "rank 7 does not exist in a run of 3 ranks" -n 3 $S --inject slow:rank=7:factor=2
expect "rank 2 is a parameter server" -n 3 --strategy ps $S --inject crash:rank=2:step=3
expect "does not apply to --strategy hogwild" --strategy hogwild --threads 2 $S --inject slow:rank=0:factor=2
expect "worker-momentum on is for robust aggregation" -n 3 $S --worker-momentum on
expect "worker-momentum on needs --optim sgd with --momentum" -n 3 $S --aggregate median --worker-momentum on
expect "worker-momentum must be auto, on or off" -n 3 $S --aggregate median --worker-momentum yes

finish
