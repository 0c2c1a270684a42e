#!/usr/bin/env bash
# --precision bf16 against fp32 (issue 17), one thread, side by side: every round
# runs W1, W2 and W3 in fp32, bf16 and bf16-emulated in turn (bench_train), and the
# ratios are taken pair by pair within a round, so the machine's drift between
# rounds cancels. Prints the CPU's model and bf16-related flags, one line per
# round, and the range and best-vs-best ratio per workload.
#   bench/bf16.sh [BUILD]      (BF16_ROUNDS=5, BF16_SECONDS=3)
# Target (issue 17): bf16 >= 1.6x fp32 on W1 and W2 on a CPU with AVX512-BF16;
# W3 (cnn) measures the convolutions' im2col + dt_gemm_bf16 against fp32's
# direct kernel.
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${BF16_ROUNDS:-5}
SECS=${BF16_SECONDS:-3}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    echo "bf16.sh: $BUILD is not a configured build directory (make build)" >&2
    exit 2
fi
cmake --build "$BUILD" --target bench_train >/dev/null
BIN=$BUILD/bench_train
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
RAW=$BUILD/bf16-raw.txt
: > "$RAW"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) CPUs; bf16 flags: $(grep -o 'avx512_bf16\|amx_bf16\|avx512f ' /proc/cpuinfo | sort -u | tr '\n' ' ')"
for r in $(seq 1 "$ROUNDS"); do
    for w in W1 W2 W3; do
        line="round $r $w"
        for p in fp32 bf16 bf16-emulated; do
            v=$("$BIN" --only "$w" --seconds "$SECS" --precision "$p" | awk '/^RESULT W/ { split($4, kv, "="); print kv[2] }')
            [ -n "$v" ] || { echo "bf16.sh: bench_train $w --precision $p failed" >&2; exit 1; }
            echo "$r $w $p $v" >> "$RAW"
            line="$line $p=$v"
        done
        echo "$line"
    done
done
echo
awk '{ v[$1, $2, $3] = $4; if ($4 > best[$2, $3]) best[$2, $3] = $4; rounds[$1] = 1; ws[$2] = 1 }
END {
    printf "| workload | bf16 / fp32, per round | best vs best | bf16-emulated / fp32, per round |\n| --- | --- | --- | --- |\n"
    for (w in ws) {
        lo = 1e9; hi = 0; elo = 1e9; ehi = 0
        for (r in rounds) {
            q = v[r, w, "bf16"] / v[r, w, "fp32"]; e = v[r, w, "bf16-emulated"] / v[r, w, "fp32"]
            if (q < lo) lo = q; if (q > hi) hi = q; if (e < elo) elo = e; if (e > ehi) ehi = e
        }
        printf "| %s | %.2f-%.2fx | %.2fx | %.2f-%.2fx |\n", w, lo, hi, best[w, "bf16"] / best[w, "fp32"], elo, ehi
    }
}' "$RAW"
echo "($ROUNDS interleaved rounds, ${SECS} s timed per run; raw figures in $RAW)"
