#!/usr/bin/env bash
# Accuracy recipe check (a benchmark, not CI): the documented recipes train the
# mlp to >= 89% and the cnn to >= 91.5% Fashion-MNIST test accuracy with plain
# `dtrain train` flags. Takes several minutes on two cores.
#
#   bench/accuracy.sh [BUILD_DIR]
#
# Environment: ACC_THREADS (BLAS threads per run, 2); ACC_PRECISION, the
# --precision values to run each recipe in (default "fp32"; "fp32 bf16" runs
# both, one after the other, to set their wall times side by side). Logs go to
# BUILD_DIR/accuracy-{mlp,cnn}[-PRECISION].log. Exits 1 when a bar is missed.
set -euo pipefail

BUILD=${1:-build}
THREADS=${ACC_THREADS:-2}
PRECISIONS=${ACC_PRECISION:-fp32}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    echo "accuracy.sh: $BUILD is not a configured build directory (make build, or cmake -S . -B $BUILD)" >&2
    exit 2
fi
cmake --build "$BUILD" --target dtrain_cli >/dev/null
DTRAIN="$BUILD/dtrain"

# The recipes (docs/BENCHMARKS.md): SGD momentum 0.9, batch 128, cosine decay
# to 0 over the run, no weight decay, seed 1, all 60000 training images.
MLP_FLAGS=(--model mlp --epochs 20 --batch 128 --lr 0.05 --momentum 0.9 --schedule cosine --seed 1)
CNN_FLAGS=(--model cnn --epochs 8 --batch 128 --lr 0.05 --momentum 0.9 --schedule cosine --seed 1)

fail=0
check() { # name bar flags...
    local name=$1 bar=$2
    shift 2
    local log="$BUILD/accuracy-$name.log" t0 t1 acc
    echo "$name: $DTRAIN train $* --threads $THREADS"
    t0=$(date +%s)
    "$DTRAIN" train "$@" --threads "$THREADS" --no-progress --log-every 469 >"$log" 2>&1 || {
        echo "$name: dtrain train failed; see $log" >&2
        tail -3 "$log" >&2
        fail=1
        return
    }
    t1=$(date +%s)
    acc=$(sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' "$log" | tail -1)
    if awk -v a="$acc" -v b="$bar" 'BEGIN { exit !(a + 0 >= b + 0) }'; then
        echo "$name: test accuracy $acc% (bar $bar%): met, $((t1 - t0)) s"
    else
        echo "$name: test accuracy $acc% (bar $bar%): MISSED, $((t1 - t0)) s"
        fail=1
    fi
}

for p in $PRECISIONS; do
    sfx=""
    [ "$p" = fp32 ] || sfx="-$p"
    check "mlp$sfx" 89.0 "${MLP_FLAGS[@]}" --precision "$p"
    check "cnn$sfx" 91.5 "${CNN_FLAGS[@]}" --precision "$p"
done
exit $fail
