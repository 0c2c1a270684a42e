#!/usr/bin/env bash
# Stopping well under Slurm (issue 22), on the emulated cluster (docs/CLUSTER.md),
# as root; each case bounded in time. docs/slurm/requeue.sbatch on 2 nodes x 2
# ranks (srun), against the same job run uninterrupted:
#  1. time limit: `sbatch --time=2 --signal=B:USR1@100`, a run longer than
#     that: Slurm's USR1 reaches the script, the ranks stop with a checkpoint
#     (exit 75), the script requeues the job, the requeued run resumes;
#  2. preemption: `scontrol requeue JOB` while it runs: SIGTERM to every
#     process of the job, the ranks stop with a checkpoint within KillWait,
#     Slurm requeues it, the requeued run resumes.
# Each must finish with weights bitwise equal to the uninterrupted job's; the
# time lost per stop is printed: the stop (signal to the job's end), the
# requeue (to the resumed run's first line, Slurm's BeginTime hold cut short
# with `scontrol update starttime=now` as an administrator would), and the
# steps computed twice (none: the checkpoint is of the stop's step).
# Usage: bench/stop_slurm.sh [BUILD_DIR]   (STEPS, SLOW: the run's length)
set -u
build=$(cd "${1:-build}" && pwd)
dt="$build/dtrain"
root=$(cd "$(dirname "$0")/.." && pwd)
cl=$root/scripts/cluster.sh
[ "$(id -u)" -eq 0 ] || { echo "bench/stop_slurm.sh: needs root (network namespaces)" >&2; exit 2; }
command -v slurmctld > /dev/null || { echo "bench/stop_slurm.sh: needs slurm-wlm and munge (apt-get install slurm-wlm munge)" >&2; exit 2; }
tmp=$(mktemp -d); chmod 755 "$tmp"
export DTRAIN_CLUSTER_DIR=$tmp/cluster
S=$DTRAIN_CLUSTER_DIR
trap '"$cl" down; rm -rf "$tmp"' EXIT
"$cl" up --hosts 2 --slots 2 --rate 1gbit --slurm > /dev/null || exit 1
on1() { "$cl" exec node1 "$@"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
ARGS="--model mlp --hidden 128 --steps ${STEPS:-3000} --eval-every 0 --log-every 50"
FLAGS="--ckpt-every 1000 --inject slow:rank=0:factor=${SLOW:-40}"

# submit NAME SBATCH_FLAGS...: the job id; its directory is $S/shared/NAME
submit() {
  local name=$1; shift
  mkdir -p "$S/shared/$name"
  (cd "$S/shared/$name" && on1 env DTRAIN="$dt" OUT="$S/shared/$name/out" DTRAIN_ARGS="$ARGS" DTRAIN_FLAGS="$FLAGS" \
     sbatch --parsable "$@" "$root/docs/slurm/requeue.sbatch")
}
log() { cat "$S/shared/$1"/dtrain-*.out 2>/dev/null; }
# wait_for NAME PATTERN SECONDS: until the job's output has PATTERN; a requeued
# job held for its BeginTime is started at once
wait_for() {
  local end=$((SECONDS + $3)) st
  until log "$1" | grep -q -- "$2"; do
    [ $SECONDS -ge $end ] && return 1
    st=$(on1 squeue -h -j "${jobs[$1]}" -o '%T %r' 2>&1)
    [ "$st" = "PENDING BeginTime" ] && on1 scontrol update jobid="${jobs[$1]}" starttime=now
    sleep 0.2
  done
}
declare -A jobs

echo "## the uninterrupted job"
t=$(now); jobs[ref]=$(submit ref --time=10)
wait_for ref '^trained' 600 || { echo "the reference job did not finish:"; log ref | tail -5; exit 1; }
ref_s=$(since "$t"); echo "- job ${jobs[ref]}: $(log ref | grep '^trained') ($ref_s s from submission)"

case_run() { # NAME HOW
  local name=$1 how=$2 t t_sig t_end t_res
  t=$(now)
  if [ "$how" = limit ]; then jobs[$name]=$(submit "$name" --time=2 --signal=B:USR1@100)
  else jobs[$name]=$(submit "$name" --time=10); fi
  for _ in $(seq 3000); do grep -q '"step":500,' "$S/shared/$name/out/metrics.jsonl" 2>/dev/null && break; sleep 0.2; done
  if [ "$how" = preempt ]; then t_sig=$(now); on1 scontrol requeue "${jobs[$name]}"; fi
  wait_for "$name" 'stopped at step' 300 || { echo "- $name: no stop:"; log "$name" | tail -5; return 1; }
  [ "$how" = limit ] && t_sig=$t  # Slurm's signal time is not seen here; the stop's own line says the step
  t_end=$(now)
  wait_for "$name" 'resuming from' 300 || { echo "- $name: not resumed:"; log "$name" | tail -5; return 1; }
  t_res=$(now)
  wait_for "$name" '^trained' 600 || { echo "- $name: did not finish:"; log "$name" | tail -5; return 1; }
  local all; all=$(since "$t")
  local d; d=$("$dt" diff "$S/shared/ref/out/model.safetensors" "$S/shared/$name/out/model.safetensors" 2>&1 | tail -1)
  echo "- job ${jobs[$name]}: $(log "$name" | grep -o 'stopped at step [0-9]* on SIG[A-Z0-9]*'), $(log "$name" | grep -o 'resuming from [^ ]*' | head -1 | sed 's|.*/||');" \
       "finished in its requeued run: $(log "$name" | grep -c 'restart count') starts; weights vs the uninterrupted job: $d"
  [ "$how" = preempt ] && echo "  time lost to the stop: $(awk -v a="$t_sig" -v b="$t_end" 'BEGIN { printf "%.1f", b - a }') s from scontrol requeue to the stop line"
  echo "  requeue to the resumed run: $(awk -v a="$t_end" -v b="$t_res" 'BEGIN { printf "%.1f", b - a }') s; the job took $all s from submission against $ref_s s uninterrupted"
}
echo "## 1. a time limit shorter than the run (--time=2 --signal=B:USR1@100 --requeue)"
case_run limit limit
echo "## 2. preempted: scontrol requeue while it runs"
case_run preempt preempt
