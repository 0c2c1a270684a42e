#!/usr/bin/env bash
# The default build (any x86-64; hot loops multi-versioned, src/core/cpu.h)
# against a -march=native build (cmake -DDT_NATIVE=ON), W1-W3 of bench_train,
# one thread, interleaved for ROUNDS rounds: the ratio of each round and of the
# best rounds. Target: the default build loses at most 3%.
# Usage: bench/march.sh [DEFAULT_BUILD] [NATIVE_BUILD] [ROUNDS]
set -eu
gen=${1:-build}; nat=${2:-build-native}; rounds=${3:-5}
[ -f "$nat/CMakeCache.txt" ] || cmake -S "$(dirname "$0")/.." -B "$nat" -DCMAKE_BUILD_TYPE=Release -DDT_NATIVE=ON > /dev/null
for b in "$gen" "$nat"; do cmake --build "$b" --target bench_train -j "$(nproc)" > /dev/null; done
grep -q 'DT_NATIVE:BOOL=OFF' "$gen/CMakeCache.txt" || { echo "march.sh: $gen is not a default (DT_NATIVE=OFF) build" >&2; exit 2; }
grep -q 'DT_NATIVE:BOOL=ON' "$nat/CMakeCache.txt" || { echo "march.sh: $nat is not a DT_NATIVE=ON build" >&2; exit 2; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|fma|avx512f|avx512_bf16|f16c)$' | tr '\n' ' ')"
raw=$(mktemp); trap 'rm -f "$raw"' EXIT
for r in $(seq "$rounds"); do
  for w in W1 W2 W3; do
    for b in "$gen" "$nat"; do
      v=$("$b/bench_train" --only $w --seconds 3 | grep "^RESULT $w" | sed 's/.*_per_s=\([0-9.]*\).*/\1/')
      echo "$r $w $([ "$b" = "$gen" ] && echo default || echo native) $v" >> "$raw"
    done
  done
done
echo "| workload | default build (best, items/s) | -march=native (best) | best vs best | per-round ratios (default / native) |"
echo "|---|---|---|---|---|"
for w in W1 W2 W3; do
  awk -v w=$w '$2 == w { v[$1 " " $3] = $4; if ($4 > best[$3]) best[$3] = $4; n = $1 > n ? $1 : n }
    END { s = ""; for (r = 1; r <= n; r++) s = s sprintf("%s%.3f", r > 1 ? ", " : "", v[r " default"] / v[r " native"]);
          printf "| %s | %.1f | %.1f | %.3f | %s |\n", w, best["default"], best["native"], best["default"] / best["native"], s }' "$raw"
done
