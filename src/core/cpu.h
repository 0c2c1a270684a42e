/* Private to src/: the CPU the library runs on, for the hot loops. The default
 * build targets any x86-64 (a binary built here runs on every host of a
 * cluster); the loops that dominate a step outside the BLAS carry DT_HOT, so
 * GCC compiles them for x86-64-v4 (AVX-512), v3 (AVX2, FMA) and the baseline,
 * and the loader picks the best one for the CPU (function multi-versioning:
 * an ifunc resolved once). A -march=native build (cmake -DDT_NATIVE=ON) needs
 * no clones. The sanitizer build has none either (ASan and ifuncs disagree).
 * Cost: one indirect call per kernel call. */
#ifndef DTRAIN_CORE_CPU_H
#define DTRAIN_CORE_CPU_H

#include <stdbool.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(DT_NATIVE_BUILD) && \
    !defined(__SANITIZE_ADDRESS__)
#define DT_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
/* A function compiled for AVX2 + FMA (called only when dt_cpu_fma() says so). */
#define DT_FMA_TARGET __attribute__((target("avx2,fma")))
#else
#define DT_HOT
#define DT_FMA_TARGET
#endif

/* Does this CPU fuse multiply-adds (x86-64: FMA3; aarch64: always)? Checked
 * once. The optimizers' fused version runs where it does, as PyTorch's vector
 * kernels (vec::fmadd) do, so the updates agree with PyTorch's bit for bit. */
bool dt_cpu_fma(void);

/* Does this CPU have AVX512-BF16 (VDPBF16PS) with AVX-512 F, BW and VL? */
bool dt_cpu_avx512bf16(void);

#endif
