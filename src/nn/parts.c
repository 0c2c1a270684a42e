/* Threads for the kernels (parts.h): started per call and joined before it returns. */
#include "parts.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

/* The online CPUs, asked once: glibc's sysconf reads a sysfs file on every call, and W2's
 * bf16 step asked before each of its per-head products (8.7% of the step in perf). */
int dt_nn_max_threads(void) {
    static atomic_int cached; /* 0: not asked yet; a race asks twice, same answer */
    int c = atomic_load_explicit(&cached, memory_order_relaxed);
    if (c > 0) return c;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c = n < 1 ? 1 : n > DT_NN_MAX_THREADS ? DT_NN_MAX_THREADS : (int)n;
    atomic_store_explicit(&cached, c, memory_order_relaxed);
    return c;
}

int dt_nn_threads(void) {
    int t = openblas_get_num_threads(), m = dt_nn_max_threads();
    return t < 1 ? 1 : t > m ? m : t;
}

typedef struct {
    void (*fn)(void *, int);
    void *ctx;
    int j;
} part;

static void *part_entry(void *p) {
    part *q = p;
    q->fn(q->ctx, q->j);
    return NULL;
}

void dt_nn_run_parts(void (*fn)(void *, int), void *ctx, int T) {
    pthread_t th[DT_NN_MAX_THREADS];
    part parts[DT_NN_MAX_THREADS];
    bool started[DT_NN_MAX_THREADS] = {false};
    if (T > DT_NN_MAX_THREADS) T = DT_NN_MAX_THREADS;
    for (int j = 1; j < T; j++) {
        parts[j] = (part){fn, ctx, j};
        started[j] = pthread_create(&th[j], NULL, part_entry, &parts[j]) == 0;
    }
    fn(ctx, 0);
    for (int j = 1; j < T; j++) {
        if (started[j]) pthread_join(th[j], NULL);
        else fn(ctx, j);
    }
}
