#!/usr/bin/env bash
# dtrain speed benchmark, side by side with PyTorch, one thread each.
#
#   bench/run.sh [BUILD_DIR]          (make bench calls it with $(BUILD))
#
# Builds only the bench_train target, then interleaves the two sides per
# workload (dtrain W1, torch W1, dtrain W2, torch W2, ...) for BENCH_ROUNDS
# rounds, so both see the same background load on a shared machine, and keeps
# each side's best round and the range of the ratios round by round. Prints a
# markdown table; the raw output of every run goes to BUILD_DIR/bench-raw.txt.
#
# PyTorch runs twice a round where OPENBLAS_CORETYPE is set (it chooses the
# kernels of the OpenBLAS PyTorch calls; an environment that sets it to
# Haswell holds an AVX-512 CPU to AVX2, half its speed): as the environment
# has it, and with it unset (OpenBLAS's own choice for the CPU). The targets
# are judged against the faster of the two; dtrain's own GEMM
# (src/nn/sgemm.c) does not read the variable.
#
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS (timed seconds per run, 3),
# BENCH_PYTHON (/usr/bin/python3: Debian's python3-torch lives there),
# DTRAIN_SGEMM (dtrain's GEMM library: auto, openblas or onednn).
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
echo "flags: $(grep -m1 -o -w -E 'avx2|fma|avx512f|avx512bw|avx512vl|avx512_bf16|avx512_vnni|amx_bf16' /proc/cpuinfo | tr '\n' ' ')"

