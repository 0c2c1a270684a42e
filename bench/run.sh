#!/usr/bin/env bash
# dtrain speed benchmark, side by side with PyTorch, one thread each.
#
#   bench/run.sh [BUILD_DIR]          (make bench calls it with $(BUILD))
#
# Builds only the bench_train target, then interleaves the two sides per
# workload (dtrain W1, torch W1, dtrain W2, torch W2, ...) for BENCH_ROUNDS
# rounds, so both see the same background load on a shared machine, and keeps
# each side's best round. Prints a markdown table; the raw output of every run
# goes to BUILD_DIR/bench-raw.txt.
#
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS (timed seconds per run, 3),
# BENCH_PYTHON (/usr/bin/python3: Debian's python3-torch lives there).
set -euo pipefail

BUILD=${1:-build}
ROUNDS=${BENCH_ROUNDS:-3}
SECS=${BENCH_SECONDS:-3}
PY=${BENCH_PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    echo "run.sh: $BUILD is not a configured build directory (make build, or cmake -S . -B $BUILD)" >&2
    exit 2
fi
cmake --build "$BUILD" --target bench_train >/dev/null
BIN="$BUILD/bench_train"

# (nproc obeys OMP_NUM_THREADS, so count the CPUs before setting it.)
NCPU=$(nproc --all)
# One BLAS/OpenMP thread everywhere (torch_bench.py sets these itself too).
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

RAW="$BUILD/bench-raw.txt"
: >"$RAW"

HAVE_TORCH=1
if ! "$PY" -c 'import torch' 2>/dev/null; then
    HAVE_TORCH=0
    echo "run.sh: PyTorch not importable from $PY (apt-get install python3-torch): PyTorch skipped" >&2
fi

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $NCPU CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# The sgemm peak first; torch's 1-thread check compares its matmul against it.
"$BIN" --only peak | tee -a "$RAW" | grep -v '^RESULT'
PEAK0=$(awk '/^RESULT peak dtrain/ { sub(/.*sgemm_gflops=/, ""); print $1 }' "$RAW" | tail -1)
if [ "$HAVE_TORCH" = 1 ]; then
    "$PY" "$HERE/torch_bench.py" --only peak --sgemm-peak "$PEAK0" | tee -a "$RAW" | grep -v '^RESULT'
fi

for r in $(seq 1 "$ROUNDS"); do
    echo "--- round $r/$ROUNDS"
    for w in W1 W2 W3; do
        "$BIN" --only "$w" --seconds "$SECS" | tee -a "$RAW" | grep "^RESULT $w" || {
            echo "run.sh: bench_train $w failed" >&2
            exit 1
        }
        if [ "$HAVE_TORCH" = 1 ]; then
            "$PY" "$HERE/torch_bench.py" --only "$w" --seconds "$SECS" --sgemm-peak "$PEAK0" \
                | tee -a "$RAW" | grep -E "^RESULT ($w|warn)" || {
                echo "run.sh: torch_bench.py $w failed" >&2
                exit 1
            }
        fi
    done
done

if grep -q '^RESULT warn torch_multithreaded' "$RAW"; then
    echo "WARNING: PyTorch used more than one core in some run; its figures are NOT one-thread figures" >&2
fi

# Best round per side; % of peak is the best GFLOP/s over the best sgemm seen.
echo
awk -v have_torch="$HAVE_TORCH" '
function val(key,   i, kv) {
    for (i = 4; i <= NF; i++) { split($i, kv, "="); if (kv[1] == key) return kv[2] + 0 }
    return -1
}
/^RESULT peak dtrain/ { p = $4; sub(/sgemm_gflops=/, "", p); if (p + 0 > peak) peak = p + 0 }
/^RESULT peak torch/  { p = $4; sub(/matmul_gflops=/, "", p); if (p + 0 > tpeak) tpeak = p + 0 }
/^RESULT W[0-9] / {
    w = $2; side = $3; split($4, kv, "="); v = kv[2] + 0; unit[w] = kv[1]
    if (v > best[w, side]) best[w, side] = v
    if (side == "dtrain") { g = val("gflops"); if (g > gf[w]) gf[w] = g }
}
END {
    tgt["W1"] = 1.05; tgt["W2"] = 1.2; tgt["W3"] = 1.0
    name["W1"] = "W1 mlp 784-1024-1024-10, B128, SGD-m"
    name["W2"] = "W2 gpt 4L/4H/256, B16x128, AdamW"
    name["W3"] = "W3 cnn 32c5-64c5-fc1024, B64, SGD-m"
    printf "| workload | unit | dtrain | PyTorch 1-thread | ratio | target | met? | dtrain GFLOP/s | %% of sgemm peak |\n"
    printf "| --- | --- | ---: | ---: | ---: | --- | --- | ---: | ---: |\n"
    for (i = 1; i <= 3; i++) {
        w = "W" i; u = unit[w]; sub(/_per_s$/, "/s", u)
        d = best[w, "dtrain"]; t = best[w, "torch"]
        pct = peak > 0 ? 100 * gf[w] / peak : 0
        if (have_torch == 1 && t > 0) {
            ratio = d / t; ok = ratio >= tgt[w]
            tg = sprintf(">= %.2fx", tgt[w])
            if (w == "W1") { tg = tg " and >= 85% peak"; ok = ok && pct >= 85 }
            printf "| %s | %s | %.0f | %.0f | %.3fx | %s | %s | %.1f | %.1f%% |\n", name[w], u, d, t, ratio, tg, ok ? "yes" : "NO", gf[w], pct
        } else {
            printf "| %s | %s | %.0f | skipped | - | - | - | %.1f | %.1f%% |\n", name[w], u, d, gf[w], pct
        }
    }
    printf "\nsgemm 1024^3 peak, 1 thread (best seen): %.1f GFLOP/s", peak
    if (have_torch == 1) printf "; torch 1024^3 matmul, 1 thread: %.1f GFLOP/s", tpeak
    printf "\n"
    if (have_torch != 1) printf "PyTorch was skipped (not installed): dtrain figures only.\n"
}' "$RAW"
echo "(best of $ROUNDS interleaved rounds, ${SECS} s timed per run; raw output in $RAW)"
