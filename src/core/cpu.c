/* dt_cpu_fma (cpu.h): asked of the CPU once (__builtin_cpu_supports), then a
 * cached answer; a build for a CPU with FMA knows it at compile time. */
#include "core/cpu.h"

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
