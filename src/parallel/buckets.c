/* Data parallelism's gradient buckets, the one rule that dp.c runs and the
 * planner prices (plan_dp_exposed): walking blocks from the last down, the order
 * in which backward finishes them, a bucket takes whole blocks until it holds at
 * least min_floats parameters; the lowest bucket takes what is left. A stage
 * of several block ranges (interleaved chunks) cuts each range so, the
 * highest range first; no bucket spans two. Cost: O(blocks) in all. */
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

int dt_dp_buckets(const dt_model *m, const int *first, const int *last, int n, size_t min_floats, int *low, int *top,
                  int cap) {
    int nb = 0;
    for (int r = n - 1; r >= 0; r--)
        for (int t = last[r], lo; t >= first[r] && nb < cap; t = lo - 1) {
            lo = dt_dp_bucket_low(m, first[r], t, min_floats ? min_floats : 1);
            low[nb] = lo;
            top[nb++] = t;
        }
    return nb;
}
