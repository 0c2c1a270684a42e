/* A pipeline schedule simulated event by event (plan.h). Each stage runs its
 * operations in the schedule's order; an operation starts at the later of its
 * stage becoming free and its input arriving (a forward's from the stage
 * before, plus that boundary's p2p; a backward's from the stage after, plus
 * its boundary's p2p; the last
 * stage's backward of micro-batch m follows its own forward of m). The finish
 * times are the least fixed point of those rules, reached by passes over the
 * stages in order: each pass settles at least one more operation, so at most
 * 2PM passes of 2PM operations (cost O((PM)^2), PM small for a planner).
 * For equal stages (f, b) and p2p 0 both schedules take (M + P - 1)(f + b):
 * the bubble (P - 1)/(M + P - 1) of Huang et al. 2019 and Narayanan et al. 2021. */
#include "dtrain/plan.h"

#include <string.h>

/* op k of stage s: micro-batch and kind (0 forward, 1 backward) */
static void op_at(dt_plan_sched sched, int P, int M, int s, int k, int *m, int *bwd) {
    if (sched == DT_PLAN_GPIPE) {
        *bwd = k >= M;
        *m = k % M;
        return;
    }
    int warm = P - s - 1 < M ? P - s - 1 : M;
    if (k < warm) {
        *bwd = 0;
        *m = k;
        return;
    }
    int j = k - warm;                      /* steady phase: F(warm + i), B(i) alternately */
    if (j < 2 * (M - warm)) {
        *bwd = j % 2;
        *m = *bwd ? j / 2 : warm + j / 2;
        return;
    }
    *bwd = 1;
    *m = (M - warm) + (j - 2 * (M - warm)); /* cool-down: the remaining backwards */
}

double dt_plan_pipeline(dt_plan_sched sched, int P, int M, const double *fwd, const double *bwd, const double *p2p,
                        double *busy) {
    if (P < 1 || M < 1 || (long long)P * M > (1 << 20)) return -1;
    size_t n = (size_t)P * M;
    double *endf = dt_calloc(n, sizeof(double)), *endb = dt_calloc(n, sizeof(double));
    if (!endf || !endb) {
        dt_free(endf);
        dt_free(endb);
        return -1;
    }
    bool changed = true;
    for (long long pass = 0; changed && pass <= 2 * (long long)n + 1; pass++) {
        changed = false;
        for (int s = 0; s < P; s++) {
            double t = 0; /* the stage is free at t */
            for (int k = 0; k < 2 * M; k++) {
                int m, b;
                op_at(sched, P, M, s, k, &m, &b);
                double ready = 0;
                if (!b && s > 0) ready = endf[(size_t)(s - 1) * M + m] + (p2p ? p2p[s] : 0);
                if (b && s < P - 1) ready = endb[(size_t)(s + 1) * M + m] + (p2p ? p2p[s + 1] : 0);
                if (b && s == P - 1) ready = endf[(size_t)s * M + m];
                double end = (t > ready ? t : ready) + (b ? bwd[s] : fwd[s]);
                double *slot = b ? &endb[(size_t)s * M + m] : &endf[(size_t)s * M + m];
                if (end != *slot) {
                    *slot = end;
                    changed = true;
                }
                t = end;
            }
        }
    }
    double span = 0, most = 0;
    for (int s = 0; s < P; s++) {
        double work = M * (fwd[s] + bwd[s]);
        if (work > most) most = work;
        for (int m = 0; m < M; m++)
            if (endb[(size_t)s * M + m] > span) span = endb[(size_t)s * M + m];
    }
    if (busy) *busy = most;
    dt_free(endf);
    dt_free(endb);
    return span;
}
