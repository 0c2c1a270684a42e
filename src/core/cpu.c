/* dt_cpu_fma (cpu.h): asked of the CPU once (__builtin_cpu_supports), then a
 * cached answer; a build for a CPU with FMA knows it at compile time. */
#include "core/cpu.h"

#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

bool dt_cpu_fma(void) {
#if defined(__FMA__) || defined(__aarch64__)
    return true;
#elif defined(__x86_64__) && defined(__GNUC__)
    static int known = -1; /* a benign race: every thread computes the same answer */
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
    }
    return known == 1;
#else
    return false;
#endif
}

/* CPUID leaf 7, subleaf 1, EAX bit 5 (AVX512_BF16), with the AVX-512 parts its
 * kernels use (F, BW, VL). */
bool dt_cpu_avx512bf16(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 1, a, b, c, d);
    __builtin_cpu_init();
    return (a & (1u << 5)) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}
