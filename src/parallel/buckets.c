/* Data parallelism's gradient buckets, the one rule that dp.c runs and the
 * planner prices (plan_dp_exposed): walking blocks from the last down, the order
 * in which backward finishes them, a bucket takes whole blocks until it holds at
 * least min_floats parameters; the lowest bucket takes what is left. Cost:
 * O(blocks in the bucket) per call. */
#include "dtrain/parallel.h"

int dt_dp_bucket_low(const dt_model *m, int first, int top, size_t min_floats) {
    size_t n = 0;
    int b = top;
    for (; b > first; b--) {
        n += m->blocks[b].param_hi - m->blocks[b].param_lo;
        if (n >= min_floats) break;
    }
    return b;
}
