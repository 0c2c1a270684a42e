/* A pipeline schedule simulated event by event (plan.h). Each stage runs its
 * operations in the order the runtime runs them (dt_pipe_sched_op, the one
 * generator src/parallel/pipeline.c executes: GPipe, 1F1B and interleaved
 * 1F1B); an operation starts at the later of its stage becoming free and its
 * input arriving: a forward of chunk c > 0 waits for chunk c-1's forward of
 * the same micro-batch plus boundary c's p2p, a backward of chunk c < C-1 for
 * chunk c+1's backward plus boundary c+1's p2p, the last chunk's backward for
 * its own forward. Operations are settled as list scheduling does: round
 * after round, every stage runs its next operations while their inputs are
 * settled; a round in which no stage moves with operations left is a
 * deadlock. Cost: O(C M) operations, O(P) per round, at most 2CM rounds
 * (C = P V chunks), O(C M) memory.
 * For equal chunks (f, b per chunk, a stage's F = V f, B = V b) and p2p 0:
 * GPipe and 1F1B take (M + P - 1)(F + B), the bubble (P - 1)/(M + P - 1) of
 * Huang et al. 2019 and Narayanan et al. 2021; the interleaved schedule
 * (M % P == 0) takes (M + (P - 1)/V)(F + B), the bubble (P - 1)/(VM + P - 1)
 * of the step, (P - 1)/(VM) of the work (Narayanan et al. 2021, section 2.2). */
#include "plan_internal.h"

#include <string.h>

/* When the input of stage s's operation op (chunk c) arrives; -1 while the
 * operation it waits for is not settled. */
static double input_ready(const dt_pipe_op *op, int c, int C, int M, const double *endf, const double *endb,
                          const double *p2p) {
    size_t i = (size_t)c * M + (size_t)op->mb;
    if (!op->bwd) {
        if (c == 0) return 0;
        double e = endf[i - (size_t)M];
        return e < 0 ? -1 : e + (p2p ? p2p[c] : 0);
    }
    if (c == C - 1) return endf[i];
    double e = endb[i + (size_t)M];
    return e < 0 ? -1 : e + (p2p ? p2p[c + 1] : 0);
}

/* Runs stage s's next operations while their inputs are settled; how many. */
static int advance(dt_pipe_schedule kind, int P, int V, int M, int s, int *next, double *free_at, const double *fwd,
                   const double *bwd, const double *p2p, double *endf, double *endb) {
    int C = P * V, ran = 0;
    while (next[s] < 2 * M * V) {
        dt_pipe_op op;
        dt_pipe_sched_op(kind, P, V, s, M, next[s], &op);
        int c = s + op.chunk * P;
        double ready = input_ready(&op, c, C, M, endf, endb, p2p);
        if (ready < 0) break;
        double end = (free_at[s] > ready ? free_at[s] : ready) + (op.bwd ? bwd[c] : fwd[c]);
        (op.bwd ? endb : endf)[(size_t)c * M + (size_t)op.mb] = end;
        free_at[s] = end;
        next[s]++;
        ran++;
    }
    return ran;
}

double dt_plan_pipeline(dt_plan_sched sched, int P, int V, int M, const double *fwd, const double *bwd,
                        const double *p2p, double *busy) {
    if (P < 1 || V < 1 || M < 1 || (long long)P * V * M > (1 << 20)) return -1;
    int C = P * V;
    size_t n = (size_t)C * M;
    double *endf = dt_calloc(n, sizeof(double)), *endb = dt_calloc(n, sizeof(double));
    double *free_at = dt_calloc((size_t)P, sizeof(double));
    int *next = dt_calloc((size_t)P, sizeof(int));
    double span = -1;
    if (!endf || !endb || !free_at || !next) goto done;
    for (size_t i = 0; i < n; i++) endf[i] = endb[i] = -1;
    dt_pipe_schedule kind = plan_pipe_kind(sched);
    size_t settled = 0;
    for (int moved = 1; moved && settled < 2 * n;) {
        moved = 0;
        for (int s = 0; s < P; s++) {
            int r = advance(kind, P, V, M, s, next, free_at, fwd, bwd, p2p, endf, endb);
            settled += (size_t)r;
            moved |= r > 0;
        }
    }
    if (settled < 2 * n) goto done; /* deadlock */
    double most = 0;
    span = 0;
    for (int s = 0; s < P; s++) {
        double work = 0;
        for (int j = 0; j < V; j++) work += M * (fwd[s + j * P] + bwd[s + j * P]);
        most = work > most ? work : most;
    }
    for (size_t i = 0; i < n; i++) span = endb[i] > span ? endb[i] : span;
    if (busy) *busy = most;
done:
    dt_free(endf);
    dt_free(endb);
    dt_free(free_at);
    dt_free(next);
    return span;
}