# PyTorch's second side: OpenBLAS's own kernel choice, where the environment
# overrides it.
WIDE=0
if [ "$HAVE_TORCH" = 1 ] && [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    core=$(env -u OPENBLAS_CORETYPE "$PY" -c 'import ctypes
lib = ctypes.CDLL("libopenblas.so.0"); lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())' 2>/dev/null || true)
    if [ -n "$core" ] && [ "$core" != "$OPENBLAS_CORETYPE" ]; then
        WIDE=1
        echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE here; OpenBLAS's own choice is $core: PyTorch runs both ways"
    fi
fi

# The sgemm peak first; torch's 1-thread check compares its matmul against it.
"$BIN" --only peak | tee -a "$RAW" | grep -v '^RESULT'
PEAK0=$(awk '/^RESULT peak dtrain/ { sub(/.*sgemm_gflops=/, ""); print $1 }' "$RAW" | tail -1)
if [ "$HAVE_TORCH" = 1 ]; then
    "$PY" "$HERE/torch_bench.py" --only peak --sgemm-peak "$PEAK0" | tee -a "$RAW" | grep -v '^RESULT'
fi

for r in $(seq 1 "$ROUNDS"); do
    echo "--- round $r/$ROUNDS"
    echo "ROUND $r" >>"$RAW"
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
        if [ "$WIDE" = 1 ]; then
            env -u OPENBLAS_CORETYPE "$PY" "$HERE/torch_bench.py" --only "$w" --seconds "$SECS" --sgemm-peak "$PEAK0" \
                | sed "s/^RESULT $w torch /RESULT $w torchown /" | tee -a "$RAW" | grep -E "^RESULT ($w|warn)" || {
                echo "run.sh: torch_bench.py $w (OPENBLAS_CORETYPE unset) failed" >&2
                exit 1
            }
        fi
    done
done

if grep -q '^RESULT warn torch_multithreaded' "$RAW"; then
    echo "WARNING: PyTorch used more than one core in some run; its figures are NOT one-thread figures" >&2
fi

# Best round per side, and the ratio's range over the rounds (each round's
# dtrain against the same round's PyTorch); % of peak is the best GFLOP/s over
# the best sgemm seen (dtrain's own library or OpenBLAS, the larger).
echo
awk -v have_torch="$HAVE_TORCH" -v wide="$WIDE" '
function val(key,   i, kv) {
    for (i = 4; i <= NF; i++) { split($i, kv, "="); if (kv[1] == key) return kv[2] + 0 }
    return -1
}
function range(w, side,   r, q, lo, hi) {
    lo = 1e30; hi = 0
    for (r = 1; r <= nround; r++)
        if (((w, "dtrain", r) in per) && ((w, side, r) in per) && per[w, side, r] > 0) {
            q = per[w, "dtrain", r] / per[w, side, r]; if (q < lo) lo = q; if (q > hi) hi = q
        }
    return hi > 0 ? sprintf("%.2f-%.2fx", lo, hi) : "-"
}
/^ROUND / { nround = $2 }
/^RESULT peak dtrain/ { p = val("sgemm_gflops"); if (p > peak) peak = p; lib = $0; sub(/.*library=/, "", lib) }
/^RESULT peak torch/  { p = val("matmul_gflops"); if (p > tpeak) tpeak = p }
/^RESULT W[0-9] / {
    w = $2; side = $3; split($4, kv, "="); v = kv[2] + 0; unit[w] = kv[1]
    if (val("cpu_per_wall") > 1.3) { skipped[w, side]++; next }  # not a one-thread figure
    per[w, side, nround] = v
    if (v > best[w, side]) best[w, side] = v
    if (side == "dtrain") { g = val("gflops"); if (g > gf[w]) gf[w] = g }
}
END {
    tgt["W1"] = 1.3; tgt["W2"] = 1.4; tgt["W3"] = 1.2
    name["W1"] = "W1 mlp 784-1024-1024-10, B128, SGD-m"
    name["W2"] = "W2 gpt 4L/4H/256, B16x128, AdamW"
    name["W3"] = "W3 cnn 32c5-64c5-fc1024, B64, SGD-m"
    printf "| workload | unit | dtrain | PyTorch | ratio (best; rounds) |"
    if (wide == 1) printf " PyTorch, OpenBLAS'"'"'s own kernels | ratio (best; rounds) |"
    printf " target | met? | dtrain GFLOP/s | %% of sgemm peak |\n"
    printf "| --- | --- | ---: | ---: | --- |"
    if (wide == 1) printf " ---: | --- |"
    printf " --- | --- | ---: | ---: |\n"
    for (i = 1; i <= 3; i++) {
        w = "W" i; u = unit[w]; sub(/_per_s$/, "/s", u)
        d = best[w, "dtrain"]; t = best[w, "torch"]; to = best[w, "torchown"]
        pct = peak > 0 ? 100 * gf[w] / peak : 0
        if (have_torch == 1 && t > 0) {
            tb = to > t ? to : t; ok = d / tb >= tgt[w]   # judged against the faster PyTorch
            printf "| %s | %s | %.0f | %.0f | %.2fx; %s |", name[w], u, d, t, d / t, range(w, "torch")
            if (wide == 1) printf " %.0f | %.2fx; %s |", to, (to > 0 ? d / to : 0), range(w, "torchown")
            printf " >= %.1fx | %s | %.1f | %.1f%% |\n", tgt[w], ok ? "yes" : "NO", gf[w], pct
        } else {
            printf "| %s | %s | %.0f | skipped | - |", name[w], u, d
            if (wide == 1) printf " - | - |"
            printf " - | - | %.1f | %.1f%% |\n", gf[w], pct
        }
    }
    printf "\nsgemm 1024^3 peak, 1 thread (best seen): %.1f GFLOP/s (dtrain trains with %s)", peak, lib
    if (have_torch == 1) printf "; torch 1024^3 matmul, 1 thread (environment'"'"'s OpenBLAS kernels): %.1f GFLOP/s", tpeak
    printf "\n"
    for (k in skipped) { split(k, ks, SUBSEP); printf "%s %s: %d run(s) used more than one core (cpu/wall > 1.3), left out\n", ks[1], ks[2], skipped[k] }
    if (have_torch != 1) printf "PyTorch was skipped (not installed): dtrain figures only.\n"
}' "$RAW"
echo "(best of $ROUNDS interleaved rounds, ${SECS} s timed per run; raw output in $RAW)"
