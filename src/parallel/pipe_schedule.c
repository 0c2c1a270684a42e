/* Pipeline schedules as operation orders: which forward or backward a stage
 * runs k-th (pipeline.h). O(1) per operation, no state, shared by the
 * pipeline's executor and the planner's simulator.
 *
 * A stage holds V chunks (local chunk j is global chunk s + j*P; V = 1 but for
 * the interleaved schedule). Forwards run in one order on every stage, as do
 * backwards:
 *  - chunk-major (GPipe, 1F1B, or M not a multiple of P): forward i is chunk
 *    i / M, micro-batch i % M; backward i the same with the chunks reversed;
 *  - interleaved (Narayanan et al. 2021, Megatron-LM's schedule): groups of P
 *    micro-batches pass through chunk 0, then chunk 1, ...: forward i is
 *    chunk (i mod PV) / P of micro-batch (i / PV) P + i mod P; backward i the
 *    same with chunk V-1-(i mod PV)/P.
 * Stage s runs W warm-up forwards, then alternates forward W+i and backward i,
 * then the remaining backwards: W = MV (GPipe; the interleaved schedule when
 * P does not divide M, so every order stays deadlock-free), P-s-1 (1F1B),
 * 2(P-s-1) + (V-1)P (interleaved), each at most MV. Because every stage runs
 * its forwards and its backwards in one common order, the dependencies
 * (forward of chunk c after chunk c-1's, backward after chunk c+1's) form no
 * cycle with sends that do not block. */
#include "dtrain/pipeline.h"

#include <string.h>

static bool grouped(dt_pipe_schedule kind, int P, int V, int M) {
    return kind == DT_SCHED_INTERLEAVED && V > 1 && M % P == 0;
}

int dt_pipe_sched_warmup(dt_pipe_schedule kind, int P, int V, int s, int M) {
    int total = M * V, w = total;
    if (kind == DT_SCHED_1F1B) w = P - s - 1;
    else if (grouped(kind, P, V, M)) w = 2 * (P - s - 1) + (V - 1) * P;
    return w < total ? w : total;
}

/* The i-th forward (bwd false) or backward of the common order. */
static void nth(dt_pipe_schedule kind, int P, int V, int M, int i, bool bwd, dt_pipe_op *op) {
    int v, mb;
    if (grouped(kind, P, V, M)) {
        int r = i % (P * V);
        v = r / P;
        mb = i / (P * V) * P + r % P;
    } else {
        v = i / M;
        mb = i % M;
    }
    *op = (dt_pipe_op){.bwd = bwd, .chunk = bwd ? V - 1 - v : v, .mb = mb};
}

void dt_pipe_sched_op(dt_pipe_schedule kind, int P, int V, int s, int M, int k, dt_pipe_op *op) {
    if (V < 1) V = 1;
    int total = M * V, warm = dt_pipe_sched_warmup(kind, P, V, s, M);
    if (k < warm) {
        nth(kind, P, V, M, k, false, op);
        return;
    }
    int j = k - warm, steady = 2 * (total - warm);
    if (j < steady) {
        nth(kind, P, V, M, j % 2 ? j / 2 : warm + j / 2, j % 2, op);
        return;
    }
    nth(kind, P, V, M, total - warm + (j - steady), true, op);
}

const char *dt_pipe_schedule_name(dt_pipe_schedule kind) {
    return kind == DT_SCHED_GPIPE ? "gpipe" : kind == DT_SCHED_1F1B ? "1f1b" : "interleaved";
}

double dt_pipe_bubble(int P, int V, int M) {
    if (V < 1) V = 1;
    return (double)(P - 1) / ((double)V * M + P - 1);
}

int dt_pipe_sched_micro(dt_pipe_schedule kind, int P, int V, int M, int rows) {
    int Mu = M < rows ? M : rows;
    if (kind == DT_SCHED_INTERLEAVED && V > 1 && Mu > P) Mu -= Mu % P;
    return Mu;
}

void dt_pipe_sched_depths(dt_pipe_schedule kind, int P, int V, int s, int M, int *depth) {
    int alive[DT_PIPE_MAX_VIRTUAL];
    if (V < 1) V = 1;
    DT_ASSERT(V <= DT_PIPE_MAX_VIRTUAL);
    for (int j = 0; j < V; j++) depth[j] = 0;
    for (int rows = 1; rows <= M; rows++) {
        int Mu = dt_pipe_sched_micro(kind, P, V, M, rows);
        memset(alive, 0, sizeof alive);
        for (int k = 0; k < 2 * Mu * V; k++) {
            dt_pipe_op op;
            dt_pipe_sched_op(kind, P, V, s, Mu, k, &op);
            alive[op.chunk] += op.bwd ? -1 : 1;
            if (alive[op.chunk] > depth[op.chunk]) depth[op.chunk] = alive[op.chunk];
        }
    }
}
