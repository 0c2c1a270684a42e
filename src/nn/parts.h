/* Private to src/nn: the kernels that run on several threads (the direct
 * convolution, the bf16 GEMM) share their work out with these. */
#ifndef DT_NN_PARTS_H
#define DT_NN_PARTS_H

#include <stddef.h>

#define DT_NN_MAX_THREADS 64

/* Threads for a kernel: as many as the BLAS has (--threads; one per rank under
 * -n), at most the CPUs online and DT_NN_MAX_THREADS; dt_nn_max_threads is that
 * most, for sizing per-thread scratch. */
int dt_nn_threads(void);
int dt_nn_max_threads(void);

/* Runs fn(ctx, j) for j in [0, T): j = 0 on the caller, the others on threads
 * started for the call (tens of microseconds against the milliseconds of work
 * worth splitting). A thread that cannot start has its part run by the caller. */
void dt_nn_run_parts(void (*fn)(void *, int), void *ctx, int T);

/* [lo, hi) of n items for part j of T. */
static inline void dt_nn_share(size_t n, int j, int T, size_t *lo, size_t *hi) {
    *lo = n * (size_t)j / (size_t)T;
    *hi = n * (size_t)(j + 1) / (size_t)T;
}

#endif
